package chainsync

// Helpers for hostile_test.go: a log sink and a trace sink to read what a
// node reports, a resetting TCP proxy, and resource probes (goroutines,
// file descriptors, heap). Raw neighbours that play a hostile (or a
// scripted honest) neighbour byte for byte are testnet.Peer.

import (
	"context"
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

	"github.com/chainsync-go/chainsync/internal/testnet"
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
	var st protocol.State
	w.call(func() { st, _ = w.d.view.State(round) })
	return st
}

// active returns the number of unfinished rounds at the node.
func (w *watched) active() int {
	k := 0
	w.call(func() { k = w.d.view.Active() })
	return k
}

// driverRounds returns the size of the driver's per-round table, which is
// never pruned: peer input alone must not grow it.
func (w *watched) driverRounds() int {
	k := 0
	w.call(func() { k = len(w.d.book.all()) })
	return k
}

// pendingConns returns the number of accepted connections that have not
// sent a protocol line yet.
func (w *watched) pendingConns() int {
	k := 0
	w.call(func() { k = len(w.d.links.adm.pending) })
	return k
}

// predUp reports whether the node has a current predecessor connection.
func (w *watched) predUp() bool {
	up := false
	w.call(func() { up = w.d.links.pred != nil })
	return up
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

// waitReceived waits until w has traced receiving n messages from side
// (TraceReceived). A node traces what a message made it do after the
// message and before the next message it handles, and its trace keeps
// that order: once the n-th is traced, so is everything the ones before
// it made the node do. A test that checks what some messages did not do
// sends one more after them, as a barrier, and waits for it here.
func (w *watched) waitReceived(t *testing.T, side protocol.Side, n int) {
	t.Helper()
	waitCond(t, 5*time.Second, fmt.Sprintf("node %s to receive %d messages from side %v", w.name, n, side), func() bool {
		return w.tr.count(traceSideKind(TraceReceived, side)) >= n
	})
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

// Raw neighbours are testnet.Peer (dialed, wrapped or accepted on a
// testnet.PeerListener that plays a fake successor).

// wireLine is the wire form of cmd for round, as the draft writes it.
func wireLine(cmd, round string) string {
	if round == "" {
		return cmd + "\n"
	}
	return cmd + ":" + round + "\n"
}

// ---- resetting proxy ------------------------------------------------------

// resetProxy forwards connections to target and can abort all of them with
// an RST on both sides, to cut a link between two real nodes mid-round
// (losing whatever was in flight). It is the one proxy of this package's
// tests.
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
		p.Reset()
		p.wg.Wait()
	})
	return p
}

func (p *resetProxy) Addr() string { return p.ln.Addr().String() }

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

// Reset aborts every forwarded connection with an RST on both ends.
func (p *resetProxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.SetLinger(0)
		c.Close()
	}
	p.conns = nil
}

// ---- resources ------------------------------------------------------------

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
	g0, fd0 := runtime.NumGoroutine(), testnet.OpenFDs(t)
	t.Cleanup(func() {
		var g, fd int
		if poll(5*time.Second, 10*time.Millisecond, func() bool {
			g, fd = runtime.NumGoroutine(), testnet.OpenFDs(t)
			return g <= g0 && fd <= fd0
		}) {
			return
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
	if !poll(5*time.Second, 10*time.Millisecond, func() bool {
		g, fd = runtime.NumGoroutine(), testnet.OpenFDs(t)
		return g <= maxG && fd <= maxFD
	}) {
		t.Fatalf("%s: goroutines %d (want <= %d), file descriptors %d (want <= %d)", what, g, maxG, fd, maxFD)
	}
	return g, fd
}

// poll calls cond every interval until it holds, and reports whether it
// did within d (cond is called once more at the end). It holds the one
// polling sleep of this package's tests: for a state that no event
// announces (a count of goroutines, a Snapshot field).
func poll(d, interval time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}

// waitCond polls cond until it holds, or fails after d.
func waitCond(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(d, 2*time.Millisecond, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
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
