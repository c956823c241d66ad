package chainsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// taskStart is a task the machine asked to run; slot says it already
// holds a MaxParallelTasks slot.
type taskStart struct {
	round      string
	slot       bool
	verifyOnly bool // the task was taken as done on resume: only Verify runs
	// undo: not the task but the undo of round (undo.go)
	undo *UndoInfo
}

// startTask arranges for round's task to run. Loop only.
func (r *taskRunner) startTask(round string) { r.startRun(round, false) }

// startRun arranges for round's task (or, verifyOnly, just Verify) to run.
// Loop only.
func (r *taskRunner) startRun(round string, verifyOnly bool) {
	// The task starts at the end of the turn, once the step's records
	// are on disk.
	start := taskStart{round: round, verifyOnly: verifyOnly}
	if r.take() { // a task slot is free: start now
		r.taskStarted(round)
		start.slot = true
	}
	r.lp.cur.add(effect{kind: effTask, task: start})
}

// queueTask queues t to start at the end of the turn (an undo: undo.go).
// Loop only.
func (lp *loop) queueTask(t taskStart) { lp.cur.add(effect{kind: effTask, task: t}) }

// taskStarted logs the start of a task. Loop only.
func (r *taskRunner) taskStarted(round string) {
	if infoOn(r.log) {
		r.log.Info("task started", "round", round)
	}
	r.lp.trace(TraceEvent{Kind: TraceTaskStart, Round: round})
}

// taskRunner runs a node's tasks and undos off the loop, at most
// MaxParallelTasks at a time (its slots), on the process's task workers;
// it tells the loop of their starts and ends through the node's inbox. It
// holds nothing of the node but what its tasks need.
type taskRunner struct {
	task    func(ctx context.Context, round string) error
	verify  func(ctx context.Context, round string) error
	undo    func(ctx context.Context, round string, info UndoInfo) error
	timeout time.Duration   // Config.TaskTimeout
	ctx     context.Context // the node's: ends when it is closed
	slots   chan struct{}   // semaphore: MaxParallelTasks
	crew    *crew           // counts the running tasks
	inbox   inbox           // the node's loop
	own     bool            // a goroutine per task, not the shared workers
	quick   bool            // tasks run on the loop (Config.QuickTask)

	// The loop's side (loop only): the turn a start joins, the rounds'
	// records, and the fault record (a task's end goes back to the loop to step).
	lp     *loop
	book   *roundBook
	faults *faultBook
	log    *slog.Logger
	policy FaultPolicy // Config.FaultPolicy, for a failure's words
}

// inbox is how a part reaches its node's loop: an input, false if the
// loop has ended.
type inbox interface {
	post(in input) bool
}

// newTaskRunner returns cfg's task runner.
func newTaskRunner(cfg *Config, ctx context.Context, c *crew, in inbox) *taskRunner {
	return &taskRunner{task: cfg.Task, verify: cfg.Verify, undo: cfg.Undo, timeout: cfg.TaskTimeout, ctx: ctx,
		slots: make(chan struct{}, cfg.MaxParallelTasks), crew: c, inbox: in, own: cfg.ownTaskGoroutines,
		quick: cfg.QuickTask && cfg.Verify == nil && cfg.TaskTimeout == 0}
}

// take takes a free slot, if there is one now.
func (r *taskRunner) take() bool {
	select {
	case r.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// give gives a slot back.
func (r *taskRunner) give() { <-r.slots }

// launch starts t on a task worker; false (its slot given back) once the
// node's Close waits: the task does not start.
func (r *taskRunner) launch(t taskStart) bool {
	if !r.crew.add() {
		if t.slot {
			r.give()
		}
		return false
	}
	if r.own {
		goSafe(func() { r.run(t) })
	} else {
		taskWorkers.run(r, t)
	}
	return true
}

// runHere runs round's task on the caller's goroutine (the loop: a quick
// task), in the slot the caller took.
func (r *taskRunner) runHere(round string) error {
	defer r.give()
	return r.task(r.ctx, round)
}

// run runs t, a task or an undo, on a task worker; slot says it already
// holds a task slot.
func (r *taskRunner) run(t taskStart) {
	defer r.crew.done()
	if t.undo != nil {
		r.runUndo(t.round, *t.undo)
		return
	}
	round := t.round
	if t.slot && r.ctx.Err() != nil { // closed before the task could start
		r.give()
		return
	}
	if !t.slot {
		select {
		case r.slots <- struct{}{}:
		case <-r.ctx.Done():
			return
		}
		r.inbox.post(input{kind: inTaskStarted, round: round})
	}
	ctx, cancel := r.bounded()
	var err error
	if !t.verifyOnly {
		err = r.task(ctx, round)
	}
	if err == nil && r.verify != nil && ctx.Err() == nil {
		err = r.verify(ctx, round)
	}
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) && r.ctx.Err() == nil
	cancel()
	r.give()
	r.inbox.post(input{kind: inTaskEnd, round: round, err: err, flag: timedOut})
}

// bounded is the context of one task: the node's, within TaskTimeout.
func (r *taskRunner) bounded() (context.Context, context.CancelFunc) {
	if r.timeout > 0 {
		return context.WithTimeout(r.ctx, r.timeout)
	}
	return r.ctx, func() {}
}

// runUndo runs Config.Undo, bounded by TaskTimeout, one task (or undo) at
// a time, and reports its end. An undo the node's Close interrupted is
// not reported: it is resumed after a restart.
func (r *taskRunner) runUndo(round string, info UndoInfo) {
	select {
	case r.slots <- struct{}{}:
	case <-r.ctx.Done():
		return
	}
	ctx, cancel := r.bounded()
	err := r.undo(ctx, round, info)
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) && r.ctx.Err() == nil
	cancel()
	r.give()
	if r.ctx.Err() != nil && !timedOut {
		return
	}
	r.inbox.post(input{kind: inUndoEnd, round: round, err: err, flag: timedOut})
}

