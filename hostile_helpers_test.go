package chainsync

// Helpers for hostile_test.go: a log sink and a trace sink to read what a
// node reports, raw sockets that play a hostile (or a scripted honest)
// neighbour byte for byte, a fake successor listener, a resetting TCP proxy,
// and resource probes (goroutines, file descriptors, heap).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// ---- log sink -------------------------------------------------------------

type capturedLog struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

func (e capturedLog) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", e.Level, e.Msg)
	for k, v := range e.Attrs {
		fmt.Fprintf(&b, " %s=%q", k, v)
	}
	return b.String()
}

// logCapture is a slog.Handler that keeps every record, so tests can assert
// what the node reported (level, message, peer, reason).
type logCapture struct {
	mu      sync.Mutex
	entries []capturedLog
}

type captureHandler struct {
	s     *logCapture
	attrs []slog.Attr
	group string
}

func newLogCapture() (*logCapture, *slog.Logger) {
	s := &logCapture{}
	return s, slog.New(&captureHandler{s: s})
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	e := capturedLog{Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
	add := func(a slog.Attr) bool {
		k := a.Key
		if h.group != "" {
			k = h.group + "." + k
		}
		e.Attrs[k] = a.Value.Resolve().String()
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.s.mu.Lock()
	h.s.entries = append(h.s.entries, e)
	h.s.mu.Unlock()
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{s: h.s, attrs: append(append([]slog.Attr(nil), h.attrs...), as...), group: h.group}
}

func (h *captureHandler) WithGroup(g string) slog.Handler {
	return &captureHandler{s: h.s, attrs: h.attrs, group: g}
}

// find returns the entries for which match is true.
func (s *logCapture) find(match func(capturedLog) bool) []capturedLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []capturedLog
	for _, e := range s.entries {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

func (s *logCapture) count(match func(capturedLog) bool) int { return len(s.find(match)) }

// tail returns the last n entries, one a line, for failure messages.
func (s *logCapture) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, e := range s.entries[max(0, len(s.entries)-n):] {
		b.WriteString("    " + e.String() + "\n")
	}
	return b.String()
}

// ---- trace sink -----------------------------------------------------------

// traceCapture records a node's TraceEvents (Config.Trace).
type traceCapture struct {
	mu  sync.Mutex
	evs []TraceEvent
}

func (s *traceCapture) hook(ev TraceEvent) {
	s.mu.Lock()
	s.evs = append(s.evs, ev)
	s.mu.Unlock()
}

func (s *traceCapture) find(match func(TraceEvent) bool) []TraceEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []TraceEvent
	for _, ev := range s.evs {
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

func (s *traceCapture) count(match func(TraceEvent) bool) int { return len(s.find(match)) }

func traceKind(k TraceKind) func(TraceEvent) bool {
	return func(ev TraceEvent) bool { return ev.Kind == k }
}

func traceSideKind(k TraceKind, side protocol.Side) func(TraceEvent) bool {
	return func(ev TraceEvent) bool { return ev.Kind == k && ev.Side == side }
}

// activity counts the trace events that would show a node acting on input:
// state changes, tasks, messages sent (other than the re-sends that follow
// a reconnect), rounds ending.
func (s *traceCapture) activity() int {
	return s.count(func(ev TraceEvent) bool {
		switch ev.Kind {
		case TraceState, TraceTaskStart, TraceTaskEnd, TraceRoundDone:
			return true
		case TraceSent:
			return !ev.Resend
		}
		return false
	})
}

// ---- a node under observation ---------------------------------------------

// watched is a started node with its log and trace sinks.
type watched struct {
	*Node
	name string
	logs *logCapture
	tr   *traceCapture
}

// startWatched starts cfg with a log sink and a trace sink attached. The
// node is closed at cleanup; on failure its last log lines are printed.
func startWatched(t *testing.T, cfg Config) *watched {
	t.Helper()
	w := &watched{name: cfg.Name, tr: &traceCapture{}}
	w.logs, cfg.Logger = newLogCapture()
	cfg.Trace = w.tr.hook
	if cfg.peerLogBurst == 0 {
		cfg.peerLogBurst = 1 << 30 // these tests watch for every violation
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin, cfg.BackoffMax = 5*time.Millisecond, 50*time.Millisecond
	}
	nd, err := Start(cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.Name, err)
	}
	w.Node = nd
	t.Cleanup(func() {
		nd.Close()
		if t.Failed() {
			t.Logf("last log lines of node %s:\n%s", w.name, w.logs.tail(40))
		}
	})
	return w
}

// state returns the machine's state of round at the node (0 if unknown).
func (w *watched) state(round string) protocol.State {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, _ := w.m.State(round)
	return st
}

// active returns the number of unfinished rounds at the node.
func (w *watched) active() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m.Active()
}

// driverRounds returns the size of the driver's per-round table, which is
// never pruned: peer input alone must not grow it.
func (w *watched) driverRounds() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.rounds)
}

