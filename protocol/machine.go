package protocol

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/internal/hot"
)

// State is a round's state at one node: the draft's five states, plus the
// terminal states a round ends in.
type State uint8

// Round states. StateSync to StateComplete are the draft's (section
// "States"); the rest are terminal.
const (
	StateSync     State = iota + 1 // waiting for READY from the predecessor and/or local readiness
	StateReady                     // READY sent to the successor; waiting for START
	StateWatch                     // START sent to the predecessor; waiting for its COMPLETE
	StateStart                     // the local task is running
	StateComplete                  // task done, COMPLETE sent; waiting for the exit wave
	StateDone                      // this node's part of the round is finished
	StateFailed                    // the local task failed; the chain halts here
	StateAborted                   // the driver aborted the round (a fault or a stop)
)

var stateNames = [...]string{
	StateSync: "SYNC", StateReady: "READY", StateWatch: "WATCH", StateStart: "START",
	StateComplete: "COMPLETE", StateDone: "DONE", StateFailed: "FAILED", StateAborted: "ABORTED",
}

// String returns the state's name in upper case, as the draft writes it.
func (s State) String() string {
	if s >= StateSync && s <= StateAborted {
		return stateNames[s]
	}
	return "State(?)"
}

// Terminal reports whether a round in state s is over at this node.
func (s State) Terminal() bool { return s >= StateDone }

// Role is a node's position in the chain, inferred from which neighbours it
// has (draft section "Topology and Configuration").
type Role uint8

// The four roles. Single is a one-node chain: both Head and Tail.
const (
	Head Role = iota + 1
	Middle
	Tail
	Single
)

// RoleOf returns the role of a node with or without a predecessor and a
// successor.
func RoleOf(hasPred, hasSucc bool) Role {
	switch {
	case hasPred && hasSucc:
		return Middle
	case hasPred:
		return Tail
	case hasSucc:
		return Head
	}
	return Single
}

// String returns "head", "middle", "tail" or "single".
func (r Role) String() string {
	switch r {
	case Head:
		return "head"
	case Middle:
		return "middle"
	case Tail:
		return "tail"
	case Single:
		return "single"
	}
	return "Role(?)"
}

// HasPred reports whether a node in this role has a predecessor.
func (r Role) HasPred() bool { return r == Middle || r == Tail }

// HasSucc reports whether a node in this role has a successor.
func (r Role) HasSucc() bool { return r == Head || r == Middle }

// EventKind says what happened.
type EventKind uint8

// The events a Machine accepts.
const (
	EvRecv       EventKind = iota + 1 // a message arrived from a neighbour
	EvLocalReady                      // the application is locally ready for a round
	EvTaskDone                        // the local task of a round finished (Failed says how)
	EvLinkUp                          // the link to a neighbour was (re-)established
	EvAbort                           // the driver gives up on a round (timeout, stop)
	EvReport                          // this node reports a fault: tell the neighbours (Note)
	// EvDelivered: the round's final (exit-wave) COMPLETE was handed to a
	// live connection to the predecessor; only then is the round over at
	// a node that has one.
	EvDelivered
	// EvUndelivered: the driver gives up handing the round's final
	// COMPLETE to the predecessor (Config.ExitWaveTimeout in package
	// chainsync): the round ends with Outcome NotDelivered.
	EvUndelivered
	// EvTick: the time is Event.At; the machine judges its timeouts
	// (Tick).
	EvTick
	// EvLinkDown: the connection to the neighbour on side From is gone
	// (LinkDown).
	EvLinkDown
)

// Policy is what a fault does to the rounds in progress (Config.Policy).
type Policy uint8

// The fault policies.
const (
	// PolicyHalt: a fault ends the rounds it touches here; a neighbour's
	// silence or unreachability, a fault notice from another node and a
	// fault this node reports with Halt ends every unfinished round.
	PolicyHalt Policy = iota
	// PolicyWait: a fault is reported and the rounds keep waiting, except
	// that a round whose task failed somewhere ends (it can never
	// complete) and a round this node never claimed ends at its phase
	// timeout.
	PolicyWait
)

// The notice kinds the machine acts on under PolicyWait: a task failed,
// so its round can never complete.
const (
	KindTaskFailed  = "task-failed"
	KindTaskTimeout = "task-timeout"
)

// Event is one input to Machine.Step. Build it with Recv, LocalReady,
// TaskDone, LinkUp, Promote, Abort, Delivered, Undelivered, Tick or
// LinkDown.
type Event struct {
	Kind   EventKind
	From   Side    // EvRecv: who sent it; EvLinkUp, EvLinkDown: which link
	Msg    Message // EvRecv; EvLinkUp from Promote: the new connection's first line
	Round  string  // EvLocalReady, EvTaskDone, EvAbort, EvDelivered, EvUndelivered
	Failed bool    // EvTaskDone: the task reported failure
	Note   Notice  // EvReport
	// Halt (EvReport): under PolicyHalt the fault ends every unfinished
	// round here (a configuration mismatch); the notice is sent only with
	// Config.Extensions.
	Halt bool
	// At is when the event happened, on the driver's monotonic clock (any
	// fixed origin, never 0 once known); 0: the driver keeps no time. Any
	// event may carry it; the timeouts need it (see Tick).
	At time.Duration
	// Heard, indexed by Side: EvTick: when a line last arrived on each
	// current link; EvLinkDown: on the dying one (0: never).
	Heard [3]time.Duration
	// Resumed (EvTick): the driver itself was stopped or starved; the
	// neighbours' silence counts from now.
	Resumed bool
	// Steer (EvSteer): this node's new steering state (steer.go).
	Steer Steer
	// Why (EvTaskDone that failed, EvUndoDone): why, for the undo wave
	// (undo.go).
	Why Failure
}

// RoundOf returns the round ev is about, and false for EvLinkUp, which
// is about every round on that link (a Promote event is about its first
// line's round).
func (ev Event) RoundOf() (string, bool) {
	switch ev.Kind {
	case EvRecv:
		if ev.Msg.Cmd == FaultNotice || ev.Msg.Cmd == SteerLine || ev.Msg.Cmd == Grace {
			return "", false // a notice changes no round (a cancel's is saved as moved)
		}
		return ev.Msg.Round, true
	case EvLinkUp:
		if ev.Msg.Cmd != 0 && ev.Msg.Cmd != FaultNotice && ev.Msg.Cmd != Grace {
			return ev.Msg.Round, true // Promote
		}
	case EvLocalReady, EvTaskDone, EvAbort, EvDelivered, EvUndelivered, EvApprove, EvDeny, EvAlreadyDone, EvUndoDone,
		EvReceiptSigned, EvReceiptHanded:
		return ev.Round, true
	}
	return "", false
}

// Recv is the event "msg arrived from the neighbour on side from".
func Recv(from Side, msg Message) Event { return Event{Kind: EvRecv, From: from, Msg: msg} }

// LocalReady is the event "this node is locally ready for round".
func LocalReady(round string) Event { return Event{Kind: EvLocalReady, Round: round} }

// TaskDone is the event "the task of round finished"; failed means it failed.
func TaskDone(round string, failed bool) Event {
	return Event{Kind: EvTaskDone, Round: round, Failed: failed}
}

// LinkUp is the event "the link to side is (re-)established".
func LinkUp(side Side) Event { return Event{Kind: EvLinkUp, From: side} }

// Promote is the event "a new connection on side's link, whose first
// line is msg, is to replace the link": the machine takes msg as from
// Recv and, if it accepts it, re-sends on the link what LinkUp would
// (less what its answer to msg sends anyway, and nothing for a round
// whose sender msg shows restarted without its state). If msg is a
// violation nothing is sent and nothing changes: the caller keeps the
// old connection and closes the new one.
func Promote(side Side, msg Message) Event { return Event{Kind: EvLinkUp, From: side, Msg: msg} }

// Abort is the event "the driver gives up on round".
func Abort(round string) Event { return Event{Kind: EvAbort, Round: round} }

// Report is the event "this node reports the fault n": the machine sends
// the notice to both neighbours (Config.Extensions only) and remembers it,
// so that it is not passed on again when it comes back.
func Report(n Notice) Event { return Event{Kind: EvReport, Note: n} }

