//go:build unix

package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// undoChain starts a chain of the named nodes over real TCP, every node
// with --undo appending "NODE FAILED_NODE FAULT ROUND" to $DIR/undo.log.
// The task of failAt exits 1; the undo of undoFail exits 2. extra adds
// flags per node. docs/UNDO.md.
func undoChain(t *testing.T, names []string, failAt, undoFail string, extra func(n string) []string) (map[string]*proc, string) {
	t.Helper()
	dir := t.TempDir()
	addrs := freeAddrs(t, len(names))
	chain := chainOf(names, addrs)
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		task := fmt.Sprintf(`echo "$CHAINSYNC_ROUND" >> "$DIR/%s.task"`, n)
		if n == failAt {
			task += "; exit 1"
		}
		undo := `echo "$CHAINSYNC_NODE $CHAINSYNC_FAILED_NODE $CHAINSYNC_FAULT $CHAINSYNC_ROUND" >> "$DIR/undo.log"`
		if n == undoFail {
			undo += "; exit 2"
		}
		args := []string{"run", "--chain", chain, "--name", n, "--round", "r1", "--undo", undo}
		if extra != nil {
			args = append(args, extra(n)...)
		}
		args = append(args, "--", "sh", "-c", task)
		procs[n] = startProc(t, n, []string{"DIR=" + dir}, args...)
	}
	return procs, dir
}

func undoLog(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "undo.log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func checkExits(t *testing.T, procs map[string]*proc, failAt string) {
	t.Helper()
	for n, p := range procs {
		want := 4
		if n == failAt {
			want = 3
		}
		if code := p.wait(t, 30*time.Second); code != want {
			t.Errorf("%s exited %d, want %d", n, code, want)
		}
	}
}

// TestUndoReverseOrderE2E: C's task exits 1: B's undo then A's run, in
// that order, each once, with the failed node and the fault in their
// environment; C and D run none; every node's log names the outcome;
// exit 3 at C, 4 elsewhere. docs/UNDO.md, "The wave".
func TestUndoReverseOrderE2E(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "A.trace")
	procs, dir := undoChain(t, []string{"A", "B", "C", "D"}, "C", "", func(n string) []string {
		if n == "A" {
			return []string{"--trace", trace}
		}
		return nil
	})
	checkExits(t, procs, "C")
	if b, err := os.ReadFile(trace); err != nil || !strings.Contains(string(b), `"undone"`) || !strings.Contains(string(b), "undone by B, A") {
		t.Errorf("A's trace does not say how the round ended (%v):\n%s", err, b)
	}
	got := undoLog(t, dir)
	want := []string{"B C task-failed r1", "A C task-failed r1"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("undos %q, want %q", got, want)
	}
	for n, p := range procs {
		if !strings.Contains(p.err.String(), "failed at C (task exited 1); undone by B, A") {
			t.Errorf("%s's log does not name the outcome:\n%s", n, p.err.String())
		}
	}
}

// TestUndoTailFailsE2E: D's task fails: C, then B, then A undo.
// docs/UNDO.md, "The wave".
func TestUndoTailFailsE2E(t *testing.T) {
	procs, dir := undoChain(t, []string{"A", "B", "C", "D"}, "D", "", nil)
	checkExits(t, procs, "D")
	got := undoLog(t, dir)
	want := []string{"C D task-failed r1", "B D task-failed r1", "A D task-failed r1"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("undos %q, want %q", got, want)
	}
	if !strings.Contains(procs["A"].err.String(), "failed at D (task exited 1); undone by C, B, A") {
		t.Errorf("A's log does not name the outcome:\n%s", procs["A"].err.String())
	}
}

