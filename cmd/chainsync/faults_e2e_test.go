//go:build unix

package main

// End-to-end tests of fault handling with the built binary: the draft's
// three applications in "Error Handling" (the switch stack, the data
// pipeline with a hung node, the cross-organisation process handled by
// people), plus no false alarms across a partition that heals. The
// multi-host ones run one node per Linux network namespace (root only;
// skipped clearly elsewhere), the people one on loopback.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// newNetnsLine builds a chain of hosts, one namespace per name, each joined
// to the next by its own veth link and subnet (link i: 10.78.i+1.0/24,
// node i is .1, node i+1 is .2); nobody routes, so each node reaches only
// its neighbours. It returns the topology and the --chain string (each
// node's address is the one its predecessor dials). Skips where
// namespaces cannot be made; removes everything at cleanup.
func newNetnsLine(t *testing.T, names ...string) (*netnsTopo, string) {
	t.Helper()
	tp := newNamespaces(t, names, nil)
	for _, node := range names {
		tp.mustIP(t, node, "link", "set", "lo", "up")
	}
	var chain []string
	for i, node := range names {
		addr := fmt.Sprintf("10.78.%d.2", i)
		if i == 0 {
			addr = "10.78.1.1"
		}
		chain = append(chain, node+"="+addr+":7000")
		if i == len(names)-1 {
			break
		}
		next := names[i+1]
		a, b := netnsDev(i, "a"), netnsDev(i, "b")
		if _, err := tp.runIP("-n", tp.ns[node], "link", "add", a, "type", "veth", "peer", "name", b, "netns", tp.ns[next]); err != nil {
			t.Skipf("cannot create a veth pair here: %v", err)
		}
		tp.mustIP(t, node, "addr", "add", fmt.Sprintf("10.78.%d.1/24", i+1), "dev", a)
		tp.mustIP(t, next, "addr", "add", fmt.Sprintf("10.78.%d.2/24", i+1), "dev", b)
		tp.mustIP(t, node, "link", "set", a, "up")
		tp.mustIP(t, next, "link", "set", b, "up")
	}
	return tp, strings.Join(chain, ",")
}

// netnsDev names link i's device on the predecessor's ("a") or the
// successor's ("b") end.
func netnsDev(i int, end string) string { return fmt.Sprintf("l%d%s", i, end) }

// startGroup runs path args in a process group of its own (a supervisor
// loop and the chainsync processes it starts); at cleanup the whole group
// is killed if it still runs.
func startGroup(t *testing.T, name string, env []string, label, path string, args ...string) *proc {
	t.Helper()
	return launch(t, name, env, label, true, path, args...)
}

// faultHook is an --on-fault command that appends one line per fault to
// $DIR/$CHAINSYNC_NODE.faults: kind, blamed peer, side, round, node, and
// the time in Unix nanoseconds.
const faultHook = `echo "$CHAINSYNC_FAULT peer=$CHAINSYNC_PEER side=$CHAINSYNC_SIDE round=$CHAINSYNC_ROUND node=$CHAINSYNC_NODE $(date +%s%N)" >> "$DIR/$CHAINSYNC_NODE.faults"`

// hookFault is one line written by faultHook.
type hookFault struct {
	kind, peer, side, node string
	at                     time.Time
}

// readFaults returns the faults node's hook recorded in dir.
func readFaults(t *testing.T, dir, node string) []hookFault {
	t.Helper()
	var out []hookFault
	for _, l := range readLines(t, filepath.Join(dir, node+".faults")) {
		f := strings.Fields(l)
		if len(f) != 6 {
			t.Fatalf("%s's hook wrote %q, want 6 fields", node, l)
		}
		ns, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, hookFault{kind: f[0], peer: strings.TrimPrefix(f[1], "peer="), side: strings.TrimPrefix(f[2], "side="),
			node: strings.TrimPrefix(f[4], "node="), at: time.Unix(0, ns)})
	}
	return out
}

// ownFaults keeps the faults a node found itself: not the chain-halted
// and chain-fault reports of a neighbour's notice (docs/DESIGN.md,
// "Extension lines"), which blame nobody on this node's behalf.
func ownFaults(fs []hookFault) []hookFault {
	var out []hookFault
	for _, f := range fs {
		if f.kind != "chain-halted" && f.kind != "chain-fault" {
			out = append(out, f)
		}
	}
	return out
}

// waitFaults waits up to d for node's hook to have recorded n faults.
func waitFaults(t *testing.T, dir, node string, n int, d time.Duration) []hookFault {
	t.Helper()
	var f []hookFault
	waitFor(t, d, fmt.Sprintf("%d run(s) of %s's --on-fault hook", n, node), func() bool {
		f = readFaults(t, dir, node)
		return len(f) >= n
	})
	return f
}

// traceFaultAt returns when node's --trace file in dir recorded its first
// fault: the moment the node detected it, without the hook's start-up.
func traceFaultAt(t *testing.T, dir, node string, within time.Duration) time.Time {
	t.Helper()
	var at time.Time
	waitFor(t, within, "fault record in "+node+"'s trace", func() bool {
		for _, l := range readLines(t, filepath.Join(dir, node+".jsonl")) {
			var r struct{ Time, Kind string }
			if json.Unmarshal([]byte(l), &r) == nil && r.Kind == "fault" {
				var err error
				if at, err = time.Parse(time.RFC3339Nano, r.Time); err != nil {
					t.Fatalf("%s's trace: %q: %v", node, l, err)
				}
				return true
			}
		}
		return false
	})
	return at
}

