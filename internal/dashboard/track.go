package dashboard

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/internal/status"
)

// The limits that keep the dashboard light however long it runs.
const (
	// keepRounds is how many rounds the tracker remembers; older ones
	// are forgotten (and counted as hidden).
	keepRounds = 2000
	// GridRows is how many of the newest rounds a view's grid carries.
	GridRows = 100
	// keepCleared is how many cleared faults a node's box keeps showing.
	keepCleared = 8
	// keepEvents is how many steering events a view carries.
	keepEvents = 20
	// fullFaults is how many faults a node's status lists at most: a
	// fault that leaves a full list was pushed out, not cleared.
	fullFaults = 64
)

// tracker turns each poll's status documents into a View, remembering
// what a document shows only for a moment: the states a round passed
// through at each node (its ladder, its task's time), how it ended there,
// who approved it, and faults that cleared.
type tracker struct {
	rounds  map[string]*roundRec
	order   []*roundRec // by first seen, oldest first
	dropped int         // rounds forgotten beyond keepRounds
	down    map[string]time.Time
	faults  map[string]*nodeFaults // by node address
	// ladders are the ladders of the rows of the last view's grid.
	ladders map[string][]Msg
	// control is the --node the dashboard steers (a name or an address);
	// "" read-only. user is who its requests are sent as.
	control, user string
}

// roundRec is what the tracker knows of one round.
type roundRec struct {
	id    string
	first time.Time
	cells map[string]*cellRec // by node address
	msgs  map[[3]int]*Msg     // by wave, from, to
}

// cellRec is one round at one node.
type cellRec struct {
	state string // its state there, while unfinished
	rank  int    // how far it got there (rankOf), the most seen
	// The node's clock: when its task started and ended (the round
	// entered START, COMPLETE), the last time it had not started, and
	// when it ended there.
	started, completed, before, ended time.Time
	lastDoc                           time.Time // the document that last showed it in flight
	status, err, undo                 string    // how it ended there (status.Finished)
	fault                             string    // the kind of this node's own fault in the round
	note                              []string  // "approved at C by ann (looks fine)"
	retried                           time.Time // the node's clock when a retry of the round was seen here
}

// nodeFaults is what the tracker knows of one node's faults.
type nodeFaults struct {
	live    []FaultLine // in the last document
	cleared []FaultLine // gone from it since, newest last
}

func newTracker(control, user string) *tracker {
	return &tracker{rounds: map[string]*roundRec{}, down: map[string]time.Time{}, faults: map[string]*nodeFaults{},
		control: control, user: user}
}

// The states in the order a round passes them at a node; rankDone is a
// round that ended done there.
const (
	rankNone = iota
	rankSync
	rankReady
	rankWatch
	rankStart
	rankComplete
	rankDone
)

func rankOf(state string) int {
	return max(rankNone, slices.Index([]string{"SYNC", "READY", "WATCH", "START", "COMPLETE"}, state)+rankSync)
}

func (t *tracker) round(id string, now time.Time) *roundRec {
	r := t.rounds[id]
	if r == nil {
		r = &roundRec{id: id, first: now, cells: map[string]*cellRec{}, msgs: map[[3]int]*Msg{}}
		t.rounds[id] = r
		t.order = append(t.order, r)
		if k := len(t.order) - keepRounds; k > 0 {
			for _, old := range t.order[:k] {
				delete(t.rounds, old.id)
			}
			t.order = slices.Delete(t.order, 0, k)
			t.dropped += k
		}
	}
	return r
}

func (r *roundRec) cell(addr string) *cellRec {
	c := r.cells[addr]
	if c == nil {
		c = &cellRec{}
		r.cells[addr] = c
	}
	return c
}

// ownFault reports whether a fault is the node's own, not its report of
// another node's (chain-fault, chain-halted).
func ownFault(kind string) bool { return kind != "chain-fault" && kind != "chain-halted" }