// pendingConns returns the number of accepted connections that have not
// sent a protocol line yet.
func (w *watched) pendingConns() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// predUp reports whether the node has a current predecessor connection.
func (w *watched) predUp() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pred != nil
}

func (w *watched) waitState(t *testing.T, round string, want protocol.State) {
	t.Helper()
	waitCond(t, 5*time.Second, fmt.Sprintf("node %s round %q in state %s", w.name, round, want), func() bool {
		return w.state(round) == want
	})
}

func (w *watched) waitDone(t *testing.T, round string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := w.Wait(ctx, round)
	if err != nil || res.Status != StatusDone {
		t.Fatalf("node %s round %q: %v %v (want done)", w.name, round, res, err)
	}
}

// mark is a position in a node's log and trace: reports after it are new.
type reportMark struct{ logs, trace int }

func (w *watched) mark() reportMark {
	w.logs.mu.Lock()
	w.tr.mu.Lock()
	defer w.logs.mu.Unlock()
	defer w.tr.mu.Unlock()
	return reportMark{len(w.logs.entries), len(w.tr.evs)}
}

// expectViolation waits until w reported, after m, a violation from peer on
// side, both in its log (Warn, naming the peer and the reason) and as a
// TraceViolation, and returns the reported error text. reason is a
// substring the error must contain ("" accepts any).
func (w *watched) expectViolation(t *testing.T, m reportMark, side protocol.Side, peer, reason string) string {
	t.Helper()
	what := "predecessor"
	if side == protocol.Succ {
		what = "successor"
	}
	var got string
	waitCond(t, 5*time.Second, fmt.Sprintf("node %s to report bad input from %s %s (%q)", w.name, what, peer, reason), func() bool {
		w.logs.mu.Lock()
		logs := slices.Clone(w.logs.entries[m.logs:])
		w.logs.mu.Unlock()
		w.tr.mu.Lock()
		trs := slices.Clone(w.tr.evs[m.trace:])
		w.tr.mu.Unlock()
		i := slices.IndexFunc(logs, func(e capturedLog) bool {
			return e.Level == slog.LevelWarn && strings.Contains(e.Msg, "bad input from "+what) &&
				e.Attrs["peer"] == peer && strings.Contains(e.Attrs["err"], reason)
		})
		j := slices.IndexFunc(trs, func(ev TraceEvent) bool {
			return ev.Kind == TraceViolation && ev.Side == side && ev.Peer == peer &&
				ev.Err != nil && strings.Contains(ev.Err.Error(), reason)
		})
		if i >= 0 && j >= 0 {
			got = logs[i].Attrs["err"]
			return true
		}
		return false
	})
	return got
}

func (w *watched) violations() int { return w.tr.count(traceKind(TraceViolation)) }

// ---- raw sockets ----------------------------------------------------------

// rawSock is one side of a TCP connection the test drives byte by byte.
type rawSock struct {
	c  *net.TCPConn
	br *bufio.Reader
}

func wrapRawSock(t *testing.T, c net.Conn) *rawSock {
	t.Cleanup(func() { c.Close() })
	return &rawSock{c: c.(*net.TCPConn), br: bufio.NewReader(c)}
}

func dialRawSock(t *testing.T, addr string) *rawSock {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return wrapRawSock(t, c)
}

// addr is this end's address: what the node logs as the peer.
func (r *rawSock) addr() string { return r.c.LocalAddr().String() }

// send writes b; errors are ignored (a node may close a hostile connection
// while the test is still writing to it).
func (r *rawSock) send(b []byte) error {
	_ = r.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := r.c.Write(b)
	return err
}

func (r *rawSock) sendLine(t *testing.T, s string) {
	t.Helper()
	if err := r.send([]byte(s)); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// expectLine reads one line and fails unless it is want (with its LF).
func (r *rawSock) expectLine(t *testing.T, want string) {
	t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r.br.ReadString('\n')
	if err != nil || got != want {
		t.Fatalf("%s: read %q, %v; want %q", r.addr(), got, err, want)
	}
}

// expectSilence fails if anything arrives within d.
func (r *rawSock) expectSilence(t *testing.T, d time.Duration) {
	t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(d))
	got, err := r.br.ReadString('\n')
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || got != "" {
		t.Fatalf("%s: want silence, read %q, %v", r.addr(), got, err)
	}
}

// expectClosed waits up to within for the node to close the connection
// (EOF or reset), discarding anything it sends, and returns how long that
// took.
func (r *rawSock) expectClosed(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = r.c.SetReadDeadline(start.Add(within))
	_, err := io.Copy(io.Discard, r.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: node did not close the connection within %v", r.addr(), within)
	}
	return time.Since(start)
}