// ReportHalt is Report for a fault that, under PolicyHalt, ends every
// unfinished round here; without Config.Extensions it sends nothing and
// still applies the policy.
func ReportHalt(n Notice) Event { return Event{Kind: EvReport, Note: n, Halt: true} }

// Delivered is the event "round's final COMPLETE was handed to a live
// connection to the predecessor".
func Delivered(round string) Event { return Event{Kind: EvDelivered, Round: round} }

// Undelivered is the event "the driver gives up handing round's final
// COMPLETE to the predecessor".
func Undelivered(round string) Event { return Event{Kind: EvUndelivered, Round: round} }

// ActionKind says what the caller must do.
type ActionKind uint8

// The actions a Machine asks for.
const (
	ActSend    ActionKind = iota + 1 // send Msg to the neighbour on side To
	ActRunTask                       // run the local task of Round, then report EvTaskDone
	ActState                         // Round moved from From to State (for logs and traces)
	ActDone                          // Round is over at this node with Outcome
	// ActSave: write Record to durable storage before carrying out any
	// later action of the same step (Config.Durable only). A step's saves
	// come first among its actions.
	ActSave
	// ActPeerRestarted: the neighbour on side To sent Msg, which is older
	// than the last message it sent for Round: it restarted and lost its
	// state (docs/DESIGN.md, "Restarts and durable state"). Nothing was
	// answered, and nothing more is re-sent to it for Round.
	ActPeerRestarted
	// ActNotice: a fault notice (Msg.Note) arrived from the neighbour on
	// side To, for the first time; the machine has passed it on to the
	// other side (an ActSend before this action). The driver reports it;
	// the rounds it ends under Config.Policy follow (ActDone, Aborted).
	// For a notice about a round this node knows, Round is that round,
	// From its state here before the notice, and Started says whether
	// this node's task of it had started (From START: it runs still;
	// COMPLETE or after: it succeeded; FAILED: it failed), so that what
	// the driver says of this node's task is true.
	ActNotice
	// ActOpened: Round is new at this node, in StateSync: opened by the
	// predecessor's READY (To is Pred) or by local readiness (To is 0).
	// It comes before the step's other actions for Round.
	ActOpened
	// ActTimeout: a timeout ran out (Timeout says which; see TimeoutKind).
	// The driver reports the fault; the machine applies Config.Policy
	// itself, in the actions that follow: under PolicyHalt a phase
	// timeout aborts its round and a silent or unreachable neighbour
	// every unfinished round (ActState to StateAborted, then ActDone).
	ActTimeout
	// ActForget: the machine no longer keeps Round, a finished round
	// beyond the last Config.KeepFinished: the driver drops whatever it
	// keeps for it too, so the machine's table decides which rounds a
	// node remembers. A later message for Round is one for a round this
	// node does not know. It follows the ActDone of the round whose end
	// pushed Round out.
	ActForget
)

// Outcome is how a round ended at this node.
type Outcome uint8

// Round outcomes.
const (
	Done       Outcome = iota + 1 // this node's part of the round finished normally
	TaskFailed                    // the local task failed; no COMPLETE was sent on
	Aborted                       // the driver aborted the round
	// NotDelivered: this node's part finished (state DONE) but its final
	// COMPLETE was never handed to the predecessor (EvUndelivered).
	NotDelivered
	// NoExitWave: the round was aborted after this node's task was done
	// and its COMPLETE went on to the successor (state COMPLETE), before
	// the exit wave came back: the tasks after this node may have run.
	NoExitWave
)

// String returns "done", "task failed", "aborted", "not delivered" or
// "no exit wave".
func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case TaskFailed:
		return "task failed"
	case Aborted:
		return "aborted"
	case NotDelivered:
		return "not delivered"
	case NoExitWave:
		return "no exit wave"
	}
	return "Outcome(?)"
}

// Action is one output of Machine.Step.
type Action struct {
	Kind    ActionKind
	To      Side    // ActSend
	Msg     Message // ActSend
	Resend  bool    // ActSend: a re-send after a link came back, or a reply to a duplicate
	Round   string  // ActRunTask, ActState, ActDone, ActOpened, ActForget
	From    State   // ActState
	State   State   // ActState: the new state
	Wait    Wait    // ActState: what the round waits for on entering State
	Outcome Outcome // ActDone
	// ActSave: the round's record to write, the step's own (nil for
	// other kinds: a pointer, so that every action of every step does not
	// carry a record's 576 bytes for the one kind that has one).
	Record *Record
	// ActTimeout: which timeout; To is the neighbour it is about (for a
	// phase timeout, the side the round waits on, 0 for this node), From
	// and Wait the round's state and what it waited for, After how long.
	// For a silent or unreachable neighbour, Round and From name the
	// first unfinished round (in the order this node learned them), "" and
	// 0 if none.
	// ActState to StateAborted: From is the state the round was in.
	Timeout TimeoutKind
	After   time.Duration
	// Wave: ActRunUndo, ActUndone (undo.go).
	Wave Wave
	// Started (ActNotice): this node's task of Round had started
	// before the notice arrived.
	Started bool
	// Sign (ActSignReceipt): what the receipt must say (receipt.go).
	Sign *ReceiptOrder
}

// Record is everything durable about one round at one node: enough for a
// restarted node to carry on from the state its neighbours last saw
// (Machine.Restore).
type Record struct {
	Round string
	State State
	// The facts the round has learnt, as in the draft's phases.
	LocalReady, PredReady, StartRecv, CompleteRecv, ExitRecv bool
	// The last command sent to each neighbour (0: none), re-sent when a
	// link comes back.
	LastPred, LastSucc Command
	// The last command received from each neighbour (0: none); an older
	// one later means that neighbour restarted without its state.
	RecvPred, RecvSucc Command
	// Seq numbers the rounds in the order this node learned them (from its
	// own readiness at the Head, from the predecessor's READY elsewhere);
	// 0 until then. Restore puts rounds back in that order.
	Seq uint64
	// Delivered: the final COMPLETE was handed to a live connection to
	// the predecessor (EvDelivered). A round in StateDone at a node with a
	// predecessor is over only then.
	Delivered bool
	// Ran: this node's task in the round succeeded; Undo: where the
	// round's undo stands here (undo.go).
	Ran  bool
	Undo UndoRecord
	// Retries counts the retries that reopened the round here (0:
	// none); Prior is the last undo of this node's work for the round
	// before the latest retry (Phase PhaseNone: none was undone): a
	// retry starts the round afresh, and the undo stays on record.
	Retries int
	Prior   UndoRecord
	// Retry is the retry line that reopened the round last (What 0:
	// none): sent again to the successor when the link comes back while
	// the round is unfinished, and known when it comes again (by its
	// At), so that it changes nothing then.
	Retry Steer
	// Cancel is the cancel line that ended the round here (What 0:
	// none): a restarted node sends it on again when a link comes back,
	// as it did before (the last ones; steer.go).
	Cancel Steer
	// Started: this node's task of the round started (the round
	// entered START) in its latest attempt. A round that waited at a
	// gate (a hold, a pause, an approval) and ended there, or was
	// denied, never started its task: only this says so, not the
	// messages received.
	Started bool
	// Cancelled: the Head cancelled the round while this node's task of
	// it ran: the round ends, aborted, when the task ends (TaskDone,
	// whatever its result), and the task is not run again.
	Cancelled bool
	// Receipt: the round's receipts here (Config.Receipts; receipt.go).
	Receipt ReceiptRecord
}

// Violation is a peer's protocol violation: a message that is well formed
// but impossible in the receiving round's state or from that side. Step
// returns it without changing any state.
type Violation struct {
	From   Side
	Msg    Message
	State  State // the round's state, 0 if the round is unknown
	Reason string
	// Ahead: the peer is further along in the round than this node. A
	// well-behaved peer only is if this node lost its state (it restarted
	// without a journal).
	Ahead bool
	// Mismatch: the two nodes are configured differently (a READY for a
	// round this node does not run, or an extension line at a node
	// without extensions); reconnecting will not mend it.
	Mismatch bool
	// Setting names the chain setting that differs, for a Mismatch of
	// one ("undo"); "" otherwise.
	Setting string
}

