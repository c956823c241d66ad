//go:build unix

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// People steer the chain (docs/STEERING.md): hold, release, approve and
// deny at any node's --control, end to end over real TCP. Every chain
// here has heartbeats on and --phase-timeout 2s on every node, so a wait
// for a person that looked like a fault would be reported.

// steerFlags are every node's flags in these tests.
var steerFlags = []string{"--heartbeat", "200ms", "--phase-timeout", "2s", "--linger", "1s", "--round", "r1"}

// steerTask records the node's name in $DIR/ran when its task runs.
const steerTask = `echo "$CHAINSYNC_NODE" >> "$DIR/ran"`

// steerChain starts the nodes of names on loopback, the Tail first, with
// steerFlags, extra(name)'s flags and the task; it returns them by name
// and the chain string (to restart one).
func steerChain(t *testing.T, dir string, names []string, extra func(name string) []string) (map[string]*proc, func(name string) *proc) {
	t.Helper()
	addrs := freeAddrs(t, len(names))
	chain := chainOf(names, addrs)
	start := func(n string) *proc {
		args := append([]string{"run", "--chain", chain, "--name", n}, steerFlags...)
		args = append(args, extra(n)...)
		args = append(args, "--", "sh", "-c", steerTask)
		return startProc(t, n, []string{"DIR=" + dir}, args...)
	}
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		procs[names[i]] = start(names[i])
	}
	return procs, start
}

// ran returns the nodes whose task ran, in order.
func ran(t *testing.T, dir string) []string {
	t.Helper()
	if !exists(filepath.Join(dir, "ran")) {
		return nil
	}
	return readLines(t, filepath.Join(dir, "ran"))
}

// steerCmd runs chainsync with args to completion and returns its exit
// status, stdout and stderr.
func steerCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	p := startProc(t, args[0], nil, args...)
	code := p.wait(t, 20*time.Second)
	return code, p.out.String(), p.err.String()
}

// noFaultLogged fails if any node logged a fault (an ERROR line).
func noFaultLogged(t *testing.T, procs map[string]*proc) {
	t.Helper()
	for n, p := range procs {
		for _, l := range strings.Split(p.err.String(), "\n") {
			if strings.Contains(l, "level=ERROR") || strings.Contains(l, "fault") && strings.Contains(l, "level=WARN") {
				t.Errorf("%s logged %q while a person was being waited for", n, l)
			}
		}
	}
}

// controlOf is node n's --control socket in dir.
func controlOf(dir, n string) string { return "unix:" + filepath.Join(dir, n+".sock") }

// A 4-node chain, C with --approve --on-hold: A and B run, C's hook runs
// once with CHAINSYNC_HOLD=approval, C and D do not run for 5 s and no
// fault fires anywhere; chainsync approve at C: C then D run, and every
// node exits 0. Status at D says "waiting for approval at C".
func TestApproveE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	status := freeAddrs(t, 1)[0]
	procs, _ := steerChain(t, dir, []string{"A", "B", "C", "D"}, func(n string) []string {
		switch n {
		case "C":
			return []string{"--approve", "--control", controlOf(dir, "C"),
				"--on-hold", `echo "$CHAINSYNC_HOLD $CHAINSYNC_ROUND $CHAINSYNC_NODE" >> "$DIR/hook"`}
		case "D":
			return []string{"--status-addr", status}
		}
		return nil
	})
	waitFile(t, filepath.Join(dir, "hook"), 20*time.Second)
	time.Sleep(5 * time.Second)
	if got := ran(t, dir); !slices.Equal(got, []string{"A", "B"}) {
		t.Fatalf("tasks run while C waits for its approval: %v, want [A B]", got)
	}
	if got := readLines(t, filepath.Join(dir, "hook")); !slices.Equal(got, []string{"approval r1 C"}) {
		t.Fatalf("--on-hold ran %q, want once with approval r1 C", got)
	}
	noFaultLogged(t, procs)
	code, out, _ := steerCmd(t, "status", status)
	if code != 0 || !strings.Contains(out, "waiting for approval at C") {
		t.Fatalf("status at D (exit %d) does not say C waits for an approval:\n%s", code, out)
	}
	code, _, errOut := steerCmd(t, "approve", "--control", controlOf(dir, "C"), "--round", "nope")
	if code != 1 || !strings.Contains(errOut, "not waiting for an approval") {
		t.Fatalf("approve of a round not waiting: exit %d, %s", code, errOut)
	}
	if code, _, errOut := steerCmd(t, "approve", "--control", controlOf(dir, "C")); code != 0 {
		t.Fatalf("approve exited %d: %s", code, errOut)
	}
	for _, n := range []string{"A", "B", "C", "D"} {
		if code := procs[n].wait(t, 20*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", n, code)
		}
	}
	if got := ran(t, dir); !slices.Equal(got, []string{"A", "B", "C", "D"}) {
		t.Fatalf("tasks %v, want A B C D", got)
	}
}

