package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/chainsync-go/chainsync/internal/status"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/secure"
)

const statusUsage = `Usage: chainsync status ADDR[,ADDR...] [--json] [--timeout D]

Asks running nodes where they stand. ADDR is a node's --status-addr
(HOST:PORT). With one ADDR it prints that node: its links, each unfinished
round's state and what it waits for, its recent faults. With several, given
in chain order (Head first), it prints the whole chain and, for every round
still in progress, the node where the chain is stuck (the node holding the
round up) and what that node waits for.

How the node holding a round up is found: start at the first node (in chain
order) that has the round in progress and follow what it waits for. A node
waiting for itself (to become locally ready, or running its task) holds it.
A node waiting for a message from a neighbour passes on to that neighbour,
unless the neighbour does not answer (then it holds it: crashed, hung, or
unreachable), faulted in that round (it holds it), or has already sent the
message (then the waiting node holds it: the message is in flight, or the
link between them is down).

A node that does not answer is reported as such; the others are still
printed.

A node with a certificate (--tls-cert) serves its status over HTTPS and
answers only clients with a certificate: give --tls-cert and --tls-key,
and --tls-ca (the node's certificate is from that CA) or --pin (its key's
pin). The node accepts this client's certificate if it is from the node's
--tls-ca or its key is in the node's --status-pin.

Examples:
  chainsync status 127.0.0.1:9000
  chainsync status 10.0.0.1:9000,10.0.0.2:9000,10.0.0.3:9000
  chainsync status --json 127.0.0.1:9000,127.0.0.1:9001 | jq '.rounds'
  chainsync status --tls-cert me.pem --tls-key me-key.pem --pin sha256//... 10.0.0.2:9000

Given several addresses, the nodes' own accounts must agree with the
order given: an address given twice, one node at two addresses, the Head
not first, the Tail not last, or a node whose neighbour (by name) is not
the node given next to it is refused (exit 2), naming what contradicts
the order and, when the nodes' names tell it, the chain order to give.

Exit status: 0 every node answered; 1 one or more did not (the others are
printed); 2 usage error, or addresses given twice or out of chain order.

Flags:
`

type statusOpts struct {
	json    bool
	timeout time.Duration
	https   secure.HTTPSOptions
}

func (o *statusOpts) flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.json, "json", false, "print JSON: one node's status document, or {nodes, rounds} for a chain")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "how long to wait for each node's answer")
	fs.StringVar(&o.https.CertFile, "tls-cert", "", "this client's certificate (PEM `FILE`), for nodes whose --status-addr serves HTTPS (nodes with --tls-cert)")
	fs.StringVar(&o.https.KeyFile, "tls-key", "", "this client's private key (PEM `FILE`)")
	fs.StringVar(&o.https.CAFile, "tls-ca", "", "accept a node whose certificate is from this CA (PEM `FILE`)")
	fs.StringVar(&o.https.Pins, "pin", "", "accept a node whose key has this `PIN` (sha256//BASE64, several joined by ;; see chainsync pin)")
}

// tlsOn reports whether chainsync status speaks HTTPS.
func (o *statusOpts) tlsOn() bool {
	h := o.https
	return h.CertFile != "" || h.KeyFile != "" || h.CAFile != "" || h.Pins != ""
}

func statusFlags(fs *flag.FlagSet) { (&statusOpts{}).flags(fs) }

