package chainsync

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// docs/DESIGN.md, "Restarts and durable state": a Head that restarts without
// its state after its task ran sends READY again. Its successor has had
// COMPLETE from it, so the READY is older than the Head's last message: the
// successor reports the restart and answers nothing, above all not the
// START that would run the Head's task a second time.
func TestRestartedHeadWithoutStateRunsNothingTwice(t *testing.T) {
	cfgs := chainConfigs(t, 2)
	var headRuns atomic.Int32
	tailRunning := make(chan struct{})
	release := make(chan struct{})
	cfgs[0].Task = func(context.Context, string) error { headRuns.Add(1); return nil }
	cfgs[1].Task = func(ctx context.Context, _ string) error {
		close(tailRunning)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	faults := make(chan TraceEvent, 4)
	cfgs[1].Trace = func(ev TraceEvent) {
		if ev.Kind == TraceFault {
			faults <- ev
		}
	}
	tail, err := Start(cfgs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	head, err := Start(cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*Node{head, tail} {
		if err := n.Ready(""); err != nil {
			t.Fatal(err)
		}
	}
	<-tailRunning // the Head's task ran and its COMPLETE reached the Tail
	head.Close()  // the Head dies and loses its state

	// The fresh Head records what it receives, and the bad input it sees.
	var got []string
	placed := make(chan struct{})
	var once atomic.Bool
	cfgs[0].Trace = func(ev TraceEvent) {
		switch ev.Kind {
		case TraceReceived:
			got = append(got, ev.Msg.String())
		case TraceViolation:
			if once.CompareAndSwap(false, true) {
				close(placed)
			}
		}
	}
	fresh, err := Start(cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := fresh.Ready(""); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-faults:
		if ev.Fault != FaultPeerRestarted || ev.Side != 1 /* pred */ {
			t.Fatalf("fault %+v, want peer-restarted blaming the predecessor", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Tail never reported the Head's restart")
	}
	close(release)
	// The Tail finishes its part; its exit-wave COMPLETE reaches the fresh
	// Head, which cannot place it. Nothing may make the Head run again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := tail.Wait(ctx, ""); err != nil || res.Status != StatusDone {
		t.Fatalf("tail: %+v %v", res, err)
	}
	select {
	case <-placed: // the exit-wave COMPLETE reached the fresh Head, after anything sent before it
	case <-time.After(10 * time.Second):
		t.Fatal("the fresh Head never received the exit wave")
	}
	var seen []string
	fresh.call(func() { seen = append(seen, got...) }) // the trace runs on the loop
	got = seen
	if len(got) != 1 || got[0] != "COMPLETE" {
		t.Fatalf("the fresh Head received %v, want only the exit-wave COMPLETE (a START would run its task again)", got)
	}
	if n := headRuns.Load(); n != 1 {
		t.Fatalf("the Head's task ran %d times, want 1", n)
	}
}
