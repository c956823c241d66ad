//go:build unix

package main

// chainsync status on a chain with many rounds in flight: rounds that wait
// for the same thing are one line, and numeric node names are quoted where
// a count follows them (docs/OPERATIONS.md, "Reading the summary line").

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStatusGroupsRoundsE2E: a chain "1" -> "2" -> "3" with 64 rounds in
// flight, node "2" killed during its task. chainsync status names "2" as
// holding the rounds up in one line for the 64 rounds (not 64 lines), one
// table row per node and state, the rounds in flight per node with the
// names quoted, and exits 1 (a node does not answer).
//
// Draft, "Error Handling" (a node that dies mid-task); docs/OPERATIONS.md,
// "Reading the summary line".
func TestStatusGroupsRoundsE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const rounds = 64
	names := []string{"1", "2", "3"}
	addrs := freeAddrs(t, 6)
	chain := chainOf(names, addrs)
	saddrs := addrs[3:]
	tasks := map[string]string{
		"1": `echo "$CHAINSYNC_ROUND" >> "$DIR/head-done"`,
		"2": `touch "$DIR/2-started"; while :; do sleep 0.05; done`,
		"3": "true",
	}
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		procs[n] = startProc(t, n, []string{"DIR=" + dir}, "run", "--chain", chain, "--name", n,
			"--rounds", fmt.Sprint(rounds), "--status-addr", saddrs[i], "--quiet", "--", "sh", "-c", tasks[n])
	}
	waitFor(t, 60*time.Second, "the Head's 64 tasks and node 2's first", func() bool {
		return len(readLines(t, filepath.Join(dir, "head-done"))) == rounds && exists(filepath.Join(dir, "2-started"))
	})
	procs["2"].signal(t, os.Kill)
	procs["2"].wait(t, 10*time.Second)

	out, _, code := runCLI(t, "status", "--timeout", "2s", strings.Join(saddrs, ","))
	if code != 1 {
		t.Errorf("exit %d, want 1 (a node does not answer)", code)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > 30 {
		t.Errorf("%d lines for 64 rounds held up at one node, want a few:\n%s", len(lines), out)
	}
	var verdicts []string
	for _, l := range lines {
		if strings.Contains(l, ": stuck at ") {
			verdicts = append(verdicts, l)
		}
	}
	if len(verdicts) != 1 || !strings.HasPrefix(verdicts[0], "64 rounds (") || !strings.Contains(verdicts[0], "): stuck at \"2\" for up to ") || !strings.Contains(verdicts[0], "does not answer") {
		t.Errorf("want one verdict line for the 64 rounds, stuck at \"2\", which does not answer; got %q\n%s", verdicts, out)
	}
	if !strings.Contains(out, `rounds in flight: "1": 64, "3": 64`) {
		t.Errorf("the rounds in flight per node are not quoted and counted:\n%s", out)
	}
	if strings.Contains(out, "blames  ") {
		t.Errorf("a fault line has a double space:\n%s", out)
	}
}
