package chainsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// queued: it waited for a slot, so its start is told to the loop
	// when it begins.
	queued bool
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
// MaxParallelTasks at a time (its slots), on the goroutine whose turn
// started them (inline.go), or else on goroutines of their own; it tells
// the loop of their starts and ends through the node's inbox. It holds
// nothing of the node but what its tasks need.
//
// A task started while every slot is taken waits in the runner's queue,
// not on a goroutine of its own: a task that ends passes its slot to the
// first one waiting, and its goroutine runs that one next (pass), so a
// node that runs one task at a time goes from one to the next without
// waking another goroutine.
type taskRunner struct {
	task    func(ctx context.Context, round string) error
	verify  func(ctx context.Context, round string) error
	undo    func(ctx context.Context, round string, info UndoInfo) error
	timeout time.Duration   // Config.TaskTimeout
	ctx     context.Context // the node's: ends when it is closed
	smu     sync.Mutex
	free    int         // slots free (smu)
	queue   []taskStart // tasks waiting for a slot, first started first (smu)
	crew    *crew       // counts the running tasks
	inbox   inbox       // the node's loop
	quick   bool        // tasks run on the loop (Config.QuickTask)

	// The loop's side (loop only): the turn a start joins, the rounds'
	// records, and the fault record (a task's end goes back to the loop to step).
	lp     *loop
	book   *roundBook
	faults *faultBook
	log    *slog.Logger
	policy FaultPolicy // Config.FaultPolicy, for a failure's words
}

// inbox is how a part reaches its node's loop: an input (post; hold
// queues it for the turn that the goroutine running the tasks has once
// it is done with them, inline.go), false if the loop has ended.
type inbox interface {
	post(in input) bool
	hold(in input) bool
}

// newTaskRunner returns cfg's task runner.
func newTaskRunner(cfg *Config, ctx context.Context, c *crew, in inbox) *taskRunner {
	return &taskRunner{task: cfg.Task, verify: cfg.Verify, undo: cfg.Undo, timeout: cfg.TaskTimeout, ctx: ctx,
		free: cfg.MaxParallelTasks, crew: c, inbox: in,
		quick: cfg.QuickTask && cfg.Verify == nil && cfg.TaskTimeout == 0}
}

// take takes a free slot, if there is one now and no task waits for
// one.
func (r *taskRunner) take() bool {
	r.smu.Lock()
	defer r.smu.Unlock()
	return r.takeLocked()
}

// takeLocked is take with smu held.
func (r *taskRunner) takeLocked() bool {
	if r.free > 0 && len(r.queue) == 0 {
		r.free--
		return true
	}
	return false
}

// pass releases a slot the caller held: to the first task waiting for
// one, which the caller starts (ok), or back to the free ones. Once the
// node is closed no waiting task gets it: none starts.
func (r *taskRunner) pass() (next taskStart, ok bool) {
	r.smu.Lock()
	defer r.smu.Unlock()
	if len(r.queue) > 0 && r.ctx.Err() == nil {
		next = r.queue[0]
		k := copy(r.queue, r.queue[1:])
		r.queue[k] = taskStart{}
		r.queue = r.queue[:k]
		next.slot, next.queued = true, true
		return next, true
	}
	r.free++
	return taskStart{}, false
}

// give releases a slot the caller held; a task waiting for one starts on
// a goroutine of its own.
func (r *taskRunner) give() {
	if t, ok := r.pass(); ok {
		r.launch(t)
	}
}

// wait has t, a task without a slot, wait for one; if one is free and no
// task waits before it, t takes it and starts now (ok).
func (r *taskRunner) wait(t taskStart) (taskStart, bool) {
	r.smu.Lock()
	defer r.smu.Unlock()
	if r.takeLocked() {
		t.slot, t.queued = true, true
		return t, true
	}
	r.queue = append(r.queue, t)
	return t, false
}

// drop releases a slot the caller held, once the node's Close waits:
// nothing more starts.
func (r *taskRunner) drop() {
	r.smu.Lock()
	r.free++
	r.smu.Unlock()
}

// launch starts t on a goroutine of its own (which then runs the tasks
// its slot passes to, and those its turns start), or has it wait for a
// slot; false (its slot given back) once the node's Close waits: the task
// does not start.
func (r *taskRunner) launch(t taskStart) bool {
	if !t.slot {
		var now bool
		if t, now = r.wait(t); !now {
			return true // it starts when a slot is passed to it
		}
	}
	if !r.crew.add() {
		r.drop()
		return false
	}
	goSafe(func() { r.run(t, new(seat)) })
	return true
}

// runInline runs t, which holds a slot, on the caller, the goroutine
// whose turn started it (inline.go); its start and end are held in the
// inbox for that goroutine's next turn. If a task waited for its slot,
// it is next (ok): the caller runs it or hands it on.
func (r *taskRunner) runInline(t taskStart) (next taskStart, ok bool) {
	if !r.crew.add() {
		r.drop()
		return taskStart{}, false
	}
	defer r.crew.done()
	r.runOne(t)
	return r.pass()
}

// runHere runs round's task on the caller's goroutine (the loop: a quick
// task), in the slot the caller took.
func (r *taskRunner) runHere(round string) error {
	defer r.give()
	return r.task(r.ctx, round)
}

// run runs t, a task or an undo that holds a slot, on its own goroutine with
// seat s, then each task its slot is passed to, and the tasks the turns
// that take their ends start (inline.go).
func (r *taskRunner) run(t taskStart, s *seat) {
	defer r.crew.done()
	r.lp.seatTasks(s, []taskStart{t}, nil)
	r.lp.drain(s)
}

// runOne runs t, a task or an undo, in the slot it holds, and queues its
// end (and, if it waited for its slot, its start) for the turn the
// goroutine running it has next (inline.go). The caller passes the slot
// on.
func (r *taskRunner) runOne(t taskStart) {
	if r.ctx.Err() != nil { // closed before it could start
		return
	}
	if t.undo != nil {
		r.runUndo(&t)
		return
	}
	round := t.round
	if t.queued {
		r.inbox.hold(input{kind: inTaskStarted, round: round})
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
	r.inbox.hold(input{kind: inTaskEnd, round: round, err: err, flag: timedOut})
}

// bounded is the context of one task: the node's, within TaskTimeout.
func (r *taskRunner) bounded() (context.Context, context.CancelFunc) {
	if r.timeout > 0 {
		return context.WithTimeout(r.ctx, r.timeout)
	}
	return r.ctx, func() {}
}

// runUndo runs Config.Undo, bounded by TaskTimeout, in a task slot (one
// task or undo at a time), and reports its end. An undo the node's Close
// interrupted is not reported: it is resumed after a restart.
func (r *taskRunner) runUndo(t *taskStart) {
	ctx, cancel := r.bounded()
	err := r.undo(ctx, t.round, *t.undo)
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) && r.ctx.Err() == nil
	cancel()
	if r.ctx.Err() != nil && !timedOut {
		return
	}
	r.inbox.hold(input{kind: inUndoEnd, round: t.round, err: err, flag: timedOut})
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
