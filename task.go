package chainsync

import (
	"github.com/chainsync-go/chainsync/protocol"
)

// taskStart is a task the machine asked to run; slot says it already
// holds a MaxParallelTasks slot.
type taskStart struct {
	round string
	slot  bool
}

// startTask arranges for round's task to run. Caller holds mu.
func (n *Node) startTask(round string) {
	// The goroutine starts in unlock, once mu is free: started here, a
	// quick task would finish and block on mu while this goroutine still
	// holds it, paying a park and wake-up on every hop.
	n.wg.Add(1)
	start := taskStart{round: round}
	select {
	case n.tasks <- struct{}{}: // a task slot is free: start now
		n.taskStarted(round)
		start.slot = true
	default:
	}
	n.toRun = append(n.toRun, start)
}

// unlock releases mu, then starts the tasks that steps under it asked for.
// Every path that steps the machine unlocks with it.
func (n *Node) unlock() {
	run := n.toRun
	n.toRun = nil
	var flush [4]*link // a step queues lines for at most pred and succ
	k := copy(flush[:], n.flushes)
	clear(n.flushes)
	n.flushes = n.flushes[:0]
	n.mu.Unlock()
	for _, l := range flush[:k] {
		l.flush()
	}
	for _, t := range run {
		go n.runTask(t.round, t.slot)
	}
}

// taskStarted logs the start of a task. Caller holds mu.
func (n *Node) taskStarted(round string) {
	if n.infoOn() {
		n.log.Info("task started", "round", round)
	}
	n.trace(TraceEvent{Kind: TraceTaskStart, Round: round})
}

// runTask runs round's task; slot says it already holds a task slot.
func (n *Node) runTask(round string, slot bool) {
	defer n.wg.Done()
	if slot && n.ctx.Err() != nil { // closed before the task could start
		<-n.tasks
		return
	}
	if !slot {
		select {
		case n.tasks <- struct{}{}:
		case <-n.ctx.Done():
			return
		}
		n.mu.Lock()
		n.taskStarted(round)
		n.mu.Unlock()
	}
	err := n.cfg.Task(n.ctx, round)
	<-n.tasks

	n.mu.Lock()
	defer n.unlock()
	if n.closed {
		return
	}
	if err != nil {
		n.log.Error("task failed; halting the chain here (no COMPLETE is sent on)", "round", round, "err", err)
		n.round(round).cause = err
		n.recordFault(Fault{Kind: FaultTaskFailed, Round: round, Err: (&TaskError{Round: round, Err: err}).Error()})
	} else if n.infoOn() {
		n.log.Info("task finished", "round", round)
	}
	n.trace(TraceEvent{Kind: TraceTaskEnd, Round: round, Err: err})
	if err := n.step(protocol.TaskDone(round, err != nil)); err != nil {
		n.log.Error("internal error: task done", "round", round, "err", err)
	}
}
