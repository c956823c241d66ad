//go:build unix

package main

// End-to-end tests of run --worker (docs/WORKERS.md): real chains on
// loopback whose every node keeps one worker process and gives it a
// request a round.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// exampleWorker is the path of one of the examples in examples/workers.
func exampleWorker(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "examples", "workers", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// python3 returns the Python interpreter's own path (past a version
// manager's shim, which adds a second to every start), or skips the test
// if there is no python3.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH: this test runs a worker written in Python")
	}
	if out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output(); err == nil {
		if s := strings.TrimSpace(string(out)); s != "" {
			return s
		}
	}
	return p
}

// testWorker is a worker in shell for the fault tests. It records
// "hello NODE PID" and "run NODE ROUND PID ID" in $DIR/tasks, and, for
// the round its variables name, answers ok:false (FAIL_ROUND), exits 3
// holding the request (EXIT_ROUND) or never answers, with a child in its
// group (HANG_ROUND, recorded as "child NODE PID"). HELLO_DELAY delays
// its answer to hello; JUNK=1 writes a line that is not a response and a
// response to an id never asked before each answer.
const testWorker = `rec=$DIR/tasks
while IFS= read -r line; do
	id=${line#'{"id":'}
	id=${id%%[!0-9]*}
	case $line in
	*'"op":"hello"'*)
		[ -n "$HELLO_DELAY" ] && sleep "$HELLO_DELAY"
		echo "hello $CHAINSYNC_NODE $$" >>"$rec"
		printf '{"id":%s,"ok":true,"version":1}\n' "$id" ;;
	*'"op":"run"'*)
		round=${line#*'"round":"'}
		round=${round%%'"'*}
		echo "run $CHAINSYNC_NODE $round $$ $id" >>"$rec"
		if [ -n "$JUNK" ]; then
			printf 'junk \033[31m not a response\n'
			printf '{"id":%s,"ok":true}\n' 999999
		fi
		case $round in
		"$FAIL_ROUND") printf '{"id":%s,"ok":false,"error":"disk full at %s"}\n' "$id" "$CHAINSYNC_NODE" ;;
		"$EXIT_ROUND") exit 3 ;;
		"$HANG_ROUND") sleep 1000 & echo "child $CHAINSYNC_NODE $!" >>"$rec" ;;
		*) printf '{"id":%s,"ok":true}\n' "$id" ;;
		esac ;;
	esac
done
`