// switchSupervisor is the draft's switch: a loop that runs the node and,
// when the node dies of SIGKILL (the switch rebooted into its new
// firmware), starts it again, unless the switch is dead ($NODE.dead: the
// hardware never comes back). A rebooted switch is healthy
// ($NODE.booted) half a second after its node is back.
const switchSupervisor = `
date +%s%N > "$DIR/$NODE.booted"
while :; do
  "$BIN" run --chain "$CHAIN" --name "$NODE" --state-dir "$DIR/$NODE.state" --resume-task done \
    --verify-cmd 'test -e "$DIR/$CHAINSYNC_NODE.booted"' --ready-interval 100ms \
    --connect-timeout 3s --on-fault "$HOOK" -- sh -c "$TASK"
  code=$?
  echo $code >> "$DIR/$NODE.exits"
  [ $code = 137 ] || exit $code
  [ -e "$DIR/$NODE.dead" ] && exit $code
  (sleep 0.5; date +%s%N > "$DIR/$NODE.booted") &
  sleep 0.2
done`

// switchUpgrade is each switch's task: record the upgrade, go down (not
// healthy), and reboot: SIGKILL the node, which is this task's parent. A
// switch marked $NODE.fail is dead after this reboot.
const switchUpgrade = `date +%s%N >> "$DIR/$CHAINSYNC_NODE.start"
rm -f "$DIR/$CHAINSYNC_NODE.booted"
if [ -e "$DIR/$CHAINSYNC_NODE.fail" ]; then touch "$DIR/$CHAINSYNC_NODE.dead"; fi
kill -KILL $PPID
sleep 30`

// startSwitches starts switches 1-4 (nodes A-D, D first), each under its
// supervisor in its own namespace.
func startSwitches(t *testing.T, tp *netnsTopo, chain, dir string) map[string]*proc {
	t.Helper()
	procs := map[string]*proc{}
	for _, node := range []string{"D", "C", "B", "A"} {
		env := []string{"BIN=" + bin, "CHAIN=" + chain, "NODE=" + node, "DIR=" + dir, "HOOK=" + faultHook, "TASK=" + switchUpgrade}
		procs[node] = startGroup(t, node, env, "switch supervisor in "+tp.ns[node], tp.ip, "netns", "exec", tp.ns[node], "sh", "-c", switchSupervisor)
	}
	return procs
}

// TestNetnsSwitchStackRollout is the draft's switch stack ("Error
// Handling": switches restarted "in a particular order ... 1, 2, 3, then
// 4"), on four hosts. Each switch's task reboots its own node (SIGKILL to
// its parent); a supervisor starts the node again; the node resumes from
// --state-dir, takes the interrupted task as done (--resume-task done),
// and sends COMPLETE on only once --verify-cmd says the switch is healthy.
// The rollout completes, every switch is upgraded exactly once, in order,
// each after the one before it was back and healthy, and the short link
// outages of the reboots trip no --connect-timeout.
func TestNetnsSwitchStackRollout(t *testing.T) {
	t.Parallel()
	tp, chain := newNetnsLine(t, "A", "B", "C", "D")
	dir := t.TempDir()
	start := time.Now()
	procs := startSwitches(t, tp, chain, dir)
	for _, n := range []string{"A", "B", "C", "D"} {
		if code := procs[n].wait(t, 60*time.Second); code != 0 {
			t.Errorf("switch %s's supervisor exited %d, want 0", n, code)
		}
	}
	t.Logf("rollout over four switches, each rebooted by its own task, done in %v", time.Since(start).Round(time.Millisecond))
	prev, prevBooted := "", int64(0)
	for _, n := range []string{"A", "B", "C", "D"} {
		st := nanos(t, filepath.Join(dir, n+".start"))
		if len(st) != 1 {
			t.Fatalf("switch %s upgraded %d times, want once", n, len(st))
		}
		if got := readLines(t, filepath.Join(dir, n+".exits")); !slices.Equal(got, []string{"137", "0"}) {
			t.Errorf("switch %s's node exits %v, want [137 0] (killed by its upgrade, then done)", n, got)
		}
		if prev != "" && st[0] < prevBooted {
			t.Errorf("switch %s began its upgrade %v before switch %s was healthy again", n, time.Duration(prevBooted-st[0]), prev)
		}
		booted := nanos(t, filepath.Join(dir, n+".booted"))
		if len(booted) != 1 || booted[0] < st[0] {
			t.Fatalf("switch %s: healthy at %v, after its upgrade at %v?", n, booted, st[0])
		}
		prev, prevBooted = n, booted[0]
		for _, want := range []string{"taking it as done (--resume-task done)", "verified: --verify-cmd succeeded"} {
			if !strings.Contains(procs[n].err.String(), want) {
				t.Errorf("switch %s's restarted node did not log %q", n, want)
			}
		}
		if f := readFaults(t, dir, n); len(f) != 0 {
			t.Errorf("switch %s reported faults: %+v", n, f)
		}
	}
}