// The same with deny: C exits 3 (a task failure), D never runs, and A and
// B report it with the reason.
func TestDenyE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	procs, _ := steerChain(t, dir, []string{"A", "B", "C", "D"}, func(n string) []string {
		if n == "C" {
			return []string{"--approve", "--control", controlOf(dir, "C"),
				"--on-hold", `echo "$CHAINSYNC_HOLD" >> "$DIR/hook"`}
		}
		return nil
	})
	waitFile(t, filepath.Join(dir, "hook"), 20*time.Second)
	code, _, errOut := steerCmd(t, "deny", "--control", controlOf(dir, "C"), "--reason", "smoke test failed", "--by", "ann")
	if code != 0 {
		t.Fatalf("deny exited %d: %s", code, errOut)
	}
	if code := procs["C"].wait(t, 20*time.Second); code != 3 {
		t.Fatalf("C exited %d, want 3 (denied: a task failure)", code)
	}
	for _, n := range []string{"A", "B", "D"} {
		if code := procs[n].wait(t, 20*time.Second); code == 0 {
			t.Errorf("%s exited 0 after a denial", n)
		}
	}
	for _, n := range []string{"A", "B"} {
		if !strings.Contains(procs[n].err.String(), "smoke test failed") {
			t.Errorf("%s's log does not give the reason of the denial:\n%s", n, procs[n].err.String())
		}
	}
	if got := ran(t, dir); !slices.Equal(got, []string{"A", "B"}) {
		t.Fatalf("tasks %v, want only A B", got)
	}
}

