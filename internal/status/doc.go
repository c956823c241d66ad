// Package status is what a running chainsync node tells people and
// monitoring systems about itself, over HTTP on --status-addr:
//
//   - GET /status: where the node stands, as JSON (Doc), built from
//     chainsync.Node.Snapshot;
//   - GET /healthz: "ok" while the node process is up and serving;
//   - GET /metrics: Prometheus text exposition (Metrics), built from the
//     node's trace events (chainsync.Config.Trace).
//
// It also holds the client side of chainsync status: Fetch reads one
// node's Doc, and Diagnose finds, from the Docs of a whole chain in chain
// order, the node where each round is held up and what it waits for.
//
// The exposition is written with the standard library only: the main
// module stays free of dependencies, and the few metric types needed
// (counters, gauges, fixed-bucket histograms) are a page of code.
package status
