package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The node helper process of TestTaskDiesWithNodeKilledRightAfterStart
// (this test binary run again): it runs a task with a real reaper and
// stops between the task's start and the reaper hearing of its group.
const reaperNodeEnv = "REAPER_TEST_NODE_DIR"

// TestTaskDiesWithNodeKilledRightAfterStart: docs/DESIGN.md "Restarts and
// durable state": a node's task does not outlive the node, even when the
// node is SIGKILLed right after starting it, before it told the reaper the
// task's process group (issue: the kill matrix found a task's `sleep`
// alive minutes after its node was SIGKILLed, reparented, no reaper
// left). The node (a helper process) stops in that window until its task
// has either run far enough to fork a child or is held back from running
// (its process is still chainsync's, not the task's); then the test kills
// the node and wants the task's group gone and the task never run past
// that point unseen.
func TestTaskDiesWithNodeKilledRightAfterStart(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	dir := t.TempDir()
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	node := exec.Command(os.Args[0], "-test.run=^TestReaperHelperNode$", "-test.count=1")
	node.Env = append(os.Environ(), reaperNodeEnv+"="+dir)
	node.Stdout, node.Stderr = os.Stderr, os.Stderr
	node.ExtraFiles = []*os.File{wr} // fd 3: the helper's report
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	wr.Close()
	killed := false
	defer func() {
		if !killed {
			_ = node.Process.Kill()
			_ = node.Wait()
		}
	}()

	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(rd).ReadString('\n')
		lines <- strings.TrimSpace(l)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(60 * time.Second):
		t.Fatal("the node helper never reported its task started")
	}
	var pid int
	var how string
	if _, err := fmt.Sscanf(line, "window %d %s", &pid, &how); err != nil {
		t.Fatalf("the node helper said %q, want \"window PID how\"", line)
	}
	// Whatever happens, no sleep 3600 is left behind by the test.
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	t.Logf("the node is between starting its task (pid %d, %s) and telling the reaper; SIGKILL", pid, how)

	if err := node.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = node.Wait()
	killed = true

	// The group is gone soon (parent-death signal, reaper); a generous
	// bound, since the machine may be loaded.
	deadline := time.Now().Add(10 * time.Second)
	for liveInGroup(pid) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("10s after SIGKILL of the node, its task's group %d still has %d live processes: %s",
				pid, liveInGroup(pid), groupCommands(pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if how != "held" {
		t.Errorf("the task ran (it forked a child) before the reaper knew its group (%s)", how)
	}
}

// TestReaperHelperNode is the node of
// TestTaskDiesWithNodeKilledRightAfterStart; it does nothing in a normal
// test run.
func TestReaperHelperNode(t *testing.T) {
	dir := os.Getenv(reaperNodeEnv)
	if dir == "" {
		t.Skip("the helper process of TestTaskDiesWithNodeKilledRightAfterStart")
	}
	syscall.CloseOnExec(3)
	report := os.NewFile(3, "report")
	rp, err := startReaper()
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "forked")
	// The task forks a child in its group at once, then says so.
	tr := newTaskRunner([]string{"sh", "-c", `sleep 3600 & echo $! > "$MARK.tmp" && mv "$MARK.tmp" "$MARK"; wait`}, rp, nil, nil)
	testHookStarted = func(pid int) {
		// Wait until the task has forked its child, or is held back: its
		// process still runs this binary (as "_reaper ...") rather than
		// the task. Either is a positive event; the bound is generous.
		how := "timeout"
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if _, err := os.Stat(marker); err == nil {
				how = "forked"
				break
			}
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil &&
				bytes.Contains(b, []byte("\x00"+reaperCommand+"\x00")) {
				how = "held"
				break
			}
		}
		fmt.Fprintf(report, "window %d %s\n", pid, how)
		select {} // until the test kills this node
	}
	_ = tr.run(context.Background(), time.Second, "MARK="+marker)
	t.Fatal("run returned")
}

// groupCommands lists the command lines of group pgid's live processes.
func groupCommands(pgid int) string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 3 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			c, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			out = append(out, e.Name()+": "+strings.ReplaceAll(strings.TrimRight(string(c), "\x00"), "\x00", " "))
		}
	}
	return strings.Join(out, "; ")
}