// hold at B before the round reaches it: A runs, B does not for 5 s and no
// fault fires; B killed with kill -9 while held and restarted on its state
// directory is still held; release: the chain completes.
func TestHoldE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bFlags := []string{"--control", controlOf(dir, "B"), "--state-dir", filepath.Join(dir, "B.state")}
	addrs := freeAddrs(t, 5)
	status := addrs[4]
	names := []string{"A", "B", "C", "D"}
	chain := chainOf(names, addrs)
	start := func(n string) *proc {
		args := append([]string{"run", "--chain", chain, "--name", n}, steerFlags...)
		if n == "B" {
			args = append(args, bFlags...)
		}
		if n == "D" {
			args = append(args, "--status-addr", status)
		}
		args = append(args, "--", "sh", "-c", steerTask)
		return startProc(t, n, []string{"DIR=" + dir}, args...)
	}
	procs := map[string]*proc{"B": start("B")}
	sock := filepath.Join(dir, "B.sock")
	waitFor(t, 10*time.Second, "B's control socket", func() bool { return exists(sock) })
	if code, _, errOut := steerCmd(t, "hold", "--control", controlOf(dir, "B"), "--reason", "change window"); code != 0 {
		t.Fatalf("hold exited %d: %s", code, errOut)
	}
	if code, _, errOut := steerCmd(t, "hold", "--control", controlOf(dir, "B")); code != 1 || !strings.Contains(errOut, "held already") {
		t.Fatalf("a second hold: exit %d, %s", code, errOut)
	}
	for _, n := range []string{"D", "C", "A"} {
		procs[n] = start(n)
	}
	waitFor(t, 20*time.Second, "A's task", func() bool { return len(ran(t, dir)) == 1 })
	time.Sleep(5 * time.Second)
	if got := ran(t, dir); !slices.Equal(got, []string{"A"}) {
		t.Fatalf("tasks while B is held: %v, want [A]", got)
	}
	noFaultLogged(t, procs)
	for _, n := range []string{"A", "C", "D"} {
		if !strings.Contains(procs[n].err.String(), "held at B since") {
			t.Errorf("%s was not told of B's hold:\n%s", n, procs[n].err.String())
		}
	}
	if code, out, _ := steerCmd(t, "status", status); code != 0 || !strings.Contains(out, "held at B since ") || !strings.Contains(out, "(change window)") {
		t.Errorf("status at D (exit %d) does not say B is held:\n%s", code, out)
	}

	// kill -9 while held; restarted on its state directory it is held.
	procs["B"].signal(t, syscall.SIGKILL)
	procs["B"].wait(t, 10*time.Second)
	_ = os.Remove(sock)
	if code, out, errOut := steerCmd(t, "journal", filepath.Join(dir, "B.state")); code != 0 || !strings.Contains(out, "steering: held since ") || !strings.Contains(out, "(change window)") {
		t.Errorf("chainsync journal of B (exit %d) does not say it is held:\n%s%s", code, out, errOut)
	}
	procs["B"] = start("B")
	procs["B"].waitLog(t, 10*time.Second, "B resumed held", containsAll("resumed held"))
	waitFor(t, 10*time.Second, "B's control socket", func() bool { return exists(sock) })
	time.Sleep(2 * time.Second)
	if got := ran(t, dir); !slices.Equal(got, []string{"A"}) {
		t.Fatalf("tasks after B's restart while held: %v, want [A]", got)
	}
	if code, _, errOut := steerCmd(t, "release", "--control", controlOf(dir, "B")); code != 0 {
		t.Fatalf("release exited %d: %s", code, errOut)
	}
	for _, n := range names {
		if code := procs[n].wait(t, 20*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", n, code)
		}
	}
	if got := ran(t, dir); !slices.Equal(got, names) {
		t.Fatalf("tasks %v, want A B C D", got)
	}
}

// Each steering command: 2 on a usage error, 1 when nothing answers.
func TestSteerUsageE2E(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"hold"}, {"release", "extra"}, {"approve", "--control", "nonsense"}, {"deny", "--control", "unix:/x", "--round", "bad id"},
	} {
		if code, _, errOut := steerCmd(t, args...); code != 2 {
			t.Errorf("%v exited %d, want 2: %s", args, code, errOut)
		}
	}
	if code, _, _ := steerCmd(t, "hold", "--control", "unix:"+filepath.Join(t.TempDir(), "none.sock")); code != 1 {
		t.Errorf("hold with no node: exit %d, want 1", code)
	}
}

// servedChain starts a served chain of names on loopback (the Tail
// first), every node with --serve, --heartbeat 200ms and --phase-timeout
// 2s, the Head with --control, extra(name)'s flags, and a task that
// records "NODE ROUND" in $DIR/NODE.ran.
func servedChain(t *testing.T, dir string, names []string, extra func(name string) []string) map[string]*proc {
	t.Helper()
	return servedChainTask(t, dir, names, extra, `echo "$CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/$CHAINSYNC_NODE.ran"`)
}

// servedChainTask is servedChain with task (sh -c, $DIR is dir) as every
// node's task.
func servedChainTask(t *testing.T, dir string, names []string, extra func(name string) []string, task string) map[string]*proc {
	t.Helper()
	addrs := freeAddrs(t, len(names))
	chain := chainOf(names, addrs)
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		args := []string{"run", "--chain", chain, "--name", n, "--serve", "--heartbeat", "200ms", "--phase-timeout", "2s"}
		if i == 0 {
			args = append(args, "--control", controlOf(dir, n))
		}
		args = append(args, extra(n)...)
		args = append(args, "--", "sh", "-c", task)
		procs[n] = startProc(t, n, []string{"DIR=" + dir}, args...)
	}
	return procs
}

