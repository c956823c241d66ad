package chainsync

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Status is how a round ended at this node.
type Status uint8

// Round statuses.
const (
	// StatusDone: this node's part of the round finished normally (the
	// Head: COMPLETE came back; others: the exit wave was forwarded).
	StatusDone Status = iota + 1
	// StatusTaskFailed: the local task returned an error; the chain halts
	// here (no COMPLETE was sent on).
	StatusTaskFailed
	// StatusFault: a configured timeout fired; the round was aborted here.
	StatusFault
	// StatusStopped: the node was closed before the round finished.
	StatusStopped
	// StatusUndelivered: a fault ended the round after this node's task
	// was done and its COMPLETE went on to the successor, before the exit
	// wave came back. Nothing is known of the nodes after: their tasks may
	// have run (Err, an *UndeliveredError, names them). Not a failure of
	// this node's part; an operator asks those nodes (or reads their
	// journals) before doing anything again.
	StatusUndelivered
	// StatusCancelled: the round was cancelled at the Head (Node.Cancel;
	// Err is a *CancelledError): no task of it started here after the
	// cancel arrived.
	StatusCancelled
)

// String returns "done", "task failed", "fault", "stopped",
// "undelivered" or "cancelled".
func (s Status) String() string {
	switch s {
	case StatusDone:
		return "done"
	case StatusTaskFailed:
		return "task failed"
	case StatusFault:
		return "fault"
	case StatusStopped:
		return "stopped"
	case StatusUndelivered:
		return "undelivered"
	case StatusCancelled:
		return "cancelled"
	}
	return "Status(?)"
}

// Result is the outcome of one round at this node.
type Result struct {
	Round  string
	Status Status
	// Err says why, for every status but StatusDone: the task's error
	// (wrapped in *TaskError), the fault (*FaultError), what is not known
	// (*UndeliveredError, which wraps the fault) or ErrStopped.
	Err error
	// Undo, for a round that failed with Config.Undo, says how its undo
	// wave ended, e.g. "failed at C (task exited 1); undone by B, A"
	// (docs/UNDO.md).
	Undo string
}

// ErrStopped is the error of rounds unfinished when the node was closed.
var ErrStopped = errors.New("chainsync: node stopped")

// TaskError is a failed local task.
type TaskError struct {
	Round   string
	Err     error
	Timeout bool // the task ran past Config.TaskTimeout and was stopped
}

// Error describes the failure in one line for logs.
func (e *TaskError) Error() string {
	return fmt.Sprintf("chainsync: task for round %s failed: %v", roundName(e.Round), e.Err)
}

// Unwrap returns the task's own error.
func (e *TaskError) Unwrap() error { return e.Err }

// FaultError is a fault the node detected (a configured timeout).
type FaultError struct {
	Round  string
	State  protocol.State // the round's state when the fault was detected
	Kind   FaultKind
	Side   protocol.Side // the blamed neighbour's side; 0 for this node's own faults
	Peer   string        // the blamed neighbour's name or address
	Reason string
	After  time.Duration // how long the node waited before calling it a fault (0: not a wait)
	// Origin and Cause, for a fault another node reported (FaultChainHalted,
	// FaultChainFault): the node that reported it and its kind there. Peer
	// is then the node that one blamed, Side 0: a node that passes a
	// notice on is never the culprit.
	Origin string
	Cause  FaultKind
}

// Error describes the failure in one line for logs.
func (e *FaultError) Error() string {
	st := "state " + e.State.String()
	if e.State == 0 {
		st = "not open here"
	}
	what := string(e.Kind) + " fault"
	if e.Kind == FaultChainFault || e.Kind == FaultChainHalted {
		// Not a fault of this node's: another node reported it (the
		// reason says which), and "chain-fault fault" reads as a typo.
		what = "fault elsewhere in the chain (" + string(e.Kind) + ")"
	}
	s := fmt.Sprintf("chainsync: %s in round %s (%s): %s", what, roundName(e.Round), st, e.Reason)
	if e.State == 0 && e.Round == "" {
		// A fault of a link, not of a round (a neighbour configured
		// differently, a second node in one place): no round to name.
		s = fmt.Sprintf("chainsync: %s: %s", what, e.Reason)
	}
	switch {
	case e.Side != 0 && e.Peer != "":
		s += fmt.Sprintf(" (blames the %s %s)", e.Side, quoteName(e.Peer))
	case e.Side != 0:
		s += fmt.Sprintf(" (waiting on the %s side)", e.Side)
	}
	if e.After > 0 {
		s += fmt.Sprintf(" after %v", e.After)
	}
	return s
}

// quoteName quotes a node's name where a sentence could misread it (a
// number, or a name with spaces or punctuation); the fields that carry a
// name (Fault.Peer, the hooks' CHAINSYNC_PEER) keep it as it is.
func quoteName(name string) string {
	if _, err := strconv.ParseFloat(name, 64); err == nil || strings.ContainsAny(name, " \t,;()\"'") {
		return strconv.Quote(name)
	}
	return name
}

// fault is e as a Fault, for Snapshot, traces and the log.
func (e *FaultError) fault() Fault {
	return Fault{Kind: e.Kind, Round: e.Round, Side: e.Side, Peer: e.Peer, Origin: e.Origin, Cause: e.Cause, Err: e.Error()}
}