// statusMain is chainsync status.
func statusMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	quietFlags(fs)
	var o statusOpts
	o.flags(fs)
	// Flags may follow the addresses: chainsync status ADDR,ADDR --json.
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagFailed(stdout, stderr, fs, "status", err)
	}
	var addrs []string
	for _, a := range pos {
		for _, s := range strings.Split(a, ",") {
			if s = strings.TrimSpace(s); s != "" {
				addrs = append(addrs, s)
			}
		}
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "chainsync status: "+format+"\n(see chainsync status --help)\n", a...)
		return ExitUsage
	}
	if len(addrs) == 0 {
		return bad("give the --status-addr of one node, or of every node in chain order, e.g. chainsync status 127.0.0.1:9000,127.0.0.1:9001")
	}
	if o.timeout <= 0 {
		return bad("--timeout must be positive")
	}
	for _, a := range addrs {
		if _, err := status.URL(a); err != nil {
			return bad("%v", err)
		}
	}
	client := &http.Client{Timeout: o.timeout}
	if o.tlsOn() {
		o.https.CAFlag, o.https.PinFlag = "--tls-ca", "--pin"
		tc, err := secure.StatusClientTLS(o.https)
		if err != nil {
			return bad("%v", err)
		}
		client.Transport = &http.Transport{TLSClientConfig: tc}
	}
	nodes := fetchAll(client, addrs, o.timeout)
	if len(nodes) > 1 {
		// Given out of order, or a node twice: say so, rather than
		// print a chain that is not the one running.
		if err := status.CheckOrder(nodes); err != nil {
			fmt.Fprintf(stderr, "chainsync status: %s\n(give each node's --status-addr once, in chain order: Head first)\n", status.Escape(err.Error()))
			return ExitUsage
		}
	}
	status.NameSilent(nodes)
	verdicts := status.Diagnose(nodes)
	// Whatever a node (or whoever answers at its address) sends reaches a
	// terminal only escaped; --json needs no escaping, its encoder does it.
	for i := range nodes {
		if n := &nodes[i]; n.Err != nil {
			n.Err = errors.New(status.Escape(n.Err.Error()))
		}
	}
	if !o.json {
		status.EscapeAll(&nodes)
		status.EscapeAll(&verdicts)
	}
	code := ExitOK
	for _, n := range nodes {
		if n.Err != nil {
			code = ExitError
			fmt.Fprintf(stderr, "chainsync status: %s does not answer: %v\n", n.Addr, n.Err)
		}
	}
	if len(nodes) == 1 {
		if n := nodes[0]; n.Doc != nil {
			if o.json {
				writeJSON(stdout, n.Doc)
			} else {
				printNode(stdout, n)
			}
		}
		return code
	}
	if o.json {
		type jnode struct {
			Addr   string      `json:"addr"`
			Status *status.Doc `json:"status"`
			Error  string      `json:"error,omitempty"`
		}
		out := struct {
			Nodes  []jnode          `json:"nodes"`
			Rounds []status.Verdict `json:"rounds"`
		}{Rounds: verdicts}
		if out.Rounds == nil {
			out.Rounds = []status.Verdict{}
		}
		for _, n := range nodes {
			j := jnode{Addr: n.Addr, Status: n.Doc}
			if n.Err != nil {
				j.Error = n.Err.Error()
			}
			out.Nodes = append(out.Nodes, j)
		}
		writeJSON(stdout, out)
		return code
	}
	printChain(stdout, nodes, verdicts)
	return code
}

// fetchAll asks every node at once.
func fetchAll(client *http.Client, addrs []string, timeout time.Duration) []status.Node {
	nodes := make([]status.Node, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			d, err := status.Fetch(ctx, client, a)
			nodes[i] = status.Node{Addr: a, Err: err}
			if err == nil {
				nodes[i].Doc = &d
			}
		})
	}
	wg.Wait()
	return nodes
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// linkText says how one link is: "up (A)", "DOWN (A)", "waiting for a
// round (A)" (connected and alive, no round yet) or "-".
func linkText(l status.Link) string {
	if !l.Exists {
		return "-"
	}
	s := "up"
	switch {
	case !l.Up && l.Waiting != "":
		// Connected and alive: it becomes the link with its first
		// round's line, so nothing is wrong.
		s = "waiting for a round"
	case !l.Up:
		s = "DOWN"
	case l.Silent:
		s = "SILENT" // up, but nothing heard for two heartbeat intervals
	}
	if l.Peer != "" {
		s += " (" + l.Peer + ")"
	}
	return s
}

