package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Checker holds a plain reference of what has happened in each round (who
// was made locally ready, which messages arrived, which tasks ran and
// finished) and checks every Step of a Network against it, the way raft's
// quorum/quick_test.go checks an implementation against a naive one. Hook
// it up with Attach, or call Observe from your own Hook.
//
// The invariants (docs/DESIGN.md, "State machine"; draft, "Protocol
// Operation"):
//   - no task starts before every node was locally ready;
//   - a node's task starts only after its predecessor's task finished, so
//     tasks run in chain order, and each node runs it at most once;
//   - every message a node sends is justified by what it received, each is
//     sent at most once (re-sends aside), and without faults no round sends
//     more than 4(n-1) messages;
//   - a node finishes only after its successor finished, so the Head is the
//     last to finish; a node with a predecessor finishes only once its
//     final COMPLETE was handed to a live link (Delivered), or ends
//     NotDelivered when the driver gives up on that (Undelivered);
//   - a round aborted after its COMPLETE went on to the successor, before
//     the exit wave came back, ends NoExitWave (the tasks after the node
//     may have run), any other aborted round Aborted;
//   - every state change is one the draft allows for the node's role, and
//     the Machine's State always matches the reported changes;
//   - a rejected event changes no state;
//   - a node restarted from its journal is in the state the reference
//     last saw, and only a task its restart interrupted may run again
//     (Restarted, Rerun): the interrupted run and its re-run, or the
//     restart taken as the task, are that task's one run;
//   - no timeout blames a healthy node (docs/DESIGN.md, "Time"): a
//     neighbour reported silent is hung and its link up; one reported
//     unreachable has its link down; a phase timeout comes once per state,
//     at least PhaseTimeout after the round entered it (or this node
//     became ready in SYNC); a final COMPLETE is given up at least
//     ExitWaveTimeout after the round was done here, with the link to the
//     predecessor down.
type Checker struct {
	// Faults allows re-sends (after a link came back, or replies to
	// duplicates). Without it any re-send is an error.
	Faults bool

	net    *Network
	n      int
	rounds map[string]*RoundRef
	cached *RoundRef
	ev     protocol.Event // the event being observed
	steer  steerRef       // steering (check_steer.go)
	// The fault policy within the step being observed: which rounds it
	// lets the Machine abort (every unfinished one, or those named), and
	// which it must have aborted by the end of the step.
	abortAll, mustAll bool
	abortOK, must     []string
	// halted: under halt, the node's machine has ended every round for a
	// fault; from then on a round it opens must end at once, aborted.
	halted map[int]bool
	undo   map[string][]UndoRef // per round, per node (check_undo.go)
	grace  graceRef             // restart graces (check_grace.go)
}

// RoundRef is the reference record of one round.
type RoundRef struct {
	ID    string
	Nodes []NodeRef
	// Ready counts locally ready nodes; Sends and Resends count ActSends.
	Ready, Sends, Resends int
	// Order lists the nodes in the order their tasks started.
	Order []int
}

// NodeRef is what one node did in a round.
type NodeRef struct {
	LocalReady, Started, Finished, Failed, Aborted, Done bool
	// GaveUp: the driver gave up handing the final COMPLETE over, or
	// ExitWaveTimeout ran out.
	GaveUp bool
	State  protocol.State
	// Since: when the round entered State here, or this node became
	// locally ready in SYNC (the phase timeout counts from then); TimedOut:
	// a phase timeout was reported since.
	Since    time.Duration
	TimedOut bool
	// Restarts counts the node's restarts while its task was running;
	// Reruns those after which the task ran again (resume policy rerun).
	// The interrupted run and its re-run count as the task's one run.
	Restarts, Reruns int
	sent, got        uint8
}

// Message bits for NodeRef.sent (sent by this node) and .got (received).
const (
	readyFwd    = 1 << iota // READY, predecessor to successor
	startBwd                // START, successor to predecessor
	completeFwd             // COMPLETE, predecessor to successor (execution wave)
	completeBwd             // COMPLETE, successor to predecessor (exit wave)
)

func msgBit(dir protocol.Side, c protocol.Command) uint8 {
	// dir is the direction of travel as seen by the sender: Succ = forward.
	switch {
	case dir == protocol.Succ && c == protocol.Ready:
		return readyFwd
	case dir == protocol.Pred && c == protocol.Start:
		return startBwd
	case dir == protocol.Succ && c == protocol.Complete:
		return completeFwd
	case dir == protocol.Pred && c == protocol.Complete:
		return completeBwd
	}
	return 0
}

// NewChecker returns a Checker for net. It does not hook itself up.
func NewChecker(net *Network) *Checker {
	return &Checker{net: net, n: len(net.Nodes), rounds: make(map[string]*RoundRef)}
}

// Attach makes c observe every Step of its network, reporting the first
// invariant failure to fail (which should stop the test).
func (c *Checker) Attach(fail func(error)) {
	c.net.Hook = func(node int, ev protocol.Event, acts []protocol.Action, err error) {
		if e := c.Observe(node, ev, acts, err); e != nil {
			fail(e)
		}
	}
}

// Round returns the reference record of round id, creating it.
func (c *Checker) Round(id string) *RoundRef {
	if c.cached != nil && c.cached.ID == id {
		return c.cached
	}
	r := c.rounds[id]
	if r == nil {
		r = &RoundRef{ID: id, Nodes: make([]NodeRef, c.n)}
		for i := range r.Nodes {
			r.Nodes[i].State = protocol.StateSync
		}
		c.rounds[id] = r
	}
	c.cached = r
	return r
}

// Observe checks one Step of node i: the event, the actions it returned
// and its error.
func (c *Checker) Observe(i int, ev protocol.Event, acts []protocol.Action, err error) error {
	id, hasRound := ev.RoundOf()
	if err != nil {
		// A rejected event changes nothing.
		if hasRound && protocol.ValidRound(id) {
			return c.checkState(i, id, fmt.Sprintf("after rejected event %s", DescribeEvent(ev)))
		}
		return nil
	}
	if hasRound {
		r := c.Round(id)
		nd := &r.Nodes[i]
		switch ev.Kind {
		case protocol.EvLocalReady:
			if !nd.LocalReady {
				nd.LocalReady = true
				r.Ready++
				nd.Since, nd.TimedOut = c.net.Now, false
			}
		case protocol.EvUndoDone:
			if e := c.undoDone(i, nd, ev); e != nil { // check_undo.go
				return e
			}
		case protocol.EvTaskDone:
			if !nd.Started || nd.Finished || nd.Failed {
				return fmt.Errorf("node %d round %q: TaskDone accepted without a running task", i, id)
			}
			if ev.Failed {
				nd.Failed = true
			} else {
				nd.Finished = true
			}
		case protocol.EvRecv, protocol.EvLinkUp: // a Promote's first line is received too
			var dir protocol.Side = protocol.Succ // the direction of travel
			if ev.From == protocol.Succ {
				dir = protocol.Pred
			}
			nd.got |= msgBit(dir, ev.Msg.Cmd)
		case protocol.EvAbort:
			nd.Aborted = true
		case protocol.EvUndelivered:
			nd.GaveUp = true
		}
	}
	c.ev = ev
	c.abortAll, c.mustAll, c.abortOK, c.must = false, false, c.abortOK[:0], c.must[:0]
	halt := c.net.Nodes[i].cfg.Policy == protocol.PolicyHalt
	if ev.Kind == protocol.EvReport && ev.Halt && halt || c.halted[i] {
		c.abortAll, c.mustAll = true, true // after a halt, nothing runs: a new round ends at once
	}
	c.steerEvent(i, ev) // check_steer.go
	if ev.Kind == protocol.EvRecv && ev.Msg.Cmd.IsUndo() {
		c.abortOK = append(c.abortOK, ev.Msg.Round) // the wave ends the round (check_undo.go)
	}
	if c.undoFailedHalts(i, ev) { // check_undo.go
		c.abortAll, c.mustAll = true, true
	}
	for _, a := range acts {
		if e := c.action(i, a); e != nil {
			return fmt.Errorf("node %d, event %s, action %s: %w", i, DescribeEvent(ev), DescribeAction(a), e)
		}
	}
	if e := c.policyDone(i); e != nil {
		return fmt.Errorf("node %d, event %s: %w", i, DescribeEvent(ev), e)
	}
	if c.mustAll {
		if c.halted == nil {
			c.halted = map[int]bool{}
		}
		c.halted[i] = true
	}
	if hasRound {
		if e := c.checkState(i, id, "after "+DescribeEvent(ev)); e != nil {
			return e
		}
	}
	return nil
}

func (c *Checker) checkState(i int, id, when string) error {
	r := c.Round(id)
	got, ok := c.net.Nodes[i].M.State(id)
	want := r.Nodes[i].State
	if !ok {
		// The Machine does not know the round: the reference must not
		// have seen it move either.
		if want == protocol.StateSync {
			return nil
		}
		got = 0
	}
	if got != want {
		return fmt.Errorf("node %d round %q %s: Machine state %v, reference %v", i, id, when, got, want)
	}
	return nil
}

func (c *Checker) action(i int, a protocol.Action) error {
	n := c.n
	role := c.net.Nodes[i].Role
	switch a.Kind {
	case protocol.ActState:
		r := c.Round(a.Round)
		nd := &r.Nodes[i]
		if a.From != nd.State {
			return fmt.Errorf("state change from %v, reference says %v", a.From, nd.State)
		}
		if !allowed(role, a.From, a.State) {
			return fmt.Errorf("transition %v -> %v not allowed for a %v", a.From, a.State, role)
		}
		if a.State == protocol.StateAborted {
			if !nd.Aborted && !c.abortAll && !slices.Contains(c.abortOK, a.Round) {
				return fmt.Errorf("round aborted without an abort or a fault whose policy ends it")
			}
			nd.Aborted = true
		}
		nd.State = a.State
		nd.Since, nd.TimedOut = c.net.Now, false

	case protocol.ActRunTask:
		if e := c.steerRunTask(i, a.Round); e != nil { // check_steer.go
			return e
		}
		r := c.Round(a.Round)
		nd := &r.Nodes[i]
		switch {
		case nd.Started:
			return fmt.Errorf("task started twice")
		case r.Ready != n:
			return fmt.Errorf("task started with only %d of %d nodes locally ready", r.Ready, n)
		case i > 0 && !r.Nodes[i-1].Finished:
			return fmt.Errorf("task started before the predecessor's task finished")
		case nd.State != protocol.StateStart:
			return fmt.Errorf("task started in state %v", nd.State)
		case role.HasPred() && (nd.got&readyFwd == 0 || nd.got&completeFwd == 0):
			return fmt.Errorf("task started without READY and COMPLETE from the predecessor")
		case role.HasSucc() && nd.got&startBwd == 0:
			return fmt.Errorf("task started without START from the successor")
		}
		nd.Started = true
		r.Order = append(r.Order, i)

	case protocol.ActRunUndo, protocol.ActUndone:
		return c.undoAction(i, a) // check_undo.go
	case protocol.ActGate, protocol.ActSteer:
		return c.steerAction(i, a) // check_steer.go
	case protocol.ActGrace, protocol.ActBack:
		return c.graceAction(i, a) // check_grace.go
	case protocol.ActSend:
		if a.Msg.Cmd.IsUndo() {
			return c.undoSend(i, a) // check_undo.go
		}
		if a.Msg.Cmd == protocol.SteerLine {
			return c.steerAction(i, a) // check_steer.go
		}
		if a.Msg.Cmd == protocol.Grace || a.Msg.Cmd == protocol.FaultNotice {
			return c.graceSend(i, a) // check_grace.go
		}
		r := c.Round(a.Msg.Round)
		nd := &r.Nodes[i]
		if a.To == protocol.Pred && !role.HasPred() || a.To == protocol.Succ && !role.HasSucc() {
			return fmt.Errorf("send to a missing neighbour")
		}
		if !protocol.ValidRound(a.Msg.Round) {
			return fmt.Errorf("send of an invalid round id")
		}
		bit := msgBit(a.To, a.Msg.Cmd)
		if bit == 0 {
			return fmt.Errorf("%v must not travel towards the %v", a.Msg.Cmd, a.To)
		}
		if a.Resend {
			if !c.Faults {
				return fmt.Errorf("re-send in a fault-free run")
			}
			if nd.sent&bit == 0 {
				return fmt.Errorf("re-send of a message never sent")
			}
			r.Resends++
			return nil
		}
		if nd.sent&bit != 0 {
			return fmt.Errorf("message sent twice (not as a re-send)")
		}
		predReady := !role.HasPred() || nd.got&readyFwd != 0
		switch bit {
		case readyFwd:
			if !nd.LocalReady || !predReady {
				return fmt.Errorf("READY sent before this node was locally ready and had READY from its predecessor")
			}
		case startBwd:
			if !nd.LocalReady || !predReady || role.HasSucc() && nd.got&startBwd == 0 {
				return fmt.Errorf("START sent before this node was ready and (unless Tail) had START")
			}
		case completeFwd:
			if !nd.Finished {
				return fmt.Errorf("COMPLETE sent on before the task finished")
			}
		case completeBwd:
			if !nd.Finished || role.HasSucc() && nd.got&completeBwd == 0 {
				return fmt.Errorf("exit-wave COMPLETE sent before the task finished and (unless Tail) COMPLETE came back")
			}
		}
		nd.sent |= bit
		r.Sends++
		if !c.Faults && r.Sends > 4*(n-1) {
			return fmt.Errorf("more than 4(n-1) = %d messages in a fault-free round", 4*(n-1))
		}

	case protocol.ActDone:
		r := c.Round(a.Round)
		nd := &r.Nodes[i]
		if !nd.State.Terminal() {
			return fmt.Errorf("round over in state %v", nd.State)
		}
		switch a.Outcome {
		case protocol.Done:
			if !nd.Finished || nd.State != protocol.StateDone {
				return fmt.Errorf("done without finishing the task")
			}
			if i+1 < n && !r.Nodes[i+1].Done && !(r.Nodes[i+1].GaveUp && r.Nodes[i+1].State == protocol.StateDone) {
				return fmt.Errorf("done before the successor was done")
			}
			if nd.Done {
				return fmt.Errorf("done twice")
			}
			if role.HasPred() && (c.ev.Kind != protocol.EvDelivered || nd.sent&completeBwd == 0) {
				return fmt.Errorf("done before the final COMPLETE was handed to the predecessor")
			}
			nd.Done = true
		case protocol.NotDelivered:
			if c.ev.Kind == protocol.EvTick {
				d := c.net.Nodes[i].cfg.ExitWaveTimeout
				switch {
				case d <= 0 || c.net.Now-nd.Since < d:
					return fmt.Errorf("final COMPLETE given up %v after the round was done here, ExitWaveTimeout %v", c.net.Now-nd.Since, d)
				case c.net.Up(i - 1):
					return fmt.Errorf("final COMPLETE given up with the link to the predecessor up")
				}
				nd.GaveUp = true
			}
			if !role.HasPred() || !nd.GaveUp || nd.Done || nd.State != protocol.StateDone ||
				c.ev.Kind != protocol.EvUndelivered && c.ev.Kind != protocol.EvTick {
				return fmt.Errorf("not-delivered outcome without giving up on a final COMPLETE")
			}
		case protocol.TaskFailed:
			if !nd.Failed || nd.State != protocol.StateFailed {
				return fmt.Errorf("task-failed outcome without a failed task")
			}
		case protocol.Aborted:
			if !nd.Aborted || nd.State != protocol.StateAborted {
				return fmt.Errorf("aborted outcome without an abort")
			}
			if role.HasSucc() && nd.Finished && nd.sent&completeFwd != 0 && nd.got&completeBwd == 0 && !c.undoKnown(a.Round, i) {
				return fmt.Errorf("aborted outcome for a round whose COMPLETE went on to the successor: the tasks after this node may have run (want no exit wave)")
			}
		case protocol.NoExitWave:
			if !nd.Aborted || nd.State != protocol.StateAborted || !role.HasSucc() || nd.sent&completeFwd == 0 || nd.got&completeBwd != 0 {
				return fmt.Errorf("no-exit-wave outcome for a round whose COMPLETE did not go on to the successor, or whose exit wave came back")
			}
		default:
			return fmt.Errorf("unknown outcome %v", a.Outcome)
		}
	case protocol.ActSave:
		// Persisting changes nothing a neighbour can see.
	case protocol.ActForget:
		// The driver drops what it keeps for a round it is told to
		// forget: a round still running would lose its waiters.
		if nd := &c.Round(a.Round).Nodes[i]; !nd.State.Terminal() && !nd.Done {
			return fmt.Errorf("round forgotten while still running, in state %v", nd.State)
		}
	case protocol.ActTimeout:
		if err := c.timeout(i, a); err != nil {
			return err
		}
		halt := c.net.Nodes[i].cfg.Policy == protocol.PolicyHalt
		switch {
		case a.Timeout == protocol.TimeoutPhase && (halt || a.Wait == protocol.WaitLocal):
			c.abortOK, c.must = append(c.abortOK, a.Round), append(c.must, a.Round)
		case a.Timeout != protocol.TimeoutPhase && halt:
			c.abortAll, c.mustAll = true, true
		}
	case protocol.ActNotice:
		note := a.Msg.Note
		switch {
		case note == nil:
			return fmt.Errorf("a notice action without a notice")
		case c.net.Nodes[i].cfg.Policy == protocol.PolicyHalt:
			c.abortAll, c.mustAll = true, true
		case note.HasRound && (note.Kind == protocol.KindTaskFailed || note.Kind == protocol.KindTaskTimeout):
			c.abortOK, c.must = append(c.abortOK, note.Round), append(c.must, note.Round)
		}
	case protocol.ActOpened:
		nd := &c.Round(a.Round).Nodes[i]
		if nd.State != protocol.StateSync || nd.Started {
			return fmt.Errorf("round opened again")
		}
		if !nd.LocalReady {
			nd.Since, nd.TimedOut = c.net.Now, false
		}
		if a.To != 0 && (a.To != protocol.Pred || !role.HasPred()) {
			return fmt.Errorf("round opened by a %v", a.To)
		}
	case protocol.ActPeerRestarted:
		if !c.Faults {
			return fmt.Errorf("a peer restart reported in a fault-free run")
		}
	default:
		return fmt.Errorf("unknown action kind %d", a.Kind)
	}
	return nil
}

// policyDone checks, at the end of a step of node i, that the fault
// policy ended what it must: under halt, after a silent or unreachable
// neighbour, a notice or a halting report, no round is left unfinished;
// a round whose phase timeout or failed task ends it is over.
func (c *Checker) policyDone(i int) error {
	m := c.net.Nodes[i].M
	if c.mustAll {
		for _, v := range m.View() { // by id
			if !v.State.Terminal() {
				return fmt.Errorf("the halt policy left round %q unfinished", v.Round)
			}
		}
	}
	for _, id := range c.must {
		if st, ok := m.State(id); ok && !st.Terminal() {
			return fmt.Errorf("the fault policy left round %q unfinished in %v", id, st)
		}
	}
	return nil
}

// timeout checks that a timeout node i reported blames no healthy node.
func (c *Checker) timeout(i int, a protocol.Action) error {
	if a.Timeout == protocol.TimeoutGrace {
		return c.graceTimeout(i, a) // check_grace.go: on a tick, or on another node's notice of it
	}
	if c.ev.Kind != protocol.EvTick {
		return fmt.Errorf("timeout reported on an event other than a tick")
	}
	cfg := c.net.Nodes[i].cfg
	j, p := i+1, i // the neighbour, and the pair of links to it
	if a.To == protocol.Pred {
		j, p = i-1, i-1
	}
	switch a.Timeout {
	case protocol.TimeoutSilence:
		if err := c.notInGrace(i, a); err != nil {
			return err
		}
		switch {
		case cfg.Silence <= 0 || a.After < cfg.Silence:
			return fmt.Errorf("silence after %v, Silence %v", a.After, cfg.Silence)
		case j < 0 || j >= c.n || !c.net.Up(p):
			return fmt.Errorf("silence of a neighbour without an up link")
		case !c.net.Hung(j):
			return fmt.Errorf("a live neighbour blamed for silence")
		}
	case protocol.TimeoutUnreachable:
		if err := c.notInGrace(i, a); err != nil {
			return err
		}
		switch {
		case cfg.ConnectTimeout <= 0 || a.After < cfg.ConnectTimeout:
			return fmt.Errorf("unreachable after %v, ConnectTimeout %v", a.After, cfg.ConnectTimeout)
		case j < 0 || j >= c.n:
			return fmt.Errorf("unreachable neighbour that does not exist")
		case c.net.Up(p):
			return fmt.Errorf("a neighbour on an up link blamed as unreachable")
		}
	case protocol.TimeoutPhase:
		nd := &c.Round(a.Round).Nodes[i]
		w := protocol.WaitIn(c.net.Nodes[i].Role, nd.State, nd.LocalReady)
		switch {
		case cfg.PhaseTimeout <= 0 || c.net.Now-nd.Since < cfg.PhaseTimeout:
			return fmt.Errorf("phase timeout %v after the round entered %v, PhaseTimeout %v", c.net.Now-nd.Since, nd.State, cfg.PhaseTimeout)
		case nd.TimedOut:
			return fmt.Errorf("phase timeout twice in one state")
		case a.From != nd.State || a.Wait != w:
			return fmt.Errorf("phase timeout in %v waiting for %v, reference %v waiting for %v", a.From, a.Wait, nd.State, w)
		case nd.State.Terminal():
			return fmt.Errorf("phase timeout of a round over here")
		}
		nd.TimedOut = true
	default:
		return fmt.Errorf("unknown timeout %v", a.Timeout)
	}
	return nil
}

// allowed is the draft's per-role state diagram (section "States" and
// "Protocol Operation") as docs/DESIGN.md reads it: the Head never enters
// WATCH, everyone else passes through it.
func allowed(role protocol.Role, from, to protocol.State) bool {
	if to == protocol.StateAborted {
		return !from.Terminal()
	}
	if from == protocol.StateStart && to == protocol.StateFailed {
		return true
	}
	hasPred := role.HasPred()
	switch from {
	case protocol.StateSync:
		return to == protocol.StateReady
	case protocol.StateReady:
		return hasPred && to == protocol.StateWatch || !hasPred && to == protocol.StateStart
	case protocol.StateWatch:
		return hasPred && to == protocol.StateStart
	case protocol.StateStart:
		return to == protocol.StateComplete
	case protocol.StateComplete:
		return to == protocol.StateDone
	}
	return false
}

// CheckDone checks that round id finished everywhere: every node ran its
// task exactly once, in chain order, and is done; fault-free, exactly
// 4(n-1) messages were sent.
func (c *Checker) CheckDone(id string) error {
	r := c.Round(id)
	n := c.n
	for i := range r.Nodes {
		nd := &r.Nodes[i]
		if !nd.Started || !nd.Finished || !nd.Done || nd.State != protocol.StateDone {
			return fmt.Errorf("round %q: node %d not done: %+v", id, i, *nd)
		}
		if st, _ := c.net.Nodes[i].M.State(id); st != protocol.StateDone {
			return fmt.Errorf("round %q: node %d Machine in state %v", id, i, st)
		}
	}
	if len(r.Order) != n {
		return fmt.Errorf("round %q: %d task runs for %d nodes", id, len(r.Order), n)
	}
	for k, i := range r.Order {
		if k != i {
			return fmt.Errorf("round %q: task order %v", id, r.Order)
		}
	}
	if r.Sends != 4*(n-1) {
		return fmt.Errorf("round %q: %d messages, want 4(n-1) = %d", id, r.Sends, 4*(n-1))
	}
	if !c.Faults && r.Resends != 0 {
		return fmt.Errorf("round %q: %d re-sends without faults", id, r.Resends)
	}
	return nil
}

// CheckFailed checks that round id halted at node f, whose task failed:
// the nodes before it ran and wait for the exit wave, the nodes after it
// never ran.
func (c *Checker) CheckFailed(id string, f int) error {
	r := c.Round(id)
	for i := range r.Nodes {
		nd := &r.Nodes[i]
		st, _ := c.net.Nodes[i].M.State(id)
		switch {
		case i < f:
			if !nd.Finished || nd.Done || st != protocol.StateComplete {
				return fmt.Errorf("round %q failed at %d: node %d: %+v, Machine %v", id, f, i, *nd, st)
			}
		case i == f:
			if !nd.Failed || st != protocol.StateFailed {
				return fmt.Errorf("round %q failed at %d: node %d: %+v, Machine %v", id, f, i, *nd, st)
			}
		default:
			if nd.Started || st.Terminal() {
				return fmt.Errorf("round %q failed at %d: node %d ran or finished: %+v, Machine %v", id, f, i, *nd, st)
			}
		}
	}
	return nil
}

// DescribeEvent formats an event for traces and errors.
func DescribeEvent(ev protocol.Event) string {
	switch ev.Kind {
	case protocol.EvRecv:
		return fmt.Sprintf("recv %v from %v", ev.Msg, ev.From)
	case protocol.EvLocalReady:
		return fmt.Sprintf("local-ready %q", ev.Round)
	case protocol.EvTaskDone:
		return fmt.Sprintf("task-done %q failed=%v", ev.Round, ev.Failed)
	case protocol.EvLinkUp:
		if ev.Msg.Cmd != 0 {
			return fmt.Sprintf("promote %v with %v", ev.From, ev.Msg)
		}
		return fmt.Sprintf("link-up %v", ev.From)
	case protocol.EvAbort:
		return fmt.Sprintf("abort %q", ev.Round)
	case protocol.EvDelivered:
		return fmt.Sprintf("delivered %q", ev.Round)
	case protocol.EvUndelivered:
		return fmt.Sprintf("undelivered %q", ev.Round)
	case protocol.EvTick:
		s := fmt.Sprintf("tick %v", ev.At)
		if ev.Resumed {
			s += " (resumed)"
		}
		return s
	case protocol.EvLinkDown:
		return fmt.Sprintf("link-down %v", ev.From)
	}
	return fmt.Sprintf("event %d", ev.Kind)
}

// DescribeAction formats an action for traces and errors.
func DescribeAction(a protocol.Action) string {
	switch a.Kind {
	case protocol.ActSend:
		s := fmt.Sprintf("send %v to %v", a.Msg, a.To)
		if a.Resend {
			s += " (re-send)"
		}
		return s
	case protocol.ActRunTask:
		return fmt.Sprintf("run task %q", a.Round)
	case protocol.ActState:
		return fmt.Sprintf("%q %v -> %v", a.Round, a.From, a.State)
	case protocol.ActDone:
		return fmt.Sprintf("%q over: %v", a.Round, a.Outcome)
	case protocol.ActSave:
		return fmt.Sprintf("save %q %v", a.Round, a.Record.State)
	case protocol.ActPeerRestarted:
		return fmt.Sprintf("%v restarted: %v", a.To, a.Msg)
	case protocol.ActOpened:
		return fmt.Sprintf("%q opened", a.Round)
	case protocol.ActForget:
		return fmt.Sprintf("%q forgotten", a.Round)
	case protocol.ActTimeout:
		if a.Timeout == protocol.TimeoutPhase {
			return fmt.Sprintf("%q timeout: %v waiting for %v", a.Round, a.From, a.Wait)
		}
		return fmt.Sprintf("timeout: %v %v after %v", a.To, a.Timeout, a.After)
	}
	return fmt.Sprintf("action %d", a.Kind)
}
