package testnet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Peer is one end of a connection to a node (plain TCP, mostly; TLS over
// it or an in-memory pipe too), played by a test byte for byte: a
// neighbour speaking protocol lines, honest and scripted or hostile. A
// goroutine reads everything the node sends as it comes, so a test can
// check the exact byte stream (Received) as well as wait for what comes
// next (Expect, Line). A neighbour that stops reading is a plain
// connection, not a Peer.
//
// The library's own tests and the end-to-end tests of the command both
// use it; it does not depend on the library, so tests inside the library
// package can use it too.
type Peer struct {
	c      net.Conn
	notify chan struct{} // a token after each read
	ended  chan struct{} // closed once the stream has ended

	mu  sync.Mutex
	buf []byte // everything received
	pos int    // bytes consumed by Expect, Line, AwaitClosed
	err error  // the read error once the stream has ended
}

// NewPeer plays a neighbour on c, a TCP connection or one over it (TLS,
// or a pipe). c is closed when the test ends.
func NewPeer(t testing.TB, c net.Conn) *Peer {
	p := &Peer{c: c, notify: make(chan struct{}, 1), ended: make(chan struct{})}
	go func() {
		defer close(p.ended)
		b := make([]byte, 4096)
		for {
			n, err := c.Read(b)
			p.mu.Lock()
			p.buf = append(p.buf, b[:n]...)
			if err != nil {
				p.err = err
			}
			p.mu.Unlock()
			select {
			case p.notify <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-p.ended })
	return p
}

// DialPeer connects to addr, trying again until the node listens there or
// within has passed, and plays a neighbour on the connection.
func DialPeer(t testing.TB, addr string, within time.Duration) *Peer {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, within)
		if err == nil {
			return NewPeer(t, c)
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond) // not listening yet: poll
	}
}

// PeerListener is a loopback listener a node under test dials (as its
// successor, say); each connection it accepts is played by the test.
type PeerListener struct {
	ln *net.TCPListener
}

// ListenPeer opens a PeerListener on 127.0.0.1, closed when the test ends.
func ListenPeer(t testing.TB) *PeerListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &PeerListener{ln: ln.(*net.TCPListener)}
}

// Addr is the listener's address, for the node's configuration.
func (l *PeerListener) Addr() string { return l.ln.Addr().String() }

// Accept returns the node's next connection, waiting up to within for it.
func (l *PeerListener) Accept(t testing.TB, within time.Duration) *Peer {
	t.Helper()
	p, err := l.TryAccept(t, within)
	if err != nil {
		t.Fatalf("the node did not connect to %s within %v: %v", l.Addr(), within, err)
	}
	return p
}

// TryAccept is Accept returning the error (a timeout) instead of failing.
func (l *PeerListener) TryAccept(t testing.TB, within time.Duration) (*Peer, error) {
	t.Helper()
	_ = l.ln.SetDeadline(time.Now().Add(within))
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	return NewPeer(t, c), nil
}

// Addr is this end's address: what the node logs as the peer.
func (p *Peer) Addr() string { return p.c.LocalAddr().String() }

// Conn is the connection, for what the other methods do not cover. Do
// not read from it: the Peer does.
func (p *Peer) Conn() net.Conn { return p.c }

// Ended is closed once the stream from the node has ended (the node
// closed or reset the connection, or the test closed it).
func (p *Peer) Ended() <-chan struct{} { return p.ended }

// await waits up to d for cond (called with mu held) to hold.
func (p *Peer) await(d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		ok := cond()
		p.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-p.notify:
		case <-deadline.C:
			p.mu.Lock()
			defer p.mu.Unlock()
			return cond()
		}
	}
}

// TrySend writes b and returns the error, if any: a node may close a
// hostile connection while the test is still writing to it.
func (p *Peer) TrySend(b []byte) error {
	_ = p.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := p.c.Write(b)
	return err
}

// Send writes s; a write error fails the test.
func (p *Peer) Send(t testing.TB, s string) {
	t.Helper()
	if err := p.TrySend([]byte(s)); err != nil {
		t.Fatalf("%s: write %q: %v", p.Addr(), s, err)
	}
}

