package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

const superviseUsage = `Usage: chainsync supervise [--max-restarts N] [--backoff D] -- chainsync run RUN-FLAGS... -- TASK [ARG...]

Runs a node (the command after --, normally chainsync run) and starts it
again whenever it dies without an outcome: killed by a signal (kill -9,
the OOM killer, a task that restarts its own node), or exit 1 (it could
not start, for example while the old process still held the port or the
state directory). An outcome is final and is not restarted: 0 done, 2
usage error, 3 task failed, 4 fault, 5 cancelled at the Head, 130
stopped. Give the node --state-dir (and, for a task that kills its own
node, --resume-task done), so that it comes back where it stopped.

SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed to the node, which stops
(exit 130); supervise then restarts nothing and exits with the node's
status. Each restart is logged on stderr with the status that caused it.
On Linux the node runs in a process group of its own (a Ctrl-C reaches it
once, through supervise) and is sent SIGTERM if supervise itself dies.

supervise does not survive a reboot: where the task reboots the machine,
let systemd start the node at boot (docs/RESTARTS.md has the unit's
Restart= settings, which restart on the same statuses).

Example:
  chainsync supervise --max-restarts 5 -- chainsync run --chain $CHAIN --name B \
    --round upgrade-2026-12 --state-dir /var/lib/chainsync/B --resume-task done \
    --verify-cmd switch-healthy -- ./upgrade-and-restart-node.sh

Exit status: the node's last status (killed by signal N: 128+N), or 2 on
a usage error of supervise itself.

Flags:
`

// superviseOpts are chainsync supervise's flags.
type superviseOpts struct {
	maxRestarts int
	backoff     time.Duration
}

func (o *superviseOpts) flags(fs *flag.FlagSet) {
	fs.IntVar(&o.maxRestarts, "max-restarts", 10, "give up after `N` restarts in a row, each after a run shorter than a minute (a run of a minute or longer starts the count again); 0: never restart")
	fs.DurationVar(&o.backoff, "backoff", time.Second, "wait `D` before each restart")
}

// superviseWindow is how long a run must last for the restarts before it
// to be forgiven: a node that ran that long was not failing to start.
const superviseWindow = time.Minute

// finalStatus reports whether a node's exit status is an outcome, not to
// be restarted (README, "Exit status").
func finalStatus(code int) bool {
	switch code {
	case ExitOK, ExitUsage, ExitTaskFailed, ExitFault, ExitCancelled, ExitInterrupted:
		return true
	}
	return false
}

func superviseMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("supervise", flag.ContinueOnError)
	quietFlags(fs)
	var o superviseOpts
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return flagFailed(stdout, stderr, fs, "supervise", err)
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "chainsync supervise: "+format+"\n(see chainsync supervise --help)\n", a...)
		return ExitUsage
	}
	cmd := fs.Args()
	switch {
	case len(cmd) == 0:
		return usage("give the node's command after --, e.g. chainsync supervise -- chainsync run --chain ... -- ./task.sh")
	case o.maxRestarts < 0:
		return usage("--max-restarts %d: use 0 or more", o.maxRestarts)
	case o.backoff < 0:
		return usage("--backoff must not be negative")
	}
	if _, err := exec.LookPath(cmd[0]); err != nil {
		return usage("%q cannot be run: %v", cmd[0], err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)
	s := supervisor{cmd: cmd, opts: o, sigs: sigs, log: stderr, now: time.Now}
	return s.loop()
}

// supervisor runs one node again and again.
type supervisor struct {
	cmd  []string
	opts superviseOpts
	sigs chan os.Signal // stop signals, passed to the node
	log  io.Writer
	now  func() time.Time
	// start starts cmd (startNode; tests replace it): the node's exit
	// status arrives on the channel, and signal passes a signal to it.
	start func(cmd []string) (done <-chan int, signal func(os.Signal), err error)
}

// loop runs the node until it exits with an outcome, a stop signal came,
// or the restarts ran out, and returns the status to exit with.
func (s *supervisor) loop() int {
	start := s.start
	if start == nil {
		start = startNode
	}
	restarts := 0 // in a row, of runs shorter than superviseWindow
	for {
		began := s.now()
		done, sig, err := start(s.cmd)
		if err != nil {
			fmt.Fprintf(s.log, "chainsync supervise: cannot start %s: %v\n", s.cmd[0], err)
			return ExitError
		}
		var code int
		stopped := false
	wait:
		for {
			select {
			case code = <-done:
				break wait
			case sg := <-s.sigs:
				stopped = true
				sig(sg)
			}
		}
		switch {
		case stopped:
			return code
		case finalStatus(code):
			return code
		}
		if s.now().Sub(began) >= superviseWindow {
			restarts = 0
		}
		if restarts >= s.opts.maxRestarts {
			fmt.Fprintf(s.log, "chainsync supervise: node exited %s; not starting it again: %d restarts in a row (--max-restarts)\n", describeStatus(code), restarts)
			return code
		}
		restarts++
		fmt.Fprintf(s.log, "chainsync supervise: node exited %s, without an outcome; starting it again in %v (restart %d of at most %d in a row)\n",
			describeStatus(code), s.opts.backoff, restarts, s.opts.maxRestarts)
		t := time.NewTimer(s.opts.backoff)
		select {
		case <-t.C:
		case <-s.sigs:
			t.Stop()
			return ExitInterrupted // stopped between two runs
		}
	}
}

// describeStatus says what an exit status means: "137 (killed by signal
// 9: killed)".
func describeStatus(code int) string {
	if code > 128 && code < 128+65 {
		sig := syscall.Signal(code - 128)
		return fmt.Sprintf("%d (killed by signal %d: %v)", code, int(sig), sig)
	}
	if code == ExitError {
		return "1 (could not start, or an internal error)"
	}
	return fmt.Sprint(code)
}

// startNode starts cmd with supervise's standard input and output (on
// Linux in a process group of its own: a Ctrl-C reaches supervise, which
// passes it on once), and returns its exit status (killed by signal N: 128+N) on
// done.
func startNode(cmd []string) (<-chan int, func(os.Signal), error) {
	c := exec.Command(cmd[0], cmd[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.SysProcAttr = nodeAttr()
	started := make(chan error, 1)
	done := make(chan int, 1)
	// The parent-death signal is tied to the thread that started the
	// node: start it and wait for it on one locked goroutine.
	go superviseNode(c, started, done)
	if err := <-started; err != nil {
		return nil, nil, err
	}
	return done, func(s os.Signal) { _ = c.Process.Signal(s) }, nil
}

// superviseNode starts c on a locked thread, reports the start on started
// and c's exit status on done.
func superviseNode(c *exec.Cmd, started chan<- error, done chan<- int) {
	lockNodeThread()
	defer unlockNodeThread()
	if err := c.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	err := c.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		done <- 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			done <- 128 + int(ws.Signal())
			return
		}
		done <- ee.ExitCode()
	default:
		done <- ExitError
	}
}
