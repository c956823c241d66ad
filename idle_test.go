package chainsync

import (
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// pipeListener is a net.Listener whose connections are in-memory pipes:
// a node on it can run in a testing/synctest bubble, on its fake clock.
type pipeListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial connects to the listener and returns the client's end.
func (l *pipeListener) dial(t *testing.T) net.Conn {
	t.Helper()
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c
	case <-l.done:
		t.Fatal("dial: the listener is closed")
		return nil
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// docs/DESIGN.md, "Roles and connections": a new predecessor connection is
// pending until its first line. A predecessor with nothing to say yet (a
// Head that is not ready) is not thrown out after PendingTimeout while no
// other predecessor is connected: its first line, however late, is heard.
// The node runs in a synctest bubble over an in-memory pipe, so the
// silence lasts several PendingTimeouts of the bubble's fake clock, every
// timer the node set for it having fired.
func TestIdlePredecessorIsNotThrownOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const pending = 50 * time.Millisecond
		ln := newPipeListener()
		tail := startWatched(t, Config{Name: "T", Listener: ln, Prev: "pipe", PendingTimeout: pending})
		if err := tail.Ready(""); err != nil {
			t.Fatal(err)
		}
		pred := testnet.NewPeer(t, ln.dial(t))
		// Several PendingTimeouts of silence, then the first line.
		after(6 * pending)
		synctest.Wait() // the node has done all it does in that time
		pred.Send(t, "READY\n")
		pred.Expect(t, "START\n")
	})
}

// Snapshot says when each neighbour last sent a line, so an operator sees
// a link that is up but silent before any fault is called.
func TestSnapshotLastHeard(t *testing.T) {
	cfgs := chainConfigs(t, 2)
	nodes := startAll(t, cfgs, []int{1, 0})
	before := time.Now()
	if err := nodes[0].Ready(""); err != nil {
		t.Fatal(err)
	}
	// The Tail is not ready, so it answers nothing: the Head hears nothing.
	waitCond(t, 10*time.Second, "the Head's READY to reach the Tail", func() bool { return nodes[1].Snapshot().PredUp })
	tail, head := nodes[1].Snapshot(), nodes[0].Snapshot()
	if tail.PredHeard.Before(before) || time.Since(tail.PredHeard) > 10*time.Second {
		t.Errorf("Tail: PredHeard %v, want the time the READY arrived (after %v)", tail.PredHeard, before)
	}
	if !head.SuccHeard.IsZero() {
		t.Errorf("Head: SuccHeard %v, want zero (the Tail has sent nothing)", head.SuccHeard)
	}
}