// waitText says what a round waits for, naming the neighbour.
func waitText(d *status.Doc, r status.Round) string {
	w := r.Wait()
	cmd, side := w.Msg()
	switch {
	case w == protocol.WaitTask:
		return "its own task (running)"
	case w == protocol.WaitLocal:
		return "itself to become locally ready"
	case w == protocol.WaitApproval:
		return "approval at " + quoteName(d.Name) + " (chainsync approve or deny)"
	case w == protocol.WaitHold && r.Doing != "":
		return r.Doing // who holds it, and the command that lets it go on there (status.holdDoing)
	case w == protocol.WaitHold:
		return "release at " + quoteName(d.Name) + " (held: chainsync release)"
	case side == 0:
		return r.Doing
	}
	peer := d.Links.Pred.Peer
	if side == protocol.Succ {
		peer = d.Links.Succ.Peer
	}
	return strings.TrimSpace(fmt.Sprintf("%s from %s %s", cmd, side, quoteName(peer)))
}

func age(d *status.Doc, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return max(d.Time.Sub(t), 0).Round(100 * time.Millisecond).String()
}

func printNode(w io.Writer, n status.Node) {
	d := n.Doc
	name := d.Name
	if name == "" {
		name = "(no --name)"
	}
	fmt.Fprintf(w, "%s (%s) at %s, chainsync %s\n", name, d.Role, n.Addr, d.Version)
	fmt.Fprintf(w, "  links: pred %s, succ %s\n", linkText(d.Links.Pred), linkText(d.Links.Succ))
	for _, s := range d.Steering {
		fmt.Fprintf(w, "  %s\n", s.Text)
	}
	for _, g := range d.Restarting {
		fmt.Fprintf(w, "  %s\n", g.Text) // liveness.go
	}
	if d.Worker != nil {
		fmt.Fprintf(w, "  worker %s: %s\n", d.Worker.Command, d.Worker.Text()) // run --worker
	}
	if len(d.Rounds) == 0 {
		fmt.Fprintln(w, "  rounds: none in progress (all done here, or none started)")
	} else {
		fmt.Fprintf(w, "  rounds in flight: %d\n", len(d.Rounds))
	}
	for _, f := range d.Finished {
		fmt.Fprintf(w, "  finished round %s\n", finishedText(f))
	}
	for _, r := range groupRounds(d) { // rounds in one state waiting for one thing: one line
		label := r.label
		if !strings.Contains(label, " rounds (") {
			label = "round " + label
		}
		fmt.Fprintf(w, "  %s: %s for %s, waiting for %s\n", label, r.state, r.age, r.wait)
	}
	printFaults(w, d, "  ")
}

// finishedText says how and when a round ended at a node: "r1: done at
// 10:02:03.512 (opened 1.2s before)". A round a node ended before it
// restarted, which its journal gave back, has no end time (or no
// opening time) known: that is said instead of the restart's time.
func finishedText(f status.Finished) string {
	why := ""
	if f.Error != "" {
		why = ": " + f.Error
	}
	when := ""
	switch {
	case f.Ended.IsZero():
		when = " before this node restarted"
	case f.Opened.IsZero():
		when = fmt.Sprintf(" at %s, before this node restarted", f.Ended.Format("15:04:05.000"))
	default:
		when = fmt.Sprintf(" at %s (opened %s before)", f.Ended.Format("15:04:05.000"), f.Ended.Sub(f.Opened).Round(time.Millisecond))
	}
	return status.RoundName(f.Round) + ": " + f.Status + when + why
}

