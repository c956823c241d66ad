package chainsync

import (
	"errors"
	"fmt"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
)

// openState opens and locks Config.StateDir and reinstates its rounds in
// the machine. Nil state without a state directory. Called by Start
// before any goroutine runs.
func (d *driver) openState() (*journal.State, error) {
	if d.cfg.StateDir == "" {
		return nil, nil
	}
	j, st, err := journal.Open(d.cfg.StateDir, journal.Header{Role: d.role.String(), Name: d.cfg.Name})
	if err != nil {
		return nil, err
	}
	if st.Dropped > 0 {
		d.log.Warn("dropped a torn last record from the state journal (the node died while writing it; nothing had acted on it)",
			"dir", d.cfg.StateDir, "bytes", st.Dropped)
	}
	if err := d.st.restore(st.Rounds); err != nil {
		j.Close()
		return nil, fmt.Errorf("%w: %s: %v", journal.ErrCorrupt, d.cfg.StateDir, err)
	}
	j.SetKeepFinished(d.cfg.KeepFinished)
	j.OnSync = func() { d.lp.checkOnLoop("fsync") }
	d.store = &store{j: j}
	return st, nil
}

// resume carries on the rounds a restarted node found in its journal:
// finished rounds keep their results for Wait and Snapshot, but are not
// reported again (no "round over" line, no trace event: counters count
// what this process did); a round whose final
// COMPLETE was not handed over waits to hand it; a round interrupted in
// its task follows ResumeTask. Rounds waiting for a neighbour need
// nothing: when the links come up, the machine re-sends the last message
// on each. Loop only.
func (d *driver) resume(st *journal.State) {
	if len(st.Rounds) == 0 {
		d.log.Info("state directory is new; starting afresh", "dir", d.cfg.StateDir)
		return
	}
	interrupted, ended := 0, 0
	for _, rec := range st.Rounds {
		ri := d.book.get(rec.Round)
		if resumed, done := d.undo.resumeUndo(rec); resumed {
			if done != nil {
				if err := d.step(*done, nil); err != nil {
					d.log.Error("internal error: resume undo", "round", rec.Round, "err", err)
				}
			}
			continue // its undo wave is under way (undo.go)
		}
		if rec.State.Terminal() {
			ended++
		}
		handingOver := rec.State == protocol.StateDone && d.role.HasPred() && !rec.Delivered
		switch rec.State {
		case protocol.StateDone:
			if handingOver {
				// The machine re-sends it when the link comes up, and
				// bounds the wait by ExitWaveTimeout.
				d.log.Info("resumed: round done here, its final COMPLETE still to be handed to the predecessor", "round", rec.Round)
				ended--
			} else {
				d.book.restored(rec.Round, ri, Result{Round: rec.Round, Status: StatusDone}, st.TaskTimes[rec.Round].Ended)
			}
		case protocol.StateFailed:
			ri.cause = errors.New("the task failed before this node restarted")
			d.book.restored(rec.Round, ri, Result{Round: rec.Round, Status: StatusTaskFailed, Err: &TaskError{Round: rec.Round, Err: ri.cause}}, st.TaskTimes[rec.Round].Ended)
		case protocol.StateAborted:
			if st.Faults[rec.Round] == string(FaultCancelled) { // steer.go: cancelled at the Head, not a fault
				d.book.restored(rec.Round, ri, Result{Round: rec.Round, Status: StatusCancelled, Err: &CancelledError{}}, st.TaskTimes[rec.Round].Ended)
				break
			}
			fe := &FaultError{Round: rec.Round, State: rec.State, Kind: FaultKind(st.Faults[rec.Round]),
				Reason: "the round was aborted by this fault before this node restarted"}
			if fe.Kind == "" {
				fe.Kind, fe.Reason = FaultAborted, "the round was aborted before this node restarted (the journal does not say why)"
			}
			if f, ok := st.Found[rec.Round]; ok {
				fe.Origin, fe.Cause = f.Origin, FaultKind(f.Cause)
				fe.Reason = fmt.Sprintf("the round was aborted before this node restarted: %s found a %s fault", f.Origin, f.Cause)
			}
			d.faults.restored(fe.fault())
			ri.reported = true
			res := Result{Round: rec.Round, Status: StatusFault, Err: fe}
			if rec.Outcome() == protocol.NoExitWave && !failedAfter(fe) {
				res.Status, res.Err = StatusUndelivered, undelivered(&d.cfg, d.links.peerName(protocol.Succ), rec.Round, fe)
			}
			d.book.restored(rec.Round, ri, res, st.TaskTimes[rec.Round].Ended)
		case protocol.StateStart:
			interrupted++
			d.resumeTask(rec.Round, ri)
		default:
			d.log.Info("resumed round", "round", rec.Round, "state", rec.State.String())
			if d.cfg.Follow && !rec.LocalReady && rec.PredReady {
				d.feed.add(rec.Round) // the application learns it again
			}
		}
	}
	d.log.Info("resumed from the state directory", "dir", d.cfg.StateDir, "rounds", len(st.Rounds),
		"ended_before", ended, "interrupted_tasks", interrupted)
}

