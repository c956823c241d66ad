package taskrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chainsync-go/chainsync/internal/bug"
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
//     and kills every group still registered.
//   - The group is known only once the task has started, so a node killed
//     between the start and telling the reaper would leave what the task
//     forked meanwhile. So each start is announced first with a random
//     token that the task's environment carries (taskTokenVar), and its
//     processes inherit: a reaper whose node died with a start announced
//     but its group not yet told finds the processes carrying the token
//     (Linux, /proc) and kills their groups. What can escape is a process
//     that, in that moment, cleared its environment or became one the
//     reaper may not read (a setuid program, for a node that is not root),
//     when nothing else in its process group still carries the token.
//   - A process that leaves the group (setsid) is not in it: on Linux,
//     where the node may create cgroups, each run also starts in a cgroup
//     of its own, killed whole at the task's end, by the reaper and by a
//     node restarted on the same --state-dir (cgroup_linux.go).
//
// The task stays the node's direct child, so a task can find its node as
// $PPID (the draft's switch whose upgrade restarts the node).

// taskTokenVar is the variable in a task's environment that names its
// start to the reaper. Lower case and not a CHAINSYNC_ name: it
// configures nothing, is never read as a setting and is not one of the
// variables that describe the task (CHAINSYNC_ROUND, ROLE and NODE).
const taskTokenVar = "_chainsync_task_token"

// ReaperCommand is the hidden subcommand of the reaper.
const ReaperCommand = "_reaper"

// Reaper is the node's side of the reaper process.
type Reaper struct {
	mu sync.Mutex
	w  io.WriteCloser // nil if the reaper could not start
	c  *exec.Cmd
}

// StartReaper starts the reaper process. Without one (the binary cannot
// be found) tasks still run; only the node-death guarantee is weaker, and
// the error says so.
func StartReaper() (*Reaper, error) {
	self, err := os.Executable()
	if err != nil {
		return &Reaper{}, err
	}
	c := exec.Command(self, ReaperCommand)
	w, err := c.StdinPipe()
	if err != nil {
		return &Reaper{}, err
	}
	c.Stdout, c.Stderr = nil, os.Stderr
	// Its own group: a Ctrl-C for the node's group does not reach it.
	c.SysProcAttr = groupAttr()
	if err := c.Start(); err != nil {
		return &Reaper{}, err
	}
	return &Reaper{w: w, c: c}, nil
}

// tell sends the reaper one line: "?TOKEN" (a task with this token is
// starting), "+PGID TOKEN" (it started as group PGID), "!TOKEN" (it did
// not start), "-PGID" (its group is gone), "cPATH" (it starts in the
// cgroup PATH), "dPATH" (that cgroup is gone) or "pPATH" (the node's
// cgroup, the parent of its tasks', removed at the end).
func (r *Reaper) tell(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		_, _ = io.WriteString(r.w, line+"\n")
	}
}

// Close ends the reaper (it kills any group still registered).
func (r *Reaper) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		r.w.Close()
		_ = r.c.Wait()
		r.w = nil
	}
}

// ReaperMain is chainsync _reaper: it reads the lines of reaper.tell from
// its standard input and, at end of input (its node exited or died),
// kills every process group still registered, and the groups of the
// processes that carry the token of a start whose group it never heard.
func ReaperMain() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	// The node's own group (and the pipeline it may share with, say, a
	// tee) is never a task's, whatever a process carrying a token did.
	spare := spareGroups()
	groups := map[int]bool{}
	starting := map[string]bool{}
	cgroups := map[string]bool{} // cgroup_linux.go
	nodeCgroup := ""             // the node's, parent of its tasks' cgroups
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if len(line) < 2 {
			continue
		}
		arg := line[1:]
		switch line[0] {
		case '?':
			starting[arg] = true
		case '!':
			delete(starting, arg)
		case '+':
			pg, token, _ := strings.Cut(arg, " ")
			delete(starting, token)
			if pgid, err := strconv.Atoi(pg); err == nil && pgid > 1 {
				groups[pgid] = true
				holdGroup(pgid)
			}
		case '-':
			if pgid, err := strconv.Atoi(arg); err == nil {
				delete(groups, pgid)
				releaseGroup(pgid)
			}
		case 'c':
			cgroups[arg] = true
		case 'd':
			delete(cgroups, arg)
		case 'p':
			nodeCgroup = arg
		}
	}
	// A task's cgroup holds every process it started, those that left its
	// process group too: killed first, whole.
	for path := range cgroups {
		reapCgroup(path)
	}
	if nodeCgroup != "" {
		_ = os.Remove(nodeCgroup) // empty now, unless a restarted node uses it
	}
	for pgid := range groups {
		_ = killGroup(pgid, syscall.SIGKILL)
	}
	for token := range starting {
		killToken(token, spare)
	}
	return 0
}