// TestUndoFailedE2E: B's undo fails: A's undo never runs, and every node
// reports undo-failed naming B. docs/UNDO.md, "When an undo fails".
func TestUndoFailedE2E(t *testing.T) {
	procs, dir := undoChain(t, []string{"A", "B", "C", "D"}, "C", "B", nil)
	checkExits(t, procs, "C")
	if got := undoLog(t, dir); strings.Join(got, "|") != "B C task-failed r1" {
		t.Fatalf("undos %q, want B's only", got)
	}
	for n, p := range procs {
		if log := p.err.String(); !strings.Contains(log, "undo-failed") || !strings.Contains(log, "undo failed at B (exit 2)") {
			t.Errorf("%s does not report undo-failed naming B:\n%s", n, log)
		}
	}
	if !strings.Contains(procs["A"].err.String(), "failed at C; undo failed at B (exit 2); A not undone") {
		t.Errorf("A's log does not say A is not undone:\n%s", procs["A"].err.String())
	}
}

// TestUndoConfigMismatchE2E: --undo on some nodes only (all with the
// extension lines) is a config-mismatch before any task runs, reported
// at every node: the nodes that find it hand their notice to the others
// before they exit, so the end nodes, whose links to them were not up
// yet, stop too (exit 4 everywhere within 10 s). docs/UNDO.md, "A chain
// setting".
func TestUndoConfigMismatchE2E(t *testing.T) {
	names := []string{"A", "B", "C", "D"}
	dir := t.TempDir()
	addrs := freeAddrs(t, len(names))
	chain := chainOf(names, addrs)
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		args := []string{"run", "--chain", chain, "--name", n, "--round", "r1", "--heartbeat", "200ms"}
		if n != "B" {
			args = append(args, "--undo", "true")
		}
		args = append(args, "--", "sh", "-c", fmt.Sprintf(`touch "$DIR/%s.task"`, n))
		procs[n] = startProc(t, n, []string{"DIR=" + dir}, args...)
	}
	// B, without --undo, finds the mismatch on its first line from a
	// neighbour and stops (exit 4); no task runs anywhere.
	if code := procs["B"].wait(t, 30*time.Second); code != 4 {
		t.Errorf("B exited %d, want 4", code)
	}
	if log := procs["B"].err.String(); !strings.Contains(log, "config-mismatch") {
		t.Errorf("B does not report a config-mismatch:\n%s", log)
	}
	// B finds it on a neighbour's first line, or hears it from C's notice;
	// whoever finds it names --undo.
	named := false
	for _, p := range procs {
		named = named || strings.Contains(p.err.String(), "config-mismatch") && strings.Contains(p.err.String(), "--undo")
	}
	if !named {
		t.Error("no node names --undo in its config-mismatch")
	}
	for _, n := range names {
		if code := procs[n].wait(t, 10*time.Second); code != 4 {
			t.Errorf("%s exited %d, want 4:\n%s", n, code, procs[n].err.String())
		}
		if exists(filepath.Join(dir, n+".task")) {
			t.Errorf("%s's task ran despite the mismatch", n)
		}
	}
}