// Error describes the violation in one line for logs.
func (v *Violation) Error() string {
	st := "unknown round"
	if v.State != 0 {
		st = "state " + v.State.String()
	}
	return fmt.Sprintf("chainsync: protocol violation: %s from %s (%s): %s", v.Msg, v.From, st, v.Reason)
}

// Errors for local misuse of a Machine (never caused by a peer).
var (
	ErrRoundFinished = errors.New("chainsync: round already finished at this node")
	ErrTooManyRounds = errors.New("chainsync: too many concurrent rounds")
	ErrBadRound      = errors.New("chainsync: invalid round id (1-128 of A-Z a-z 0-9 - _ .)")
	ErrNotRunning    = errors.New("chainsync: no task is running for this round")
	ErrBadNotice     = errors.New("chainsync: invalid fault notice")
	ErrNoExtensions  = errors.New("chainsync: extension lines are off at this node")
)

// Config fixes a Machine's place in the chain and its limits.
type Config struct {
	Role Role
	// MaxRounds bounds the rounds that are not finished at once; a READY
	// that would open one more is a violation. Zero means 1024.
	MaxRounds int
	// KeepFinished is how many finished rounds are remembered, so that
	// duplicates of their messages stay no-ops. Zero means 16384.
	KeepFinished int
	// AcceptRound, if set, says which round ids a predecessor may open; a
	// READY for any other round is a violation.
	AcceptRound func(round string) bool
	// Durable makes Step emit ActSave for every change to a round, first
	// among the step's actions, so the caller can persist it before it
	// sends anything or runs a task.
	Durable bool
	// Ordered keeps the rounds in the order this node learned them: from
	// its own local readiness at the Head (or a one-node chain), from the
	// predecessor's READY elsewhere. A round leaves SYNC (passes READY
	// on) only after every round learned before it has, even if this node
	// became ready for it first; and a round's task runs only after the
	// task of every round learned before it has run here, or that round
	// has ended. Since every link is FIFO, every node then runs its tasks
	// in the order the rounds were opened at the Head: one task at a time,
	// the pipeline's batch 5 before batch 6 on every node.
	Ordered bool
	// Extensions: this node speaks the extension lines (HEARTBEAT and the
	// fault notice). Without them a notice from a neighbour is a
	// violation with Mismatch set, and EvReport sends nothing.
	Extensions bool
	// The timeouts, judged on EvTick against the time events carry (see
	// Tick and TimeoutKind); zero turns each off.
	PhaseTimeout    time.Duration // a round waiting on a neighbour in one state
	ExitWaveTimeout time.Duration // a final COMPLETE not handed to the predecessor
	Silence         time.Duration // an up link that carried nothing (3 heartbeat intervals)
	ConnectTimeout  time.Duration // a neighbour's link down since it was last healthy
	// Policy says what a fault does to the rounds in progress.
	Policy Policy
	// Undo: this node has an undo, and the chain runs the undo wave
	// (undo.go); it needs Extensions. Name is this node's name in the
	// undo lines.
	Undo bool
	Name string
	// Self is this node's name in the GRACE lines it sends (a
	// NoticeName); RestartGrace, with Extensions, makes it announce
	// before each task that it may be gone for up to that long
	// (liveness.go). Zero: no grace.
	Self         string
	RestartGrace time.Duration
	// Approve: each of this node's tasks waits, once its turn has come,
	// for EvApprove of its round (or ends at EvDeny); see steer.go.
	Approve bool
	// Receipts: the chain signs receipts (receipt.go); it needs
	// Extensions. Chain is the chain's node names, Head first, and Name
	// (this node's) must be one of them.
	Receipts bool
	Chain    []string
}

// keepNotices is how many notices a Machine remembers, so that each is
// passed on once.
const keepNotices = 1024

type round struct {
	id    string
	state State
	// What has happened, so that each event acts once and an exact
	// duplicate is recognised.
	localReady, predReady, startRecv, completeRecv, exitRecv bool
	// The last command sent to each neighbour, re-sent on EvLinkUp.
	lastPred, lastSucc Command
	// The last command received from each neighbour.
	recvPred, recvSucc Command
	// A neighbour that restarted without its state: nothing more is
	// re-sent to it for this round.
	lostPred, lostSucc bool
	delivered          bool // the final COMPLETE was handed to the predecessor (EvDelivered)
	over               bool // finished at this node (ActDone)
	queued             bool // in Machine.order (Config.Ordered)
	// Steering (steer.go): the task may start (Config.Approve), ActGate
	// was reported, and (a retried round) the task succeeded here before.
	approved, gateNoted, taskOK bool
	// The undo wave (undo.go): the task succeeded here (and undo below).
	ran bool
	// succRetried: the successor sent back the retry line that reopened
	// the round (or there is none): until then a message of the round
	// from it may be of the attempt before, and is not taken.
	succRetried bool
	// A task of the round that outlives it here (steer.go): cancelled,
	// the round ends when its running task ends; stale, a retry reopened
	// it while the task of the attempt before still ran (the new
	// attempt's task waits for that one's end); taskOpen, the round
	// ended while its task ran (its end is still to be reported).
	cancelled, stale, taskOpen bool
	started                    bool   // the task started (Record.Started)
	seq                        uint64 // when this node learned the round (see learn), for re-sends in that order
	// The round's deadlines (0: none): PhaseTimeout in its state, and
	// ExitWaveTimeout while handing its final COMPLETE over.
	deadline, exitBy time.Duration
	// A retry (steer.go): how many reopened it here, and the undo of
	// this node's work before the latest.
	retries int
	// doneAttempt: the attempt (retries, as Notice.Attempt counts) of
	// the last task of the round that ended here, so that the failure
	// the driver then reports is told as of that attempt.
	doneAttempt int
	// more: what only a round that was retried, cancelled or undone
	// needs; nil until it is (own). Read it through ext.
	more *roundMore
	rc   *receipts // nil until used (rcpt): a chain without receipts has none
}

// roundMore is the part of a round that most rounds never use: its undo
// wave, the undo of this node's work before its latest retry, and the
// retry and cancel lines that reached it. Kept apart, a round's record
// is a fifth of the size (96 bytes, not 512): a node allocates one per
// round it learns, and keeps thousands (KeepFinished).
type roundMore struct {
	undo   UndoRecord // the undo wave (undo.go)
	prior  UndoRecord
	retry  Steer // Record.Retry
	cancel Steer // Record.Cancel
}

// noMore is what ext gives for a round without its roundMore: shared by
// every such round, so it is never written (own is for writing).
var noMore roundMore

// ext is r's roundMore, for reading only: a shared zero one if r has
// none yet.
func (r *round) ext() *roundMore {
	if r.more == nil {
		return &noMore
	}
	return r.more
}

// own is r's roundMore, made on first use, for writing.
func (r *round) own() *roundMore {
	if r.more == nil {
		r.more = new(roundMore)
	}
	return r.more
}

func (r *round) record() Record {
	if r == nil {
		return Record{}
	}
	return Record{Round: r.id, State: r.state, LocalReady: r.localReady, PredReady: r.predReady,
		StartRecv: r.startRecv, CompleteRecv: r.completeRecv, ExitRecv: r.exitRecv,
		LastPred: r.lastPred, LastSucc: r.lastSucc, RecvPred: r.recvPred, RecvSucc: r.recvSucc, Seq: r.seq,
		Delivered: r.delivered, Ran: r.ran, Undo: r.ext().undo, Retries: r.retries, Prior: r.ext().prior, Retry: r.ext().retry, Cancel: r.ext().cancel, Started: r.started, Cancelled: r.cancelled, Receipt: r.receiptRecord()}
}