// TestGatedTaskKeepsItsPromises: a task started through its gate (a node
// with a reaper) is still the node's direct child ($PPID, the draft's
// switch that restarts its own node), the leader of its own process group,
// with the argv and the exact environment the node gives it, and a
// parent-death signal; an exec that fails is reported as a failed start.
func TestGatedTaskKeepsItsPromises(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	rp, err := startReaper()
	if err != nil {
		t.Fatal(err)
	}
	defer rp.close()
	if rp.gateExe() == "" {
		t.Fatal("a running reaper, but tasks start without a gate")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	env := filepath.Join(dir, "env")
	tr := newTaskRunner([]string{"sh", "-c", `echo "$PPID $$ $(cut -d' ' -f5 /proc/$$/stat) $0" > "$OUT" && cat /proc/$$/environ > "$ENVF"`}, rp, []string{"CHAINSYNC_ROLE=head"}, nil)
	if err := tr.run(context.Background(), time.Second, "OUT="+out, "ENVF="+env); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var ppid, pid, pgid int
	var arg0 string
	if _, err := fmt.Sscanf(string(b), "%d %d %d %s", &ppid, &pid, &pgid, &arg0); err != nil {
		t.Fatalf("the task wrote %q: %v", b, err)
	}
	if ppid != os.Getpid() {
		t.Errorf("the task's $PPID is %d, want the node, %d", ppid, os.Getpid())
	}
	if pgid != pid {
		t.Errorf("the task (pid %d) is in group %d, want the leader of its own", pid, pgid)
	}
	if arg0 != "sh" {
		t.Errorf("the task's $0 is %q, want sh", arg0)
	}
	got, err := os.ReadFile(env)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(childEnv("CHAINSYNC_ROLE=head", "OUT="+out, "ENVF="+env), "\x00") + "\x00"
	if string(got) != want {
		t.Errorf("the task's environment:\n%q\nwant exactly what the node gives it:\n%q", got, want)
	}

	// The parent-death signal of the task's own process (exec keeps only
	// the exec'ing thread's): a task that reads it with prctl.
	if py, err := exec.LookPath("python3"); err == nil {
		sig := filepath.Join(dir, "pdeathsig")
		tr := newTaskRunner([]string{py, "-c", `import ctypes, sys
s = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(s))  # PR_GET_PDEATHSIG
open(sys.argv[1], "w").write(str(s.value))`, sig}, rp, nil, nil)
		if err := tr.run(context.Background(), time.Second); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(sig); err != nil || string(b) != strconv.Itoa(int(syscall.SIGKILL)) {
			t.Errorf("the task's parent-death signal is %q (%v), want SIGKILL (%d)", b, err, syscall.SIGKILL)
		}
	} else {
		t.Log("no python3: the parent-death signal is not checked")
	}

	// An exec that fails (an executable whose interpreter is missing, so
	// the path lookup passes and the exec itself fails): reported as
	// (*exec.Cmd).Start reports it.
	badInterp := filepath.Join(dir, "bad-interpreter")
	if err := os.WriteFile(badInterp, []byte("#!"+filepath.Join(dir, "missing")+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	tr = newTaskRunner([]string{badInterp}, rp, nil, nil)
	err = tr.run(context.Background(), time.Second)
	if err == nil || err.Error() != "cannot start "+badInterp+": fork/exec "+badInterp+": no such file or directory" {
		t.Errorf("running a script whose interpreter is missing: %v, want cannot start ... no such file or directory", err)
	}
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("%v is not ENOENT", err)
	}
}

// TestGatedStartFailureLeaksNoDescriptors: a start that fails for want of
// descriptors (retried, see TestTaskStartOutOfDescriptors) closes its
// gate's pipes, and a run closes them all: a node that runs many tasks
// does not run out of descriptors itself.
func TestGatedStartFailureLeaksNoDescriptors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	rp, err := startReaper()
	if err != nil {
		t.Fatal(err)
	}
	defer rp.close()
	fails := 0
	tr := newTaskRunner([]string{"true"}, rp, nil, nil)
	tr.startFn = func(c *exec.Cmd) error {
		if fails > 0 {
			fails--
			return &os.PathError{Op: "fork/exec", Path: c.Path, Err: syscall.EMFILE}
		}
		return c.Start()
	}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	if err := tr.run(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	before := fds()
	for i := range 5 {
		fails = 1
		if err := tr.run(context.Background(), time.Second); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if after := fds(); after != before {
		t.Errorf("%d open descriptors after five runs whose first start failed, %d before", after, before)
	}
}

// TestTaskRunsWhenItsGateCannot: if the gate cannot be started (this
// binary cannot be run again here), the task still runs, directly, and
// the node says what it lost.
func TestTaskRunsWhenItsGateCannot(t *testing.T) {
	rp, err := startReaper()
	if err != nil {
		t.Fatal(err)
	}
	defer rp.close()
	dir := t.TempDir()
	rp.exe = filepath.Join(dir, "missing")
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	out := filepath.Join(dir, "ran")
	tr := newTaskRunner([]string{"sh", "-c", `: > "$OUT"`}, rp, nil, log)
	if err := tr.run(context.Background(), time.Second, "OUT="+out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("the task did not run: %v", err)
	}
	if !strings.Contains(logs.String(), "cannot start the task's gate; starting the task directly") {
		t.Errorf("no warning in the log:\n%s", logs.String())
	}
}
