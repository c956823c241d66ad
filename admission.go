package chainsync

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chainsync-go/chainsync/internal/rawio"
	"github.com/chainsync-go/chainsync/protocol"
)

// Admission of would-be predecessors (docs/DESIGN.md "Roles and
// connections": pending connections are bounded in number, and a stray
// client never displaces the real predecessor).
//
// A stranger must not be able to lock the real predecessor out by filling
// the MaxPending slots with connections that say nothing, or say it slowly.
// So a new connection never loses to those already waiting: when the slots
// are full it takes the place of the pending connection that has made the
// least progress (sent nothing < sent something < authenticated), the
// oldest of those. A predecessor that sends its first bytes promptly is
// therefore overtaken only if MaxPending-1 newer connections that also
// sent bytes arrive before it authenticates; idle connections can never
// evict it once its first bytes arrived. In secure modes an authenticated
// connection is evicted only by another one, when every slot holds one.
//
// Every log line a peer can cause at will (refused, evicted and timed-out
// would-be predecessors, bad input on any link, a successor that fails
// authentication) is rate-limited by the node's one admitLimiter, so that
// a flood cannot flood the log; the trace gets the same sample, and one
// TraceViolation with Count for what it left out.

// Progress of a pending connection, least first: the eviction order.
const (
	stageIdle   = iota // has sent nothing yet
	stageActive        // has sent bytes, not authenticated (or plain TCP)
	stageAuthed        // passed the TLS handshake and PSK proof
)

var stageNames = [...]string{"sent nothing", "sent bytes, not authenticated", "authenticated, no protocol line yet"}

// pendingConn is what admission knows of one pending link.
type pendingConn struct {
	raw    net.Conn      // the accepted connection, closed to evict it
	gone   chan struct{} // closed when its servePred has ended
	since  time.Time
	active atomic.Bool // the peer has sent bytes
	authed bool        // the loop's
}

func (p *pendingConn) stage() int {
	switch {
	case p.authed:
		return stageAuthed
	case p.active.Load():
		return stageActive
	}
	return stageIdle
}

// admission tracks the pending predecessor connections: those accepted
// whose first protocol line has not been accepted yet. It belongs to the
// loop: the acceptor and each connection's goroutine reach it through
// the loop's inputs (loop).
type admission struct {
	pending map[*link]bool         // pending now (not evicted, not promoted, not closed)
	conns   map[*link]*pendingConn // every connection whose servePred runs
	lim     *admitLimiter
	closed  bool // the node is closing: nothing more is admitted

	max     int             // Config.MaxPending
	timeout time.Duration   // Config.PendingTimeout, for the log
	closing <-chan struct{} // the node's context's Done: it is closing
	crew    *crew
	loop    asker
}

// asker is how a goroutine off the loop reaches it: an input, or a
// question that waits for the loop's reply (false: the loop has ended).
type asker interface {
	inbox
	ask(in input) (reply, bool)
}

func newAdmission(cfg *Config, lim *admitLimiter, done <-chan struct{}, c *crew, loop asker) *admission {
	return &admission{pending: make(map[*link]bool), conns: make(map[*link]*pendingConn), lim: lim,
		max: cfg.MaxPending, timeout: cfg.PendingTimeout, closing: done, crew: c, loop: loop}
}

// closeAll closes every pending connection (Close). Loop only.
func (a *admission) closeAll() {
	a.closed = true
	for l := range a.pending {
		l.closeConn()
	}
}

// admit registers l as pending, first evicting one pending connection if
// MaxPending are already waiting. The caller must then call settle with
// the result, off the loop. Loop only.
func (a *admission) admit(l *link) (evicted <-chan struct{}) {
	if len(a.pending) >= a.max {
		evicted = a.evictOne(l.peer)
	}
	a.pending[l] = true
	a.conns[l] = &pendingConn{raw: l.c, gone: make(chan struct{}), since: time.Now()}
	return evicted
}