// update takes one poll: nodes in chain order, read at now.
func (t *tracker) update(nodes []status.Node, now time.Time) View {
	nodes = slices.Clone(nodes)
	status.NameSilent(nodes)
	index := map[string]int{} // label -> chain index
	for i, n := range nodes {
		index[n.Label()] = i
	}
	for _, n := range nodes {
		if n.Doc == nil {
			if _, ok := t.down[n.Addr]; !ok {
				t.down[n.Addr] = now
			}
			continue
		}
		delete(t.down, n.Addr)
		t.observe(n, now)
	}
	for _, n := range nodes {
		if n.Doc == nil {
			continue
		}
		for _, s := range n.Doc.Steering {
			if (s.What == "approved" || s.What == "denied") && s.Round != nil {
				if r := t.rounds[*s.Round]; r != nil {
					if i, ok := index[s.Node]; ok {
						c := r.cell(nodes[i].Addr)
						note := s.What + " at " + nodes[i].Label() + " by " + orSomeone(s.By)
						if s.Reason != "" {
							note += " (" + s.Reason + ")"
						}
						if !slices.Contains(c.note, note) {
							c.note = append(c.note, note)
						}
					}
				}
			}
		}
	}
	for _, r := range t.order {
		t.ladder(r, nodes, now)
	}
	return t.view(nodes, now)
}

func orSomeone(by string) string {
	if by == "" {
		return "someone"
	}
	return by
}

// observe takes one node's document.
func (t *tracker) observe(n status.Node, now time.Time) {
	d := n.Doc
	// The rounds that ended first, so that on the first poll they come
	// before (are older than) the rounds in flight.
	for _, f := range d.Finished {
		r := t.rounds[f.Round]
		if r == nil {
			r = t.round(f.Round, f.Opened) // ended before the dashboard saw it in flight
		}
		c := r.cell(n.Addr)
		if c.status != "" || !c.retried.IsZero() && !f.Ended.After(c.retried) {
			continue // known, or the end of the run before a retry
		}
		c.state, c.status, c.err, c.undo, c.ended = "", f.Status, f.Error, f.Undo, f.Ended
		if f.Status == "done" {
			c.rank = rankDone
		}
	}
	for _, rd := range d.Rounds {
		r := t.round(rd.Round, now)
		c := r.cell(n.Addr)
		if c.status != "" {
			// Over here, and in flight again: a retry (chainsync open
			// --retry) runs it anew under its own id.
			*c = cellRec{retried: d.Time}
			clear(r.msgs)
		}
		c.state, c.lastDoc = rd.State, d.Time
		c.rank = max(c.rank, rankOf(rd.State))
		switch rd.State {
		case "START":
			if c.started.IsZero() {
				c.started = rd.Since
			}
		case "COMPLETE":
			if c.completed.IsZero() {
				c.completed = rd.Since
			}
		default:
			c.before = d.Time
		}
	}
	for _, f := range d.Faults {
		if ownFault(f.Kind) {
			if r := t.rounds[f.Round]; r != nil {
				if c := r.cell(n.Addr); c.fault == "" && !f.Time.Before(c.retried) {
					c.fault = f.Kind
				}
			}
		}
	}
	// Faults: those gone from a list that is not full have cleared.
	nf := t.faults[n.Addr]
	if nf == nil {
		nf = &nodeFaults{}
		t.faults[n.Addr] = nf
	}
	live := make([]FaultLine, 0, len(d.Faults))
	for _, f := range d.Faults {
		live = append(live, FaultLine{Kind: f.Kind, Round: f.Round, Blames: f.Peer, Side: f.Side, Time: f.Time, Error: f.Error})
	}
	if len(d.Faults) < fullFaults {
		for _, old := range nf.live {
			if !slices.ContainsFunc(live, func(f FaultLine) bool { return sameFault(f, old) }) {
				old.Cleared = now
				nf.cleared = append(nf.cleared, old)
			}
		}
		if k := len(nf.cleared) - keepCleared; k > 0 {
			nf.cleared = slices.Delete(nf.cleared, 0, k)
		}
	}
	nf.live = live
}

func sameFault(a, b FaultLine) bool {
	return a.Kind == b.Kind && a.Round == b.Round && a.Blames == b.Blames && a.Time.Equal(b.Time)
}