// workerChain starts an n-node served chain on loopback, every node with
// --worker running the command worker(i) and the flags extra(i); the Head
// opens the rounds ids from a file and exits at its end. env is every
// node's environment (DIR=dir is added). It returns the processes, Head
// first.
func workerChain(t *testing.T, dir string, n int, ids []string, env []string, extra func(i int) []string, worker func(i int) []string) []*proc {
	t.Helper()
	names, addrs := nodeNames(n), freeAddrs(t, n)
	if err := os.WriteFile(filepath.Join(dir, "ids"), []byte(strings.Join(ids, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	procs := make([]*proc, n)
	for i := n - 1; i >= 0; i-- {
		args := append([]string{"run", "--worker"}, placeArgs("chain", names, addrs, i)...)
		if i == 0 {
			args = append(args, "--rounds-from", filepath.Join(dir, "ids"))
		} else {
			args = append(args, "--serve")
		}
		if extra != nil {
			args = append(args, extra(i)...)
		}
		args = append(append(args, "--"), worker(i)...)
		procs[i] = startProc(t, names[i], append([]string{"DIR=" + dir}, env...), args...)
	}
	return procs
}

// shWorker runs testWorker with the variables vars.
func shWorker(dir string, vars ...string) []string {
	return append(append([]string{"env"}, vars...), "sh", "-c", testWorker)
}

// records returns the lines of dir/tasks that start with kind, split.
func records(t *testing.T, dir, kind string) [][]string {
	t.Helper()
	var out [][]string
	for _, l := range readLines(t, filepath.Join(dir, "tasks")) {
		if f := strings.Fields(l); len(f) > 0 && f[0] == kind {
			out = append(out, f[1:])
		}
	}
	return out
}

// hasRun reports whether node ran round (a "run" record).
func hasRun(t *testing.T, dir, node, round string) bool {
	return slices.ContainsFunc(records(t, dir, "run"), func(f []string) bool { return f[0] == node && f[1] == round })
}

// stopServed stops the served nodes of procs (all but the Head).
func stopServed(t *testing.T, procs []*proc) {
	for _, p := range procs[1:] {
		if p.running() {
			p.signal(t, syscall.SIGTERM)
			p.wait(t, 20*time.Second)
		}
	}
}

// TestWorkerPythonChainE2E: four nodes, each --worker running the Python
// example, 20 rounds: every worker started once (its pid the same in
// every request), every round's requests in chain order A, B, C, D, each
// carrying its round's id and an id of its own, and every node exits 0.
//
// Draft: Protocol Operation (the task order); docs/WORKERS.md.
func TestWorkerPythonChainE2E(t *testing.T) {
	py := python3(t)
	dir := t.TempDir()
	rec := filepath.Join(dir, "tasks")
	names, addrs := nodeNames(4), freeAddrs(t, 4)
	procs := make([]*proc, 4)
	for i := 3; i >= 0; i-- {
		args := append([]string{"run", "--worker", "--rounds", "20", "--quiet"}, placeArgs("chain", names, addrs, i)...)
		procs[i] = startProc(t, names[i], nil, append(args, "--", py, exampleWorker(t, "worker.py"), rec)...)
	}
	for _, p := range procs {
		if code := p.wait(t, time.Minute); code != 0 {
			t.Fatalf("%s exited %d, want 0", p.name, code)
		}
	}
	pids := map[string]string{}
	ids := map[string]map[string]bool{}
	next := map[string]int{} // round -> chain position of the next node to run it
	for _, l := range readLines(t, rec) {
		f := strings.Fields(l) // NODE ROUND PID ID
		if len(f) != 4 {
			t.Fatalf("bad record %q", l)
		}
		node, round, pid, id := f[0], f[1], f[2], f[3]
		if pids[node] == "" {
			pids[node] = pid
		} else if pids[node] != pid {
			t.Errorf("%s's worker ran round %s as pid %s, earlier rounds as pid %s: want one worker for the run", node, round, pid, pids[node])
		}
		if ids[node] == nil {
			ids[node] = map[string]bool{}
		}
		if ids[node][id] {
			t.Errorf("%s used request id %s twice", node, id)
		}
		ids[node][id] = true
		if k := slices.Index(names, node); k != next[round] {
			t.Errorf("round %s: %s's request came out of chain order", round, node)
		}
		next[round]++
	}
	for r := range 20 {
		if next[strconv.Itoa(r)] != 4 {
			t.Errorf("round %d ran at %d nodes, want 4", r, next[strconv.Itoa(r)])
		}
	}
}

// TestWorkerShellExampleE2E: the shell example worker serves a two-node
// chain's five rounds.
func TestWorkerShellExampleE2E(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "tasks")
	names, addrs := nodeNames(2), freeAddrs(t, 2)
	procs := make([]*proc, 2)
	for i := 1; i >= 0; i-- {
		args := append([]string{"run", "--worker", "--rounds", "5", "--quiet"}, placeArgs("chain", names, addrs, i)...)
		procs[i] = startProc(t, names[i], nil, append(args, "--", "sh", exampleWorker(t, "worker.sh"), rec)...)
	}
	for _, p := range procs {
		if code := p.wait(t, time.Minute); code != 0 {
			t.Fatalf("%s exited %d, want 0", p.name, code)
		}
	}
	if lines := readLines(t, rec); len(lines) != 10 {
		t.Fatalf("the shell workers recorded %d requests, want 10: %q", len(lines), lines)
	}
}

// TestWorkerCheckE2E: chainsync check --worker starts the worker, which
// answers hello; a worker that exits at once fails the check.
func TestWorkerCheckE2E(t *testing.T) {
	dir := t.TempDir()
	p := startProc(t, "check", []string{"DIR=" + dir}, append([]string{"check", "--worker", "--name", "A", "--"}, shWorker(dir)...)...)
	if code := p.wait(t, 30*time.Second); code != 0 || !strings.Contains(p.out.String(), "answered hello") {
		t.Fatalf("check --worker: exit %d, stdout %q, want 0 and the hello", code, p.out.String())
	}
	bad := startProc(t, "check", nil, "check", "--worker", "--name", "A", "--", "sh", "-c", "exit 3")
	if code := bad.wait(t, 30*time.Second); code != 1 || !strings.Contains(bad.out.String(), "exited with status 3") {
		t.Fatalf("check --worker of a worker that exits: exit %d, stdout %q, want 1 naming status 3", code, bad.out.String())
	}
}

// TestWorkerHelloGatesChainE2E: C's worker takes 2 s to answer hello; no
// request reaches any worker before C's answer (a node is locally ready
// only once its worker is up, and no task starts before every node is).
//
// Draft: Protocol Operation (all nodes ready before any task starts).
func TestWorkerHelloGatesChainE2E(t *testing.T) {
	dir := t.TempDir()
	procs := workerChain(t, dir, 4, []string{"r1", "r2", "r3"}, nil, nil, func(i int) []string {
		if i == 2 {
			return shWorker(dir, "HELLO_DELAY=2")
		}
		return shWorker(dir)
	})
	if code := procs[0].wait(t, time.Minute); code != 0 {
		t.Fatalf("Head exited %d, want 0", code)
	}
	stopServed(t, procs)
	lines := readLines(t, filepath.Join(dir, "tasks"))
	helloC := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "hello C ") })
	firstRun := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "run ") })
	if helloC < 0 || firstRun < 0 || firstRun < helloC {
		t.Fatalf("C's hello at line %d, the first request at line %d: want a request only after C's hello:\n%s", helloC, firstRun, strings.Join(lines, "\n"))
	}
}

