//go:build unix

package main

// End-to-end tests of long-lived chains: chainsync run --serve on every
// node, the Head opening rounds with --rounds-from, --every and --control,
// and chainsync open. docs/SERVE.md describes them; docs/DESIGN.md, "Long-
// lived chains", gives the rules they check.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveChain starts nodes 1..n-1 of a served chain (--serve), each task
// appending "NODE ROUND" to dir/tasks, with extra flags; it returns the
// chain's names and addresses and the processes. The caller starts the
// Head (node 0).
func serveChain(t *testing.T, dir string, n int, extra func(i int) []string) ([]string, []string, []*proc) {
	t.Helper()
	names, addrs := nodeNames(n), freeAddrs(t, n)
	procs := make([]*proc, n)
	for i := n - 1; i >= 1; i-- {
		args := append([]string{"run"}, placeArgs("prevnext", names, addrs, i)...)
		args = append(args, "--serve", "--quiet", "--trace", filepath.Join(dir, names[i]+".trace"))
		if extra != nil {
			args = append(args, extra(i)...)
		}
		args = append(args, "--", "sh", "-c", taskScript)
		procs[i] = startProc(t, names[i], []string{"DIR=" + dir}, args...)
	}
	return names, addrs, procs
}

// taskScript records each task run, start and end, in $DIR/tasks; a round
// named fail-X fails at node X.
const taskScript = `echo "start $CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/tasks"; ` +
	`[ -n "$SLOW" ] && sleep "$SLOW"; ` +
	`[ "$CHAINSYNC_ROUND" = "fail-$CHAINSYNC_NODE" ] && exit 7; ` +
	`echo "end $CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/tasks"`

// headArgs are the Head's flags in a served chain, before extra.
func headArgs(dir string, names, addrs []string, extra ...string) []string {
	args := append([]string{"run"}, placeArgs("prevnext", names, addrs, 0)...)
	args = append(args, "--quiet", "--trace", filepath.Join(dir, names[0]+".trace"))
	return append(args, extra...)
}

// checkTasks checks dir/tasks: every round of opened ran its task once at
// every node (ended once; started again only at a node in restarted, after
// a restart), in chain order within the round, and every node ran the
// rounds in the order opened.
func checkTasks(t *testing.T, dir string, names, opened []string, restarted map[string]bool) {
	t.Helper()
	index := map[string]int{}
	for k, id := range opened {
		index[id] = k
	}
	ends := map[string]int{}   // "NODE ROUND" -> ends
	starts := map[string]int{} // "NODE ROUND" -> starts
	last := map[string]int{}   // node -> index of the last round it ended
	pos := map[string]int{}    // round -> position in chain of the last node that ended it
	for _, n := range names {
		last[n] = -1
	}
	for _, l := range readLines(t, filepath.Join(dir, "tasks")) {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("bad task line %q", l)
		}
		key := f[1] + " " + f[2]
		k, ok := index[f[2]]
		if !ok {
			t.Errorf("a task ran for round %q, which was never opened", f[2])
			continue
		}
		node := slices.Index(names, f[1])
		if f[0] == "start" {
			starts[key]++
			if prev, ok := pos[f[2]]; ok && prev != node-1 || !ok && node != 0 {
				if starts[key] == 1 {
					t.Errorf("round %s: %s started its task out of chain order", f[2], f[1])
				}
			}
			continue
		}
		ends[key]++
		pos[f[2]] = node
		if k < last[f[1]] {
			t.Errorf("%s ran round %s (opened %d) after round %s (opened %d)", f[1], f[2], k, opened[last[f[1]]], last[f[1]])
		}
		last[f[1]] = max(last[f[1]], k)
	}
	for _, id := range opened {
		for _, n := range names {
			key := n + " " + id
			if ends[key] != 1 {
				t.Errorf("%s ran the task of round %s %d times, want once", n, id, ends[key])
			}
			if starts[key] != 1 && !(restarted[n] && starts[key] == 2) {
				t.Errorf("%s started the task of round %s %d times", n, id, starts[key])
			}
		}
	}
}