// settle waits (briefly) until an evicted connection's goroutine has
// ended, so that a flood cannot pile up goroutines faster than they exit:
// at most MaxPending+1 serve would-be predecessors.
func (a *admission) settle(evicted <-chan struct{}) {
	if evicted == nil {
		return
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-evicted:
	case <-t.C:
	case <-a.closing:
	}
}

// evictOne closes the pending connection with the least progress, oldest
// first, to make room for a connection from newPeer, and returns the
// channel closed when its goroutine is gone. Loop only.
func (a *admission) evictOne(newPeer string) <-chan struct{} {
	var links []*link
	var cands []*pendingConn
	for l := range a.pending {
		if p := a.conns[l]; p != nil {
			links, cands = append(links, l), append(cands, p)
		}
	}
	i := pickVictim(cands)
	if i < 0 {
		return nil
	}
	victim, vp := links[i], cands[i]
	delete(a.pending, victim)
	if !a.crew.spawn(func() { vp.raw.Close() }) { // a TLS close writes: never on the loop
		vp.raw.Close()
	}
	a.lim.note(kindEvicted, slog.LevelWarn,
		"evicted a pending connection to make room for a new one: too many connections have not sent a protocol line yet",
		"peer", victim.peer, "stage", stageNames[vp.stage()], "age", time.Since(vp.since).Round(time.Millisecond),
		"new_peer", newPeer, "limit", a.max)
	return vp.gone
}

// pickVictim returns the index of the connection to evict: the least
// progress, then the oldest; -1 if there is none.
func pickVictim(cands []*pendingConn) int {
	best, bs := -1, 0
	for i, p := range cands {
		s := p.stage()
		if best < 0 || s < bs || (s == bs && p.since.Before(cands[best].since)) {
			best, bs = i, s
		}
	}
	return best
}

// done forgets l once its servePred ends. Loop only.
func (a *admission) done(l *link) {
	if p := a.conns[l]; p != nil {
		close(p.gone)
		delete(a.conns, l)
	}
}

// authenticated records that l passed the handshake; false means l is no
// longer pending (evicted, or the node is closing). Loop only.
func (a *admission) authenticated(l *link) bool {
	p := a.conns[l]
	if p == nil || !a.pending[l] {
		return false
	}
	p.authed = true
	return true
}

// stillPending reports whether l is pending, that is, not evicted. Loop
// only.
func (a *admission) stillPending(l *link) bool { return a.pending[l] }

// activeConn marks its pendingConn active on the first bytes received.
type activeConn struct {
	net.Conn
	p *pendingConn
}

func (c *activeConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	if k > 0 && !c.p.active.Load() {
		c.p.active.Store(true)
	}
	return k, err
}

// NetConn returns the connection c wraps (rawio looks under a TLS link
// at its socket through it).
func (c *activeConn) NetConn() net.Conn { return c.Conn }

// watch returns raw wrapped so that l's first bytes mark it active,
// and read and written with raw system calls (rawio.NewConn: under a TLS
// link, as a plain TCP link is). Loop only.
func (a *admission) watch(l *link, raw net.Conn) net.Conn {
	p := a.conns[l]
	if p == nil {
		return raw
	}
	return &activeConn{Conn: rawio.NewConn(raw), p: p}
}

// pendingReader is what the wire reader of a predecessor connection reads
// from. While the connection is pending, it reports the end of the stream
// (a timeout, or the peer hanging up) through the rate limiter, and takes
// the link out of the pending set, so that the read loop's own handling
// of the error stays silent. Writes do not pass through it.
type pendingReader struct {
	a *admission
	l *link
	r io.Reader
	p *pendingConn // nil: already secured, activity tracked below TLS
	// partial: the bytes read so far end inside a line. A pending
	// connection has sent whole lines only if those lines said no more
	// than that the peer is alive (its identity line, HEARTBEAT): a
	// round's line ends the pending state, a bad one the connection.
	partial bool
}