// TestWorkerAnswersFailureE2E: C's worker answers ok:false for r3: r3
// fails at C (no request for it reaches D), with the worker's error text
// in every node's log and in every node's --on-fault hook (C's own fault,
// and at the others the fault notice, which carries the text); every
// other node logs the round failed at C; under --fault-policy wait the
// chain serves r4.
//
// Draft: Error Handling (a failed task); docs/DESIGN.md "Long-lived chains";
// docs/FAULTS.md "Fault notices".
func TestWorkerAnswersFailureE2E(t *testing.T) {
	dir := t.TempDir()
	extra := func(i int) []string {
		return []string{"--fault-policy", "wait", "--on-fault", `echo "$CHAINSYNC_NODE $CHAINSYNC_FAULT $CHAINSYNC_ERROR" >> "$DIR/hook"`}
	}
	procs := workerChain(t, dir, 4, []string{"r1", "r2", "r3", "r4"}, nil, extra, func(i int) []string {
		if i == 2 {
			return shWorker(dir, "FAIL_ROUND=r3")
		}
		return shWorker(dir)
	})
	procs[0].wait(t, time.Minute) // 4: a round failed elsewhere
	for _, p := range procs {
		p.waitLog(t, 20*time.Second, "with C's worker's error", containsAll("r3", "disk full at C"))
		p.waitLog(t, 20*time.Second, "saying r3 failed at C", containsAll("round failed", "round=r3", "node=C"))
	}
	for _, node := range []string{"A", "B", "C", "D"} {
		waitFor(t, 20*time.Second, node+"'s hook with C's worker's error", func() bool {
			return slices.ContainsFunc(readLines(t, filepath.Join(dir, "hook")), func(l string) bool {
				return strings.HasPrefix(l, node+" ") && strings.Contains(l, "disk full at C")
			})
		})
	}
	waitFor(t, 20*time.Second, "D running r4", func() bool { return hasRun(t, dir, "D", "r4") })
	stopServed(t, procs)
	if hasRun(t, dir, "D", "r3") {
		t.Errorf("D ran r3, which failed at C")
	}
}

