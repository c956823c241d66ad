// Package sim is a deterministic simulated network for ChainSync tests, in
// the style of etcd raft's raft_test.go network: it drives real
// protocol.Machines through the real wire codec over simulated links.
//
// Each adjacent pair of nodes has two directed links. A link is a FIFO byte
// stream: a send is wire.Append'ed to it and a delivery reads one line back
// with a wire.Reader, so every simulated message crosses the codec. Links
// can be dropped (their bytes are lost, like a dead TCP connection) and
// restored (a new connection: a fresh Reader); the caller then reports
// protocol.LinkUp to both ends. Which link delivers next, when tasks finish
// and when nodes become ready is the caller's choice: a golden-trace
// interpreter picks deterministically, a random scheduler picks from a
// seeded RNG.
//
// Durable Machines (protocol.Config.Durable) keep a journal: the network
// records the last Record of each round their ActSave actions wrote, and
// Restart crashes a node (a new Machine restored from that journal, its
// tasks gone, its links dropped), as a process killed and restarted with
// the same state directory.
//
// Time is logical (docs/DESIGN.md, "Time"): the network has a clock, Now,
// that moves only when the caller says (Advance), and every event it feeds
// a Machine carries it, so the Machines' timeouts (phase, exit wave,
// heartbeat silence, connect) run here deterministically. Advance ticks
// every node that is not hung (Hang: a process stopped, that reads,
// writes and ticks nothing), telling it that each live neighbour on an up
// link was heard from (their heartbeats). The fault policy is the
// Machines' own (protocol.Config.Policy), as in the node: the network
// adds only what a driver adds, the notice of each fault a Machine's
// timeout reports (with protocol.Config.Extensions), stepped after the
// timeout's step as the node's loop steps it.
//
// The package does no checking of its own beyond the codec round trip; see
// Checker for the protocol invariants.
package sim

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// Node is one simulated chain member.
type Node struct {
	Name  string
	Index int
	Role  protocol.Role
	M     *protocol.Machine
	// Journal is the node's durable state: the last Record of each round
	// that its ActSave actions wrote (protocol.Config.Durable), in the
	// order the rounds were first saved. Restart keeps it.
	Journal []protocol.Record

	cfg  protocol.Config
	jpos map[string]int // round -> index in Journal
	// hung: the node is stopped (Hang); resumed: it was, and has not
	// ticked since.
	hung, resumed bool
}

func (nd *Node) save(rec protocol.Record) {
	if k, ok := nd.jpos[rec.Round]; ok {
		nd.Journal[k] = rec
		return
	}
	if nd.jpos == nil {
		nd.jpos = make(map[string]int)
	}
	nd.jpos[rec.Round] = len(nd.Journal)
	nd.Journal = append(nd.Journal, rec)
}

// Task is a local task that a Machine asked to run and that has not been
// reported finished yet.
type Task struct {
	Node  int
	Round string
}

// Config configures a Network.
type Config struct {
	// Names of the nodes, Head first. Its length is the chain length.
	Names []string
	// Machine, if set, adjusts each node's protocol.Config (the Role is
	// filled in already).
	Machine func(i int, cfg *protocol.Config)
}

// Network is a chain of Machines joined by simulated links.
type Network struct {
	Nodes []*Node
	// Colon makes senders write the unnamed round as "COMMAND:".
	Colon bool
	// ReadChunk, if set, bounds each Read a link's Reader does (it must
	// return at least 1), so lines arrive split at arbitrary points.
	ReadChunk func() int
	// Hook, if set, sees every event fed to a Machine and its result,
	// after the network has carried out the actions.
	Hook func(node int, ev protocol.Event, acts []protocol.Action, err error)
	// Mutate, if set, may rewrite the actions of every successful Step
	// before the network carries them out and Hook sees them: tests use
	// it to play a buggy Machine that a Checker must catch.
	Mutate func(node int, ev protocol.Event, acts []protocol.Action) []protocol.Action
	// Tasks are the running tasks, oldest first.
	Tasks []Task
	// Undos are the running undos (protocol.ActRunUndo), oldest first
	// (undo.go).
	Undos []Task
	// Sent counts lines written to links; Lost counts sends on a link
	// that was down (dropped, as a real driver would).
	Sent, Lost int
	// Now is the network's logical clock, stamped on every event (Advance
	// moves it). It starts at one second.
	Now   time.Duration
	links []link
	busy  []int // links with queued lines, in no particular order
	seq   uint64
	out   []protocol.Action
}