func printFaults(w io.Writer, d *status.Doc, indent string) {
	if len(d.Faults) == 0 {
		return
	}
	fmt.Fprintf(w, "%sfaults (most recent last):\n", indent)
	for _, f := range d.Faults {
		blame := ""
		if f.Peer != "" {
			blame = ", blames " + strings.TrimSpace(f.Side+" "+quoteName(f.Peer))
		}
		fmt.Fprintf(w, "%s  %s %s in round %s%s: %s\n", indent, f.Time.Format("2006-01-02 15:04:05.000"), f.Kind, status.RoundName(f.Round), blame, f.Error)
	}
}

func printChain(w io.Writer, nodes []status.Node, verdicts []status.Verdict) {
	answered := 0
	for _, n := range nodes {
		if n.Doc != nil {
			answered++
		}
	}
	fmt.Fprintf(w, "chain %s: %d node(s) asked, %d answered\n\n", status.ChainLine(nodes), len(nodes), answered)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tPRED\tSUCC\tROUND\tSTATE\tFOR\tWAITING FOR")
	for _, n := range nodes {
		if n.Doc == nil {
			// Every row has all the cells, so the columns stay aligned.
			fmt.Fprintf(tw, "%s\t?\t?\t?\t?\t?\t?\tDOES NOT ANSWER (below)\n", n.Label())
			continue
		}
		d := n.Doc
		lead := fmt.Sprintf("%s\t%s\t%s\t%s", n.Label(), d.Role, linkText(d.Links.Pred), linkText(d.Links.Succ))
		if len(d.Rounds) == 0 {
			fmt.Fprintf(tw, "%s\t-\t(none in progress)\t\t\n", lead)
		}
		for i, g := range groupRounds(d) {
			if i > 0 {
				lead = "\t\t\t"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", lead, g.label, g.state, g.age, g.wait)
		}
	}
	tw.Flush()
	var flight []string
	for _, n := range nodes {
		if n.Doc != nil {
			flight = append(flight, fmt.Sprintf("%s: %d", quoteName(n.Label()), len(n.Doc.Rounds))+lastFinished(n.Doc))
		}
	}
	fmt.Fprintf(w, "\nrounds in flight: %s\n", strings.Join(flight, ", "))
	for _, n := range nodes {
		if n.Doc == nil {
			fmt.Fprintf(w, "\n%s does not answer at %s: %v\n", n.Label(), n.Addr, n.Err)
		}
	}
	printSteering(w, nodes)
	printRestarting(w, nodes) // liveness.go
	for _, n := range nodes {
		if d := n.Doc; d != nil && d.Worker != nil { // run --worker
			fmt.Fprintf(w, "\n%s's worker %s: %s\n", n.Label(), d.Worker.Command, d.Worker.Text())
		}
	}
	for _, n := range nodes {
		if n.Doc != nil && len(n.Doc.Faults) > 0 {
			fmt.Fprintf(w, "\n%s:\n", n.Label())
			printFaults(w, n.Doc, "  ")
		}
	}
	fmt.Fprintln(w)
	if len(verdicts) == 0 {
		fmt.Fprintln(w, "no round in progress on any node that answered")
	}
	// Rounds held up by the same node for the same reason are one line:
	// 64 rounds waiting for one node that does not answer are one fact.
	// A round's own notes after the reason (a fault reported in it) do
	// not split the group: they are listed once after the reason.
	type group struct {
		v      status.Verdict
		ids    []string
		maxFor time.Duration
		notes  []string
	}
	var groups []*group
	byWhy := map[string]*group{}
	for _, v := range verdicts {
		why, note, _ := strings.Cut(v.Why, "; ")
		key := fmt.Sprintf("%t\x00%s\x00%s", v.Done, v.Node, why)
		g := byWhy[key]
		if g == nil {
			g = &group{v: v}
			g.v.Why = why
			byWhy[key] = g
			groups = append(groups, g)
		}
		if note != "" && !slices.Contains(g.notes, note) {
			g.notes = append(g.notes, note)
		}
		g.ids = append(g.ids, v.Round)
		g.maxFor = max(g.maxFor, v.For)
	}
	for _, g := range groups {
		v := g.v
		if len(g.notes) > 0 {
			v.Why += "; " + strings.Join(g.notes, "; ")
		}
		what := "round " + status.RoundName(v.Round)
		if len(g.ids) > 1 {
			what = fmt.Sprintf("%d rounds (%s)", len(g.ids), roundList(g.ids))
		}
		if v.Done {
			fmt.Fprintf(w, "%s: done (%s)\n", what, v.Why)
			continue
		}
		since := ""
		switch {
		case g.maxFor > 0 && len(g.ids) > 1:
			since = fmt.Sprintf(" for up to %v", g.maxFor.Round(100*time.Millisecond))
		case g.maxFor > 0:
			since = fmt.Sprintf(" for %v", g.maxFor.Round(100*time.Millisecond))
		}
		fmt.Fprintf(w, "%s: stuck at %s%s: %s\n", what, quoteName(v.Node), since, v.Why)
	}
}

// printSteering lists the holds, approval waits, pauses and denials the
// nodes know of, each once (every node knows of every other's): one
// entry per node, kind and round, as the node it is about tells it (its
// own account has the hold's own time, who asked and why), else as the
// first node that knows of it.
func printSteering(w io.Writer, nodes []status.Node) {
	var order []string
	byKey := map[string]status.Steer{}
	for _, n := range nodes {
		if n.Doc == nil {
			continue
		}
		for _, s := range n.Doc.Steering {
			key := s.Node + "\x00" + s.What
			if s.Round != nil {
				key += "\x00" + *s.Round
			}
			prev, seen := byKey[key]
			if !seen {
				order = append(order, key)
			}
			if !seen || s.Here && !prev.Here {
				byKey[key] = s
			}
		}
	}
	if len(order) == 0 {
		return
	}
	fmt.Fprintln(w, "\nsteering:")
	for _, k := range order {
		fmt.Fprintf(w, "  %s\n", byKey[k].Text)
	}
}

// roundList names a group of rounds: all of a few, the first two and the
// last of many.
func roundList(ids []string) string {
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = status.RoundName(id)
	}
	if len(names) <= 4 {
		return strings.Join(names, ", ")
	}
	return names[0] + ", " + names[1] + ", ..., " + names[len(names)-1]
}