// Machine is one node's ChainSync state machine for any number of rounds.
// It does no I/O and is not safe for concurrent use.
//
// It is made of parts, each owning its own fields: the order of the
// rounds (queue), the notices seen (noticeBook), the clock (time.go),
// restart graces (liveness.go), steering (steer.go), the undo wave
// (undo.go) and receipts (receipt.go). No part points back to the
// Machine: the Machine hands each what it needs (the receipts part, the
// few round operations it may do, as functions) and applies what the
// part decided.
type Machine struct {
	cfg      Config
	rounds   hot.Table[*round] // by id; the rounds in use now are found fastest
	active   int
	finished []string // finished round ids, oldest first
	q        queue    // the rounds in the order this node learned them
	moved    saves    // rounds moved in this step besides the event's (Durable)
	// halted: PolicyHalt ended every unfinished round for a fault. A
	// round opened after that ends at once, aborted: nobody runs a task
	// after a halt.
	halted  bool
	notices noticeBook
	// orphans counts the tasks running here whose round ended or was
	// reopened meanwhile (round.taskOpen, round.stale): with
	// Config.Ordered no other task starts until they have ended.
	orphans int

	clock clock       // logical time and the deadlines (time.go)
	live  liveness    // restart graces, neighbours back (liveness.go)
	steer steering    // the steering table (steer.go)
	undo  undoWave    // the undo wave (undo.go)
	rcpt  receiptBook // receipts (receipt.go)
}

// saves is the rounds a step moved besides its event's, each once, to
// be saved with the step (Config.Durable; off otherwise).
type saves struct {
	on bool
	rs []*round
}

func (s *saves) add(r *round) {
	if s.on && !slices.Contains(s.rs, r) {
		s.rs = append(s.rs, r)
	}
}

// queue keeps the rounds in the order this node learned them (see
// learn) and, with Config.Ordered, whose turn it is: every round before
// order[readyAt] has left SYNC, and every round before order[taskAt] has
// run its task here or ended (settled); the entries before both are
// dropped from time to time.
type queue struct {
	role    Role
	ordered bool // Config.Ordered
	undo    bool // Config.Undo: a failed round settles once its undo has
	seq     uint64
	order   []*round
	readyAt int
	taskAt  int
}

// learn notes when this node learned round r: from its local readiness
// at the Head (or a one-node chain), from the predecessor's READY
// elsewhere. That is the order of its READYs and re-sends and, with
// Config.Ordered, of its tasks.
func (q *queue) learn(r *round) {
	if r.queued || r.state.Terminal() {
		return
	}
	if q.role.HasPred() && !r.predReady || !q.role.HasPred() && !r.localReady {
		return
	}
	if r.seq == 0 {
		q.seq++
		r.seq = q.seq
	}
	if !q.ordered {
		return
	}
	r.queued = true
	q.order = append(q.order, r)
}

// readyTurn reports whether every round learned before r has left SYNC.
func (q *queue) readyTurn(r *round) bool {
	for q.readyAt < len(q.order) && q.order[q.readyAt].state != StateSync {
		q.readyAt++
	}
	return q.readyAt < len(q.order) && q.order[q.readyAt] == r
}

// taskTurn reports whether every round learned before r has run its task
// here or ended.
func (q *queue) taskTurn(r *round) bool {
	for q.taskAt < len(q.order) && q.order[q.taskAt].settled(q.undo) {
		q.taskAt++
	}
	return q.taskAt < len(q.order) && q.order[q.taskAt] == r
}

// turnCame reports whether r has what it needs to start its task here
// but has not: in WATCH with the predecessor's COMPLETE (at the Head, in
// READY with the successor's START), and its turn in the order.
func (q *queue) turnCame(r *round) bool {
	switch {
	case r.state == StateWatch && r.completeRecv:
	case r.state == StateReady && r.startRecv && !q.role.HasPred():
	default:
		return false
	}
	return !q.ordered || q.taskAt < len(q.order) && q.order[q.taskAt] == r
}

// trim drops the rounds that are past both turns.
func (q *queue) trim() {
	if k := min(q.readyAt, q.taskAt); k >= 64 && 2*k >= len(q.order) {
		q.order = slices.Delete(q.order, 0, k)
		q.readyAt -= k
		q.taskAt -= k
	}
}

// restored puts r, a round just restored and learned, back in the order
// it was learned in, whatever the order of the records.
func (q *queue) restored(r *round) {
	if !r.queued {
		return
	}
	for i := len(q.order) - 1; i > 0 && q.order[i-1].seq > r.seq; i-- {
		q.order[i-1], q.order[i] = q.order[i], q.order[i-1]
	}
}

// requeue puts r, reopened by a retry, in the order (Config.Ordered):
// after every round whose task has started here or that ended here, and
// every round an earlier retry reopened, before every other; the rounds
// after it pass READY on after it. The
// Head retries only while no round whose task ran there is in flight
// there (ErrRoundsInFlight), so every node places it alike: the rounds
// that ran at the Head have ended or started everywhere its retry line
// arrives, and those that did not have run nowhere. The rounds from r on
// are numbered again (seq) so that a restart restores the same order;
// it returns those whose number changed, to be saved.
func (q *queue) requeue(r *round) []*round {
	if !q.ordered {
		return nil
	}
	if k := slices.Index(q.order, r); k >= 0 {
		q.order = slices.Delete(q.order, k, k+1)
		if k < q.taskAt {
			q.taskAt--
		}
		if k < q.readyAt {
			q.readyAt--
		}
	}
	at := q.taskAt
	for at < len(q.order) {
		// After the rounds started or ended here, and the rounds an
		// earlier retry reopened (whatever order the lines came in).
		o := q.order[at]
		if o.state < StateStart && (o.ext().retry.What != SteerRetry || o.ext().retry.At >= r.ext().retry.At) {
			break
		}
		at++
	}
	q.order = slices.Insert(q.order, at, r)
	q.readyAt = min(q.readyAt, at)
	r.queued = true
	var renumbered []*round
	var prev uint64
	if at > 0 {
		prev = q.order[at-1].seq
	}
	for _, o := range q.order[at:] {
		if o.seq <= prev {
			o.seq = prev + 1
			renumbered = append(renumbered, o)
		}
		prev = o.seq
	}
	q.seq = max(q.seq, prev)
	return renumbered
}

// New returns a Machine for a node in the given configuration.
func New(cfg Config) *Machine {
	if cfg.MaxRounds <= 0 {
		cfg.MaxRounds = 1024
	}
	if cfg.KeepFinished <= 0 {
		cfg.KeepFinished = 16384
	}
	if cfg.Role == 0 {
		cfg.Role = Single
	}
	m := &Machine{cfg: cfg, rounds: hot.NewTable[*round](),
		q:     queue{role: cfg.Role, ordered: cfg.Ordered, undo: cfg.Undo},
		moved: saves{on: cfg.Durable},
		clock: newClock(&cfg), live: newLiveness(&cfg), undo: newUndoWave(&cfg),
		steer: steering{role: cfg.Role, ext: cfg.Extensions}}
	m.rcpt = receiptBook{cfg: &m.cfg, rounds: &m.rounds, active: &m.active, moved: &m.moved,
		advance: m.advance, open: m.open, abortRound: m.abortRound}
	return m
}

// State returns the state of round, and false if the round is unknown.
func (m *Machine) State(round string) (State, bool) {
	r := m.rounds.Get(round)
	if r == nil {
		return 0, false
	}
	return r.state, true
}

// RoundView is one unfinished round as Machine.View shows it.
type RoundView struct {
	Round      string
	State      State
	LocalReady bool
}

// View returns the rounds that are not over at this node (a round done
// here whose final COMPLETE is still to be handed over included), by id:
// a read-only view for progress reports.
func (m *Machine) View() []RoundView {
	vs := make([]RoundView, 0, m.active)
	for id, r := range m.rounds.All() {
		if !r.over {
			vs = append(vs, RoundView{Round: id, State: r.state, LocalReady: r.localReady})
		}
	}
	slices.SortFunc(vs, func(a, b RoundView) int { return strings.Compare(a.Round, b.Round) })
	return vs
}

