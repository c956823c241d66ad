package chainsync

// Hostile-peer tests over real TCP on 127.0.0.1: a running node is attacked
// on its listening side (a would-be predecessor, or its current predecessor
// connection) and on its dialing side (a fake successor it dials), and must
// (docs/DESIGN.md, "Wire format": "Bad input never kills a node and never
// moves its state"):
//
//   - report it clearly: a Warn log naming the peer and the reason, and a
//     TraceViolation naming the peer;
//   - act on none of it: no state change, no message sent, no task run;
//   - close that connection and keep waiting for a well-behaved neighbour,
//     without crashing, hanging, or leaking goroutines, descriptors or heap;
//   - still run the honest round afterwards, each task exactly once, in
//     chain order, none before every node was ready (the recorder).
//
// Most tests put the node under attack (M) in the middle of a three-node
// chain: the Head is scripted by the test over a raw socket that sends the
// exact right bytes (recorder index 0), M is a real Node (index 1), and the
// Tail is a real Node (index 2) or a fake successor that the test scripts.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// Short limits keep the whole file fast under -race on two cores.
const (
	hostilePending = 400 * time.Millisecond // Config.PendingTimeout
	closeWithin    = 3 * time.Second        // a hostile connection must be closed by then
)

// midFixture is scripted Head (0) -> M (1, under attack) -> real Tail T (2).
type midFixture struct {
	rec   *recorder
	round string
	mid   *watched
	tail  *watched
}

// newMidFixture starts T and M, makes M locally ready for round and waits
// for M's link to T. T is not ready yet, so that the test can hold M in
// READY; tailReady lets the round go on.
func newMidFixture(t *testing.T, round string, tune func(mid, tail *Config, rec *recorder)) *midFixture {
	t.Helper()
	addrs := freeAddrs(t, 2)
	f := &midFixture{rec: newRecorder(3), round: round}
	mc := Config{Name: "M", Listen: addrs[0], Prev: "scripted head", Next: addrs[1],
		Task: f.rec.task(1, 0), PendingTimeout: hostilePending}
	tc := Config{Name: "T", Listen: addrs[1], Prev: addrs[0], Task: f.rec.task(2, 0), PendingTimeout: hostilePending}
	if tune != nil {
		tune(&mc, &tc, f.rec)
	}
	f.tail = startWatched(t, tc)
	f.mid = startWatched(t, mc)
	f.rec.markReady(round, 1)
	if err := f.mid.Ready(round); err != nil {
		t.Fatal(err)
	}
	waitCond(t, 5*time.Second, "M's link to T", func() bool {
		return f.mid.tr.count(traceSideKind(TraceLinkUp, protocol.Succ)) > 0
	})
	return f
}

func (f *midFixture) midAddr() string { return f.mid.Addr().String() }

// headReady is the scripted Head connecting and sending READY; M moves to
// READY and forwards it.
func (f *midFixture) headReady(t *testing.T) *testnet.Peer {
	t.Helper()
	f.rec.markReady(f.round, 0)
	head := testnet.DialPeer(t, f.midAddr(), 5*time.Second)
	recv := f.tail.tr.count(traceKind(TraceReceived))
	head.Send(t, wireLine("READY", f.round))
	f.mid.waitState(t, f.round, protocol.StateReady)
	waitCond(t, 5*time.Second, "T to receive READY", func() bool {
		return f.tail.tr.count(traceKind(TraceReceived)) > recv
	})
	return head
}

// tailReady makes T ready: START comes back and M moves to WATCH.
func (f *midFixture) tailReady(t *testing.T, head *testnet.Peer) {
	t.Helper()
	f.rec.markReady(f.round, 2)
	if err := f.tail.Ready(f.round); err != nil {
		t.Fatal(err)
	}
	head.Expect(t, wireLine("START", f.round))
	f.mid.waitState(t, f.round, protocol.StateWatch)
}

// headFinish runs the scripted Head's task and sends COMPLETE; the round
// must run through M and T and come back, each task exactly once.
func (f *midFixture) headFinish(t *testing.T, head *testnet.Peer) {
	t.Helper()
	if err := f.rec.task(0, 0)(context.Background(), f.round); err != nil {
		t.Fatal(err)
	}
	head.Send(t, wireLine("COMPLETE", f.round))
	head.Expect(t, wireLine("COMPLETE", f.round))
	f.mid.waitDone(t, f.round)
	f.tail.waitDone(t, f.round)
	f.check(t)
}

// check asserts the recorder saw each task exactly once, in chain order,
// none before all three were ready.
func (f *midFixture) check(t *testing.T) {
	t.Helper()
	checkRounds(t, f.rec, f.round, 3)
}

func checkRounds(t *testing.T, rec *recorder, round string, n int) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.errs {
		t.Error(e)
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if got := rec.started[round]; !slices.Equal(got, want) {
		t.Errorf("round %q: tasks started %v, want %v (each exactly once, in chain order)", round, got, want)
	}
}

// expectQuiet snapshots what the nodes have done and returns a check that they
// have done nothing since: same round state, no state change, no message
// sent, no task, and nothing forwarded to (received by) the others.
func expectQuiet(t *testing.T, round string, w *watched, others ...*watched) func(what string) {
	t.Helper()
	st, act := w.state(round), w.tr.activity()
	var recv []int
	for _, o := range others {
		recv = append(recv, o.tr.count(traceKind(TraceReceived)))
	}
	return func(what string) {
		t.Helper()
		if got := w.state(round); got != st {
			t.Errorf("%s: node %s moved round %q from %s to %s", what, w.name, round, st, got)
		}
		if got := w.tr.activity(); got != act {
			t.Errorf("%s: node %s acted (%d new state/send/task events)", what, w.name, got-act)
		}
		for i, o := range others {
			if got := o.tr.count(traceKind(TraceReceived)); got != recv[i] {
				t.Errorf("%s: node %s received %d messages it should not have", what, o.name, got-recv[i])
			}
		}
	}
}

// badInput is one kind of bad input.
type badInput struct {
	name   string
	data   []byte
	reason string // a substring of the reported error
	// legal lists the states of the attacked round in which data is a
	// well-formed, acceptable message (so it is no attack there).
	legal []protocol.State
}

func (p badInput) legalIn(st protocol.State) bool { return slices.Contains(p.legal, st) }

