package chainsync

import (
	"context"
	"errors"
	"fmt"

	"github.com/chainsync-go/chainsync/protocol"
)

// taskStart is a task the machine asked to run; slot says it already
// holds a MaxParallelTasks slot.
type taskStart struct {
	round      string
	slot       bool
	verifyOnly bool // the task was taken as done on resume: only Verify runs
}

// startTask arranges for round's task to run. Caller holds mu.
func (n *Node) startTask(round string) { n.startRun(round, false) }

// startRun arranges for round's task (or, verifyOnly, just Verify) to run.
// Caller holds mu.
func (n *Node) startRun(round string, verifyOnly bool) {
	// The goroutine starts in unlock, once mu is free and the step's
	// records are on disk: started here, a quick task would finish and
	// block on mu while this goroutine still holds it, paying a park and
	// wake-up on every hop.
	n.wg.Add(1)
	start := taskStart{round: round, verifyOnly: verifyOnly}
	select {
	case n.tasks <- struct{}{}: // a task slot is free: start now
		n.taskStarted(round)
		start.slot = true
	default:
	}
	n.queue(effect{kind: effTask, task: start})
}

// quickTasks says whether tasks run inline (Config.QuickTask).
func (n *Node) quickTasks() bool {
	return n.cfg.QuickTask && n.cfg.Verify == nil && n.cfg.TaskTimeout == 0
}

// taskStarted logs the start of a task. Caller holds mu.
func (n *Node) taskStarted(round string) {
	if n.infoOn() {
		n.log.Info("task started", "round", round)
	}
	n.trace(TraceEvent{Kind: TraceTaskStart, Round: round})
}

// runTask runs round's task; slot says it already holds a task slot.
func (n *Node) runTask(t taskStart) {
	defer n.wg.Done()
	round := t.round
	if t.slot && n.ctx.Err() != nil { // closed before the task could start
		<-n.tasks
		return
	}
	if !t.slot {
		select {
		case n.tasks <- struct{}{}:
		case <-n.ctx.Done():
			return
		}
		n.lock()
		n.taskStarted(round)
		n.unlock()
	}
	ctx, cancel := n.ctx, context.CancelFunc(func() {})
	if n.cfg.TaskTimeout > 0 {
		ctx, cancel = context.WithTimeout(n.ctx, n.cfg.TaskTimeout)
	}
	var err error
	if !t.verifyOnly {
		err = n.cfg.Task(ctx, round)
	}
	if err == nil && n.cfg.Verify != nil && ctx.Err() == nil {
		err = n.cfg.Verify(ctx, round)
	}
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) && n.ctx.Err() == nil
	cancel()
	<-n.tasks

	n.lock()
	defer n.unlock()
	if n.closed {
		return
	}
	n.taskFinished(round, err, timedOut)
}

// taskFinished reports round's task's end to the machine. Caller holds mu.
func (n *Node) taskFinished(round string, err error, timedOut bool) {
	if timedOut {
		if err == nil {
			err = context.DeadlineExceeded
		}
		err = fmt.Errorf("ran past the task timeout (%v) and was stopped: %w", n.cfg.TaskTimeout, err)
	}
	if err != nil {
		ri := n.round(round)
		ri.cause, ri.timedOut = err, timedOut
		te := &TaskError{Round: round, Err: err, Timeout: timedOut}
		kind := FaultTaskFailed
		if timedOut {
			kind = FaultTaskTimeout
		}
		n.recordFault(Fault{Kind: kind, Round: round, Err: te.Error() + "; halting the chain here (no COMPLETE is sent on)"})
	} else if n.infoOn() {
		n.log.Info("task finished", "round", round)
	}
	n.trace(TraceEvent{Kind: TraceTaskEnd, Round: round, Err: err})
	if err := n.step(protocol.TaskDone(round, err != nil)); err != nil {
		n.log.Error("internal error: task done", "round", round, "err", err)
	}
}
