//go:build unix

package main

// End-to-end test of a round whose exit wave did not come back: the Head
// reports what it knows (undelivered: the tasks after B may have run), not
// a failure. docs/FAULTS.md, "Undelivered rounds".

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestUndeliveredNotFaultE2E: a served chain A, B, C, D under --fault-policy
// halt with heartbeats. D's task stops B (SIGSTOP) once B's part is done:
// every task of the round runs, but the exit wave is stuck behind B. The
// Head names B silent and halts; chainsync open --wait exits 4 saying the
// round is undelivered ("no word from beyond B; the tasks after B may have
// run (ask C and D, or read their journals)"), not that it failed; the
// Head logs it as undelivered, never "round failed"; the Head's journal
// (chainsync journal) says undelivered and that the exit wave did not
// come back.
//
// docs/FAULTS.md, "Undelivered rounds"; docs/DESIGN.md, "Time"; draft,
// Error Handling.
func TestUndeliveredNotFaultE2E(t *testing.T) {
	dir := t.TempDir()
	names, addrs := nodeNames(4), freeAddrs(t, 4)
	sock := filepath.Join(dir, "control.sock")
	script := `[ "$CHAINSYNC_NODE" = D ] && kill -STOP "$BPID"; ` + taskScript
	start := func(i int, env ...string) *proc {
		args := append([]string{"run"}, placeArgs("chain", names, addrs, i)...)
		args = append(args, "--serve", "--heartbeat", "200ms", "--fault-policy", "halt",
			"--state-dir", filepath.Join(dir, names[i]))
		if i == 0 {
			args = append(args, "--control", "unix:"+sock)
		}
		return startProc(t, names[i], append([]string{"DIR=" + dir}, env...), append(args, "--", "sh", "-c", script)...)
	}
	procs := make([]*proc, 4)
	procs[1] = start(1)
	bpid := "BPID=" + strconv.Itoa(procs[1].cmd.Process.Pid)
	procs[3] = start(3, bpid)
	procs[2] = start(2)
	procs[0] = start(0)
	procs[0].waitLog(t, 10*time.Second, "control endpoint up", func(string) bool { return exists(sock) })

	code, _, errOut := openCmd(t, "--control", "unix:"+sock, "--id", "r1", "--wait")
	const known = "no word from beyond B; the tasks after B may have run (ask C and D, or read their journals)"
	if code != 4 || !strings.Contains(errOut, "round r1: undelivered: "+known) {
		t.Fatalf("open --wait: exit %d, stderr %q; want 4 and %q", code, errOut, known)
	}
	if tasks := readLines(t, filepath.Join(dir, "tasks")); !slices.Contains(tasks, "end D r1") {
		t.Fatalf("D did not run its task: %q", tasks)
	}
	head := procs[0]
	if got := head.wait(t, 15*time.Second); got != 4 {
		t.Errorf("the Head exited %d under --fault-policy halt, want 4", got)
	}
	if n := head.logCount("round over: undelivered: "+known, "status=undelivered"); n != 1 {
		t.Errorf("the Head logged %d \"round over: undelivered\" lines naming B, C and D, want 1", n)
	}
	if n := head.logCount("round failed"); n != 0 {
		t.Errorf("the Head logged the undelivered round as failed %d times", n)
	}
	j := startProc(t, "journal", nil, "journal", filepath.Join(dir, "A"))
	if c := j.wait(t, 10*time.Second); c != 0 {
		t.Fatalf("chainsync journal: exit %d: %s", c, j.err.String())
	}
	if out := j.out.String(); !strings.Contains(out, "undelivered") || !strings.Contains(out, "did not come back") {
		t.Errorf("chainsync journal of the Head does not say the round is undelivered and its exit wave did not come back:\n%s", out)
	}
}
