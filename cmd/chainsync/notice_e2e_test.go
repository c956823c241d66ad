//go:build unix

package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Fault notices, end to end (docs/DESIGN.md, "Extension lines"; draft
// "Error Handling": the data pipeline's "the whole chain could terminate"
// and the cross-organisation process where every organisation learns of
// a fault). Real processes on loopback TCP.

// noticeHook records every fault a node reports, with the notice's
// fields: kind, origin, blamed peer, side, round.
const noticeHook = `echo "$CHAINSYNC_FAULT origin=$CHAINSYNC_ORIGIN peer=$CHAINSYNC_PEER side=$CHAINSYNC_SIDE round=$CHAINSYNC_ROUND $(date +%s%N)" >> "$DIR/$CHAINSYNC_NODE.notices"`

type noticeLine struct{ kind, origin, peer, side string }

func readNotices(t *testing.T, dir, node string) []noticeLine {
	t.Helper()
	var out []noticeLine
	for _, l := range readLines(t, filepath.Join(dir, node+".notices")) {
		f := strings.Fields(l)
		if len(f) != 6 {
			t.Fatalf("%s's hook wrote %q, want 6 fields", node, l)
		}
		out = append(out, noticeLine{f[0], strings.TrimPrefix(f[1], "origin="), strings.TrimPrefix(f[2], "peer="), strings.TrimPrefix(f[3], "side=")})
	}
	return out
}

func waitNotices(t *testing.T, dir, node string, n int, d time.Duration) []noticeLine {
	t.Helper()
	var f []noticeLine
	waitFor(t, d, fmt.Sprintf("%d run(s) of %s's --on-fault hook", n, node), func() bool {
		f = readNotices(t, dir, node)
		return len(f) >= n
	})
	return f
}

// noticeChain starts A, B, C, D with --heartbeat 500ms, the policy and the
// notice hook; B's task is bTask, the others record their start and end.
func noticeChain(t *testing.T, dir, policy, bTask string) map[string]*proc {
	t.Helper()
	flags := []string{"--heartbeat", "500ms", "--fault-policy", policy, "--on-fault", noticeHook, "--linger", "1s"}
	return loopbackChain(t, dir, []string{"A", "B", "C", "D"}, flags, func(n string) string {
		s := fmt.Sprintf(`echo start >> "$DIR/%s.ran"`, n)
		if n == "B" {
			s += "; " + bTask
		}
		return s + fmt.Sprintf(`; echo end >> "$DIR/%s.ran"`, n)
	})
}

// noOneBlames fails if any node's hook blamed node (a node that only
// passed a notice on is never the culprit).
func noOneBlames(t *testing.T, dir, node string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		for _, f := range readNotices(t, dir, n) {
			if f.peer == node {
				t.Errorf("%s blamed %s: %+v", n, node, f)
			}
		}
	}
}

// B hangs (SIGSTOP) in its task under --fault-policy halt: A and C find it
// silent, and D, two hops away, learns it from C's notice. A, C and D
// each exit 4 within 3 s of the stop; D's hook says chain-halted with
// origin C and peer B, and D's log names both; nobody blames C.
func TestNoticeHaltReachesWholeChainE2E(t *testing.T) {
	dir := t.TempDir()
	procs := noticeChain(t, dir, "halt", "sleep 30")
	waitFile(t, filepath.Join(dir, "B.ran"), 20*time.Second)
	procs["B"].signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	t.Cleanup(func() { _ = procs["B"].cmd.Process.Signal(syscall.SIGCONT) })
	for _, n := range []string{"A", "C", "D"} {
		code := procs[n].wait(t, 10*time.Second)
		took := time.Since(stopped)
		t.Logf("%s exited %d %v after B was stopped", n, code, took.Round(time.Millisecond))
		if code != 4 || took > 3*time.Second {
			t.Errorf("%s exited %d after %v, want 4 within 3 s", n, code, took)
		}
	}
	d := waitNotices(t, dir, "D", 1, 5*time.Second)
	if d[0].kind != "chain-halted" || d[0].origin != "C" || d[0].peer != "B" {
		t.Errorf("D's hook: %+v, want chain-halted with origin C and peer B", d[0])
	}
	procs["D"].waitLog(t, time.Second, "naming both", containsAll("ERROR", "halted: C reported B silent"))
	for _, n := range []string{"A", "C"} {
		f := waitNotices(t, dir, n, 1, 5*time.Second)
		if f[0].kind != "peer-silent" || f[0].peer != "B" {
			t.Errorf("%s's first fault %+v, want peer-silent blaming B", n, f[0])
		}
	}
	noOneBlames(t, dir, "C", "A", "C", "D")
	if exists(filepath.Join(dir, "C.ran")) || exists(filepath.Join(dir, "D.ran")) {
		t.Error("C or D ran its task after the chain halted")
	}
}