// TestNetnsSwitchNeverComesBackConnectTimeout is the draft's failure: switch
// 2 (B) "experiences a hardware failure and never comes back online", and
// "the preference ... is likely that the upgrade halts so that no more
// switches are lost". Switch 3 (C), with --connect-timeout 3s, reports
// peer-unreachable blaming switch 2 about 3 s after it went away, its
// --on-fault hook runs (the draft's SNMP trap), and it exits 4; switches 3
// and 4 never run their upgrades. Switch 1 reports switch 2 too, and
// switch 4, once switch 3 has halted, reports switch 3: every node ends,
// non-zero.
func TestNetnsSwitchNeverComesBackConnectTimeout(t *testing.T) {
	t.Parallel()
	tp, chain := newNetnsLine(t, "A", "B", "C", "D")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "B.fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	procs := startSwitches(t, tp, chain, dir)
	if code := procs["B"].wait(t, 30*time.Second); code != 137 {
		t.Fatalf("switch B's supervisor exited %d, want 137 (its node killed by the upgrade, never restarted)", code)
	}
	gone := time.Unix(0, nanos(t, filepath.Join(dir, "B.start"))[0])
	want := map[string]struct {
		peer, side string
	}{"A": {"B", "succ"}, "C": {"B", "pred"}, "D": {"C", "pred"}}
	for _, n := range []string{"C", "A", "D"} {
		if code := procs[n].wait(t, 20*time.Second); code != 4 {
			t.Errorf("switch %s exited %d, want 4 (fault)", n, code)
		}
		f := readFaults(t, dir, n)
		if len(f) != 1 || f[0].kind != "peer-unreachable" || f[0].peer != want[n].peer || f[0].side != want[n].side || f[0].node != n {
			t.Errorf("switch %s's hook saw %+v, want one peer-unreachable fault blaming %s (%s)", n, f, want[n].peer, want[n].side)
			continue
		}
		t.Logf("switch %s: peer-unreachable blaming %s, %v after switch B went down", n, f[0].peer, f[0].at.Sub(gone).Round(time.Millisecond))
	}
	if f := readFaults(t, dir, "C"); len(f) == 1 {
		if took := f[0].at.Sub(gone); took < 3*time.Second || took > 6*time.Second {
			t.Errorf("switch C reported switch B %v after it went down, want about --connect-timeout 3s", took)
		}
	}
	for _, n := range []string{"C", "D"} {
		if exists(filepath.Join(dir, n+".start")) {
			t.Errorf("switch %s was upgraded although switch B never came back", n)
		}
	}
	if !strings.Contains(procs["C"].err.String(), "peer-unreachable") {
		t.Errorf("switch C's log has no peer-unreachable fault line")
	}
}

// hungChain starts A, B, C, D in namespaces with heartbeats of 500ms, the
// fault hook, --connect-timeout 2s and the given policy; B's task runs 2 s.
func hungChain(t *testing.T, policy string) (map[string]*proc, string, *netnsTopo) {
	t.Helper()
	tp, chain := newNetnsLine(t, "A", "B", "C", "D")
	dir := t.TempDir()
	procs := map[string]*proc{}
	for _, node := range []string{"D", "C", "B", "A"} {
		task := netnsTask("")
		if node == "B" {
			task = netnsTask("sleep 2")
		}
		args := append([]string{"run", "--chain", chain, "--name", node, "--heartbeat", "500ms",
			"--fault-policy", policy, "--connect-timeout", "2s", "--on-fault", faultHook,
			"--trace", filepath.Join(dir, node+".jsonl"), "--"}, task...)
		procs[node] = tp.start(t, node, []string{"DIR=" + dir}, args...)
		procs[node].waitLog(t, 10*time.Second, "node started", containsAll("node started"))
	}
	return procs, dir, tp
}

