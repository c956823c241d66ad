// Package dashboard is chainsync dashboard: one web page that shows a
// chain live to the people who run it, and lets them steer their own
// node.
//
// It is a client of the nodes' status endpoints (internal/status) and,
// for steering, of one node's control socket. A Poller reads every
// node's /status at most once a second, whatever the number of open
// pages, and keeps what the documents show only for a moment: the
// messages a round has sent so far (its ladder, read from each node's
// state), how each round ended at each node, who approved or denied it,
// and when a fault cleared. Each poll becomes a View, which the Server
// pushes to every open page as a server-sent event when it changed.
//
// The page (web/, embedded) is plain HTML, CSS and script: nothing is
// fetched from elsewhere, and every text that comes from a node is put
// on the page as text, never as markup. The Server is read-only unless it
// has a Steerer; then it takes steering requests as POSTs that carry the
// token of the page it served, from the page's own origin.
package dashboard