// malformedInputs returns wire-grammar violations (docs/DESIGN.md, "Wire format":
// line longer than 256 bytes, unknown command, malformed round-id, NUL or
// control byte), usable on either side.
func malformedInputs(rng *rand.Rand) []badInput {
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	tls := append([]byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), random[:501]...)
	const kib = 1 << 10
	return []badInput{
		{name: "garbage/http", data: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), reason: "unknown command"},
		{name: "garbage/tls-hello", data: tls, reason: "malformed line"},
		{name: "garbage/random-4KiB", data: random, reason: "malformed line"},
		{name: "garbage/ssh-banner", data: []byte("SSH-2.0-OpenSSH_9.6\r\n"), reason: "unknown command"},
		{name: "overlong/64KiB+LF", data: append(bytes.Repeat([]byte("A"), 64*kib), '\n'), reason: "line longer than 256 bytes"},
		{name: "overlong/64KiB-noLF", data: bytes.Repeat([]byte("A"), 64*kib), reason: "line longer than 256 bytes"},
		{name: "overlong/1MiB+LF", data: append(bytes.Repeat([]byte("READY"), 1<<20/5), '\n'), reason: "line longer than 256 bytes"},
		{name: "overlong/1MiB-noLF", data: bytes.Repeat([]byte("READY:r"), 1<<20/7), reason: "line longer than 256 bytes"},
		{name: "overlong/257", data: append(bytes.Repeat([]byte("A"), 257), '\n'), reason: "line longer than 256 bytes"},
		{name: "round/256-byte-line", data: []byte("READY:" + strings.Repeat("a", 250) + "\n"), reason: "invalid round id"},
		{name: "round/129", data: []byte("READY:" + strings.Repeat("a", 129) + "\n"), reason: "invalid round id"},
		{name: "round/slash", data: []byte("READY:a/b\n"), reason: "invalid round id"},
		{name: "round/utf8", data: []byte("READY:r\u00e9\n"), reason: "invalid round id"},
		{name: "ctl/NUL-in-command", data: []byte("READ\x00Y\n"), reason: `NUL or control byte: "READ\x00Y"`},
		{name: "ctl/NUL-only", data: []byte("\x00\x00\x00\x00\n"), reason: "NUL or control byte"},
		{name: "ctl/ESC-in-round", data: []byte("READY:\x1b[2J\n"), reason: `"READY:\x1b[2J"`},
		{name: "ctl/DEL", data: []byte("READY\x7f\n"), reason: "NUL or control byte"},
		{name: "ctl/TAB", data: []byte("READY:\tr\n"), reason: "NUL or control byte"},
		{name: "ctl/two-CR", data: []byte("READY\r\r\n"), reason: "NUL or control byte"},
		{name: "ctl/bare-CR-line", data: []byte("READY\rSTART\n"), reason: "NUL or control byte"},
		{name: "cmd/empty-line", data: []byte("\n"), reason: "unknown command"},
		{name: "cmd/lower-case", data: []byte("ready\n"), reason: "unknown command"},
		{name: "cmd/trailing-space", data: []byte("READY \n"), reason: "unknown command"},
		{name: "cmd/unknown", data: []byte("ABORT\n"), reason: "unknown command"},
	}
}

// attackPred opens a fresh connection to the node's listener (a would-be
// predecessor: pending until its first line is accepted), sends p and
// checks that the node reports it, closes the connection and does nothing
// else.
func attackPred(t *testing.T, w *watched, round string, p badInput, others ...*watched) {
	t.Helper()
	predUp := w.predUp()
	downs := w.tr.count(traceSideKind(TraceLinkDown, protocol.Pred))
	check := expectQuiet(t, round, w, others...)
	ups := w.tr.count(traceSideKind(TraceLinkUp, protocol.Pred))
	st := w.state(round)
	m := w.mark()
	c := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	_ = c.TrySend(p.data)
	reported := w.expectViolation(t, m, protocol.Pred, c.Addr(), p.reason)
	checkReport(t, p, reported, round, st)
	c.AwaitClosed(t, closeWithin)
	check(p.name + " from a would-be predecessor")
	if got := w.predUp(); got != predUp {
		t.Errorf("%s: the current predecessor link changed (up %v -> %v)", p.name, predUp, got)
	}
	if got := w.tr.count(traceSideKind(TraceLinkDown, protocol.Pred)); got != downs {
		t.Errorf("%s: the current predecessor connection was dropped", p.name)
	}
	if got := w.tr.count(traceSideKind(TraceLinkUp, protocol.Pred)); got != ups {
		t.Errorf("%s: the hostile connection became the predecessor link", p.name)
	}
}

// checkReport checks what a violation report says beyond the reason: a
// wrong-state message names the round's state, and offending bytes are
// quoted and truncated (docs/DESIGN.md "Wire format": "peer address, round,
// state, the offending bytes escaped and truncated").
func checkReport(t *testing.T, p badInput, reported, round string, st protocol.State) {
	t.Helper()
	if len(reported) > 300 {
		t.Errorf("%s: report of %d bytes: the offending bytes are not truncated: %.100q...", p.name, len(reported), reported)
	}
	if strings.HasPrefix(p.name, "overlong/") && !strings.Contains(reported, "truncated") {
		t.Errorf("%s: report %q does not say the line was truncated", p.name, reported)
	}
	// A well-formed line for the attacked round must be reported with
	// that round's state.
	msg, err := wire.Parse(bytes.TrimSuffix(p.data, []byte("\n")))
	if err == nil && msg.Round == round && st != 0 {
		if want := "(state " + st.String() + ")"; !strings.Contains(reported, want) {
			t.Errorf("%s: report %q does not name the round's state %s", p.name, reported, want)
		}
	}
}

// predCommands are well-formed lines that are violations from the
// predecessor in some states (docs/DESIGN.md, "Wire format": a message legal
// on the wire but impossible in the receiver's state).
func predCommands() []badInput {
	return []badInput{
		{name: "state/START-from-pred", data: []byte("START\n"), reason: "START travels backward"},
		{name: "state/START-named-from-pred", data: []byte("START:x\n"), reason: "START travels backward"},
		{name: "state/COMPLETE-before-WATCH", data: []byte("COMPLETE\n"), reason: "before this node is in WATCH",
			legal: []protocol.State{protocol.StateWatch}},
		{name: "state/COMPLETE-unknown-round", data: []byte("COMPLETE:nosuch\n"), reason: "has not seen"},
		{name: "state/COMPLETE-colon-before-WATCH", data: []byte("COMPLETE:\r\n"), reason: "before this node is in WATCH",
			legal: []protocol.State{protocol.StateWatch}},
	}
}

// TestHostilePredecessorInput attacks the middle node's listening side with
// every bad input, in every state of the round: before the predecessor
// connects (SYNC), with the honest predecessor connected (READY, WATCH),
// and on the honest predecessor's own connection (WATCH), which must then
// reconnect. docs/DESIGN.md "Wire format" (violations; bad input never moves
// state) and "Roles and connections" (pending connections never displace
// the real predecessor; reconnect and re-send).
func TestHostilePredecessorInput(t *testing.T) {
	seed := rand.Uint64()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed %d", seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 2))
	payloads := append(malformedInputs(rng), predCommands()...)
	checkNoLeaks(t)
	for _, p := range payloads {
		t.Run(p.name, func(t *testing.T) {
			checkNoLeaks(t)
			f := newMidFixture(t, "", nil)

			// A: no predecessor yet; M is locally ready, in SYNC.
			attackPred(t, f.mid, "", p, f.tail)

			// B: the honest Head is connected; M is in READY (T not ready).
			head := f.headReady(t)
			attackPred(t, f.mid, "", p, f.tail)
			head.Quiet(t, 20*time.Millisecond)

			// C: M in WATCH, waiting for the Head's COMPLETE.
			f.tailReady(t, head)
			if !p.legalIn(protocol.StateWatch) {
				attackPred(t, f.mid, "", p, f.tail)

				// D: the Head's own, established connection sends it. M
				// drops that connection (and only it), state unchanged;
				// the Head reconnects and re-sends its last message
				// (READY), which is an exact duplicate: a no-op that
				// promotes the new connection, and M re-sends START.
				check := expectQuiet(t, "", f.mid, f.tail)
				m := f.mid.mark()
				_ = head.TrySend(p.data)
				checkReport(t, p, f.mid.expectViolation(t, m, protocol.Pred, head.Addr(), p.reason), "", protocol.StateWatch)
				head.AwaitClosed(t, closeWithin)
				check(p.name + " on the established predecessor connection")
				head = testnet.DialPeer(t, f.midAddr(), 5*time.Second)
				head.Send(t, "READY\n")
				head.Expect(t, "START\n")
			}
			f.headFinish(t, head)
		})
	}
}

