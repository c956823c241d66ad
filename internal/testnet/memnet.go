package testnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Network is an in-memory network for tests: hosts listen and dial by
// address ("10.0.0.2:7000"), and the test cuts, delays, resets and drops
// connections on demand. It has no goroutines of its own and waits only
// on channels and timers, so a node on it runs inside a testing/synctest
// bubble, on the bubble's fake clock, deterministically.
//
// What crosses a connection is delivered in order, after the network's
// delay, unless a partition holds it: a partition keeps what is sent (as
// a real network's buffers and retransmissions do) and delivers it when
// healed, and a dial across it hangs until the dialer gives up. Writes
// never block: a connection's buffer has no bound.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	conns     map[*memConn]struct{}
	cut       map[[2]string]bool // unordered pairs of hosts
	healed    chan struct{}      // closed and replaced when a cut heals
	delay     time.Duration
	port      int
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{
		listeners: map[string]*memListener{},
		conns:     map[*memConn]struct{}{},
		cut:       map[[2]string]bool{},
		healed:    make(chan struct{}),
		port:      40000,
	}
}

// Listen binds addr ("host:port"). It fails if addr is taken.
func (nw *Network) Listen(addr string) (net.Listener, error) {
	ta, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if _, ok := nw.listeners[addr]; ok {
		return nil, &net.OpError{Op: "listen", Net: "tcp", Addr: ta, Err: syscall.EADDRINUSE}
	}
	l := &memListener{nw: nw, addr: ta, key: addr, backlog: make(chan *memConn, 128), done: make(chan struct{})}
	nw.listeners[addr] = l
	return l, nil
}

// Dialer returns a dial function (Config.Dial) for a process on host:
// its connections come from host, on a port of the network's choosing.
func (nw *Network) Dialer(host string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) { return nw.dial(ctx, host, addr) }
}

func (nw *Network) dial(ctx context.Context, from, addr string) (net.Conn, error) {
	ta, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	for {
		nw.mu.Lock()
		if nw.cut[pair(from, ta.IP.String())] {
			healed := nw.healed
			nw.mu.Unlock()
			select { // the SYN is lost until the cut heals
			case <-healed:
				continue
			case <-ctx.Done():
				return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: ta, Err: ctx.Err()}
			}
		}
		l := nw.listeners[addr]
		if l == nil {
			nw.mu.Unlock()
			return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: ta, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		nw.port++
		local := &net.TCPAddr{IP: net.ParseIP(from), Port: nw.port}
		if local.IP == nil {
			nw.mu.Unlock()
			return nil, fmt.Errorf("testnet: dialer host %q is not an IP address", from)
		}
		a2b, b2a := newPipe(nw, local, ta), newPipe(nw, ta, local)
		client := &memConn{nw: nw, local: local, remote: ta, in: b2a, out: a2b}
		server := &memConn{nw: nw, local: ta, remote: local, in: a2b, out: b2a}
		client.peer, server.peer = server, client
		client.init()
		server.init()
		nw.conns[client], nw.conns[server] = struct{}{}, struct{}{}
		nw.mu.Unlock()
		select {
		case l.backlog <- server:
			return client, nil
		case <-l.done:
			client.Close()
			server.Close()
			return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: ta, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		case <-ctx.Done():
			client.Close()
			server.Close()
			return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: ta, Err: ctx.Err()}
		}
	}
}

// Partition cuts hosts a and b apart (IP addresses, no ports): what they
// send each other is held, and dials between them hang, until Heal.
func (nw *Network) Partition(a, b string) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.cut[pair(a, b)] = true
}

// Heal ends the partition between a and b: what was held is delivered.
func (nw *Network) Heal(a, b string) {
	nw.mu.Lock()
	delete(nw.cut, pair(a, b))
	close(nw.healed)
	nw.healed = make(chan struct{})
	var ps []*pipe
	for c := range nw.conns {
		ps = append(ps, c.out)
	}
	nw.mu.Unlock()
	for _, p := range ps {
		p.poke()
	}
}

// SetDelay makes everything sent from now on arrive d later.
func (nw *Network) SetDelay(d time.Duration) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.delay = d
}

// Reset resets every connection with an end on host, as an RST would:
// every write fails at once; both ends read what was sent before it,
// then, once the network's delay has passed, their reads fail with
// ECONNRESET. (With a delay, a node can read a line and fail to answer
// it before it hears of the reset: the race a real RST can win.)
func (nw *Network) Reset(host string) int { return nw.each(host, (*memConn).reset) }

// Drop closes every connection with an end on host from that end, as its
// process would on exit: the other end reads what was sent, then EOF.
func (nw *Network) Drop(host string) int {
	return nw.each(host, func(c *memConn) { c.Close() })
}

// each applies f to every connection end on host, and says how many there
// were.
func (nw *Network) each(host string, f func(*memConn)) int {
	nw.mu.Lock()
	var cs []*memConn
	for c := range nw.conns {
		if c.local.IP.String() == host {
			cs = append(cs, c)
		}
	}
	nw.mu.Unlock()
	for _, c := range cs {
		f(c)
	}
	return len(cs)
}

// Conns says how many connection ends are open on host.
func (nw *Network) Conns(host string) int {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	k := 0
	for c := range nw.conns {
		if c.local.IP.String() == host {
			k++
		}
	}
	return k
}

func (nw *Network) held(from, to net.IP) bool {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.cut[pair(from.String(), to.String())]
}

// sendDelay is the delay and the time to count it from.
func (nw *Network) sendDelay() (time.Duration, time.Time) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.delay, time.Now()
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

func parseAddr(addr string) (*net.TCPAddr, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("testnet: %q: the host must be an IP address", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("testnet: %q: bad port", addr)
	}
	return &net.TCPAddr{IP: ip, Port: p}, nil
}

