//go:build unix

package main

// What a person reads is true, end to end over real TCP: chainsync
// journal --json after a cancel, an approval wait, an undo wave, a fault
// exit and a task run again after a kill (docs/OPERATIONS.md, "Reading a
// state directory: `chainsync journal`"); chainsync status during a pause
// at the Head (docs/STEERING.md, "Pause").

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// truthRound is the part of a round in chainsync journal --json these
// tests read.
type truthRound struct {
	Round       string `json:"round"`
	Task        string `json:"task"`
	TaskText    string `json:"task_text"`
	TaskStarted string `json:"task_started"`
	Outcome     string `json:"outcome"`
	Fault       string `json:"fault"`
	TaskRuns    []struct {
		Started, Ended, Interrupted string
	} `json:"task_runs"`
}

// truthDoc reads chainsync journal --json of dir: how the node ended,
// the exit status it names, and the round id's entry.
func truthDoc(t *testing.T, dir, id string) (node string, exit *int, r truthRound) {
	t.Helper()
	code, out, errOut := journalCmd(t, "--json", dir)
	if code != 0 {
		t.Fatalf("chainsync journal --json %s: exit %d: %s", dir, code, errOut)
	}
	var doc struct {
		Node       string       `json:"node"`
		ExitStatus *int         `json:"exit_status"`
		Rounds     []truthRound `json:"rounds"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("chainsync journal --json does not parse: %v\n%s", err, out)
	}
	for _, r := range doc.Rounds {
		if r.Round == id {
			return doc.Node, doc.ExitStatus, r
		}
	}
	t.Fatalf("chainsync journal --json %s has no round %s:\n%s", dir, id, out)
	return "", nil, truthRound{}
}

// A served chain A, B, C, D (state directories everywhere), C with
// --approve: round r1 reaches C and waits for its approval; cancel at
// the Head. A's journal reads "cancelled at the Head" with its task
// succeeded and no fault (not "undelivered"); C's reads its task not
// started (the approval wait is no start), cancelled.
func TestJournalCancelAndApprovalE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	procs := servedChain(t, dir, []string{"A", "B", "C", "D"}, func(n string) []string {
		args := []string{"--state-dir", filepath.Join(dir, n+".state")}
		if n == "C" {
			args = append(args, "--approve", "--control", controlOf(dir, "C"), "--on-hold", `echo "$CHAINSYNC_HOLD" >> "$DIR/hook"`)
		}
		return args
	})
	waitFor(t, 10*time.Second, "A's control socket", func() bool { return exists(filepath.Join(dir, "A.sock")) })
	open := startProc(t, "open r1", nil, "open", "--control", controlOf(dir, "A"), "--id", "r1", "--wait")
	waitFile(t, filepath.Join(dir, "hook"), 20*time.Second) // r1's turn came at C: it waits for an approval
	if code, _, errOut := steerCmd(t, "cancel", "--control", controlOf(dir, "A"), "--round", "r1", "--reason", "stale"); code != 0 {
		t.Fatalf("cancel exited %d: %s", code, errOut)
	}
	if code := open.wait(t, 20*time.Second); code != 5 {
		t.Fatalf("open --wait exited %d, want 5 (cancelled): %s", code, open.err.String())
	}
	procs["C"].waitLog(t, 10*time.Second, "C told of the cancel", containsAll("cancelled at the Head"))
	_, _, a := truthDoc(t, filepath.Join(dir, "A.state"), "r1")
	if a.Outcome != "cancelled at the Head" || a.Fault != "" || a.Task != "succeeded" {
		t.Errorf("A's journal: %+v; want cancelled at the Head, no fault, its task succeeded", a)
	}
	_, _, c := truthDoc(t, filepath.Join(dir, "C.state"), "r1")
	if c.Task != "not-started" || c.TaskStarted != "" || c.Outcome != "cancelled at the Head" {
		t.Errorf("C's journal: %+v; want its task not started (it waited for an approval), cancelled at the Head", c)
	}
}

// A, B, C with --undo, C's task fails (exit 7): A and B undo. A's journal
// reads the wave's outcome, not "undelivered"; C's FAULT is task-failed;
// and each node's journal names the exit status the node really exited
// with (A 4, a fault; C 3, its task failed), never "ended normally".
func TestJournalUndoAndFaultExitE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names, addrs := []string{"A", "B", "C"}, freeAddrs(t, 3)
	chain := chainOf(names, addrs)
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		procs[n] = startProc(t, n, nil, "run", "--chain", chain, "--name", n, "--round", "u1", "--quiet", "--linger", "1s",
			"--undo", "true", "--state-dir", filepath.Join(dir, n), "--", "sh", "-c", `[ "$CHAINSYNC_NODE" = C ] && exit 7; true`)
	}
	exits := map[string]int{}
	for _, n := range names {
		exits[n] = procs[n].wait(t, 30*time.Second)
	}
	if exits["C"] != 3 || exits["A"] != 4 {
		t.Fatalf("exit statuses %v, want C 3 (its task failed), A 4", exits)
	}
	for _, n := range names {
		node, exit, r := truthDoc(t, filepath.Join(dir, n), "u1")
		if exit == nil || *exit != exits[n] || strings.Contains(node, "normally") {
			t.Errorf("%s's journal: node %q, exit status %v; %s exited %d", n, node, exit, n, exits[n])
		}
		if !strings.HasPrefix(r.Outcome, "failed at C (task exited 7); undone by B, A") || strings.Contains(r.Outcome, "undelivered") {
			t.Errorf("%s's journal: outcome %q, want the undo wave's", n, r.Outcome)
		}
		if n == "C" && (r.Fault != "task-failed" || r.Task != "failed") {
			t.Errorf("C's journal: fault %q, task %q; want task-failed, failed", r.Fault, r.Task)
		}
	}
}

// A, B, C, D with the extension lines (--heartbeat) and without --undo,
// C's task fails (exit 7): the chain halts, and the fault notice says so.
// A's and B's journals read that the round failed at C and that no task
// after C ran (the fault notice said so), not "undelivered", before and
// after A is started again on its state directory; D's task never ran.
func TestJournalHaltNamesWhereItFailedE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names, addrs := []string{"A", "B", "C", "D"}, freeAddrs(t, 4)
	chain := chainOf(names, addrs)
	args := func(n string) []string {
		return []string{"run", "--chain", chain, "--name", n, "--round", "h1", "--quiet", "--linger", "1s", "--heartbeat", "200ms",
			"--state-dir", filepath.Join(dir, n), "--", "sh", "-c", `[ "$CHAINSYNC_NODE" = C ] && exit 7; true`}
	}
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		procs[names[i]] = startProc(t, names[i], nil, args(names[i])...)
	}
	for _, n := range names {
		procs[n].wait(t, 30*time.Second)
	}
	check := func(when string) {
		for _, n := range []string{"A", "B"} {
			_, _, r := truthDoc(t, filepath.Join(dir, n), "h1")
			if r.Outcome != "failed at C (task-failed); no task after C ran" {
				t.Errorf("%s's journal %s: outcome %q, want the round failed at C", n, when, r.Outcome)
			}
		}
	}
	check("after the round")
	// A started again on its state directory: the round ended before,
	// and the node says how.
	code, _, errOut := runBin(t, args("A")...)
	if code != 2 || !strings.Contains(errOut, "fault chain-halted") {
		t.Errorf("A started again: exit %d: %s; want it refused, naming the fault", code, errOut)
	}
	check("after A was started again")
	if _, _, r := truthDoc(t, filepath.Join(dir, "D"), "h1"); r.Task != "not-started" {
		t.Errorf("D's journal: task %q, want not-started", r.Task)
	}
}

// A single node killed (SIGKILL) while its task runs, restarted with
// --resume-task rerun on its state directory: its journal shows the
// first run cut short by the node's death, and the round done.
func TestJournalTaskRerunE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sd := filepath.Join(dir, "S")
	task := `touch "$DIR/started"; [ -e "$DIR/go" ] && exit 0; while [ ! -e "$DIR/go" ]; do sleep 0.05; done`
	start := func() *proc {
		return startProc(t, "S", []string{"DIR=" + dir}, "run", "--name", "S", "--round", "r1", "--resume-task", "rerun",
			"--state-dir", sd, "--", "sh", "-c", task)
	}
	p := start()
	waitFile(t, filepath.Join(dir, "started"), 20*time.Second)
	p.signal(t, syscall.SIGKILL)
	p.wait(t, 10*time.Second)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := start().wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the restarted node exited %d, want 0", code)
	}
	_, _, r := truthDoc(t, sd, "r1")
	if len(r.TaskRuns) == 0 || r.TaskRuns[0].Interrupted == "" || r.TaskRuns[0].Started == "" || r.Task != "succeeded" {
		t.Errorf("journal after the rerun: %+v; want the first run cut short by the node's death, the task succeeded", r)
	}
	if !strings.Contains(r.TaskText, "death") {
		t.Errorf("task text %q does not say the node's death cut a run short", r.TaskText)
	}
}

// Pause at the Head with a round waiting at B: chainsync status at B
// names chainsync resume at the Head A, not a release (which B refuses:
// it is not held); resume at A and the round completes.
func TestStatusPauseNamesResumeE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names, addrs := []string{"A", "B", "C"}, freeAddrs(t, 4)
	chain, statusB := chainOf(names, addrs[:3]), addrs[3]
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		args := []string{"run", "--chain", chain, "--name", n, "--serve", "--heartbeat", "200ms", "--phase-timeout", "2s",
			"--control", controlOf(dir, n)}
		if n == "B" {
			args = append(args, "--status-addr", statusB)
		}
		// A's task waits for $DIR/go: the pause comes while it runs.
		args = append(args, "--", "sh", "-c", `if [ "$CHAINSYNC_NODE" = A ]; then touch "$DIR/A.started"; while [ ! -e "$DIR/go" ]; do sleep 0.05; done; fi`)
		procs[n] = startProc(t, n, []string{"DIR=" + dir}, args...)
	}
	waitFor(t, 10*time.Second, "A's control socket", func() bool { return exists(filepath.Join(dir, "A.sock")) })
	open := startProc(t, "open r1", nil, "open", "--control", controlOf(dir, "A"), "--id", "r1", "--wait")
	waitFile(t, filepath.Join(dir, "A.started"), 20*time.Second)
	if code, _, errOut := steerCmd(t, "pause", "--control", controlOf(dir, "A"), "--reason", "incident"); code != 0 {
		t.Fatalf("pause exited %d: %s", code, errOut)
	}
	procs["B"].waitLog(t, 10*time.Second, "B told of the pause", containsAll("paused at the Head A"))
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var out string
	waitFor(t, 20*time.Second, "r1 waiting at B on the pause", func() bool {
		_, out, _ = steerCmd(t, "status", statusB)
		return strings.Contains(out, "round r1:") && (strings.Contains(out, "(chainsync resume at") || strings.Contains(out, "chainsync release"))
	})
	if !strings.Contains(out, "chainsync resume at A") || strings.Contains(out, "chainsync release") {
		t.Errorf("status at B does not name chainsync resume at the Head A:\n%s", out)
	}
	if code, _, errOut := steerCmd(t, "release", "--control", controlOf(dir, "B")); code != 1 || !strings.Contains(errOut, "not held") {
		t.Errorf("release at B: exit %d, %s; want refused, B is not held", code, errOut)
	}
	if code, _, errOut := steerCmd(t, "resume", "--control", controlOf(dir, "A")); code != 0 {
		t.Fatalf("resume exited %d: %s", code, errOut)
	}
	if code := open.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("open --wait exited %d after the resume: %s", code, open.err.String())
	}
}