// roundRow is one row of a node's rounds in the chain table: one round,
// or several in the same state waiting for the same thing.
type roundRow struct{ label, state, age, wait string }

// groupRounds folds a node's rounds that are in the same state and wait
// for the same thing into one row, in the order of their first round.
func groupRounds(d *status.Doc) []roundRow {
	type acc struct {
		row    roundRow
		ids    []string
		oldest time.Time
	}
	var order []*acc
	by := map[string]*acc{}
	for _, r := range d.Rounds {
		wt := waitText(d, r)
		key := r.State + "\x00" + wt
		a := by[key]
		if a == nil {
			a = &acc{row: roundRow{state: r.State, wait: wt}, oldest: r.Since}
			by[key] = a
			order = append(order, a)
		}
		a.ids = append(a.ids, r.Round)
		if !r.Since.IsZero() && (a.oldest.IsZero() || r.Since.Before(a.oldest)) {
			a.oldest = r.Since
		}
	}
	rows := make([]roundRow, 0, len(order))
	for _, a := range order {
		row := a.row
		row.age = age(d, a.oldest)
		row.label = status.RoundName(a.ids[0])
		if len(a.ids) > 1 {
			row.label = fmt.Sprintf("%d rounds (%s)", len(a.ids), roundList(a.ids))
			if row.age != "-" {
				row.age = "up to " + row.age
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// lastFinished names the last round that ended at a node, if any.
func lastFinished(d *status.Doc) string {
	if len(d.Finished) == 0 {
		return ""
	}
	f := d.Finished[len(d.Finished)-1]
	return fmt.Sprintf(" (last finished: %s, %s)", status.RoundName(f.Round), f.Status)
}
