package protocol_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
)

// watching is a Middle with round r in WATCH (READY, local readiness,
// START from the successor), its predecessor's COMPLETE not yet in.
func watching(t *testing.T, cfg protocol.Config, r string) *protocol.Machine {
	t.Helper()
	cfg.Role = protocol.Middle
	m := protocol.New(cfg)
	step(t, m, at(protocol.LinkUp(protocol.Pred), 1*sec))
	step(t, m, at(protocol.LinkUp(protocol.Succ), 1*sec))
	step(t, m, at(recv(protocol.Pred, protocol.Ready, r), 1*sec))
	step(t, m, at(protocol.LocalReady(r), 1*sec))
	step(t, m, at(recv(protocol.Succ, protocol.Start, r), 1*sec))
	if st, _ := m.State(r); st != protocol.StateWatch {
		t.Fatalf("setup: round %s in %v, want WATCH", r, st)
	}
	return m
}

func steerMsg(s protocol.Steer) protocol.Message {
	return protocol.Message{Cmd: protocol.SteerLine, Steer: &s}
}

// docs/STEERING.md, "Hold and release": a held node keeps its round in
// WATCH with the predecessor's COMPLETE in hand and starts the task only
// once released; the line goes to both neighbours.
func TestHoldGatesTask(t *testing.T) {
	m := watching(t, protocol.Config{Extensions: true, Ordered: true}, "r")
	acts := step(t, m, at(protocol.Steering(protocol.Steer{Origin: "B", At: 1, What: protocol.SteerHold, Reason: "change window"}), 2*sec))
	if got := sends(acts); len(got) != 2 {
		t.Fatalf("hold sends %v, want the line to both neighbours", got)
	}
	acts = step(t, m, at(recv(protocol.Pred, protocol.Complete, "r"), 3*sec))
	if hasKind(acts, protocol.ActRunTask) {
		t.Fatal("a held node started its task")
	}
	if g := m.Gate("r"); g != protocol.WaitHold {
		t.Fatalf("Gate = %v, want hold", g)
	}
	acts = step(t, m, at(protocol.Steering(protocol.Steer{Origin: "B", At: 2, What: protocol.SteerNone}), 4*sec))
	if !hasKind(acts, protocol.ActRunTask) {
		t.Fatalf("release did not start the task: %v", acts)
	}
}

// docs/STEERING.md, "Approval gates": the task waits for its approval
// (ActGate once), starts on Approve; Deny fails the round as a failed
// task does.
func TestApprovalGate(t *testing.T) {
	m := watching(t, protocol.Config{Extensions: true, Ordered: true, Approve: true}, "r")
	acts := step(t, m, recv(protocol.Pred, protocol.Complete, "r"))
	if hasKind(acts, protocol.ActRunTask) || !hasKind(acts, protocol.ActGate) {
		t.Fatalf("the turn came: want ActGate and no task, got %v", acts)
	}
	if g := m.Gate("r"); g != protocol.WaitApproval {
		t.Fatalf("Gate = %v, want approval", g)
	}
	acts = step(t, m, protocol.Approve("r"))
	if !hasKind(acts, protocol.ActRunTask) {
		t.Fatalf("approve did not start the task: %v", acts)
	}
	if _, err := m.Step(protocol.Approve("r"), nil); !errors.Is(err, protocol.ErrTaskStarted) {
		t.Fatalf("approve of a started task: %v", err)
	}

	m = watching(t, protocol.Config{Extensions: true, Ordered: true, Approve: true}, "d")
	step(t, m, recv(protocol.Pred, protocol.Complete, "d"))
	acts = step(t, m, protocol.Deny("d"))
	if !slices.ContainsFunc(acts, func(a protocol.Action) bool {
		return a.Kind == protocol.ActDone && a.Outcome == protocol.TaskFailed
	}) || hasKind(acts, protocol.ActRunTask) {
		t.Fatalf("deny: want the round failed, no task: %v", acts)
	}
}

