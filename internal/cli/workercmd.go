package cli

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/chainsync-go/chainsync/internal/bug"
	"github.com/chainsync-go/chainsync/internal/status"
	"github.com/chainsync-go/chainsync/internal/taskrun"
	"github.com/chainsync-go/chainsync/internal/worker"
)

// run --worker: the task command is a persistent worker (docs/WORKERS.md),
// started once through the task runner (its process group, cgroup,
// reaper and parent-death signal, as every task's) and given a request a
// round (internal/worker).

// newWorker makes this node's worker, started by launchWorker; the node
// is not locally ready until it answered hello (workerUp).
func (o *runOpts) newWorker(tasks *taskrun.Runner, command, role string, hello time.Duration, log *slog.Logger) *worker.Manager {
	w := worker.New(worker.Config{
		Command: command, Node: o.name, Role: role, HelloTimeout: hello, Log: log,
		Spawn: func(ctx context.Context, stdin, stdout *os.File, started func(int), env ...string) error {
			return tasks.RunPiped(ctx, taskrun.Grace, stdin, stdout, started, env...)
		},
	})
	o.workers = w
	return w
}

// workerUp waits until the worker (if any) answered hello: "locally ready"
// includes it, so no task starts anywhere in the chain before every
// node's worker is up.
func (o *runOpts) workerUp(ctx context.Context) error {
	if o.workers == nil {
		return nil
	}
	select {
	case <-o.workers.Up():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// workerFailed is the os.Signal by which a worker that could not start
// stops the node: it arrives where the node's stop signals do, so that
// every way the node waits ends on it, and the node exits 1.
type workerFailed struct{ err error }

func (workerFailed) Signal()          {}
func (f workerFailed) String() string { return f.err.Error() }

// launchWorker starts the worker, if any, and sends sigs a workerFailed
// if it could not start.
func (o *runOpts) launchWorker(sigs chan<- os.Signal, log *slog.Logger) {
	if o.workers == nil {
		return
	}
	log.Info("starting the worker; this node is locally ready once it answers hello", "worker", o.workers.Command())
	o.workers.Start()
	bug.Go(func() {
		if err, ok := <-o.workers.Failed(); ok {
			select {
			case sigs <- workerFailed{err}:
			default: // a stop signal is pending: the node stops anyway
			}
		}
	})
}

// workerStatus adds the worker to a status document.
func (o *runOpts) workerStatus(d *status.Doc) {
	if o.workers != nil {
		s := o.workers.Status()
		d.Worker = &s
	}
}

// checkWorker is chainsync check --worker: it starts the worker, says
// hello, and stops it.
func checkWorker(o *runOpts, task []string, role string, timeout time.Duration) linkCheck {
	rp, _ := taskrun.StartReaper()
	defer rp.Close()
	tasks := taskrun.New(taskrun.Config{Cmd: task, Env: []string{"CHAINSYNC_ROLE=" + role, "CHAINSYNC_NODE=" + o.name}, Reaper: rp})
	hello := timeout // check's --timeout, or --task-timeout if shorter
	if o.taskTimeout > 0 {
		hello = min(hello, o.taskTimeout)
	}
	w := o.newWorker(tasks, task[0], role, hello, slog.New(slog.DiscardHandler))
	w.Start()
	defer w.Close()
	t0 := time.Now()
	select {
	case <-w.Up():
		return linkCheck{true, "worker " + task[0] + ": answered hello (protocol version 1) in " + time.Since(t0).Round(time.Millisecond).String()}
	case err := <-w.Failed():
		return linkCheck{false, err.Error()}
	}
}
