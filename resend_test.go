package chainsync

import (
	"context"
	"sync"
	"testing"
	"time"
)

// sendCounts counts one node's TraceSent events by kind.
type sendCounts struct {
	mu                   sync.Mutex
	sent, queued, resent int
	queuedCh, resentCh   chan struct{} // closed at the first queued message, the first re-send
}

func newSendCounts() *sendCounts {
	return &sendCounts{queuedCh: make(chan struct{}), resentCh: make(chan struct{})}
}

func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

func (c *sendCounts) observe(ev TraceEvent) {
	if ev.Kind != TraceSent {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case ev.Queued:
		if c.queued == 0 {
			close(c.queuedCh)
		}
		c.queued++
	case ev.Resend:
		if c.resent == 0 {
			close(c.resentCh)
		}
		c.resent++
	default:
		c.sent++
	}
}

func (c *sendCounts) get() (sent, queued, resent int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent, c.queued, c.resent
}

// Draft "Protocol Operation" with docs/DESIGN.md's reconnect rule ("Reconnects"): a message
// the machine sent while its link was down (here: each node is ready
// before its successor is even started) goes out once, when the link
// first comes up, and that first send is not a re-send. A fault-free
// round has no re-sends at all and exactly 4(n-1) messages on the wire.
func TestFirstSendIsNotAResend(t *testing.T) {
	const n = 3
	cfgs := chainConfigs(t, n)
	counts := make([]*sendCounts, n)
	for i := range cfgs {
		counts[i] = newSendCounts()
		cfgs[i].Trace = counts[i].observe
	}
	nodes := make([]*Node, n)
	t.Cleanup(func() {
		for _, nd := range nodes {
			if nd != nil {
				nd.Close()
			}
		}
	})
	// Head first: each node's READY is queued because its successor does
	// not listen yet.
	for i := range cfgs {
		nd, err := Start(cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = nd
		if err := nd.Ready(""); err != nil {
			t.Fatal(err)
		}
		if i < n-1 {
			within(t, counts[i].queuedCh, "the READY to a successor not yet started was not queued")
		}
	}
	waitDone(t, nodes, "", "")
	total := 0
	for i, c := range counts {
		sent, queued, resent := c.get()
		total += sent
		if resent != 0 {
			t.Errorf("node %d: %d re-sends on a fault-free chain, want 0", i, resent)
		}
		if i < n-1 && queued != 1 {
			t.Errorf("node %d queued %d messages, want its READY", i, queued)
		}
	}
	if total != 4*(n-1) {
		t.Errorf("%d messages on the wire, want 4(n-1) = %d", total, 4*(n-1))
	}
}

// docs/DESIGN.md "Reconnects": a message a connection already carried and
// that is sent again after the link comes back is a re-send, and is
// reported as one.
func TestResendAfterReconnectIsMarked(t *testing.T) {
	const n = 3
	cfgs := tcpChainConfigs(t, n)
	p := newResetProxy(t, cfgs[1].Listen)
	cfgs[0].Next = p.Addr()
	counts := make([]*sendCounts, n)
	for i := range cfgs {
		counts[i] = newSendCounts()
		cfgs[i].Trace = counts[i].observe
	}
	started := make(chan struct{})
	gate := make(chan struct{})
	cfgs[n-1].Task = func(ctx context.Context, _ string) error {
		close(started)
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}
	nodes := startAll(t, cfgs, []int{2, 1, 0})
	for _, nd := range nodes {
		if err := nd.Ready(""); err != nil {
			t.Fatal(err)
		}
	}
	within(t, started, "the Tail's task did not start")
	// A's READY and B's START have crossed the A-B link: cut it.
	p.Reset()
	within(t, counts[0].resentCh, "A re-sent nothing after its link to B came back")
	close(gate)
	waitDone(t, nodes, "", "")
	if _, _, resent := counts[2].get(); resent != 0 {
		t.Errorf("C, whose links never dropped, re-sent %d messages", resent)
	}
}