// reader returns the pendingReader of l over r; track: r is the raw
// connection, whose first bytes mark l active.
func (a *admission) reader(l *link, r io.Reader, track bool) io.Reader {
	pr := &pendingReader{a: a, l: l, r: r}
	if track {
		r, _ := a.loop.ask(input{kind: inTrack, l: l})
		pr.p = r.pc
	}
	return pr
}

func (r *pendingReader) Read(b []byte) (int, error) {
	for {
		k, err := r.r.Read(b)
		if k > 0 {
			r.partial = b[k-1] != '\n'
			if r.p != nil && !r.p.active.Load() {
				r.p.active.Store(true)
			}
		}
		if err != nil && !r.partial && r.a.keepIdle(r.l, err) {
			continue
		}
		if err != nil {
			r.a.ended(r.l, err)
		}
		return k, err
	}
}

// alive is the peer address of the pending connection heard from last
// (it has sent whole lines that say it is alive, and no round's line),
// or "" if none has sent a line. Loop only.
func (a *admission) alive() string {
	var last *link
	for l := range a.pending {
		if h := l.heardAt(); h != 0 && (last == nil || h > last.heardAt()) {
			last = l
		}
	}
	if last == nil {
		return ""
	}
	return last.peer
}

// keepIdle reports whether a pending connection whose time to send a
// first line ran out, having sent nothing at all or only lines that say
// it is alive, may stay: while no predecessor is connected, an idle
// predecessor (a Head that is not ready yet has nothing to say; with
// heartbeats, it says only that it is alive, and, placed by --chain,
// who it is, which a node placed by --prev cannot check) is not a
// stranger to throw out every PendingTimeout, re-dial and log about. A
// stranger it might be holds only one pending slot, which any new
// connection takes over (evict).
func (a *admission) keepIdle(l *link, err error) bool {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	r, _ := a.loop.ask(input{kind: inKeepIdle, l: l})
	return r.ok
}

// keepIdle is admission.keepIdle, on the loop. Loop only.
func (lk *links) keepIdle(l *link) bool {
	if lk.lp.closed || !lk.adm.pending[l] || lk.pred != nil {
		return false
	}
	_ = l.c.SetReadDeadline(time.Now().Add(lk.cfg.PendingTimeout))
	return true
}

// ended reports a pending connection whose stream ended before its first
// protocol line; nothing if l is no longer pending.
func (a *admission) ended(l *link, err error) {
	a.loop.post(input{kind: inPendingEnd, l: l, err: err})
}

// endedNow is ended, on the loop.
func (a *admission) endedNow(l *link, err error) {
	if a.closed || !a.pending[l] {
		return
	}
	delete(a.pending, l)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		a.lim.note(kindTimedOut, slog.LevelWarn, "closed connection that sent no protocol line in time",
			"peer", l.peer, "limit", a.timeout)
		return
	}
	a.lim.note(kindClosed, slog.LevelInfo, "connection closed before sending a protocol line", "peer", l.peer)
}

// refused reports a would-be predecessor that failed the handshake, and
// whether it was logged (then the caller traces it too).
func (a *admission) refused(l *link, err error) bool {
	return a.lim.noteTraced(kindRefused, protocol.Pred, slog.LevelWarn, "refused would-be predecessor", "peer", l.peer, "reason", err.Error())
}

// Kinds of admission events, counted by admitLimiter.
const (
	kindRefused = iota
	kindEvicted
	kindTimedOut
	kindClosed
	kindBadInput     // a line the protocol refuses, on any link
	kindAcceptFailed // accept failed (out of descriptors under a flood)
	numKinds
)

// Rate limit of admission log lines: in each interval, the first
// admitBurst events of each kind are logged one by one (so that a single
// misconfigured neighbour shows with its address and reason); the rest are
// counted, and one summary line with the counts ends the interval.
var (
	admitInterval = 10 * time.Second
	admitBurst    = 10
)