type pending struct {
	seq uint64
	msg protocol.Message
}

type link struct {
	from, to int
	side     protocol.Side // who the sender is, as the receiver sees it
	up       bool
	q        queue
	r        *wire.Reader
	pend     []pending // the queued lines' messages, FIFO from head
	head     int
	busyPos  int
	last     protocol.Message // the last message sent on the link
	hasLast  bool
	hist     []protocol.Message // distinct messages delivered, for Replay
}

// Fwd returns the id of the link from node p to node p+1.
func Fwd(p int) int { return 2 * p }

// Bwd returns the id of the link from node p+1 to node p.
func Bwd(p int) int { return 2*p + 1 }

// New returns a Network with all links up and nothing in flight.
func New(cfg Config) *Network {
	n := len(cfg.Names)
	net := &Network{Nodes: make([]*Node, n), Now: time.Second}
	for i, name := range cfg.Names {
		pc := protocol.Config{Role: protocol.RoleOf(i > 0, i < n-1)}
		if cfg.Machine != nil {
			cfg.Machine(i, &pc)
		}
		net.Nodes[i] = &Node{Name: name, Index: i, Role: pc.Role, M: protocol.New(pc), cfg: pc}
	}
	if n > 1 {
		net.links = make([]link, 2*(n-1))
	}
	for p := 0; p+1 < n; p++ {
		net.links[Fwd(p)] = link{from: p, to: p + 1, side: protocol.Pred, busyPos: -1}
		net.links[Bwd(p)] = link{from: p + 1, to: p, side: protocol.Succ, busyPos: -1}
	}
	for l := range net.links {
		lk := &net.links[l]
		lk.q.net = net
		lk.up = true
		lk.r = wire.NewReader(&lk.q)
		lk.r.Heartbeats = net.Nodes[lk.to].cfg.Extensions
	}
	// The connections are there from the start: the Machines learn it.
	for p := 0; p+1 < n; p++ {
		net.Step(p, protocol.LinkUp(protocol.Succ))
		net.Step(p+1, protocol.LinkUp(protocol.Pred))
	}
	return net
}

// Links returns the number of directed links, 2(n-1).
func (n *Network) Links() int { return len(n.links) }

// Ends returns the sender and receiver of link l.
func (n *Network) Ends(l int) (from, to int) { return n.links[l].from, n.links[l].to }

// Link returns the id of the link from node from to its neighbour to.
func (n *Network) Link(from, to int) (int, bool) {
	switch {
	case from < 0 || to < 0 || from >= len(n.Nodes) || to >= len(n.Nodes):
		return 0, false
	case to == from+1:
		return Fwd(from), true
	case to == from-1:
		return Bwd(to), true
	}
	return 0, false
}

// Up reports whether the links between nodes p and p+1 are up.
func (n *Network) Up(p int) bool { return n.links[Fwd(p)].up }

// Hang stops node i (hung) or lets it go on: a hung node is a process
// stopped (SIGSTOP, or hung): the caller delivers nothing to it and
// finishes none of its tasks, Advance does not tick it, and its
// neighbours hear nothing from it. Its first tick after it goes on says
// Resumed.
func (n *Network) Hang(i int, hung bool) {
	nd := n.Nodes[i]
	if nd.hung && !hung {
		nd.resumed = true
	}
	nd.hung = hung
}

// Hung reports whether node i is hung.
func (n *Network) Hung(i int) bool { return n.Nodes[i].hung }

