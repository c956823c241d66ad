package chainsync

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
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

// The same with heartbeats on (a served chain has them by default): the
// idle predecessor says it is alive every heartbeat, and a node placed by
// --prev, which cannot check a predecessor's identity line, takes those
// lines for what they say and keeps the connection, however many
// PendingTimeouts pass before its first round's line. A connection that
// stops inside a line is still thrown out.
func TestIdlePredecessorWithHeartbeatsIsNotThrownOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const pending, hb = 50 * time.Millisecond, 20 * time.Millisecond
		ln := newPipeListener()
		tail := startWatched(t, Config{Name: "T", Listener: ln, Prev: "pipe", PendingTimeout: pending, Heartbeat: hb})
		if err := tail.Ready(""); err != nil {
			t.Fatal(err)
		}
		// A connection that sends half a line and then nothing is closed
		// after PendingTimeout, though no predecessor is connected.
		stranger := testnet.NewPeer(t, ln.dial(t))
		stranger.Send(t, "REA")
		if took := stranger.AwaitClosed(t, 10*pending); took < pending {
			t.Fatalf("a connection that stopped inside a line was closed after %v, before PendingTimeout %v", took, pending)
		}
		pred := testnet.NewPeer(t, ln.dial(t))
		pred.Send(t, "HELLO A 1/2 0ea673ba91b2a279 502a4b6705e7c843 A,T hb=20\n")
		for range 6 * pending / hb {
			after(hb)
			pred.Send(t, "HEARTBEAT\n")
		}
		synctest.Wait()
		pred.Send(t, "READY\n")
		for {
			line, err := pred.Line(time.Second)
			if err != nil {
				t.Fatalf("no START after the idle predecessor's READY: %v", err)
			}
			if line == "START\n" {
				break
			}
			if line != "HEARTBEAT\n" {
				t.Fatalf("got %q, want START (or HEARTBEAT before it)", line)
			}
		}
	})
}

// The same on loopback TCP, as a served chain placed by --prev runs
// idle: the Tail reads the Head's heartbeats for five PendingTimeouts,
// all on the one connection it accepted, and warns of nothing; then a
// round runs on that link.
func TestIdleHeartbeatLinkStaysUpTCP(t *testing.T) {
	const pending, hb = 150 * time.Millisecond, 30 * time.Millisecond
	cfgs := tcpChainConfigs(t, 2)
	for i := range cfgs {
		cfgs[i].PendingTimeout, cfgs[i].Heartbeat = pending, hb
	}
	ln, err := net.Listen("tcp", cfgs[1].Listen)
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: ln}
	cfgs[1].Listener, cfgs[1].Listen = counted, ""
	tail := startWatched(t, cfgs[1])
	head := startWatched(t, cfgs[0])
	const beats = 5 * pending / hb
	waitCond(t, 10*time.Second, "the Tail to read five PendingTimeouts of heartbeats", func() bool {
		return counted.heartbeats.Load() >= int64(beats)
	})
	if n := counted.accepted.Load(); n != 1 {
		t.Errorf("the Tail accepted %d connections while its predecessor was idle, want one", n)
	}
	if n := tail.logs.count(func(e capturedLog) bool { return e.Level >= slog.LevelWarn }); n != 0 {
		t.Errorf("the Tail warned %d times while its predecessor was idle, want none:\n%s", n, tail.logs.tail(10))
	}
	// Snapshot says so: no predecessor link yet, but one waits, alive.
	if s := tail.Snapshot(); s.PredUp || s.PredWaiting == "" {
		t.Errorf("Tail's snapshot while its predecessor is idle: PredUp %v, PredWaiting %q; want false and the Head's address", s.PredUp, s.PredWaiting)
	}
	for _, nd := range []*watched{tail, head} {
		if err := nd.Ready(""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := head.Wait(context.Background(), ""); err != nil {
		t.Fatalf("the round after the idle time: %v", err)
	}
	if s := tail.Snapshot(); !s.PredUp || s.PredWaiting != "" {
		t.Errorf("Tail's snapshot after the round: PredUp %v, PredWaiting %q; want true and empty", s.PredUp, s.PredWaiting)
	}
}

// countingListener counts the connections it accepts and the HEARTBEAT
// lines read from them (each read's lines counted whole: heartbeats come
// one to a write).
type countingListener struct {
	net.Listener
	accepted, heartbeats atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
		c = &countingConn{Conn: c, l: l}
	}
	return c, err
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	c.l.heartbeats.Add(int64(bytes.Count(b[:k], []byte("HEARTBEAT\n"))))
	return k, err
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
