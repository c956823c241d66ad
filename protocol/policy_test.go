package protocol_test

import (
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// aborted returns the rounds acts end with Outcome Aborted.
func aborted(acts []protocol.Action) []string {
	var ids []string
	for _, a := range acts {
		if a.Kind == protocol.ActDone && a.Outcome == protocol.Aborted {
			ids = append(ids, a.Round)
		}
	}
	return ids
}

// policyMachine is a Middle with rounds a and b open (predecessor's READY,
// local readiness: both wait for START) and the given policy.
func policyMachine(t *testing.T, p protocol.Policy) *protocol.Machine {
	t.Helper()
	m := protocol.New(protocol.Config{Role: protocol.Middle, Policy: p, Extensions: true, Silence: 3 * sec, Ordered: true})
	step(t, m, at(protocol.LinkUp(protocol.Pred), 1*sec))
	step(t, m, at(protocol.LinkUp(protocol.Succ), 1*sec))
	for _, id := range []string{"a", "b"} {
		step(t, m, at(recv(protocol.Pred, protocol.Ready, id), 1*sec))
		step(t, m, at(protocol.LocalReady(id), 1*sec))
	}
	return m
}

// The fault policy is the machine's (docs/DESIGN.md, "Faults"; draft,
// "Error Handling" leaves it to implementations): under halt a silent
// neighbour ends every unfinished round, in the order they were learned,
// right after the timeout that reports it; under wait it ends none.
func TestPolicySilence(t *testing.T) {
	for _, p := range []protocol.Policy{protocol.PolicyHalt, protocol.PolicyWait} {
		m := policyMachine(t, p)
		acts := step(t, m, protocol.Tick(5*sec, [3]time.Duration{protocol.Pred: 5 * sec, protocol.Succ: 1 * sec}, false))
		to := timeouts(acts)
		if len(to) != 1 || to[0].Timeout != protocol.TimeoutSilence || to[0].Round != "a" || to[0].From != protocol.StateReady {
			t.Fatalf("policy %d: timeouts %+v, want one silence naming round a in READY", p, to)
		}
		got := aborted(acts)
		switch {
		case p == protocol.PolicyHalt && (len(got) != 2 || got[0] != "a" || got[1] != "b"):
			t.Fatalf("halt: aborted %v, want [a b]", got)
		case p == protocol.PolicyWait && len(got) != 0:
			t.Fatalf("wait: aborted %v, want none", got)
		}
		if p == protocol.PolicyHalt && m.Active() != 0 {
			t.Fatalf("halt: %d rounds still active", m.Active())
		}
	}
}

// A neighbour's fault notice: under halt it ends every unfinished round;
// under wait only a round whose task failed somewhere ends, and a notice
// of any other kind ends nothing.
func TestPolicyNotice(t *testing.T) {
	notice := func(kind, round string) protocol.Event {
		n := protocol.Notice{HasRound: true, Round: round, Kind: kind, Origin: "D", Blamed: "D"}
		return recvNote(protocol.Succ, n)
	}
	m := policyMachine(t, protocol.PolicyHalt)
	if got := aborted(step(t, m, notice("peer-silent", "a"))); len(got) != 2 {
		t.Fatalf("halt: a notice aborted %v, want both rounds", got)
	}
	m = policyMachine(t, protocol.PolicyWait)
	if got := aborted(step(t, m, notice("peer-silent", "a"))); len(got) != 0 {
		t.Fatalf("wait: a silence notice aborted %v, want none", got)
	}
	if got := aborted(step(t, m, notice(protocol.KindTaskFailed, "b"))); len(got) != 1 || got[0] != "b" {
		t.Fatalf("wait: a task-failed notice for b aborted %v, want [b]", got)
	}
	if st, _ := m.State("a"); st.Terminal() {
		t.Fatalf("wait: round a ended (%v) by a notice about b", st)
	}
}

// A fault this node reports with ReportHalt (a configuration mismatch)
// ends every unfinished round under halt, with or without extensions;
// under wait it ends none.
func TestPolicyReportHalt(t *testing.T) {
	note := protocol.Notice{Kind: "config-mismatch", Origin: "B", Blamed: "C"}
	m := policyMachine(t, protocol.PolicyHalt)
	if got := aborted(step(t, m, protocol.ReportHalt(note))); len(got) != 2 {
		t.Fatalf("halt: aborted %v, want both rounds", got)
	}
	m = policyMachine(t, protocol.PolicyWait)
	if got := aborted(step(t, m, protocol.ReportHalt(note))); len(got) != 0 {
		t.Fatalf("wait: aborted %v, want none", got)
	}
	plain := protocol.New(protocol.Config{Role: protocol.Tail})
	step(t, plain, recv(protocol.Pred, protocol.Ready, "x"))
	if got := aborted(step(t, plain, protocol.ReportHalt(note))); len(got) != 1 {
		t.Fatalf("halt without extensions: aborted %v, want [x]", got)
	}
}

// A phase timeout ends its round under halt; under wait only a round this
// node never claimed (waiting for itself) ends.
func TestPolicyPhase(t *testing.T) {
	for _, p := range []protocol.Policy{protocol.PolicyHalt, protocol.PolicyWait} {
		m := protocol.New(protocol.Config{Role: protocol.Tail, PhaseTimeout: 5 * sec, Policy: p})
		step(t, m, at(protocol.LinkUp(protocol.Pred), 1*sec))
		step(t, m, at(recv(protocol.Pred, protocol.Ready, "unclaimed"), 1*sec))
		step(t, m, at(recv(protocol.Pred, protocol.Ready, "claimed"), 1*sec))
		step(t, m, at(protocol.LocalReady("claimed"), 1*sec)) // READY -> WATCH: waits for COMPLETE
		got := aborted(tick(t, m, 7*sec, [3]time.Duration{}))
		want := 2
		if p == protocol.PolicyWait {
			want = 1
		}
		if len(got) != want || got[len(got)-1] == "" {
			t.Fatalf("policy %d: aborted %v, want %d round(s)", p, got, want)
		}
		if p == protocol.PolicyWait && got[0] != "unclaimed" {
			t.Fatalf("wait: aborted %v, want [unclaimed]", got)
		}
	}
}

// recvNote is the event "notice n arrived from side".
func recvNote(from protocol.Side, n protocol.Notice) protocol.Event {
	return protocol.Recv(from, protocol.Message{Cmd: protocol.FaultNotice, Note: &n})
}

// docs/DESIGN.md "Faults": after a halt nobody runs a task. A round
// opened at a node after its halt (locally, or by a predecessor's READY)
// ends at once, aborted, and no task of it runs.
func TestPolicyHaltEndsLaterRounds(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Middle, Extensions: true})
	step(t, m, protocol.LocalReady("a"))
	step(t, m, protocol.ReportHalt(protocol.Notice{HasRound: true, Round: "a", Kind: "task-failed", Origin: "B", Blamed: "B"}))
	for _, ev := range []protocol.Event{protocol.LocalReady("b"), protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Ready, Round: "c"})} {
		acts := step(t, m, ev)
		id, _ := ev.RoundOf()
		done := false
		for _, a := range acts {
			if a.Kind == protocol.ActRunTask || a.Kind == protocol.ActSend && a.Msg.Cmd != protocol.FaultNotice {
				t.Errorf("round %s after the halt: %v", id, a)
			}
			done = done || a.Kind == protocol.ActDone && a.Round == id && a.Outcome == protocol.Aborted
		}
		if !done {
			t.Errorf("round %s opened after the halt did not end aborted: %v", id, acts)
		}
	}
}