// TestServeRoundsFromE2E: a served chain of four processes processes 1,000
// rounds that the Head opens from its standard input (--rounds-from -):
// every task once, in chain order within each round, and on every node in
// the order the rounds were opened (which is not the order of their ids).
// At the end of its input the Head finishes the open rounds and exits 0;
// the other nodes serve on until SIGTERM (exit 130).
//
// Draft: Message Types (ROUND-ID: many rounds over the same chain),
// Protocol Operation; docs/DESIGN.md, "Long-lived chains".
func TestServeRoundsFromE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 rounds of four processes")
	}
	rng := newRand(t)
	dir := t.TempDir()
	const rounds = 1000
	var opened []string
	for k := range rounds {
		opened = append(opened, fmt.Sprintf("b%03d-%04d", rng.IntN(1000), k))
	}
	if err := os.WriteFile(filepath.Join(dir, "ids"), []byte(strings.Join(opened, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	names, addrs, procs := serveChain(t, dir, 4, nil)
	args := headArgs(dir, names, addrs, "--rounds-from", "-", "--", "sh", "-c", taskScript)
	head := startCommand(t, "A", []string{"DIR=" + dir}, "chainsync "+strings.Join(args, " ")+" < ids",
		"sh", append([]string{"-c", `exec "$0" "$@" < "$DIR/ids"`, bin}, args...)...)
	if code := head.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("Head exited %d, want 0 at the end of its input", code)
	}
	checkTasks(t, dir, names, opened, nil)
	for _, p := range procs[1:] {
		if !p.running() {
			t.Fatalf("%s stopped; a served node serves until it is stopped", p.name)
		}
		p.signal(t, syscall.SIGTERM)
	}
	for _, p := range procs[1:] {
		if code := p.wait(t, 10*time.Second); code != 130 {
			t.Errorf("%s exited %d after SIGTERM, want 130", p.name, code)
		}
	}
}

// TestServeRoundsFromUsedAgainE2E: "a rerun never silently does
// nothing". A Head with --state-dir runs a file of two rounds (exit 0);
// run again on the same file and state directory, both ids are used
// already: each line is refused at ERROR, nothing runs again, and the
// Head exits 2, not 0. docs/SERVE.md, "From a file or a pipe".
func TestServeRoundsFromUsedAgainE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := filepath.Join(dir, "ids")
	if err := os.WriteFile(ids, []byte("u1\nu2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	names, addrs, procs := serveChain(t, dir, 2, nil)
	args := headArgs(dir, names, addrs, "--state-dir", filepath.Join(dir, "A.state"), "--rounds-from", ids, "--", "sh", "-c", taskScript)
	if code := startProc(t, "A", []string{"DIR=" + dir}, args...).wait(t, time.Minute); code != 0 {
		t.Fatalf("the first run exited %d, want 0", code)
	}
	again := startProc(t, "A", []string{"DIR=" + dir}, args...)
	if code := again.wait(t, time.Minute); code != 2 {
		t.Fatalf("the run again on the same file exited %d, want 2:\n%s", code, again.err.String())
	}
	again.waitLog(t, time.Second, "the used ids refused", containsAll("round u1 was used already"))
	again.waitLog(t, time.Second, "the exit explained", containsAll("some of its lines opened no round", "skipped=2"))
	checkTasks(t, dir, names, []string{"u1", "u2"}, nil)
	procs[1].signal(t, syscall.SIGTERM)
}

// openCmd runs chainsync open and returns its exit code, stdout and stderr.
func openCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	p := startProc(t, "open", nil, append([]string{"open"}, args...)...)
	code := p.wait(t, time.Minute)
	return code, p.out.String(), p.err.String()
}

// TestServeOpenE2E: a served Head with --control on a unix socket (mode
// 0600); chainsync open prints a generated id (unique, sortable by time),
// --wait exits 0 once the round is done in the whole chain, a reused id is
// refused (exit 1) and nothing runs again, and --no-wait fails when
// --max-open rounds are in flight.
//
// docs/DESIGN.md, "Long-lived chains"; draft, Message Types (ROUND-ID).
func TestServeOpenE2E(t *testing.T) {
	dir := t.TempDir()
	names, addrs, _ := serveChain(t, dir, 3, func(int) []string { return []string{"--fault-policy", "wait"} })
	sock := filepath.Join(dir, "control.sock")
	args := headArgs(dir, names, addrs, "--control", "unix:"+sock, "--max-open", "1", "--fault-policy", "wait",
		"--", "sh", "-c", taskScript)
	head := startProc(t, "A", []string{"DIR=" + dir, "SLOW="}, args...)
	head.waitLog(t, 10*time.Second, "control endpoint up", func(l string) bool { return exists(sock) })
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %v, mode %v: want 0600", err, fi.Mode())
	}
	var ids []string
	for range 3 {
		code, out, errOut := openCmd(t, "--control", "unix:"+sock, "--wait")
		if code != 0 {
			t.Fatalf("open --wait exited %d: %s", code, errOut)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	for k, id := range ids {
		if len(id) != len("20261201T064500Z-3f9a") || id[8] != 'T' || id[15] != 'Z' || id[16] != '-' {
			t.Errorf("generated id %q is not like 20261201T064500Z-3f9a", id)
		}
		if k > 0 && id <= ids[k-1] {
			t.Errorf("generated ids %q then %q: not unique and sorted by time", ids[k-1], id)
		}
	}
	code, out, _ := openCmd(t, "--control", "unix:"+sock, "--id", "batch-1", "--wait")
	if code != 0 || strings.TrimSpace(out) != "batch-1" {
		t.Fatalf("open --id batch-1 --wait: exit %d, printed %q", code, out)
	}
	code, _, errOut := openCmd(t, "--control", "unix:"+sock, "--id", "batch-1")
	if code != 1 || !strings.Contains(errOut, "used") {
		t.Errorf("reused id: exit %d, stderr %q; want 1 and a clear error", code, errOut)
	}
	code, _, errOut = openCmd(t, "--control", "unix:"+sock, "--id", "bad id")
	if code != 2 {
		t.Errorf("invalid id: exit %d, stderr %q; want 2", code, errOut)
	}
	checkTasks(t, dir, names, append(ids, "batch-1"), nil)
	if !head.running() {
		t.Fatal("the Head stopped")
	}
	head.signal(t, syscall.SIGTERM)
	if code := head.wait(t, 10*time.Second); code != 130 {
		t.Errorf("Head exited %d after SIGTERM, want 130", code)
	}
	if exists(sock) {
		t.Error("the control socket outlived the Head")
	}
}

// traceRecord is the part of a --trace line these tests read.
type traceRecord struct {
	Time  time.Time `json:"time"`
	Kind  string    `json:"kind"`
	Round string    `json:"round"`
}

func readTrace(t *testing.T, path string) []traceRecord {
	t.Helper()
	var out []traceRecord
	for _, l := range readLines(t, path) {
		var r traceRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s: %q: %v", path, l, err)
		}
		out = append(out, r)
	}
	return out
}

// openSpans returns, from a Head's trace, when each round was opened and
// the most rounds open at once.
func openSpans(recs []traceRecord) (opened []time.Time, most int) {
	open := 0
	for _, r := range recs {
		switch r.Kind {
		case "round-opened":
			opened = append(opened, r.Time)
			open++
			most = max(most, open)
		case "round-done":
			open--
		}
	}
	return opened, most
}

// TestServeEveryAndMaxOpenE2E: --every 200ms opens rounds on schedule; and
// with slow tasks (0.3 s at every node) and --max-open 2, the Head's trace
// never shows more than two rounds open, and ticks are skipped, not
// queued.
//
// docs/DESIGN.md, "Long-lived chains".
func TestServeEveryAndMaxOpenE2E(t *testing.T) {
	t.Run("every", func(t *testing.T) {
		dir := t.TempDir()
		names, addrs, _ := serveChain(t, dir, 2, nil)
		args := headArgs(dir, names, addrs, "--every", "200ms", "--", "sh", "-c", taskScript)
		head := startProc(t, "A", []string{"DIR=" + dir}, args...)
		poll(20*time.Second, func() bool { return len(readLines(t, filepath.Join(dir, "tasks"))) >= 2*2*8 })
		head.signal(t, syscall.SIGTERM)
		head.wait(t, 10*time.Second)
		opened, _ := openSpans(readTrace(t, filepath.Join(dir, "A.trace")))
		if len(opened) < 8 {
			t.Fatalf("%d rounds opened", len(opened))
		}
		for k := 1; k < len(opened); k++ {
			gap := opened[k].Sub(opened[k-1])
			if gap < 100*time.Millisecond || gap > 600*time.Millisecond {
				t.Errorf("round %d opened %v after the one before, want about 200ms", k, gap)
			}
		}
	})
	t.Run("max-open", func(t *testing.T) {
		dir := t.TempDir()
		names, addrs, _ := serveChain(t, dir, 3, nil)
		args := headArgs(dir, names, addrs, "--every", "50ms", "--max-open", "2", "--", "sh", "-c", taskScript)
		head := startProc(t, "A", []string{"DIR=" + dir, "SLOW=0.3"}, args...)
		head.waitLog(t, 20*time.Second, "a skipped tick", containsAll("tick skipped"))
		poll(30*time.Second, func() bool { return len(readLines(t, filepath.Join(dir, "tasks"))) >= 2*3*4 })
		head.signal(t, syscall.SIGTERM)
		head.wait(t, 10*time.Second)
		opened, most := openSpans(readTrace(t, filepath.Join(dir, "A.trace")))
		if most != 2 || len(opened) < 4 {
			t.Errorf("the Head's trace shows %d rounds opened, at most %d at once; want at most --max-open 2, and 2 reached", len(opened), most)
		}
	})
}

// TestServeKillMiddleE2E: a served chain of four nodes, each with a
// --state-dir; the Head opens 20 rounds; B is ready (--ready-file, {round}
// in its path) for the first few only. Once C has started the last of
// those, B is killed with SIGKILL, with every round open, and restarted on
// its state directory; then it becomes ready for the rest. Every round
// completes, each task exactly once, in chain order and on every node in
// the order opened; the Head exits 0.
//
// docs/DESIGN.md, "Restarts and durable state" and "Long-lived chains".
func TestServeKillMiddleE2E(t *testing.T) {
	rng := newRand(t)
	dir := t.TempDir()
	env := []string{"DIR=" + dir, "SLOW=0.05"}
	names, addrs := nodeNames(4), freeAddrs(t, 4)
	procs := make([]*proc, 4)
	start := func(i int) *proc {
		args := append([]string{"run"}, placeArgs("prevnext", names, addrs, i)...)
		args = append(args, "--serve", "--quiet", "--state-dir", filepath.Join(dir, fmt.Sprint("state", i)))
		if i == 1 {
			args = append(args, "--ready-file", filepath.Join(dir, "ready-{round}"), "--ready-interval", "20ms")
		}
		return startProc(t, names[i], env, append(args, "--", "sh", "-c", taskScript)...)
	}
	var opened []string
	for k := range 20 {
		opened = append(opened, fmt.Sprintf("r%02d", k))
	}
	ready := func(ids []string) {
		for _, id := range ids {
			if err := os.WriteFile(filepath.Join(dir, "ready-"+id), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	first := 2 + rng.IntN(6) // B is ready for the rounds before this one
	ready(opened[:first])
	for i := 3; i >= 1; i-- {
		procs[i] = start(i)
	}
	if err := os.WriteFile(filepath.Join(dir, "ids"), []byte(strings.Join(opened, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := headArgs(dir, names, addrs, "--state-dir", filepath.Join(dir, "state0"),
		"--rounds-from", filepath.Join(dir, "ids"), "--", "sh", "-c", taskScript)
	head := startProc(t, "A", env, args...)
	// C starting the last round B is ready for means B's part of it has
	// run and is journalled; the later rounds are open, waiting for B.
	waitFor(t, 30*time.Second, "C starting round "+opened[first-1], func() bool {
		return slices.Contains(readLines(t, filepath.Join(dir, "tasks")), "start C "+opened[first-1])
	})
	// When B dies, and when it becomes ready again, is the test's
	// subject: at random moments after the rounds it is ready for.
	time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
	procs[1].signal(t, syscall.SIGKILL)
	procs[1].wait(t, 5*time.Second)
	later := first + rng.IntN(len(opened)-first)
	ready(opened[first:later]) // some while B is down, the rest once it is back
	procs[1] = start(1)
	time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // a random moment, as above
	ready(opened[later:])
	if code := head.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("Head exited %d, want 0", code)
	}
	checkTasks(t, dir, names, opened, nil)
}

// TestServeOpenWaitFailedRoundE2E: a served chain of four nodes (which
// speak fault notices: --serve implies heartbeats) under --fault-policy
// wait. A
// round whose task fails at C: chainsync open --wait exits 3 and names C;
// the round ended at every node (D never ran it), and the chain serves the
// next round, which every node runs. The fault notice carries the failure
// to the Head.
//
// docs/DESIGN.md, "Long-lived chains" (a round that fails somewhere ends
// at every node) and "Extension lines"; draft, Error Handling.
func TestServeOpenWaitFailedRoundE2E(t *testing.T) {
	dir := t.TempDir()
	common := []string{"--fault-policy", "wait"}
	names, addrs, procs := serveChain(t, dir, 4, func(int) []string { return common })
	sock := filepath.Join(dir, "control.sock")
	args := headArgs(dir, names, addrs, append(common, "--control", "unix:"+sock, "--", "sh", "-c", taskScript)...)
	head := startProc(t, "A", []string{"DIR=" + dir}, args...)
	head.waitLog(t, 10*time.Second, "control endpoint up", func(string) bool { return exists(sock) })

	if code, _, errOut := openCmd(t, "--control", "unix:"+sock, "--id", "good-1", "--wait"); code != 0 {
		t.Fatalf("good round: open --wait exited %d: %s", code, errOut)
	}
	code, out, errOut := openCmd(t, "--control", "unix:"+sock, "--id", "fail-C", "--wait")
	if code != 3 || strings.TrimSpace(out) != "fail-C" || !strings.Contains(errOut, "C") || !strings.Contains(errOut, "task failed") {
		t.Fatalf("round failing at C: open --wait exit %d, stdout %q, stderr %q; want 3 naming C", code, out, errOut)
	}
	t.Logf("open --wait for the failing round: %s", strings.TrimSpace(errOut))
	if code, _, errOut := openCmd(t, "--control", "unix:"+sock, "--id", "good-2", "--wait"); code != 0 {
		t.Fatalf("the round after the failed one: open --wait exited %d: %s", code, errOut)
	}
	lines := readLines(t, filepath.Join(dir, "tasks"))
	if slices.Contains(lines, "start D fail-C") || slices.Contains(lines, "end C fail-C") {
		t.Errorf("the failed round went on past C: %q", lines)
	}
	for _, n := range names {
		for _, id := range []string{"good-1", "good-2"} {
			if !slices.Contains(lines, "end "+n+" "+id) {
				t.Errorf("%s did not run round %s", n, id)
			}
		}
	}
	for _, p := range append(procs[1:], head) {
		if !p.running() {
			t.Fatalf("%s stopped under --fault-policy wait", p.name)
		}
	}
}

// TestServeOpenWaitHaltE2E: the same failure under --fault-policy halt
// (the default): open --wait exits 3 naming C, C exits 3 (its task
// failed), and every other node exits 4 (the chain halted) without running
// the round's task after C.
//
// docs/DESIGN.md, "Long-lived chains" and "Extension lines"; draft, Error
// Handling.
func TestServeOpenWaitHaltE2E(t *testing.T) {
	dir := t.TempDir()
	names, addrs, procs := serveChain(t, dir, 4, nil)
	sock := filepath.Join(dir, "control.sock")
	args := headArgs(dir, names, addrs, "--control", "unix:"+sock, "--", "sh", "-c", taskScript)
	procs[0] = startProc(t, "A", []string{"DIR=" + dir}, args...)
	procs[0].waitLog(t, 10*time.Second, "control endpoint up", func(string) bool { return exists(sock) })
	code, _, errOut := openCmd(t, "--control", "unix:"+sock, "--id", "fail-C", "--wait")
	if code != 3 || !strings.Contains(errOut, "at node C") {
		t.Fatalf("open --wait: exit %d, stderr %q; want 3 naming C", code, errOut)
	}
	for i, p := range procs {
		want := 4
		if names[i] == "C" {
			want = 3
		}
		if got := p.wait(t, 15*time.Second); got != want {
			t.Errorf("%s exited %d, want %d", p.name, got, want)
		}
	}
	if lines := readLines(t, filepath.Join(dir, "tasks")); slices.Contains(lines, "start D fail-C") {
		t.Errorf("D ran the task of the failed round: %q", lines)
	}
}

// TestServePipelineHungNodeE2E is the pipeline as a served chain: four
// stages with --fault-policy wait and a --state-dir each, batches opened
// by --rounds-from. B hangs in its task for batch b03 (its node stopped,
// SIGSTOP): A and C name B silent (heartbeats), keep their progress and
// serve on. B alone is reset: killed with SIGKILL and started again on its
// state directory with --resume-task rerun. It runs b03 again, and every
// batch completes at every node, in order; only B's b03 started twice.
//
// Draft: Introduction (the pipeline), Error Handling ("reset only the
// faulty node"); docs/DESIGN.md, "Heartbeats", "Restarts and durable
// state" and "Long-lived chains".
func TestServePipelineHungNodeE2E(t *testing.T) {
	dir := t.TempDir()
	names, addrs := nodeNames(4), freeAddrs(t, 4)
	// B's task for b03 stops its own node, once, and hangs with it.
	script := `if [ "$CHAINSYNC_NODE$CHAINSYNC_ROUND" = Bb03 ] && [ ! -e "$DIR/hung" ]; then ` +
		`echo "start B b03" >> "$DIR/tasks"; touch "$DIR/hung"; kill -STOP $PPID; sleep 3600; fi; ` + taskScript
	start := func(i int, extra ...string) *proc {
		args := append([]string{"run"}, placeArgs("chain", names, addrs, i)...)
		args = append(args, "--fault-policy", "wait", "--heartbeat", "200ms",
			"--state-dir", filepath.Join(dir, names[i]))
		if i == 0 {
			args = append(args, "--rounds-from", filepath.Join(dir, "ids"))
		} else {
			args = append(args, "--serve")
		}
		args = append(args, extra...)
		return startProc(t, names[i], []string{"DIR=" + dir}, append(args, "--", "sh", "-c", script)...)
	}
	var opened []string
	for k := range 8 {
		opened = append(opened, fmt.Sprintf("b%02d", k))
	}
	if err := os.WriteFile(filepath.Join(dir, "ids"), []byte(strings.Join(opened, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	procs := make([]*proc, 4)
	for i := 3; i >= 0; i-- {
		procs[i] = start(i)
	}
	for _, i := range []int{0, 2} {
		procs[i].waitLog(t, 20*time.Second, "B named silent", containsAll("peer-silent", "peer=B"))
	}
	procs[1].signal(t, syscall.SIGKILL)
	procs[1].wait(t, 5*time.Second)
	procs[1] = start(1, "--resume-task", "rerun")
	if code := procs[0].wait(t, time.Minute); code != 0 {
		t.Fatalf("the Head exited %d, want 0 once every batch is done", code)
	}
	checkTasks(t, dir, names, opened, map[string]bool{"B": true})
	for _, p := range procs[1:] {
		if !p.running() {
			t.Errorf("%s stopped; under --fault-policy wait it serves on", p.name)
		}
	}
}

// TestServeHaltTaskFailedWithRoundsInFlightE2E: under --fault-policy halt
// (the default), a served node whose own task fails exits 3 even when
// later rounds were in flight and ended as faults (exit 4) with it: the
// failed round's own result decides, whichever result the node reads
// first. The Head opens r1, fail-B, r3, r4, r5 from --rounds-from.
//
// docs/OPERATIONS.md, exit status; draft, Error Handling.
func TestServeHaltTaskFailedWithRoundsInFlightE2E(t *testing.T) {
	dir := t.TempDir()
	names, addrs, procs := serveChain(t, dir, 4, nil)
	ids := filepath.Join(dir, "ids")
	if err := os.WriteFile(ids, []byte("r1\nfail-B\nr3\nr4\nr5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := headArgs(dir, names, addrs, "--rounds-from", ids, "--serve", "--", "sh", "-c", taskScript)
	procs[0] = startProc(t, "A", []string{"DIR=" + dir}, args...)
	if got := procs[1].wait(t, 30*time.Second); got != 3 {
		t.Errorf("B, whose task failed, exited %d, want 3\n%s", got, procs[1].out.String())
	}
	for _, p := range []*proc{procs[0], procs[2], procs[3]} {
		if got := p.wait(t, 15*time.Second); got != 4 {
			t.Errorf("%s exited %d, want 4 (the chain halted)", p.name, got)
		}
	}
	if lines := readLines(t, filepath.Join(dir, "tasks")); slices.Contains(lines, "start C fail-B") {
		t.Errorf("C ran the task of the failed round: %q", lines)
	}
}