type memListener struct {
	nw      *Network
	addr    *net.TCPAddr
	key     string
	backlog chan *memConn
	done    chan struct{}
	once    sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.backlog:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: net.ErrClosed}
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.nw.mu.Lock()
		if l.nw.listeners[l.key] == l {
			delete(l.nw.listeners, l.key)
		}
		l.nw.mu.Unlock()
		for {
			select {
			case c := <-l.backlog: // dialed but never accepted: refused
				c.reset()
			default:
				return
			}
		}
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return l.addr }

// pipe is one direction of a connection.
type pipe struct {
	nw       *Network
	from, to net.IP

	mu     sync.Mutex
	chunks []chunk
	eof    bool      // the writer closed
	rst    bool      // reset: writes fail; reads, once drained and at rstAt
	rstAt  time.Time // when the reset reaches the reader (after the delay)
	wake   chan struct{}
}

type chunk struct {
	b  []byte
	at time.Time // not to be read before
}

func newPipe(nw *Network, from, to *net.TCPAddr) *pipe {
	return &pipe{nw: nw, from: from.IP, to: to.IP, wake: make(chan struct{}, 1)}
}

func (p *pipe) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// memConn is one end of a connection.
type memConn struct {
	nw            *Network
	local, remote *net.TCPAddr
	in, out       *pipe
	peer          *memConn

	mu       sync.Mutex
	closed   bool
	rdl, wdl time.Time
	buf      []byte // read but not yet returned
	done     chan struct{}
}

func (c *memConn) init() { c.done = make(chan struct{}) }

var errReset = os.NewSyscallError("read", syscall.ECONNRESET)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
func (timeoutErr) Unwrap() error   { return os.ErrDeadlineExceeded }

func (c *memConn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.local, Addr: c.remote, Err: err}
}

// Read returns what has arrived, waiting for it.
func (c *memConn) Read(b []byte) (int, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, c.opErr("read", net.ErrClosed)
		}
		if len(c.buf) > 0 {
			k := copy(b, c.buf)
			c.buf = c.buf[k:]
			c.mu.Unlock()
			return k, nil
		}
		dl := c.rdl
		c.mu.Unlock()
		now := time.Now()
		if !dl.IsZero() && !now.Before(dl) {
			return 0, c.opErr("read", timeoutErr{})
		}
		p := c.in
		p.mu.Lock()
		var wait time.Duration = -1
		if p.rst && len(p.chunks) == 0 {
			if !now.Before(p.rstAt) {
				p.mu.Unlock()
				return 0, c.opErr("read", errReset)
			}
			wait = p.rstAt.Sub(now)
		}
		held := len(p.chunks) > 0 && c.nw.held(p.from, p.to)
		if len(p.chunks) > 0 && !held {
			if ch := p.chunks[0]; now.Before(ch.at) {
				wait = ch.at.Sub(now)
			} else {
				p.chunks = p.chunks[1:]
				p.mu.Unlock()
				c.mu.Lock()
				c.buf = ch.b
				c.mu.Unlock()
				continue
			}
		} else if len(p.chunks) == 0 && p.eof {
			p.mu.Unlock()
			return 0, io.EOF
		}
		p.mu.Unlock()
		if !dl.IsZero() && (wait < 0 || dl.Sub(now) < wait) {
			wait = dl.Sub(now)
		}
		var t *time.Timer
		var timer <-chan time.Time
		if wait >= 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-p.wake:
		case <-timer:
		case <-c.done:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// Write sends b; it never blocks.
func (c *memConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	closed, dl := c.closed, c.wdl
	c.mu.Unlock()
	if closed {
		return 0, c.opErr("write", net.ErrClosed)
	}
	if !dl.IsZero() && !time.Now().Before(dl) {
		return 0, c.opErr("write", timeoutErr{})
	}
	delay, now := c.nw.sendDelay()
	p := c.out
	p.mu.Lock()
	if p.rst {
		p.mu.Unlock()
		return 0, c.opErr("write", os.NewSyscallError("write", syscall.ECONNRESET))
	}
	if p.eof {
		p.mu.Unlock()
		return 0, c.opErr("write", os.NewSyscallError("write", syscall.EPIPE))
	}
	p.chunks = append(p.chunks, chunk{b: append([]byte(nil), b...), at: now.Add(delay)})
	p.mu.Unlock()
	p.poke()
	return len(b), nil
}

// Close closes this end: the peer reads what was sent, then EOF; its
// writes fail.
func (c *memConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.opErr("close", net.ErrClosed)
	}
	c.closed = true
	close(c.done)
	c.mu.Unlock()
	c.out.mu.Lock()
	c.out.eof = true
	c.out.mu.Unlock()
	c.out.poke()
	c.in.mu.Lock()
	c.in.eof = true // the peer's writes now fail
	c.in.mu.Unlock()
	c.nw.mu.Lock()
	delete(c.nw.conns, c)
	c.nw.mu.Unlock()
	return nil
}

// reset fails both directions: what was sent before it is still read,
// then reads fail; writes fail at once.
func (c *memConn) reset() {
	delay, now := c.nw.sendDelay()
	for _, p := range []*pipe{c.in, c.out} {
		p.mu.Lock()
		p.rst, p.rstAt = true, now.Add(delay)
		p.mu.Unlock()
		p.poke()
	}
	c.nw.mu.Lock()
	delete(c.nw.conns, c)
	delete(c.nw.conns, c.peer)
	c.nw.mu.Unlock()
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

func (c *memConn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *memConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	c.mu.Unlock()
	c.in.poke() // a waiting Read takes the new deadline
	return nil
}

func (c *memConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	c.mu.Unlock()
	return nil
}

var _ net.Conn = (*memConn)(nil)
