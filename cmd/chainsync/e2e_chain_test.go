//go:build unix

package main

// End-to-end tests of whole chains of chainsync processes: ordering,
// concurrent rounds, task failure, signals and timeouts.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func nodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = string(rune('A' + i))
	}
	return names
}

func chainFlag(names, addrs []string) string {
	parts := make([]string, len(names))
	for i := range names {
		parts[i] = names[i] + "=" + addrs[i]
	}
	return strings.Join(parts, ",")
}

// placeArgs gives node i its place in the chain, in one of the two forms of
// chainsync run: "prevnext" (--prev/--next/--listen) or "chain"
// (--chain/--name).
func placeArgs(form string, names, addrs []string, i int) []string {
	args := []string{"--name", names[i]}
	if form == "chain" {
		return append(args, "--chain", chainFlag(names, addrs))
	}
	if i > 0 {
		args = append(args, "--listen", addrs[i], "--prev", addrs[i-1])
	}
	if i < len(names)-1 {
		args = append(args, "--next", addrs[i+1])
	}
	return args
}

func wantRole(i, n int) string {
	switch {
	case n == 1:
		return "single"
	case i == 0:
		return "head"
	case i == n-1:
		return "tail"
	}
	return "middle"
}

// nanos reads a file of `date +%s%N` lines.
func nanos(t *testing.T, path string) []int64 {
	t.Helper()
	var out []int64
	for _, l := range readLines(t, path) {
		v, err := strconv.ParseInt(strings.TrimSpace(l), 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, l, err)
		}
		out = append(out, v)
	}
	return out
}

// TestChainRandomOrder runs chains of 3 and 6 separate processes, started
// in random order and made locally ready (--ready-file) at random moments,
// and checks the draft's promises from the tasks' own timestamps (draft
// "Introduction" and "Protocol Operation"; docs/DESIGN.md "State machine":
// "n tasks, run in chain order, none before every node was ready"; roles
// per "Roles and connections").
func TestChainRandomOrder(t *testing.T) {
	for _, tc := range []struct {
		n    int
		form string
	}{{3, "prevnext"}, {6, "chain"}, {3, "chain"}, {6, "prevnext"}} {
		t.Run(fmt.Sprintf("%d-nodes-%s", tc.n, tc.form), func(t *testing.T) {
			t.Parallel()
			testRandomChain(t, tc.n, tc.form)
		})
	}
}

func testRandomChain(t *testing.T, n int, form string) {
	rng := newRand(t)
	dir := t.TempDir()
	names := nodeNames(n)
	addrs := freeAddrs(t, n)
	task := []string{"sh", "-c", `date +%s%N >> "$DIR/$CHAINSYNC_NODE.start"; ` +
		`echo "$CHAINSYNC_ROLE" >> "$DIR/$CHAINSYNC_NODE.role"; sleep 0.05; ` +
		`date +%s%N >> "$DIR/$CHAINSYNC_NODE.end"`}
	env := []string{"DIR=" + dir}

	type event struct {
		at    time.Duration
		node  int
		ready bool // create the ready file; else start the process
	}
	var plan []event
	for i := range n {
		plan = append(plan, event{time.Duration(rng.IntN(300)) * time.Millisecond, i, false})
		plan = append(plan, event{time.Duration(rng.IntN(600)) * time.Millisecond, i, true})
	}
	sort.SliceStable(plan, func(a, b int) bool { return plan[a].at < plan[b].at })
	var order []string
	for _, e := range plan {
		if !e.ready {
			order = append(order, names[e.node])
		}
	}
	t.Logf("start order %v", order)

	procs := make([]*proc, n)
	readyAt := make([]int64, n) // unix ns, taken just after the file exists
	t0 := time.Now()
	for _, e := range plan {
		// The random schedule is the test's subject: nodes start and
		// become ready in any order, at any time.
		time.Sleep(time.Until(t0.Add(e.at)))
		i := e.node
		readyFile := filepath.Join(dir, "ready."+names[i])
		if e.ready {
			if err := os.WriteFile(readyFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			readyAt[i] = time.Now().UnixNano()
			continue
		}
		args := append([]string{"run"}, placeArgs(form, names, addrs, i)...)
		args = append(args, "--ready-file", readyFile, "--ready-interval", "20ms", "--")
		procs[i] = startProc(t, names[i], env, append(args, task...)...)
	}
	for i, p := range procs {
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", names[i], code)
		}
	}
	lastReady := slices.Max(readyAt)
	var prevEnd int64
	for i, nm := range names {
		starts := nanos(t, filepath.Join(dir, nm+".start"))
		ends := nanos(t, filepath.Join(dir, nm+".end"))
		if len(starts) != 1 || len(ends) != 1 {
			t.Fatalf("%s: task started %d and ended %d times, want exactly once", nm, len(starts), len(ends))
		}
		if starts[0] <= lastReady {
			t.Errorf("%s: task started %v before the last node became ready", nm, time.Duration(lastReady-starts[0]))
		}
		if i > 0 && starts[0] <= prevEnd {
			t.Errorf("%s: task started %v before %s's task ended (want strict chain order)", nm, time.Duration(prevEnd-starts[0]), names[i-1])
		}
		prevEnd = ends[0]
		if roles := readLines(t, filepath.Join(dir, nm+".role")); len(roles) != 1 || roles[0] != wantRole(i, n) {
			t.Errorf("%s: CHAINSYNC_ROLE %q, want %q", nm, roles, wantRole(i, n))
		}
	}
}

