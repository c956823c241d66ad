//go:build unix

package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/taskrun"
	"github.com/chainsync-go/chainsync/worker"
)

// The tests run this test binary as the worker: with helperVar set it
// serves the protocol in the way the variable names (helperMain).
const helperVar = "CHAINSYNC_WORKER_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperVar); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperMain is a worker: "ok" answers every round ok but "bad" (an
// error) and "die" (exits 3 holding it) and "hang" (never answers);
// "hello-fail" refuses hello; "slow-hello" answers it after 200 ms;
// "long" answers with a line over MaxLine; "junk" writes junk and an
// answer to an id never asked before each answer; "reverse" answers the
// requests it holds in reverse order once it holds 4.
func helperMain(mode string) int {
	out := os.Stdout
	switch mode {
	case "long":
		_ = worker.Serve(func(ctx context.Context, req worker.Request) error {
			fmt.Fprintf(out, "{\"id\":%d,\"ok\":true,\"pad\":\"%s\"}\n", req.ID, strings.Repeat("x", MaxLine))
			select {} // the line was the answer, as far as this worker knows
		})
		return 0
	case "reverse":
		var mu sync.Mutex
		var held []chan struct{}
		_ = worker.Serve(func(ctx context.Context, req worker.Request) error {
			mu.Lock()
			me := make(chan struct{})
			held = append(held, me)
			if len(held) == 4 {
				for i := len(held) - 1; i >= 0; i-- {
					close(held[i])
					time.Sleep(time.Millisecond) // each answer its own line, in this order
				}
				held = nil
			}
			mu.Unlock()
			<-me
			return nil
		})
		return 0
	}
	w := &worker.Worker{Run: func(ctx context.Context, req worker.Request) error {
		if mode == "junk" {
			fmt.Fprintf(out, "junk \x1b[31m\n{\"id\":%d,\"ok\":true}\n", 1<<40)
		}
		switch req.Round {
		case "bad":
			return errors.New("disk full")
		case "die":
			os.Exit(3)
		case "hang":
			select {}
		case "close":
			os.Stdout.Close() // and live on, answering nothing
			select {}
		}
		return nil
	}}
	switch mode {
	case "hello-fail":
		w.Start = func(worker.Hello) error { return errors.New("no GPU") }
	case "slow-hello":
		w.Start = func(worker.Hello) error { time.Sleep(200 * time.Millisecond); return nil }
	}
	if err := w.Serve(os.Stdin, out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// spawn runs this test binary as a worker in mode, in a process group of
// its own, as the node's task runner would (without the reaper and
// cgroup, which internal/cli tests).
func spawn(mode string) Spawn {
	return func(ctx context.Context, stdin, stdout *os.File, started func(int), env ...string) error {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), append(env, helperVar+"="+mode)...)
		c.Stdin, c.Stdout, c.Stderr = stdin, stdout, os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			return err
		}
		started(c.Process.Pid)
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			return describe(err)
		case <-ctx.Done():
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			return describe(<-done)
		}
	}
}

// describe says how a helper ended, as the node's runner does.
func describe(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			return fmt.Errorf("helper was killed by signal %d", int(ws.Signal()))
		}
		return fmt.Errorf("helper exited with status %d", ee.ExitCode())
	}
	return err
}

// logBuf collects a Manager's log.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start starts a Manager of mode's helper and waits until it is up.
func start(t testing.TB, mode string, cfg Config) (*Manager, *logBuf) {
	t.Helper()
	lb := new(logBuf)
	cfg.Command, cfg.Node, cfg.Role, cfg.Spawn = "helper", "B", "middle", spawn(mode)
	cfg.Log = slog.New(slog.NewTextHandler(lb, nil))
	cfg.MinBackoff = time.Millisecond
	m := New(cfg)
	m.Start()
	t.Cleanup(func() {
		m.Close()
		if t.Failed() {
			t.Logf("log:\n%s", lb)
		}
	})
	select {
	case <-m.Up():
	case err := <-m.Failed():
		t.Fatalf("the worker did not start: %v", err)
	}
	return m, lb
}

