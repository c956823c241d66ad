//go:build unix

package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Features together (docs/STEERING.md and docs/UNDO.md, "Features
// together"; the draft's section 4, tasks in chain order): --undo on
// every node, --fault-policy wait, C's task fails once. A and B undo (B
// first); open --retry of the round then runs the task again at A and B,
// whose work was undone (they are not "already done"), in chain order,
// then at C and D; open --retry --wait exits 0; `chainsync journal
// --json` at A shows the round retried with the undo before it.
func TestRetryAfterUndoE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addrs := freeAddrs(t, 4)
	names := []string{"A", "B", "C", "D"}
	chain := chainOf(names, addrs)
	task := `if [ "$CHAINSYNC_NODE" = C ] && [ ! -e "$DIR/C.failed" ]; then touch "$DIR/C.failed"; exit 7; fi
echo "$CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/$CHAINSYNC_NODE.ran"; echo "task $CHAINSYNC_NODE" >> "$DIR/order"`
	undo := `echo "undo $CHAINSYNC_NODE" >> "$DIR/order"`
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		args := []string{"run", "--chain", chain, "--name", n, "--serve", "--heartbeat", "200ms",
			"--fault-policy", "wait", "--undo", undo, "--state-dir", filepath.Join(dir, n+".state")}
		if i == 0 {
			args = append(args, "--control", controlOf(dir, n))
		}
		args = append(args, "--", "sh", "-c", task)
		startProc(t, n, []string{"DIR=" + dir}, args...)
	}
	waitFor(t, 10*time.Second, "A's control socket", func() bool { return exists(filepath.Join(dir, "A.sock")) })
	code, _, errOut := steerCmd(t, "open", "--control", controlOf(dir, "A"), "--id", "u1", "--wait")
	if code != 3 || !strings.Contains(errOut, "failed at C (task exited 7); undone by B, A") {
		t.Fatalf("open u1 --wait exited %d, want 3 with the undo's outcome: %s", code, errOut)
	}
	code, out, errOut := steerCmd(t, "open", "--control", controlOf(dir, "A"), "--retry", "u1", "--wait")
	if code != 0 || strings.TrimSpace(out) != "u1" {
		t.Fatalf("open --retry u1 --wait exited %d (%q), want 0: %s", code, out, errOut)
	}
	want := []string{"task A", "task B", "undo B", "undo A", "task A", "task B", "task C", "task D"}
	if got := readLines(t, filepath.Join(dir, "order")); !slices.Equal(got, want) {
		t.Errorf("tasks and undos ran in the order %q, want %q", got, want)
	}
	_, jout, code := runCLI(t, "journal", "--json", filepath.Join(dir, "A.state"))
	if code != 0 {
		t.Fatalf("chainsync journal --json at A exited %d: %s", code, jout)
	}
	jout, _, _ = runCLI(t, "journal", "--json", filepath.Join(dir, "A.state"))
	var doc struct {
		Rounds []map[string]any `json:"rounds"`
	}
	if err := json.Unmarshal([]byte(jout), &doc); err != nil {
		t.Fatalf("journal --json: %v\n%s", err, jout)
	}
	var u1 map[string]any
	for _, r := range doc.Rounds {
		if r["round"] == "u1" {
			u1 = r
		}
	}
	if u1 == nil {
		t.Fatalf("A's journal has no round u1:\n%s", jout)
	}
	if r, _ := u1["retries"].(float64); r < 1 || !strings.Contains(jout, "undone by B, A") {
		t.Errorf("A's journal does not show the undo and the retry of u1: %v\n%s", u1, jout)
	}
}

// Features together: a cancel while B's task runs (the draft's section 4:
// a task that runs is not interrupted by the protocol) ends the round
// everywhere once B's task has ended, with no internal error at B, and the
// next round runs after B's task ended, in order.
func TestCancelWhileTaskRunsE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addrs := freeAddrs(t, 3)
	names := []string{"A", "B", "C"}
	chain := chainOf(names, addrs)
	task := `echo "start $CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/order"
if [ "$CHAINSYNC_NODE" = B ] && [ "$CHAINSYNC_ROUND" = cx1 ]; then touch "$DIR/B.running"; sleep 2; fi
echo "end $CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/order"`
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		args := []string{"run", "--chain", chain, "--name", n, "--serve", "--heartbeat", "200ms", "--fault-policy", "wait"}
		if i == 0 {
			args = append(args, "--control", controlOf(dir, n))
		}
		args = append(args, "--", "sh", "-c", task)
		procs[n] = startProc(t, n, []string{"DIR=" + dir}, args...)
	}
	waitFor(t, 10*time.Second, "A's control socket", func() bool { return exists(filepath.Join(dir, "A.sock")) })
	open := startProc(t, "open cx1", nil, "open", "--control", controlOf(dir, "A"), "--id", "cx1", "--wait")
	waitFor(t, 20*time.Second, "B's task of cx1 running", func() bool { return exists(filepath.Join(dir, "B.running")) })
	if code, _, errOut := steerCmd(t, "cancel", "--control", controlOf(dir, "A"), "--round", "cx1", "--reason", "wrong input"); code != 0 {
		t.Fatalf("cancel exited %d: %s", code, errOut)
	}
	if code := open.wait(t, 20*time.Second); code != 5 {
		t.Errorf("open cx1 --wait exited %d, want 5 (cancelled): %s", code, open.err.String())
	}
	if code, _, errOut := steerCmd(t, "open", "--control", controlOf(dir, "A"), "--id", "cx2", "--wait"); code != 0 {
		t.Fatalf("open cx2 --wait exited %d: %s", code, errOut)
	}
	lines := readLines(t, filepath.Join(dir, "order"))
	at := func(line string) int {
		if k := slices.Index(lines, line); k >= 0 {
			return k
		}
		t.Fatalf("no %q in the task log:\n%s", line, strings.Join(lines, "\n"))
		return -1
	}
	if at("end B cx1") > at("start B cx2") {
		t.Errorf("B started cx2 before its task of cx1 ended:\n%s", strings.Join(lines, "\n"))
	}
	if slices.Contains(lines, "start C cx1") {
		t.Errorf("C ran the cancelled round cx1:\n%s", strings.Join(lines, "\n"))
	}
	for _, n := range names {
		if strings.Contains(procs[n].err.String(), "internal error") {
			t.Errorf("%s logged an internal error:\n%s", n, procs[n].err.String())
		}
	}
}