// TestConcurrentRounds runs a 4-process chain with --rounds 5: five named
// rounds (ids 0..4, as the reference implementation's --n-rounds) run
// concurrently on the same connections (draft "Message Types": ROUND-ID
// "to support multiple concurrent rounds"; docs/DESIGN.md "Wire format": "Named
// rounds run concurrently and independently"). Every task runs once per
// round, and within each round in chain order.
func TestConcurrentRounds(t *testing.T) {
	t.Parallel()
	rng := newRand(t)
	dir := t.TempDir()
	const n, rounds = 4, 5
	names := nodeNames(n)
	addrs := freeAddrs(t, n)
	task := []string{"sh", "-c", `date +%s%N >> "$DIR/$CHAINSYNC_NODE.$CHAINSYNC_ROUND.start"; ` +
		`echo "$CHAINSYNC_ROUND" >> "$DIR/$CHAINSYNC_NODE.rounds"; sleep 0.02; ` +
		`date +%s%N >> "$DIR/$CHAINSYNC_NODE.$CHAINSYNC_ROUND.end"`}
	procs := make([]*proc, n)
	for _, i := range rng.Perm(n) {
		args := append([]string{"run"}, placeArgs("chain", names, addrs, i)...)
		args = append(args, "--rounds", strconv.Itoa(rounds), "--")
		procs[i] = startProc(t, names[i], []string{"DIR=" + dir}, append(args, task...)...)
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond) // a random start order and spacing is the test's subject
	}
	for i, p := range procs {
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", names[i], code)
		}
	}
	for i, nm := range names {
		got := readLines(t, filepath.Join(dir, nm+".rounds"))
		sort.Strings(got)
		if want := []string{"0", "1", "2", "3", "4"}; !slices.Equal(got, want) {
			t.Errorf("%s: tasks ran for CHAINSYNC_ROUND %q, want each of %q once", nm, got, want)
			continue
		}
		if i == 0 {
			continue
		}
		for r := range rounds {
			start := nanos(t, filepath.Join(dir, fmt.Sprintf("%s.%d.start", nm, r)))
			prevEnd := nanos(t, filepath.Join(dir, fmt.Sprintf("%s.%d.end", names[i-1], r)))
			if len(start) != 1 || len(prevEnd) != 1 || start[0] <= prevEnd[0] {
				t.Errorf("round %d: %s started %v, %s ended %v: want one run each, in chain order", r, nm, start, names[i-1], prevEnd)
			}
		}
	}
}