// A task that fails at B (exit 3) halts the whole chain the same way:
// every node ends, C and D never run their tasks, and the notice names
// B's task.
func TestNoticeTaskFailureHaltsChainE2E(t *testing.T) {
	dir := t.TempDir()
	procs := noticeChain(t, dir, "halt", "exit 1")
	if code := procs["B"].wait(t, 20*time.Second); code != 3 {
		t.Errorf("B exited %d, want 3", code)
	}
	failed := time.Now()
	for _, n := range []string{"A", "C", "D"} {
		if code := procs[n].wait(t, 5*time.Second); code != 4 {
			t.Errorf("%s exited %d, want 4", n, code)
		}
	}
	t.Logf("A, C and D ended %v after B's exit", time.Since(failed).Round(time.Millisecond))
	for _, n := range []string{"A", "C", "D"} {
		f := waitNotices(t, dir, n, 1, 5*time.Second)
		if f[0].kind != "chain-halted" || f[0].origin != "B" || f[0].peer != "B" {
			t.Errorf("%s's hook: %+v, want chain-halted with origin B and peer B", n, f[0])
		}
	}
	procs["D"].waitLog(t, time.Second, "naming B's task", containsAll("ERROR", "halted: B reported that B's task failed"))
	if exists(filepath.Join(dir, "C.ran")) || exists(filepath.Join(dir, "D.ran")) {
		t.Error("C or D ran its task after B's task failed")
	}
}

// Under --fault-policy wait the notice informs and changes nothing: D
// logs and hooks chain-fault naming B, nobody exits, and once B is
// continued the chain completes, each task once, in order.
func TestNoticeWaitInformsE2E(t *testing.T) {
	dir := t.TempDir()
	procs := noticeChain(t, dir, "wait", "sleep 3")
	waitFile(t, filepath.Join(dir, "B.ran"), 20*time.Second)
	procs["B"].signal(t, syscall.SIGSTOP)
	d := waitNotices(t, dir, "D", 1, 5*time.Second)
	if d[0].kind != "chain-fault" || d[0].origin != "C" || d[0].peer != "B" {
		t.Errorf("D's hook: %+v, want chain-fault with origin C and peer B", d[0])
	}
	procs["D"].waitLog(t, time.Second, "naming B", containsAll("C reported B silent"))
	for _, n := range []string{"A", "C", "D"} {
		if !procs[n].running() {
			t.Fatalf("%s exited under --fault-policy wait", n)
		}
	}
	procs["B"].signal(t, syscall.SIGCONT)
	for _, n := range []string{"A", "B", "C", "D"} {
		if code := procs[n].wait(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", n, code)
		}
		if got := readLines(t, filepath.Join(dir, n+".ran")); strings.Join(got, ",") != "start,end" {
			t.Errorf("%s's task: %v, want it once", n, got)
		}
	}
	noOneBlames(t, dir, "C", "A", "C", "D")
}

// A started with --round x and B with --round y: B reports one
// config-mismatch within 2 s naming what each side runs, runs its hook
// and exits 4 (halt); A says why its successor hung up, once; no
// reconnect storm.
func TestConfigMismatchRoundE2E(t *testing.T) {
	dir := t.TempDir()
	addrs := freeAddrs(t, 2)
	chain := "A=" + addrs[0] + ",B=" + addrs[1]
	b := startProc(t, "B", []string{"DIR=" + dir}, "run", "--chain", chain, "--name", "B", "--round", "y",
		"--on-fault", noticeHook, "--", "true")
	// A logs where its round stands every 2 s: the proof that its timers
	// and loops kept running through the window in which a storm would
	// show.
	a := startProc(t, "A", []string{"DIR=" + dir}, "run", "--chain", chain, "--name", "A", "--round", "x",
		"--on-fault", noticeHook, "--status-interval", "2s", "--", "true")
	started := time.Now()
	f := waitNotices(t, dir, "B", 1, 5*time.Second)
	if f[0].kind != "config-mismatch" || f[0].peer != "A" {
		t.Errorf("B's hook: %+v, want config-mismatch blaming A", f[0])
	}
	if took := time.Since(started); took > 2*time.Second {
		t.Errorf("config-mismatch after %v, want within 2 s", took)
	}
	b.waitLog(t, time.Second, "naming both rounds", containsAll("ERROR", "config-mismatch", "A opens round x; this node runs round y"))
	if code := b.wait(t, 5*time.Second); code != 4 {
		t.Errorf("B exited %d, want 4", code)
	}
	a.waitLog(t, 5*time.Second, "saying why", containsAll("ERROR", "configured differently", "READY:x"))
	// The window in which a storm would show: A's fifth status line,
	// 10 s after it started.
	waitFor(t, 20*time.Second, "fifth status report of A", func() bool {
		return strings.Count(a.err.String(), "  still ") >= 5
	})
	if n := strings.Count(b.err.String(), "fault: chainsync: config-mismatch"); n != 1 {
		t.Errorf("B logged the mismatch %d times, want once", n)
	}
	if n := strings.Count(a.err.String(), "\n") - strings.Count(a.err.String(), "  still "); n > 20 {
		t.Errorf("A logged %d lines (status reports aside) in 10 s against a mismatched successor: a reconnect storm", n)
	}
	if n := strings.Count(a.err.String(), "configured differently"); n != 1 {
		t.Errorf("A said why %d times, want once", n)
	}
	a.signal(t, syscall.SIGTERM)
	a.wait(t, 5*time.Second)
}

