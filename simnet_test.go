package chainsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chainsync-go/chainsync/protocol"
)

// The tests in this file run nodes on internal/testnet's in-memory
// network inside a testing/synctest bubble: every timer is the bubble's
// fake clock, which moves only when every goroutine of the test is
// blocked, so timings are exact, a run takes no real time for the
// seconds it simulates, and a seed replays the same schedule. The bubble
// also fails a test that leaves a goroutine behind. docs/TESTING.md,
// "The simulated network".

// simHost is node i's address on the simulated network.
func simHost(i int) string { return fmt.Sprintf("10.0.0.%d", i+1) }

// simChain returns the configs of an n-node chain on nw: node i, named
// Ni, listens on simHost(i):7000 and dials from simHost(i).
func simChain(t testing.TB, nw *testnet.Network, n int) []Config {
	t.Helper()
	cfgs := make([]Config, n)
	for i := range cfgs {
		cfgs[i] = Config{
			Name: fmt.Sprintf("N%d", i), BackoffMin: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
			Dial: nw.Dialer(simHost(i)),
		}
		if i > 0 {
			cfgs[i].Listen = simHost(i) + ":7000"
			cfgs[i].listen = func(_ context.Context, addr string) (net.Listener, error) { return nw.Listen(addr) }
			cfgs[i].Prev, cfgs[i].PrevName = simHost(i-1)+":7000", fmt.Sprintf("N%d", i-1)
		}
		if i < n-1 {
			cfgs[i].Next, cfgs[i].NextName = simHost(i+1)+":7000", fmt.Sprintf("N%d", i+1)
		}
	}
	return cfgs
}

// after lets the bubble's clock run for d.
func after(d time.Duration) { <-time.After(d) }

// simulated runs f in a synctest bubble, in parallel with other tests.
func simulated(t *testing.T, f func(t *testing.T)) {
	t.Parallel()
	synctest.Test(t, f)
}

// Draft: Protocol Operation (all four phases), on the simulated network:
// nodes started in a random order and ready at random moments of the
// fake clock; tasks one at a time in chain order, each once, after every
// node was ready, in exactly 4(n-1) messages (Introduction).
func TestChainSimulated(t *testing.T) {
	for _, n := range []int{1, 2, 5, 50} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			simulated(t, func(t *testing.T) { checkChain(t, simChain(t, testnet.NewNetwork(), n)) })
		})
	}
}

// docs/DESIGN.md "Heartbeats": a partition is silence. The middle node of
// three is cut off from the Head while the round waits for the Tail: with
// heartbeats every D, each side of the cut blames the other exactly 3D
// after it last heard from it (the fake clock makes "exactly" testable),
// and under halt the round ends as a fault at both.
func TestPartitionIsSilenceSimulated(t *testing.T) {
	simulated(t, func(t *testing.T) {
		const d = time.Second
		nw := testnet.NewNetwork()
		cfgs := simChain(t, nw, 3)
		ws := make([]*watched, 3)
		for i := range cfgs {
			cfgs[i].Heartbeat = d
			ws[i] = startWatched(t, cfgs[i])
		}
		for _, w := range ws[:2] {
			if err := w.Ready(""); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait() // READY has reached the Tail, which is not ready
		if st := ws[1].state(""); st != protocol.StateReady {
			t.Fatalf("the middle node's round is %v, want READY (waiting for START)", st)
		}
		cut := time.Now()
		nw.Partition(simHost(0), simHost(1))
		for i, blamed := range map[int]string{0: "N1", 1: "N0"} {
			ev := waitFault(t, ws[i], 1, time.Minute)
			checkFault(t, ws[i], ev, FaultPeerSilent, map[int]protocol.Side{0: protocol.Succ, 1: protocol.Pred}[i], blamed)
			// The last line either side heard came at most D before the
			// cut (the links were idle but for heartbeats).
			t.Logf("%s blamed %s %v after the cut", ws[i].name, blamed, ev.Time.Sub(cut))
			if took := ev.Time.Sub(cut); took < 2*d || took > 3*d+d/2 {
				t.Errorf("%s blamed %s %v after the cut, want within 2D..3D+D/2 (D=%v)", ws[i].name, blamed, took, d)
			}
			if res := waitResult(t, ws[i], "", time.Minute); res.Status != StatusFault {
				t.Errorf("%s: round %v, want fault (policy halt)", ws[i].name, res.Status)
			}
		}
	})
}

// docs/DESIGN.md "Restarts and reconnects": a reset link is re-dialed and
// the round goes on: every connection of the middle node is reset while
// the round's START wave is under way; each task runs once, in order.
func TestResetMidRoundSimulated(t *testing.T) {
	simulated(t, func(t *testing.T) {
		nw := testnet.NewNetwork()
		rec := newRecorder(4)
		cfgs := simChain(t, nw, 4)
		var downs atomic.Int64
		for i := range cfgs {
			cfgs[i].Task = rec.task(i, 10*time.Millisecond)
			cfgs[i].Trace = func(ev TraceEvent) {
				if ev.Kind == TraceLinkDown {
					downs.Add(1)
				}
			}
		}
		nodes := startAll(t, cfgs, []int{3, 2, 1, 0})
		for i := range nodes {
			rec.markReady("", i)
			if err := nodes[i].Ready(""); err != nil {
				t.Fatal(err)
			}
		}
		after(15 * time.Millisecond) // N0's task ends at 10ms: COMPLETE is on its way
		if k := nw.Reset(simHost(1)); k == 0 {
			t.Fatal("nothing to reset: the links of N1 are not up")
		}
		waitDone(t, nodes, "", "")
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, e := range rec.errs {
			t.Error(e)
		}
		if got := rec.started[""]; len(got) != 4 {
			t.Errorf("tasks ran at %v, want each of the 4 once", got)
		}
		if k := downs.Load(); k < 4 { // both ends of N1's two links
			t.Errorf("%d links went down, want at least 4: the reset did not happen mid-round", k)
		}
	})
}

// docs/FAULTS.md "peer-unreachable": a successor that never comes up is
// a fault once ConnectTimeout has passed, to the tick of the clock that
// drives the node's timeouts.
func TestConnectTimeoutSimulated(t *testing.T) {
	simulated(t, func(t *testing.T) {
		const timeout = 10 * time.Second
		cfgs := simChain(t, testnet.NewNetwork(), 2)
		cfgs[0].ConnectTimeout = timeout
		head := startWatched(t, cfgs[0]) // the Tail is never started: nothing listens
		start := time.Now()
		if err := head.Ready(""); err != nil {
			t.Fatal(err)
		}
		ev := waitFault(t, head, 1, time.Minute)
		checkFault(t, head, ev, FaultPeerUnreachable, protocol.Succ, "N1")
		t.Logf("reported %v after the first dial", ev.Time.Sub(start))
		if took := ev.Time.Sub(start); took < timeout || took > timeout+time.Second {
			t.Errorf("reported after %v, want ConnectTimeout (%v) and at most one clock tick more", took, timeout)
		}
		res := waitResult(t, head, "", time.Minute)
		var fe *FaultError
		if res.Status != StatusFault || !errors.As(res.Err, &fe) || !strings.Contains(fe.Error(), "N1") {
			t.Errorf("result %v %v, want a fault naming N1", res.Status, res.Err)
		}
	})
}