// docs/STEERING.md: while any node is gated no phase timeout runs; once
// every gate opened, the phase timeouts count again from then.
func TestGateSuspendsPhaseTimeout(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Tail, Extensions: true, Ordered: true, PhaseTimeout: 2 * sec})
	step(t, m, at(protocol.LinkUp(protocol.Pred), 1*sec))
	step(t, m, at(recv(protocol.Pred, protocol.Ready, "r"), 1*sec))
	step(t, m, at(protocol.LocalReady("r"), 1*sec)) // WATCH, waits for COMPLETE
	step(t, m, at(protocol.Recv(protocol.Pred, steerMsg(protocol.Steer{Origin: "B", At: 5, What: protocol.SteerHold})), 2*sec))
	for _, now := range []time.Duration{4 * sec, 10 * sec, 60 * sec} {
		if acts := tick(t, m, now, [3]time.Duration{protocol.Pred: now}); hasKind(acts, protocol.ActTimeout) {
			t.Fatalf("phase timeout at %v while B is held: %v", now, acts)
		}
	}
	step(t, m, at(protocol.Recv(protocol.Pred, steerMsg(protocol.Steer{Origin: "B", At: 6, What: protocol.SteerNone})), 61*sec))
	if acts := tick(t, m, 62*sec, [3]time.Duration{protocol.Pred: 62 * sec}); hasKind(acts, protocol.ActTimeout) {
		t.Fatalf("phase timeout 1s after the release: %v", acts)
	}
	if acts := tick(t, m, 64*sec, [3]time.Duration{protocol.Pred: 64 * sec}); !hasKind(acts, protocol.ActTimeout) {
		t.Fatalf("no phase timeout 3s after the release: %v", acts)
	}
}

// docs/PROTOCOL.md, "Steering lines": each line is passed on once, away
// from where it came; an older line of the same origin is dropped; a
// link that comes up gets the gating lines first.
func TestSteerForwardedOnce(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Middle, Extensions: true})
	hold := steerMsg(protocol.Steer{Origin: "C", At: 10, What: protocol.SteerHold, Reason: "wait"})
	acts := step(t, m, protocol.Recv(protocol.Succ, hold))
	if got := sends(acts); len(got) != 1 || acts[0].To != protocol.Pred || !hasKind(acts, protocol.ActSteer) {
		t.Fatalf("first line: %v", acts)
	}
	if acts := step(t, m, protocol.Recv(protocol.Pred, hold)); len(acts) != 0 {
		t.Fatalf("a line seen before: %v", acts)
	}
	old := steerMsg(protocol.Steer{Origin: "C", At: 9, What: protocol.SteerNone})
	if acts := step(t, m, protocol.Recv(protocol.Succ, old)); len(acts) != 0 {
		t.Fatalf("an older line: %v", acts)
	}
	acts = step(t, m, protocol.LinkUp(protocol.Pred))
	if len(acts) == 0 || acts[0].Msg.Cmd != protocol.SteerLine {
		t.Fatalf("link up: the hold first, got %v", acts)
	}
	if acts := step(t, m, protocol.LinkUp(protocol.Succ)); len(acts) != 0 {
		t.Fatalf("link up towards the origin re-sends its own line: %v", acts)
	}
	// Without extensions a steering line is a configuration mismatch.
	plain := protocol.New(protocol.Config{Role: protocol.Middle})
	var v *protocol.Violation
	if _, err := plain.Step(protocol.Recv(protocol.Succ, hold), nil); !errors.As(err, &v) || !v.Mismatch {
		t.Fatalf("no extensions: %v", err)
	}
}

// docs/STEERING.md, "Cancel": a cancel line ends its round here, and only
// that round, whatever the policy.
func TestCancelEndsOneRound(t *testing.T) {
	m := policyMachine(t, protocol.PolicyHalt)
	acts := step(t, m, protocol.Recv(protocol.Pred, steerMsg(protocol.Steer{Origin: "A", At: 3, What: protocol.SteerCancel, HasRound: true, Round: "a"})))
	if got := aborted(acts); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("cancel of a aborted %v", got)
	}
	if st, _ := m.State("b"); st.Terminal() {
		t.Fatal("cancel of a ended b")
	}
}

