//go:build unix

package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEmptyChainIsUsageErrorE2E: an empty --chain (a runbook's unset
// $CHAIN), or CHAINSYNC_CHAIN set to nothing, is a usage error whenever it
// is given: exit 2, and the task, which a node in no chain would run at
// once, does not run (the draft's "Topology and Configuration": a node
// knows its place in the chain before anything runs).
func TestEmptyChainIsUsageErrorE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	task := []string{"--", "sh", "-c", `touch "$DIR/ran"`}
	for _, tc := range []struct {
		args, env []string
		want      string
	}{
		{args: []string{"run", "--chain", "", "--name", "B"}, want: "--chain is empty"},
		{args: []string{"run", "--chain", "", "--name", "B", "--next", "127.0.0.1:9"}, want: "--chain is empty"},
		{args: []string{"run", "--name", "B"}, env: []string{"CHAINSYNC_CHAIN="}, want: "CHAINSYNC_CHAIN is empty"},
		{args: []string{"run", "--chain", " ", "--name", "B"}, want: "--chain is empty"},
		{args: []string{"check", "--chain", "", "--name", "B"}, want: "--chain is empty"},
	} {
		p := startProc(t, "B", append([]string{"DIR=" + dir}, tc.env...), append(tc.args, task...)...)
		if code := p.wait(t, 10*time.Second); code != 2 {
			t.Errorf("%v %q: exit %d, want 2", tc.env, tc.args, code)
		}
		if !strings.Contains(p.err.String(), tc.want) {
			t.Errorf("%v %q: stderr does not say %q:\n%s", tc.env, tc.args, tc.want, p.err.String())
		}
	}
	if exists(filepath.Join(dir, "ran")) {
		t.Error("the task ran with an empty chain")
	}
}

// TestCheckComparesHeartbeatE2E: A with --heartbeat 300ms and B with 3s
// would blame a healthy B (A calls it silent after 900ms while B sends
// every 3s): chainsync check on both exits 1 naming both values.
func TestCheckComparesHeartbeatE2E(t *testing.T) {
	t.Parallel()
	addrs := freeAddrs(t, 2)
	chain := chainOf([]string{"A", "B"}, addrs)
	b := startProc(t, "B", nil, "check", "--chain", chain, "--name", "B", "--heartbeat", "3s", "--timeout", "10s", "--", "true")
	a := startProc(t, "A", nil, "check", "--chain", chain, "--name", "A", "--heartbeat", "300ms", "--timeout", "10s", "--", "true")
	for _, p := range []*proc{a, b} {
		if code := p.wait(t, 30*time.Second); code != 1 {
			t.Errorf("check at %s exited %d, want 1", p.name, code)
		}
		if out := p.out.String() + p.err.String(); !strings.Contains(out, "--heartbeat is 300ms at the predecessor and 3s at the successor (give every node the same --heartbeat") {
			t.Errorf("check at %s does not name both --heartbeat values:\n%s", p.name, out)
		}
	}
	// The same interval on both: ok.
	b = startProc(t, "B", nil, "check", "--chain", chain, "--name", "B", "--heartbeat", "300ms", "--timeout", "10s", "--", "true")
	a = startProc(t, "A", nil, "check", "--chain", chain, "--name", "A", "--heartbeat", "300ms", "--timeout", "10s", "--", "true")
	for _, p := range []*proc{a, b} {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Errorf("check at %s with the same --heartbeat exited %d, want 0:\n%s%s", p.name, code, p.out.String(), p.err.String())
		}
	}
}