// Advance moves the clock by d and ticks every node that is not hung,
// Head first, reporting as heard each neighbour that is not hung on an
// up link (its heartbeats). It returns each tick's actions, by node.
func (n *Network) Advance(d time.Duration) [][]protocol.Action {
	n.Now += d
	out := make([][]protocol.Action, len(n.Nodes))
	for i, nd := range n.Nodes {
		if nd.hung {
			continue
		}
		var heard [3]time.Duration
		if i > 0 && n.Up(i-1) && !n.Nodes[i-1].hung {
			heard[protocol.Pred] = n.Now
		}
		if i+1 < len(n.Nodes) && n.Up(i) && !n.Nodes[i+1].hung {
			heard[protocol.Succ] = n.Now
		}
		acts, _ := n.Step(i, protocol.Tick(n.Now, heard, nd.resumed))
		nd.resumed = false
		out[i] = slices.Clone(acts)
	}
	return out
}

// Pending returns the number of lines queued on link l.
func (n *Network) Pending(l int) int { return len(n.links[l].pend) - n.links[l].head }

// Busy returns the links with queued lines. The slice is the network's
// own: do not keep or modify it across calls.
func (n *Network) Busy() []int { return n.busy }

// Oldest returns the link whose head line was sent first, or -1 if nothing
// is in flight: delivering it repeatedly is lockstep, global FIFO delivery.
func (n *Network) Oldest() int {
	best, bestSeq := -1, uint64(0)
	for _, l := range n.busy {
		lk := &n.links[l]
		if s := lk.pend[lk.head].seq; best < 0 || s < bestSeq {
			best, bestSeq = l, s
		}
	}
	return best
}

// SetLink takes both links between nodes p and p+1 down (their queued
// bytes are lost; protocol.LinkDown is reported to both ends) or up again
// (as a new connection): report protocol.LinkUp to both ends after
// bringing a link up.
func (n *Network) SetLink(p int, up bool) {
	was := n.links[Fwd(p)].up
	for _, l := range [2]int{Fwd(p), Bwd(p)} {
		lk := &n.links[l]
		if lk.up == up {
			continue
		}
		lk.up = up
		lk.q.reset()
		lk.pend, lk.head = lk.pend[:0], 0
		n.unbusy(l)
		if up {
			lk.r = wire.NewReader(&lk.q) // a new connection, nothing buffered
			lk.r.Heartbeats = n.Nodes[lk.to].cfg.Extensions
		} else {
			lk.r = nil
		}
	}
	if was && !up {
		n.Step(p, protocol.LinkDown(protocol.Succ, 0))
		n.Step(p+1, protocol.LinkDown(protocol.Pred, 0))
	}
}

// Step feeds ev to node i's Machine and carries out the actions: sends are
// queued on their link (or lost if it is down) and task runs are added to
// Tasks. An exit-wave COMPLETE queued on a live link is handed over, as a
// driver's write to a live connection is: the network then reports
// protocol.Delivered for its round to node i, and the actions of that
// step follow those of ev in the returned slice (Hook sees each step on
// its own). The returned slice is reused by the next Step.
func (n *Network) Step(i int, ev protocol.Event) ([]protocol.Action, error) {
	acts, err := n.step(i, ev, n.out[:0])
	n.out = acts[:0]
	return acts, err
}

func (n *Network) step(i int, ev protocol.Event, out []protocol.Action) ([]protocol.Action, error) {
	if ev.At == 0 {
		ev.At = n.Now
	}
	start := len(out)
	acts, err := n.Nodes[i].M.Step(ev, out)
	if err == nil && n.Mutate != nil {
		acts = append(acts[:start], n.Mutate(i, ev, acts[start:])...)
	}
	var handed []string
	var reports []protocol.Notice
	if err == nil {
		for _, a := range acts[start:] {
			switch a.Kind {
			case protocol.ActTimeout:
				if n.Nodes[i].cfg.Extensions {
					reports = append(reports, n.notice(i, a))
				}
			case protocol.ActSave:
				n.Nodes[i].save(*a.Record)
			case protocol.ActSend:
				if serr := n.send(i, a.To, a.Msg); serr != nil {
					err = serr
				} else if a.To == protocol.Pred && a.Msg.Cmd == protocol.Complete && n.links[Bwd(i-1)].up {
					handed = append(handed, a.Msg.Round)
				}
			case protocol.ActRunTask:
				n.Tasks = append(n.Tasks, Task{Node: i, Round: a.Round})
			case protocol.ActRunUndo:
				n.Undos = append(n.Undos, Task{Node: i, Round: a.Round})
			}
		}
	}
	if n.Hook != nil {
		n.Hook(i, ev, acts[start:], err)
	}
	for _, id := range handed {
		acts, _ = n.step(i, protocol.Delivered(id), acts)
	}
	for _, note := range reports {
		acts, _ = n.step(i, protocol.Report(note), acts)
	}
	return acts, err
}