// ladder adds the messages each node's state shows it has sent in r.
func (t *tracker) ladder(r *roundRec, nodes []status.Node, now time.Time) {
	last := len(nodes) - 1
	add := func(wave, from, to int, cmd string, at time.Time) {
		k := [3]int{wave, from, to}
		if m := r.msgs[k]; m != nil {
			if m.At == 0 {
				m.At = millis(at)
			}
			return
		}
		r.msgs[k] = &Msg{Wave: wave, From: from, To: to, Cmd: cmd, At: millis(at), Seen: millis(now)}
	}
	for i, n := range nodes {
		c := r.cells[n.Addr]
		if c == nil {
			continue
		}
		exact := func(state string) time.Time {
			if c.state == state && n.Doc != nil {
				if rd := findRound(n.Doc, r.id); rd != nil {
					return rd.Since
				}
			}
			return time.Time{}
		}
		if c.rank >= rankReady && i < last {
			add(1, i, i+1, "READY", exact("READY"))
		}
		if c.rank >= rankWatch && i > 0 {
			add(2, i, i-1, "START", exact("WATCH"))
		}
		if c.rank >= rankComplete && i < last {
			add(3, i, i+1, "COMPLETE", exact("COMPLETE"))
		}
		if i > 0 && (c.rank >= rankComplete && i == last || c.rank == rankDone) {
			at := c.ended
			if i == last {
				at = exact("COMPLETE")
			}
			add(4, i, i-1, "COMPLETE", at)
		}
	}
}

func findRound(d *status.Doc, id string) *status.Round {
	for i := range d.Rounds {
		if d.Rounds[i].Round == id {
			return &d.Rounds[i]
		}
	}
	return nil
}

// msgs is r's ladder in the order of the waves.
func (r *roundRec) msgList() []Msg {
	out := make([]Msg, 0, len(r.msgs))
	for _, m := range r.msgs {
		mm := *m
		if mm.At != 0 {
			mm.Seen = 0 // the page needs it only without At
		}
		out = append(out, mm)
	}
	slices.SortFunc(out, func(a, b Msg) int {
		if a.Wave != b.Wave {
			return a.Wave - b.Wave
		}
		if a.Wave%2 == 1 {
			return a.From - b.From // forward waves run Head to Tail
		}
		return b.From - a.From
	})
	return out
}

// view builds the View of the tracker's state after a poll.
func (t *tracker) view(nodes []status.Node, now time.Time) View {
	v := View{Time: now, Chain: status.ChainLine(nodes), Nodes: []Box{}, Flights: []Flight{}, Events: []string{}}
	ctl := -1
	for i, n := range nodes {
		if t.control != "" && (n.Label() == t.control || n.Addr == t.control) {
			ctl = i
		}
	}
	for i := range nodes {
		v.Nodes = append(v.Nodes, t.box(nodes, i, i == ctl))
	}
	if t.control != "" {
		p := &SteerPanel{User: t.user, Ops: []string{"hold", "release", "approve", "deny"}}
		if ctl >= 0 {
			p.Node = nodes[ctl].Label()
			if d := nodes[ctl].Doc; d != nil && (d.Role == "head" || d.Role == "single") {
				p.Head = true
				p.Ops = append(p.Ops, "pause", "resume", "cancel", "open", "retry")
			}
		}
		v.Steer = p
	}
	seen := map[string]bool{}
	type event struct {
		at   time.Time
		text string
	}
	var events []event
	for _, n := range nodes {
		if n.Doc == nil {
			continue
		}
		for _, s := range n.Doc.Steering {
			switch s.What {
			case "hold", "approval", "pause":
				continue // gates: in the boxes
			}
			if !seen[s.Text] {
				seen[s.Text] = true
				events = append(events, event{s.Since, s.Text})
			}
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return b.at.Compare(a.at) })
	for i, e := range events {
		if i == keepEvents {
			break
		}
		v.Events = append(v.Events, e.text)
	}
	for _, verdict := range status.Diagnose(nodes) {
		v.Flights = append(v.Flights, t.flight(nodes, verdict, ctl))
	}
	v.Grid = t.grid(nodes, v.Steer != nil && v.Steer.Head)
	return v
}

