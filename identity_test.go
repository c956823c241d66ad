package chainsync

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// recordedFaults returns the faults of kind node has recorded.
func recordedFaults(n *Node, kind FaultKind) []Fault {
	var out []Fault
	for _, f := range n.Snapshot().Faults {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

// helloOf is the identity line of name in the chain names/addrs, with
// heartbeats every second.
func helloOf(name string, names, addrs []string, settings string) string {
	pos := 0
	for i, n := range names {
		if n == name {
			pos = i
		}
	}
	h := wire.Hello{Name: name, Pos: pos + 1, Size: len(names), Chain: chainDigest(names, addrs), Rounds: wire.Digest(settings), Names: names, Heartbeat: time.Second}
	return string(wire.AppendHello(nil, h))
}

// docs/PROTOCOL.md, "The identity line": a predecessor whose line checks
// out is answered with the node's own line and admitted on it alone; one
// whose --chain is in another order gets the node's own line (so that it
// can say what differs too) and a notice, is closed, and is
// reported as a config-mismatch that names both orders and blames the
// node that really answered; nothing of its runs.
func TestIdentityLineTCP(t *testing.T) {
	names := []string{"A", "B", "C"}
	addrs := []string{"127.0.0.1:7000", "127.0.0.1:0", "127.0.0.1:7002"}
	w := startWatched(t, Config{Name: "B", Listen: "127.0.0.1:0", Prev: addrs[0], PrevName: "A",
		Chain: names, ChainAddrs: addrs, RoundSettings: "--rounds 1", Heartbeat: time.Second})
	if err := w.Ready(""); err != nil {
		t.Fatal(err)
	}
	a := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	a.Send(t, helloOf("A", names, addrs, "--rounds 1"))
	a.Expect(t, helloOf("B", names, addrs, "--rounds 1"))
	waitCond(t, 5*time.Second, "the predecessor admitted on its identity line", w.predUp)

	// C, with A,C,B, dials B as its successor.
	c := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	other := []string{"A", "C", "B"}
	otherAddrs := []string{addrs[0], addrs[2], addrs[1]}
	c.Send(t, helloOf("C", other, otherAddrs, "--rounds 1"))
	c.Expect(t, helloOf("B", names, addrs, "--rounds 1"))
	c.Expect(t, "FAULT : config-mismatch B C\n")
	c.AwaitClosed(t, 5*time.Second)
	waitCond(t, 5*time.Second, "the config-mismatch", func() bool { return len(recordedFaults(w.Node, FaultConfigMismatch)) > 0 })
	f := recordedFaults(w.Node, FaultConfigMismatch)[0]
	if !strings.Contains(f.Err, "C's --chain is A,C,B; this node's is A,B,C") || f.Peer != "C" || f.Side != protocol.Pred {
		t.Errorf("fault %+v: want C's and this node's --chain named, blaming C", f)
	}
	if st := w.state(""); st == protocol.StateStart || st == protocol.StateComplete {
		t.Errorf("the round moved to %v in a mis-wired chain", st)
	}
}

// docs/PROTOCOL.md, "The identity line": the other differences, each in
// words, and lines that are no identity line at all.
func TestIdentityLineDifferences(t *testing.T) {
	names := []string{"A", "B", "C"}
	addrs := []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}
	id := newIdentity(&Config{Name: "B", Chain: names, ChainAddrs: addrs, RoundSettings: "--rounds 3", Heartbeat: time.Second})
	if id == nil {
		t.Fatal("no identity for a node with a chain and heartbeats")
	}
	parse := func(s string) wire.Hello {
		h, err := wire.ParseHello([]byte(strings.TrimSuffix(s, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, tc := range []struct {
		side protocol.Side
		line string
		want string
	}{
		{protocol.Pred, helloOf("A", names, addrs, "--rounds 3"), ""},
		{protocol.Succ, helloOf("C", names, addrs, "--rounds 3"), ""},
		{protocol.Pred, helloOf("C", names, addrs, "--rounds 3"), "this node's predecessor is A (node 1 of 3 in --chain), but C answered there"},
		{protocol.Pred, helloOf("A", names, addrs, "--rounds 5"), "A's round settings differ from this node's (this node runs --rounds 3)"},
		{protocol.Pred, helloOf("A", names, []string{"10.0.0.9:7000", addrs[1], addrs[2]}, "--rounds 3"),
			"A's --chain has the same names in the same order as this node's (A,B,C), with other addresses"},
		{protocol.Pred, "HELLO C 2/3 " + wire.Digest("x") + " " + wire.Digest("--rounds 3"),
			"C's --chain differs from this node's: there C is node 2 of 3; in this node's (3 nodes) it is node 3 of 3"},
		// The heartbeat, named with both values; a line of an older
		// version, without it, is compared on its digests alone.
		{protocol.Succ, strings.Replace(helloOf("C", names, addrs, "--rounds 3"), "hb=1000", "hb=300", 1),
			"C's --heartbeat is 300ms; this node's is 1s: give every node the same --heartbeat"},
		{protocol.Pred, strings.Replace(helloOf("A", names, addrs, "--rounds 3"), "hb=1000", "hb=0", 1),
			"A's --heartbeat is off; this node's is 1s"},
		{protocol.Pred, strings.Replace(helloOf("A", names, addrs, "--rounds 3"), " hb=1000", "", 1), ""},
	} {
		got := id.compare(tc.side, parse(tc.line))
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s on the %v side: %q, want %q", strings.TrimSpace(tc.line), tc.side, got, tc.want)
		}
	}
	// Without heartbeats (the draft's wire), or without a chain, no line.
	for _, cfg := range []Config{{Name: "B", Chain: names, ChainAddrs: addrs}, {Name: "B", Heartbeat: time.Second}} {
		if newIdentity(&cfg) != nil {
			t.Errorf("%+v: an identity line, want none", cfg)
		}
	}
}

// docs/PROTOCOL.md, "Bad input": with the extension lines on, a new
// predecessor connection does not displace a live one. It is held; if
// the current one goes on speaking, it is refused as duplicate-node,
// reported once with both addresses, and told with a notice; once the
// current one is silent, a newcomer gets in (a restart) and its lines
// run.
func TestDuplicatePredecessorTCP(t *testing.T) {
	const hb = 50 * time.Millisecond
	w := startWatched(t, Config{Name: "B", Listen: "127.0.0.1:0", Prev: "127.0.0.1:1", PrevName: "A", Heartbeat: hb, FaultPolicy: FaultWait})
	if err := w.Ready("r1"); err != nil {
		t.Fatal(err)
	}
	first := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	first.Send(t, "READY:r1\n")
	first.Expect(t, "START:r1\n")
	// The first keeps the link alive.
	var mu sync.Mutex
	alive := true
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(hb / 2)
		defer tk.Stop()
		for range tk.C {
			mu.Lock()
			a := alive
			mu.Unlock()
			if !a || first.TrySend([]byte("HEARTBEAT\n")) != nil {
				return
			}
		}
	}()
	second := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	second.Send(t, "READY:r1\n")
	second.Expect(t, "FAULT - duplicate-node B A\n")
	second.AwaitClosed(t, 5*time.Second)
	dups := recordedFaults(w.Node, FaultDuplicateNode)
	if len(dups) != 1 || !strings.Contains(dups[0].Err, first.Addr()) || !strings.Contains(dups[0].Err, second.Addr()) {
		t.Fatalf("duplicate-node faults %+v: want one naming %s and %s", dups, first.Addr(), second.Addr())
	}
	// A third while the first is alive: refused again, reported no more.
	third := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	third.Send(t, "READY:r1\n")
	third.Expect(t, "FAULT - duplicate-node B A\n")
	if n := len(recordedFaults(w.Node, FaultDuplicateNode)); n != 1 {
		t.Errorf("%d duplicate-node faults, want the first only", n)
	}

	// The first goes silent (its process stopped, its connection open): a
	// newcomer gets in once it has been for two intervals, and is answered.
	mu.Lock()
	alive = false
	mu.Unlock()
	<-done
	start := time.Now()
	restarted := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	restarted.Send(t, "READY:r1\n")
	restarted.Expect(t, "START:r1\n")
	if d := time.Since(start); d > 20*hb {
		t.Errorf("the restarted predecessor got in after %v, want about two intervals (%v)", d, 2*hb)
	}
	if n := len(recordedFaults(w.Node, FaultDuplicateNode)); n != 1 {
		t.Errorf("%d duplicate-node faults after a restart, want still 1", n)
	}
}

// headBeforeFakeSucc starts a Head A with heartbeats and fault policy
// wait whose successor B is the test, opens round, and returns A, B's
// listener and B's first connection, its READY read.
func headBeforeFakeSucc(t *testing.T, round string) (*watched, *testnet.PeerListener, *testnet.Peer) {
	t.Helper()
	succ := testnet.ListenPeer(t)
	w := startWatched(t, Config{Name: "A", Next: succ.Addr(), NextName: "B", Heartbeat: time.Second, FaultPolicy: FaultWait})
	if err := w.Ready(round); err != nil {
		t.Fatal(err)
	}
	b := succ.Accept(t, 5*time.Second)
	b.Expect(t, "READY:"+round+"\n")
	return w, succ, b
}

// docs/PROTOCOL.md, "Bad input": the newcomer that is refused reports
// duplicate-node itself and ends the rounds it opened, whatever its
// fault policy: none of their tasks can run anywhere.
func TestRefusedAsDuplicateTCP(t *testing.T) {
	w, _, b := headBeforeFakeSucc(t, "two-1")
	b.Send(t, "FAULT - duplicate-node B A\n")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	res, _ := w.Wait(ctx, "two-1")
	if res.Status != StatusFault || !strings.Contains(res.Err.Error(), "duplicate-node") {
		t.Errorf("round two-1 ended %v: %v; want a duplicate-node fault", res.Status, res.Err)
	}
	dups := recordedFaults(w.Node, FaultDuplicateNode)
	if len(dups) != 1 || !strings.Contains(dups[0].Err, "B refused this node as its predecessor") {
		t.Errorf("faults %+v: want one duplicate-node saying B refused this node", dups)
	}
}

// docs/PROTOCOL.md, "The identity line" and "Restart grace": a successor
// that closes a new connection right after this node's first line refuses
// it, but not while that successor may be restarting: on its way down it
// may still take a connection and reset it. The node re-dials, and the
// restarted successor carries the round on; no config-mismatch.
func TestRestartingSuccessorIsNotARefusalTCP(t *testing.T) {
	w, succ, b := headBeforeFakeSucc(t, "r")
	b.Send(t, "START:r\n")
	b.Expect(t, "COMPLETE:r\n")
	b.Send(t, "GRACE :r B 10000 1\n") // B's task may restart B
	waitCond(t, 5*time.Second, "B's restart grace at A", func() bool { return len(w.Snapshot().Restarting) == 1 })
	b.Close()
	// B on its way down: the connection is taken, its first line read,
	// and the connection closed.
	dying := succ.Accept(t, 5*time.Second)
	if _, err := dying.Line(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	dying.Close()
	// The restarted B.
	back := succ.Accept(t, 5*time.Second)
	for {
		line, err := back.Line(5 * time.Second)
		if err != nil {
			t.Fatalf("no COMPLETE:r re-sent to the restarted successor: %v", err)
		}
		if line == "COMPLETE:r\n" {
			break
		}
	}
	back.Send(t, "COMPLETE:r\n")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if res, err := w.Wait(ctx, "r"); err != nil || res.Status != StatusDone {
		t.Fatalf("round r ended %v (%v); want done", res.Status, err)
	}
	if f := recordedFaults(w.Node, FaultConfigMismatch); len(f) != 0 {
		t.Errorf("faults %+v: a restarting successor's closed connection taken for a refusal", f)
	}
}
