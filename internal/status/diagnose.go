package status

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Node is one member of a chain as chainsync status saw it: its status
// document, or why it could not be read.
type Node struct {
	Addr string // the --status-addr asked
	Doc  *Doc   // nil if Err is set
	Err  error
	// Name is the node's name as its neighbours know it, for a node that
	// does not answer (see NameSilent).
	Name string
}

// Label names the node for people: its name, else its address.
func (n Node) Label() string {
	switch {
	case n.Doc != nil && n.Doc.Name != "":
		return n.Doc.Name
	case n.Name != "":
		return n.Name
	}
	return n.Addr
}

// NameSilent names each node that did not answer after what its
// neighbours call it (their link's peer), when they answered.
func NameSilent(nodes []Node) {
	for i := range nodes {
		if nodes[i].Doc != nil || nodes[i].Name != "" {
			continue
		}
		if i > 0 && nodes[i-1].Doc != nil && nodes[i-1].Doc.Links.Succ.Peer != "" {
			nodes[i].Name = nodes[i-1].Doc.Links.Succ.Peer
		} else if i+1 < len(nodes) && nodes[i+1].Doc != nil && nodes[i+1].Doc.Links.Pred.Peer != "" {
			nodes[i].Name = nodes[i+1].Doc.Links.Pred.Peer
		}
	}
}

// Verdict says where one round of a chain stands: done everywhere, or the
// node that holds it up and what that node waits for.
type Verdict struct {
	Round string `json:"round"`
	// Done: no node that answered still has the round in progress.
	Done bool `json:"done"`
	// At is the index (in chain order) of the node holding the round up,
	// -1 when Done; Node is its name or address.
	At   int    `json:"at"`
	Node string `json:"stuck_at,omitempty"`
	// WaitingFor is what that node waits for (a message, or
	// local-readiness or task, from FromSelf), and From whom: "self" or
	// the neighbour's name or address. Both are empty when the node does
	// not answer.
	WaitingFor string `json:"waiting_for,omitempty"`
	From       string `json:"from,omitempty"`
	// For is how long it has waited so, by that node's clock (0 if
	// unknown); ForSeconds is the same for JSON.
	For        time.Duration `json:"-"`
	ForSeconds float64       `json:"for_seconds"`
	// Why says it in one sentence.
	Why string `json:"why"`
}

// Diagnose finds, for every round in progress anywhere in the chain, the
// node that holds it up. nodes are the chain's members in chain order
// (Head first).
//
// The rule: start at the first node, in chain order, that has the round in
// progress, and follow what it waits for. A node that waits for itself (to
// become locally ready, or for its own task) holds the round. A node that
// waits for a message from a neighbour passes the question on to that
// neighbour, unless the neighbour does not answer (then the neighbour
// holds it: crashed, hung or unreachable), has faulted in that round (it
// holds it), or has already sent the message (then the waiting node holds
// it: the message is in flight or its link is down). Following the
// waits-for arrows from any node ends at the same place, because each
// wave moves in one direction; starting at the first one makes the answer
// unique.
func Diagnose(nodes []Node) []Verdict {
	nodes = slices.Clone(nodes)
	NameSilent(nodes)
	var ids []string
	for _, n := range nodes {
		if n.Doc == nil {
			continue
		}
		for _, r := range n.Doc.Rounds {
			if !slices.Contains(ids, r.Round) {
				ids = append(ids, r.Round)
			}
		}
	}
	slices.Sort(ids)
	var out []Verdict
	for _, id := range ids {
		out = append(out, diagnoseRound(nodes, id))
	}
	return out
}

// RoundName spells a round id for people: "(unnamed)" for the empty one.
func RoundName(id string) string {
	if id == "" {
		return "(unnamed)"
	}
	return id
}

func findRound(d *Doc, id string) *Round {
	for i := range d.Rounds {
		if d.Rounds[i].Round == id {
			return &d.Rounds[i]
		}
	}
	return nil
}

func findFault(d *Doc, id string) *Fault {
	for i := len(d.Faults) - 1; i >= 0; i-- {
		if d.Faults[i].Round == id {
			return &d.Faults[i]
		}
	}
	return nil
}

// ownFault is findFault without the reports of another node's fault
// notice (chain-fault, chain-halted): a node that only heard of a fault
// elsewhere does not hold the round up.
func ownFault(d *Doc, id string) *Fault {
	for i := len(d.Faults) - 1; i >= 0; i-- {
		if f := &d.Faults[i]; f.Round == id && f.Kind != "chain-fault" && f.Kind != "chain-halted" {
			return f
		}
	}
	return nil
}