// killToken kills the groups (but those in spare) of the processes whose
// environment carries token, again until none is left (one may fork while
// the first pass reads /proc), for at most a few passes.
func killToken(token string, spare map[int]bool) {
	for pass := 0; pass < 10; pass++ {
		pgids := slices.DeleteFunc(tokenGroups(taskTokenVar+"="+token), func(pg int) bool { return spare[pg] })
		if len(pgids) == 0 {
			return
		}
		for _, pgid := range pgids {
			_ = killGroup(pgid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond) // the kills land; then look again
	}
}

// Config is what a Runner needs from the node: the command and what
// surrounds each of its runs.
type Config struct {
	Cmd     []string     // the command and its arguments
	Env     []string     // added to the environment of every run
	Reaper  *Reaper      // told of every run (StartReaper); nil: none
	Cgroups *Cgroups     // a cgroup per run (cgroup_linux.go); nil: none
	Log     *slog.Logger // nil: silent
}

// Runner runs this node's task command, one process group per run.
type Runner struct {
	cmd    []string
	env    []string
	reaper *Reaper
	log    *slog.Logger
	cg     *Cgroups

	// Descriptors held for starting tasks (New): null is the task's
	// standard input, opened once so a start needs no open of
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

// New returns the runner of c.Cmd, holding the descriptors a start may
// need (see Runner). The reaper is told where the node's cgroups are, so
// that it removes them if the node dies.
func New(c Config) *Runner {
	t := &Runner{cmd: c.Cmd, reaper: c.Reaper, env: c.Env, log: c.Log, cg: c.Cgroups}
	if t.reaper == nil {
		t.reaper = &Reaper{}
	}
	if line := t.cg.reaperLine(); line != "" {
		t.reaper.tell(line)
	}
	t.null, _ = os.Open(os.DevNull)
	t.refill()
	return t
}

// refill reopens the spare descriptors a start used up, as far as it can.
func (t *Runner) refill() {
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
func (t *Runner) release() bool {
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
func (t *Runner) start(ctx context.Context, newCmd func() *exec.Cmd) (*exec.Cmd, error) {
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

// SetStopSignal sets the signal a stopping node sends its running tasks.
func (t *Runner) SetStopSignal(s syscall.Signal) {
	t.mu.Lock()
	t.stopSig = s
	t.mu.Unlock()
}

// Run runs the task with extra environment. ctx ending stops it: the
// group gets the stop signal, then SIGKILL after grace. A task that
// exited non-zero is a *StatusError.
func (t *Runner) Run(ctx context.Context, grace time.Duration, env ...string) error {
	return t.RunPiped(ctx, grace, nil, nil, nil, env...)
}

// RunPiped is Run with the process's standard input and output on stdin
// and stdout where not nil (a persistent worker's pipes, internal/worker),
// and started, if not nil, told the process's pid once it runs.
func (t *Runner) RunPiped(ctx context.Context, grace time.Duration, stdin, stdout *os.File, started func(pid int), env ...string) error {
	token := strconv.FormatUint(rand.Uint64(), 36)
	cgPath, cgFD := "", -1 // the run's cgroup, if any (cgroup_linux.go)
	newCmd := func() *exec.Cmd {
		c := exec.Command(t.cmd[0], t.cmd[1:]...)
		c.Stdin, c.Stdout, c.Stderr = nil, os.Stdout, os.Stderr
		if t.null != nil {
			c.Stdin = t.null // no open of /dev/null at each start
		}
		if stdin != nil {
			c.Stdin, c.Stdout = stdin, stdout
		}
		c.Env = ChildEnv(append(append(t.env[:len(t.env):len(t.env)], env...), taskTokenVar+"="+token)...)
		c.SysProcAttr = taskAttr()
		cgroupAttr(c.SysProcAttr, cgFD)
		return c
	}
	t.reaper.tell("?" + token) // before the start: see the top of this file
	// The parent-death signal is tied to the thread that started the
	// task: keep this goroutine on it until the task is gone.
	lockThread()
	defer unlockThread()
	t.cg.ReapEarlier() // an earlier process's task never runs beside this one
	cgPath, cgFD = t.cg.create(token)
	if cgPath != "" {
		t.reaper.tell("c" + cgPath) // before the start, like the token
	}
	c, err := t.startIn(ctx, newCmd, &cgPath, &cgFD)
	if err != nil {
		t.reaper.tell("!" + token)
		return fmt.Errorf("cannot start %s: %w", t.cmd[0], err)
	}
	pgid := c.Process.Pid
	holdGroup(pgid)
	defer releaseGroup(pgid)
	if testHookStarted != nil {
		testHookStarted(pgid)
	}
	t.reaper.tell("+" + strconv.Itoa(pgid) + " " + token)
	if started != nil {
		started(pgid)
	}
	waited := make(chan error, 1)
	bug.Go(func() { waited <- c.Wait() })
	select {
	case err = <-waited:
	case <-ctx.Done():
		t.mu.Lock()
		sig := t.stopSig
		t.mu.Unlock()
		if sig == 0 {
			sig = syscall.SIGTERM
		}
		_ = killGroup(pgid, sig)
		timer := time.NewTimer(grace)
		select {
		case err = <-waited:
			timer.Stop()
		case <-timer.C:
			_ = killGroup(pgid, syscall.SIGKILL)
			err = <-waited
		}
	}
	// Nothing the task started outlives it: kill what it left in its group
	// and wait until that is gone (a signal is delivered asynchronously),
	// so the successor's task, started by the COMPLETE this node sends
	// next, never overlaps a leftover of this one.
	_ = killGroup(pgid, syscall.SIGKILL)
	gone := groupGone(pgid, groupGoneWait)
	t.reaper.tell("-" + strconv.Itoa(pgid))
	if !gone {
		return fmt.Errorf("%s left processes in its process group %d that were still alive %v after SIGKILL; not carrying on while they run", t.cmd[0], pgid, groupGoneWait)
	}
	if cgPath != "" {
		// Its cgroup holds what left the group too (setsid).
		if !killCgroup(cgPath, groupGoneWait) {
			return fmt.Errorf("%s left processes in its cgroup %s that were still alive %v after SIGKILL; not carrying on while they run", t.cmd[0], cgPath, groupGoneWait)
		}
		t.reaper.tell("d" + cgPath)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return &SignalError{msg: fmt.Sprintf("%s was killed by signal %d (%v)", t.cmd[0], int(ws.Signal()), ws.Signal()),
				sig: int(ws.Signal()), name: ws.Signal().String()}
		}
		return &StatusError{msg: fmt.Sprintf("%s exited with status %d", t.cmd[0], ee.ExitCode()), code: ee.ExitCode()}
	}
	if err == nil && ctx.Err() != nil {
		return fmt.Errorf("%s was stopped: %w", t.cmd[0], ctx.Err())
	}
	return err
}

// startIn is start for a run in the cgroup *path (open as *fd), if any;
// it closes *fd once started. A start in a cgroup that fails where the
// same start without one works turns cgroups off for the runner (the
// kernel or the delegation does not allow them); either way the cgroup
// of a run that is not in one is removed and *path cleared.
func (t *Runner) startIn(ctx context.Context, newCmd func() *exec.Cmd, path *string, fd *int) (*exec.Cmd, error) {
	c, err := t.start(ctx, newCmd)
	if *fd < 0 {
		return c, err
	}
	closeCgroupFD(*fd)
	*fd = -1
	if err == nil {
		return c, nil
	}
	cerr := err
	if c, err = t.start(ctx, newCmd); err == nil {
		t.cg.disable(cerr)
	}
	t.reaper.tell("d" + *path)
	_ = killCgroup(*path, 0)
	*path = ""
	return c, err
}

// testHookStarted, if set (tests only), is called with the task's pid
// once it has started and before the reaper is told its group.
var testHookStarted func(pid int)

// Grace is how long a stopped or timed-out task's group has between
// the stop signal and SIGKILL.
const Grace = 5 * time.Second

// groupGoneWait bounds how long a task's killed process group may take to
// die.
const groupGoneWait = 5 * time.Second

// groupGone waits up to bound until no live process is left in process
// group pgid, and reports whether none is. A zombie, dead but not yet
// reaped by its new parent, counts as gone.
func groupGone(pgid int, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for d := 100 * time.Microsecond; ; d = min(2*d, 10*time.Millisecond) {
		if killGroup(pgid, 0) == syscall.ESRCH || !groupAlive(pgid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(d)
	}
}

// StatusError is a task (or undo) that exited non-zero: its message as
// before, and the status for the undo wave's outcome ("task exited 1";
// chainsync.ExitCoder).
type StatusError struct {
	msg  string
	code int
}

func (e *StatusError) Error() string { return e.msg }

// ExitCode returns the command's exit status.
func (e *StatusError) ExitCode() int { return e.code }

// SignalError is a task (or worker) that a signal killed: "sh was killed
// by signal 9 (killed)".
type SignalError struct {
	msg  string
	sig  int
	name string
}

func (e *SignalError) Error() string { return e.msg }

// Signal returns the signal's number.
func (e *SignalError) Signal() int { return e.sig }

// SignalName returns the signal's name ("killed").
func (e *SignalError) SignalName() string { return e.name }