// TestWorkerExitsMidRequestE2E: C's worker exits (status 3) holding r3's
// request: r3 fails naming the exit status, and r4 runs on a new worker
// (a new pid), started again by C.
//
// Draft: Error Handling; docs/WORKERS.md, "Faults".
func TestWorkerExitsMidRequestE2E(t *testing.T) {
	dir := t.TempDir()
	saddr := freeAddrs(t, 1)[0]
	extra := func(i int) []string {
		if i == 2 {
			return []string{"--fault-policy", "wait", "--status-addr", saddr}
		}
		return []string{"--fault-policy", "wait"}
	}
	procs := workerChain(t, dir, 4, []string{"r1", "r2", "r3", "r4"}, nil, extra, func(i int) []string {
		if i == 2 {
			return shWorker(dir, "EXIT_ROUND=r3")
		}
		return shWorker(dir)
	})
	procs[0].wait(t, time.Minute)
	procs[2].waitLog(t, 20*time.Second, "naming the worker's exit status", containsAll("r3", "worker exited with status 3"))
	procs[0].waitLog(t, 20*time.Second, "saying r3 failed at C", containsAll("round failed", "round=r3", "node=C"))
	procs[2].waitLog(t, 20*time.Second, "C starting its worker again", containsAll("worker started again"))
	waitFor(t, 20*time.Second, "D running r4", func() bool { return hasRun(t, dir, "D", "r4") })
	out, _, code := runCLI(t, "status", saddr)
	if code != 0 || !strings.Contains(out, "worker env: pid ") || !strings.Contains(out, "2 starts") || !strings.Contains(out, "worker exited with status 3") {
		t.Errorf("chainsync status of C: exit %d\n%s\nwant its worker up, started twice, the first one's exit named", code, out)
	}
	stopServed(t, procs)
	pid := map[string]string{}
	for _, f := range records(t, dir, "run") {
		if f[0] == "C" {
			pid[f[1]] = f[2]
		}
	}
	if pid["r4"] == "" || pid["r4"] == pid["r2"] {
		t.Errorf("C ran r2 as pid %q and r4 as pid %q: want r4 on a new worker", pid["r2"], pid["r4"])
	}
}

