package protocol_test

import (
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

const sec = time.Second

// at stamps ev with the time at.
func at(ev protocol.Event, t time.Duration) protocol.Event {
	ev.At = t
	return ev
}

func timeouts(acts []protocol.Action) []protocol.Action {
	var out []protocol.Action
	for _, a := range acts {
		if a.Kind == protocol.ActTimeout {
			out = append(out, a)
		}
	}
	return out
}

func tick(t *testing.T, m *protocol.Machine, now time.Duration, heard [3]time.Duration) []protocol.Action {
	t.Helper()
	return step(t, m, protocol.Tick(now, heard, false))
}

// Phase timeout (docs/DESIGN.md, "Time"; draft, Security Considerations:
// a node that never answers must not hold the chain for ever): a round
// waiting for a neighbour in one state times out once, PhaseTimeout after
// it entered that state; a new state arms it again; a round over has none.
func TestPhaseTimeout(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Middle, PhaseTimeout: 10 * sec, Policy: protocol.PolicyWait})
	step(t, m, at(protocol.LinkUp(protocol.Pred), 1*sec))
	step(t, m, at(protocol.LinkUp(protocol.Succ), 1*sec))
	step(t, m, at(protocol.LocalReady("r"), 2*sec)) // SYNC: waits for READY
	if got := timeouts(tick(t, m, 11*sec, [3]time.Duration{})); len(got) != 0 {
		t.Fatalf("timed out early: %v", got)
	}
	got := timeouts(tick(t, m, 12*sec, [3]time.Duration{}))
	if len(got) != 1 || got[0].Timeout != protocol.TimeoutPhase || got[0].Round != "r" || got[0].Wait != protocol.WaitReady ||
		got[0].To != protocol.Pred || got[0].From != protocol.StateSync || got[0].After != 10*sec {
		t.Fatalf("phase timeout: %+v", got)
	}
	if again := timeouts(tick(t, m, 30*sec, [3]time.Duration{})); len(again) != 0 {
		t.Fatalf("timed out twice in one state: %+v", again)
	}
	step(t, m, at(recv(protocol.Pred, protocol.Ready, "r"), 31*sec)) // READY: waits for START
	if got := timeouts(tick(t, m, 40*sec, [3]time.Duration{})); len(got) != 0 {
		t.Fatalf("new state timed out early: %+v", got)
	}
	got = timeouts(tick(t, m, 41*sec, [3]time.Duration{}))
	if len(got) != 1 || got[0].Wait != protocol.WaitStart || got[0].To != protocol.Succ {
		t.Fatalf("phase timeout in READY: %+v", got)
	}
	step(t, m, protocol.Abort("r"))
	if got := timeouts(tick(t, m, 100*sec, [3]time.Duration{})); len(got) != 0 {
		t.Fatalf("a round over timed out: %+v", got)
	}
}

// A round the predecessor opened and this node never claims times out
// waiting for this node itself (Wait is WaitLocal), so it cannot hold a
// MaxRounds slot for ever.
func TestPhaseTimeoutUnclaimed(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Tail, PhaseTimeout: 5 * sec})
	step(t, m, at(recv(protocol.Pred, protocol.Ready, "r"), 1*sec))
	got := timeouts(tick(t, m, 6*sec, [3]time.Duration{}))
	if len(got) != 1 || got[0].Wait != protocol.WaitLocal || got[0].To != 0 {
		t.Fatalf("unclaimed round: %+v", got)
	}
}

