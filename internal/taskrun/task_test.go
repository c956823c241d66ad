//go:build unix

package taskrun

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTaskGroupGoneWhenRunReturns: docs/DESIGN.md "Restarts and durable
// state": a node's task does not outlive it, and tasks run in chain order
// without overlapping. When Runner.run returns (and the node sends
// COMPLETE on, starting the successor's task), nothing the task left in
// its process group may still be alive: a SIGKILL is delivered
// asynchronously, so the runner must wait for the group to be gone, not
// only signal it. Repeated, because the window is short.
func TestTaskGroupGoneWhenRunReturns(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pgid")
	// Leaves three children behind, each in the task's group.
	tr := &Runner{cmd: []string{"sh", "-c", `echo $$ > "$PGID_FILE"; sleep 30 & sleep 30 & sleep 30 & exit 0`}, reaper: &Reaper{}}
	for i := range 20 {
		if err := tr.Run(context.Background(), time.Second, "PGID_FILE="+pidFile); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		if live := liveInGroup(pgid); live > 0 {
			t.Fatalf("run %d: %d processes of the task's group %d still alive when run returned", i, live, pgid)
		}
	}
}

// TestTaskGroupKilledOnStop: a stopped task's whole group gets the stop
// signal and is gone when run returns.
func TestTaskGroupKilledOnStop(t *testing.T) {
	dir := t.TempDir()
	// The task tells its pgid through a FIFO: the test's read returns
	// once the task is up, with no polling.
	pidFile := filepath.Join(dir, "pgid")
	if err := syscall.Mkfifo(pidFile, 0o600); err != nil {
		t.Fatal(err)
	}
	tr := &Runner{cmd: []string{"sh", "-c", `echo $$ > "$PGID_FILE"; sleep 30 & sleep 30`}, reaper: &Reaper{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx, time.Second, "PGID_FILE="+pidFile) }()
	up := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(pidFile) // blocks until the task opens the FIFO and ends at its close
		up <- string(b)
	}()
	var pgid int
	select {
	case s := <-up:
		var err error
		if pgid, err = strconv.Atoi(strings.TrimSpace(s)); err != nil {
			t.Fatalf("the task wrote %q, want its pgid", s)
		}
	case err := <-done:
		t.Fatalf("the task ended (%v) before it wrote its pgid", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the task did not start")
	}
	cancel()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "signal") {
		t.Errorf("run returned %v, want the task killed by a signal", err)
	}
	if live := liveInGroup(pgid); live > 0 {
		t.Errorf("%d processes of the stopped task's group %d still alive", live, pgid)
	}
}

// liveInGroup counts the processes of group pgid that are not zombies.
func liveInGroup(pgid int) int {
	if err := syscall.Kill(-pgid, 0); err == syscall.ESRCH {
		return 0
	}
	n := 0
	_ = eachLiveProc(func(_ string, pg int) bool {
		if pg == pgid {
			n++
		}
		return true
	})
	return n
}

// A task that cannot start because this node has run out of file
// descriptors is a local fault, not the task's failure (issue: a status
// flood made a task "fail" with "open /dev/null: too many open files",
// remembered as task-failed): the runner frees its spare descriptors and
// starts it at once, or keeps trying every second, logging a local fault;
// only if its context ends first does it give up, and the error says why.
func TestTaskStartOutOfDescriptors(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	emfile := &os.PathError{Op: "fork/exec", Path: "true", Err: syscall.EMFILE}
	fails := 0
	tr := New(Config{Cmd: []string{"true"}, Reaper: &Reaper{}, Log: log})
	tr.startFn = func(c *exec.Cmd) error {
		if fails > 0 {
			fails--
			return emfile
		}
		return c.Start()
	}
	// One failure: the spare descriptors make room, it starts at once.
	fails = 1
	if err := tr.Run(context.Background(), time.Second); err != nil {
		t.Fatalf("after one EMFILE: %v", err)
	}
	if len(tr.spare) != spareFDs {
		t.Errorf("%d spare descriptors after the start, want them reopened (%d)", len(tr.spare), spareFDs)
	}
	// Two: no spare left to free (the first failure used them); it says
	// so and retries a second later.
	fails = 2
	tr.release()
	start := time.Now()
	if err := tr.Run(context.Background(), time.Second); err != nil {
		t.Fatalf("after two EMFILEs: %v", err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("started again after %v, want a retry a second later", d)
	}
	if !strings.Contains(logs.String(), "local fault: cannot start the task: this node is out of file descriptors") {
		t.Errorf("no local-fault line in the log:\n%s", logs.String())
	}
	// Never: the context ends it, with an error that says it was local.
	fails = 1 << 30
	tr.release()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err := tr.Run(ctx, time.Second)
	if err == nil || !strings.Contains(err.Error(), "local fault") || !errors.Is(err, syscall.EMFILE) {
		t.Errorf("error %v, want EMFILE named a local fault", err)
	}
}