// TestWorkerNeverAnswersE2E: C's worker never answers r3 and ignores the
// cancel; with --task-timeout 2s the round fails as a task-timeout, the
// worker's process group (a child it started included) is gone, and a new
// worker takes r4.
//
// docs/WORKERS.md, "Faults" (--task-timeout).
func TestWorkerNeverAnswersE2E(t *testing.T) {
	dir := t.TempDir()
	extra := func(i int) []string {
		if i == 2 {
			return []string{"--fault-policy", "wait", "--task-timeout", "2s"}
		}
		return []string{"--fault-policy", "wait"}
	}
	procs := workerChain(t, dir, 4, []string{"r1", "r2", "r3", "r4"}, nil, extra, func(i int) []string {
		if i == 2 {
			return shWorker(dir, "HANG_ROUND=r3")
		}
		return shWorker(dir)
	})
	procs[2].waitLog(t, 30*time.Second, "a task-timeout for r3", containsAll("task-timeout", "r3"))
	waitFor(t, 30*time.Second, "D running r4", func() bool { return hasRun(t, dir, "D", "r4") })
	procs[0].wait(t, time.Minute)
	stopServed(t, procs)
	var child, hung, r4 string
	for _, f := range records(t, dir, "child") {
		child = f[1]
	}
	for _, f := range records(t, dir, "run") {
		if f[0] == "C" && f[1] == "r3" {
			hung = f[2]
		}
		if f[0] == "C" && f[1] == "r4" {
			r4 = f[2]
		}
	}
	if child == "" || hung == "" {
		t.Fatalf("C's worker did not record r3 and its child")
	}
	for _, pid := range []string{child, hung} {
		if alive(pid) {
			t.Errorf("pid %s of the timed-out worker's group is still alive", pid)
		}
	}
	if r4 == "" || r4 == hung {
		t.Errorf("r4 ran on pid %q, the timed-out worker was %s: want a new worker", r4, hung)
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && !strings.HasPrefix(string(b[i+1:]), " Z")
}

// TestWorkerNodeKilledE2E: kill -9 of a node: its worker is gone within
// 2 s (the parent-death signal, the reaper).
//
// docs/DESIGN.md, "Restarts and durable state" (a task does not outlive
// its node).
func TestWorkerNodeKilledE2E(t *testing.T) {
	dir := t.TempDir()
	names, addrs := nodeNames(2), freeAddrs(t, 2)
	args := append([]string{"run", "--worker", "--serve"}, placeArgs("chain", names, addrs, 1)...)
	b := startProc(t, "B", []string{"DIR=" + dir}, append(append(args, "--"), shWorker(dir)...)...)
	var pid string
	waitFor(t, 30*time.Second, "B's worker's hello", func() bool {
		for _, f := range records(t, dir, "hello") {
			pid = f[1]
		}
		return pid != ""
	})
	b.signal(t, syscall.SIGKILL)
	b.wait(t, 5*time.Second)
	if !poll(2*time.Second, func() bool { return !alive(pid) }) {
		t.Fatalf("B's worker (pid %s) still runs 2s after B was killed", pid)
	}
}

// reverseWorker answers the requests it holds in reverse order: once it
// holds four, or when no request came for 50 ms. It records each answer
// as "run NODE ROUND PID ID" in $DIR/tasks, before writing it.
const reverseWorker = `
import json, os, select, sys
rec = open(os.path.join(os.environ["DIR"], "tasks"), "a", buffering=1)
node, held, buf = os.environ["CHAINSYNC_NODE"], [], b""
def answer():
    for m in reversed(held):
        rec.write("run %s %s %d %d\n" % (node, m["round"], os.getpid(), m["id"]))
        os.write(1, (json.dumps({"id": m["id"], "ok": True}) + "\n").encode())
    held.clear()
while True:
    r, _, _ = select.select([0], [], [], 0.05)
    if not r:
        answer()
        continue
    chunk = os.read(0, 65536)
    if not chunk:
        break
    buf += chunk
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        m = json.loads(line)
        if m["op"] == "hello":
            os.write(1, b'{"id":0,"ok":true,"version":1}\n')
        elif m["op"] == "run":
            held.append(m)
            if len(held) == 4:
                answer()
`

// TestWorkerParallelReverseE2E: --parallel 4 on every node, each worker
// answering the requests it holds in reverse order: every round
// completes, and within each round the nodes ran in chain order.
//
// Draft: Protocol Operation; docs/WORKERS.md (--parallel).
func TestWorkerParallelReverseE2E(t *testing.T) {
	py := python3(t)
	dir := t.TempDir()
	var ids []string
	for k := range 40 {
		ids = append(ids, fmt.Sprintf("p%02d", k))
	}
	parallel := func(int) []string { return []string{"--parallel", "4"} }
	procs := workerChain(t, dir, 4, ids, nil, parallel, func(int) []string { return []string{py, "-c", reverseWorker} })
	if code := procs[0].wait(t, time.Minute); code != 0 {
		t.Fatalf("Head exited %d, want 0", code)
	}
	waitFor(t, 20*time.Second, "D running every round", func() bool {
		n := 0
		for _, f := range records(t, dir, "run") {
			if f[0] == "D" {
				n++
			}
		}
		return n == len(ids)
	})
	stopServed(t, procs)
	names := nodeNames(4)
	next := map[string]int{}
	reordered := false
	last := map[string]string{}
	for _, f := range records(t, dir, "run") {
		node, round := f[0], f[1]
		if slices.Index(names, node) != next[round] {
			t.Errorf("round %s: %s answered out of chain order", round, node)
		}
		next[round]++
		if round < last[node] {
			reordered = true
		}
		last[node] = round
	}
	for _, id := range ids {
		if next[id] != 4 {
			t.Errorf("round %s completed at %d nodes, want 4", id, next[id])
		}
	}
	t.Logf("some worker answered a later round before an earlier one: %v", reordered)
}

// TestWorkerJunkE2E: every worker writes a line that is not a response
// and a response to an id that is not outstanding before each answer:
// both are logged (escaped) and the chain goes on.
//
// docs/WORKERS.md, "Faults".
func TestWorkerJunkE2E(t *testing.T) {
	dir := t.TempDir()
	procs := workerChain(t, dir, 4, []string{"r1", "r2", "r3"}, []string{"JUNK=1"}, nil, func(int) []string { return shWorker(dir) })
	if code := procs[0].wait(t, time.Minute); code != 0 {
		t.Fatalf("Head exited %d, want 0", code)
	}
	for _, p := range procs {
		p.waitLog(t, 20*time.Second, "about the junk line", containsAll("not a response", `\x1b[31m`))
		p.waitLog(t, 20*time.Second, "about the response to id 999999", containsAll("not outstanding", "999999"))
	}
	waitFor(t, 20*time.Second, "D running r3", func() bool { return hasRun(t, dir, "D", "r3") })
	stopServed(t, procs)
}

// TestWorkerNodeRestartResumesE2E: with --state-dir, a request that the
// node's death interrupted is a task interrupted by it: B is killed (-9)
// while its worker holds r1's request; started again with --resume-task
// rerun, B sends r1's request to its new worker, and the Head's rounds
// complete.
//
// docs/DESIGN.md, "Restarts and durable state"; docs/WORKERS.md, "Faults".
func TestWorkerNodeRestartResumesE2E(t *testing.T) {
	dir := t.TempDir()
	names, addrs := nodeNames(2), freeAddrs(t, 2)
	state := filepath.Join(dir, "stateB")
	startB := func(vars ...string) *proc {
		args := append([]string{"run", "--worker", "--serve", "--state-dir", state, "--resume-task", "rerun"}, placeArgs("chain", names, addrs, 1)...)
		return startProc(t, "B", []string{"DIR=" + dir}, append(append(args, "--"), shWorker(dir, vars...)...)...)
	}
	b := startB("HANG_ROUND=r1")
	if err := os.WriteFile(filepath.Join(dir, "ids"), []byte("r1\nr2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--worker", "--rounds-from", filepath.Join(dir, "ids")}, placeArgs("chain", names, addrs, 0)...)
	head := startProc(t, "A", []string{"DIR=" + dir}, append(append(args, "--"), shWorker(dir)...)...)
	waitFor(t, 30*time.Second, "B's worker holding r1", func() bool { return hasRun(t, dir, "B", "r1") })
	b.signal(t, syscall.SIGKILL)
	b.wait(t, 5*time.Second)
	b = startB()
	if code := head.wait(t, time.Minute); code != 0 {
		t.Fatalf("Head exited %d, want 0", code)
	}
	var pids []string
	for _, f := range records(t, dir, "run") {
		if f[0] == "B" && f[1] == "r1" {
			pids = append(pids, f[2])
		}
	}
	if len(pids) != 2 || pids[0] == pids[1] {
		t.Fatalf("B's workers took r1 as pids %v: want the interrupted request sent again to the new worker", pids)
	}
	b.signal(t, syscall.SIGTERM)
	b.wait(t, 20*time.Second)
}

// TestWorkerCannotStartE2E: a worker that refuses hello, or does not
// answer it within --task-timeout, cannot start: the node says why and
// exits 1, and the worker (its group) is gone.
//
// docs/WORKERS.md, "The protocol, version 1" (hello).
func TestWorkerCannotStartE2E(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, script, want string
	}{
		{"refuses", `read -r line; echo '{"id":0,"ok":false,"error":"no GPU here"}'; cat >/dev/null`, "no GPU here"},
		{"silent", `echo $$ > "$DIR/silent.pid"; exec sleep 100`, "did not answer hello within 1s"},
	} {
		p := startProc(t, c.name, []string{"DIR=" + dir}, "run", "--worker", "--task-timeout", "1s", "--", "sh", "-c", c.script)
		if code := p.wait(t, 30*time.Second); code != 1 {
			t.Fatalf("%s: exit %d, want 1", c.name, code)
		}
		p.waitLog(t, time.Second, "saying why", containsAll("cannot start", c.want))
	}
	pid, err := os.ReadFile(filepath.Join(dir, "silent.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if alive(strings.TrimSpace(string(pid))) {
		t.Errorf("the silent worker (pid %s) outlived its node", pid)
	}
}