func diagnoseRound(nodes []Node, id string) Verdict {
	v := Verdict{Round: id, At: -1}
	cur := -1
	for i, n := range nodes {
		if n.Doc != nil && findRound(n.Doc, id) != nil {
			cur = i
			break
		}
	}
	if cur < 0 {
		v.Done = true
		v.Why = "no node that answered has this round in progress"
		return v
	}
	hold := func(i int, waiting, from, why string) Verdict {
		v.At, v.Node, v.WaitingFor, v.From, v.Why = i, nodes[i].Label(), waiting, from, why
		if d := nodes[i].Doc; d != nil {
			if r := findRound(d, id); r != nil && !r.Since.IsZero() {
				v.For = max(d.Time.Sub(r.Since), 0).Round(time.Millisecond)
				v.ForSeconds = v.For.Seconds()
			}
		}
		return v
	}
	if v, ok := diagnoseUndo(nodes, id, hold); ok {
		return v
	}
	for steps := 0; steps <= len(nodes); steps++ {
		n := nodes[cur]
		r := findRound(n.Doc, id)
		name := QuoteName(n.Label()) // in the words; the fields keep the name as it is
		f := ownFault(n.Doc, id)
		if f != nil && !blamesUnanswering(nodes, cur, r, f) {
			// A node that faulted in this round and still has it (the
			// wait policy) holds it; its fault says why.
			return hold(cur, r.WaitingFor, fromName(n, r.From), fmt.Sprintf("%s reported %s: %s", name, f.Kind, f.Error))
		}
		w := r.Wait()
		_, side := w.Msg()
		switch {
		case w == protocol.WaitTask:
			return hold(cur, r.WaitingFor, FromSelf, name+" is running its task")
		case w == protocol.WaitLocal:
			return hold(cur, r.WaitingFor, FromSelf, name+" is not locally ready (its --ready-cmd or --ready-file has not said so)")
		case side == 0:
			return hold(cur, "", "", fmt.Sprintf("%s is in %s: %s", name, r.State, r.Doing))
		}
		link := n.Doc.Links.Pred
		j := cur - 1
		if side == protocol.Succ {
			link, j = n.Doc.Links.Succ, cur+1
		}
		peer := QuoteName(fromName(n, r.From))
		waits := fmt.Sprintf("%s waits for %s from %s", name, r.WaitingFor, peer)
		if j < 0 || j >= len(nodes) {
			why := waits + ", which is not among the nodes asked"
			if !link.Up {
				why += "; the link to it is down"
			}
			return hold(cur, r.WaitingFor, peer, why)
		}
		nb := nodes[j]
		if nb.Doc == nil {
			v = hold(cur, r.WaitingFor, peer, "")
			v.At, v.Node = j, nb.Label()
			v.Why = fmt.Sprintf("%s; %s (status %s) does not answer (%v): crashed, hung, or its host or network is down", waits, QuoteName(nb.Label()), nb.Addr, nb.Err)
			if !link.Up {
				v.Why += fmt.Sprintf("; the link from %s to it is down", name)
			}
			if f != nil {
				v.Why += fmt.Sprintf("; %s reported it %s", name, f.Kind)
			}
			if g := restartingText(n.Doc, nb.Doc, nb.Label()); g != "" {
				v.Why += "; " + g // liveness.go: a node in its restart grace is expected away
			}
			return v
		}
		rj := findRound(nb.Doc, id)
		if rj == nil {
			if f := findFault(nb.Doc, id); f != nil {
				v = hold(j, "", "", fmt.Sprintf("%s; %s ended the round with %s: %s", waits, QuoteName(nb.Label()), f.Kind, f.Error))
				return v
			}
		}
		if sent(rj, w, nb.Doc.Role) {
			state := "has finished its part"
			if rj != nil {
				state = "is in " + rj.State
			}
			why := fmt.Sprintf("%s, which %s and so has sent it", waits, state)
			if link.Up {
				why += "; the link is up: the message is in flight or was lost on a connection that has since been replaced"
			} else {
				why += fmt.Sprintf("; the link between them is down (%s re-sends it when the link is back)", QuoteName(nb.Label()))
			}
			return hold(cur, r.WaitingFor, peer, why)
		}
		cur = j
	}
	return hold(cur, "", "", "the nodes' reports disagree (they may have moved on between the requests); ask again")
}

