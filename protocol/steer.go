package protocol

import (
	"fmt"
	"iter"
	"slices"
	"strconv"
)

// Steering (docs/STEERING.md): people hold a node, make its tasks wait
// for an approval, deny one, pause the chain at the Head or cancel a
// round. Each change is a request to one node, which tells the chain with
// a steering line (an extension line, like the fault notice), so that
// every node knows why the chain stands still.
//
// The machine's part is small and strict:
//   - a gated node starts no task: the round whose turn has come stays in
//     WATCH (at the Head, READY) with its COMPLETE (START) in hand until
//     the gate opens (its state does not move, so nothing runs early and
//     the order of the tasks is the order it always is);
//   - while any node of the chain is gated, as this node knows from the
//     steering lines, no phase timeout runs here: a round that waits on a
//     held node waits for a person, not for a fault. Silence and connect
//     timeouts run on: a held node keeps heartbeating.

// SteerLine is the steering line's command: the project's extension line
// "STEER" (docs/PROTOCOL.md, "Steering lines"). Like FaultNotice it is
// spoken only with Config.Extensions, Valid reports false for it, and
// Message.Steer carries its fields.
const SteerLine Command = 32

// SteerWhat is what a steering line says of its origin.
type SteerWhat uint8

// What a steering line can say.
const (
	// SteerNone: the origin starts its tasks as usual (a hold released,
	// an approval given).
	SteerNone SteerWhat = iota + 1
	// SteerHold: the origin is held: it starts no task until released.
	SteerHold
	// SteerApproval: the origin's task for Round waits for an approval.
	SteerApproval
	// SteerPause: the Head paused the chain: it opens no round, and no
	// node starts a task, until it resumes.
	SteerPause
	// SteerDenied: the origin's task for Round was denied: the round
	// fails there as a failed task does (the fault notice follows). The
	// line carries the reason to every node.
	SteerDenied
	// SteerCancel: the Head cancelled Round: every node ends it, and no
	// task of it starts after the line arrives.
	SteerCancel
	// SteerRetry: the Head reopened Round, which had ended without being
	// done, under its own id: every node that knows it opens it again in
	// the place it had in its order; one whose task for it had succeeded
	// passes it on without running it again.
	SteerRetry
)

var steerNames = [...]string{SteerNone: "none", SteerHold: "hold", SteerApproval: "approval",
	SteerPause: "pause", SteerDenied: "denied", SteerCancel: "cancel", SteerRetry: "retry"}

// String returns the wire spelling: none, hold, approval, pause, denied
// or cancel.
func (w SteerWhat) String() string {
	if w >= SteerNone && w <= SteerRetry {
		return steerNames[w]
	}
	return "SteerWhat(?)"
}

// ParseSteerWhat reads a SteerWhat back from its String; 0 if s names
// none.
func ParseSteerWhat(s string) SteerWhat {
	for w := SteerNone; w <= SteerRetry; w++ {
		if steerNames[w] == s {
			return w
		}
	}
	return 0
}

// Gates reports whether a node in state w starts no task: hold, approval
// and pause. A chain with a gated node runs no phase timeout.
func (w SteerWhat) Gates() bool { return w == SteerHold || w == SteerApproval || w == SteerPause }

// Event reports whether w is an event (denied, cancel) rather than its
// origin's state: an event line does not replace the origin's state line
// (a paused Head that cancels a round stays paused).
func (w SteerWhat) Event() bool { return w == SteerDenied || w == SteerCancel || w == SteerRetry }

// Steer is one steering line: node Origin's state changed at At to What
// (about Round, for an approval, a denial or a cancel), asked for by By,
// for Reason.
type Steer struct {
	Origin string // the node whose state it is (a NoticeName)
	// At is when the change was made, in Unix milliseconds: it increases
	// with every change at Origin, so the latest line of each origin wins
	// and a line seen before is not passed on again.
	At       int64
	What     SteerWhat
	HasRound bool   // Round is set (approval, denied, cancel)
	Round    string // the round, if HasRound ("" is the unnamed round)
	By       string // who asked (a NoticeName; "" unknown)
	Reason   string // why, in words (printable ASCII; "" none)
}