func TestSteerValid(t *testing.T) {
	ok := protocol.Steer{Origin: "C", At: 1, What: protocol.SteerApproval, HasRound: true, Round: "r7", By: "ann", Reason: "needs a look"}
	if !ok.Valid() {
		t.Fatal("valid line refused")
	}
	long := ok
	long.Round = string(make([]byte, 0)) + "r"
	for len(long.Round) < 128 {
		long.Round += "x"
	}
	long.Reason = "a reason that is far too long to fit on one line with a long round id and a long name of the origin and more"
	long.Origin = "origin-with-a-long-name-of-forty-bytes.."
	if long.Valid() {
		t.Fatal("an overlong line passed")
	}
	if fit := long.FitReason(); !fit.Valid() || fit.Len() > protocol.MaxSteerLine {
		t.Fatalf("FitReason: %d bytes, valid %v", fit.Len(), fit.Valid())
	}
	for _, bad := range []protocol.Steer{
		{Origin: "", At: 1, What: protocol.SteerHold},
		{Origin: "C", At: 0, What: protocol.SteerHold},
		{Origin: "C", At: 1, What: protocol.SteerApproval},
		{Origin: "C", At: 1, What: protocol.SteerHold, Reason: "tab\there"},
		{Origin: "C", At: 1, What: 99},
	} {
		if bad.Valid() {
			t.Errorf("%+v passed", bad)
		}
	}
}

// docs/STEERING.md, "Retry": a round that failed at B is reopened under
// its id at the Head: A, whose task had succeeded, passes it on without
// running it again; B and C run theirs; and r2, opened before the retry
// but not yet run anywhere, runs after the retried round at every node.
func TestRetryRunsWhatFailed(t *testing.T) {
	net := sim.New(sim.Config{Names: []string{"A", "B", "C"}, Machine: func(i int, c *protocol.Config) {
		c.Ordered, c.Extensions = true, true
	}})
	var log [3][]string
	net.Hook = func(i int, ev protocol.Event, acts []protocol.Action, err error) {
		for _, a := range acts {
			switch a.Kind {
			case protocol.ActRunTask:
				log[i] = append(log[i], "run "+a.Round)
			case protocol.ActSkip:
				log[i] = append(log[i], "skip "+a.Round)
			}
		}
	}
	drain := func(fail map[string]bool) {
		for len(net.Busy()) > 0 || len(net.Tasks) > 0 {
			if b := net.Busy(); len(b) > 0 {
				if _, _, _, err := net.Deliver(b[0]); err != nil {
					t.Fatal(err)
				}
				continue
			}
			task := net.Tasks[0]
			if _, _, err := net.FinishTask(0, fail[fmt.Sprint(task.Node, task.Round)]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 3 {
		net.Step(i, protocol.LocalReady("r1"))
	}
	drain(map[string]bool{"1r1": true}) // B's task fails
	net.Step(0, protocol.Abort("r1"))   // as the task-failed notice ends it
	net.Step(2, protocol.Abort("r1"))
	for i := range 3 {
		net.Step(i, protocol.LocalReady("r2"))
	}
	// r2's READY is ahead of the retry on every link: r2 is learned
	// first everywhere, and still runs after the retried round.
	if _, err := net.Step(0, protocol.Steering(protocol.Steer{Origin: "A", At: 1, What: protocol.SteerRetry, HasRound: true, Round: "r1"})); err != nil {
		t.Fatal(err)
	}
	drain(nil)
	want := [3][]string{{"run r1", "skip r1", "run r2"}, {"run r1", "run r1", "run r2"}, {"run r1", "run r2"}}
	for i := range 3 {
		if !slices.Equal(log[i], want[i]) {
			t.Errorf("node %d: %v, want %v", i, log[i], want[i])
		}
	}
	for _, r := range []string{"r1", "r2"} {
		if st, _ := net.Nodes[0].M.State(r); st != protocol.StateDone {
			t.Errorf("round %s at the Head: %v, want DONE", r, st)
		}
	}
}
