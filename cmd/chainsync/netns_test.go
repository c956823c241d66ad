//go:build unix

package main

// Multi-host end-to-end tests: three chainsync processes, each in its own
// Linux network namespace (one "host" each), joined by two veth links with
// a private subnet each:
//
//	A (10.77.1.1) <-ab--ba-> (10.77.1.2) B (10.77.2.1) <-bc--cb-> (10.77.2.2) C
//
// B has two interfaces and routes nothing (A has no route to 10.77.2.0/24,
// C none to 10.77.1.0/24), so A's only connection is to B on the A-B link
// and C's only connection is from B on the B-C link: the draft's "Topology
// and Configuration" (one TCP connection per adjacent pair), across real
// links that the tests can cut without either end sending FIN or RST.
//
// The veths are created directly inside the test's own namespaces (never in
// the namespace the test runs in), all traffic stays inside them, and every
// namespace (with its veths) is deleted at cleanup, also on failure. The
// tests skip when not root, when ip(8) is missing or when namespaces cannot
// be created (an unprivileged container).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// netnsSeq makes namespace names unique within this test process (-count,
// parallel tests); the PID makes them unique across processes.
var netnsSeq atomic.Int64

// netnsTopo is the three-host topology of one test.
type netnsTopo struct {
	ip string            // path of ip(8)
	ns map[string]string // node name -> namespace name
}

// The addresses of the topology. --chain gives each node one address: the
// Head's is never used (it only dials), B's is its A-side address (where A
// dials it), C's is its B-side address (where B dials it).
const (
	netnsAddrA  = "10.77.1.1"
	netnsAddrBa = "10.77.1.2" // B on the A-B link
	netnsAddrBc = "10.77.2.1" // B on the B-C link
	netnsAddrC  = "10.77.2.2"
	netnsChain  = "A=" + netnsAddrA + ":7000,B=" + netnsAddrBa + ":7000,C=" + netnsAddrC + ":7000"
)