// TimeoutKinds are the fault kinds a driver reports for each timeout, as
// the node names them.
var TimeoutKinds = map[protocol.TimeoutKind]string{
	protocol.TimeoutPhase:       "phase-timeout",
	protocol.TimeoutSilence:     "peer-silent",
	protocol.TimeoutUnreachable: "peer-unreachable",
}

// notice is the notice a driver sends for node i's timeout a: it blames
// the neighbour a is about (none for a phase timeout, which cannot tell).
func (n *Network) notice(i int, a protocol.Action) protocol.Notice {
	note := protocol.Notice{HasRound: true, Round: a.Round, Kind: TimeoutKinds[a.Timeout], Origin: protocol.NoticeName(n.Nodes[i].Name)}
	if a.Timeout != protocol.TimeoutPhase {
		j := i + 1
		if a.To == protocol.Pred {
			j = i - 1
		}
		note.Blamed = protocol.NoticeName(n.Nodes[j].Name)
	}
	return note
}

// ErrBadSend is a Machine asking to send to a neighbour it does not have.
var ErrBadSend = errors.New("sim: send to a missing neighbour")

func (n *Network) send(i int, to protocol.Side, msg protocol.Message) error {
	j := i + 1
	if to == protocol.Pred {
		j = i - 1
	}
	l, ok := n.Link(i, j)
	if !ok || (to != protocol.Pred && to != protocol.Succ) {
		return fmt.Errorf("%w: node %d to %v", ErrBadSend, i, to)
	}
	lk := &n.links[l]
	lk.last, lk.hasLast = msg, true
	n.enqueue(l, msg)
	return nil
}

func (n *Network) enqueue(l int, msg protocol.Message) {
	lk := &n.links[l]
	if !lk.up {
		n.Lost++
		return
	}
	lk.q.buf = wire.Append(lk.q.buf, msg, n.Colon)
	n.seq++
	lk.pend = append(lk.pend, pending{seq: n.seq, msg: msg})
	n.Sent++
	if lk.busyPos < 0 {
		lk.busyPos = len(n.busy)
		n.busy = append(n.busy, l)
	}
}

func (n *Network) unbusy(l int) {
	lk := &n.links[l]
	if lk.busyPos < 0 {
		return
	}
	last := n.busy[len(n.busy)-1]
	n.busy[lk.busyPos] = last
	n.links[last].busyPos = lk.busyPos
	n.busy = n.busy[:len(n.busy)-1]
	lk.busyPos = -1
}

// Deliver reads the next line on link l through the codec and feeds it to
// the receiver. It returns the receiver, the message and the Step result.
// A codec failure, or a decoded message that differs from the one sent, is
// returned as an error that is not a *protocol.Violation.
func (n *Network) Deliver(l int) (to int, msg protocol.Message, acts []protocol.Action, err error) {
	lk := &n.links[l]
	if lk.head == len(lk.pend) {
		return lk.to, msg, nil, fmt.Errorf("sim: deliver on idle link %d", l)
	}
	want := lk.pend[lk.head].msg
	msg, err = lk.r.ReadMessage()
	if err != nil {
		return lk.to, msg, nil, fmt.Errorf("sim: codec: reading %v: %w", want, err)
	}
	if !sameMsg(msg, want) {
		return lk.to, msg, nil, fmt.Errorf("sim: codec: sent %v, read %v", want, msg)
	}
	lk.head++
	if lk.head == len(lk.pend) {
		lk.pend, lk.head = lk.pend[:0], 0
		n.unbusy(l)
	}
	if !contains(lk.hist, msg) {
		lk.hist = append(lk.hist, msg)
	}
	acts, err = n.Step(lk.to, protocol.Recv(lk.side, msg))
	return lk.to, msg, acts, err
}