// TestNetnsHungNode is the draft's data pipeline ("If a node in the chain
// hangs during processing, its successor should not detect a heartbeat
// and thus know there is a fault"): B's chainsync process is stopped with
// SIGSTOP during its task, so its connections stay up and say nothing.
// With --heartbeat 500ms everywhere, A and C report peer-silent blaming B
// within 2 s, and nobody else reports anything about B.
//   - halt: A and C exit 4; D learns of it from C's fault notice (it
//     reports chain-halted blaming B, not its healthy predecessor C) and
//     exits 4; B, continued once its neighbours are gone, exits non-zero
//     too: every node ends, within a bounded time.
//   - wait ("the progress in processing could be preserved and only the
//     faulty node needs to be reset"): A and C keep waiting; SIGCONT lets
//     the chain complete with each task run once, in order, and B, waking
//     up, blames nobody.
func TestNetnsHungNode(t *testing.T) {
	// Not parallel: it measures detection times, which a machine busy
	// with the parallel tests would stretch.
	for _, policy := range []string{"halt", "wait"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			procs, dir, _ := hungChain(t, policy)
			waitFile(t, filepath.Join(dir, "B.start"), 15*time.Second)
			procs["B"].waitLog(t, 5*time.Second, "task started", containsAll("task started")) // stopped inside its task
			procs["B"].signal(t, syscall.SIGSTOP)
			stopped := time.Now()
			cont := false
			t.Cleanup(func() {
				if !cont {
					_ = procs["B"].cmd.Process.Signal(syscall.SIGCONT)
				}
			})
			for _, n := range []struct{ node, side string }{{"A", "succ"}, {"C", "pred"}} {
				f := waitFaults(t, dir, n.node, 1, 10*time.Second)
				took := traceFaultAt(t, dir, n.node, 5*time.Second).Sub(stopped)
				t.Logf("%s: %s blaming %s (%s) %v after B was stopped (hook ran %v after)", n.node, f[0].kind, f[0].peer, f[0].side,
					took.Round(time.Millisecond), f[0].at.Sub(stopped).Round(time.Millisecond))
				if f[0].kind != "peer-silent" || f[0].peer != "B" || f[0].side != n.side {
					t.Errorf("%s's first fault %+v, want peer-silent blaming B (%s)", n.node, f[0], n.side)
				}
				if took > 2*time.Second {
					t.Errorf("%s took %v to report B silent, want within 2 s (3 x 500ms + 250ms)", n.node, took)
				}
			}
			for _, n := range []string{"A", "C"} {
				if !strings.Contains(procs[n].err.String(), "peer-silent") {
					t.Errorf("%s's log has no peer-silent fault line", n)
				}
			}
			if policy == "halt" {
				for _, n := range []string{"A", "C"} {
					if code := procs[n].wait(t, 10*time.Second); code != 4 {
						t.Errorf("%s exited %d, want 4", n, code)
					}
				}
				if code := procs["D"].wait(t, 15*time.Second); code != 4 {
					t.Errorf("D exited %d, want 4", code)
				}
				if f := readFaults(t, dir, "D"); len(f) != 1 || f[0].kind != "chain-halted" || f[0].peer != "B" {
					t.Errorf("D's faults %+v, want one chain-halted blaming B (C's notice)", f)
				}
				procs["B"].signal(t, syscall.SIGCONT)
				cont = true
				if code := procs["B"].wait(t, 15*time.Second); code == 0 {
					t.Errorf("B exited 0 after its neighbours halted, want non-zero")
				}
				var bf []string
				for _, f := range readFaults(t, dir, "B") {
					bf = append(bf, f.kind+" blaming "+f.peer)
				}
				t.Logf("halt: every node ended %v after B was stopped; B, continued, reported %v", time.Since(stopped).Round(time.Millisecond), bf)
				if exists(filepath.Join(dir, "C.start")) || exists(filepath.Join(dir, "D.start")) {
					t.Errorf("a task after B's ran although the chain halted")
				}
				return
			}
			// wait: A and C report and keep waiting; the round is kept.
			// Each logs that its policy kept the round at the point
			// where halt would have ended it, and so does D on C's
			// notice: only then can "still running" mean anything.
			for _, n := range []string{"A", "C"} {
				procs[n].waitLog(t, 5*time.Second, "keeping the rounds", containsAll("fault policy wait: keeping every round"))
			}
			procs["D"].waitLog(t, 5*time.Second, "keeping the round on C's notice", containsAll("fault elsewhere in the chain", "fault policy wait: keeping the round"))
			for _, n := range []string{"A", "C", "D"} {
				if !procs[n].running() {
					t.Fatalf("%s exited (%d) under --fault-policy wait", n, procs[n].code)
				}
			}
			procs["B"].signal(t, syscall.SIGCONT)
			cont = true
			for _, n := range []string{"A", "B", "C", "D"} {
				if code := procs[n].wait(t, 20*time.Second); code != 0 {
					t.Errorf("%s exited %d after B continued, want 0", n, code)
				}
			}
			checkRanInOrder(t, dir, "A", "B", "C", "D")
			for n, want := range map[string]int{"A": 1, "B": 0, "C": 1, "D": 0} {
				if f := ownFaults(readFaults(t, dir, n)); len(f) != want {
					t.Errorf("%s reported %d faults, want %d: %+v", n, len(f), want, f)
				}
			}
			// D learnt of it from C's notice, and blamed nobody but B.
			for _, f := range readFaults(t, dir, "D") {
				if f.kind != "chain-fault" || f.peer != "B" {
					t.Errorf("D reported %+v, want only chain-fault notices blaming B", f)
				}
			}
			if len(readFaults(t, dir, "D")) == 0 {
				t.Error("D never learnt of B's silence")
			}
		})
	}
}

// TestNetnsNoFalseAlarms: heartbeats must not cry wolf. Three hosts, all
// with --heartbeat 1500ms (at least 1.5 times the longest outage to ride
// out: docs/FAULTS.md) and the default halt policy, tasks of random
// length up to 5 s (far longer than 3 intervals), and a 1 s partition of a
// random link at a random moment (a veth end down, then up: no FIN, no
// RST). The round completes, every node exits 0, and no hook ran. (Up to
// about 17 s: the issue asks for tasks of up to 5 s.)
func TestNetnsNoFalseAlarms(t *testing.T) {
	t.Parallel()
	rng := newRand(t)
	tp := newNetnsTopo(t)
	dir := t.TempDir()
	tasks := map[string][]string{}
	for _, n := range []string{"A", "B", "C"} {
		tasks[n] = netnsTask(fmt.Sprintf("sleep %.2f", rng.Float64()*5))
	}
	flags := []string{"--heartbeat", "1500ms", "--on-fault", faultHook}
	cut := [][2]string{{"A", "ab"}, {"B", "ba"}, {"B", "bc"}, {"C", "cb"}}[rng.IntN(4)]
	after := time.Duration(rng.Int64N(int64(3 * time.Second)))
	start := time.Now()
	procs := tp.startChain(t, dir, map[string][]string{"A": flags, "B": flags, "C": flags}, tasks)
	waitFile(t, filepath.Join(dir, "A.start"), 10*time.Second)
	// The partition's random moment and its length are the test's
	// subject: heartbeats must ride out an outage this long.
	time.Sleep(after)
	tp.mustIP(t, cut[0], "link", "set", cut[1], "down")
	time.Sleep(time.Second)
	tp.mustIP(t, cut[0], "link", "set", cut[1], "up")
	t.Logf("tasks %v; %s's %s down for 1 s, %v after A's task began", tasks, cut[0], cut[1], after.Round(time.Millisecond))
	for _, n := range []string{"A", "B", "C"} {
		if code := procs[n].wait(t, 40*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", n, code)
		}
	}
	t.Logf("round done in %v", time.Since(start).Round(time.Millisecond))
	checkRanInOrder(t, dir, "A", "B", "C")
	for _, n := range []string{"A", "B", "C"} {
		if f := readFaults(t, dir, n); len(f) != 0 {
			t.Errorf("%s reported faults: %+v", n, f)
		}
	}
}