// TestRun: requests answered ok and with an error; the error's text is
// the task's error. docs/WORKERS.md, "The protocol".
func TestRun(t *testing.T) {
	m, _ := start(t, "ok", Config{})
	ctx := context.Background()
	for _, r := range []string{"r1", "", `odd "id"`} {
		if err := m.Run(ctx, r); err != nil {
			t.Fatalf("round %q: %v", r, err)
		}
	}
	if err := m.Run(ctx, "bad"); err == nil || err.Error() != "disk full" {
		t.Fatalf("round bad: %v, want the worker's error", err)
	}
	if s := m.Status(); s.Starts != 1 || s.PID == 0 || s.Outstanding != 0 {
		t.Fatalf("status %+v, want one start, up, none outstanding", s)
	}
}

// TestHelloRefused: a worker that answers hello with an error cannot
// start: Failed says why, and the requests waiting for it fail.
func TestHelloRefused(t *testing.T) {
	m := New(Config{Command: "helper", Spawn: spawn("hello-fail")})
	m.Start()
	defer m.Close()
	err := <-m.Failed()
	if err == nil || !strings.Contains(err.Error(), "no GPU") {
		t.Fatalf("Failed: %v, want the worker's refusal", err)
	}
	if err := m.Run(context.Background(), "r1"); err == nil {
		t.Fatal("a request to a worker that could not start succeeded")
	}
}

// TestHelloTimeout: a worker that does not answer hello within the
// timeout is reported and stopped.
func TestHelloTimeout(t *testing.T) {
	m := New(Config{Command: "helper", Spawn: spawn("slow-hello"), HelloTimeout: 20 * time.Millisecond})
	m.Start()
	defer m.Close()
	if err := <-m.Failed(); err == nil || !strings.Contains(err.Error(), "did not answer hello within 20ms") {
		t.Fatalf("Failed: %v, want the hello timeout", err)
	}
}

// TestWorkerDies: a worker that exits holding a request fails it, naming
// its exit status, and is started again for the next request.
func TestWorkerDies(t *testing.T) {
	m, lb := start(t, "ok", Config{})
	pid := m.Status().PID
	if err := m.Run(context.Background(), "die"); err == nil || !strings.Contains(err.Error(), "exited with status 3") {
		t.Fatalf("request held by a dying worker: %v, want its exit status", err)
	}
	if err := m.Run(context.Background(), "r2"); err != nil {
		t.Fatalf("the next request: %v", err)
	}
	if s := m.Status(); s.PID == pid || s.Starts != 2 || !strings.Contains(s.LastEnd, "exited with status 3") {
		t.Fatalf("status %+v: want a second worker, the first's end named", s)
	}
	if !strings.Contains(lb.String(), "worker ended; starting it again") {
		t.Fatal("the restart was not logged")
	}
}

// TestBackoffGrowsWhileNoRequestIsAnswered: a worker that answers hello
// and then dies on every request is started again after a pause that
// doubles each time (docs/WORKERS.md); answering hello is not answering
// a request.
func TestBackoffGrowsWhileNoRequestIsAnswered(t *testing.T) {
	m, lb := start(t, "ok", Config{})
	for range 3 {
		if err := m.Run(context.Background(), "die"); err == nil {
			t.Fatal("a request held by a dying worker succeeded")
		}
	}
	if err := m.Run(context.Background(), "r1"); err != nil {
		t.Fatalf("the next request: %v", err)
	}
	for _, in := range []string{"in=1ms", "in=2ms", "in=4ms"} {
		if !strings.Contains(lb.String(), "worker ended; starting it again (chainsync status shows it)") || !strings.Contains(lb.String(), in) {
			t.Fatalf("no restart logged %s: the pause does not double while no request is answered", in)
		}
	}
}

// TestStdoutClosed: a worker that closes its standard output holding a
// request fails it and is stopped, then started again.
func TestStdoutClosed(t *testing.T) {
	m, _ := start(t, "ok", Config{})
	pid := m.Status().PID
	err := m.Run(context.Background(), "close")
	if err == nil || !strings.Contains(err.Error(), "it closed its standard output") {
		t.Fatalf("request held by a worker that closed its output: %v", err)
	}
	if syscall.Kill(-pid, 0) != syscall.ESRCH {
		t.Fatalf("the worker's group %d is still there", pid)
	}
	if err := m.Run(context.Background(), "r2"); err != nil {
		t.Fatalf("the next request: %v", err)
	}
}

