package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// docs/DESIGN.md, "Restarts and durable state": a node's task does not
// outlive the node. Each run of the task is the leader of a new process
// group; the node's stop signals go to the whole group; when the task's
// main process ends, whatever it left in its group is killed; and the
// group dies with the node however the node dies:
//   - the task's main process has a parent-death signal (SIGKILL), and
//   - a parent-death signal reaches only the direct child, so each node
//     also starts a small reaper ("chainsync _reaper"), told the process
//     group of every running task over a pipe. When the node dies, even by
//     SIGKILL, the pipe's write end closes; the reaper reads end-of-file
//     and kills every group still registered. A node killed between a
//     task's start and its tell (a few milliseconds at most) leaves that
//     task's children alive: the window is known and not closed yet.
//
// The task stays the node's direct child, so a task can find its node as
// $PPID (the draft's switch whose upgrade restarts the node).

// reaperCommand is the hidden subcommand of the reaper.
const reaperCommand = "_reaper"

// reaper is the node's side of the reaper process.
type reaper struct {
	mu sync.Mutex
	w  io.WriteCloser // nil if the reaper could not start
	c  *exec.Cmd
}

// startReaper starts the reaper process. Without one (the binary cannot
// be found) tasks still run; only the node-death guarantee is weaker, and
// the error says so.
func startReaper() (*reaper, error) {
	self, err := os.Executable()
	if err != nil {
		return &reaper{}, err
	}
	c := exec.Command(self, reaperCommand)
	w, err := c.StdinPipe()
	if err != nil {
		return &reaper{}, err
	}
	c.Stdout, c.Stderr = nil, os.Stderr
	// Its own group: a Ctrl-C for the node's group does not reach it.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return &reaper{}, err
	}
	return &reaper{w: w, c: c}, nil
}

func (r *reaper) tell(op byte, pgid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		_, _ = fmt.Fprintf(r.w, "%c%d\n", op, pgid)
	}
}

// close ends the reaper (it kills any group still registered).
func (r *reaper) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		r.w.Close()
		_ = r.c.Wait()
		r.w = nil
	}
}

// reaperMain is chainsync _reaper: it reads "+PGID" and "-PGID" lines
// from its standard input and, at end of input (its node exited or died),
// kills every process group still registered.
func reaperMain() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	groups := map[int]bool{}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if len(line) < 2 {
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			groups[pgid] = true
		case '-':
			delete(groups, pgid)
		}
	}
	for pgid := range groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return ExitOK
}

// taskRunner runs this node's task command, one process group per run.
type taskRunner struct {
	cmd    []string
	env    []string // added to the environment of every run
	reaper *reaper
	log    *slog.Logger // nil: silent

	// Descriptors held for starting tasks (newTaskRunner): null is the
	// task's standard input, opened once so a start needs no open of
	// /dev/null; spare are held only to be closed when a start fails for
	// want of descriptors, making room for it. Guarded by mu.
	null    *os.File
	spare   []*os.File
	startFn func(*exec.Cmd) error // (*exec.Cmd).Start; tests replace it

	mu      sync.Mutex
	stopSig syscall.Signal // what a stop sends the group (the operator's signal)
}

// spareFDs is how many descriptors a node holds in reserve for starting
// its task: starting a process takes about three (a pipe for the child's
// exec error, a pidfd).
const spareFDs = 8

// newTaskRunner returns the runner of cmd, holding the descriptors a start
// may need (see taskRunner).
func newTaskRunner(cmd []string, rp *reaper, env []string, log *slog.Logger) *taskRunner {
	t := &taskRunner{cmd: cmd, reaper: rp, env: env, log: log}
	t.null, _ = os.Open(os.DevNull)
	t.refill()
	return t
}

// refill reopens the spare descriptors a start used up, as far as it can.
func (t *taskRunner) refill() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.spare) < spareFDs {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return
		}
		t.spare = append(t.spare, f)
	}
}

// release closes the spare descriptors; false if there were none.
func (t *taskRunner) release() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.spare {
		f.Close()
	}
	had := len(t.spare) > 0
	t.spare = nil
	return had
}

