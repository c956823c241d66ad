package chainsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// The undo wave (docs/UNDO.md): the machine decides who undoes what and
// when (protocol/undo.go); this file is the driver's part: running this
// node's undo (Config.Undo) like a task, resuming one a restart
// interrupted, and reporting the wave's outcome in the log, the trace,
// Snapshot and the round's Result.

// UndoInfo describes the round an undo compensates for.
type UndoInfo struct {
	// FailedNode is the node where the round failed; Fault why (a fault
	// kind: task-failed, task-timeout, or denied).
	FailedNode, Fault string
}

// ExitCoder is an error that carries an exit status (as the chainsync
// command's task errors do): the undo wave reports it ("task exited 1").
type ExitCoder interface{ ExitCode() int }

// The undo's trace events.
const (
	TraceUndoStart TraceKind = 128 + iota // this node's undo of Round started
	TraceUndoEnd                          // this node's undo of Round ended (Err if it failed)
	TraceUndone                           // the undo wave of Round ended; Err says how (Outcome)
)

// FaultUndoFailed: an undo failed, which stopped the undo wave there
// (Fault.Peer names the node).
const FaultUndoFailed FaultKind = "undo-failed"

// undoState is the undo wave's part (Config.Undo): it starts this node's
// undo when the machine says, reports how each round's wave ended, and
// keeps those outcomes for the rounds' results. It reaches the node
// through undoHost.
type undoState struct {
	outcomes map[string]string // round -> the wave's outcome, in words

	host   undoHost
	loop   *loop
	faults *faultBook
	book   *roundBook
	log    *slog.Logger
	on     bool     // Config.Undo is set
	chain  []string // Config.Chain, to name the nodes a wave left
	policy FaultPolicy
	// taskTimeout and resumeTask: what bounds an undo, and what a
	// restart does with one it interrupted.
	taskTimeout time.Duration
	resumeTask  ResumeTask
}

// undoHost is what the undo part reaches of the links: a neighbour's
// name and a mismatch's report (the step goes through act, the trace
// and the task starts through its loop).
type undoHost interface {
	peerName(side protocol.Side) string
	mismatch(l *link, what, round, reason string)
}

// exitCodeOf returns err's exit status, -1 if it has none.
func exitCodeOf(err error) int {
	var ec ExitCoder
	if errors.As(err, &ec) {
		if c := ec.ExitCode(); c >= 0 && c <= protocol.MaxUndoCode {
			return c
		}
	}
	return -1
}

// taskFailure is why round's task failed, for the undo wave.
func taskFailure(err error, timedOut bool) protocol.Failure {
	if timedOut {
		return protocol.Failure{Kind: string(FaultTaskTimeout), Code: protocol.CodeTimeout}
	}
	return protocol.Failure{Kind: string(FaultTaskFailed), Code: exitCodeOf(err)}
}

// undoAct carries out the machine's undo actions. Loop only.
func (u *undoState) undoAct(a *protocol.Action) *FaultError {
	switch a.Kind {
	case protocol.ActRunUndo:
		u.startUndo(a.Round, a.Wave)
	case protocol.ActUndone:
		return u.undone(a.Round, a.Wave)
	}
	return nil
}

// startUndo runs this node's undo of round as it runs a task (inline.go),
// once the turn's records (its start) are on disk. Loop only.
func (u *undoState) startUndo(round string, w protocol.Wave) {
	info := UndoInfo{FailedNode: w.Failed, Fault: w.Kind}
	u.log.Warn("undo started: the round failed at "+w.Failed+" ("+w.Kind+"); this node's task had succeeded, so it runs its undo", "round", round)
	u.loop.trace(TraceEvent{Kind: TraceUndoStart, Round: round})
	// Like a task, it starts once the turn's records (the undo's start)
	// are on disk (loop.go), in a task slot (task.go).
	u.loop.queueTask(taskStart{round: round, undo: &info})
}