func (t *tracker) box(nodes []status.Node, i int, control bool) Box {
	n := nodes[i]
	b := Box{Label: n.Label(), Addr: n.Addr, Answers: n.Doc != nil, Gates: []Gate{}, Faults: []FaultLine{}, Control: control}
	if nf := t.faults[n.Addr]; nf != nil {
		b.Faults = append(append(b.Faults, nf.cleared...), nf.live...)
	}
	for _, o := range nodes {
		if o.Doc == nil {
			continue
		}
		for _, s := range o.Doc.Steering {
			if s.Node != b.Label || s.What != "hold" && s.What != "approval" && s.What != "pause" {
				continue
			}
			g := Gate{What: s.What, By: s.By, Reason: s.Reason, Since: s.Since, Text: s.Text}
			if s.Round != nil {
				g.Round = *s.Round
			}
			if !slices.ContainsFunc(b.Gates, func(h Gate) bool { return h.What == g.What && h.Round == g.Round }) {
				b.Gates = append(b.Gates, g)
			}
		}
		for _, g := range o.Doc.Restarting {
			if g.Node == b.Label && b.Restarting == "" && n.Doc == nil {
				b.Restarting = g.Text
			}
		}
	}
	if n.Doc == nil {
		b.Error, b.Since = n.Err.Error(), t.down[n.Addr]
		return b
	}
	d := n.Doc
	b.Role, b.Version, b.InFlight = d.Role, d.Version, len(d.Rounds)
	b.Pred, b.Succ = linkBox(d.Links.Pred), linkBox(d.Links.Succ)
	return b
}

func linkBox(l status.Link) LinkBox {
	b := LinkBox{Exists: l.Exists, Peer: l.Peer, State: "up"}
	switch {
	case !l.Up && l.Waiting != "":
		b.State = "waiting" // connected and alive, no round yet
	case !l.Up:
		b.State = "down"
	case l.Silent:
		b.State = "silent"
	}
	return b
}

func (t *tracker) flight(nodes []status.Node, v status.Verdict, ctl int) Flight {
	f := Flight{Round: v.Round, Label: status.RoundName(v.Round), Words: v.Why, At: v.Node, States: []string{}, Ladder: []Msg{}}
	if v.For > 0 {
		f.For = v.For.Round(100 * time.Millisecond).String()
	}
	r := t.rounds[v.Round]
	for i, n := range nodes {
		st := ""
		if r != nil {
			if c := r.cells[n.Addr]; c != nil {
				st = c.state
				if c.status != "" {
					st = c.status
				}
			}
		}
		if n.Doc == nil {
			st = "?"
		} else if rd := findRound(n.Doc, v.Round); rd != nil && i == ctl && rd.WaitingFor == "approval" {
			f.Approve = true
		}
		f.States = append(f.States, st)
	}
	if r != nil {
		f.Ladder = r.msgList()
	}
	return f
}

// grid is the newest rounds, newest first.
func (t *tracker) grid(nodes []status.Node, head bool) Grid {
	g := Grid{Nodes: []string{}, Rows: []Row{}, Hidden: t.dropped + max(len(t.order)-GridRows, 0)}
	for _, n := range nodes {
		g.Nodes = append(g.Nodes, n.Label())
	}
	t.ladders = map[string][]Msg{}
	for k := len(t.order) - 1; k >= 0 && len(g.Rows) < GridRows; k-- {
		r := t.order[k]
		g.Rows = append(g.Rows, t.row(r, nodes, head))
		t.ladders[r.id] = r.msgList()
	}
	return g
}

// failedAt returns the index of the node whose own fault ended r, and
// its kind; -1 if none is known.
func failedAt(r *roundRec, nodes []status.Node) (int, string) {
	for i, n := range nodes {
		if c := r.cells[n.Addr]; c != nil && c.fault != "" && c.status != "" && c.status != "done" {
			return i, c.fault
		}
	}
	return -1, ""
}