// TestTaskFailureHaltsChain: the middle node's task fails (exit 7). Per
// docs/DESIGN.md "Faults", that halts the chain there: no COMPLETE is sent on
// (the tail never runs its task), the failure is reported and the process
// exits 3; --on-fault runs with CHAINSYNC_FAULT=task-failed (the general form
// of the draft's "SNMP trap"/"phone call", draft "Error Handling"). The
// head and tail, with --phase-timeout 1s, report a fault and exit 4 rather
// than wait forever.
func TestTaskFailureHaltsChain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := nodeNames(3)
	addrs := freeAddrs(t, 3)
	hook := `echo "$CHAINSYNC_FAULT|$CHAINSYNC_ROUND|$CHAINSYNC_NODE" > "$DIR/$CHAINSYNC_NODE.fault"`
	tasks := [][]string{
		{"sh", "-c", `echo ran >> "$DIR/$CHAINSYNC_NODE.task"`},
		{"sh", "-c", `echo ran >> "$DIR/$CHAINSYNC_NODE.task"; exit 7`},
		{"sh", "-c", `echo ran >> "$DIR/$CHAINSYNC_NODE.task"`},
	}
	procs := make([]*proc, 3)
	for _, i := range []int{2, 1, 0} {
		args := append([]string{"run"}, placeArgs("chain", names, addrs, i)...)
		args = append(args, "--on-fault", hook)
		if i != 1 {
			args = append(args, "--phase-timeout", "1s")
		}
		args = append(args, "--")
		procs[i] = startProc(t, names[i], []string{"DIR=" + dir}, append(args, tasks[i]...)...)
	}
	for i, want := range []int{4, 3, 4} {
		if code := procs[i].wait(t, 15*time.Second); code != want {
			t.Errorf("%s exited %d, want %d", names[i], code, want)
		}
	}
	for i, want := range []int{1, 1, 0} {
		if got := len(readLines(t, filepath.Join(dir, names[i]+".task"))); got != want {
			t.Errorf("%s: task ran %d times, want %d", names[i], got, want)
		}
	}
	if got := readLines(t, filepath.Join(dir, "B.fault")); !slices.Equal(got, []string{"task-failed||B"}) {
		t.Errorf("B's --on-fault hook wrote %q, want %q", got, "task-failed||B")
	}
	for _, nm := range []string{"A", "C"} {
		if got := readLines(t, filepath.Join(dir, nm+".fault")); !slices.Equal(got, []string{"phase-timeout||" + nm}) {
			t.Errorf("%s's --on-fault hook wrote %q, want %q", nm, got, "phase-timeout||"+nm)
		}
	}
	if l := procs[1].err.String(); !strings.Contains(l, "status 7") {
		t.Errorf("B's log does not report the task's exit status 7")
	}
}

// TestSIGTERMStopsTask: SIGTERM to a node whose task is running stops the
// node (exit 130) and passes the signal on to the task (docs/DESIGN.md "Faults":
// a node stops when "it is told to stop"; chainsync run --help: "130
// interrupted").
func TestSIGTERMStopsTask(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := filepath.Join(dir, "term")
	// The trap also ends the background sleep, so that nothing outlives
	// the test.
	task := `trap 'echo got-term > "$F"; kill $! 2>/dev/null; exit 1' TERM; echo up > "$F.up"; sleep 30 & wait`
	p := startProc(t, "single", []string{"F=" + f}, "run", "--name", "S", "--", "sh", "-c", task)
	// A signal that comes before sh reaches its wait is trapped all the
	// same (sh runs a trap between commands), so the task being up is
	// all the signal needs.
	waitFor(t, 5*time.Second, "task up", func() bool { return exists(f+".up") || !p.running() })
	if !p.running() {
		t.Fatalf("the task did not start: the node exited %d", p.code)
	}
	sent := time.Now()
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 5*time.Second); code != 130 {
		t.Errorf("exit %d after SIGTERM, want 130", code)
	}
	t.Logf("exited %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
	if got := readLines(t, f); !slices.Equal(got, []string{"got-term"}) {
		t.Errorf("the task did not get SIGTERM (trap file %q)", got)
	}
}

// TestConnectTimeout: a Head whose successor never comes up faults after
// --connect-timeout (docs/DESIGN.md "Roles and connections": dial "until it
// connects ... or until a configured timeout"; "Faults": timeouts are
// optional and report a fault), exits 4 and names the successor.
func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, form := range []string{"prevnext", "chain"} {
		t.Run(form, func(t *testing.T) {
			addrs := freeAddrs(t, 2)
			args := append([]string{"run"}, placeArgs(form, []string{"A", "B"}, addrs, 0)...)
			args = append(args, "--connect-timeout", "500ms",
				"--on-fault", `echo "$CHAINSYNC_FAULT" > "$DIR/fault.`+form+`"`, "--", "sh", "-c", `echo ran > "$DIR/task.`+form+`"`)
			start := time.Now()
			p := startProc(t, "A", []string{"DIR=" + dir}, args...)
			if code := p.wait(t, 10*time.Second); code != 4 {
				t.Fatalf("exit %d, want 4", code)
			}
			if d := time.Since(start); d < 500*time.Millisecond {
				t.Errorf("exited after %v, before --connect-timeout 500ms", d)
			}
			if !strings.Contains(p.err.String(), addrs[1]) {
				t.Errorf("the log does not name the successor %s", addrs[1])
			}
			if exists(filepath.Join(dir, "task."+form)) {
				t.Errorf("the task ran although the chain never became ready")
			}
			if got := readLines(t, filepath.Join(dir, "fault."+form)); !slices.Equal(got, []string{"peer-unreachable"}) {
				t.Errorf("--on-fault hook wrote %q, want CHAINSYNC_FAULT=peer-unreachable", got)
			}
		})
	}
}

