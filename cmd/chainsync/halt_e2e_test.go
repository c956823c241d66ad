//go:build unix

package main

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// docs/FAULTS.md "Fault policy" (halt, the default): a task that fails
// stops the chain at its node too. Four nodes run two rounds with
// heartbeats; C's task fails in round 0. C runs no task of round 1 (the
// next round's task was due in the same step as the failure), exits 3
// (its own task failed, which says more than the fault that ended round
// 1 with it), and A, B and D exit 4.
func TestHaltStopsTheNodeWhoseTaskFailedE2E(t *testing.T) {
	dir := t.TempDir()
	addrs := freeAddrs(t, 4)
	names := []string{"A", "B", "C", "D"}
	chain := chainOf(names, addrs)
	task := `echo "$CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/ran"; [ "$CHAINSYNC_NODE$CHAINSYNC_ROUND" = C0 ] && exit 1; sleep 0.1`
	procs := make([]*proc, len(names))
	for i, n := range names {
		procs[i] = startProc(t, n, []string{"DIR=" + dir}, "run", "--chain", chain, "--name", n, "--rounds", "2",
			"--heartbeat", "300ms", "--", "sh", "-c", task)
	}
	want := map[string]int{"A": 4, "B": 4, "C": 3, "D": 4}
	for i, p := range procs {
		if code := p.wait(t, 20*time.Second); code != want[names[i]] {
			t.Errorf("%s exited %d, want %d", names[i], code, want[names[i]])
		}
	}
	ran := readLines(t, filepath.Join(dir, "ran"))
	if slices.Contains(ran, "C 1") || slices.Contains(ran, "D 0") || slices.Contains(ran, "D 1") {
		t.Errorf("tasks ran %v: no task may run at or after C once C's task failed", ran)
	}
}