// TestHostileSuccessorInput attacks the middle node's dialing side: it
// dials a fake successor, which sends bad input in SYNC, READY and WATCH.
// Each time M must report it, close the connection, keep the round's state,
// re-dial, and re-send its last message to the new connection; then the
// fake successor behaves and the round completes. docs/DESIGN.md "Wire
// format" (violations, "re-dialing, if it is the dialing side") and
// "Roles and connections" (reconnects).
func TestHostileSuccessorInput(t *testing.T) {
	seed := rand.Uint64()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed %d", seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 3))
	payloads := append(malformedInputs(rng),
		badInput{name: "state/READY-from-succ", data: []byte("READY\n"), reason: "READY travels forward"},
		badInput{name: "state/READY-named-from-succ", data: []byte("READY:x\n"), reason: "READY travels forward"},
		badInput{name: "state/START-before-READY", data: []byte("START\n"), reason: "START before this node sent READY",
			legal: []protocol.State{protocol.StateReady, protocol.StateWatch}},
		badInput{name: "state/START-unknown-round", data: []byte("START:nosuch\n"), reason: "has not sent READY for"},
		badInput{name: "state/COMPLETE-before-completing", data: []byte("COMPLETE\n"), reason: "before this node completed"},
		badInput{name: "state/COMPLETE-unknown-round", data: []byte("COMPLETE:nosuch\n"), reason: "has not seen"},
	)
	checkNoLeaks(t)
	for _, p := range payloads {
		t.Run(p.name, func(t *testing.T) {
			checkNoLeaks(t)
			rec := newRecorder(3)
			succ := testnet.ListenPeer(t)
			mid := startWatched(t, Config{Name: "M", Listen: "127.0.0.1:0", Prev: "scripted head", Next: succ.Addr(),
				Task: rec.task(1, 0), PendingTimeout: hostilePending})
			rec.markReady("", 1)
			if err := mid.Ready(""); err != nil {
				t.Fatal(err)
			}
			s := succ.Accept(t, 5*time.Second)

			// attack sends p on the current successor connection s (M in
			// state st), checks the report, and returns M's next
			// connection, on which M must re-send resend.
			attack := func(s *testnet.Peer, st protocol.State, head *testnet.Peer, resend string) *testnet.Peer {
				t.Helper()
				if p.legalIn(st) {
					return s
				}
				check := expectQuiet(t, "", mid)
				m := mid.mark()
				_ = s.TrySend(p.data)
				checkReport(t, p, mid.expectViolation(t, m, protocol.Succ, succ.Addr(), p.reason), "", st)
				s.AwaitClosed(t, closeWithin)
				check(fmt.Sprintf("%s from the successor in %s", p.name, st))
				if head != nil {
					head.Quiet(t, 10*time.Millisecond)
				}
				s = succ.Accept(t, 5*time.Second)
				if resend != "" {
					s.Expect(t, resend)
				}
				return s
			}

			// SYNC: nothing sent to the successor yet.
			s = attack(s, protocol.StateSync, nil, "")

			// READY: the honest Head connects; M forwards READY.
			rec.markReady("", 0)
			head := testnet.DialPeer(t, mid.Addr().String(), 5*time.Second)
			head.Send(t, "READY\n")
			s.Expect(t, "READY\n")
			mid.waitState(t, "", protocol.StateReady)
			s = attack(s, protocol.StateReady, head, "READY\n")

			// WATCH: the fake successor sends START.
			rec.markReady("", 2)
			s.Send(t, "START\n")
			head.Expect(t, "START\n")
			mid.waitState(t, "", protocol.StateWatch)
			s = attack(s, protocol.StateWatch, head, "READY\n")

			// The honest rest of the round.
			if err := rec.task(0, 0)(context.Background(), ""); err != nil {
				t.Fatal(err)
			}
			head.Send(t, "COMPLETE\n")
			s.Expect(t, "COMPLETE\n")
			if err := rec.task(2, 0)(context.Background(), ""); err != nil {
				t.Fatal(err)
			}
			s.Send(t, "COMPLETE\n")
			head.Expect(t, "COMPLETE\n")
			mid.waitDone(t, "")
			checkRounds(t, rec, "", 3)
		})
	}
}

// TestHostileHeadSuccessor: the Head only dials. A fake successor feeds it
// bad input over successive connections; the Head reports each, re-dials,
// re-sends READY, and then runs its task exactly once when START arrives.
// docs/DESIGN.md "Wire format" and "State machine" (Head never enters WATCH).
func TestHostileHeadSuccessor(t *testing.T) {
	checkNoLeaks(t)
	rng := rand.New(rand.NewPCG(1, 4))
	rec := newRecorder(2)
	succ := testnet.ListenPeer(t)
	head := startWatched(t, Config{Name: "H", Next: succ.Addr(), Task: rec.task(0, 0)})
	rec.markReady("r1", 0)
	if err := head.Ready("r1"); err != nil {
		t.Fatal(err)
	}
	s := succ.Accept(t, 5*time.Second)
	s.Expect(t, "READY:r1\n")
	var attacks []badInput
	for _, p := range malformedInputs(rng) {
		if strings.HasPrefix(p.name, "garbage/") || strings.HasPrefix(p.name, "overlong/1MiB") || strings.HasPrefix(p.name, "ctl/NUL") {
			attacks = append(attacks, p)
		}
	}
	attacks = append(attacks,
		badInput{name: "READY-from-succ", data: []byte("READY:r1\n"), reason: "READY travels forward"},
		badInput{name: "COMPLETE-before-completing", data: []byte("COMPLETE:r1\n"), reason: "before this node completed"},
		badInput{name: "START-unknown-round", data: []byte("START:r2\n"), reason: "has not sent READY for"},
		badInput{name: "START-unnamed-round", data: []byte("START\n"), reason: "has not sent READY for"},
	)
	for _, p := range attacks {
		check := expectQuiet(t, "r1", head)
		m := head.mark()
		_ = s.TrySend(p.data)
		checkReport(t, p, head.expectViolation(t, m, protocol.Succ, succ.Addr(), p.reason), "r1", protocol.StateReady)
		s.AwaitClosed(t, closeWithin)
		check(p.name)
		s = succ.Accept(t, 5*time.Second)
		s.Expect(t, "READY:r1\n")
	}
	rec.mu.Lock()
	early := rec.started["r1"]
	rec.mu.Unlock()
	if len(early) != 0 {
		t.Fatalf("Head task ran before START: %v", early)
	}
	// The honest successor (a scripted Tail).
	rec.markReady("r1", 1)
	s.Send(t, "START:r1\n")
	s.Expect(t, "COMPLETE:r1\n")
	if err := rec.task(1, 0)(context.Background(), "r1"); err != nil {
		t.Fatal(err)
	}
	s.Send(t, "COMPLETE:r1\n")
	head.waitDone(t, "r1")
	checkRounds(t, rec, "r1", 2)
	t.Logf("Head survived %d violations", head.violations())
}

