package chainsync

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// steerChain is an n-node chain on loopback with heartbeats and a short
// phase timeout on every node, whose tasks log their node's index.
type steerChain struct {
	mu    sync.Mutex
	ran   []int
	holds []HoldEvent
}

func (sc *steerChain) configs(t *testing.T, n int, phase time.Duration) []Config {
	cfgs := chainConfigs(t, n)
	for i := range cfgs {
		cfgs[i].Heartbeat = 50 * time.Millisecond
		cfgs[i].PhaseTimeout = phase
		cfgs[i].Task = func(context.Context, string) error {
			sc.mu.Lock()
			sc.ran = append(sc.ran, i)
			sc.mu.Unlock()
			return nil
		}
		cfgs[i].OnHold = func(ev HoldEvent) {
			sc.mu.Lock()
			sc.holds = append(sc.holds, ev)
			sc.mu.Unlock()
		}
	}
	return cfgs
}

func (sc *steerChain) tasks() []int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return slices.Clone(sc.ran)
}

// eventually polls cond every 10ms for at most 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !poll(10*time.Second, 10*time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// gatedAt reports whether round r waits at nd's gate (w).
func gatedAt(nd *Node, r string, w protocol.Wait) bool {
	for _, rs := range nd.Snapshot().Rounds {
		if rs.Round == r && rs.WaitingFor == w {
			return true
		}
	}
	return false
}

func noFaults(t *testing.T, nodes []*Node) {
	t.Helper()
	for i, nd := range nodes {
		if fs := nd.Snapshot().Faults; len(fs) > 0 {
			t.Fatalf("node %d reported a fault: %+v", i, fs)
		}
	}
}