// ranRounds returns the rounds node n ran, in order.
func ranRounds(t *testing.T, dir, n string) []string {
	t.Helper()
	path := filepath.Join(dir, n+".ran")
	if !exists(path) {
		return nil
	}
	var ids []string
	for _, l := range readLines(t, path) {
		if f := strings.Fields(l); len(f) == 2 {
			ids = append(ids, f[1])
		}
	}
	return ids
}

// A served chain with --every 200ms: pause at the Head: no new round
// opens and no task starts for 3 s, no fault; resume: rounds open again,
// and every node runs them in the same order.
func TestPauseE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := []string{"A", "B", "C"}
	procs := servedChain(t, dir, names, func(n string) []string {
		if n == "A" {
			return []string{"--every", "200ms"}
		}
		return nil
	})
	waitFor(t, 20*time.Second, "two rounds at C", func() bool { return len(ranRounds(t, dir, "C")) >= 2 })
	if code, _, errOut := steerCmd(t, "pause", "--control", controlOf(dir, "A"), "--reason", "incident 4711"); code != 0 {
		t.Fatalf("pause exited %d: %s", code, errOut)
	}
	for _, n := range []string{"B", "C"} {
		procs[n].waitLog(t, 10*time.Second, n+" told of the pause", containsAll("paused at the Head A"))
	}
	procs["A"].waitLog(t, 10*time.Second, "a skipped tick", containsAll("tick skipped, the chain is paused"))
	// Rounds in flight may pass the nodes the pause had not reached yet;
	// once it has reached them all (above), nothing starts.
	before := map[string]int{}
	for _, n := range names {
		before[n] = len(ranRounds(t, dir, n))
	}
	opened := procs["A"].logCount("round opened")
	time.Sleep(3 * time.Second)
	for _, n := range names {
		if got := len(ranRounds(t, dir, n)); got != before[n] {
			t.Errorf("%s ran %d task(s) while the chain was paused", n, got-before[n])
		}
	}
	if got := procs["A"].logCount("round opened"); got != opened {
		t.Errorf("the Head opened %d round(s) while paused", got-opened)
	}
	noFaultLogged(t, procs)
	if code, _, errOut := steerCmd(t, "pause", "--control", controlOf(dir, "A")); code != 1 || !strings.Contains(errOut, "paused already") {
		t.Fatalf("a second pause: exit %d, %s", code, errOut)
	}
	if code, _, errOut := steerCmd(t, "resume", "--control", controlOf(dir, "A")); code != 0 {
		t.Fatalf("resume exited %d: %s", code, errOut)
	}
	waitFor(t, 20*time.Second, "two more rounds at C", func() bool { return len(ranRounds(t, dir, "C")) >= before["C"]+2 })
	head := ranRounds(t, dir, "A")
	for _, n := range []string{"B", "C"} {
		got := ranRounds(t, dir, n)
		if len(got) > len(head) || !slices.Equal(got, head[:len(got)]) {
			t.Fatalf("%s ran %v, not in the Head's order %v", n, got, head)
		}
	}
	if code, _, errOut := steerCmd(t, "pause", "--control", controlOf(dir, "B")); code != 1 {
		t.Fatalf("pause at a node that is not the Head (B has no --control): exit %d, %s", code, errOut)
	}
}