func (t *tracker) row(r *roundRec, nodes []status.Node, head bool) Row {
	row := Row{Round: r.id, Label: status.RoundName(r.id), Cells: []Cell{}, Text: []string{}, Msgs: len(r.msgs), First: r.first}
	f, kind := failedAt(r, nodes)
	// A task that failed at f means every task before it ran: the tasks
	// run in chain order.
	ranBefore := kind == "task-failed" || kind == "task-timeout"
	inFlight, failed, cancelled, undone, done := false, false, false, false, 0
	for i, n := range nodes {
		c := r.cells[n.Addr]
		cell := Cell{Outcome: "unknown"}
		if c != nil {
			cell.Note = strings.Join(c.note, "; ")
			ran := c.rank >= rankComplete || ranBefore && i < f
			switch {
			case c.status == "" && c.state != "":
				cell.Outcome = "in-flight"
				inFlight = true
			case c.status == "":
			case c.status == "done":
				cell.Outcome = "done"
			case i == f:
				// Its task failed, or was denied before it started: only
				// a task seen running has a time.
				cell.Outcome = "failed"
				ran = !c.started.IsZero()
			case c.status == "cancelled" && !ran:
				cell.Outcome = "cancelled"
			case ran:
				cell.Outcome = "done"
			default:
				cell.Outcome = "not-reached"
			}
			if cell.Outcome == "done" && undoneBy(c.undo, n.Label()) {
				cell.Outcome = "undone"
			}
			if ran || cell.Outcome == "in-flight" {
				cell.Task = taskTime(c)
			}
			switch cell.Outcome {
			case "done":
				done++
			case "failed":
				failed = true
			case "cancelled":
				cancelled = true
			case "undone":
				undone = true
			}
			if c.status != "" && c.status != "done" && c.status != "cancelled" && f < 0 && cell.Outcome != "done" {
				failed = true
			}
		}
		row.Cells = append(row.Cells, cell)
	}
	switch {
	case inFlight:
		row.Outcome = "in flight"
	case cancelled:
		row.Outcome = "cancelled"
	case undone:
		row.Outcome = "undone"
	case failed:
		row.Outcome = "failed"
	case done == len(nodes):
		row.Outcome = "done"
	default:
		row.Outcome = "unknown"
	}
	if f >= 0 {
		if c := r.cells[nodes[f].Addr]; c != nil {
			row.Text = append(row.Text, fmt.Sprintf("failed at %s (%s): %s", nodes[f].Label(), c.fault, c.err))
		}
	}
	var texts []string
	for i, n := range nodes {
		c := r.cells[n.Addr]
		if c == nil {
			continue
		}
		if c.err != "" && i != f && c.status != "done" && !slices.Contains(texts, c.status+": "+c.err) && f < 0 {
			texts = append(texts, c.status+": "+c.err)
		}
		if c.undo != "" && !slices.Contains(texts, c.undo) {
			texts = append(texts, c.undo)
		}
		texts = append(texts, c.note...)
	}
	row.Text = append(row.Text, texts...)
	row.Retry = head && (row.Outcome == "failed" || row.Outcome == "cancelled" || row.Outcome == "undone")
	return row
}

// undoneBy reports whether an undo wave's outcome ("failed at C (task
// exited 1); undone by B, A") names node among those that undid their
// task.
func undoneBy(undo, node string) bool {
	_, list, ok := strings.Cut(undo, "undone by ")
	if !ok {
		return false
	}
	list, _, _ = strings.Cut(list, ";")
	for _, n := range strings.Split(list, ",") {
		if strings.TrimSpace(n) == node {
			return true
		}
	}
	return false
}

// taskTime says how long a node's task ran, from the states the polls
// saw: exactly if they saw it enter START and COMPLETE, else the most it
// can have taken ("< 1.0s": it had not started at one poll and was over at
// the next).
func taskTime(c *cellRec) string {
	end, exact := c.completed, true
	if end.IsZero() {
		end, exact = c.ended, false
	}
	start := c.started
	switch {
	case !start.IsZero() && c.state == "START":
		return "running " + dur(c.lastDoc.Sub(start))
	case !start.IsZero() && !end.IsZero() && exact:
		return dur(end.Sub(start))
	case !start.IsZero() && !end.IsZero():
		return "≤ " + dur(end.Sub(start))
	case !c.before.IsZero() && !end.IsZero():
		return "< " + dur(end.Sub(c.before))
	}
	return ""
}

func dur(d time.Duration) string {
	d = max(d, 0)
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