// restoredFault reports f, the fault with which a round ended before this
// process started, once: kept for Snapshot, logged as the past (WARN, not
// a new ERROR), traced with Resumed so that the hook hears of it and the
// counters do not count it again, and its notice sent on as recordFault
// would (a neighbour that never heard of it learns it now). Loop only.
func (fb *faultBook) restored(f Fault) {
	f.Time = time.Now()
	fb.keep(f)
	fb.log.Warn("resumed: round ended by a fault before this node restarted", "round", f.Round, "kind", string(f.Kind))
	fb.loop.trace(TraceEvent{Kind: TraceFault, Fault: f.Kind, Round: f.Round, Side: f.Side, Peer: f.Peer, Origin: f.Origin,
		Err: errors.New(f.Err), Resumed: true})
	if fb.ext && reports(f.Kind) && f.Kind != FaultConfigMismatch {
		fb.announceLater(f, false, nil)
	}
}

// resumeTask handles a round whose task was running when the node died,
// as ResumeTask says. Loop only.
func (d *driver) resumeTask(id string, ri *roundInfo) {
	switch d.cfg.ResumeTask {
	case ResumeDone:
		d.log.Warn("resumed: the task was interrupted by the restart; taking it as done (--resume-task done) and sending COMPLETE on", "round", id)
		if d.cfg.Verify != nil {
			d.tasks.startRun(id, true) // the health gate first, then COMPLETE
			return
		}
		d.lp.trace(TraceEvent{Kind: TraceTaskEnd, Round: id})
		if err := d.step(protocol.TaskDone(id, false), nil); err != nil {
			d.log.Error("internal error: resume done", "round", id, "err", err)
		}
	case ResumeRerun:
		err := d.step(protocol.Rerun(id), nil) // its restart grace again (liveness.go)
		if errors.Is(err, protocol.ErrCancelled) {
			// The round was cancelled while the task ran (docs/STEERING.md,
			// "Features together"): it is not run again; the round ends
			// as the cancel said, once its task is over, which it is.
			d.log.Warn("resumed: the task was interrupted by the restart, and its round was cancelled while it ran; not running it again", "round", id)
			if err := d.step(protocol.TaskDone(id, false), nil); err != nil {
				d.log.Error("internal error: cancelled rerun", "round", id, "err", err)
			}
			return
		}
		if err != nil {
			d.log.Error("internal error: rerun", "round", id, "err", err)
		}
		d.log.Warn("resumed: the task was interrupted by the restart; running it again (--resume-task rerun)", "round", id)
		if d.store != nil {
			if err := d.store.taskRestarted(id); err != nil {
				d.log.Warn("cannot record the task's second run in the state journal; it runs, and the journal shows one run across the restart", "round", id, "err", err.Error())
			}
		}
		d.tasks.startTask(id)
	default:
		ri.cause = errors.New("this node restarted while its task was running; its outcome is unknown (--resume-task fail: the chain halts here; use done or rerun to carry on)")
		d.log.Error("resumed: the task was interrupted by the restart; failing the round (--resume-task fail)", "round", id)
		d.faults.record(Fault{Kind: FaultTaskFailed, Round: id, Err: (&TaskError{Round: id, Err: ri.cause}).Error(), why: ri.cause.Error()})
		if err := d.step(protocol.TaskDone(id, true), nil); err != nil {
			d.log.Error("internal error: resume fail", "round", id, "err", err)
		}
	}
}

// ErrAlreadyEnded: the state directory says this node already ended every
// round it is configured for, in a process that ended normally. Starting
// again would do nothing and report success: a new rollout needs a new
// round id or a fresh state directory.
var ErrAlreadyEnded = errors.New("chainsync: already ended")

// refuseRerun refuses to start a node whose journal says a process that
// ended normally already ended every round this node runs (a served node,
// Config.Follow, goes on serving instead). A node that died resumes.
func refuseRerun(cfg *Config, st *journal.State) error {
	if st == nil || st.Ended == 0 || cfg.Follow || cfg.Rounds == nil {
		return nil
	}
	ended := make(map[string]protocol.State, len(st.Rounds))
	for _, rec := range st.Rounds {
		ended[rec.Round] = rec.State
	}
	for _, r := range cfg.Rounds {
		if !ended[r].Terminal() {
			return nil // a round still to run
		}
	}
	r := cfg.Rounds[0]
	how := "done"
	switch ended[r] {
	case protocol.StateFailed:
		how = "its task failed"
	case protocol.StateAborted:
		how = "fault"
		if k := st.Faults[r]; k != "" {
			how = "fault " + k
		}
		if f, ok := st.Found[r]; ok {
			how += " (" + f.Origin + " found " + f.Cause + ")"
		}
	}
	what := "round " + roundName(r)
	if len(cfg.Rounds) > 1 {
		what = fmt.Sprintf("rounds %s and %d more", roundName(r), len(cfg.Rounds)-1)
	}
	at := time.Unix(st.Ended, 0).UTC().Format(time.RFC3339)
	return fmt.Errorf("%w: %s already ended (%s at %s) in %s: a new rollout needs a new --round or a fresh --state-dir",
		ErrAlreadyEnded, what, how, at, cfg.StateDir)
}

// endedNormally reports whether this process ends normally with every
// round over, so that the journal records it (recordEnd) and a rerun on
// the same state directory is refused rather than silently doing nothing.
// Not for a served node, nor one that stops with rounds unfinished (it
// resumes them). Loop only.
func (d *driver) endedNormally() bool {
	return d.store != nil && d.st.broken == nil && !d.cfg.Follow && d.book.allOver()
}