// unfinished returns the rounds not yet finished here (a round handing
// its final COMPLETE over excluded: its part is done), in the order this
// node learned them, then by id.
func (m *Machine) unfinished() []*round {
	rs := make([]*round, 0, m.active)
	for _, r := range m.rounds.All() {
		if !r.state.Terminal() {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *round) int {
		if c := cmp.Compare(a.seq, b.seq); c != 0 && a.seq != 0 && b.seq != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return rs
}

// abortAll aborts every unfinished round (PolicyHalt), and every round
// opened from now on (halted).
func (m *Machine) abortAll(out []Action) []Action {
	m.halted = true
	for _, r := range m.unfinished() {
		out = m.abortRound(r, out)
	}
	return out
}

// abortRound aborts r for the policy; with Config.Durable it is saved
// with the step.
func (m *Machine) abortRound(r *round, out []Action) []Action {
	o := r.abortOutcome(m.cfg.Role)
	if r.state == StateStart {
		r.taskOpen = true
		m.orphans++
	}
	out = m.set(r, StateAborted, out)
	m.moved.add(r)
	return m.finish(r, o, out)
}

// abortOutcome is the outcome of aborting r now at a node in role:
// NoExitWave once its COMPLETE went on to the successor (the tasks after
// this node may have run; only the exit wave would have said), else
// Aborted.
func (r *round) abortOutcome(role Role) Outcome {
	if r.state == StateComplete && role.HasSucc() {
		return NoExitWave
	}
	return Aborted
}

// Active returns the number of rounds that are not finished.
func (m *Machine) Active() int { return m.active }

// Step applies ev and appends the resulting actions to out. A *Violation
// error means the peer misbehaved; any other error is local misuse. On
// error no state has changed and out is returned as given.
func (m *Machine) Step(ev Event, out []Action) ([]Action, error) {
	if !m.cfg.Durable {
		return m.step(ev, out)
	}
	id, one := ev.RoundOf()
	var before Record
	if one {
		before = m.rounds.Get(id).record()
	}
	start := len(out)
	m.moved.rs = m.moved.rs[:0]
	out, err := m.step(ev, out)
	if err != nil {
		return out, err
	}
	// The event's round, and every round whose turn came in this step
	// (Config.Ordered), is saved before any of the step's actions.
	var saves []Action
	if one {
		if after := m.rounds.Get(id).record(); after != before {
			saves = append(saves, Action{Kind: ActSave, Round: id, Record: &after})
		}
	}
	for _, r := range m.moved.rs {
		if !one || r.id != id {
			rec := r.record()
			saves = append(saves, Action{Kind: ActSave, Round: r.id, Record: &rec})
		}
	}
	return slices.Insert(out, start, saves...), nil
}

// Restore reinstates a round from its Record, as a restarted node does
// before its links come up. A round in StateStart was interrupted inside
// its task: the caller decides what that means (report TaskDone, failed
// or not, or run the task again). A round in StateDone at a node with a
// predecessor whose Record is not Delivered still has its final COMPLETE
// to hand over: LinkUp re-sends it, and the round is over at Delivered.
// Restore emits nothing.
func (m *Machine) Restore(rec Record) error {
	if !ValidRound(rec.Round) || rec.State < StateSync || rec.State > StateAborted {
		return fmt.Errorf("chainsync: cannot restore round %q in state %d", rec.Round, rec.State)
	}
	if m.rounds.Get(rec.Round) != nil {
		return fmt.Errorf("chainsync: round %q restored twice", rec.Round)
	}
	r := &round{id: rec.Round, state: rec.State, localReady: rec.LocalReady, predReady: rec.PredReady,
		startRecv: rec.StartRecv, completeRecv: rec.CompleteRecv, exitRecv: rec.ExitRecv,
		lastPred: rec.LastPred, lastSucc: rec.LastSucc, recvPred: rec.RecvPred, recvSucc: rec.RecvSucc, seq: rec.Seq,
		delivered: rec.Delivered, ran: rec.Ran, retries: rec.Retries, started: rec.Started, cancelled: rec.Cancelled,
		succRetried: rec.Retry.What == 0 || !m.cfg.Role.HasSucc(), rc: restoredReceipts(rec.Receipt)}
	if more := (roundMore{undo: rec.Undo, prior: rec.Prior, retry: rec.Retry, cancel: rec.Cancel}); more != (roundMore{}) {
		r.more = &more
	}
	m.q.seq = max(m.q.seq, r.seq)
	m.rounds.Set(r.id, r)
	if r.ext().cancel.What == SteerCancel {
		from := Side(0)
		if m.cfg.Role.HasPred() {
			from = Pred // a cancel comes from the Head's side
		}
		m.steer.event(r.ext().cancel, from)
	}
	if r.state.Terminal() && r.ext().undo.Held != 0 {
		m.active++ // ended here, its undo wave's outcome still to come
		return nil
	}
	if r.handingOver(m.cfg.Role) {
		m.active++ // done here, its final COMPLETE still to be handed over
		m.clock.arm(r)
		return nil
	}
	if r.state.Terminal() {
		r.over = true
		m.finished = append(m.finished, r.id)
		return nil
	}
	m.active++
	m.q.learn(r)
	m.clock.arm(r)
	m.q.restored(r)
	return nil
}

func (m *Machine) step(ev Event, out []Action) ([]Action, error) {
	if ev.At > 0 && m.clock.setNow(ev.At) {
		for _, r := range m.rounds.All() {
			if !r.over {
				m.clock.arm(r) // restored before the time was known
			}
		}
	}
	start := len(out)
	out, err := m.step1(ev, out)
	if err == nil && m.cfg.Ordered {
		out = m.pump(out)
	}
	if err == nil && m.cfg.Receipts {
		out = m.rcpt.receiptsStep(ev, out[start:], out)
	}
	if err == nil {
		out = m.live.step(ev, out[start:], m.clock.now, out)
	}
	if err == nil && m.clock.timing {
		m.clock.step(ev, out[start:])
		m.regate()
	}
	return out, err
}

func (m *Machine) step1(ev Event, out []Action) ([]Action, error) {
	switch ev.Kind {
	case EvRecv:
		return m.recvNoted(ev.From, ev.Msg, out)
	case EvLocalReady:
		return m.localReady(ev.Round, out)
	case EvTaskDone:
		m.undo.why, m.undo.whySet = ev.Why, true
		out, err := m.taskDone(ev.Round, ev.Failed, out)
		m.undo.why, m.undo.whySet = Failure{}, false
		return out, err
	case EvUndoDone:
		r := m.rounds.Get(ev.Round)
		out, v, err := m.undo.ended(r, ev.Failed, ev.Why.Code, out)
		if v == undoOver {
			out = m.undoEnd(r, out)
		}
		return out, err
	case EvLinkUp:
		if ev.Msg.Cmd != 0 {
			return m.promote(ev.From, ev.Msg, out)
		}
		return m.linkUp(ev.From, out), nil
	case EvAbort:
		r := m.rounds.Get(ev.Round)
		if r == nil {
			return out, ErrBadRound
		}
		if !r.state.Terminal() {
			out = m.abortRound(r, out)
		}
		return out, nil
	case EvReport:
		return m.report(ev.Note, ev.Halt, out)
	case EvDelivered:
		if r := m.rounds.Get(ev.Round); r != nil && r.handingOver(m.cfg.Role) {
			r.delivered = true
			return m.finish(r, Done, out), nil
		}
		return out, nil // nothing to hand over (a re-send), or handed over already
	case EvUndelivered:
		if r := m.rounds.Get(ev.Round); r != nil && r.handingOver(m.cfg.Role) {
			return m.finish(r, NotDelivered, out), nil
		}
		return out, nil // delivered meanwhile
	case EvRerun:
		// The task runs again: a node with a restart grace announces it
		// again (liveness.go).
		r := m.rounds.Get(ev.Round)
		switch {
		case r == nil || r.state != StateStart:
			return out, ErrNotRunning
		case r.cancelled:
			return out, ErrCancelled // report its end instead (TaskDone)
		}
		return m.live.announce(r.id, m.cfg.RestartGrace.Truncate(time.Millisecond), m.clock.now, out), nil
	case EvTick:
		return m.tick(ev, out), nil
	case EvLinkDown:
		return out, nil // the link clocks (clockStep)
	case EvSteer, EvApprove, EvDeny, EvAlreadyDone:
		return m.steerStep(ev, out)
	case EvReceiptSigned:
		return m.rcpt.receiptSigned(ev, out)
	case EvReceiptHanded:
		return m.rcpt.receiptHanded(ev, out)
	}
	return out, fmt.Errorf("chainsync: unknown event kind %d", ev.Kind)
}

// recvNoted is recv, noting the last command received on each side.
//
// After a retry reopened its round, a round message this attempt cannot
// take is one of the attempt before (a re-send that crossed the retry
// line on a link that came back): it changes nothing.
func (m *Machine) recvNoted(from Side, msg Message, out []Action) ([]Action, error) {
	// A message from the successor of a retried round before its echo of
	// the retry may be of the attempt before: recv does not take it, and
	// it is not noted either (noted, a START of the retry coming after it
	// would look older, as from a successor that restarted).
	notTaken := m.rounds.Get(msg.Round).ofAttemptBefore(from)
	out, err := m.recv(from, msg, out)
	if r := m.rounds.Get(msg.Round); err != nil && r != nil && r.retries > 0 && msg.Cmd.Valid() && staleAttempt(err) {
		return out, nil
	}
	if r := m.rounds.Get(msg.Round); err == nil && r != nil && msg.Cmd.Valid() && !notTaken {
		if from == Pred {
			r.recvPred = max(r.recvPred, msg.Cmd)
		} else {
			r.recvSucc = max(r.recvSucc, msg.Cmd)
		}
	}
	return out, err
}

// ofAttemptBefore reports whether a message of r (nil: unknown here)
// from side may be of the attempt before a retry: from the successor of
// a retried round, before its echo of the retry came back (steer.go).
// Such a message is not taken, nor noted as received.
func (r *round) ofAttemptBefore(from Side) bool {
	return r != nil && from == Succ && r.retries > 0 && !r.succRetried
}

// staleAttempt reports whether err, a message refused in a retried
// round, is a peer's violation that is not a configuration mismatch.
func staleAttempt(err error) bool {
	var v *Violation
	return errors.As(err, &v) && !v.Mismatch
}

// promote takes msg, the first line of a new connection on side's link,
// and puts that link's re-sends first (see Promote): those of the state
// before msg, less a round whose sender msg shows restarted without its
// state and less what the answer to msg sends again anyway.
func (m *Machine) promote(side Side, msg Message, out []Action) ([]Action, error) {
	start := len(out)
	heard := m.undo.heard
	out = m.linkUp(side, out)
	k := len(out)
	out, err := m.recvNoted(side, msg, out)
	if err != nil {
		m.undo.heard = heard // the old connection stays
		return out[:start], err
	}
	answer := slices.Clone(out[k:])
	resends := slices.DeleteFunc(out[start:k], func(a Action) bool {
		for _, b := range answer {
			if b.Kind == ActPeerRestarted && b.Round == a.Msg.Round || b.Kind == ActSend && b.To == a.To && b.Msg == a.Msg {
				return true
			}
		}
		return false
	})
	return append(append(out[:start], resends...), answer...), nil
}

// handingOver reports whether r is done at this node (in role) but its
// final COMPLETE has not yet been handed to the predecessor: not over
// yet.
func (r *round) handingOver(role Role) bool {
	return r.state == StateDone && role.HasPred() && !r.delivered && !r.over
}

func (m *Machine) recv(from Side, msg Message, out []Action) ([]Action, error) {
	violation := func(st State, reason string) ([]Action, error) {
		return out, &Violation{From: from, Msg: msg, State: st, Reason: reason}
	}
	ahead := func(st State, reason string) ([]Action, error) {
		return out, &Violation{From: from, Msg: msg, State: st, Reason: reason, Ahead: true}
	}
	role := m.cfg.Role
	if from != Pred && from != Succ {
		return out, fmt.Errorf("chainsync: Recv from unknown side %d", from)
	}
	if from == Pred && !role.HasPred() || from == Succ && !role.HasSucc() {
		return violation(0, "this node ("+role.String()+") has no such neighbour")
	}
	if msg.Cmd == FaultNotice {
		return m.notice(from, msg, out)
	}
	if msg.Cmd == Grace {
		return m.live.recv(from, msg, m.clock.now, out)
	}
	if msg.Cmd == SteerLine {
		return m.steerStep(Event{Kind: EvSteer, From: from, Msg: msg}, out)
	}
	if msg.Cmd == RDigestLine || msg.Cmd == ReceiptLine {
		return m.rcpt.receiptRecv(from, msg, out)
	}
	if msg.Cmd.IsUndo() {
		r := m.rounds.Get(msg.Round)
		if msg.Cmd != UndoOn && r.ofAttemptBefore(from) {
			return out, nil // of the attempt before the retry, maybe: not taken (steer.go)
		}
		out, v, err := m.undo.recv(from, msg, r, out)
		if err != nil && msg.Cmd != UndoOn && r != nil && r.retries > 0 && staleAttempt(err) {
			return out, nil // of the attempt before the retry
		}
		switch v {
		case undoRun:
			if !r.state.Terminal() {
				out = m.abortRound(r, out) // held until the outcome
			}
			out = append(out, Action{Kind: ActRunUndo, Round: r.id, Wave: r.ext().undo.Wave})
		case undoOver:
			out = m.undoEnd(r, out)
		}
		return out, err
	}
	if !msg.Cmd.Valid() || !ValidRound(msg.Round) {
		return violation(0, "malformed message")
	}
	if err := m.undo.gate(from, msg); err != nil {
		return out, err
	}
	r := m.rounds.Get(msg.Round)
	var st State
	if r.ofAttemptBefore(from) {
		return out, nil // of the attempt before the retry, maybe: not taken (steer.go)
	}
	if r != nil {
		st = r.state

		wrongWay := from == Pred && msg.Cmd == Start || from == Succ && msg.Cmd == Ready
		if (st == StateFailed || st == StateAborted) && !wrongWay {
			return out, nil // the round is halted here; late messages change nothing
		}
		// A neighbour's messages in a round only move forward (READY then
		// COMPLETE from the predecessor, START then COMPLETE from the
		// successor): an older one means it restarted without its state.
		last := &r.recvPred
		if from == Succ {
			last = &r.recvSucc
		}
		if msg.Cmd < *last && (from == Pred && msg.Cmd == Ready || from == Succ && msg.Cmd == Start) {
			if from == Pred {
				r.lostPred = true
			} else {
				r.lostSucc = true
			}
			return append(out, Action{Kind: ActPeerRestarted, To: from, Msg: msg, Round: r.id}), nil
		}
	}
	switch {
	case from == Pred && msg.Cmd == Ready:
		if r == nil {
			if m.cfg.AcceptRound != nil && !m.cfg.AcceptRound(msg.Round) {
				return out, &Violation{From: from, Msg: msg, Reason: "round not configured at this node", Mismatch: true}
			}
			if m.active >= m.cfg.MaxRounds {
				return violation(0, fmt.Sprintf("too many concurrent rounds (limit %d)", m.cfg.MaxRounds))
			}
			r, out = m.open(msg.Round, Pred, out)
			if m.halted {
				return m.abortRound(r, out), nil
			}
		} else if r.predReady {
			return out, nil // duplicate
		}
		r.predReady = true
		m.q.learn(r)
		return m.advance(r, out), nil

	case from == Pred && msg.Cmd == Complete:
		switch {
		case r == nil:
			return ahead(0, "COMPLETE for a round this node has not seen")
		case r.completeRecv:
			if st == StateDone {
				// The predecessor re-sent COMPLETE after a reconnect, so
				// it may have missed our exit-wave COMPLETE: send it again.
				out = append(out, Action{Kind: ActSend, To: Pred, Msg: Message{Cmd: r.lastPred, Round: r.id}, Resend: true})
			}
			return out, nil
		case st == StateSync || st == StateReady:
			return ahead(st, "COMPLETE from the predecessor before this node is in WATCH")
		case st != StateWatch:
			return violation(st, "COMPLETE from the predecessor before this node is in WATCH")
		case !m.rcpt.digestKnown(r):
			// A predecessor with receipts sends RDIGEST first, always.
			return out, &Violation{From: from, Msg: msg, State: st, Reason: "COMPLETE from the predecessor before its receipt digest (RDIGEST)", Mismatch: true, Setting: "receipts"}
		}
		r.completeRecv = true
		return m.advance(r, out), nil

	case from == Succ && msg.Cmd == Start:
		switch {
		case r == nil:
			return ahead(0, "START for a round this node has not sent READY for")
		case r.startRecv:
			return out, nil
		case st == StateSync:
			// The successor has our READY, which we send only on leaving
			// SYNC: we lost it (a restart without a journal).
			return ahead(st, "START before this node sent READY")
		case st != StateReady:
			return violation(st, "START before this node sent READY")
		}
		r.startRecv = true
		return m.advance(r, out), nil

	case from == Succ && msg.Cmd == Complete:
		switch {
		case r == nil:
			return ahead(0, "COMPLETE for a round this node has not seen")
		case r.exitRecv:
			return out, nil
		case st != StateComplete:
			return ahead(st, "exit-wave COMPLETE from the successor before this node completed")
		}
		r.exitRecv = true
		return m.advance(r, out), nil
	}
	if msg.Cmd == Start {
		return violation(st, "START travels backward; the predecessor must not send it")
	}
	return violation(st, "READY travels forward; the successor must not send it")
}

func (m *Machine) localReady(id string, out []Action) ([]Action, error) {
	if !ValidRound(id) {
		return out, ErrBadRound
	}
	r := m.rounds.Get(id)
	if r == nil {
		if m.active >= m.cfg.MaxRounds {
			return out, ErrTooManyRounds
		}
		r, out = m.open(id, 0, out)
		if m.halted {
			return m.abortRound(r, out), nil
		}
	} else if r.state.Terminal() {
		return out, ErrRoundFinished
	}
	if r.localReady {
		return out, nil
	}
	r.localReady = true
	if !m.cfg.Role.HasPred() {
		m.q.learn(r)
	}
	out = m.advance(r, out)
	if r.state == StateSync {
		m.clock.arm(r) // now waiting for the predecessor's READY
	}
	return out, nil
}

func (m *Machine) taskDone(id string, failed bool, out []Action) ([]Action, error) {
	r := m.rounds.Get(id)
	switch {
	case r != nil && r.stale:
		// The task of the attempt before a retry ended: the retry's own
		// task may start now (steer.go); if it succeeded, it is done
		// here and the retry passes the round on.
		r.stale = false
		r.doneAttempt = max(r.retries-1, 0)
		m.orphans--
		r.taskOK = r.taskOK || !failed
		return m.ungate(out), nil
	case r != nil && r.taskOpen:
		r.taskOpen = false // the round ended while it ran: nothing follows
		m.orphans--
		return m.ungate(out), nil
	case r == nil || r.state != StateStart:
		return out, ErrNotRunning
	}
	r.doneAttempt = r.retries
	out = m.live.announce(r.id, 0, m.clock.now, out) // this node is here: its grace is over
	if r.cancelled {
		// Cancelled while it ran: the round ends here now, whatever the
		// task did; nothing goes on, and a cancel undoes nothing. A task
		// that succeeded is done here: a retry passes it on.
		r.ran = r.ran || !failed
		out = m.set(r, StateAborted, out)
		return m.finish(r, Aborted, out), nil
	}
	if failed {
		out = m.set(r, StateFailed, out)
		return m.finish(r, TaskFailed, out), nil
	}
	r.ran = m.cfg.Undo // the undo wave's to know (undo.go)
	out = m.set(r, StateComplete, out)
	out = m.rcpt.passOn(r, ReceiptRanOK, out) // COMPLETE on, or the exit wave begins
	return m.advance(r, out), nil
}

// linkUp re-sends the last message sent on the link for every unfinished
// round (docs/DESIGN.md "Reconnects"): with Config.Ordered in the order
// this node learned the rounds, so that the READYs and STARTs keep their
// order; otherwise in round-id order.
func (m *Machine) linkUp(side Side, out []Action) []Action {
	out = m.undo.linkUp(side, m.rounds.All(), out) // first: UNDO ON, on a new connection
	out = m.steer.resends(side, out)               // first: what holds the rounds below
	out = m.notices.resend(side, out)              // the notices it missed
	out = m.rcpt.receiptResends(side, out)         // before the COMPLETE a digest must precede
	// Only the rounds with something to send again on side, in the order
	// opened: a node that has opened thousands of rounds ahead and sent
	// nothing of them yet sorts none.
	var rs []*round
	retries := side == Succ && m.cfg.Extensions
	for _, r := range m.rounds.All() {
		if !r.state.Terminal() || side == Pred && r.handingOver(m.cfg.Role) {
			last, lost := r.lastSucc, r.lostSucc
			if side == Pred {
				last, lost = r.lastPred, r.lostPred
			}
			if last != 0 && !lost || retries && r.ext().retry.What == SteerRetry {
				rs = append(rs, r)
			}
		}
	}
	slices.SortFunc(rs, func(a, b *round) int {
		if m.cfg.Ordered {
			if c := cmp.Compare(a.seq, b.seq); c != 0 {
				return c
			}
		}
		return strings.Compare(a.id, b.id)
	})
	for _, r := range rs {
		id := r.id
		last, lost := r.lastSucc, r.lostSucc
		if side == Pred {
			last, lost = r.lastPred, r.lostPred
		}
		if s := r.ext().retry; side == Succ && s.What == SteerRetry && m.cfg.Extensions {
			// The line that reopened it first: the successor may have
			// missed it (steer.go).
			out = append(out, Action{Kind: ActSend, To: side, Msg: Message{Cmd: SteerLine, Steer: &s}, Resend: true})
		}
		if last != 0 && !lost {
			out = append(out, Action{Kind: ActSend, To: side, Msg: Message{Cmd: last, Round: id}, Resend: true})
		}
	}
	return out
}

// advance takes every transition the round's facts allow (draft section
// "Protocol Operation", phases 1 to 4).
func (m *Machine) advance(r *round, out []Action) []Action {
	role := m.cfg.Role
	for {
		switch r.state {
		case StateSync:
			if !r.localReady || role.HasPred() && !r.predReady || m.cfg.Ordered && !m.q.readyTurn(r) {
				return out
			}
			out = m.set(r, StateReady, out)
			if role.HasSucc() {
				out = r.send(Succ, Ready, out) // phase 1
			} else {
				r.startRecv = true // the Tail starts phase 2 itself
			}
		case StateReady:
			if !r.startRecv {
				return out
			}
			if role.HasPred() {
				out = m.set(r, StateWatch, out)
				out = r.send(Pred, Start, out) // phase 2
			} else {
				if m.cfg.Ordered && !m.q.taskTurn(r) {
					return out
				}
				var gated bool
				if gated, out = m.gated(r, out); gated {
					return out // held, paused or waiting for an approval (steer.go)
				}
				out = m.set(r, StateStart, out) // the Head starts phase 3
				out = m.live.runTask(r.id, m.clock.now, out)
			}
		case StateWatch:
			if !r.completeRecv || m.cfg.Ordered && !m.q.taskTurn(r) {
				return out
			}
			var gated bool
			if gated, out = m.gated(r, out); gated {
				return out // held, paused or waiting for an approval (steer.go)
			}
			out = m.set(r, StateStart, out)
			out = m.live.runTask(r.id, m.clock.now, out)
		case StateComplete:
			if !r.exitRecv {
				return out
			}
			if role.HasPred() {
				// Phase 4. The round is over here once this COMPLETE was
				// handed to a live connection (EvDelivered).
				out = r.send(Pred, Complete, out)
				return m.set(r, StateDone, out)
			}
			out = m.set(r, StateDone, out)
			return m.finish(r, Done, out)
		default:
			return out
		}
	}
}

func (m *Machine) open(id string, by Side, out []Action) (*round, []Action) {
	r := &round{id: id, state: StateSync}
	m.rounds.Set(id, r)
	m.active++
	m.clock.arm(r)
	return r, append(out, Action{Kind: ActOpened, Round: id, To: by})
}

func (m *Machine) set(r *round, s State, out []Action) []Action {
	w := WaitIn(m.cfg.Role, s, r.localReady)
	out = append(out, Action{Kind: ActState, Round: r.id, From: r.state, State: s, Wait: w})
	r.state = s
	r.started = r.started || s == StateStart
	m.clock.arm(r)
	return out
}

// send appends r's message c to side to, remembering it for re-sends.
func (r *round) send(to Side, c Command, out []Action) []Action {
	if to == Pred {
		r.lastPred = c
	} else {
		r.lastSucc = c
	}
	return append(out, Action{Kind: ActSend, To: to, Msg: Message{Cmd: c, Round: r.id}})
}

// finish records a round as over, forgetting (ActForget) the oldest
// finished rounds beyond KeepFinished.
func (m *Machine) finish(r *round, o Outcome, out []Action) []Action {
	var held bool
	if out, held = m.undo.finish(r, &o, out); held {
		return out // until the undo wave's outcome (undo.go)
	}
	r.over = true
	m.active--
	m.clock.disarm(r)
	m.finished = append(m.finished, r.id)
	out = append(out, Action{Kind: ActDone, Round: r.id, Outcome: o})
	for len(m.finished) > m.cfg.KeepFinished {
		m.rounds.Delete(m.finished[0])
		out = append(out, Action{Kind: ActForget, Round: m.finished[0]})
		m.finished = m.finished[1:]
	}
	return out
}

// pump moves the rounds whose turn has come since the step began: the
// next round waiting to pass READY on, the next waiting to run its task
// (Config.Ordered).
func (m *Machine) pump(out []Action) []Action {
	for moved := true; moved; {
		moved = false
		m.q.readyTurn(nil) // moves readyAt past the rounds that left SYNC
		m.q.taskTurn(nil)
		for _, at := range [...]int{m.q.readyAt, m.q.taskAt} {
			if at >= len(m.q.order) {
				continue
			}
			r := m.q.order[at]
			st := r.state
			out = m.advance(r, out)
			if r.state != st {
				moved = true
				m.moved.add(r)
			}
		}
	}
	m.q.trim()
	return out
}

// report sends this node's own notice to both neighbours and, for a
// halting report under PolicyHalt, ends every unfinished round.
func (m *Machine) report(n Notice, halt bool, out []Action) ([]Action, error) {
	if !n.Valid() {
		return out, ErrBadNotice
	}
	if !m.cfg.Extensions && !halt {
		return out, ErrNoExtensions
	}
	if r := m.rounds.Get(n.Round); n.HasRound && r != nil && n.Attempt == 0 {
		// The attempt the fault is of: a task's failure is of the
		// attempt whose task it was.
		n.Attempt = min(r.retries, MaxNoticeAttempt)
		if n.Kind == KindTaskFailed || n.Kind == KindTaskTimeout {
			n.Attempt = min(r.doneAttempt, MaxNoticeAttempt)
		}
	}
	if m.cfg.Extensions && m.notices.remember(n) {
		msg := Message{Cmd: FaultNotice, Note: &n}
		for _, side := range []Side{Pred, Succ} {
			if hasSide(m.cfg.Role, side) {
				out = m.notices.send(side, msg, m.clock.sides[side].up, out)
			}
		}
	}
	if n.Kind == KindCleared {
		m.notices.forgetBlaming(n.Blamed) // a later fault of that node is news again
		return out, nil
	}
	if halt && m.cfg.Policy == PolicyHalt {
		out = m.abortAll(out)
	}
	return out, nil
}

// notice passes a neighbour's notice on, away from where it came from,
// the first time it is seen (docs/DESIGN.md, "Extension lines").
func (m *Machine) notice(from Side, msg Message, out []Action) ([]Action, error) {
	if !m.cfg.Extensions {
		return out, &Violation{From: from, Msg: msg, Reason: "a fault notice, an extension line, at a node without extensions", Mismatch: true}
	}
	if msg.Note == nil || !msg.Note.Valid() {
		return out, &Violation{From: from, Msg: msg, Reason: "malformed fault notice"}
	}
	if !m.notices.remember(*msg.Note) {
		return out, nil // seen already: passed on once
	}
	if to := other(from); hasSide(m.cfg.Role, to) {
		out = m.notices.send(to, msg, m.clock.sides[to].up, out)
	}
	if g := m.live.noticed(msg.Note); g != nil {
		out = m.timedOut(m.live.expire(g), out) // liveness.go
	}
	an := Action{Kind: ActNotice, To: from, Msg: msg}
	if r := m.rounds.Get(msg.Note.Round); msg.Note.HasRound && r != nil {
		an.Round, an.From, an.Started = r.id, r.state, r.started
	}
	out = append(out, an)
	// The policy: under halt the chain stops here too; under wait a
	// round whose task failed somewhere can never complete, so it ends.
	n := msg.Note
	if r := m.rounds.Get(n.Round); n.HasRound && r != nil && n.Attempt < r.retries && n.Kind != KindCleared {
		// A fault of an attempt before the retry that reopened the
		// round here (re-sent, or late): it ends nothing now.
		return out, nil
	}
	if r := m.rounds.Get(n.Round); n.HasRound && r != nil && r.retries > 0 && from == Succ && r.state < StateComplete && !r.taskOK {
		// A task after this node failed, but this node's task has not
		// run in the round's retry yet: the failure is of the attempt
		// before (tasks run in chain order), and ends nothing now.
		return out, nil
	}
	m.undo.noticed(n, m.rounds.Get(n.Round))
	switch {
	case n.Kind == KindCleared:
		m.notices.forgetBlaming(n.Blamed) // a fault that is over ends nothing
	case m.cfg.Policy == PolicyHalt:
		out = m.abortAll(out)
	case n.HasRound && (n.Kind == KindTaskFailed || n.Kind == KindTaskTimeout):
		if r := m.rounds.Get(n.Round); r != nil && !r.state.Terminal() {
			out = m.abortRound(r, out)
		}
	}
	return out, nil
}

// noticeBook is the notices a Machine has seen, so that each is passed
// on once; the oldest are forgotten beyond keepNotices. It also keeps,
// per side, the notices sent that way while the link was down, so that
// the link carries them when it comes back (a neighbour whose link was
// down when a notice passed learns of it too).
type noticeBook struct {
	seen   map[Notice]bool
	q      []Notice     // the notices in seen, oldest first
	missed [3][]Message // per Side: sent while the link was down, oldest first
}

// maxMissed bounds the notices kept for a link that is down.
const maxMissed = 256

// send appends the notice msg to side; up says whether that link is up
// now (if not, msg is kept for resend).
func (b *noticeBook) send(side Side, msg Message, up bool, out []Action) []Action {
	if !up {
		if len(b.missed[side]) >= maxMissed {
			b.missed[side] = slices.Delete(b.missed[side], 0, 1)
		}
		b.missed[side] = append(b.missed[side], msg)
	}
	return append(out, Action{Kind: ActSend, To: side, Msg: msg})
}

// resend appends the notices sent to side while its link was down, for
// the link that came up, and forgets them.
func (b *noticeBook) resend(side Side, out []Action) []Action {
	for _, msg := range b.missed[side] {
		out = append(out, Action{Kind: ActSend, To: side, Msg: msg, Resend: true})
	}
	b.missed[side] = b.missed[side][:0]
	return out
}

// remember records n as seen and reports whether it is new.
func (b *noticeBook) remember(n Notice) bool {
	if b.seen[n] {
		return false
	}
	if b.seen == nil {
		b.seen = make(map[Notice]bool)
	}
	b.seen[n] = true
	b.q = append(b.q, n)
	if len(b.q) > keepNotices {
		delete(b.seen, b.q[0])
		b.q = b.q[1:]
	}
	return true
}

// forgetBlaming forgets the notices remembered that blame node: its
// fault cleared, so a later one is passed on again (liveness.go).
func (b *noticeBook) forgetBlaming(node string) {
	if node == "" {
		return
	}
	b.q = slices.DeleteFunc(b.q, func(n Notice) bool {
		if n.Blamed == node {
			delete(b.seen, n)
			return true
		}
		return false
	})
}