// diagnoseUndo finds the node holding up a round in its undo wave
// (docs/UNDO.md), if a node that answered has it in one: the wave runs
// backward from the node where the round failed, each node's undo after
// its successor's, so the node running its undo holds the round, else
// one whose undo failed, else the last one (in chain order) whose undo
// waits for UNDO from its successor; when every undo here ended, the
// nodes wait for the wave's outcome (UNDONE) from the Head's side.
func diagnoseUndo(nodes []Node, id string, hold func(i int, waiting, from, why string) Verdict) (Verdict, bool) {
	first, failed, await := -1, -1, -1
	var failedAt string
	for i, n := range nodes {
		if n.Doc == nil {
			continue
		}
		r := findRound(n.Doc, id)
		if r == nil || r.Undo == "" {
			continue
		}
		if first < 0 {
			first = i
			failedAt, _, _ = strings.Cut(r.Doing, "; ")
		}
		name := QuoteName(n.Label())
		switch r.Undo {
		case "running":
			return hold(i, "", FromSelf, fmt.Sprintf("%s is undoing: its undo runs (the round %s)", name, failedAt)), true
		case "failed":
			failed = i
		case "awaiting":
			await = i
		}
	}
	switch {
	case first < 0:
		return Verdict{}, false
	case failed >= 0:
		return hold(failed, "", FromSelf, fmt.Sprintf("%s's undo failed: the undo wave stopped there (the round %s)", QuoteName(nodes[failed].Label()), failedAt)), true
	case await >= 0:
		n := nodes[await]
		why := fmt.Sprintf("%s waits for UNDO from %s: the nodes after it undo first (the round %s)", QuoteName(n.Label()), QuoteName(fromName(n, "succ")), failedAt)
		if j := await + 1; j < len(nodes) && nodes[j].Doc == nil {
			v := hold(await, "UNDO", fromName(n, "succ"), why)
			v.At, v.Node = j, nodes[j].Label()
			v.Why += fmt.Sprintf("; %s (status %s) does not answer (%v)", QuoteName(nodes[j].Label()), nodes[j].Addr, nodes[j].Err)
			return v, true
		}
		return hold(await, "UNDO", fromName(n, "succ"), why), true
	}
	return hold(first, "UNDONE", "", fmt.Sprintf("every undo at the nodes asked has ended; %s waits for the undo wave's outcome (UNDONE) (the round %s)", QuoteName(nodes[first].Label()), failedAt)), true
}

// blamesUnanswering reports whether fault f of node i blames the
// neighbour round r waits for, and that neighbour does not answer: then
// the round is held there (a hung node is silent on its links and to
// chainsync status alike), not at the node that kept waiting for it.
func blamesUnanswering(nodes []Node, i int, r *Round, f *Fault) bool {
	_, side := r.Wait().Msg()
	j := i - 1
	if side == protocol.Succ {
		j = i + 1
	}
	return side != 0 && f.Side == side.String() && j >= 0 && j < len(nodes) && nodes[j].Doc == nil
}

// fromName names the neighbour on side ("pred" or "succ") of n.
func fromName(n Node, side string) string {
	var l Link
	switch side {
	case "pred":
		l = n.Doc.Links.Pred
	case "succ":
		l = n.Doc.Links.Succ
	default:
		return side
	}
	if l.Peer != "" {
		return l.Peer
	}
	if side == "pred" {
		return "its predecessor"
	}
	return "its successor"
}

// sent reports whether a neighbour whose round is r (nil: finished there)
// has already sent what w, the wait of a node next to it, waits for.
func sent(r *Round, w protocol.Wait, role string) bool {
	if r == nil {
		return true
	}
	st := r.State
	switch w {
	case protocol.WaitReady:
		return st == "READY" || st == "WATCH" || st == "START" || st == "COMPLETE"
	case protocol.WaitStart:
		return st == "WATCH" || st == "START" || st == "COMPLETE"
	case protocol.WaitComplete:
		return st == "COMPLETE"
	case protocol.WaitExit:
		// Only the Tail sends COMPLETE back as it enters COMPLETE;
		// others send it when they finish.
		return st == "COMPLETE" && (role == "tail" || role == "single")
	}
	return false
}