// A round restored before the machine knew the time counts its phase from
// the first time it learns.
func TestPhaseTimeoutRestored(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Tail, PhaseTimeout: 5 * sec})
	if err := m.Restore(protocol.Record{Round: "r", State: protocol.StateWatch, LocalReady: true, PredReady: true, LastPred: protocol.Start, RecvPred: protocol.Ready, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	tick(t, m, 100*sec, [3]time.Duration{})
	if got := timeouts(tick(t, m, 104*sec, [3]time.Duration{})); len(got) != 0 {
		t.Fatalf("restored round timed out from time zero: %+v", got)
	}
	if got := timeouts(tick(t, m, 105*sec, [3]time.Duration{})); len(got) != 1 || got[0].Wait != protocol.WaitComplete {
		t.Fatalf("restored round: %+v", got)
	}
}

// Exit wave (docs/DESIGN.md, "Restarts and durable state"): a round done
// here whose final COMPLETE is not handed over within ExitWaveTimeout
// ends NotDelivered; one handed over in time is done.
func TestExitWaveTimeout(t *testing.T) {
	for _, deliver := range []bool{false, true} {
		m := protocol.New(protocol.Config{Role: protocol.Tail, ExitWaveTimeout: 3 * sec})
		step(t, m, at(recv(protocol.Pred, protocol.Ready, "r"), 1*sec))
		step(t, m, at(protocol.LocalReady("r"), 1*sec))
		step(t, m, at(recv(protocol.Pred, protocol.Complete, "r"), 1*sec))
		step(t, m, at(protocol.TaskDone("r", false), 2*sec)) // DONE, handing over
		if deliver {
			step(t, m, at(protocol.Delivered("r"), 3*sec))
		}
		tick(t, m, 4*sec, [3]time.Duration{})
		acts := tick(t, m, 5*sec, [3]time.Duration{})
		gaveUp := len(acts) == 1 && acts[0].Kind == protocol.ActDone && acts[0].Outcome == protocol.NotDelivered
		if gaveUp == deliver || m.Active() != 0 && deliver {
			t.Fatalf("delivered=%v: %+v, active %d", deliver, acts, m.Active())
		}
	}
}

// Heartbeat silence (docs/DESIGN.md, "Heartbeats"): a neighbour on an up
// link that sent nothing for Silence while a round is in progress is
// reported once; a line from it ends the silence; nothing is reported
// with no round in progress, before either side spoke, or for the time
// this node itself was stopped (Resumed).
func TestSilence(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Head, Silence: 3 * sec, Policy: protocol.PolicyWait})
	step(t, m, at(protocol.LinkUp(protocol.Succ), 1*sec))
	if got := timeouts(tick(t, m, 10*sec, [3]time.Duration{})); len(got) != 0 {
		t.Fatalf("silence with nothing in progress and nothing said: %+v", got)
	}
	step(t, m, at(protocol.LocalReady("r"), 10*sec)) // sends READY: spoke at 10s
	if got := timeouts(tick(t, m, 12*sec, [3]time.Duration{})); len(got) != 0 {
		t.Fatalf("early: %+v", got)
	}
	got := timeouts(tick(t, m, 13*sec, [3]time.Duration{}))
	if len(got) != 1 || got[0].Timeout != protocol.TimeoutSilence || got[0].To != protocol.Succ || got[0].After != 3*sec {
		t.Fatalf("silence: %+v", got)
	}
	if again := timeouts(tick(t, m, 20*sec, [3]time.Duration{})); len(again) != 0 {
		t.Fatalf("reported twice: %+v", again)
	}
	// A heartbeat (Heard) ends it; silence again is reported again.
	tick(t, m, 21*sec, [3]time.Duration{protocol.Succ: 21 * sec})
	if got := timeouts(tick(t, m, 23*sec, [3]time.Duration{protocol.Succ: 21 * sec})); len(got) != 0 {
		t.Fatalf("early after a heartbeat: %+v", got)
	}
	if got := timeouts(tick(t, m, 24*sec, [3]time.Duration{protocol.Succ: 21 * sec})); len(got) != 1 {
		t.Fatalf("second silence: %+v", got)
	}
	// The node itself was stopped: silence counts from when it resumed.
	step(t, m, at(recv(protocol.Succ, protocol.Start, "r"), 25*sec))
	step(t, m, protocol.Tick(40*sec, [3]time.Duration{protocol.Succ: 25 * sec}, true))
	if got := timeouts(tick(t, m, 42*sec, [3]time.Duration{protocol.Succ: 25 * sec})); len(got) != 0 {
		t.Fatalf("silence counted across this node's own stop: %+v", got)
	}
	if got := timeouts(tick(t, m, 43*sec, [3]time.Duration{protocol.Succ: 25 * sec})); len(got) != 1 {
		t.Fatalf("silence after resuming: %+v", got)
	}
}

// Connect timeout (docs/DESIGN.md, "Reconnects"): a link down for
// ConnectTimeout since the neighbour was last healthy is reported once
// while a round is in progress; with none, the count starts again; a
// connection that lasted under two seconds and carried nothing does not
// make the neighbour healthy.
func TestConnectTimeout(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Head, ConnectTimeout: 10 * sec, Policy: protocol.PolicyWait})
	tick(t, m, 1*sec, [3]time.Duration{})
	if got := timeouts(tick(t, m, 11*sec, [3]time.Duration{})); len(got) != 0 {
		t.Fatalf("unreachable with nothing in progress: %+v", got)
	}
	step(t, m, at(protocol.LocalReady("r"), 12*sec))
	if got := timeouts(tick(t, m, 20*sec, [3]time.Duration{})); len(got) != 0 {
		t.Fatalf("early (healthy again at 11s): %+v", got)
	}
	// Flapping: up at 21s, down at 22s, nothing heard.
	step(t, m, at(protocol.LinkUp(protocol.Succ), 21*sec))
	step(t, m, at(protocol.LinkDown(protocol.Succ, 0), 22*sec))
	got := timeouts(tick(t, m, 22*sec, [3]time.Duration{}))
	if len(got) != 1 || got[0].Timeout != protocol.TimeoutUnreachable || got[0].To != protocol.Succ || got[0].After != 11*sec {
		t.Fatalf("unreachable: %+v", got)
	}
	if again := timeouts(tick(t, m, 40*sec, [3]time.Duration{})); len(again) != 0 {
		t.Fatalf("reported twice: %+v", again)
	}
	// A connection that carried a line makes it healthy when it drops.
	step(t, m, at(protocol.LinkUp(protocol.Succ), 41*sec))
	step(t, m, at(protocol.LinkDown(protocol.Succ, 41*sec), 42*sec))
	if got := timeouts(tick(t, m, 51*sec, [3]time.Duration{})); len(got) != 0 {
		t.Fatalf("early after a healthy connection: %+v", got)
	}
	if got := timeouts(tick(t, m, 52*sec, [3]time.Duration{})); len(got) != 1 {
		t.Fatalf("unreachable again: %+v", got)
	}
}