// TestHeartbeatMismatchE2E: A with --heartbeat 300ms and B with 3s (B's
// task would take 5 s): a config-mismatch naming both values at both
// nodes, before any task, and both exit 4 within 10 s (rather than A
// calling a healthy B silent mid-task). With --heartbeat on A only, A
// learns of it too from B's refusal and stops instead of re-dialing for
// ever; on B only, B refuses A's first line (no identity line) and tells
// A, and neither runs its task. docs/PROTOCOL.md, "The identity line" (the draft's "Fault
// Detection": heartbeats are this project's extension).
func TestHeartbeatMismatchE2E(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		hbA, hbB     []string
		wantA, wantB []string
	}{
		// The same advice as chainsync check's (TestCheckComparesHeartbeatE2E).
		{"different intervals", []string{"--heartbeat", "300ms"}, []string{"--heartbeat", "3s"},
			[]string{"B's --heartbeat is 3s; this node's is 300ms", "give every node the same --heartbeat"},
			[]string{"A's --heartbeat is 300ms; this node's is 3s", "give every node the same --heartbeat"}},
		{"on A only", []string{"--heartbeat", "300ms"}, nil,
			[]string{"it runs without the extension lines, so without --heartbeat; this node's --heartbeat is 300ms"},
			[]string{"this node runs without --heartbeat"}},
		// B learns it from A's first line, READY where its identity line
		// would be; A from the fault notice B sends back.
		{"on B only", nil, []string{"--heartbeat", "300ms"},
			[]string{"B sends FAULT, an extension line", "this node runs without --heartbeat"},
			[]string{"A sends READY as its first line, not its identity line", "so without --heartbeat; this node's --heartbeat is 300ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			chain := chainOf([]string{"A", "B"}, freeAddrs(t, 2))
			start := time.Now()
			b := startProc(t, "B", []string{"DIR=" + dir}, append(append([]string{"run", "--chain", chain, "--name", "B"}, tc.hbB...),
				"--", "sh", "-c", `touch "$DIR/B.task"; sleep 5`)...)
			a := startProc(t, "A", []string{"DIR=" + dir}, append(append([]string{"run", "--chain", chain, "--name", "A"}, tc.hbA...),
				"--", "sh", "-c", `touch "$DIR/A.task"`)...)
			for _, p := range []struct {
				*proc
				want []string
			}{{a, tc.wantA}, {b, tc.wantB}} {
				if code := p.wait(t, 10*time.Second-time.Since(start)); code != 4 {
					t.Errorf("%s exited %d, want 4", p.name, code)
				}
				if !slices.ContainsFunc(strings.Split(p.err.String(), "\n"), containsAll(append(p.want, "config-mismatch")...)) {
					t.Errorf("%s does not report a config-mismatch saying %q:\n%s", p.name, p.want, p.err.String())
				}
			}
			for _, n := range []string{"A", "B"} {
				if exists(filepath.Join(dir, n+".task")) {
					t.Errorf("%s's task ran despite the mismatch", n)
				}
			}
		})
	}
}

// TestHeartbeatMismatchServedE2E: a served chain with different
// --heartbeat values: the Head re-dials its successor until its next round
// opens (then it stops, exit 4), and each reconnect, refused by B for the
// mismatch it already reported, is not taken for another mismatch (B
// "runs without --heartbeat"). docs/PROTOCOL.md, "The identity line".
func TestHeartbeatMismatchServedE2E(t *testing.T) {
	t.Parallel()
	chain := chainOf([]string{"A", "B"}, freeAddrs(t, 2))
	b := startProc(t, "B", nil, "run", "--chain", chain, "--name", "B", "--serve", "--heartbeat", "3s", "--", "true")
	a := startProc(t, "A", nil, "run", "--chain", chain, "--name", "A", "--serve", "--every", "2s", "--heartbeat", "300ms", "--", "true")
	if code := a.wait(t, 10*time.Second); code != 4 {
		t.Errorf("A exited %d, want 4", code)
	}
	if n := a.logCount("config-mismatch fault"); n != 1 {
		t.Errorf("A reports %d config-mismatch faults, want 1:\n%s", n, a.err.String())
	}
	if !strings.Contains(a.err.String(), "B's --heartbeat is 3s; this node's is 300ms") {
		t.Errorf("A does not name both values:\n%s", a.err.String())
	}
	b.waitLog(t, 5*time.Second, "B's config-mismatch", containsAll("config-mismatch", "A's --heartbeat is 300ms; this node's is 3s"))
}