// TestUndoServedNextRoundWaitsE2E: a served chain: a failed round is
// undone while the next rounds wait at each node until the undo there
// has ended; the later rounds complete, in order; open --wait of the
// failed round exits 3 and prints the outcome. docs/UNDO.md, "Order with
// other rounds".
func TestUndoServedNextRoundWaitsE2E(t *testing.T) {
	dir := t.TempDir()
	undo := `echo "undo $CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/tasks"; sleep 0.3`
	extra := []string{"--fault-policy", "wait", "--undo", undo}
	names, addrs, _ := serveChain(t, dir, 3, func(int) []string { return extra })
	sock := filepath.Join(dir, "control.sock")
	saddr := freeAddrs(t, 1)[0]
	args := headArgs(dir, names, addrs, append([]string{"--serve", "--control", "unix:" + sock, "--max-open", "3", "--status-addr", saddr}, extra...)...)
	args = append(args, "--", "sh", "-c", taskScript)
	head := startProc(t, "A", []string{"DIR=" + dir, "SLOW="}, args...)
	head.waitLog(t, 10*time.Second, "control endpoint up", func(l string) bool { return exists(sock) })
	var opens []*proc
	for _, id := range []string{"fail-C", "r2", "r3"} {
		p := startProc(t, "open "+id, nil, "open", "--control", "unix:"+sock, "--id", id, "--wait")
		waitFor(t, 10*time.Second, "round "+id+" opened", func() bool { return strings.Contains(p.out.String(), id) })
		opens = append(opens, p)
	}
	if code := opens[0].wait(t, time.Minute); code != 3 {
		t.Errorf("open --wait of fail-C exited %d, want 3", code)
	}
	if out := opens[0].out.String(); !strings.Contains(out, "failed at C (task exited 7); undone by B, A") {
		t.Errorf("open --wait of fail-C printed %q, want the outcome", out)
	}
	for _, p := range opens[1:] {
		if code := p.wait(t, time.Minute); code != 0 {
			t.Errorf("%s exited %d, want 0", p.name, code)
		}
	}
	// The Head's /status says how the failed round ended.
	resp, err := http.Get("http://" + saddr + "/status")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"undo": "failed at C (task exited 7); undone by B, A"`) {
		t.Errorf("the Head's /status does not give the outcome:\n%s", body)
	}
	lines := readLines(t, filepath.Join(dir, "tasks"))
	at := func(line string) int {
		for k, l := range lines {
			if l == line {
				return k
			}
		}
		t.Fatalf("no %q in the task log:\n%s", line, strings.Join(lines, "\n"))
		return -1
	}
	for _, n := range []string{"A", "B"} {
		if at("undo "+n+" fail-C") > at("start "+n+" r2") {
			t.Errorf("%s ran r2's task before its undo of fail-C:\n%s", n, strings.Join(lines, "\n"))
		}
		if at("end "+n+" r2") > at("start "+n+" r3") {
			t.Errorf("%s ran r3 before r2", n)
		}
	}
	if at("undo B fail-C") > at("undo A fail-C") {
		t.Errorf("A undid before B")
	}
	for _, l := range lines {
		if l == "undo C fail-C" {
			t.Errorf("C, whose task failed, ran an undo")
		}
	}
}

// TestUndoKilledDuringUndoE2E: B is killed with kill -9 during its undo
// and restarted on its state directory: its undo runs again and ends,
// then A's; no undo runs again after it ended. docs/UNDO.md, "Durable".
func TestUndoKilledDuringUndoE2E(t *testing.T) {
	names := []string{"A", "B", "C", "D"}
	dir := t.TempDir()
	addrs := freeAddrs(t, len(names))
	chain := chainOf(names, addrs)
	// B's first undo hangs (it is killed in it); every later one ends.
	undo := `echo "start $CHAINSYNC_NODE" >> "$DIR/undo.log"; ` +
		`if [ "$CHAINSYNC_NODE" = B ] && [ ! -e "$DIR/B.once" ]; then touch "$DIR/B.once"; sleep 60; fi; ` +
		`echo "end $CHAINSYNC_NODE" >> "$DIR/undo.log"`
	argsOf := func(n string) []string {
		task := `true`
		if n == "C" {
			task = "exit 1"
		}
		return []string{"run", "--chain", chain, "--name", n, "--round", "r1", "--undo", undo,
			"--state-dir", filepath.Join(dir, n+".state"), "--", "sh", "-c", task}
	}
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		procs[names[i]] = startProc(t, names[i], []string{"DIR=" + dir}, argsOf(names[i])...)
	}
	waitFile(t, filepath.Join(dir, "B.once"), 20*time.Second)
	procs["B"].signal(t, os.Kill)
	procs["B"].wait(t, 10*time.Second)
	procs["B"] = startProc(t, "B", []string{"DIR=" + dir}, argsOf("B")...)
	checkExits(t, procs, "C")
	got := strings.Join(undoLog(t, dir), "|")
	if want := "start B|start B|end B|start A|end A"; got != want {
		t.Fatalf("undos %q, want %q", got, want)
	}
	if !strings.Contains(procs["B"].err.String(), "running it again") {
		t.Errorf("restarted B does not say it runs its interrupted undo again:\n%s", procs["B"].err.String())
	}
	// B, started again on the state directory of a round that has ended,
	// refuses to run anything (its undo included).
	again := startProc(t, "B again", []string{"DIR=" + dir}, argsOf("B")...)
	if code := again.wait(t, 10*time.Second); code != 2 {
		t.Errorf("B rerun on its ended state directory exited %d, want 2 (already ended)", code)
	}
	if got2 := strings.Join(undoLog(t, dir), "|"); got2 != got {
		t.Errorf("an undo ran again after it ended: %q", got2)
	}
	// chainsync journal says what B's state directory remembers of it.
	j := startProc(t, "journal", nil, "journal", filepath.Join(dir, "B.state"))
	if code := j.wait(t, 10*time.Second); code != 0 || !strings.Contains(j.out.String(), "failed at C (task exited 1); undone by B, A; undo: ran and ended") {
		t.Errorf("chainsync journal of B: exit %d\n%s%s", code, j.out.String(), j.err.String())
	}
}

// TestUndoMismatchPlainNeighbourE2E: a successor that runs neither --undo
// nor --heartbeat cannot say so; it refuses the first lines, and the node
// with --undo before it reports the config-mismatch and stops (exit 4)
// before any task runs. docs/UNDO.md, "A chain setting".
func TestUndoMismatchPlainNeighbourE2E(t *testing.T) {
	names := []string{"A", "B"}
	dir := t.TempDir()
	addrs := freeAddrs(t, len(names))
	chain := "A=" + addrs[0] + ",B=" + addrs[1]
	b := startProc(t, "B", []string{"DIR=" + dir}, "run", "--chain", chain, "--name", "B", "--round", "r1", "--", "sh", "-c", `touch "$DIR/B.task"`)
	a := startProc(t, "A", []string{"DIR=" + dir}, "run", "--chain", chain, "--name", "A", "--round", "r1", "--undo", "true", "--", "sh", "-c", `touch "$DIR/A.task"`)
	if code := a.wait(t, 30*time.Second); code != 4 {
		t.Errorf("A exited %d, want 4", code)
	}
	if log := a.err.String(); !strings.Contains(log, "config-mismatch") {
		t.Errorf("A does not report a config-mismatch:\n%s", log)
	}
	// B reports it too. (If the mismatch reached B before B opened its
	// round, B then waits for a READY that never comes: that is the
	// driver's for every halting mismatch, not the undo's.)
	b.waitLog(t, 10*time.Second, "B's config-mismatch", func(l string) bool { return strings.Contains(l, "config-mismatch") })
	if !strings.Contains(a.err.String(), "--undo") {
		t.Errorf("A's config-mismatch does not name --undo:\n%s", a.err.String())
	}
	for _, n := range names {
		if exists(filepath.Join(dir, n+".task")) {
			t.Errorf("%s's task ran despite the mismatch", n)
		}
	}
}

// TestUndoNothingFailsE2E: with --undo on every node and no failure, the
// round is done everywhere (exit 0) and no undo runs. docs/UNDO.md.
func TestUndoNothingFailsE2E(t *testing.T) {
	procs, dir := undoChain(t, []string{"A", "B", "C"}, "", "", nil)
	for n, p := range procs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", n, code)
		}
	}
	if got := undoLog(t, dir); len(got) != 0 {
		t.Errorf("undos ran without a failure: %q", got)
	}
}

// TestUndoCheckMismatchE2E: chainsync check, run on two neighbours of
// which one has --undo, fails on both with the difference named.
// docs/UNDO.md, "A chain setting".
func TestUndoCheckMismatchE2E(t *testing.T) {
	addrs := freeAddrs(t, 2)
	chain := "A=" + addrs[0] + ",B=" + addrs[1]
	b := startProc(t, "B", nil, "check", "--chain", chain, "--name", "B", "--timeout", "10s", "--", "true")
	a := startProc(t, "A", nil, "check", "--chain", chain, "--name", "A", "--undo", "true", "--timeout", "10s", "--", "true")
	for _, p := range []*proc{a, b} {
		if code := p.wait(t, 30*time.Second); code != 1 {
			t.Errorf("check at %s exited %d, want 1", p.name, code)
		}
		if out := p.out.String() + p.err.String(); !strings.Contains(out, "--undo is on at the predecessor and off at the successor") {
			t.Errorf("check at %s does not name the --undo difference:\n%s", p.name, out)
		}
	}
}