// failedHere is what a failed task's fault adds: this node sends no
// COMPLETE on, and under halt the chain stops here.
func failedHere(policy FaultPolicy) string {
	if policy == FaultWait {
		return "; the round ends here (no COMPLETE is sent on), the chain goes on (fault policy wait)"
	}
	return "; halting the chain here (no COMPLETE is sent on)"
}

// taskFinished logs, traces and records round's task's end, and hands
// back the event that tells the machine, for the loop to step. Loop only.
func (r *taskRunner) taskFinished(round string, err error, timedOut bool) protocol.Event {
	if timedOut {
		if err == nil {
			err = context.DeadlineExceeded
		}
		err = fmt.Errorf("ran past the task timeout (%v) and was stopped: %w", r.timeout, err)
	}
	if err != nil {
		ri := r.book.get(round)
		ri.cause, ri.timedOut = err, timedOut
		te := &TaskError{Round: round, Err: err, Timeout: timedOut}
		kind := FaultTaskFailed
		if timedOut {
			kind = FaultTaskTimeout
		}
		r.faults.record(Fault{Kind: kind, Round: round, Err: te.Error() + failedHere(r.policy), why: err.Error()})
	} else if infoOn(r.log) {
		r.log.Info("task finished", "round", round)
	}
	r.lp.trace(TraceEvent{Kind: TraceTaskEnd, Round: round, Err: err})
	ev := protocol.TaskDone(round, err != nil)
	if err != nil {
		ev = protocol.TaskFailedWhy(round, taskFailure(err, timedOut)) // for the undo wave (undo.go)
	}
	return ev
}

// Task goroutines are reused: a fresh goroutine per task paid for a new
// stack (and its growth) on every task, and every hop of a round waits for
// one task. So tasks run on workers that outlive them: a worker
// that has run a task waits for another one, of any node of the process,
// and exits when none came for workerIdle or when the node whose task it
// ran last is closed. A process with nodes but no running tasks therefore
// keeps no goroutine for them after a while, and a closed node none at
// all; a chain of 10,000 nodes in one process shares the few workers that
// its tasks running at once need.
//
// A waiting worker has no timer of its own: one sweep for the whole pool,
// armed while workers wait (at most once per workerIdle), sends away those
// that waited longer than workerIdle, so handing a task over touches no
// timer.

// workerIdle is how long a task worker waits for another task.
const workerIdle = 2 * time.Second

// maxIdleWorkers bounds the workers kept waiting; one more exits instead.
const maxIdleWorkers = 64

// taskWorkers is the process's pool of task workers.
var taskWorkers workerPool

type workerPool struct {
	mu    sync.Mutex
	idle  []*taskWorker // waiting workers, the one waiting longest first
	sweep *time.Timer   // runs sweepIdle; nil until first needed
	armed bool          // sweep is pending
}

// taskWorker is a goroutine that runs tasks handed to it on job.
type taskWorker struct {
	job   chan taskJob // capacity 1: handing a job over never blocks
	since time.Time    // when it began to wait (p.mu)
}

// taskJob is a task to run; a job without a runner tells the worker to
// exit.
type taskJob struct {
	r *taskRunner
	t taskStart
}

// run runs r's task t on the worker that waited least, or on a new one.
func (p *workerPool) run(r *taskRunner, t taskStart) {
	p.mu.Lock()
	if k := len(p.idle); k > 0 {
		w := p.idle[k-1]
		p.idle[k-1] = nil
		p.idle = p.idle[:k-1]
		p.mu.Unlock()
		w.job <- taskJob{r, t}
		return
	}
	p.mu.Unlock()
	w := &taskWorker{job: make(chan taskJob, 1)}
	goSafe(func() { w.loop(p, taskJob{r, t}) })
}

// loop runs j, then every job handed to w, until the sweep sends it away
// or the node of its last job is closed.
func (w *taskWorker) loop(p *workerPool, j taskJob) {
	for j.r != nil {
		j.r.run(j.t)
		done := j.r.ctx.Done()
		j = taskJob{}
		if !p.wait(w) {
			return
		}
		select {
		case j = <-w.job:
		case <-done:
			if p.leave(w) {
				return
			}
			j = <-w.job // taken off the list by run or the sweep: its job is on the way
		}
	}
}

// wait puts w on the idle list; false: the list is full, w exits.
func (p *workerPool) wait(w *taskWorker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= maxIdleWorkers {
		return false
	}
	w.since = time.Now()
	p.idle = append(p.idle, w)
	if !p.armed {
		p.armed = true
		if p.sweep == nil {
			p.sweep = time.AfterFunc(workerIdle, func() { safely(p.sweepIdle) })
		} else {
			p.sweep.Reset(workerIdle)
		}
	}
	return true
}

// leave takes w off the idle list, if it is still there.
func (p *workerPool) leave(w *taskWorker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.idle, w); i >= 0 {
		p.idle = slices.Delete(p.idle, i, i+1)
		return true
	}
	return false
}

// sweepIdle sends away the workers that have waited workerIdle, and comes
// back for the others when the longest waiting of them is due.
func (p *workerPool) sweepIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	k := 0
	for k < len(p.idle) && now.Sub(p.idle[k].since) >= workerIdle {
		p.idle[k].job <- taskJob{}
		k++
	}
	p.idle = slices.Delete(p.idle, 0, k)
	if len(p.idle) == 0 {
		p.armed = false
		return
	}
	p.sweep.Reset(workerIdle - now.Sub(p.idle[0].since))
}