// TestCancel: a request past its deadline is cancelled; unanswered after
// the grace, the worker is stopped and a new one takes the next request.
func TestCancel(t *testing.T) {
	m, _ := start(t, "ok", Config{CancelGrace: 50 * time.Millisecond})
	pid := m.Status().PID
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := m.Run(ctx, "hang")
	if err == nil || !strings.Contains(err.Error(), "not answered within 50ms of its cancel") {
		t.Fatalf("hung request: %v, want it cancelled and the worker stopped", err)
	}
	if syscall.Kill(-pid, 0) != syscall.ESRCH {
		t.Fatalf("the stopped worker's group %d is still there", pid)
	}
	if err := m.Run(context.Background(), "r2"); err != nil || m.Status().PID == pid {
		t.Fatalf("the next request: %v on pid %d (the stopped one was %d)", err, m.Status().PID, pid)
	}
}

// TestLongLine: a response line over MaxLine is the worker's error: the
// request fails, the node goes on with a new worker.
func TestLongLine(t *testing.T) {
	m, _ := start(t, "long", Config{})
	err := m.Run(context.Background(), "r1")
	if err == nil || !strings.Contains(err.Error(), "longer than 64 KiB") {
		t.Fatalf("request answered by an overlong line: %v", err)
	}
}

// TestJunk: lines that are not responses, and a response to an id not
// outstanding, are logged, escaped, and change nothing.
func TestJunk(t *testing.T) {
	m, lb := start(t, "junk", Config{})
	for range 3 {
		if err := m.Run(context.Background(), "r"); err != nil {
			t.Fatal(err)
		}
	}
	log := lb.String()
	if !strings.Contains(log, "not a response") || !strings.Contains(log, `\x1b[31m`) || !strings.Contains(log, "not outstanding") {
		t.Fatalf("log:\n%s\nwant the junk line, escaped, and the unknown id", log)
	}
}

// TestParallelReverse: requests outstanding at once are matched by id,
// whatever order the answers come in.
func TestParallelReverse(t *testing.T) {
	m, _ := start(t, "reverse", Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- m.Run(context.Background(), fmt.Sprint("r", i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkRun is one request's round trip to a worker in Go.
func BenchmarkRun(b *testing.B) {
	m, _ := start(b, "ok", Config{})
	ctx := context.Background()
	for b.Loop() {
		if err := m.Run(ctx, "r"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStatusText: the one-line status chainsync status prints.
func TestStatusText(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 2, 3, 0, time.UTC)
	for _, c := range []struct {
		s    Status
		want string
	}{
		{Status{PID: 42, Since: at, Starts: 1}, "pid 42, up since 10:02:03, 1 start"},
		{Status{PID: 43, Since: at, Starts: 2, Outstanding: 1, LastEnd: "worker w exited with status 3", LastEndAt: at.Add(-2 * time.Second)},
			"pid 43, up since 10:02:03, 2 starts, 1 request(s) outstanding (last ended 10:02:01: worker w exited with status 3)"},
		{Status{Starts: 3, NextStart: at, LastEnd: "x", LastEndAt: at}, "not up, starting again at 10:02:03, 3 starts (last ended 10:02:03: x)"},
	} {
		if got := c.s.Text(); got != c.want {
			t.Errorf("Text() = %q, want %q", got, c.want)
		}
	}
}

// TestExitWordsNameHowTheWorkerEnded: a worker that exits or is killed
// fails its request in the words docs/WORKERS.md gives ("worker exited
// with status 3", "worker killed by signal 9"), from the task runner's
// own errors.
func TestExitWordsNameHowTheWorkerEnded(t *testing.T) {
	for _, c := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"sh", "-c", "exit 3"}, "worker exited with status 3 (sh)"},
		{[]string{"sh", "-c", "kill -9 $$"}, "worker killed by signal 9 (killed; sh)"},
		{[]string{"true"}, "worker exited with status 0 (true)"},
	} {
		err := taskrun.New(taskrun.Config{Cmd: c.cmd}).Run(context.Background(), time.Second)
		if got := exitWords(err, c.cmd[0]); got != c.want {
			t.Errorf("%v: %q (from %v), want %q", c.cmd, got, err, c.want)
		}
	}
	if got := exitWords(errors.New("exec: \"nope\": not found"), "nope"); got != `worker exec: "nope": not found` {
		t.Errorf("a start that failed: %q", got)
	}
}