// No silent rerun (docs/DESIGN.md, "Restarts and durable state"): a node
// whose state directory says its rounds already ended, in a process that
// ended normally, refuses to start (exit 2) and says what to do, even
// under --quiet; a new --round on the same directory runs.
func TestRerunOnEndedStateDirRefusedE2E(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "st")
	ran := filepath.Join(dir, "ran")
	args := func(round string) []string {
		return []string{"run", "--name", "A", "--round", round, "--state-dir", st, "--quiet", "--", "sh", "-c", `echo "$CHAINSYNC_ROUND" >> "$RAN"`}
	}
	env := []string{"RAN=" + ran}
	if code := startProc(t, "A", env, args("upgrade-2026-11")...).wait(t, 10*time.Second); code != 0 {
		t.Fatalf("first rollout exited %d, want 0", code)
	}
	again := startProc(t, "A-again", env, args("upgrade-2026-11")...)
	if code := again.wait(t, 10*time.Second); code != 2 {
		t.Errorf("the same rollout again exited %d, want 2", code)
	}
	for _, want := range []string{"round upgrade-2026-11 already ended (done at ", "in " + st, "a new rollout needs a new --round or a fresh --state-dir"} {
		if !strings.Contains(again.err.String(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, again.err.String())
		}
	}
	if code := startProc(t, "A-next", env, args("upgrade-2026-12")...).wait(t, 10*time.Second); code != 0 {
		t.Errorf("a new round on the same directory exited %d, want 0", code)
	}
	if got := strings.Join(readLines(t, ran), ","); got != "upgrade-2026-11,upgrade-2026-12" {
		t.Errorf("tasks ran for %q, want each rollout once", got)
	}
}

// A node killed while it lingers (its round done, the process not ended
// normally) resumes on restart and still exits 0, running nothing again.
func TestKilledDuringLingerResumesE2E(t *testing.T) {
	dir := t.TempDir()
	addrs := freeAddrs(t, 2)
	chain := "A=" + addrs[0] + ",B=" + addrs[1]
	task := `echo "$CHAINSYNC_NODE" >> "$DIR/ran"`
	bArgs := func(linger string) []string {
		return []string{"run", "--chain", chain, "--name", "B", "--round", "r1", "--state-dir", filepath.Join(dir, "B"), "--linger", linger, "--", "sh", "-c", task}
	}
	b := startProc(t, "B", []string{"DIR=" + dir}, bArgs("30s")...)
	a := startProc(t, "A", []string{"DIR=" + dir}, "run", "--chain", chain, "--name", "A", "--round", "r1", "--linger", "1s", "--", "sh", "-c", task)
	if code := a.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("A exited %d", code)
	}
	// B is done but lingers (A may still be connected, or B waits out
	// --linger): kill it there.
	b.waitLog(t, 10*time.Second, "its round done", containsAll("round over", "r1"))
	_ = b.cmd.Process.Kill()
	b.wait(t, 5*time.Second)
	b2 := startProc(t, "B2", []string{"DIR=" + dir}, bArgs("1s")...)
	if code := b2.wait(t, 20*time.Second); code != 0 {
		t.Errorf("B restarted after a kill during linger exited %d, want 0", code)
	}
	if got := strings.Join(readLines(t, filepath.Join(dir, "ran")), ","); got != "A,B" {
		t.Errorf("tasks ran %q, want A then B, once each", got)
	}
}