// cancel of a round held at C: C and D never run it, open --wait exits 5
// ("cancelled at the Head: REASON"); the next round runs everywhere.
func TestCancelE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	procs := servedChain(t, dir, []string{"A", "B", "C", "D"}, func(n string) []string {
		if n == "C" {
			return []string{"--control", controlOf(dir, "C")}
		}
		return nil
	})
	controlsUp(t, dir, "A", "C")
	open := heldAtC(t, dir, "r1")
	procs["C"].waitLog(t, 10*time.Second, "r1 at C's gate", containsAll("round", "r1"))
	if code, _, errOut := steerCmd(t, "cancel", "--control", controlOf(dir, "A"), "--round", "r1", "--reason", "stale input"); code != 0 {
		t.Fatalf("cancel exited %d: %s", code, errOut)
	}
	if code := open.wait(t, 20*time.Second); code != 5 || !strings.Contains(open.err.String(), "cancelled at the Head: stale input") {
		t.Fatalf("open --wait exited %d, want 5 with the reason: %s", code, open.err.String())
	}
	if code, _, errOut := steerCmd(t, "cancel", "--control", controlOf(dir, "A"), "--round", "r1"); code != 1 {
		t.Fatalf("cancel of a round over: exit %d, %s", code, errOut)
	}
	if code, _, errOut := steerCmd(t, "release", "--control", controlOf(dir, "C")); code != 0 {
		t.Fatalf("release exited %d: %s", code, errOut)
	}
	if code, out, errOut := steerCmd(t, "open", "--control", controlOf(dir, "A"), "--id", "r2", "--wait"); code != 0 {
		t.Fatalf("open r2 --wait exited %d: %s %s", code, out, errOut)
	}
	for _, n := range []string{"C", "D"} {
		if got := ranRounds(t, dir, n); !slices.Equal(got, []string{"r2"}) {
			t.Errorf("%s ran %v, want only r2", n, got)
		}
	}
	for _, n := range []string{"A", "B"} {
		if got := ranRounds(t, dir, n); !slices.Equal(got, []string{"r1", "r2"}) {
			t.Errorf("%s ran %v, want r1 r2", n, got)
		}
		if !procs[n].running() {
			t.Errorf("%s stopped after a cancel", n)
		}
	}
}

// A round whose task fails at C (exit 1 the first time, 0 after), under
// --fault-policy wait so that the chain serves on: open --retry of it: A
// and B do not run it again ("already done here"), C and D do, --wait
// exits 0; a retry of the round, done now, exits 1 ("done already").
func TestRetryE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addrs := freeAddrs(t, 4)
	names := []string{"A", "B", "C", "D"}
	chain := chainOf(names, addrs)
	task := `if [ "$CHAINSYNC_NODE" = C ] && [ ! -e "$DIR/C.failed" ]; then touch "$DIR/C.failed"; exit 1; fi
echo "$CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/$CHAINSYNC_NODE.ran"`
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		args := []string{"run", "--chain", chain, "--name", n, "--serve", "--heartbeat", "200ms",
			"--phase-timeout", "2s", "--fault-policy", "wait", "--state-dir", filepath.Join(dir, n+".state")}
		if i == 0 {
			args = append(args, "--control", controlOf(dir, n))
		}
		args = append(args, "--", "sh", "-c", task)
		procs[n] = startProc(t, n, []string{"DIR=" + dir}, args...)
	}
	waitFor(t, 10*time.Second, "A's control socket", func() bool { return exists(filepath.Join(dir, "A.sock")) })
	if code, _, errOut := steerCmd(t, "open", "--control", controlOf(dir, "A"), "--id", "r1", "--wait"); code != 3 {
		t.Fatalf("open r1 --wait exited %d, want 3 (C's task failed): %s", code, errOut)
	}
	code, out, errOut := steerCmd(t, "open", "--control", controlOf(dir, "A"), "--retry", "r1", "--wait")
	if code != 0 || strings.TrimSpace(out) != "r1" {
		t.Fatalf("open --retry r1 --wait exited %d (%q): %s", code, out, errOut)
	}
	for _, n := range names {
		if got := ranRounds(t, dir, n); !slices.Equal(got, []string{"r1"}) {
			t.Errorf("%s ran %v, want r1 once", n, got)
		}
	}
	for _, n := range []string{"A", "B"} {
		if !strings.Contains(procs[n].err.String(), "already done here") {
			t.Errorf("%s did not log that it passed r1 on without running it", n)
		}
	}
	code, _, errOut = steerCmd(t, "open", "--control", controlOf(dir, "A"), "--retry", "r1")
	if code != 1 || !strings.Contains(errOut, "done already") {
		t.Fatalf("retry of a done round: exit %d, %s", code, errOut)
	}
	if code, _, errOut := steerCmd(t, "open", "--control", controlOf(dir, "A"), "--id", "r2", "--wait"); code != 0 {
		t.Fatalf("open r2 --wait exited %d: %s", code, errOut)
	}
	for _, n := range names {
		if !procs[n].running() {
			t.Errorf("%s stopped", n)
		}
	}
}