// TestSingleNode: a one-node chain is both Head and Tail: locally ready ->
// task runs -> done (docs/DESIGN.md "Roles and connections"); the task sees
// CHAINSYNC_ROLE=single, and with --round the id in CHAINSYNC_ROUND.
// --log-format json writes one JSON object per line on stderr.
func TestSingleNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startProc(t, "S", []string{"DIR=" + dir}, "run", "--name", "S", "--round", "r-1.x_2", "--log-format", "json", "--",
		"sh", "-c", `echo "$CHAINSYNC_ROLE|$CHAINSYNC_ROUND|$CHAINSYNC_NODE" >> "$DIR/task"`)
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if got := readLines(t, filepath.Join(dir, "task")); !slices.Equal(got, []string{"single|r-1.x_2|S"}) {
		t.Errorf("task runs %q, want %q", got, "single|r-1.x_2|S")
	}
	lines := strings.Split(strings.TrimSpace(p.err.String()), "\n")
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil || v["msg"] == nil || v["level"] == nil {
			t.Errorf("--log-format json: not a JSON log record: %q (%v)", l, err)
		}
	}
}

// TestRestartBeforeStart: one process of a 3-process chain is killed
// (SIGKILL) mid-round, after the READY wave reached it but before the START
// wave, and restarted with the same command line. docs/DESIGN.md "Roles and
// connections": a lost connection is re-established (the dialing side
// re-dials), each side re-sends its last message, duplicates are no-ops,
// and a restarted predecessor comes back through the pending-connection
// rule; "a transient disconnect loses nothing and never triggers a task
// twice". The tail's readiness gates the round until the victim is back.
func TestRestartBeforeStart(t *testing.T) {
	for _, victim := range []int{0, 1, 2} {
		t.Run(wantRole(victim, 3), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			names := nodeNames(3)
			addrs := freeAddrs(t, 3)
			task := []string{"sh", "-c", `date +%s%N >> "$DIR/$CHAINSYNC_NODE.start"; sleep 0.02; date +%s%N >> "$DIR/$CHAINSYNC_NODE.end"`}
			run := func(i int) *proc {
				args := append([]string{"run"}, placeArgs("chain", names, addrs, i)...)
				args = append(args, "--ready-file", filepath.Join(dir, "ready."+names[i]), "--ready-interval", "20ms", "--")
				return startProc(t, names[i], []string{"DIR=" + dir}, append(args, task...)...)
			}
			for _, nm := range names[:2] {
				if err := os.WriteFile(filepath.Join(dir, "ready."+nm), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			procs := []*proc{run(0), run(1), run(2)}
			// The READY wave has reached C (not locally ready yet).
			procs[2].waitLog(t, 10*time.Second, "received READY", containsAll("received READY from pred"))
			procs[victim].cmd.Process.Kill()
			procs[victim].wait(t, 5*time.Second)
			procs[victim] = run(victim)
			procs[victim].waitLog(t, 10*time.Second, "link up", containsAll("link up"))
			if err := os.WriteFile(filepath.Join(dir, "ready.C"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			for i, p := range procs {
				if code := p.wait(t, 15*time.Second); code != 0 {
					t.Errorf("%s exited %d, want 0", names[i], code)
				}
			}
			var prevEnd int64
			for i, nm := range names {
				starts := nanos(t, filepath.Join(dir, nm+".start"))
				ends := nanos(t, filepath.Join(dir, nm+".end"))
				if len(starts) != 1 || len(ends) != 1 {
					t.Fatalf("%s: task ran %d times, want exactly once", nm, len(starts))
				}
				if i > 0 && starts[0] <= prevEnd {
					t.Errorf("%s started before %s ended", nm, names[i-1])
				}
				prevEnd = ends[0]
			}
		})
	}
}