// Bounds of a steering line: the whole line stays within the wire's 256
// bytes (Reason is cut to fit by FitReason).
const (
	MaxSteerLine   = 256
	MaxSteerReason = 120
)

// Len returns the length in bytes of s on the wire, without its LF:
// "STEER ORIGIN AT WHAT ROUND BY[ REASON]".
func (s Steer) Len() int {
	n := len("STEER ") + len(s.Origin) + 1 + len(strconv.FormatInt(s.At, 10)) + 1 + len(s.What.String()) + 1
	if s.HasRound {
		n += 1 + len(s.Round)
	} else {
		n++
	}
	n++
	if s.By == "" {
		n++
	} else {
		n += len(s.By)
	}
	if s.Reason != "" {
		n += 1 + len(s.Reason)
	}
	return n
}

// FitReason returns s with Reason made printable ASCII (other bytes
// become "?"), at most MaxSteerReason bytes, and cut further so that the
// line fits MaxSteerLine.
func (s Steer) FitReason() Steer {
	b := []byte(s.Reason)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	s.Reason = string(b[:min(len(b), MaxSteerReason)])
	if over := s.Len() - MaxSteerLine; over > 0 {
		s.Reason = s.Reason[:max(len(s.Reason)-over, 0)]
	}
	for len(s.Reason) > 0 && s.Reason[len(s.Reason)-1] == ' ' {
		s.Reason = s.Reason[:len(s.Reason)-1]
	}
	return s
}

