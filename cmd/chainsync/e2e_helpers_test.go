//go:build unix

package main

// Helpers for the end-to-end tests of the built chainsync binary: TestMain
// builds it once, proc runs it as a subprocess. A neighbour played byte by
// byte over a real socket is a testnet.Peer.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// bin is the chainsync binary built by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chainsync-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "chainsync")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// e2eSeed returns a random seed, or CHAINSYNC_E2E_SEED's to replay a run.
func e2eSeed(t *testing.T) uint64 {
	t.Helper()
	s := os.Getenv("CHAINSYNC_E2E_SEED")
	if s == "" {
		return rand.Uint64()
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("CHAINSYNC_E2E_SEED=%q: %v", s, err)
	}
	return v
}

// newRand returns a seeded source and logs the seed if the test fails.
// CHAINSYNC_E2E_SEED=N replays a run.
func newRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := e2eSeed(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed %d (replay: CHAINSYNC_E2E_SEED=%d go test -run '^%s$' ./cmd/chainsync/)", seed, seed, t.Name())
		}
	})
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// freeAddrs reserves n loopback ports (see testnet.FreeAddrs), so
// that processes can be given each other's addresses before any is up.
func freeAddrs(t *testing.T, n int) []string {
	return testnet.FreeAddrs(t, n)
}

// syncBuf is a goroutine-safe output sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is one chainsync subprocess.
type proc struct {
	name     string
	cmd      *exec.Cmd
	out, err *syncBuf
	done     chan struct{}
	code     int // valid once done is closed; -1 if killed by a signal
}

// startProc runs the binary with args; env is added to the test's
// environment. The process is killed at cleanup if it is still running, and
// its stderr is logged if the test failed.
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	return startCommand(t, name, env, "chainsync "+strings.Join(args, " "), bin, args...)
}

// startCommand is startProc for any command line: path and args, with label
// naming it in the failure log.
func startCommand(t *testing.T, name string, env []string, label, path string, args ...string) *proc {
	t.Helper()
	return launch(t, name, env, label, false, path, args...)
}

// launch starts path args; with group, in a process group of its own,
// which is killed whole at cleanup if it still runs.
func launch(t *testing.T, name string, env []string, label string, group bool, path string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: new(syncBuf), err: new(syncBuf), done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.err
	if group {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	// A task's orphaned grandchild may hold the output pipes open.
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		switch {
		case group:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		default:
			select {
			case <-p.done:
			default:
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("---- %s (%s) exit %d, stderr:\n%s", name, label, p.code, p.err.String())
		}
	})
	return p
}

// cleanEnv is the test's environment without CHAINSYNC_ variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHAINSYNC_") {
			env = append(env, kv)
		}
	}
	return env
}

// wait waits up to d for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v", p.name, d)
		return 0
	}
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) signal(t *testing.T, s os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		t.Fatalf("signal %s: %v", p.name, err)
	}
}

// pollEvery is how often poll looks again.
const pollEvery = 5 * time.Millisecond

// poll calls cond until it holds or d has passed, and reports whether it
// held. It holds the only polling sleep of these tests: every wait for a
// file, a log line, a port or a process state goes through it.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
}

// waitFor waits up to d for cond to hold and fails the test, naming what
// it waited for, if it does not.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(d, cond) {
		t.Fatalf("no %s within %v", what, d)
	}
}

// waitLog waits up to d for a stderr line for which match is true and
// returns it.
func (p *proc) waitLog(t *testing.T, d time.Duration, what string, match func(line string) bool) string {
	t.Helper()
	var found string
	ok := false
	seen := func() bool {
		for _, l := range strings.Split(p.err.String(), "\n") {
			if match(l) {
				found, ok = l, true
				return true
			}
		}
		return false
	}
	exited := false
	poll(d, func() bool {
		if seen() {
			return true
		}
		// One last look once it has exited: the line may have been
		// written just before exit.
		if !p.running() {
			exited = true
			seen()
			return true
		}
		return false
	})
	switch {
	case ok:
		return found
	case exited:
		t.Fatalf("%s exited (%d) without a log line %s", p.name, p.code, what)
	default:
		t.Fatalf("%s: no log line %s within %v", p.name, what, d)
	}
	return ""
}

// logOrder fails unless p's log has, for each of steps, a line that
// contains it, the first such line of each after the first of the step
// before. A node logs every message before it sends it and every task
// before it starts it, so once it has exited this proves the order of
// what it did over the whole run, where a quiet window would see only
// what happened within it.
func (p *proc) logOrder(t *testing.T, steps ...string) {
	t.Helper()
	lines := strings.Split(p.err.String(), "\n")
	prev := -1
	for k, step := range steps {
		at := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, step) })
		switch {
		case at < 0:
			t.Errorf("%s: no log line %q", p.name, step)
			return
		case at <= prev:
			t.Errorf("%s: log line %q came before %q, want after", p.name, step, steps[k-1])
			return
		}
		prev = at
	}
}

// logCount returns how many lines of p's log contain each of subs.
func (p *proc) logCount(subs ...string) int {
	n := 0
	for _, l := range strings.Split(p.err.String(), "\n") {
		if containsAll(subs...)(l) {
			n++
		}
	}
	return n
}

// sentCount returns how many protocol messages p logged as sent to side
// ("pred" or "succ"; "" for both).
func (p *proc) sentCount(side string) int {
	n := 0
	for _, cmd := range []string{"READY", "START", "COMPLETE"} {
		n += p.logCount("sent "+cmd+" to", "to "+side)
	}
	return n
}

// logTime returns the time of p's first log line that contains sub, as the
// node's log prints it (HH:MM:SS.mmm, its own clock; only differences of
// two such times within a test mean anything).
func logTime(t *testing.T, p *proc, sub string) time.Time {
	t.Helper()
	for _, line := range strings.Split(p.err.String(), "\n") {
		if !strings.Contains(line, sub) {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		at, err := time.Parse("15:04:05.000", stamp)
		if err != nil {
			t.Fatalf("%s's log line %q has no time: %v", p.name, line, err)
		}
		return at
	}
	t.Fatalf("%s's log has no line with %q", p.name, sub)
	return time.Time{}
}

func containsAll(subs ...string) func(string) bool {
	return func(l string) bool {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				return false
			}
		}
		return true
	}
}

// readLines returns the lines of a file written by tasks; a missing file
// has none.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ---- raw sockets ----------------------------------------------------------

// A neighbour played by the test is a testnet.Peer (testnet.DialPeer, or
// accepted on a testnet.ListenPeer), the raw peer the library's tests use.

// chainOf is the --chain value naming names[i] at addrs[i]:
// "A=127.0.0.1:7001,B=127.0.0.1:7002".
func chainOf(names, addrs []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + addrs[i]
	}
	return strings.Join(parts, ",")
}