// reason is the fault's reason alone, without the "chainsync: KIND fault
// in round R" prefix of Err, for a log line that names the kind itself.
func (f Fault) reason() string {
	if _, r, ok := strings.Cut(f.Err, "): "); ok {
		if i := strings.LastIndex(r, " (blames"); i >= 0 {
			r = r[:i]
		}
		return r
	}
	return f.Err
}

func roundName(r string) string {
	if r == "" {
		return "(unnamed)"
	}
	return r
}

// TraceKind says what a TraceEvent reports.
type TraceKind uint8

// Trace event kinds.
const (
	TraceSent        TraceKind = iota + 1 // Msg was written to Side
	TraceReceived                         // Msg arrived from Side
	TraceState                            // Round moved From -> To
	TraceTaskStart                        // the task of Round started
	TraceTaskEnd                          // the task of Round ended (Err if it failed)
	TraceLinkUp                           // the link to Side is up (Peer)
	TraceLinkDown                         // the link to Side is down (Err)
	TraceViolation                        // Side sent bad input (Err); the connection was closed
	TraceRoundDone                        // Round is over here with Status
	TraceFault                            // a fault was detected: Fault says which, Side/Peer whom it blames
	TraceRoundOpened                      // this node heard of Round for the first time (Ready, or the predecessor's READY)
)

// TraceEvent is one thing that happened at a node, for Config.Trace.
type TraceEvent struct {
	Time   time.Time
	Node   string // Config.Name
	Kind   TraceKind
	Side   protocol.Side
	Peer   string // remote address, where known
	Round  string
	Msg    protocol.Message
	Resend bool // TraceSent: sent again after a reconnect (a connection had carried it before)
	Queued bool // TraceSent: the link was down; it goes out on reconnect
	From   protocol.State
	To     protocol.State
	Status Status
	Fault  FaultKind // TraceFault
	Origin string    // TraceFault: the reporting node, for a fault another node found; TraceSteer: whose state
	Steer  string    // TraceSteer: hold, approval, approved, pause, denied, cancel or none (steer.go)
	// Again, on a TraceFault: a further report of a liveness fault (a
	// neighbour silent or unreachable) whose blamed node has a fault in
	// force here already; it pages nobody (liveness.go).
	Again bool
	Err   error
	// Count, on a TraceViolation, is how many violations this event stands
	// for when more than one: under a flood only a sample is traced one by
	// one, and one event per interval counts the rest (Err says so).
	Count int
	// Resumed, on a TraceFault, says the fault ended its round before this
	// process started: the journal remembered it. It is traced once (the
	// --on-fault hook hears of it, in case the process that found it died
	// first) but it is not this process's fault: counters skip it.
	Resumed bool
}

// FaultKind names a kind of fault, as the --on-fault hook's CHAINSYNC_FAULT
// and the status endpoint spell it.
type FaultKind string

// The kinds of fault a node reports.
const (
	FaultTaskFailed          FaultKind = "task-failed"           // this node's task failed
	FaultTaskTimeout         FaultKind = "task-timeout"          // this node's task ran past its timeout
	FaultPeerSilent          FaultKind = "peer-silent"           // a neighbour sent nothing for 3 heartbeat intervals
	FaultPeerUnreachable     FaultKind = "peer-unreachable"      // a neighbour stayed disconnected past the connect timeout
	FaultPeerRestarted       FaultKind = "peer-restarted"        // a neighbour came back without its state
	FaultExitWaveUndelivered FaultKind = "exit-wave-undelivered" // the final COMPLETE could not be handed to the predecessor
	FaultPhaseTimeout        FaultKind = "phase-timeout"         // a round waited too long in one state
	FaultConfigMismatch      FaultKind = "config-mismatch"       // a neighbour runs other rounds, or other extensions, or has another place or chain
	FaultDuplicateNode       FaultKind = "duplicate-node"        // two live processes claim one place in the chain
	FaultAborted             FaultKind = "aborted"               // a round found aborted on resume, with no fault recorded (an older journal)
	// FaultChainHalted: another node reported a fault (Fault.Origin, its
	// kind Fault.Cause) and, under FaultHalt, the chain halts here too.
	FaultChainHalted FaultKind = "chain-halted"
	// FaultChainFault: another node reported a fault; under FaultWait it is
	// only reported here.
	FaultChainFault FaultKind = "chain-fault"
)

// Fault is one fault a node detected: what, in which round, and whom it
// blames (Side and Peer are empty for this node's own faults).
type Fault struct {
	Kind  FaultKind
	Round string
	Side  protocol.Side // 0: this node itself
	Peer  string        // the blamed neighbour's name (or address when no name is known)
	// Origin and Cause: for FaultChainHalted and FaultChainFault, the node
	// that reported the fault and its kind there (Peer is the node it
	// blamed); for a fault this node found, Origin is empty.
	Origin string
	Cause  FaultKind
	Time   time.Time
	Err    string // the fault in words

	// ran: for FaultChainHalted, what the halt means for this node's own
	// task of the round, in words for the log ("" : it runs none).
	ran string
	// why: for this node's own failed task, the task's error in its own
	// words ("disk full"), which the fault's notice carries to the chain.
	why string
}