// TestHostileTailListener: the Tail only listens. Would-be predecessors
// send bad input and wrong-state commands in SYNC and in WATCH; the honest
// predecessor then runs the round. docs/DESIGN.md "Wire format" and "State
// machine" (Tail: SYNC -> READY -> WATCH immediately).
func TestHostileTailListener(t *testing.T) {
	checkNoLeaks(t)
	rng := rand.New(rand.NewPCG(1, 5))
	rec := newRecorder(2)
	tail := startWatched(t, Config{Name: "T", Listen: "127.0.0.1:0", Task: rec.task(1, 0), PendingTimeout: hostilePending})
	rec.markReady("", 1)
	if err := tail.Ready(""); err != nil {
		t.Fatal(err)
	}
	var attacks []badInput
	for _, p := range malformedInputs(rng) {
		if strings.HasPrefix(p.name, "garbage/") || strings.HasPrefix(p.name, "overlong/") || strings.HasPrefix(p.name, "ctl/") {
			attacks = append(attacks, p)
		}
	}
	attacks = append(attacks, predCommands()...)
	for _, p := range attacks {
		attackPred(t, tail, "", p)
	}
	// The honest predecessor: READY; the Tail answers START and waits in
	// WATCH.
	rec.markReady("", 0)
	pred := testnet.DialPeer(t, tail.Addr().String(), 5*time.Second)
	pred.Send(t, "READY\n")
	pred.Expect(t, "START\n")
	tail.waitState(t, "", protocol.StateWatch)
	for _, p := range attacks {
		if !p.legalIn(protocol.StateWatch) {
			attackPred(t, tail, "", p)
		}
	}
	if err := rec.task(0, 0)(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	pred.Send(t, "COMPLETE\n")
	pred.Expect(t, "COMPLETE\n")
	tail.waitDone(t, "")
	checkRounds(t, rec, "", 2)
}

// TestHostileDuplicates: exact duplicates of messages already acted on are
// no-ops, in every state, from both sides, whether sent back to back in one
// segment or later (docs/DESIGN.md "Roles and connections": "Receivers treat
// an exact duplicate of a message they already acted on as a no-op").
func TestHostileDuplicates(t *testing.T) {
	checkNoLeaks(t)
	t.Run("from-predecessor", func(t *testing.T) {
		f := newMidFixture(t, "d1", nil)
		f.rec.markReady("d1", 0)
		head := testnet.DialPeer(t, f.midAddr(), 5*time.Second)
		head.Send(t, "READY:d1\nREADY:d1\nREADY:d1\n")
		f.mid.waitState(t, "d1", protocol.StateReady)
		waitCond(t, 5*time.Second, "T to receive READY", func() bool {
			return f.tail.tr.count(traceKind(TraceReceived)) > 0
		})
		// A fourth READY as a barrier: once M has traced it, M has traced
		// whatever the first three made it send.
		head.Send(t, "READY:d1\n")
		f.mid.waitReceived(t, protocol.Pred, 4)
		if n := f.mid.tr.count(traceSideKind(TraceSent, protocol.Succ)); n != 1 {
			t.Errorf("M sent %d messages to T for 3 READYs, want exactly 1", n)
		}
		if n := f.tail.tr.count(traceKind(TraceReceived)); n != 1 {
			t.Errorf("T received %d messages after 3 READYs to M, want exactly 1", n)
		}
		f.tailReady(t, head)
		// In WATCH: the READY again, twice (and once more as a barrier).
		check := expectQuiet(t, "d1", f.mid, f.tail)
		recv := f.mid.tr.count(traceSideKind(TraceReceived, protocol.Pred))
		head.Send(t, "READY:d1\nREADY:d1\n")
		head.Send(t, "READY:d1\n")
		f.mid.waitReceived(t, protocol.Pred, recv+3)
		check("duplicate READY in WATCH")
		head.Quiet(t, 30*time.Millisecond)
		// COMPLETE three times in one segment: the task runs once.
		if err := f.rec.task(0, 0)(context.Background(), "d1"); err != nil {
			t.Fatal(err)
		}
		head.Send(t, "COMPLETE:d1\nCOMPLETE:d1\nCOMPLETE:d1\n")
		head.Expect(t, "COMPLETE:d1\n")
		f.mid.waitDone(t, "d1")
		f.tail.waitDone(t, "d1")
		// After the round is done, a COMPLETE re-sent by a predecessor
		// that may have missed the exit wave gets the exit wave again and
		// nothing else.
		head.Send(t, "COMPLETE:d1\nREADY:d1\n")
		head.Expect(t, "COMPLETE:d1\n")
		// The same COMPLETE again as a barrier: its reply is the next
		// thing on the wire only if the READY got none.
		head.Send(t, "COMPLETE:d1\n")
		head.Expect(t, "COMPLETE:d1\n")
		head.Quiet(t, 30*time.Millisecond)
		f.check(t)
		if v := f.mid.violations() + f.tail.violations(); v != 0 {
			t.Errorf("duplicates were reported as %d violations", v)
		}
		if n := f.mid.tr.count(func(ev TraceEvent) bool {
			return ev.Kind == TraceSent && ev.Side == protocol.Succ && ev.Msg.Cmd == protocol.Complete
		}); n != 1 {
			t.Errorf("M sent COMPLETE to T %d times, want 1", n)
		}
	})
	t.Run("from-successor", func(t *testing.T) {
		rec := newRecorder(3)
		succ := testnet.ListenPeer(t)
		mid := startWatched(t, Config{Name: "M", Listen: "127.0.0.1:0", Next: succ.Addr(), Task: rec.task(1, 0)})
		for i := range 3 {
			rec.markReady("", i)
		}
		if err := mid.Ready(""); err != nil {
			t.Fatal(err)
		}
		s := succ.Accept(t, 5*time.Second)
		head := testnet.DialPeer(t, mid.Addr().String(), 5*time.Second)
		head.Send(t, "READY\n")
		s.Expect(t, "READY\n")
		s.Send(t, "START\nSTART\nSTART\n")
		head.Expect(t, "START\n")
		// A fourth START as a barrier (see waitReceived).
		s.Send(t, "START\n")
		mid.waitReceived(t, protocol.Succ, 4)
		if n := mid.tr.count(traceSideKind(TraceSent, protocol.Pred)); n != 1 {
			t.Errorf("M sent %d messages to its predecessor for a START received 3 times, want exactly 1", n)
		}
		head.Quiet(t, 30*time.Millisecond)
		mid.waitState(t, "", protocol.StateWatch)
		if err := rec.task(0, 0)(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		head.Send(t, "COMPLETE\n")
		s.Expect(t, "COMPLETE\n")
		if err := rec.task(2, 0)(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		recv := mid.tr.count(traceSideKind(TraceReceived, protocol.Succ))
		s.Send(t, "COMPLETE\nCOMPLETE\nSTART\n")
		head.Expect(t, "COMPLETE\n")
		s.Send(t, "START\n") // a barrier (see waitReceived)
		mid.waitReceived(t, protocol.Succ, recv+4)
		if n := mid.tr.count(traceSideKind(TraceSent, protocol.Pred)); n != 2 {
			t.Errorf("M sent %d messages to its predecessor in all, want 2 (START, COMPLETE)", n)
		}
		head.Quiet(t, 30*time.Millisecond)
		mid.waitDone(t, "")
		checkRounds(t, rec, "", 3)
		if v := mid.violations(); v != 0 {
			t.Errorf("duplicates were reported as %d violations", v)
		}
	})
}

// TestHostileSlowloris: would-be predecessors that trickle a line one byte
// at a time, or send nothing at all, are closed PendingTimeout after they
// connected, however they pace their bytes (the deadline is absolute, not
// per read), and are reported; meanwhile the honest predecessor connects
// and the round runs. docs/DESIGN.md "Roles and connections": "until then it
// is pending, so a stray client ... that sends nothing ... never displaces
// the real predecessor".
func TestHostileSlowloris(t *testing.T) {
	checkNoLeaks(t)
	f := newMidFixture(t, "", nil)
	type attacker struct {
		name   string
		every  time.Duration // 0: sends nothing
		c      *testnet.Peer
		closed chan time.Duration
	}
	attackers := []*attacker{
		{name: "100ms-per-byte", every: 100 * time.Millisecond},
		{name: "1s-per-byte", every: time.Second},
		{name: "silent"},
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, a := range attackers {
		a.c = testnet.DialPeer(t, f.midAddr(), 5*time.Second)
		a.closed = make(chan time.Duration, 1)
		start := time.Now()
		wg.Add(2)
		go func() { // when does the node close it?
			defer wg.Done()
			select {
			case <-a.c.Ended():
			case <-time.After(time.Until(start.Add(closeWithin))):
			}
			a.closed <- time.Since(start)
		}()
		go func() { // "READY\n", one byte at a time: done at 6*every
			defer wg.Done()
			if a.every == 0 {
				return
			}
			for i := range len("READY\n") {
				if a.c.TrySend([]byte{"READY\n"[i]}) != nil {
					return
				}
				select {
				case <-time.After(a.every):
				case <-stop:
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	// Meanwhile, the honest round goes on up to WATCH.
	head := f.headReady(t)
	f.tailReady(t, head)
	check := expectQuiet(t, "", f.mid, f.tail)

	for _, a := range attackers {
		d := recvWithin(t, a.closed, 2*closeWithin, a.name+" to be closed")
		t.Logf("%s: closed after %v (PendingTimeout %v)", a.name, d.Round(time.Millisecond), hostilePending)
		if d < hostilePending-20*time.Millisecond || d > hostilePending+time.Second {
			t.Errorf("%s: closed after %v, want about PendingTimeout %v", a.name, d, hostilePending)
		}
		peer := a.c.Addr()
		waitCond(t, 2*time.Second, a.name+" to be reported", func() bool {
			return f.mid.logs.count(func(e capturedLog) bool {
				return e.Level == slog.LevelWarn && e.Attrs["peer"] == peer && strings.Contains(e.Msg, "no protocol line in time")
			}) == 1
		})
	}
	check("slowloris")
	if !f.mid.predUp() || f.mid.tr.count(traceSideKind(TraceLinkDown, protocol.Pred)) != 0 {
		t.Error("the honest predecessor was displaced by a slowloris connection")
	}
	if n := f.mid.pendingConns(); n != 0 {
		t.Errorf("%d pending connections left", n)
	}
	f.headFinish(t, head)
}

// TestHostileHalfClosed: connections that send part of a line and then
// close their sending side (FIN). The partial line is never acted on, not
// even a partial "COMPLETE" from the real predecessor while the node waits
// in WATCH; the node closes the connection and reports it; the predecessor
// reconnects and the round completes. docs/DESIGN.md "Wire format" (a line
// ends with LF) and "Roles and connections" (reconnects).
func TestHostileHalfClosed(t *testing.T) {
	checkNoLeaks(t)
	f := newMidFixture(t, "", nil)
	halfClose := func(data string) *testnet.Peer {
		c := testnet.DialPeer(t, f.midAddr(), 5*time.Second)
		_ = c.TrySend([]byte(data))
		if err := c.HangUp(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	pendingCase := func(data string) {
		t.Helper()
		check := expectQuiet(t, "", f.mid, f.tail)
		c := halfClose(data)
		c.AwaitClosed(t, closeWithin)
		peer := c.Addr()
		waitCond(t, 2*time.Second, fmt.Sprintf("half-closed %q to be reported", data), func() bool {
			return f.mid.logs.count(func(e capturedLog) bool {
				return e.Attrs["peer"] == peer && strings.Contains(e.Msg, "closed before sending a protocol line")
			}) == 1
		})
		check(fmt.Sprintf("half-closed after %q", data))
	}
	for _, data := range []string{"", "REA", "START", "COMPLETE", "READY\r"} {
		pendingCase(data)
	}
	head := f.headReady(t)
	pendingCase("COMPLETE")
	f.tailReady(t, head)
	for _, data := range []string{"", "COMPLETE", "COMPLETE\r"} {
		pendingCase(data)
	}

	// The real predecessor sends "COMPLETE" without its LF and half-closes:
	// M must not start its task; it drops the link and waits.
	check := expectQuiet(t, "", f.mid, f.tail)
	_ = head.TrySend([]byte("COMPLETE"))
	if err := head.HangUp(); err != nil {
		t.Fatal(err)
	}
	head.AwaitClosed(t, closeWithin)
	peer := head.Addr()
	waitCond(t, 2*time.Second, "the lost predecessor link to be reported", func() bool {
		return f.mid.logs.count(func(e capturedLog) bool {
			return e.Attrs["peer"] == peer && strings.Contains(e.Msg, "predecessor link down") &&
				strings.Contains(e.Attrs["err"], "unexpected EOF")
		}) == 1
	})
	check("partial COMPLETE then FIN from the predecessor")
	if f.mid.predUp() {
		t.Error("the half-closed predecessor connection is still M's predecessor")
	}
	head = testnet.DialPeer(t, f.midAddr(), 5*time.Second)
	head.Send(t, "READY\n")
	head.Expect(t, "START\n")
	f.headFinish(t, head)
}

// TestHostileJunkAfterRefusedLine: a would-be predecessor sends a refused
// first line and junk after it in the same write. The node reports the
// connection once and closes it; the junk its reader had already taken
// is no second violation (a storm over 101 connections once counted 102).
// docs/DESIGN.md "Bad input": a closed connection is reported once.
func TestHostileJunkAfterRefusedLine(t *testing.T) {
	f := newMidFixture(t, "h", func(m, tl *Config, _ *recorder) {
		m.Rounds = []string{"h"}
		tl.Rounds = []string{"h"}
	})
	head := f.headReady(t)
	f.tailReady(t, head)
	before := f.mid.violations()
	for i := range 2 {
		m := f.mid.mark()
		c := testnet.DialPeer(t, f.midAddr(), 5*time.Second)
		_ = c.TrySend([]byte(fmt.Sprintf("READY:x%d\nJUNK LINE\nREADY\x00\n", i)))
		f.mid.expectViolation(t, m, protocol.Pred, c.Addr(), "round not configured at this node")
		c.AwaitClosed(t, closeWithin)
		c.Close()
	}
	// The second connection's report came after everything the first
	// connection's reader handed the loop: all of it has been judged.
	if v := f.mid.violations() - before; v != 2 {
		t.Errorf("%d violations reported for 2 connections, want one each", v)
	}
	f.headFinish(t, head)
}

// TestHostileRoundStorm: 10,000 READY lines with distinct round ids.
// With Config.Rounds set, each is a violation ("round not configured"): the
// first line of a connection is reported and the connection closed, so a
// storm spread over many connections is reported once per connection and
// never displaces the honest predecessor. Without Config.Rounds, the
// predecessor may open rounds, up to MaxRounds; the line beyond is a
// violation. Either way memory, goroutines and descriptors stay bounded and
// the honest round completes. docs/DESIGN.md "Wire format" (violations) and
// "Named rounds" (a node learns of a round from its predecessor's READY or
// from its own configuration); Config.Rounds, Config.MaxRounds.
func TestHostileRoundStorm(t *testing.T) {
	const lines = 10000
	storm := func(prefix string, from, to int) []byte {
		var b bytes.Buffer
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, "READY:%s%d\n", prefix, i)
		}
		return b.Bytes()
	}
	checkNoLeaks(t)

	t.Run("configured-rounds", func(t *testing.T) {
		f := newMidFixture(t, "h", func(m, tl *Config, _ *recorder) {
			m.Rounds = []string{"h"}
			tl.Rounds = []string{"h"}
		})
		head := f.headReady(t)
		f.tailReady(t, head)
		check := expectQuiet(t, "h", f.mid, f.tail)
		g0, fd0, h0 := runtime.NumGoroutine(), testnet.OpenFDs(t), heapInuseAfterGC()
		maxG, maxFD := 0, 0
		const conns = 100
		attack := func(data []byte) {
			m := f.mid.mark()
			c := testnet.DialPeer(t, f.midAddr(), 5*time.Second)
			_ = c.TrySend(data)
			f.mid.expectViolation(t, m, protocol.Pred, c.Addr(), "round not configured at this node")
			c.AwaitClosed(t, closeWithin)
			c.Close()
			maxG, maxFD = max(maxG, runtime.NumGoroutine()), max(maxFD, testnet.OpenFDs(t))
		}
		attack(storm("s", 0, lines)) // all 10,000 on one connection
		for i := range conns {       // and 10,000 more over 100 connections
			attack(storm(fmt.Sprintf("c%d-", i), 0, lines/conns))
		}
		g1, fd1 := settleResources(t, g0, fd0, "after the storm")
		h1 := heapInuseAfterGC()
		t.Logf("storm of %d lines over %d connections: goroutines %d -> max %d -> %d; fds %d -> max %d -> %d; HeapInuse %.1f MiB -> %.1f MiB",
			2*lines, conns+1, g0, maxG, g1, fd0, maxFD, fd1, toMiB(h0), toMiB(h1))
		if h1 > h0+20<<20 {
			t.Errorf("HeapInuse grew by %.1f MiB", toMiB(h1)-toMiB(h0))
		}
		if v := f.mid.violations(); v != conns+1 {
			t.Errorf("%d violations reported, want one per connection (%d)", v, conns+1)
		}
		check("storm with configured rounds")
		if n := f.mid.active(); n != 1 {
			t.Errorf("%d rounds in progress at M, want 1", n)
		}
		if !f.mid.predUp() || f.mid.tr.count(traceSideKind(TraceLinkDown, protocol.Pred)) != 0 {
			t.Error("the storm displaced the honest predecessor")
		}
		f.headFinish(t, head)
	})

	t.Run("MaxRounds", func(t *testing.T) {
		const maxRounds = 1024 // the default
		f := newMidFixture(t, "h", nil)
		head := f.headReady(t)
		f.tailReady(t, head)
		st, tailRecv := f.mid.state("h"), f.tail.tr.count(traceKind(TraceReceived))
		g0, fd0, h0 := runtime.NumGoroutine(), testnet.OpenFDs(t), heapInuseAfterGC()

		// One connection, 10,000 distinct READYs. Its first line is a
		// well-formed READY, so it becomes M's predecessor connection
		// (docs/DESIGN.md: that is how a restarted predecessor comes back);
		// each READY opens a round that waits for M's local readiness,
		// until MaxRounds; the next READY is a violation.
		m := f.mid.mark()
		c := testnet.DialPeer(t, f.midAddr(), 5*time.Second)
		_ = c.TrySend(storm("s", 0, lines))
		reported := f.mid.expectViolation(t, m, protocol.Pred, c.Addr(), fmt.Sprintf("too many concurrent rounds (limit %d)", maxRounds))
		c.AwaitClosed(t, closeWithin)
		c.Close()
		if want := fmt.Sprintf("READY s%d", maxRounds-1); !strings.Contains(reported, want) {
			t.Errorf("violation %q does not name the offending line %q", reported, want)
		}
		head.AwaitClosed(t, closeWithin) // displaced by the storm's connection
		g1, fd1 := settleResources(t, g0, fd0, "after the storm")
		h1 := heapInuseAfterGC()
		t.Logf("storm of %d lines, MaxRounds %d: goroutines %d -> %d; fds %d -> %d; HeapInuse %.1f MiB -> %.1f MiB",
			lines, maxRounds, g0, g1, fd0, fd1, toMiB(h0), toMiB(h1))
		if h1 > h0+20<<20 {
			t.Errorf("HeapInuse grew by %.1f MiB", toMiB(h1)-toMiB(h0))
		}
		if n := f.mid.active(); n != maxRounds {
			t.Errorf("%d rounds in progress at M, want MaxRounds %d", n, maxRounds)
		}
		if n := f.mid.driverRounds(); n != 1 {
			t.Errorf("the storm grew M's driver round table to %d entries, want 1 (the honest round)", n)
		}
		if got := f.mid.state("h"); got != st {
			t.Errorf("the honest round moved from %s to %s", st, got)
		}
		if n := f.mid.state(fmt.Sprintf("s%d", maxRounds-1)); n != 0 {
			t.Errorf("the round beyond MaxRounds exists, in state %s", n)
		}
		if got := f.tail.tr.count(traceKind(TraceReceived)); got != tailRecv {
			t.Errorf("M forwarded %d messages of the storm to T", got-tailRecv)
		}
		if n := f.mid.tr.count(traceKind(TraceTaskStart)); n != 0 {
			t.Errorf("M ran %d tasks", n)
		}
		// The honest Head reconnects and re-sends READY:h.
		head = testnet.DialPeer(t, f.midAddr(), 5*time.Second)
		head.Send(t, "READY:h\n")
		head.Expect(t, "START:h\n")
		f.headFinish(t, head)
	})
}

// TestHostileConnectionFlood: hundreds of connections to the listen port at
// once. At most MaxPending are pending at any time: each new one evicts the
// oldest idle one (admission.go), and the last ones are closed after
// PendingTimeout. Every one is reported, but the log is rate-limited: a
// few lines one by one, the rest as counts in a summary line. Meanwhile the
// established predecessor connection keeps working (the round runs through
// the flood), and afterwards a new predecessor connection is accepted.
// docs/DESIGN.md "Roles and connections": "Pending connections are bounded in
// number".
func TestHostileConnectionFlood(t *testing.T) {
	const (
		flood      = 400
		maxPending = 16
		pendingTO  = time.Second
	)
	checkNoLeaks(t)
	defer func(d time.Duration) { admitInterval = d }(admitInterval)
	admitInterval = 300 * time.Millisecond
	f := newMidFixture(t, "r1", func(m, _ *Config, _ *recorder) {
		m.MaxPending = maxPending
		m.PendingTimeout = pendingTO
		m.peerLogBurst = admitBurst // this test checks the rate limit itself
	})
	head := f.headReady(t)
	f.tailReady(t, head)
	g0, fd0, h0 := runtime.NumGoroutine(), testnet.OpenFDs(t), heapInuseAfterGC()

	var (
		conns    []net.Conn // plain until the flood is over: a Peer has a goroutine
		peers    = map[string]bool{}
		maxPend  int
		stopPoll = make(chan struct{})
		pollDone = make(chan struct{})
		maxG     atomic.Int64
	)
	go func() { // sample M's pending set and the goroutine count throughout
		defer close(pollDone)
		for {
			p := f.mid.pendingConns()
			if p > maxPend {
				maxPend = p
			}
			if g := int64(runtime.NumGoroutine()); g > maxG.Load() {
				maxG.Store(g)
			}
			select {
			case <-stopPoll:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	start := time.Now()
	for range flood {
		c, err := net.DialTimeout("tcp", f.midAddr(), 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		peers[c.LocalAddr().String()] = true
	}
	dialed := time.Since(start)
	fdFlood := testnet.OpenFDs(t)

	// The node stays responsive: the round runs while the flood is held.
	roundStart := time.Now()
	f.headFinish(t, head)
	roundTook := time.Since(roundStart)

	// Every flood connection is closed by the node: evicted by a newer
	// one, or after PendingTimeout.
	for _, c := range conns {
		rc := testnet.NewPeer(t, c)
		rc.AwaitClosed(t, pendingTO+closeWithin)
		rc.Close()
	}
	close(stopPoll)
	<-pollDone
	isFlood := func(e capturedLog) bool { return peers[e.Attrs["peer"]] }
	var evicted, timedOut, summarized int
	waitCond(t, 3*time.Second, "every flood connection to be reported", func() bool {
		evicted = f.mid.logs.count(func(e capturedLog) bool {
			return isFlood(e) && e.Level == slog.LevelWarn && strings.Contains(e.Msg, "evicted a pending connection") &&
				e.Attrs["limit"] == fmt.Sprint(maxPending) && e.Attrs["stage"] == "sent nothing"
		})
		timedOut = f.mid.logs.count(func(e capturedLog) bool {
			return isFlood(e) && e.Level == slog.LevelWarn && strings.Contains(e.Msg, "no protocol line in time")
		})
		summarized = 0
		f.mid.logs.count(func(e capturedLog) bool {
			if strings.Contains(e.Msg, "would-be predecessors refused, evicted or closed") {
				k, _ := strconv.Atoi(e.Attrs["not_logged"])
				summarized += k
			}
			return false
		})
		return evicted+timedOut+summarized == flood
	})
	if maxPend > maxPending {
		t.Errorf("M had %d pending connections, limit %d", maxPend, maxPending)
	}
	if lines := evicted + timedOut; lines > 6*admitBurst {
		t.Errorf("%d log lines for %d flood connections: not rate-limited (burst %d per kind and interval)", lines, flood, admitBurst)
	}
	g1, fd1 := settleResources(t, g0, fd0, "after the flood")
	h1 := heapInuseAfterGC()
	t.Logf("flood of %d connections dialed in %v: max pending %d (limit %d); logged one by one: evicted %d, timed out %d; in summaries %d; round through the flood took %v",
		flood, dialed.Round(time.Millisecond), maxPend, maxPending, evicted, timedOut, summarized, roundTook.Round(time.Millisecond))
	t.Logf("goroutines %d -> max %d -> %d; fds %d -> %d during (incl. %d client ends) -> %d; HeapInuse %.1f MiB -> %.1f MiB",
		g0, maxG.Load(), g1, fd0, fdFlood, flood, fd1, toMiB(h0), toMiB(h1))
	if g := int(maxG.Load()); g > g0+maxPending+8 {
		t.Errorf("goroutines rose to %d during the flood (baseline %d, MaxPending %d)", g, g0, maxPending)
	}
	if fdFlood > fd0+flood+maxPending+8 {
		t.Errorf("%d descriptors during the flood: the node held more than MaxPending (baseline %d + %d client ends)", fdFlood, fd0, flood)
	}
	if h1 > h0+20<<20 {
		t.Errorf("HeapInuse grew by %.1f MiB", toMiB(h1)-toMiB(h0))
	}

	// After the flood a new predecessor connection is accepted: a second
	// round, on a fresh connection.
	f.round = "r2"
	for i := range 3 {
		f.rec.markReady("r2", i)
	}
	if err := f.mid.Ready("r2"); err != nil {
		t.Fatal(err)
	}
	if err := f.tail.Ready("r2"); err != nil {
		t.Fatal(err)
	}
	head = testnet.DialPeer(t, f.midAddr(), 5*time.Second)
	head.Send(t, "READY:r2\n")
	head.Expect(t, "START:r2\n")
	f.headFinish(t, head)
}

// TestHostileResetScripted: the predecessor connection is aborted with an
// RST (SO_LINGER 0) while M waits in WATCH, and while M's task runs. M
// reports the lost link, keeps its state, runs nothing early or twice; the
// predecessor reconnects and re-sends its last message, an exact duplicate,
// and the round completes. docs/DESIGN.md "Roles and connections":
// "After reconnecting, each side re-sends the last protocol message it sent
// on that link ... So a transient disconnect loses nothing and never
// triggers a task twice."
func TestHostileResetScripted(t *testing.T) {
	checkNoLeaks(t)
	expectLost := func(t *testing.T, w *watched, peer string) {
		t.Helper()
		waitCond(t, 2*time.Second, "the reset to be reported", func() bool {
			return w.logs.count(func(e capturedLog) bool {
				return e.Attrs["peer"] == peer && strings.Contains(e.Msg, "predecessor link down") &&
					strings.Contains(e.Attrs["err"], "reset by peer")
			}) == 1
		})
	}
	t.Run("in-WATCH", func(t *testing.T) {
		f := newMidFixture(t, "", nil)
		head := f.headReady(t)
		f.tailReady(t, head)
		check := expectQuiet(t, "", f.mid, f.tail)
		peer := head.Addr()
		head.Reset()
		expectLost(t, f.mid, peer)
		check("RST in WATCH")
		head = testnet.DialPeer(t, f.midAddr(), 5*time.Second)
		head.Send(t, "READY\n")
		head.Expect(t, "START\n")
		f.headFinish(t, head)
	})
	t.Run("task-running", func(t *testing.T) {
		gate, started := make(chan struct{}), make(chan struct{}, 1)
		f := newMidFixture(t, "", func(m, _ *Config, rec *recorder) {
			task := rec.task(1, 0)
			m.Task = func(ctx context.Context, r string) error {
				if err := task(ctx, r); err != nil {
					return err
				}
				started <- struct{}{}
				select {
				case <-gate:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		})
		head := f.headReady(t)
		f.tailReady(t, head)
		if err := f.rec.task(0, 0)(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		head.Send(t, "COMPLETE\n")
		recvWithin(t, started, 5*time.Second, "M's task to start")
		peer := head.Addr()
		head.Reset()
		expectLost(t, f.mid, peer)
		if st := f.mid.state(""); st != protocol.StateStart {
			t.Fatalf("M in %s, want START", st)
		}
		// The Head re-sends its last message, COMPLETE: a duplicate, not a
		// second task. M re-sends its last message to the Head, START.
		head = testnet.DialPeer(t, f.midAddr(), 5*time.Second)
		head.Send(t, "COMPLETE\n")
		head.Expect(t, "START\n")
		close(gate)
		head.Expect(t, "COMPLETE\n")
		f.mid.waitDone(t, "")
		f.tail.waitDone(t, "")
		f.check(t)
	})
}

// TestHostileResetRealNodes: the same mid-round resets between two real
// nodes (Head H -> M, through a proxy that aborts both TCP connections with
// an RST), while M waits in WATCH (H's task runs) and while M's task runs.
// H re-dials on its own, both sides re-send, and each task runs exactly
// once. docs/DESIGN.md "Roles and connections" (reconnects).
func TestHostileResetRealNodes(t *testing.T) {
	checkNoLeaks(t)
	for _, which := range []int{0, 1} { // whose task is running at the reset
		name := map[int]string{0: "M-in-WATCH", 1: "M-task-running"}[which]
		t.Run(name, func(t *testing.T) {
			rec := newRecorder(3)
			gate, started := make(chan struct{}), make(chan struct{}, 1)
			task := func(i int) func(context.Context, string) error {
				inner := rec.task(i, 0)
				return func(ctx context.Context, r string) error {
					if err := inner(ctx, r); err != nil || i != which {
						return err
					}
					started <- struct{}{}
					select {
					case <-gate:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}
			}
			addrs := freeAddrs(t, 2)
			proxy := newResetProxy(t, addrs[0])
			tail := startWatched(t, Config{Name: "T", Listen: addrs[1], Task: task(2)})
			mid := startWatched(t, Config{Name: "M", Listen: addrs[0], Next: addrs[1], Task: task(1), PendingTimeout: hostilePending})
			head := startWatched(t, Config{Name: "H", Next: proxy.Addr(), Task: task(0)})
			nodes := []*watched{head, mid, tail}
			for i, nd := range nodes {
				rec.markReady("", i)
				if err := nd.Ready(""); err != nil {
					t.Fatal(err)
				}
			}
			recvWithin(t, started, 5*time.Second, "the gated task to start")
			if which == 0 {
				mid.waitState(t, "", protocol.StateWatch)
			}
			stM := mid.state("")
			ups := mid.tr.count(traceSideKind(TraceLinkUp, protocol.Pred))
			proxy.Reset()
			waitCond(t, 5*time.Second, "M to see the reset and H to reconnect", func() bool {
				return mid.tr.count(traceSideKind(TraceLinkDown, protocol.Pred)) >= 1 &&
					mid.tr.count(traceSideKind(TraceLinkUp, protocol.Pred)) > ups
			})
			if got := mid.state(""); got != stM {
				t.Errorf("M moved from %s to %s across the reset", stM, got)
			}
			close(gate)
			for _, nd := range nodes {
				nd.waitDone(t, "")
			}
			checkRounds(t, rec, "", 3)
			for _, nd := range nodes {
				if v := nd.violations(); v != 0 {
					t.Errorf("node %s reported %d violations: re-sent messages must be no-ops", nd.name, v)
				}
			}
			if n := head.tr.count(func(ev TraceEvent) bool { return ev.Kind == TraceSent && ev.Resend }); n == 0 {
				t.Error("H re-sent nothing after reconnecting")
			}
		})
	}
}

// TestHostileRoundSlotsReclaimed: without Config.Rounds, a stray client
// (plain TCP: anyone who can reach the port) fills MaxRounds with READYs
// for rounds this node will never be locally ready for. With PhaseTimeout
// set, those rounds are aborted after it, so the slots come back: Ready
// works and the honest predecessor's READY for the next round is accepted.
// (The first version kept them for ever.) docs/DESIGN.md "Wire format": bad
// input must not stop the node's work.
func TestHostileRoundSlotsReclaimed(t *testing.T) {
	checkNoLeaks(t)
	const maxRounds = 8
	phase := 300 * time.Millisecond
	tail := startWatched(t, Config{Name: "T", Listen: "127.0.0.1:0", MaxRounds: maxRounds, PhaseTimeout: phase,
		PendingTimeout: hostilePending})
	m := tail.mark()
	stray := testnet.DialPeer(t, tail.Addr().String(), 5*time.Second)
	for i := range maxRounds + 1 {
		_ = stray.TrySend([]byte(fmt.Sprintf("READY:junk%d\n", i)))
	}
	tail.expectViolation(t, m, protocol.Pred, stray.Addr(), "too many concurrent rounds")
	stray.AwaitClosed(t, closeWithin)
	// Within far longer than PhaseTimeout, the stray's rounds are gone.
	if !poll(3*phase, 2*time.Millisecond, func() bool { return tail.active() == 0 }) {
		t.Errorf("%d rounds opened by a stray client still hold MaxRounds slots after %v (PhaseTimeout %v)", tail.active(), 3*phase, phase)
	}
	if err := tail.Ready("next"); err != nil {
		t.Errorf("Ready(\"next\"): %v", err)
	}
	// The honest predecessor opens the round "next".
	pred := testnet.DialPeer(t, tail.Addr().String(), 5*time.Second)
	pred.Send(t, "READY:next\n")
	if got, err := pred.Line(2 * time.Second); got != "START:next\n" {
		t.Errorf("honest predecessor's READY:next: got %q, %v, want START:next", got, err)
		if v := tail.tr.find(func(ev TraceEvent) bool { return ev.Kind == TraceViolation && ev.Peer == pred.Addr() }); len(v) > 0 {
			t.Errorf("it was refused as a violation: %v", v[0].Err)
		}
	}
}

// TestHostileRedialBackoff: a successor that accepts and at once sends bad
// input is re-dialed with growing backoff, not in a hot loop at BackoffMin
// (the first version reset the backoff on every successful TCP connect, so
// a misbehaving successor got ~60 dials and Warn lines a second with
// BackoffMin 20ms). docs/DESIGN.md "Roles and connections": "A node dials
// with capped exponential backoff and jitter"; "Wire format": "keeps
// waiting for a well-behaved connection from that neighbour (re-dialing, if
// it is the dialing side)".
func TestHostileRedialBackoff(t *testing.T) {
	checkNoLeaks(t)
	const window = 1500 * time.Millisecond
	succ := testnet.ListenPeer(t)
	head := startWatched(t, Config{Name: "H", Next: succ.Addr(), BackoffMin: 20 * time.Millisecond, BackoffMax: time.Second})
	if err := head.Ready(""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(window)
	dials := 0
	for {
		c, err := succ.TryAccept(t, time.Until(deadline))
		if err != nil {
			break // the window is over
		}
		dials++
		_ = c.TrySend([]byte("GARBAGE\n"))
		c.Close()
	}
	// Backoff from 20ms doubling to 1s, each delay in [d/2, d]: at most
	// 10+20+40+80+160+320+500ms before the 8th dial, so about 8 in 1.5s.
	t.Logf("%d dials in %v, %d violations reported", dials, window, head.violations())
	if dials > 12 {
		t.Errorf("%d dials in %v to a successor that misbehaves at once: the backoff does not grow", dials, window)
	}
	if dials < 2 {
		t.Errorf("only %d dials in %v: the node stopped re-dialing", dials, window)
	}
}

// TestHostilePromotionWriteFailure: a would-be predecessor sends a line
// whose handling writes back at once (COMPLETE for a round that is done
// here: the node re-sends the exit wave) and aborts with an RST right after,
// so that the node's write fails while it promotes the connection. The node
// must end up with its predecessor link down and the ConnectTimeout
// watchdog running, so that the unfinished round faults in time. (The first
// version of handle() called linkUp() after that failed write, which
// stopped the watchdog for a link that was down: the round waited forever.)
// docs/DESIGN.md "Faults" (timeouts) and "Wire format" (bad input never
// moves state). On the simulated network the RST overtakes the node's
// reply every time: the connection is reset just after the line is sent,
// and the network delays the line by 1s and the reset by 2s, so the node
// reads the line, its answer fails at once, and its reader hears of the
// reset a second later.
func TestHostilePromotionWriteFailure(t *testing.T) {
	simulated(t, func(t *testing.T) {
		const connectTO = 300 * time.Millisecond
		const tailHost, predHost, strayHost = "10.0.0.2", "10.0.0.1", "10.0.0.66"
		nw := testnet.NewNetwork()
		ln, err := nw.Listen(tailHost + ":7000")
		if err != nil {
			t.Fatal(err)
		}
		tail := startWatched(t, Config{Name: "T", Listener: ln, Prev: predHost + ":7000", ConnectTimeout: connectTO,
			PendingTimeout: hostilePending})
		for _, r := range []string{"a", "b"} {
			if err := tail.Ready(r); err != nil {
				t.Fatal(err)
			}
		}
		dial := func(host string) *testnet.Peer {
			c, err := nw.Dialer(host)(context.Background(), tailHost+":7000")
			if err != nil {
				t.Fatal(err)
			}
			return testnet.NewPeer(t, c)
		}
		pred := dial(predHost)
		pred.Send(t, "READY:a\nREADY:b\n")
		pred.Expect(t, "START:a\n")
		pred.Expect(t, "START:b\n")
		pred.Send(t, "COMPLETE:a\n")
		pred.Expect(t, "COMPLETE:a\n")
		tail.waitDone(t, "a")
		pred.Close()
		waitCond(t, time.Minute, "the predecessor's close to be seen", func() bool { return !tail.predUp() })

		stray := dial(strayHost)
		peer := stray.Addr()
		nw.SetDelay(time.Second) // the line arrives 1s after it is sent,
		stray.Send(t, "COMPLETE:a\n")
		nw.SetDelay(2 * time.Second) // the RST after 2s, the answer fails at once
		nw.Reset(strayHost)
		waitCond(t, 2*time.Second, "the stray connection to end", func() bool {
			return tail.tr.count(func(ev TraceEvent) bool {
				return ev.Peer == peer && ev.Kind == TraceLinkDown
			}) > 0 && tail.pendingConns() == 0
		})
		if tail.logs.count(func(e capturedLog) bool {
			return e.Attrs["peer"] == peer && strings.Contains(e.Msg, "write failed")
		}) == 0 {
			t.Fatalf("the node's answer to the stray did not fail; its log:\n%s", tail.logs.tail(20))
		}
		if tail.predUp() {
			t.Error("the stray's dead connection is the predecessor link")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*connectTO)
		res, err := tail.Wait(ctx, "b")
		cancel()
		if err != nil {
			t.Errorf("no predecessor is connected, yet round b did not fault within %v (ConnectTimeout %v): %v",
				5*connectTO, connectTO, err)
		} else if res.Status != StatusFault {
			t.Errorf("round b: %v, want fault", res)
		}
	})
}