// Expect fails unless the next bytes from the node, within 5 seconds, are
// exactly want.
func (p *Peer) Expect(t testing.TB, want string) {
	t.Helper()
	if err := p.ExpectErr(want, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// ExpectErr is Expect waiting up to d, returning what went wrong.
func (p *Peer) ExpectErr(want string, d time.Duration) error {
	p.await(d, func() bool { return len(p.buf)-p.pos >= len(want) || p.err != nil })
	p.mu.Lock()
	defer p.mu.Unlock()
	got := p.buf[p.pos:min(len(p.buf), p.pos+len(want))]
	if string(got) != want {
		return fmt.Errorf("%s: received %q, want exactly %q (stream so far %q, read error %v)", p.Addr(), got, want, p.buf, p.err)
	}
	p.pos += len(want)
	return nil
}

// Line returns the next line from the node, with its LF, waiting up to d.
func (p *Peer) Line(d time.Duration) (string, error) {
	p.await(d, func() bool { return bytes.IndexByte(p.buf[p.pos:], '\n') >= 0 || p.err != nil })
	p.mu.Lock()
	defer p.mu.Unlock()
	i := bytes.IndexByte(p.buf[p.pos:], '\n')
	if i < 0 {
		return string(p.buf[p.pos:]), fmt.Errorf("%s: no complete line within %v (pending %q, read error %v)", p.Addr(), d, p.buf[p.pos:], p.err)
	}
	l := string(p.buf[p.pos : p.pos+i+1])
	p.pos += i + 1
	return l, nil
}

// Quiet fails if the node sends anything, or ends the stream, within d (a
// negative check: wait first for an event that shows the node would have
// sent it by then).
func (p *Peer) Quiet(t testing.TB, d time.Duration) {
	t.Helper()
	if p.await(d, func() bool { return len(p.buf) > p.pos || p.err != nil }) {
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("%s: want silence, got %q (read error %v)", p.Addr(), p.buf[p.pos:], p.err)
	}
}

// ExpectClosed waits up to d for the node to close the connection, and
// fails if it sent anything not consumed yet. A reset counts as closed.
func (p *Peer) ExpectClosed(t testing.TB, d time.Duration) {
	t.Helper()
	if !p.await(d, func() bool { return p.err != nil }) {
		t.Fatalf("%s: the node did not close the connection within %v", p.Addr(), d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > p.pos {
		t.Fatalf("%s: unexpected bytes from the node before it closed: %q", p.Addr(), p.buf[p.pos:])
	}
	if !errors.Is(p.err, io.EOF) && !errors.Is(p.err, syscall.ECONNRESET) {
		t.Fatalf("%s: read error %v, want EOF or reset", p.Addr(), p.err)
	}
}

// AwaitClosed waits up to within for the node to close the connection
// (EOF or reset), discarding anything it sends, and returns how long that
// took.
func (p *Peer) AwaitClosed(t testing.TB, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if !p.await(within, func() bool { return p.err != nil }) {
		t.Fatalf("%s: the node did not close the connection within %v", p.Addr(), within)
	}
	p.mu.Lock()
	p.pos = len(p.buf)
	p.mu.Unlock()
	return time.Since(start)
}

// HangUp says the neighbour is done, as one that finished its rounds does:
// it closes its sending side, so the node reads the end of the stream. The
// test can still read what the node sends until it closes (ExpectClosed).
func (p *Peer) HangUp() error {
	if cw, ok := p.c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return p.c.Close()
}

// Close closes the connection.
func (p *Peer) Close() { p.c.Close() }

// Reset aborts a TCP connection with an RST (SO_LINGER 0), like a crashed
// host or a middlebox that drops state; another connection is closed.
func (p *Peer) Reset() {
	if tc, ok := p.c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	p.c.Close()
}

// Received returns every byte the node has sent so far, consumed or not.
func (p *Peer) Received() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.buf)
}

// OpenFDs returns the number of file descriptors this process has open,
// and skips the test where /proc cannot tell.
func OpenFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(ents)
}