// undoFinished logs and traces the end of this node's undo, and hands
// back the event that tells the machine, for the loop to step. Loop only.
func (u *undoState) undoFinished(round string, err error, timedOut bool) protocol.Event {
	code := exitCodeOf(err)
	if timedOut {
		code = protocol.CodeTimeout
		if err == nil {
			err = context.DeadlineExceeded
		}
		err = fmt.Errorf("ran past the task timeout (%v) and was stopped: %w", u.taskTimeout, err)
	}
	if err != nil {
		u.log.Error("undo failed: the undo wave stops here; the nodes before this one keep their work (a person decides)", "round", round, "kind", string(FaultUndoFailed), "err", err.Error())
	} else {
		u.log.Warn("undo ended", "round", round)
	}
	u.loop.trace(TraceEvent{Kind: TraceUndoEnd, Round: round, Err: err})
	return protocol.UndoDone(round, err != nil, code)
}

// forget drops round's undo outcome: a retry reopened the round, and its
// outcome is the retry's own. Loop only.
func (u *undoState) forget(round string) { delete(u.outcomes, round) }

// undone reports how round's undo wave ended: in the log, the trace, the
// round's Result and, when an undo failed, as an undo-failed fault naming
// that node. Loop only.
func (u *undoState) undone(round string, w protocol.Wave) *FaultError {
	if w.Stop != "" && w.KeptN < 0 {
		// The wave stopped at a node before this one's predecessors heard
		// of it: with the chain's names known, name the nodes it left.
		if i := slices.Index(u.chain, w.Stop); i >= 0 {
			before := slices.Clone(u.chain[:i])
			slices.Reverse(before)
			w.Kept, w.KeptN = strings.Join(before, ","), len(before)
		}
	}
	line := w.Outcome()
	if u.outcomes == nil {
		u.outcomes = make(map[string]string)
	}
	u.outcomes[round] = line
	if ri := u.book.get(round); ri.cause == nil {
		// The round's end here was withheld until now: its cause is the
		// failure the wave undid, as the notice of it said.
		fe := &FaultError{Round: round, State: u.faults.stateOf(round), Kind: FaultChainHalted, Peer: w.Failed, Origin: w.Failed,
			Cause: FaultKind(w.Kind), Reason: describeNotice(protocol.Notice{Kind: w.Kind, Origin: w.Failed, Blamed: w.Failed, Why: ri.failedWhy}) + "; " + line}
		if u.policy == FaultWait {
			fe.Kind = FaultChainFault
		}
		ri.cause, ri.reported = fe, true
	}
	if w.Stop == "" {
		u.log.Warn("round failed and undone: "+line, "round", round, "outcome", line)
		u.loop.trace(TraceEvent{Kind: TraceUndone, Round: round, Err: errors.New(line)})
		return nil
	}
	f := Fault{Kind: FaultUndoFailed, Round: round, Peer: w.Stop, Time: time.Now(),
		Err: fmt.Sprintf("chainsync: undo-failed in round %s: the undo failed at %s, which stopped the undo wave: %s", roundName(round), w.Stop, line)}
	u.faults.keep(f)
	// Under FaultHalt the machine ends every other unfinished round for
	// it, in the actions that follow: this is their cause.
	cause := &FaultError{Round: round, Kind: FaultUndoFailed, Peer: w.Stop,
		Reason: "the undo failed at " + w.Stop + " in round " + roundName(round) + ", which halts the chain (" + line + ")"}
	u.log.Error("undo-failed at "+w.Stop+": "+line, "round", round, "kind", string(FaultUndoFailed), "blamed", w.Stop, "outcome", line)
	u.loop.trace(TraceEvent{Kind: TraceFault, Fault: FaultUndoFailed, Round: round, Peer: w.Stop, Err: errors.New(f.Err)})
	u.loop.trace(TraceEvent{Kind: TraceUndone, Round: round, Err: errors.New(line)})
	return cause
}