// CheckOrder reports whether nodes, asked as a chain (Head first), are
// one: nil if nothing they say contradicts the order they were given in;
// else an error saying what does (an address given twice, one node at
// two addresses, the Head not first or the Tail not last, a node whose
// neighbour by its name is not the node given next to it) and, when the
// nodes that answered name their whole chain, its order. A node that
// does not answer contradicts nothing, and a run of adjacent nodes
// (not the whole chain) is a chain too.
func CheckOrder(nodes []Node) error {
	var why []string
	at := map[string]int{}
	named := map[string]int{}
	for i, n := range nodes {
		if j, ok := at[n.Addr]; ok {
			why = append(why, fmt.Sprintf("%s is given twice (places %d and %d)", n.Addr, j+1, i+1))
			continue
		}
		at[n.Addr] = i
		if n.Doc == nil {
			continue
		}
		d := n.Doc
		if d.Name != "" {
			if j, ok := named[d.Name]; ok {
				why = append(why, fmt.Sprintf("%s answers at both %s and %s: one node given twice", QuoteName(d.Name), nodes[j].Addr, n.Addr))
				continue
			}
			named[d.Name] = i
		}
		switch {
		case d.Role == "single" && len(nodes) > 1:
			why = append(why, fmt.Sprintf("%s (%s) runs alone (role single): it is in no chain", QuoteName(n.Label()), n.Addr))
		case d.Role == "head" && i > 0:
			why = append(why, fmt.Sprintf("%s is the Head, but is given in place %d", QuoteName(n.Label()), i+1))
		case d.Role == "tail" && i < len(nodes)-1:
			why = append(why, fmt.Sprintf("%s is the Tail, but is given in place %d of %d", QuoteName(n.Label()), i+1, len(nodes)))
		}
		if i == 0 || nodes[i-1].Doc == nil {
			continue
		}
		// A neighbour is named only where the chain names it (--chain,
		// or the library's PrevName and NextName); placed by --prev and
		// --next, a node knows its neighbours' addresses, not their
		// names, and an address contradicts no name.
		p := nodes[i-1].Doc
		if s := p.Links.Succ.Peer; s != "" && !isAddr(s) && d.Name != "" && s != d.Name {
			why = append(why, fmt.Sprintf("%s's successor is %s, but %s is given after it", QuoteName(nodes[i-1].Label()), QuoteName(s), QuoteName(d.Name)))
		} else if q := d.Links.Pred.Peer; q != "" && !isAddr(q) && p.Name != "" && q != p.Name {
			why = append(why, fmt.Sprintf("%s's predecessor is %s, but %s is given before it", QuoteName(d.Name), QuoteName(q), QuoteName(p.Name)))
		}
	}
	if len(why) == 0 {
		return nil
	}
	msg := "the addresses are not one chain in order (Head first): " + strings.Join(why, "; ")
	if order := chainOrder(nodes, named); order != "" {
		msg += "; in chain order: " + order
	}
	return errors.New(msg)
}

// isAddr reports whether peer, as a status document gives a neighbour,
// is its address (HOST:PORT), not its name.
func isAddr(peer string) bool {
	_, port, err := net.SplitHostPort(peer)
	if err != nil || port == "" {
		return false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// chainOrder is the addresses of the nodes that answered, each once, in
// the order their names and neighbours' names say (the Head first, then
// each one's successor), or "" if they do not say it of them all.
func chainOrder(nodes []Node, named map[string]int) string {
	answered := map[string]bool{}
	for _, n := range nodes {
		if n.Doc != nil {
			answered[n.Addr] = true
		}
	}
	if len(answered) != len(named) {
		return "" // a node without a name: its neighbours name it by another address
	}
	start := -1
	for _, i := range named {
		if d := nodes[i].Doc; d.Role == "head" {
			start = i
		}
	}
	if start < 0 {
		return ""
	}
	var addrs []string
	for i, seen := start, 0; seen <= len(named); seen++ {
		addrs = append(addrs, nodes[i].Addr)
		next, ok := named[nodes[i].Doc.Links.Succ.Peer]
		if nodes[i].Doc.Role == "tail" || !ok {
			break
		}
		i = next
	}
	if len(addrs) != len(named) || len(addrs) < 2 {
		return "" // not all of them, or one node: no order to give
	}
	return strings.Join(addrs, ",")
}

// ChainLine is the chain's members joined by arrows, for headings.
func ChainLine(nodes []Node) string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Label()
	}
	return strings.Join(names, " -> ")
}

// QuoteName quotes a node's name where it could be misread in a sentence:
// a number ("3 waits for COMPLETE from 4" reads as counts), or a name with
// spaces or punctuation. Other names are returned as they are.
func QuoteName(name string) string {
	if name != "" && (strings.ContainsAny(name, " \t,;()\"'") || isNumber(name)) {
		return strconv.Quote(name)
	}
	return name
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}
