//go:build unix

package taskrun

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
// has forked a child; then the test kills the node and wants the task's
// whole group gone: the parent-death signal takes only the task's main
// process, and the reaper, which never heard of the group, finds the
// child by the token of the start it heard announced.
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
	if how != "forked" {
		t.Errorf("the task never forked its child in the window (%s): the test proved nothing", how)
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
	rp, err := StartReaper()
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "forked")
	// The task forks a child in its group at once, then says so.
	tr := New(Config{Cmd: []string{"sh", "-c", `sleep 3600 & echo $! > "$MARK.tmp" && mv "$MARK.tmp" "$MARK"; wait`}, Reaper: rp})
	testHookStarted = func(pid int) {
		// Wait until the task has forked its child (a positive event;
		// the bound is generous).
		how := "timeout"
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if _, err := os.Stat(marker); err == nil {
				how = "forked"
				break
			}
		}
		fmt.Fprintf(report, "window %d %s\n", pid, how)
		select {} // until the test kills this node
	}
	_ = tr.Run(context.Background(), time.Second, "MARK="+marker)
	t.Fatal("run returned")
}

// groupCommands lists the command lines of group pgid's live processes.
func groupCommands(pgid int) string {
	var out []string
	_ = eachLiveProc(func(pid string, pg int) bool {
		if pg == pgid {
			c, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
			out = append(out, pid+": "+strings.ReplaceAll(strings.TrimRight(string(c), "\x00"), "\x00", " "))
		}
		return true
	})
	return strings.Join(out, "; ")
}