// runIP runs ip(8) with args and returns its combined output.
func (tp *netnsTopo) runIP(args ...string) (string, error) {
	out, err := exec.Command(tp.ip, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// mustIP runs ip(8) in namespace of node and fails the test on error.
func (tp *netnsTopo) mustIP(t *testing.T, node string, args ...string) {
	t.Helper()
	if _, err := tp.runIP(append([]string{"-n", tp.ns[node]}, args...)...); err != nil {
		t.Fatal(err)
	}
}

// newNamespaces makes a network namespace for each node, or skips the test
// where this machine cannot. At cleanup it deletes, in each node's
// namespace, the veth devices devs names for it, then the namespace.
func newNamespaces(t *testing.T, nodes []string, devs map[string][]string) *netnsTopo {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespace tests need root (ip netns add, veth)")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skipf("network namespace tests need ip(8) (iproute2): %v", err)
	}
	tp := &netnsTopo{ip: ip, ns: map[string]string{}}
	seq := netnsSeq.Add(1)
	for _, node := range nodes {
		name := fmt.Sprintf("cs%d-%d%s", os.Getpid(), seq, strings.ToLower(node))
		if _, err := tp.runIP("netns", "add", name); err != nil {
			t.Skipf("cannot create a network namespace here (unprivileged container?): %v", err)
		}
		tp.ns[node] = name
		t.Cleanup(func() {
			// Deleting a namespace deletes the veth ends in it, and with
			// them their peers. Delete the veths explicitly first anyway,
			// so nothing depends on when the kernel frees the namespace.
			for _, dev := range devs[node] {
				_, _ = tp.runIP("-n", name, "link", "del", dev)
			}
			if _, err := tp.runIP("netns", "del", name); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}
	return tp
}

// newNetnsTopo builds the topology, or skips the test if this machine
// cannot. Everything it creates is removed at cleanup.
func newNetnsTopo(t *testing.T) *netnsTopo {
	t.Helper()
	tp := newNamespaces(t, []string{"A", "B", "C"}, map[string][]string{"A": {"ab"}, "B": {"ba", "bc"}, "C": {"cb"}})
	// Both ends of each veth are created inside the test's namespaces.
	for _, l := range []struct{ from, dev, to, peer string }{{"A", "ab", "B", "ba"}, {"B", "bc", "C", "cb"}} {
		if _, err := tp.runIP("-n", tp.ns[l.from], "link", "add", l.dev, "type", "veth", "peer", "name", l.peer, "netns", tp.ns[l.to]); err != nil {
			t.Skipf("cannot create a veth pair here: %v", err)
		}
	}
	for _, a := range []struct{ node, dev, addr string }{
		{"A", "ab", netnsAddrA}, {"B", "ba", netnsAddrBa}, {"B", "bc", netnsAddrBc}, {"C", "cb", netnsAddrC},
	} {
		tp.mustIP(t, a.node, "addr", "add", a.addr+"/24", "dev", a.dev)
		tp.mustIP(t, a.node, "link", "set", a.dev, "up")
	}
	for _, node := range []string{"A", "B", "C"} {
		tp.mustIP(t, node, "link", "set", "lo", "up")
	}
	// B routes nothing: A cannot even address C, nor C A.
	for _, c := range []struct{ node, dst string }{{"A", netnsAddrC}, {"C", netnsAddrA}} {
		if out, err := tp.runIP("-n", tp.ns[c.node], "route", "get", c.dst); err == nil {
			t.Fatalf("%s has a route to %s, want none: %s", c.node, c.dst, out)
		}
	}
	return tp
}

// start runs chainsync with args inside node's namespace (ip netns exec
// execs the binary, so the process is chainsync itself). Like startProc it
// kills the process at cleanup if it still runs, and logs its stderr if
// the test failed.
func (tp *netnsTopo) start(t *testing.T, node string, env []string, args ...string) *proc {
	t.Helper()
	label := "in " + tp.ns[node] + ": chainsync " + strings.Join(args, " ")
	return startCommand(t, node, env, label, tp.ip, append([]string{"netns", "exec", tp.ns[node], bin}, args...)...)
}

// netnsTask records the task's start and end (date +%s%N) in
// $DIR/NODE.start and $DIR/NODE.end, with body in between.
func netnsTask(body string) []string {
	s := `date +%s%N >> "$DIR/$CHAINSYNC_NODE.start"; `
	if body != "" {
		s += body + "; "
	}
	return []string{"sh", "-c", s + `date +%s%N >> "$DIR/$CHAINSYNC_NODE.end"`}
}

// startChain starts C, B, A in that order (each once it is listening, so
// that no dial needs a retry), with extra flags and the task per node.
func (tp *netnsTopo) startChain(t *testing.T, dir string, extra map[string][]string, task map[string][]string) map[string]*proc {
	t.Helper()
	procs := map[string]*proc{}
	for _, node := range []string{"C", "B", "A"} {
		args := []string{"run", "--chain", netnsChain, "--name", node}
		args = append(args, extra[node]...)
		args = append(append(args, "--"), task[node]...)
		procs[node] = tp.start(t, node, []string{"DIR=" + dir, "IP=" + tp.ip}, args...)
		procs[node].waitLog(t, 10*time.Second, "node started", containsAll("node started"))
	}
	return procs
}

// waitFile waits up to d for path to exist.
func waitFile(t *testing.T, path string, d time.Duration) {
	t.Helper()
	waitFor(t, d, "file "+path, func() bool { return exists(path) })
}

// checkRanInOrder checks that each node in nodes ran its task exactly once,
// each one starting only after the previous one ended (draft "Phase 3":
// "Execution order is therefore strictly A -> B -> C").
func checkRanInOrder(t *testing.T, dir string, nodes ...string) {
	t.Helper()
	var prevEnd int64
	prev := ""
	for _, n := range nodes {
		st, en := nanos(t, filepath.Join(dir, n+".start")), nanos(t, filepath.Join(dir, n+".end"))
		if len(st) != 1 || len(en) != 1 {
			t.Errorf("%s's task started %d and ended %d times, want exactly once", n, len(st), len(en))
			return
		}
		if prev != "" && st[0] < prevEnd {
			t.Errorf("%s's task started %v before %s's ended", n, time.Duration(prevEnd-st[0]), prev)
		}
		prev, prevEnd = n, en[0]
	}
}

// TestNetnsChain: one round across three hosts completes (draft "Protocol
// Operation", phases 1-4; "Topology and Configuration": one TCP connection
// per adjacent pair). The tasks run once each, in the order A, B, C, and
// every node exits 0. The connections run over the two links: B sees A
// from 10.77.1.1, C sees B from B's other address 10.77.2.1.
func TestNetnsChain(t *testing.T) {
	t.Parallel()
	tp := newNetnsTopo(t)
	dir := t.TempDir()
	task := netnsTask(`echo "$CHAINSYNC_ROLE" > "$DIR/$CHAINSYNC_NODE.role"`)
	start := time.Now()
	procs := tp.startChain(t, dir, nil, map[string][]string{"A": task, "B": task, "C": task})
	for _, n := range []string{"A", "B", "C"} {
		if code := procs[n].wait(t, 15*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", n, code)
		}
	}
	t.Logf("round over three hosts done in %v", time.Since(start).Round(time.Millisecond))
	checkRanInOrder(t, dir, "A", "B", "C")
	for n, want := range map[string]string{"A": "head", "B": "middle", "C": "tail"} {
		if got := readLines(t, filepath.Join(dir, n+".role")); !slices.Equal(got, []string{want}) {
			t.Errorf("%s's task saw CHAINSYNC_ROLE %q, want %q", n, got, want)
		}
	}
	for _, c := range []struct{ node, peer string }{{"B", netnsAddrA + ":"}, {"C", netnsAddrBc + ":"}} {
		if !slices.ContainsFunc(strings.Split(procs[c.node].err.String(), "\n"), containsAll("link up", c.peer)) {
			t.Errorf("%s: no \"link up\" log line from peer %s*", c.node, c.peer)
		}
	}
}

// TestNetnsPartitionHeals: a real network partition in the middle of a
// round. While B's task runs (2 s), the B-C link goes down for 1.5 s and
// comes back: no FIN, no RST, the kernel only retransmits. The partition
// lasts until after B has sent COMPLETE to C, so that COMPLETE crosses the
// link only once it is up again. The draft says a chain runs over
// "reliable TCP connections" ("Abstract") with one "persistent
// bidirectional TCP connection" per pair ("Topology and Configuration");
// docs/DESIGN.md "Roles and connections": "a transient disconnect loses nothing
// and never triggers a task twice". So the round completes, each task
// runs exactly once, in order, and every node exits 0.
//
// Either end of the link may be the one that goes down: the tail's end (B
// keeps its route, its packets are dropped on the wire) or B's own end (B
// loses its route to C for a while).
func TestNetnsPartitionHeals(t *testing.T) {
	t.Parallel()
	for _, side := range []struct{ name, node, dev string }{{"tail-end", "C", "cb"}, {"middle-end", "B", "bc"}} {
		t.Run(side.name, func(t *testing.T) {
			t.Parallel()
			tp := newNetnsTopo(t)
			dir := t.TempDir()
			quick := netnsTask("")
			procs := tp.startChain(t, dir, nil, map[string][]string{"A": quick, "B": netnsTask("sleep 2"), "C": quick})

			waitFile(t, filepath.Join(dir, "B.start"), 10*time.Second)
			// The partition's place and length are the test's subject: the
			// link goes down well into B's 2 s task ...
			time.Sleep(800 * time.Millisecond)
			tp.mustIP(t, side.node, "link", "set", side.dev, "down")
			down := time.Now()
			up := false
			t.Cleanup(func() {
				if !up {
					_, _ = tp.runIP("-n", tp.ns[side.node], "link", "set", side.dev, "up")
				}
			})
			// Keep the link down until 1.5 s have passed and B has sent its
			// COMPLETE into the partition (plus a little, for TCP to try).
			procs["B"].waitLog(t, 5*time.Second, "sent COMPLETE to the successor", containsAll("sent COMPLETE to succ"))
			sentAt := time.Now()
			// ... and stays down for at least 1.5 s, and for a while after
			// B's COMPLETE (the positive event waited for above) went into it.
			time.Sleep(max(time.Until(down.Add(1500*time.Millisecond)), 300*time.Millisecond))
			if exists(filepath.Join(dir, "C.start")) {
				t.Errorf("C's task started while the B-C link was down: the partition was not real")
			}
			tp.mustIP(t, side.node, "link", "set", side.dev, "up")
			up = true
			t.Logf("B-C link (%s %s) down for %v; B sent COMPLETE %v before it came back",
				side.node, side.dev, time.Since(down).Round(time.Millisecond), time.Since(sentAt).Round(time.Millisecond))
			healed := time.Now()

			for _, n := range []string{"A", "B", "C"} {
				if code := procs[n].wait(t, 20*time.Second); code != 0 {
					t.Errorf("%s exited %d, want 0", n, code)
				}
			}
			if cs := nanos(t, filepath.Join(dir, "C.start")); len(cs) > 0 {
				t.Logf("C's task started %v after the link came back", time.Duration(cs[0]-healed.UnixNano()).Round(time.Millisecond))
			}
			checkRanInOrder(t, dir, "A", "B", "C")
			// Not required, but worth knowing: whether the nodes saw the
			// partition at all (without heartbeats they cannot; TCP hides it).
			if l := procs["B"].err.String(); strings.Contains(l, "successor link down") || strings.Contains(l, "write failed") {
				t.Logf("note: B saw its link to C fail during the partition and recovered")
			}
			for _, n := range []string{"B", "C"} {
				if strings.Contains(procs[n].err.String(), "resend=true") {
					t.Logf("note: %s re-sent a message after reconnecting", n)
				}
			}
		})
	}
}

// TestNetnsSwitchNeverComesBack is the draft's switch-stack example ("Error
// Handling"): switch 2 (here B) restarts during the upgrade and never
// comes back; its successor (C) "could be configured with a timeout
// waiting for switch 2 to come back online" and "could send an SNMP trap"
// (--on-fault), and the upgrade halts so that no more switches are lost
// (C's task never runs). B vanishes like failed hardware: its task takes
// both of B's interfaces down and then SIGKILLs its own chainsync process,
// so the FIN/RST B's kernel sends on the process's death never reaches A
// or C. Neither sees a broken connection (TCP keepalive would take ~35 s
// at best, see TestNetnsVanishedPeerKeepalive); --phase-timeout finds the
// fault (docs/DESIGN.md "Faults": timeouts are optional, and when they fire the
// node reports a fault): C (2 s, waiting in WATCH) and A (3 s, waiting for
// COMPLETE to come back) exit 4. C's timeout runs from when C entered
// WATCH (when it sent START), so it has to cover A's and B's tasks too.
func TestNetnsSwitchNeverComesBack(t *testing.T) {
	t.Parallel()
	tp := newNetnsTopo(t)
	dir := t.TempDir()
	hookC := filepath.Join(dir, "C.fault")
	// B's task: the switch reboots: it goes off the network, then dies.
	// ip runs in B's namespace, which the task inherits from chainsync;
	// $PPID is B's chainsync process (ip netns exec execs it, and
	// chainsync runs the task directly).
	taskB := netnsTask(`"$IP" link set bc down && "$IP" link set ba down && kill -KILL $PPID`)
	quick := netnsTask("")
	start := time.Now()
	// C becomes ready once all three run: its 2 s would otherwise start
	// counting while the others are still starting (about a second each
	// on a loaded machine), and time C out before A is up.
	readyC := filepath.Join(dir, "ready.C")
	procs := tp.startChain(t, dir, map[string][]string{
		"A": {"--phase-timeout", "3s"},
		"C": {"--phase-timeout", "2s", "--on-fault", `echo $CHAINSYNC_FAULT > "` + hookC + `"`,
			"--ready-file", readyC, "--ready-interval", "20ms"},
	}, map[string][]string{"A": quick, "B": taskB, "C": quick})
	if err := os.WriteFile(readyC, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	if code := procs["B"].wait(t, 10*time.Second); code != -1 {
		t.Fatalf("B exited %d, want killed by its task (-1)", code)
	}
	// The faults must come after B vanished, or they would not be about it.
	for _, n := range []string{"A", "C"} {
		if !procs[n].running() {
			t.Fatalf("%s had already exited (%d) when B died: the timeouts are too tight for this machine", n, procs[n].code)
		}
	}
	for n, within := range map[string]time.Duration{"C": 10 * time.Second, "A": 10 * time.Second} {
		if code := procs[n].wait(t, within); code != 4 {
			t.Errorf("%s exited %d, want 4 (fault)", n, code)
		}
	}
	t.Logf("A and C reported the fault after %v", time.Since(start).Round(time.Millisecond))
	if got := readLines(t, hookC); !slices.Equal(got, []string{"phase-timeout"}) {
		t.Errorf("C's --on-fault hook wrote %q, want CHAINSYNC_FAULT=phase-timeout", got)
	}
	for _, n := range []string{"A", "B"} {
		if got := len(readLines(t, filepath.Join(dir, n+".start"))); got != 1 {
			t.Errorf("%s's task started %d times, want 1", n, got)
		}
	}
	if exists(filepath.Join(dir, "C.start")) {
		t.Errorf("C's task ran although its predecessor never completed")
	}
	errC := procs["C"].err.String()
	if !strings.Contains(errC, "no COMPLETE from the predecessor") {
		t.Errorf("C's log does not name what it waited for (want \"no COMPLETE from the predecessor\")")
	}
	if errA := procs["A"].err.String(); !strings.Contains(errA, "no COMPLETE from the successor") {
		t.Errorf("A's log does not name what it waited for (want \"no COMPLETE from the successor\")")
	}
	// The point of the scenario: B's death was silent on both links.
	for n, l := range map[string]string{"A": "successor link down", "C": "predecessor link down"} {
		if strings.Contains(procs[n].err.String(), l) {
			t.Errorf("%s saw %q: B's FIN or RST got through, so this was not a silent failure", n, l)
		}
	}
}

// TestNetnsVanishedPeerKeepalive (opt-in: CHAINSYNC_NETNS_SLOW=1, ~40 s)
// checks docs/DESIGN.md's "TCP keepalive detects vanished peers" with
// --connect-timeout alone, no --phase-timeout: B vanishes (interfaces down,
// then SIGKILL, so no FIN/RST) while A's task runs, and A then sends its
// COMPLETE into the void. C's link to B is idle, so keepalive (15 s idle,
// 4 probes 5 s apart) breaks it after ~35 s and C faults. A's link is not
// idle: its COMPLETE is never acknowledged, and while data is unacknowledged
// Linux does not send keepalive probes at all; without TCP_USER_TIMEOUT the
// connection only dies after tcp_retries2 retransmissions (~15 min by
// default). Draft "Error Handling" (the data-pipeline example: "a failed
// TCP connection would be sufficient to detect a fault"); docs/DESIGN.md
// "Faults": "TCP keepalive is on".
func TestNetnsVanishedPeerKeepalive(t *testing.T) {
	if os.Getenv("CHAINSYNC_NETNS_SLOW") == "" {
		t.Skip("takes ~40 s; set CHAINSYNC_NETNS_SLOW=1 to run")
	}
	t.Parallel()
	tp := newNetnsTopo(t)
	dir := t.TempDir()
	// A's task holds until the test has made B vanish (at most 10 s).
	taskA := netnsTask(`i=0; while [ ! -e "$DIR/go" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done`)
	quick := netnsTask("")
	ct := []string{"--connect-timeout", "1s"}
	procs := tp.startChain(t, dir, map[string][]string{"A": ct, "C": ct},
		map[string][]string{"A": taskA, "B": quick, "C": quick})
	waitFile(t, filepath.Join(dir, "A.start"), 10*time.Second)
	tp.mustIP(t, "B", "link", "set", "ba", "down")
	tp.mustIP(t, "B", "link", "set", "bc", "down")
	_ = procs["B"].cmd.Process.Kill()
	procs["B"].wait(t, 5*time.Second)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	vanished := time.Now()
	for _, n := range []string{"C", "A"} {
		select {
		case <-procs[n].done:
			t.Logf("%s exited %d, %v after B vanished", n, procs[n].code, time.Since(vanished).Round(time.Millisecond))
			if procs[n].code != 4 {
				t.Errorf("%s exited %d, want 4 (fault)", n, procs[n].code)
			}
		case <-time.After(time.Until(vanished.Add(50 * time.Second))):
			t.Errorf("%s did not notice within 50 s that its neighbour B vanished (--connect-timeout 1s, TCP keepalive)", n)
		}
	}
	for _, n := range []string{"B", "C"} {
		if exists(filepath.Join(dir, n+".start")) {
			t.Errorf("%s's task ran", n)
		}
	}
}