// Valid reports whether s can travel on the wire.
func (s Steer) Valid() bool {
	if s.Origin == "" || NoticeName(s.Origin) != s.Origin || NoticeName(s.By) != s.By || s.By == "-" || s.Origin == "-" {
		return false
	}
	if s.At <= 0 || s.What < SteerNone || s.What > SteerRetry {
		return false
	}
	if !ValidRound(s.Round) || !s.HasRound && s.Round != "" {
		return false
	}
	switch s.What {
	case SteerApproval, SteerDenied, SteerCancel, SteerRetry:
		if !s.HasRound {
			return false
		}
	}
	if len(s.Reason) > MaxSteerReason || s.Reason != "" && (s.Reason[0] == ' ' || s.Reason[len(s.Reason)-1] == ' ') {
		return false
	}
	for i := 0; i < len(s.Reason); i++ {
		if c := s.Reason[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return s.Len() <= MaxSteerLine
}

// String formats s for logs and golden traces: "hold at C by ann round r7:
// reason".
func (s Steer) String() string {
	str := s.What.String() + " at " + s.Origin
	if s.By != "" {
		str += " by " + s.By
	}
	if s.HasRound {
		str += " round " + roundText(s.Round)
	}
	if s.Reason != "" {
		str += ": " + s.Reason
	}
	return str
}

func roundText(id string) string {
	if id == "" {
		return "(unnamed)"
	}
	return id
}

// The steering events (Steering, Approve, Deny) and actions (ActSteer,
// ActGate). Their values are apart from the machine's others.
const (
	// EvSteer: this node's own steering state changes (Steering).
	EvSteer EventKind = 64 + iota
	// EvApprove: this node's task for Round may start once its turn has
	// come (Config.Approve).
	EvApprove
	// EvDeny: this node's task for Round is denied: the round fails here
	// as a failed task does (Outcome TaskFailed).
	EvDeny
	// EvAlreadyDone: this node's task for Round succeeded before a retry
	// reopened it (AlreadyDone): a restarted node's driver says so again.
	EvAlreadyDone
)

// The steering actions.
const (
	// ActSteer: a steering line (Msg.Steer) arrived from the neighbour on
	// side To for the first time; the machine has passed it on (an
	// ActSend before this action) and applied it (a cancel's round ends
	// in the actions that follow).
	ActSteer ActionKind = 64 + iota
	// ActGate: Round's turn has come at this node, but its task waits
	// for an approval (Wait is WaitApproval; once per round).
	ActGate
	// ActSkip: Round, reopened by a retry, had its task succeed here
	// before: its turn came and it passed the round on without running
	// it again (COMPLETE sent on, or at the Tail the exit wave begun).
	ActSkip
)

// Steering is the event "this node's steering state is now s" (s.Origin
// is this node): the machine sends the line to both neighbours (with
// Config.Extensions) and, for hold and pause, starts no task until a
// later Steering says otherwise. A cancel (at the Head) ends s.Round here
// too; a denial or an approval wait only tells the chain (the machine
// acts on Deny and Approve).
func Steering(s Steer) Event { return Event{Kind: EvSteer, Steer: s} }

// AlreadyDone is the event "this node's task for round succeeded before
// a retry reopened it": a restarted node's driver steps it for each such
// round it journalled (Machine.TaskOK), before the round's turn can come.
func AlreadyDone(round string) Event { return Event{Kind: EvAlreadyDone, Round: round} }

// Approve is the event "this node's task for round may start".
func Approve(round string) Event { return Event{Kind: EvApprove, Round: round} }

// Deny is the event "this node's task for round is denied": the round
// fails here, as a failed task does. Only a round whose task has not
// started here can be denied.
func Deny(round string) Event { return Event{Kind: EvDeny, Round: round} }

// Errors of the steering events.
var (
	ErrBadSteer     = fmt.Errorf("chainsync: invalid steering line")
	ErrNotGated     = fmt.Errorf("chainsync: the round does not wait for an approval here")
	ErrTaskStarted  = fmt.Errorf("chainsync: the round's task has started or ended here")
	ErrUnknownRound = fmt.Errorf("chainsync: no such round at this node")
	// ErrUndoUnderWay: a retry of a round whose undo wave has not ended
	// at this node; retry it once the wave's outcome is known.
	ErrUndoUnderWay = fmt.Errorf("chainsync: the round's undo wave is under way here")
	// ErrRoundsInFlight: a retry at the Head while a round whose task
	// ran there is not over there yet: every node could not place the
	// retried round alike; retry once those rounds are over.
	ErrRoundsInFlight = fmt.Errorf("chainsync: a round whose task ran here is still in flight")
	// ErrCancelled: Rerun of a round cancelled while its task ran: the
	// task is not run again; report its end (TaskDone) instead.
	ErrCancelled = fmt.Errorf("chainsync: the round was cancelled while its task ran here")
)

// maxSteerOrigins bounds the steering origins a Machine remembers.
const maxSteerOrigins = 1024

// steerEntry is the latest steering line of one origin, and the side it
// came from (0: this node's own).
type steerEntry struct {
	s    Steer
	from Side
}

// steering is the machine's part that keeps the steering table: this
// node's own state line and the latest line of every other node. It says
// whether this node is held and whether anything gates the chain; the
// machine applies what a line does to its rounds (a cancel, a retry, a
// gate that opened).
type steering struct {
	role Role
	ext  bool // Config.Extensions: lines are sent

	own    Steer                  // this node's last own state line (What 0: none sent)
	lastAt int64                  // the At of this node's last own line, state or event
	events map[[2]string]int64    // by origin and round: the At of its latest event line
	others map[string]*steerEntry // by origin: the latest line of every other node
	order  []string               // the origins in others, oldest first
	// cancels: the latest cancel lines, oldest first (at most
	// maxCancels; a retry of the round drops its cancel), re-sent when a
	// link comes back so that a node that missed one ends the round too.
	// (A retry line is re-sent by its round: Record.Retry.)
	cancels []steerEntry
}

// maxCancels bounds the cancel lines kept for links that come back.
const maxCancels = 64

// event notes an event line s (from side from, 0: this node's own): a
// cancel is kept for re-sends, and a retry drops its round's cancel.
func (st *steering) event(s Steer, from Side) {
	switch s.What {
	case SteerCancel:
		if len(st.cancels) >= maxCancels {
			st.cancels = slices.Delete(st.cancels, 0, 1)
		}
		st.cancels = append(st.cancels, steerEntry{s: s, from: from})
	case SteerRetry:
		st.cancels = slices.DeleteFunc(st.cancels, func(e steerEntry) bool { return e.s.Round == s.Round })
	}
}

// held reports whether this node starts no task: it is held, or the
// chain is paused.
func (st *steering) held() bool {
	if st.own.What == SteerHold || st.own.What == SteerPause {
		return true
	}
	for _, e := range st.others {
		if e.s.What == SteerPause {
			return true
		}
	}
	return false
}

// gatesAny reports whether this node or another that it knows of is
// gated (held, paused, or waiting for an approval).
func (st *steering) gatesAny() bool {
	if st.own.What.Gates() {
		return true
	}
	for _, e := range st.others {
		if e.s.What.Gates() {
			return true
		}
	}
	return false
}

// lines returns the latest steering line of every node known, this
// node's own first, then by origin.
func (st *steering) lines() []Steer {
	var out []Steer
	if st.own.What != 0 {
		out = append(out, st.own)
	}
	for _, o := range st.order {
		out = append(out, st.others[o].s)
	}
	return out
}

// setOwn takes s, this node's own new line, and sends it to both
// neighbours (with extensions).
func (st *steering) setOwn(s Steer, out []Action) ([]Action, error) {
	if !s.Valid() || s.At <= st.lastAt {
		return out, ErrBadSteer
	}
	st.lastAt = s.At
	if !s.What.Event() {
		st.own = s
	} else {
		st.event(s, 0)
	}
	if st.ext {
		msg := Message{Cmd: SteerLine, Steer: &s}
		for _, side := range [...]Side{Pred, Succ} {
			if hasSide(st.role, side) {
				out = append(out, Action{Kind: ActSend, To: side, Msg: msg})
			}
		}
	}
	return out, nil
}

// recv takes a steering line from the neighbour on side from: the first
// time the origin's line is this new (fresh), it is passed on away from
// from, remembered and reported (ActSteer); the machine then applies it.
func (st *steering) recv(from Side, msg Message, out []Action) (_ []Action, fresh bool, _ error) {
	if !st.ext {
		return out, false, &Violation{From: from, Msg: msg, Reason: "a steering line, an extension line, at a node without extensions", Mismatch: true}
	}
	if msg.Steer == nil || !msg.Steer.Valid() {
		return out, false, &Violation{From: from, Msg: msg, Reason: "malformed steering line"}
	}
	s := *msg.Steer
	if s.Origin == st.own.Origin && st.lastAt != 0 {
		return out, false, nil // this node's own line, come back (a name used twice)
	}
	if s.What == SteerRetry && from == Succ {
		return out, false, nil // a retry travels forward: from the successor, it is its echo (Machine.retryLine)
	}
	if s.What.Event() {
		key := [2]string{s.Origin, s.Round}
		if st.events[key] >= s.At {
			return out, false, nil // seen already: passed on once
		}
		if st.events == nil || len(st.events) >= maxSteerOrigins {
			st.events = make(map[[2]string]int64)
		}
		st.events[key] = s.At
		st.event(s, from)
	} else {
		if e := st.others[s.Origin]; e != nil && e.s.At >= s.At {
			return out, false, nil // seen already, or older: passed on once
		}
		st.remember(s, from)
	}
	if to := other(from); hasSide(st.role, to) {
		out = append(out, Action{Kind: ActSend, To: to, Msg: msg})
	}
	return append(out, Action{Kind: ActSteer, To: from, Msg: msg}), true, nil
}

// remember makes s its origin's latest line.
func (st *steering) remember(s Steer, from Side) {
	if st.others == nil {
		st.others = make(map[string]*steerEntry)
	}
	if e := st.others[s.Origin]; e != nil {
		e.s, e.from = s, from
		return
	}
	if len(st.order) >= maxSteerOrigins {
		// Forget the oldest origin that gates nothing; if all gate, the
		// oldest.
		k := slices.IndexFunc(st.order, func(o string) bool { return !st.others[o].s.What.Gates() })
		k = max(k, 0)
		delete(st.others, st.order[k])
		st.order = slices.Delete(st.order, k, k+1)
	}
	st.others[s.Origin] = &steerEntry{s: s, from: from}
	st.order = append(st.order, s.Origin)
}

// resends returns the steering lines a link to side that came up must
// carry, before any round's re-sends: this node's own state line, and
// every other origin's latest state line that came from the other side
// (a neighbour that restarted learns what gates the chain now, and one
// that missed a release learns of it).
func (st *steering) resends(side Side, out []Action) []Action {
	if !st.ext {
		return out
	}
	if own := st.own; own.What != 0 {
		out = append(out, Action{Kind: ActSend, To: side, Msg: Message{Cmd: SteerLine, Steer: &own}, Resend: true})
	}
	for _, o := range st.order {
		if e := st.others[o]; e.from != side {
			s := e.s
			out = append(out, Action{Kind: ActSend, To: side, Msg: Message{Cmd: SteerLine, Steer: &s}, Resend: true})
		}
	}
	for _, e := range st.cancels {
		if e.from != side {
			s := e.s
			out = append(out, Action{Kind: ActSend, To: side, Msg: Message{Cmd: SteerLine, Steer: &s}, Resend: true})
		}
	}
	return out
}

// gated reports whether round r, whose turn has come, may not start its
// task now; the first time it waits for an approval, ActGate says so.
func (m *Machine) gated(r *round, out []Action) (bool, []Action) {
	if r.taskOK {
		// Reopened by a retry, its task done here before: passed on
		// without running it again, whatever gates this node.
		out = append(out, Action{Kind: ActSkip, Round: r.id})
		r.ran = m.cfg.Undo // its task did run, before the retry: the undo wave's to know
		out = m.set(r, StateComplete, out)
		out = m.rcpt.passOn(r, ReceiptSkipped, out)
		return true, m.advance(r, out)
	}
	if r.stale || m.cfg.Ordered && m.orphans > 0 {
		// The task of the attempt before a retry still runs, or (one
		// task at a time) that of a round that ended meanwhile.
		return true, out
	}
	if m.cfg.Approve && !r.approved {
		if !r.gateNoted {
			r.gateNoted = true
			out = append(out, Action{Kind: ActGate, Round: r.id, Wait: WaitApproval})
		}
		return true, out
	}
	return m.steer.held(), out
}

// Gate returns what round waits for at this node beyond its messages:
// WaitHold if its turn has come and this node is held or paused,
// WaitApproval if it waits for an approval, WaitNothing otherwise.
func (m *Machine) Gate(round string) Wait {
	r := m.rounds.Get(round)
	if r == nil || !m.q.turnCame(r) {
		return WaitNothing
	}
	if m.cfg.Approve && !r.approved {
		if m.steer.held() {
			return WaitHold
		}
		return WaitApproval
	}
	if m.steer.held() {
		return WaitHold
	}
	return WaitNothing
}

// Steers returns the latest steering line of every node this node knows
// of, its own first, then by origin: for status reports.
func (m *Machine) Steers() []Steer { return m.steer.lines() }

// Approved reports whether round was approved here (Config.Approve).
func (m *Machine) Approved(round string) bool {
	r := m.rounds.Get(round)
	return r != nil && r.approved
}

// steerStep applies the steering events, and a steering line from a
// neighbour (EvSteer with Msg, from Recv).
func (m *Machine) steerStep(ev Event, out []Action) ([]Action, error) {
	switch ev.Kind {
	case EvSteer:
		s, by := ev.Steer, Side(0)
		if ev.Msg.Cmd == SteerLine {
			var fresh bool
			var err error
			if out, fresh, err = m.steer.recv(ev.From, ev.Msg, out); err != nil {
				return out, err
			}
			s, by = *ev.Msg.Steer, Pred
			if s.What == SteerRetry {
				return m.retryLine(ev.From, s, fresh, out), nil
			}
			if !fresh {
				return out, nil
			}
		} else {
			if r := m.rounds.Get(s.Round); s.What == SteerRetry && r != nil && r.undoUnderWay() {
				return out, ErrUndoUnderWay
			}
			if s.What == SteerRetry && inFlight(m.rounds.All()) {
				return out, ErrRoundsInFlight
			}
			var err error
			if out, err = m.steer.setOwn(s, out); err != nil {
				return out, err
			}
		}
		switch s.What {
		case SteerCancel:
			if r := m.rounds.Get(s.Round); r != nil {
				r.own().cancel = s // kept for re-sends after a restart
				m.moved.add(r)
			}
			switch r := m.rounds.Get(s.Round); {
			case r == nil || r.state.Terminal():
			case r.state == StateStart:
				// Its task runs here: the round ends when it ends, so
				// no later task starts beside it (taskDone).
				r.cancelled = true
				m.moved.add(r)
			default:
				out = m.abortRound(r, out)
			}
		case SteerRetry:
			out = m.retryRound(s, by, out)
		}
		return m.ungate(out), nil
	case EvApprove:
		r := m.rounds.Get(ev.Round)
		if err := beforeTask(r); err != nil {
			return out, err
		}
		r.approved = true
		return m.ungate(out), nil
	case EvDeny:
		r := m.rounds.Get(ev.Round)
		if err := beforeTask(r); err != nil {
			return out, err
		}
		out = m.set(r, StateFailed, out)
		return m.finish(r, TaskFailed, out), nil
	case EvAlreadyDone:
		// Before its task's turn, or ended (a later retry passes it on).
		if r := m.rounds.Get(ev.Round); r != nil && (r.state.Terminal() || r.state < StateStart) {
			r.taskOK = true
			return m.ungate(out), nil
		}
		return out, nil
	}
	return out, fmt.Errorf("chainsync: unknown event kind %d", ev.Kind)
}

// ungate moves every unfinished round as far as its facts allow: after a
// gate opened (a release, an approval, a resume).
func (m *Machine) ungate(out []Action) []Action {
	for _, r := range m.unfinished() {
		st := r.state
		out = m.advance(r, out)
		if r.state != st {
			m.moved.add(r)
		}
	}
	return out
}

// regate turns phase timeouts off while some node is gated, or one of
// this node's rounds waits at its gate, and, when the last gate opens,
// re-arms every unfinished round's from now. Called at the end of every
// step.
func (m *Machine) regate() {
	now := m.steer.gatesAny()
	if !now && (m.cfg.Approve || m.steer.held()) {
		if m.cfg.Ordered {
			// Only the round at the task turn can stand at the gate.
			m.q.taskTurn(nil)
			now = m.q.taskAt < len(m.q.order) && m.q.turnCame(m.q.order[m.q.taskAt])
		} else {
			for _, r := range m.rounds.All() {
				if !r.state.Terminal() && m.q.turnCame(r) {
					now = true
					break
				}
			}
		}
	}
	if now == m.clock.suspended {
		return
	}
	m.clock.suspended = now
	for _, r := range m.rounds.All() {
		if !r.over {
			exitBy := r.exitBy
			m.clock.arm(r)
			if exitBy != 0 && r.exitBy != 0 {
				r.exitBy = exitBy // a gate does not move the exit wave's deadline
			}
		}
	}
}

// TaskOK reports whether round, reopened by a retry, had its task
// succeed here before (it will be passed on without running again).
func (m *Machine) TaskOK(round string) bool {
	r := m.rounds.Get(round)
	return r != nil && r.taskOK
}

// undoUnderWay reports whether r's undo wave has begun and its outcome
// is not known here yet.
func (r *round) undoUnderWay() bool {
	return r.ext().undo.Phase != PhaseNone && !r.ext().undo.Ended
}

// taskRan reports whether r's task succeeded here (at a node in role):
// its COMPLETE went on to the successor (at the Tail, back to the
// predecessor), the round is done, or the task succeeded after a cancel
// (ran).
func (r *round) taskRan(role Role) bool {
	switch {
	case r.taskOK || r.state == StateDone || r.ran:
		return true
	case role.HasSucc():
		return r.lastSucc == Complete
	}
	return r.lastPred == Complete
}

// retryRound reopens round s.Round (the retry line s from the Head; by: Pred where the
// line came from it, 0 at the Head): a round this node knows and that
// ended (an unfinished one is ended first) starts again in SYNC, with
// its readiness, in the place it had in the order: before every round
// whose task has not run here yet. If its task had succeeded here, and
// the undo wave did not undo it, it is passed on without running again
// (ActSkip); work that was undone runs again. The undo stays on record
// (Record.Prior). ActOpened says it is open.
func (m *Machine) retryRound(s Steer, by Side, out []Action) []Action {
	id := s.Round
	r := m.rounds.Get(id)
	switch {
	case r == nil:
		return out // never seen here: its READY opens it as a new round
	case r.ext().retry.At >= s.At:
		return out // this retry reopened it already (a re-send)
	}
	switch {
	case r.over:
	case r.state == StateStart:
		// Its task of the attempt before still runs here (the round
		// ended elsewhere, or a cancel waits for the task to end): the
		// round does not end under it. The retry takes the round over,
		// and its own task waits for that one's end (stale, taskDone).
		r.taskOpen = true
		m.orphans++
		m.active-- // counted again below, as the retry's
	case !r.state.Terminal():
		out = m.abortRound(r, out)
	case r.ext().undo.Held != 0:
		// Its undo wave's outcome is still to come here: the retry
		// ends the wait (a retry at the Head waits for the outcome).
		o := r.ext().undo.Held
		r.own().undo.Held, r.own().undo.Ended = 0, true
		out = m.finish(r, o, out)
	default:
		// Done here, its final COMPLETE not handed over: it is.
		r.delivered = true
		out = m.finish(r, Done, out)
	}
	// Work that the undo wave undid (or tried to) is not done: the task
	// runs again. Work the wave left (it stopped before this node) is.
	undone := r.ext().undo.Phase == PhaseDone || r.ext().undo.Phase == PhaseFailed || r.ext().undo.Phase == PhaseRunning
	ok := r.taskRan(m.cfg.Role) && !undone
	prior := r.ext().prior
	if undone {
		prior = r.ext().undo
	}
	// A task of the attempt before that still runs here holds the
	// retry's own until it ends (taskDone).
	stale := r.stale || r.taskOpen
	*r = round{id: id, state: StateSync, localReady: r.localReady, seq: r.seq, taskOK: ok, retries: r.retries + 1,
		more: &roundMore{prior: prior, retry: s}, stale: stale, succRetried: !m.cfg.Role.HasSucc()}
	m.active++
	if k := slices.Index(m.finished, id); k >= 0 {
		m.finished = slices.Delete(m.finished, k, k+1)
	}
	for _, o := range m.q.requeue(r) {
		m.moved.add(o)
	}
	m.moved.add(r)
	m.clock.arm(r)
	out = append(out, Action{Kind: ActOpened, Round: id, To: by})
	return m.advance(r, out)
}

// retryLine takes a retry line from side from (fresh: the first time it
// came). From the predecessor, the round is reopened here (once) and the
// line goes back, so that the predecessor knows every message of the
// round from here is of the retry: a message of the attempt before, re-
// sent when a link came back, can cross the line on its way. From the
// successor, it is that line coming back: the round takes the
// successor's messages again.
func (m *Machine) retryLine(from Side, s Steer, fresh bool, out []Action) []Action {
	r := m.rounds.Get(s.Round)
	if from == Succ {
		if r != nil && r.ext().retry.At == s.At {
			r.succRetried = true
		}
		return out
	}
	// Taken before: this node reopened the round for this retry already
	// (the line is a re-send, or this node restarted and no longer knows
	// the line, though its record does).
	taken := r != nil && r.ext().retry.At >= s.At
	if fresh {
		out = m.retryRound(s, Pred, out)
		out = m.ungate(out)
	}
	if r := m.rounds.Get(s.Round); r == nil || r.ext().retry.At >= s.At {
		out = append(out, Action{Kind: ActSend, To: Pred, Msg: Message{Cmd: SteerLine, Steer: &s}, Resend: !fresh})
		if r != nil && taken && r.ext().retry.At == s.At && r.lastPred != 0 && !r.lostPred {
			// The predecessor asks again (it restarted, or lost the
			// echo): what was sent it since may have been dropped, as
			// of the attempt before the echo it had not yet.
			out = append(out, Action{Kind: ActSend, To: Pred, Msg: Message{Cmd: r.lastPred, Round: r.id}, Resend: true})
		}
	}
	return out
}

// inFlight reports whether one of rounds whose task started here (the
// one to retry included) is not over here yet.
func inFlight(rounds iter.Seq2[string, *round]) bool {
	for _, r := range rounds {
		if !r.over && (r.state >= StateStart || r.taskOpen || r.stale) {
			return true
		}
	}
	return false
}

// beforeTask checks that r (nil: unknown) has not started its task here:
// an approval or a denial acts on nothing else.
func beforeTask(r *round) error {
	switch {
	case r == nil:
		return ErrUnknownRound
	case r.state >= StateStart:
		return ErrTaskStarted
	}
	return nil
}
