//go:build linux

package main

// End-to-end tests of the task's cgroup (Linux, cgroup v2 where the node
// may create cgroups): what a task starts dies with it and with its node,
// also a process that left the task's process group with setsid.
// docs/DESIGN.md, "The task dies with its node".

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procsWithArgs returns the pids of the live processes whose command line
// is exactly args.
func procsWithArgs(args ...string) []int {
	want := []byte(strings.Join(args, "\x00") + "\x00")
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Equal(b, want) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && bytes.HasPrefix(bytes.TrimSpace(st[i+1:]), []byte("Z")) {
				continue // a zombie is dead
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// childWithArg returns the pid of a child of parent whose command line
// holds arg, or 0.
func childWithArg(parent int, arg string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(st, ')')
		f := bytes.Fields(st[i+1:])
		if len(f) < 2 || string(f[1]) != strconv.Itoa(parent) {
			continue
		}
		if cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); bytes.Contains(cl, []byte(arg)) {
			return pid
		}
	}
	return 0
}

// TestTaskCgroupTakesSetsidChildE2E: a single node whose task starts
// `setsid sleep 1001.N &`, which leaves the task's process group. Where
// the node runs its tasks in cgroups (its log says so; else the test skips
// with the log's reason):
//   - task end: the task exits at once; once the round is over, the sleep
//     is gone (the task's cgroup was killed), and once the node exited,
//     its cgroup too;
//   - node killed: the task waits; the node is killed with SIGKILL; its
//     reaper kills the task's cgroup, so the sleep is gone, and removes
//     the node's; a node restarted on the same --state-dir does not run
//     beside the old task;
//   - node and reaper killed: both are killed with SIGKILL, so nothing
//     kills the cgroup and the sleep survives them; the node restarted on
//     the same --state-dir finds the old task's cgroup, kills it (and says
//     so), and the sleep is gone.
//
// docs/DESIGN.md, "The task dies with its node"; docs/RESTARTS.md.
func TestTaskCgroupTakesSetsidChildE2E(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("cgroups are Linux's")
	}
	rng := newRand(t)
	run := func(t *testing.T, dir, marker, wait string) *proc {
		script := fmt.Sprintf(`setsid sleep %s </dev/null >/dev/null 2>&1 & touch "$DIR/started"; %s`, marker, wait)
		return startProc(t, "A", []string{"DIR=" + dir}, "run", "--name", "A", "--round", "r1",
			"--state-dir", filepath.Join(dir, "state"), "--", "sh", "-c", script)
	}
	// inCgroups waits for p to say how it runs its tasks, and returns
	// the node's cgroup; it skips the test where that is not in cgroups.
	inCgroups := func(t *testing.T, p *proc) string {
		line := p.waitLog(t, 10*time.Second, "how tasks run", containsAll("tasks run"))
		if !strings.Contains(line, "in a cgroup of their own") {
			t.Skipf("this node cannot run tasks in cgroups here: %s", line)
		}
		_, cg, _ := strings.Cut(line, "cgroup=")
		return strings.Fields(cg)[0]
	}
	// removed waits until the node's cgroup is gone: nothing is left
	// behind in the cgroup tree.
	removed := func(t *testing.T, cg, when string) {
		t.Helper()
		waitFor(t, 5*time.Second, "the node's cgroup removed "+when, func() bool { return !exists(cg) })
	}
	gone := func(t *testing.T, marker, when string) {
		t.Helper()
		waitFor(t, 5*time.Second, "the setsid sleep gone "+when, func() bool { return len(procsWithArgs("sleep", marker)) == 0 })
	}
	started := func(t *testing.T, dir, marker string) {
		t.Helper()
		waitFor(t, 10*time.Second, "the task and its setsid sleep", func() bool {
			return exists(filepath.Join(dir, "started")) && len(procsWithArgs("sleep", marker)) == 1
		})
	}
	t.Run("task end", func(t *testing.T) {
		dir, marker := t.TempDir(), fmt.Sprintf("1001.%d", rng.IntN(1e9))
		t.Cleanup(func() { killAll(procsWithArgs("sleep", marker)) })
		p := run(t, dir, marker, "exit 0")
		cg := inCgroups(t, p)
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("node exited %d", code)
		}
		gone(t, marker, "after the task ended")
		removed(t, cg, "after the node exited")
	})
	t.Run("node killed", func(t *testing.T) {
		dir, marker := t.TempDir(), fmt.Sprintf("1001.%d", rng.IntN(1e9))
		t.Cleanup(func() { killAll(procsWithArgs("sleep", marker)) })
		p := run(t, dir, marker, "sleep 60")
		cg := inCgroups(t, p)
		started(t, dir, marker)
		p.signal(t, syscall.SIGKILL)
		p.wait(t, 5*time.Second)
		gone(t, marker, "after its node's kill -9")
		removed(t, cg, "by the reaper after its node's kill -9")
		p = run(t, dir, marker, "sleep 60")
		p.waitLog(t, 10*time.Second, "the restarted node resumed", containsAll("resumed"))
		if n := len(procsWithArgs("sleep", marker)); n != 0 {
			t.Errorf("the restarted node runs beside %d process(es) of its old task", n)
		}
	})
	t.Run("node and reaper killed", func(t *testing.T) {
		dir, marker := t.TempDir(), fmt.Sprintf("1001.%d", rng.IntN(1e9))
		t.Cleanup(func() { killAll(procsWithArgs("sleep", marker)) })
		p := run(t, dir, marker, "sleep 60")
		inCgroups(t, p)
		started(t, dir, marker)
		reaper := childWithArg(p.cmd.Process.Pid, "_reaper")
		if reaper == 0 {
			t.Fatal("the node's reaper was not found")
		}
		if err := syscall.Kill(reaper, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the reaper gone", func() bool { return childWithArg(p.cmd.Process.Pid, "_reaper") == 0 })
		p.signal(t, syscall.SIGKILL)
		p.wait(t, 5*time.Second)
		// Nothing killed the cgroup (node and reaper are gone): the sleep
		// outlives both.
		if n := len(procsWithArgs("sleep", marker)); n != 1 {
			t.Fatalf("%d setsid sleep(s) alive after node and reaper died, want 1 (nothing could kill it yet)", n)
		}
		p = run(t, dir, marker, "sleep 60")
		p.waitLog(t, 10*time.Second, "the old task's cgroup killed", containsAll("killed what an earlier run of this node's task left running", "cgroup="))
		gone(t, marker, "after the node's restart")
	})
}

// killAll sends SIGKILL to pids.
func killAll(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