// resumeUndo carries on a round whose undo wave was under way when the
// node stopped; false if there is none. An undo that had started and
// not ended runs again (undo commands are idempotent: docs/UNDO.md),
// unless ResumeTask is ResumeDone, which takes it as done: then done is
// the event that tells the machine, for the loop to step. Loop only.
func (u *undoState) resumeUndo(rec protocol.Record) (resumed bool, done *protocol.Event) {
	if rec.Undo.Held == 0 {
		return false, nil
	}
	switch rec.Undo.Phase {
	case protocol.PhaseRunning:
		if u.resumeTask == ResumeDone {
			u.log.Warn("resumed: the undo was interrupted by the restart; taking it as done (--resume-task done)", "round", rec.Round)
			ev := protocol.UndoDone(rec.Round, false, 0)
			return true, &ev
		}
		u.log.Warn("resumed: the undo was interrupted by the restart; running it again (undo commands must be idempotent)", "round", rec.Round)
		u.startUndo(rec.Round, rec.Undo.Wave)
	default:
		u.log.Info("resumed: the round failed; waiting for its undo wave", "round", rec.Round, "undo", rec.Undo.Phase.String())
	}
	return true, nil
}

// undoMismatch reports err, bad input on l, as a configuration mismatch
// if a neighbour runs with --undo and this node without it, or the other
// way round (docs/UNDO.md, "A chain setting"). Loop only.
func (u *undoState) undoMismatch(l *link, err error) bool {
	peer := u.host.peerName(l.side)
	var pe *wire.ProtocolError
	if errors.As(err, &pe) && pe.Extension && (strings.HasPrefix(string(pe.Line), "UNDO ") || strings.HasPrefix(string(pe.Line), "UNDONE ")) {
		u.host.mismatch(l, "undo", "", fmt.Sprintf("%s runs with --undo (it sent %q); this node runs without --undo: set --undo on every node of the chain, or on none", peer, string(pe.Line)))
		return true
	}
	var v *protocol.Violation
	if !errors.As(err, &v) || v.Setting != "undo" {
		return false
	}
	if u.on {
		u.host.mismatch(l, "undo", "", fmt.Sprintf("%s runs without --undo; this node runs with it: set --undo on every node of the chain, or on none", peer))
	} else {
		u.host.mismatch(l, "undo", "", fmt.Sprintf("%s runs with --undo; this node runs without it: set --undo on every node of the chain, or on none", peer))
	}
	return true
}

// undoRefused: with --undo, a successor that closed the connection right
// after this node's first lines (UNDO ON among them) without a word runs
// without the extension lines, so without --undo: a config-mismatch
// (docs/UNDO.md, "A chain setting"), which under FaultHalt ends this
// node's rounds. It reports whether it did. Loop only.
func (u *undoState) undoRefused(l *link) bool {
	if !u.on {
		return false
	}
	fe := &FaultError{Kind: FaultConfigMismatch, Side: l.side, Peer: u.host.peerName(l.side),
		Reason: "the successor closed the connection right after this node's first lines (UNDO ON) without a word: it runs without --undo (and without --heartbeat); set --undo on every node of the chain, or on none"}
	f := fe.fault()
	u.faults.record(f)
	u.faults.announceLater(f, true, fe)
	return true
}

// undoDoing says in words where a failed round's undo wave stands here,
// for Snapshot and /status.
func undoDoing(ph protocol.UndoPhase, w protocol.Wave) string {
	failed := "failed at " + w.Failed + " (" + w.Kind + ")"
	switch ph {
	case protocol.PhaseAwait:
		return failed + "; waiting for UNDO from the successor (the nodes after this one undo first)"
	case protocol.PhaseRunning:
		return failed + "; running its undo"
	case protocol.PhaseDone:
		return failed + "; undone here; waiting for the nodes before it and the outcome"
	case protocol.PhaseFailed:
		return failed + "; its undo failed"
	}
	return failed + "; nothing to undo here; waiting for the undo wave's outcome"
}