// outOfFDs reports whether err says this process (EMFILE) or the system
// (ENFILE) has no file descriptor left.
func outOfFDs(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// start starts the command newCmd makes. A start that fails for want of
// file descriptors is a local fault, not the task's failure (the task
// never ran): the runner closes its spare descriptors and tries again at
// once, then every second until ctx ends, saying so at ERROR. Only if ctx
// ends first is it an error, which says it was a local fault.
func (t *taskRunner) start(ctx context.Context, newCmd func() *exec.Cmd) (*exec.Cmd, error) {
	startFn := t.startFn
	if startFn == nil {
		startFn = (*exec.Cmd).Start
	}
	log := t.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for attempt := 1; ; attempt++ {
		c := newCmd()
		err := startFn(c)
		if err == nil {
			if attempt > 1 {
				log.Warn("task started after this node had run out of file descriptors", "task", t.cmd[0], "attempts", attempt)
			}
			t.refill()
			return c, nil
		}
		if !outOfFDs(err) {
			return nil, err
		}
		if t.release() {
			continue // room made: at once
		}
		if attempt <= 2 || attempt%60 == 0 {
			log.Error("local fault: cannot start the task: this node is out of file descriptors (not a failure of the task, which has not run); retrying every second",
				"task", t.cmd[0], "err", err.Error(), "attempts", attempt)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (a local fault: this node ran out of file descriptors, so the task never started)", err)
		case <-tick.C:
		}
	}
}

// setStopSignal sets the signal a stopping node sends its running tasks.
func (t *taskRunner) setStopSignal(s syscall.Signal) {
	t.mu.Lock()
	t.stopSig = s
	t.mu.Unlock()
}

// run runs the task with extra environment. ctx ending stops it: the
// group gets the stop signal, then SIGKILL after grace.
func (t *taskRunner) run(ctx context.Context, grace time.Duration, env ...string) error {
	newCmd := func() *exec.Cmd {
		c := exec.Command(t.cmd[0], t.cmd[1:]...)
		c.Stdin, c.Stdout, c.Stderr = nil, os.Stdout, os.Stderr
		if t.null != nil {
			c.Stdin = t.null // no open of /dev/null at each start
		}
		c.Env = childEnv(append(t.env[:len(t.env):len(t.env)], env...)...)
		c.SysProcAttr = taskAttr()
		return c
	}
	// The parent-death signal is tied to the thread that started the
	// task: keep this goroutine on it until the task is gone.
	lockThread()
	defer unlockThread()
	c, err := t.start(ctx, newCmd)
	if err != nil {
		return fmt.Errorf("cannot start %s: %w", t.cmd[0], err)
	}
	pgid := c.Process.Pid
	t.reaper.tell('+', pgid)
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		t.mu.Lock()
		sig := t.stopSig
		t.mu.Unlock()
		if sig == 0 {
			sig = syscall.SIGTERM
		}
		_ = syscall.Kill(-pgid, sig)
		timer := time.NewTimer(grace)
		select {
		case err = <-waited:
			timer.Stop()
		case <-timer.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			err = <-waited
		}
	}
	// Nothing the task started outlives it: kill what it left in its group
	// and wait until that is gone (a signal is delivered asynchronously),
	// so the successor's task, started by the COMPLETE this node sends
	// next, never overlaps a leftover of this one.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	gone := groupGone(pgid, groupGoneWait)
	t.reaper.tell('-', pgid)
	if !gone {
		return fmt.Errorf("%s left processes in its process group %d that were still alive %v after SIGKILL; not carrying on while they run", t.cmd[0], pgid, groupGoneWait)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("%s was killed by signal %d (%v)", t.cmd[0], int(ws.Signal()), ws.Signal())
		}
		return fmt.Errorf("%s exited with status %d", t.cmd[0], ee.ExitCode())
	}
	if err == nil && ctx.Err() != nil {
		return fmt.Errorf("%s was stopped: %w", t.cmd[0], ctx.Err())
	}
	return err
}

// taskGrace is how long a stopped or timed-out task's group has between
// the stop signal and SIGKILL.
const taskGrace = 5 * time.Second

// verify runs --verify-cmd every --ready-interval until it exits 0: the
// health gate between this node's task and its successor's ("the switch
// is back and healthy before the next one restarts"). ctx bounds it
// (--task-timeout, or the node stopping).
func verify(ctx context.Context, o *runOpts, round string, log *slog.Logger) error {
	t := time.NewTicker(o.readyInterval)
	defer t.Stop()
	for attempt := 1; ; attempt++ {
		err := runShell(ctx, o.verifyCmd, "CHAINSYNC_ROUND="+round, "CHAINSYNC_NODE="+o.name)
		if ctx.Err() != nil {
			return fmt.Errorf("--verify-cmd never succeeded (%d attempts): %w", attempt, ctx.Err())
		}
		if err == nil {
			log.Info("verified: --verify-cmd succeeded; sending COMPLETE on", "round", round, "attempts", attempt)
			return nil
		}
		if attempt == 1 {
			log.Info("task done; not healthy yet (--verify-cmd failed), checking again every "+o.readyInterval.String(), "round", round, "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("--verify-cmd never succeeded (%d attempts): %w", attempt, ctx.Err())
		case <-t.C:
		}
	}
}

// groupGoneWait bounds how long a task's killed process group may take to
// die.
const groupGoneWait = 5 * time.Second

// groupGone waits up to bound until no live process is left in process
// group pgid, and reports whether none is. A zombie, dead but not yet
// reaped by its new parent, counts as gone.
func groupGone(pgid int, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for d := 100 * time.Microsecond; ; d = min(2*d, 10*time.Millisecond) {
		if syscall.Kill(-pgid, 0) == syscall.ESRCH || !groupAlive(pgid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(d)
	}
}