// heldAt reports whether chainsync status's verdict line for a round
// names node as the one holding it up.
func heldAt(out, node string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "round ") && (strings.Contains(l, ": stuck at "+node+" ") || strings.Contains(l, ": held up at "+node+" ")) {
			return true
		}
	}
	return false
}

// TestFaultsPeopleStatusE2E is the draft's cross-organisation process
// ("the preference is to engage people to handle faults"): companies C,
// D, E and F, each node --quiet with heartbeats, --fault-policy wait and a
// status endpoint. First E has not approved (its --ready-file is
// missing): chainsync status names E and that it is not locally ready.
// Once approved, E's node hangs (SIGSTOP) in its task: D and F print the
// fault although --quiet, their hooks "phone" (run), chainsync status
// names E as where the round is held and that it does not answer, and
// D's JSON document has the fields people and tools read. When E is
// continued the process completes.
func TestFaultsPeopleStatusE2E(t *testing.T) {
	// Not parallel: it measures detection times, which a machine busy
	// with the parallel tests would stretch.
	dir := t.TempDir()
	names := []string{"C", "D", "E", "F"}
	addrs := freeAddrs(t, 8)
	chain := chainOf(names, addrs)
	saddrs := addrs[4:]
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		task := fmt.Sprintf(`date +%%s%%N >> "$DIR/%s.start"`, n)
		if n == "E" {
			task += "; sleep 3"
		}
		procs[n] = startProc(t, n, []string{"DIR=" + dir}, "run", "--chain", chain, "--name", n,
			"--quiet", "--heartbeat", "300ms", "--fault-policy", "wait", "--on-fault", faultHook,
			"--status-addr", saddrs[i], "--ready-file", filepath.Join(dir, n+".approved"), "--ready-interval", "50ms",
			"--", "sh", "-c", task)
	}
	for _, n := range []string{"C", "D", "F"} {
		if err := os.WriteFile(filepath.Join(dir, n+".approved"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	all := strings.Join(saddrs, ",")
	// Stuck on a person: E has not approved.
	var out string
	if !poll(15*time.Second, func() bool {
		o, _, code := runCLI(t, "status", all)
		out = o
		return code == 0 && heldAt(o, "E") && strings.Contains(o, "not locally ready")
	}) {
		t.Fatalf("chainsync status never said the round is held up at E, not locally ready:\n%s", out)
	}
	t.Logf("before E approves:\n%s", out)

	if err := os.WriteFile(filepath.Join(dir, "E.approved"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "E.start"), 15*time.Second)
	procs["E"].signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	cont := false
	t.Cleanup(func() {
		if !cont {
			_ = procs["E"].cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	for _, n := range []struct{ node, side string }{{"D", "succ"}, {"F", "pred"}} {
		f := waitFaults(t, dir, n.node, 1, 10*time.Second)
		if f[0].kind != "peer-silent" || f[0].peer != "E" || f[0].side != n.side {
			t.Errorf("%s's hook saw %+v, want peer-silent blaming E", n.node, f[0])
		}
		t.Logf("%s phoned about E %v after E hung (--heartbeat 300ms)", n.node, f[0].at.Sub(stopped).Round(time.Millisecond))
		line := procs[n.node].waitLog(t, 5*time.Second, "the fault at ERROR despite --quiet", containsAll("ERROR", "peer-silent", "E"))
		t.Logf("%s printed: %s", n.node, line)
	}
	out, stderr, code := runCLI(t, "status", "--timeout", "1s", all)
	if code != 1 || !heldAt(out, "E") || !strings.Contains(out, "does not answer") || !strings.Contains(stderr, saddrs[2]) {
		t.Errorf("chainsync status while E hangs: exit %d, want 1 and the round held up at E, which does not answer\n%s%s", code, out, stderr)
	}
	t.Logf("while E hangs:\n%s", out)

	out, _, code = runCLI(t, "status", "--json", saddrs[1])
	var doc struct {
		Name  string
		Role  string
		Links map[string]struct {
			Up   *bool
			Peer *string
		}
		Rounds []struct {
			Round      *string
			State      string
			WaitingFor string `json:"waiting_for"`
			From       string
			Since      time.Time
		}
		Faults []struct {
			Kind, Peer string
			Round      *string
			Time       time.Time
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 {
		t.Fatalf("status --json of D: exit %d, %v\n%s", code, err, out)
	}
	if doc.Name != "D" || doc.Role != "middle" {
		t.Errorf("name %q role %q, want D middle", doc.Name, doc.Role)
	}
	for _, side := range []string{"pred", "succ"} {
		l, ok := doc.Links[side]
		if !ok || l.Up == nil || l.Peer == nil {
			t.Errorf("links.%s missing or without up/peer: %s", side, out)
		}
	}
	if s := doc.Links["succ"]; s.Peer != nil && *s.Peer != "E" {
		t.Errorf("links.succ.peer %q, want E", *s.Peer)
	}
	if len(doc.Rounds) != 1 || doc.Rounds[0].Round == nil || doc.Rounds[0].State != "COMPLETE" ||
		doc.Rounds[0].WaitingFor != "COMPLETE" || doc.Rounds[0].From != "succ" || doc.Rounds[0].Since.IsZero() {
		t.Errorf("rounds: %+v, want the unnamed round in COMPLETE waiting for COMPLETE from succ, with since", doc.Rounds)
	}
	if len(doc.Faults) != 1 || doc.Faults[0].Kind != "peer-silent" || doc.Faults[0].Peer != "E" || doc.Faults[0].Round == nil || doc.Faults[0].Time.IsZero() {
		t.Errorf("faults: %+v, want one peer-silent fault blaming E, with round and time", doc.Faults)
	}

	procs["E"].signal(t, syscall.SIGCONT)
	cont = true
	for _, n := range names {
		if code := procs[n].wait(t, 20*time.Second); code != 0 {
			t.Errorf("%s exited %d after E continued, want 0", n, code)
		}
	}
	for _, n := range names {
		if got := len(readLines(t, filepath.Join(dir, n+".start"))); got != 1 {
			t.Errorf("%s's task ran %d times, want once", n, got)
		}
	}
	if f := ownFaults(readFaults(t, dir, "E")); len(f) != 0 {
		t.Errorf("E, waking up, blamed a healthy neighbour: %+v", f)
	}
}

// loopbackChain starts nodes (in reverse order) on loopback with --chain,
// the fault hook and flags ("{node}" in a flag becomes the node's name),
// each running sh -c task(name), and returns them by name.
func loopbackChain(t *testing.T, dir string, names []string, flags []string, task func(name string) string) map[string]*proc {
	t.Helper()
	addrs := freeAddrs(t, len(names))
	chain := chainOf(names, addrs)
	procs := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		args := []string{"run", "--chain", chain, "--name", n, "--on-fault", faultHook}
		for _, f := range flags {
			args = append(args, strings.ReplaceAll(f, "{node}", n))
		}
		args = append(args, "--", "sh", "-c", task(n))
		procs[n] = startProc(t, n, []string{"DIR=" + dir}, args...)
	}
	return procs
}

// --task-timeout (issue 9, "Timeouts that blame the right node"): A's task
// runs past 1 s. Its whole process group gets SIGTERM (a child in the
// group records it); the task's main process ignores SIGTERM, so the group
// gets SIGKILL 5 s later. A exits 3 with a task-timeout fault that blames
// nobody else; B never runs its task and, its predecessor gone, reports A
// unreachable (--connect-timeout 2s) and exits 4.
func TestTaskTimeoutStopsGroupE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	procs := loopbackChain(t, dir, []string{"A", "B"}, []string{"--task-timeout", "1s", "--connect-timeout", "2s"}, func(n string) string {
		if n == "B" {
			return `date +%s%N >> "$DIR/B.start"`
		}
		return `date +%s%N >> "$DIR/A.start"
(trap 'echo TERM > "$DIR/child.term"; exit 0' TERM; while :; do sleep 0.05; done) &
trap '' TERM
sleep 60`
	})
	if code := procs["A"].wait(t, 20*time.Second); code != 3 {
		t.Fatalf("A exited %d, want 3 (task failed: timeout)", code)
	}
	// 1s, then the 5s grace, both on the node's own clock: from its "task
	// started" line to the fault it logs once the group is gone (the task's
	// own clock reading lags the start by however long sh takes to start).
	started := logTime(t, procs["A"], "task started")
	ended := logTime(t, procs["A"], "ran past the task timeout")
	took := ended.Sub(started)
	if took < 0 {
		took += 24 * time.Hour // the test ran across midnight
	}
	t.Logf("A reported the task-timeout fault %v after its task started (--task-timeout 1s, then SIGTERM, SIGKILL 5s later)", took.Round(time.Millisecond))
	if took < 5990*time.Millisecond {
		t.Errorf("A's task ended %v after it started: the task ignoring SIGTERM was not given the 5s grace", took)
	}
	if got := readLines(t, filepath.Join(dir, "child.term")); !slices.Equal(got, []string{"TERM"}) {
		t.Errorf("the task's child got %q, want SIGTERM (the whole group is signalled)", got)
	}
	if f := readFaults(t, dir, "A"); len(f) != 1 || f[0].kind != "task-timeout" || f[0].peer != "" || f[0].side != "" {
		t.Errorf("A's hook saw %+v, want one task-timeout fault blaming nobody", f)
	}
	if code := procs["B"].wait(t, 15*time.Second); code != 4 {
		t.Errorf("B exited %d, want 4", code)
	}
	if f := readFaults(t, dir, "B"); len(f) != 1 || f[0].kind != "peer-unreachable" || f[0].peer != "A" {
		t.Errorf("B's hook saw %+v, want one peer-unreachable fault blaming A", f)
	}
	if exists(filepath.Join(dir, "B.start")) {
		t.Errorf("B's task ran after A's timed out")
	}
}

// --verify-cmd is the health gate and --task-timeout bounds it: A's task
// succeeds but A never becomes healthy, so A exits 3 (task-timeout) and B
// never runs; B's own task, healthy at the third check, goes on normally
// in the second subtest.
func TestVerifyCmdE2E(t *testing.T) {
	t.Parallel()
	t.Run("never-healthy", func(t *testing.T) {
		dir := t.TempDir()
		procs := loopbackChain(t, dir, []string{"A", "B"}, []string{"--task-timeout", "1s", "--verify-cmd", "false",
			"--ready-interval", "100ms", "--connect-timeout", "1s"}, func(n string) string {
			return fmt.Sprintf(`date +%%s%%N >> "$DIR/%s.start"`, n)
		})
		if code := procs["A"].wait(t, 15*time.Second); code != 3 {
			t.Fatalf("A exited %d, want 3", code)
		}
		if f := readFaults(t, dir, "A"); len(f) != 1 || f[0].kind != "task-timeout" {
			t.Errorf("A's hook saw %+v, want one task-timeout fault", f)
		}
		if !strings.Contains(procs["A"].err.String(), "--verify-cmd never succeeded") {
			t.Errorf("A's log does not say --verify-cmd never succeeded")
		}
		procs["B"].wait(t, 15*time.Second)
		if exists(filepath.Join(dir, "B.start")) {
			t.Errorf("B's task ran although A never became healthy")
		}
	})
	t.Run("healthy-later", func(t *testing.T) {
		dir := t.TempDir()
		// Healthy at the third check: each check counts itself.
		verify := `echo x >> "$DIR/$CHAINSYNC_NODE.checks"; [ $(wc -l < "$DIR/$CHAINSYNC_NODE.checks") -ge 3 ] && date +%s%N > "$DIR/$CHAINSYNC_NODE.healthy"`
		procs := loopbackChain(t, dir, []string{"A", "B", "C"}, []string{"--verify-cmd", verify, "--ready-interval", "100ms"}, func(n string) string {
			return fmt.Sprintf(`date +%%s%%N >> "$DIR/%s.start"`, n)
		})
		for _, n := range []string{"A", "B", "C"} {
			if code := procs[n].wait(t, 20*time.Second); code != 0 {
				t.Errorf("%s exited %d, want 0", n, code)
			}
		}
		for i, n := range []string{"A", "B"} {
			next := []string{"B", "C"}[i]
			healthy := nanos(t, filepath.Join(dir, n+".healthy"))
			st := nanos(t, filepath.Join(dir, next+".start"))
			if len(healthy) != 1 || len(st) != 1 || st[0] < healthy[0] {
				t.Errorf("%s started at %v, before %s was healthy at %v", next, st, n, healthy)
			}
			if got := len(readLines(t, filepath.Join(dir, n+".checks"))); got != 3 {
				t.Errorf("%s's --verify-cmd ran %d times, want 3", n, got)
			}
		}
	})
}

// The data pipeline on loopback (no root needed): B's node is stopped
// with SIGSTOP in its task; with --heartbeat 500ms A and C report it
// within 2 s and, with halt, exit 4.
func TestHungNodeLoopbackE2E(t *testing.T) {
	// Not parallel: it measures detection times, which a machine busy
	// with the parallel tests would stretch.
	dir := t.TempDir()
	procs := loopbackChain(t, dir, []string{"A", "B", "C"}, []string{"--heartbeat", "500ms", "--trace", filepath.Join(dir, "{node}.jsonl")}, func(n string) string {
		s := fmt.Sprintf(`date +%%s%%N >> "$DIR/%s.start"`, n)
		if n == "B" {
			s += "; sleep 2"
		}
		return s
	})
	waitFile(t, filepath.Join(dir, "B.start"), 15*time.Second)
	procs["B"].signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	t.Cleanup(func() { _ = procs["B"].cmd.Process.Signal(syscall.SIGCONT) })
	for _, n := range []struct{ node, side string }{{"A", "succ"}, {"C", "pred"}} {
		f := waitFaults(t, dir, n.node, 1, 10*time.Second)
		took := traceFaultAt(t, dir, n.node, 5*time.Second).Sub(stopped)
		t.Logf("%s: %s blaming %s %v after B was stopped", n.node, f[0].kind, f[0].peer, took.Round(time.Millisecond))
		if f[0].kind != "peer-silent" || f[0].peer != "B" || f[0].side != n.side || took > 2*time.Second {
			t.Errorf("%s's first fault %+v after %v, want peer-silent blaming B (%s) within 2 s", n.node, f[0], took, n.side)
		}
		if code := procs[n.node].wait(t, 10*time.Second); code != 4 {
			t.Errorf("%s exited %d, want 4", n.node, code)
		}
	}
	if exists(filepath.Join(dir, "C.start")) {
		t.Errorf("C's task ran after the chain halted")
	}
}

// Bad fault flags are usage errors that start nothing (exit 2).
func TestFaultFlagsUsageE2E(t *testing.T) {
	for _, args := range [][]string{
		{"--fault-policy", "retry"},
		{"--heartbeat", "1ms"},
		{"--heartbeat", "-1s"},
		{"--task-timeout", "-1s"},
	} {
		full := append([]string{"run", "--listen", "127.0.0.1:0", "--prev", "127.0.0.1:1"}, args...)
		out, stderr, code := runCLI(t, append(full, "--", "true")...)
		if code != 2 || out != "" || !strings.Contains(stderr, args[0]) {
			t.Errorf("run %v: exit %d, want 2 and an error naming %s\n%s%s", args, code, args[0], out, stderr)
		}
	}
}

// A partition longer than 3 heartbeat intervals is a fault that both ends
// of the cut link see, each blaming the other (from either side the other
// is the silent one), and nobody else (issue 9: "detected within 3D + one
// interval by both its neighbours, and by nobody else"). With --fault-policy
// wait the round survives: when the link comes back the chain completes,
// each task once, in order.
func TestNetnsPartitionDetected(t *testing.T) {
	// Not parallel: it measures detection times, which a machine busy
	// with the parallel tests would stretch.
	tp := newNetnsTopo(t)
	dir := t.TempDir()
	flags := func(n string) []string {
		return []string{"--heartbeat", "500ms", "--fault-policy", "wait", "--on-fault", faultHook, "--trace", filepath.Join(dir, n+".jsonl")}
	}
	procs := tp.startChain(t, dir, map[string][]string{"A": flags("A"), "B": flags("B"), "C": flags("C")},
		map[string][]string{"A": netnsTask(""), "B": netnsTask("sleep 4"), "C": netnsTask("")})
	waitFile(t, filepath.Join(dir, "B.start"), 10*time.Second)
	tp.mustIP(t, "C", "link", "set", "cb", "down")
	cut := time.Now()
	up := false
	t.Cleanup(func() {
		if !up {
			_, _ = tp.runIP("-n", tp.ns["C"], "link", "set", "cb", "up")
		}
	})
	for _, n := range []struct{ node, peer, side string }{{"B", "C", "succ"}, {"C", "B", "pred"}} {
		f := waitFaults(t, dir, n.node, 1, 10*time.Second)
		took := traceFaultAt(t, dir, n.node, 5*time.Second).Sub(cut)
		t.Logf("%s: %s blaming %s %v after the B-C link was cut", n.node, f[0].kind, f[0].peer, took.Round(time.Millisecond))
		// 3D + D/2 = 1.75 s at most after the last line, which came before
		// the cut; "3D + one interval" (2 s) is the promise.
		if f[0].kind != "peer-silent" || f[0].peer != n.peer || f[0].side != n.side || took > 2*time.Second {
			t.Errorf("%s's fault %+v after %v, want peer-silent blaming %s (%s) within 3D + one interval (2 s)", n.node, f[0], took, n.peer, n.side)
		}
	}
	tp.mustIP(t, "C", "link", "set", "cb", "up")
	up = true
	for _, n := range []string{"A", "B", "C"} {
		if code := procs[n].wait(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d after the link came back, want 0", n, code)
		}
	}
	checkRanInOrder(t, dir, "A", "B", "C")
	if f := ownFaults(readFaults(t, dir, "A")); len(f) != 0 {
		t.Errorf("A, not next to the cut link, reported %+v", f)
	}
	// A learnt of it from B's fault notice, blaming C.
	if f := readFaults(t, dir, "A"); len(f) == 0 || f[0].kind != "chain-fault" || f[0].peer != "C" {
		t.Errorf("A's reports %+v, want B's notice first: chain-fault blaming C", f)
	}
}

// The draft's data pipeline, second option: "the progress in processing
// could be preserved and only the faulty node needs to be reset". B hangs
// (SIGSTOP) in its task; A and C, with --fault-policy wait, report it and
// keep the round. The operator resets B alone: kills it and starts it
// again with its --state-dir and --resume-task rerun. B runs its task
// again, and the chain completes: A's task is not repeated, C's runs once,
// after B's second run ended.
func TestHungNodeResetE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := []string{"A", "B", "C"}
	addrs := freeAddrs(t, len(names))
	chain := chainOf(names, addrs)
	args := func(n string) []string {
		task := fmt.Sprintf(`date +%%s%%N >> "$DIR/%s.start"`, n)
		if n == "B" {
			task += `; sleep 1; date +%s%N >> "$DIR/B.end"`
		}
		return []string{"run", "--chain", chain, "--name", n, "--heartbeat", "300ms",
			"--fault-policy", "wait", "--on-fault", faultHook, "--state-dir", filepath.Join(dir, n+".state"),
			"--resume-task", "rerun", "--", "sh", "-c", task}
	}
	procs := map[string]*proc{}
	for _, n := range []string{"C", "B", "A"} {
		procs[n] = startProc(t, n, []string{"DIR=" + dir}, args(n)...)
	}
	waitFile(t, filepath.Join(dir, "B.start"), 15*time.Second)
	procs["B"].signal(t, syscall.SIGSTOP)
	waitFaults(t, dir, "A", 1, 10*time.Second)
	waitFaults(t, dir, "C", 1, 10*time.Second)
	procs["B"].signal(t, syscall.SIGKILL)
	procs["B"].wait(t, 5*time.Second)
	restarted := time.Now()
	b2 := startProc(t, "B (restarted)", []string{"DIR=" + dir}, args("B")...)
	for _, p := range []*proc{procs["A"], b2, procs["C"]} {
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", p.name, code)
		}
	}
	t.Logf("chain completed %v after B was reset", time.Since(restarted).Round(time.Millisecond))
	for n, want := range map[string]int{"A": 1, "B": 2, "C": 1} {
		if got := len(readLines(t, filepath.Join(dir, n+".start"))); got != want {
			t.Errorf("%s's task started %d times, want %d", n, got, want)
		}
	}
	// B's first run may have ended while its node was stopped (the task
	// is its own process); the node never learned it, so the rerun was
	// right. C must start after B's last run ended.
	bEnd, cStart := nanos(t, filepath.Join(dir, "B.end")), nanos(t, filepath.Join(dir, "C.start"))
	if len(bEnd) == 0 || len(cStart) != 1 || cStart[0] < slices.Max(bEnd) {
		t.Errorf("B's task ended at %v, C's started at %v: want C once, after B's last run", bEnd, cStart)
	}
	for _, n := range []string{"A", "C"} {
		if f := readFaults(t, dir, n); len(f) != 1 || f[0].kind != "peer-silent" || f[0].peer != "B" {
			t.Errorf("%s's faults %+v, want one peer-silent blaming B", n, f)
		}
	}
}