// admitLimiter rate-limits the log lines (and trace events) that peers
// cause.
type admitLimiter struct {
	log    *slog.Logger
	kick   chan struct{} // an interval began
	burst  int           // events of each kind logged one by one per interval
	noPred bool          // the node has no predecessor (the Head): its refusals are its successor's
	// untraced, if set, records in the trace how many events of side were
	// neither logged nor traced one by one in the interval just ended.
	untraced func(side protocol.Side, count int, peer, last string, interval time.Duration)

	mu         sync.Mutex
	open       bool // an interval is running
	shown      [numKinds]int
	total      [numKinds]int
	lastPeer   string
	lastReason string
	hidden     [3]int // per side: events noteTraced did not show
}

func newAdmitLimiter(log *slog.Logger) *admitLimiter {
	return &admitLimiter{log: log, kick: make(chan struct{}, 1), burst: admitBurst}
}

// noteTraced is note for an event the caller also traces, on side: it
// reports whether the event was logged, and so is to be traced one by
// one; if not, it is counted in the interval's trace summary.
func (w *admitLimiter) noteTraced(kind int, side protocol.Side, level slog.Level, msg string, args ...any) bool {
	if w.note(kind, level, msg, args...) {
		return true
	}
	if int(side) < len(w.hidden) {
		w.mu.Lock()
		w.hidden[side]++
		w.mu.Unlock()
	}
	return false
}

// note logs one event at level, or counts it for the interval's summary;
// it reports whether it logged it.
func (w *admitLimiter) note(kind int, level slog.Level, msg string, args ...any) bool {
	w.mu.Lock()
	if !w.open {
		w.open = true
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	w.total[kind]++
	show := w.shown[kind] < w.burst
	if show {
		w.shown[kind]++
	} else {
		w.lastPeer, w.lastReason = "", msg
		for i := 0; i+1 < len(args); i += 2 {
			switch v, _ := args[i+1].(string); args[i] {
			case "peer", "next":
				w.lastPeer = v
			case "reason":
				w.lastReason = v
			}
		}
	}
	w.mu.Unlock()
	if show {
		w.log.Log(context.Background(), level, msg, args...)
	}
	return show
}

// flush ends the interval: one summary line if any event was not logged.
func (w *admitLimiter) flush(interval time.Duration) {
	w.mu.Lock()
	total, shown, untraced := w.total, w.shown, w.hidden
	peer, reason := w.lastPeer, w.lastReason
	w.total, w.shown, w.hidden, w.open = [numKinds]int{}, [numKinds]int{}, [3]int{}, false
	w.mu.Unlock()
	if w.untraced != nil {
		for side, c := range untraced {
			if c > 0 {
				w.untraced(protocol.Side(side), c, peer, reason, interval)
			}
		}
	}
	hidden := 0
	for k := range total {
		hidden += total[k] - shown[k]
	}
	if hidden == 0 {
		return
	}
	msg := "would-be predecessors refused, evicted or closed, and bad input from peers: more than the log shows one by one"
	if w.noPred {
		msg = "refusals by the successor and bad input from it: more than the log shows one by one"
	}
	w.log.Warn(msg,
		"interval", interval, "refused", total[kindRefused], "evicted", total[kindEvicted],
		"timed_out", total[kindTimedOut], "closed_early", total[kindClosed], "bad_input", total[kindBadInput], "accept_failed", total[kindAcceptFailed], "not_logged", hidden,
		"last_peer", peer, "last", reason)
}

// run writes the summaries until done is closed, and a last one then.
func (w *admitLimiter) run(done <-chan struct{}) {
	interval := admitInterval
	for {
		select {
		case <-done:
			w.flush(interval)
			return
		case <-w.kick:
		}
		t := time.NewTimer(interval)
		select {
		case <-done:
			t.Stop()
			w.flush(interval)
			return
		case <-t.C:
		}
		w.flush(interval)
	}
}