// reset aborts the connection with an RST (SO_LINGER 0), like a crashed
// host or a middlebox that drops state.
func (r *rawSock) reset() {
	_ = r.c.SetLinger(0)
	r.c.Close()
}

// line is the wire form of cmd for round, as the draft writes it.
func wireLine(cmd, round string) string {
	if round == "" {
		return cmd + "\n"
	}
	return cmd + ":" + round + "\n"
}

// ---- fake successor -------------------------------------------------------

// fakeSucc is a listener that the node under test dials as its successor;
// each accepted connection is handed to the test to script.
type fakeSucc struct {
	ln    net.Listener
	conns chan *rawSock
}

func newFakeSucc(t *testing.T) *fakeSucc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSucc{ln: ln, conns: make(chan *rawSock, 256)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns <- &rawSock{c: c.(*net.TCPConn), br: bufio.NewReader(c)}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(f.conns)
		for c := range f.conns {
			c.c.Close()
		}
	})
	return f
}

func (f *fakeSucc) addr() string { return f.ln.Addr().String() }

// next returns the node's next connection to the fake successor.
func (f *fakeSucc) next(t *testing.T) *rawSock {
	t.Helper()
	select {
	case c := <-f.conns:
		t.Cleanup(func() { c.c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatalf("node did not dial the successor %s", f.addr())
		return nil
	}
}

// ---- resetting proxy ------------------------------------------------------

// resetProxy forwards connections to target and can abort all of them with
// an RST on both sides, to cut a link between two real nodes mid-round.
type resetProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*net.TCPConn
	wg     sync.WaitGroup
}

func newResetProxy(t *testing.T, target string) *resetProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &resetProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.reset()
		p.wg.Wait()
	})
	return p
}

func (p *resetProxy) addr() string { return p.ln.Addr().String() }

func (p *resetProxy) serve() {
	defer p.wg.Done()
	for {
		a, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			a.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, a.(*net.TCPConn), b.(*net.TCPConn))
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			// Plain reads and writes: io.Copy between two TCP
			// connections would splice through pooled pipes, which stay
			// open after the test and look like a descriptor leak.
			io.Copy(struct{ io.Writer }{dst}, struct{ io.Reader }{src})
			dst.Close()
			src.Close()
		}
		p.wg.Add(2)
		go pipe(a, b)
		go pipe(b, a)
	}
}

// reset aborts every forwarded connection with an RST on both ends.
func (p *resetProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.SetLinger(0)
		c.Close()
	}
	p.conns = nil
}

// ---- resources ------------------------------------------------------------

func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(ents)
}

// describeFDs describes the open descriptors and the TCP sockets, for leak
// reports.
func describeFDs() string {
	var b strings.Builder
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		fmt.Fprintf(&b, "  fd %s -> %s\n", e.Name(), target)
	}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		if data, err := os.ReadFile(f); err == nil {
			b.WriteString(f + ":\n" + string(data))
		}
	}
	return b.String()
}

func heapInuseAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

var warmNetPoller sync.Once

// checkNoLeaks records goroutines and file descriptors now and, at cleanup
// (after every node and socket the test opened is closed: register it
// first), waits for both to come back down to that baseline.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	warmNetPoller.Do(func() {
		// The runtime creates its network poller (an epoll and an eventfd
		// descriptor) on first use, and keeps it: do that before the
		// first baseline.
		if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
			ln.Close()
		}
	})
	g0, fd0 := runtime.NumGoroutine(), openFDs(t)
	t.Cleanup(func() {
		var g, fd int
		deadline := time.Now().Add(5 * time.Second)
		for {
			g, fd = runtime.NumGoroutine(), openFDs(t)
			if g <= g0 && fd <= fd0 {
				return
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("leak: goroutines %d -> %d, file descriptors %d -> %d after closing everything\n%s\n%s", g0, g, fd0, fd, describeFDs(), buf)
	})
}

// settle waits until the goroutine and descriptor counts are at most the
// given bounds and returns what they are then.
func settleResources(t *testing.T, maxG, maxFD int, what string) (int, int) {
	t.Helper()
	var g, fd int
	deadline := time.Now().Add(5 * time.Second)
	for {
		g, fd = runtime.NumGoroutine(), openFDs(t)
		if g <= maxG && fd <= maxFD {
			return g, fd
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: goroutines %d (want <= %d), file descriptors %d (want <= %d)", what, g, maxG, fd, maxFD)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitCond polls cond until it holds, or fails after d.
func waitCond(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func toMiB(b uint64) float64 { return float64(b) / (1 << 20) }

// recvWithin receives from ch, or fails after d.
func recvWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		var zero T
		return zero
	}
}