// sameMsg compares two messages by value, the extension lines' fields
// included (they are pointers).
func sameMsg(a, b protocol.Message) bool {
	if a.Cmd != b.Cmd || a.Round != b.Round {
		return false
	}
	switch {
	case a.Note != nil || b.Note != nil:
		return a.Note != nil && b.Note != nil && *a.Note == *b.Note
	case a.Steer != nil || b.Steer != nil:
		return a.Steer != nil && b.Steer != nil && *a.Steer == *b.Steer
	case a.Grace != nil || b.Grace != nil:
		return a.Grace != nil && b.Grace != nil && *a.Grace == *b.Grace
	case a.Undo != nil || b.Undo != nil:
		return a.Undo != nil && b.Undo != nil && *a.Undo == *b.Undo
	}
	return a == b
}

func contains(s []protocol.Message, m protocol.Message) bool {
	for _, x := range s {
		if sameMsg(x, m) {
			return true
		}
	}
	return false
}

// DupLast queues the last message sent on link l again, as a network or a
// confused peer might. It reports false if nothing was sent yet or the link
// is down.
func (n *Network) DupLast(l int) bool {
	lk := &n.links[l]
	if !lk.hasLast || !lk.up {
		return false
	}
	n.enqueue(l, lk.last)
	return true
}

// Delivered returns how many distinct messages link l has delivered.
func (n *Network) Delivered(l int) int { return len(n.links[l].hist) }

// Replay queues again the k-th distinct message link l delivered: an exact
// duplicate of a message the receiver already acted on, arriving late. A
// message older than a later one of the same round on that link is not
// replayed: over one TCP stream it cannot arrive after it, and from a
// live peer it never does (it re-sends only its last message), so the
// receiver rightly takes it for a peer that restarted without its state.
func (n *Network) Replay(l, k int) bool {
	lk := &n.links[l]
	if k >= len(lk.hist) || !lk.up {
		return false
	}
	for _, later := range lk.hist[k+1:] {
		if later.Round == lk.hist[k].Round && later.Cmd > lk.hist[k].Cmd {
			return false
		}
	}
	// Nor behind a later one still in flight: it would arrive after it.
	for _, p := range lk.pend[lk.head:] {
		if p.msg.Round == lk.hist[k].Round && p.msg.Cmd > lk.hist[k].Cmd {
			return false
		}
	}
	n.enqueue(l, lk.hist[k])
	return true
}

// FinishTask reports Tasks[k] finished (failed or not) to its node.
func (n *Network) FinishTask(k int, failed bool) (Task, []protocol.Action, error) {
	t := n.Tasks[k]
	copy(n.Tasks[k:], n.Tasks[k+1:])
	n.Tasks = n.Tasks[:len(n.Tasks)-1]
	acts, err := n.Step(t.Node, protocol.TaskDone(t.Round, failed))
	return t, acts, err
}

// InFlight returns the number of lines queued on all links.
func (n *Network) InFlight() int {
	total := 0
	for _, l := range n.busy {
		total += n.Pending(l)
	}
	return total
}

// queue is one direction of a simulated connection: bytes written by the
// sender, read by the receiver's wire.Reader.
type queue struct {
	net *Network
	buf []byte
	off int
}

func (q *queue) Read(p []byte) (int, error) {
	if q.off == len(q.buf) {
		// The Reader asked for more than was sent: a line is missing.
		return 0, io.EOF
	}
	if q.net.ReadChunk != nil {
		p = p[:min(len(p), q.net.ReadChunk())]
	}
	k := copy(p, q.buf[q.off:])
	q.off += k
	if q.off == len(q.buf) {
		q.reset()
	} else if q.off >= 4096 && q.off >= len(q.buf)/2 {
		q.buf = q.buf[:copy(q.buf, q.buf[q.off:])]
		q.off = 0
	}
	return k, nil
}

func (q *queue) reset() { q.buf, q.off = q.buf[:0], 0 }