// docs/STEERING.md, "Hold and release" and "Approval gates": a held node
// and a node waiting for an approval run nothing early, no phase timeout
// fires anywhere while they wait (heartbeats on), every node's Snapshot
// names the gate, and once released and approved the chain completes in
// order. On the simulated network, on the fake clock: "well past the
// phase timeout" costs no real time.
func TestHoldThenApproveSimulated(t *testing.T) {
	simulated(t, func(t *testing.T) {
		var sc steerChain
		cfgs := sc.configs(t, 4, 300*time.Millisecond)
		cfgs[2].Approve = true
		nodes := startAll(t, cfgs, []int{3, 2, 1, 0})
		if err := nodes[1].Hold(Request{By: "ann", Reason: "change window"}); err != nil {
			t.Fatal(err)
		}
		if err := nodes[1].Hold(Request{By: "bob"}); !errors.Is(err, ErrRefused) {
			t.Fatalf("a second hold: %v, want refused", err)
		}
		for _, nd := range nodes {
			if err := nd.Ready("r"); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "the round at N1's gate", func() bool { return gatedAt(nodes[1], "r", protocol.WaitHold) })
		eventually(t, "every node to know of the hold", func() bool {
			for _, nd := range nodes {
				st := nd.Snapshot().Steering
				if !slices.ContainsFunc(st, func(s SteerStatus) bool { return s.Node == "N1" && s.What == "hold" && s.Reason == "change window" }) {
					return false
				}
			}
			return true
		})
		after(4 * 300 * time.Millisecond) // well past the phase timeout, on the fake clock
		if got := sc.tasks(); !slices.Equal(got, []int{0}) {
			t.Fatalf("tasks run while N1 is held: %v, want [0]", got)
		}
		noFaults(t, nodes)
		text := nodes[3].Snapshot().Steering[0].Text(time.UTC)
		if !strings.HasPrefix(text, "held at N1 since ") || !strings.Contains(text, "(change window), by ann") {
			t.Fatalf("status text %q", text)
		}

		if err := nodes[1].Release(Request{By: "ann"}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the round at N2's approval gate", func() bool { return gatedAt(nodes[2], "r", protocol.WaitApproval) })
		after(4 * 300 * time.Millisecond)
		if got := sc.tasks(); !slices.Equal(got, []int{0, 1}) {
			t.Fatalf("tasks before the approval: %v, want [0 1]", got)
		}
		noFaults(t, nodes)
		if _, err := nodes[2].Approve(Request{HasRound: true, Round: "other"}); !errors.Is(err, ErrRefused) {
			t.Fatalf("approve of a round not waiting: %v", err)
		}
		if id, err := nodes[2].Approve(Request{By: "ann"}); err != nil || id != "r" {
			t.Fatalf("approve: %q, %v", id, err)
		}
		if st := nodes[2].Snapshot().Steering; !slices.ContainsFunc(st, func(s SteerStatus) bool {
			return s.What == "approved" && s.By == "ann" && strings.HasPrefix(s.Text(time.UTC), "approved at N2 (round r) at ")
		}) {
			t.Fatalf("the approval is not in N2's status: %+v", st)
		}
		waitDone(t, nodes, "r", "")
		if got := sc.tasks(); !slices.Equal(got, []int{0, 1, 2, 3}) {
			t.Fatalf("tasks %v, want in chain order", got)
		}
		noFaults(t, nodes)
		sc.mu.Lock()
		holds := slices.Clone(sc.holds)
		sc.mu.Unlock()
		if len(holds) != 2 || holds[0].Kind != "hold" || holds[1].Kind != "approval" || holds[1].Round != "r" {
			t.Fatalf("OnHold calls %+v, want a hold, then one approval wait for r", holds)
		}
	})
}

// docs/STEERING.md, "Approval gates": a denial fails the round there as
// a failed task does (StatusTaskFailed with a *DeniedError), nothing after
// it runs, and the nodes before it learn the reason.
func TestDenyFailsAsATaskTCP(t *testing.T) {
	var sc steerChain
	cfgs := sc.configs(t, 3, 0)
	cfgs[1].Approve = true
	nodes := startAll(t, cfgs, []int{2, 1, 0})
	for _, nd := range nodes {
		if err := nd.Ready("r"); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the round at N1's approval gate", func() bool { return gatedAt(nodes[1], "r", protocol.WaitApproval) })
	if _, err := nodes[1].Deny(Request{By: "ann", Reason: "smoke test failed"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, _ := nodes[1].Wait(ctx, "r")
	var de *DeniedError
	if res.Status != StatusTaskFailed || !errors.As(res.Err, &de) || de.Reason != "smoke test failed" {
		t.Fatalf("denied node: %+v", res)
	}
	res, _ = nodes[0].Wait(ctx, "r")
	if res.Status != StatusFault || !strings.Contains(res.Err.Error(), "denied the task of round r: smoke test failed") {
		t.Fatalf("the Head: %+v", res)
	}
	if res, _ := nodes[2].Wait(ctx, "r"); res.Status != StatusFault {
		t.Fatalf("the Tail: %+v", res)
	}
	if got := sc.tasks(); !slices.Equal(got, []int{0}) {
		t.Fatalf("tasks %v, want only the Head's", got)
	}
}

// docs/STEERING.md: with a state directory a hold and an approval
// survive a restart: the node comes back held, and the approved round
// does not ask again.
func TestHoldJournalled(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Name: "solo", StateDir: dir, Approve: true, Task: func(context.Context, string) error { return nil }}
	nd, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.Hold(Request{By: "ann", Reason: "wait"}); err != nil {
		t.Fatal(err)
	}
	if err := nd.Ready("r"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the round at the gate", func() bool { return gatedAt(nd, "r", protocol.WaitHold) })
	if _, err := nd.Approve(Request{}); err != nil {
		t.Fatal(err) // approved while held: it still waits for the release
	}
	nd.Close()

	nd, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	st := nd.Snapshot().Steering
	if len(st) != 1 || st[0].What != "hold" || !st[0].Here || st[0].Reason != "wait" {
		t.Fatalf("after the restart: %+v, want held", st)
	}
	if !gatedAt(nd, "r", protocol.WaitHold) {
		t.Fatalf("round not at the gate after the restart: %+v", nd.Snapshot().Rounds)
	}
	if err := nd.Release(Request{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := nd.Wait(ctx, "r"); err != nil || res.Status != StatusDone {
		t.Fatalf("%+v %v", res, err)
	}
}

// docs/STEERING.md, "Pause and resume": a Head restarted while paused is
// paused (its state directory says so), starts no task, and runs it once
// resumed; a cancel ends a round StatusCancelled with the reason.
func TestPauseJournalledAndCancel(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Name: "head", StateDir: dir, Task: func(context.Context, string) error { return nil }}
	nd, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.Pause(Request{By: "ann", Reason: "incident"}); err != nil {
		t.Fatal(err)
	}
	if err := nd.Pause(Request{}); !errors.Is(err, ErrRefused) {
		t.Fatalf("a second pause: %v", err)
	}
	nd.Close()
	nd, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	paused, resumed := nd.Paused()
	if !paused {
		t.Fatal("not paused after the restart")
	}
	for _, r := range []string{"a", "b"} {
		if err := nd.Ready(r); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "round a at the gate", func() bool { return gatedAt(nd, "a", protocol.WaitHold) })
	if err := nd.Cancel(Request{Round: "a", HasRound: true, By: "ann", Reason: "stale"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ce *CancelledError
	if res, _ := nd.Wait(ctx, "a"); res.Status != StatusCancelled || !errors.As(res.Err, &ce) || res.Err.Error() != "cancelled at the Head: stale (by ann)" {
		t.Fatalf("cancelled round: %+v", res)
	}
	if err := nd.Cancel(Request{Round: "a", HasRound: true}); !errors.Is(err, ErrRefused) {
		t.Fatalf("cancel of a round over: %v", err)
	}
	if err := nd.Resume(Request{By: "ann"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-resumed:
	default:
		t.Fatal("Paused's channel not closed by Resume")
	}
	if res, err := nd.Wait(ctx, "b"); err != nil || res.Status != StatusDone {
		t.Fatalf("round b after the resume: %+v %v", res, err)
	}
	// Restarted again: the journal says a was cancelled, not faulted.
	nd.Close()
	nd, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if res, _ := nd.Wait(ctx, "a"); res.Status != StatusCancelled {
		t.Fatalf("cancelled round after a restart: %+v", res)
	}
	for _, f := range nd.Snapshot().Faults {
		t.Errorf("a fault after the restart: %+v", f)
	}
}

// A release and a resume are recorded with who asked and why, as a hold
// and a pause are (docs/STEERING.md; chainsync dashboard asks every
// button for a reason).
func TestReleaseAndResumeKeepTheirReason(t *testing.T) {
	nd, err := Start(Config{Name: "solo", Task: func(context.Context, string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	for _, step := range []func() error{
		func() error { return nd.Hold(Request{By: "ann", Reason: "window"}) },
		func() error { return nd.Release(Request{By: "ann", Reason: "window closed"}) },
		func() error { return nd.Pause(Request{By: "bob", Reason: "incident"}) },
		func() error { return nd.Resume(Request{By: "bob", Reason: "incident over"}) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"none": "window closed, ann", "resume": "incident over, bob"}
	for _, s := range nd.Snapshot().Steering {
		if w, ok := want[s.What]; ok && s.Reason+", "+s.By == w {
			delete(want, s.What)
		}
	}
	if len(want) != 0 {
		t.Fatalf("not recorded with who and why: %v in %+v", want, nd.Snapshot().Steering)
	}
}
