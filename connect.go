package chainsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chainsync-go/chainsync/internal/rawio"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/secure"
	"github.com/chainsync-go/chainsync/transport"
	"github.com/chainsync-go/chainsync/wire"
)

// A node's connections to its neighbours: accepting predecessors (with
// admission.go), dialing the successor, reading lines and handing them to
// the machine, and links going up and down. The link type itself, with
// its outbox and writer, is in link.go.
//
// docs/DESIGN.md, "Roles and connections": every node but the Tail dials its
// successor, every node but the Head listens for its predecessor.

// connector is the part of a node that runs off its loop: the acceptor,
// the dialer and each connection's reader, reaching the loop with inputs
// and questions (connLoop). It holds a copy of the configuration and the
// parts it serves, never the node.
type connector struct {
	cfg  Config // a copy: read only
	ctx  context.Context
	ln   net.Listener
	adm  *admission // the loop's; off it only settle and reader, which say so
	prev *prevHost
	plim *admitLimiter
	crew *crew
	log  *slog.Logger
	loop connLoop
}

// connLoop is how the connector and its links reach the loop: inputs,
// questions, and (for a link's flush on the loop) follow-ups.
type connLoop interface {
	asker
	postWith(in input, s *seat) bool
	later(in input)
}

// acceptLoop accepts would-be predecessors. Each is pending until its first
// protocol line is accepted by the machine; only then does it replace the
// current predecessor connection.
func (cn *connector) acceptLoop() {
	adm := cn.adm
	// Connections whose host is being checked (prevhost.go), each on a
	// goroutine of its own: a slow resolver holds up only them.
	checks := make(chan struct{}, cn.cfg.MaxPending)
	b := transport.Backoff{Min: 10 * time.Millisecond, Max: time.Second}
	for {
		c, err := cn.ln.Accept()
		if err != nil {
			if cn.ctx.Err() != nil {
				return
			}
			cn.plim.note(kindAcceptFailed, slog.LevelWarn, "accept failed; retrying", "err", err)
			if !cn.sleep(b.Next()) {
				return
			}
			continue
		}
		b.Reset()
		transport.Tune(c)
		l := cn.newLink(c, protocol.Pred)
		if !cn.prev.on() {
			if !cn.admitConn(l, adm, nil) {
				return
			}
			continue
		}
		select {
		case checks <- struct{}{}:
		case <-cn.ctx.Done():
			c.Close()
			return
		}
		if !cn.crew.spawn(func() {
			if err := cn.prev.check(cn.ctx, c.RemoteAddr()); err != nil {
				<-checks
				cn.loop.post(input{kind: inStray, l: l, err: err})
				c.Close()
				return
			}
			cn.admitConn(l, adm, checks)
		}) {
			c.Close()
			return
		}
	}
}

// admitConn makes l a pending predecessor connection and serves it on a
// goroutine of its own, once any connection it evicted has gone (a flood
// of them is slowed down here); it takes its place off checks, if given,
// once admitted. False if the node is closing.
func (cn *connector) admitConn(l *link, adm *admission, checks chan struct{}) bool {
	r, _ := cn.loop.ask(input{kind: inAccepted, l: l})
	if r.ok && !cn.crew.spawn(func() { cn.servePred(l, adm) }) {
		r.ok = false
		cn.loop.post(input{kind: inServeEnd, l: l})
	}
	if !r.ok {
		if checks != nil {
			<-checks
		}
		l.c.Close()
		return false
	}
	adm.settle(r.gone)
	if checks != nil {
		<-checks
	}
	return true
}

// accepted admits l, a connection the acceptor took, as pending: it
// evicts another if MaxPending are (admission.go). Loop only.
func (lk *links) accepted(l *link) reply {
	if lk.lp.closed {
		return reply{}
	}
	return reply{ok: true, gone: lk.adm.admit(l)}
}

// secured is the end of l's TLS handshake: true if l, still pending and
// authenticated, now reads from sc. Loop only.
func (lk *links) secured(l *link, sc net.Conn, err error) bool {
	adm := lk.adm
	if err != nil || lk.lp.closed || !adm.authenticated(l) {
		if err != nil && !lk.lp.closed && adm.stillPending(l) && adm.refused(l, err) {
			lk.lp.trace(TraceEvent{Kind: TraceViolation, Side: protocol.Pred, Peer: l.peer, Err: err})
		}
		delete(adm.pending, l)
		return false
	}
	l.c = sc
	return true
}

// dialed makes l, a connection the dialer made, the current successor
// link; true if it did, and then the loop steps the link up. Loop only.
func (lk *links) dialed(l *link) bool {
	if lk.lp.closed {
		return false
	}
	lk.succ = l
	l.startWriter()
	lk.sendHello(l) // the identity line goes first (identity.go)
	lk.announceUp(l)
	return true // the loop steps the link up
}

// servePred secures a pending connection and reads from it.
func (cn *connector) servePred(l *link, adm *admission) {
	end := func() { cn.loop.post(input{kind: inServeEnd, l: l}) }
	handed := false // the reading went on elsewhere: end is the new reader's
	defer func() {
		if !handed {
			end()
		}
	}()
	start := time.Now()
	deadline := start.Add(cn.cfg.PendingTimeout)
	track := true // plain TCP: the reader sees the peer's first bytes
	if cn.cfg.Secure != nil {
		r, _ := cn.loop.ask(input{kind: inWatch, l: l})
		raw := r.conn
		if raw == nil {
			raw = l.c
		}
		sc, err := secure.Accept(cn.ctx, cn.cfg.Secure, raw, deadline)
		var in input
		in.kind, in.l, in.err = inSecured, l, err
		if sc != nil {
			in.conn = sc
		}
		if r, _ := cn.loop.ask(in); !r.ok {
			l.c.Close()
			if sc != nil {
				sc.Close()
			}
			return
		}
		track = false
	}
	_ = l.c.SetReadDeadline(deadline)
	l.r = wire.NewReader(adm.reader(l, rawio.NewReader(l.c), track))
	handed = cn.readLoop(l, end)
}

// dialLoop keeps a connection to the successor, re-dialing whenever it is
// lost. After a link that worked, the backoff starts again from its
// minimum, so the first retry after a loss is attempt 1.
func (cn *connector) dialLoop() {
	ds := &dialState{b: transport.Backoff{Min: cn.cfg.BackoffMin, Max: cn.cfg.BackoffMax}, dial: cn.dialFunc()}
	ds.onRetry = func(err error, attempt int, next time.Duration) {
		ds.attempts++
		if ds.attempts == 1 || ds.attempts%20 == 0 {
			cn.log.Info("successor not reachable yet; retrying", "next", cn.cfg.Next, "attempt", ds.attempts,
				"retry_in", next.Round(time.Millisecond), "err", err)
		}
	}
	cn.dialFrom(ds, nil, time.Time{})
}

// dialState is what the dial loop keeps from one connection to the next.
type dialState struct {
	b        transport.Backoff
	attempts int
	onRetry  func(err error, attempt int, next time.Duration)
	dial     transport.DialFunc
}

// dialFrom is the dial loop, from the end of the reading of l (nil: from
// the first dial), which came up at up. It returns when the node closes,
// or when a task run on its goroutine handed the reading of l on
// (inline.go): the reader that took over goes on from there.
func (cn *connector) dialFrom(ds *dialState, l *link, up time.Time) {
	b, dial, onRetry := &ds.b, ds.dial, ds.onRetry
	for {
		if l != nil {
			if l.heardAt() != 0 || time.Since(up) > 5*time.Second {
				// A link that worked: come back fast after a transient drop,
				// and count the attempts from one again.
				b.Reset()
				ds.attempts = 0
			}
			if !cn.sleep(b.Next()) {
				return
			}
			l = nil
		}
		c, err := secure.Dial(cn.ctx, cn.cfg.Secure, dial, cn.cfg.Next, b, cn.cfg.PendingTimeout, onRetry)
		if err != nil {
			if cn.ctx.Err() != nil {
				return // closing
			}
			if cn.plim.noteTraced(kindRefused, protocol.Succ, slog.LevelWarn, "successor refused or failed authentication; nothing sent; retrying",
				"next", cn.cfg.Next, "reason", err.Error()) {
				cn.loop.post(input{kind: inViolation, trace: &TraceEvent{Kind: TraceViolation, Side: protocol.Succ, Peer: cn.cfg.Next, Err: err}})
			}
			if !cn.sleep(b.Next()) {
				return
			}
			continue
		}
		l = cn.newLink(c, protocol.Succ)
		l.r = wire.NewReader(rawio.NewReader(c))
		if r, _ := cn.loop.ask(input{kind: inDialed, l: l}); !r.ok {
			c.Close()
			return
		}
		up = time.Now()
		if cn.readLoop(l, func() { cn.dialFrom(ds, l, up) }) {
			return // l and up stay as they are: the loop ends here
		}
	}
}

func (cn *connector) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-cn.ctx.Done():
		return false
	}
}

// readLoop reads l until it fails or is closed. All the complete lines of
// one read go to the loop in one event, so that the lines they cause
// leave in one write per link. It reports whether the reading was handed
// on to another goroutine (inline.go), which then runs then once the
// reading is over; else the caller goes on itself.
func (cn *connector) readLoop(l *link, then func()) (handed bool) {
	l.r.Heartbeats = extensionsOn(&cn.cfg)
	l.r.Receipts = cn.cfg.Receipts
	return cn.readOn(l, true, then)
}

// readOn reads l (first: nothing was read yet) until it fails or is
// closed (false), or until a task this goroutine ran outlasted
// inlineGrace and the reading was handed on to a new reader, which runs
// then once the reading is over (true).
func (cn *connector) readOn(l *link, first bool, then func()) bool {
	s := &seat{takeOver: func() bool {
		return cn.crew.spawn(func() {
			if !cn.readOn(l, false, then) {
				then()
			}
		})
	}}
	for {
		msg, err := l.r.ReadMessage()
		if err != nil {
			cn.loop.post(input{kind: inReadEnd, l: l, err: err})
			return false
		}
		l.heard()
		if h, ok := l.r.Hello(); ok {
			// The identity line (identity.go), read as a HEARTBEAT.
			isFirst := first
			first = false
			hello := h // only this copy escapes: no allocation for other lines
			if !cn.loop.post(input{kind: inHello, l: l, hello: &hello, flag: isFirst}) {
				return false
			}
			continue
		}
		if msg, err = l.receiptMessage(msg); err != nil { // receipts.go
			cn.loop.post(input{kind: inReadEnd, l: l, err: err})
			return false
		}
		if first && msg.Cmd == protocol.Heartbeat && l.side == protocol.Pred {
			// A would-be predecessor that says only that it is alive may
			// claim a live one's place (duplicate.go).
			if !cn.loop.post(input{kind: inAlive, l: l}) {
				return false
			}
		}
		first = false
		if msg.Cmd == protocol.Heartbeat {
			continue // it only says the neighbour is alive
		}
		// One line, the usual case, travels in the input itself; more
		// that came in the same read, in a pooled batch (msgBatch).
		one := msg
		var mb *msgBatch
		var hello *wire.Hello // one out of place, after mb's
		for (mb == nil || len(mb.msgs) < maxBatch) && l.r.HasLine() {
			if msg, err = l.r.ReadMessage(); err != nil {
				break
			}
			// Heard with the first line: these came with it.
			if h, ok := l.r.Hello(); ok {
				hc := h
				hello = &hc
				break
			}
			if msg, err = l.receiptMessage(msg); err != nil {
				break
			}
			if msg.Cmd != protocol.Heartbeat {
				if mb == nil {
					mb = msgBatches.Get().(*msgBatch)
					mb.msgs = append(mb.msgs[:0], one)
				}
				mb.msgs = append(mb.msgs, msg)
			}
		}
		// A line that closes l (bad input, a refused first line) closes
		// its connection too: the next read fails and ends this loop.
		in := input{kind: inLines, l: l, msg: one}
		if mb != nil {
			in.msgs, in.batch = mb.msgs, mb
		}
		if hello != nil || err != nil {
			// Lines read after these wait for them: no task runs here.
			if !cn.loop.post(in) {
				return false
			}
		} else if ok := cn.loop.postWith(in, s); s.handedOn() {
			return true
		} else if !ok {
			return false
		}
		if hello != nil && !cn.loop.post(input{kind: inHello, l: l, hello: hello}) {
			return false
		}
		if err != nil {
			cn.loop.post(input{kind: inReadEnd, l: l, err: err})
			return false
		}
	}
}

// maxBatch bounds the lines of one read handed to the loop in one event.
const maxBatch = 64

// msgBatch holds the lines of one read, handed to the loop in one input
// and given back to msgBatches once the loop has acted on them (react):
// a new slice for each read (14 lines, 900 bytes of pointers, at a node
// of a pipelined chain) cost 6% of the node's CPU.
type msgBatch struct{ msgs []protocol.Message }

var msgBatches = sync.Pool{New: func() any { return &msgBatch{msgs: make([]protocol.Message, 0, maxBatch)} }}

// release gives b back for another read, holding nothing of its lines.
func (b *msgBatch) release() {
	clear(b.msgs)
	b.msgs = b.msgs[:0]
	msgBatches.Put(b)
}

// takePred makes the pending connection l the current predecessor
// connection, closing the one it replaces. Loop only.
func (lk *links) takePred(l *link) {
	delete(lk.adm.pending, l)
	_ = l.c.SetReadDeadline(time.Time{})
	if cur := lk.pred; cur != nil {
		lk.dup.replaced(cur, l) // duplicate.go
		cur.shut()
	}
	lk.pred = l
	l.startWriter()
	lk.announceUp(l)
}

// received logs and traces a line from l. Loop only.
func (lk *links) received(l *link, msg protocol.Message) {
	if infoOn(lk.log) {
		lk.log.Info("received", "round", msg.Round, "msg", msg.Cmd.String(), "from", l.side.String())
	}
	lk.lp.trace(TraceEvent{Kind: TraceReceived, Side: l.side, Peer: l.peer, Round: msg.Round, Msg: msg})
}

// traceUntraced records in the trace the violations the rate limit kept
// out of the log and the trace in the interval just ended: one
// TraceViolation with their Count (admission.go).
func (lk *links) traceUntraced(side protocol.Side, count int, peer, last string, interval time.Duration) {
	lk.lp.post(input{kind: inViolation, trace: &TraceEvent{Kind: TraceViolation, Side: side, Peer: peer, Count: count,
		Err: fmt.Errorf("%d more refused connections or bad lines in %v, not traced one by one (rate limit); the last: %s", count, interval, last)}})
}

// violation reports bad input on l and closes it; the log line and the
// trace record are rate-limited (a flood of junk costs a few lines).
// Loop only.
func (lk *links) violation(l *link, err error) {
	what := "predecessor"
	if l.side == protocol.Succ {
		what = "successor"
	}
	if lk.configMismatch(l, err) {
		lk.lp.trace(TraceEvent{Kind: TraceViolation, Side: l.side, Peer: l.peer, Err: err})
		lk.drop(l, err)
		return
	}
	args := []any{"peer", l.peer, "err", err.Error()}
	var v *protocol.Violation
	if errors.As(err, &v) && v.Ahead && lk.cfg.StateDir == "" {
		args = append(args, "hint", "the "+what+" is further along in this round than this node: this node may have restarted without --state-dir and lost its place")
	}
	if lk.plim.noteTraced(kindBadInput, l.side, slog.LevelWarn, "bad input from "+what+"; ignored it and closed the connection, waiting for a well-behaved "+what, args...) {
		lk.lp.trace(TraceEvent{Kind: TraceViolation, Side: l.side, Peer: l.peer, Err: err})
	}
	lk.drop(l, err)
}

// readFailed handles the end of l's stream. Loop only.
func (lk *links) readFailed(l *link, err error) {
	if lk.lp.closed || l.dropped {
		// A dropped link's reader runs on until its read fails; the rest
		// of what it read (junk after a refused line, or a line cut by
		// the close) was never taken: it is no second violation.
		return
	}
	var pe *wire.ProtocolError
	var ne net.Error
	switch {
	case errors.As(err, &pe):
		lk.violation(l, err)
		return
	case lk.adm.pending[l] && errors.As(err, &ne) && ne.Timeout():
		lk.plim.note(kindTimedOut, slog.LevelWarn, "closed connection that sent no protocol line in time", "peer", l.peer, "limit", lk.cfg.PendingTimeout)
	case lk.adm.pending[l]:
		lk.plim.note(kindClosed, slog.LevelInfo, "connection closed before sending a protocol line", "peer", l.peer)
	}
	lk.drop(l, err)
}

// drop closes l and, if it was a current link, hands back that link's
// end (downs) for the loop to step. Loop only.
func (lk *links) drop(l *link, err error) {
	l.dropped = true
	if !l.closing {
		l.shut()
	}
	delete(lk.adm.pending, l)
	if lk.pred != l && lk.succ != l {
		return
	}
	lk.refused(l, err)
	if lk.pred == l {
		lk.pred = nil
		lk.log.Info("predecessor link down; waiting for it to reconnect", "peer", l.peer, "err", err)
	} else {
		lk.succ = nil
		lk.log.Info("successor link down; re-dialing", "peer", l.peer, "err", err)
	}
	lk.lp.trace(TraceEvent{Kind: TraceLinkDown, Side: l.side, Peer: l.peer, Err: err})
	// The machine counts ConnectTimeout from when the neighbour was last
	// healthy: until now if this connection carried a line from it or
	// lasted; one that is refused, fails authentication or flaps does
	// not restart the count.
	// The loop steps it once the call that dropped l returns (downs).
	lk.downs = append(lk.downs, protocol.LinkDown(l.side, lk.st.since(l.heardAt())))
}

// announceUp reports the link up. Loop only.
func (lk *links) announceUp(l *link) {
	lk.log.Info("link up", "to", l.side.String(), "peer", l.peer)
	lk.lp.trace(TraceEvent{Kind: TraceLinkUp, Side: l.side, Peer: l.peer})
}

// configMismatch reports err, bad input on l, as a configuration mismatch
// if that is what it is: a READY or START for a round this node does not
// run, or an extension line at a node without extensions (docs/DESIGN.md,
// "Extension lines"). Reconnecting never mends those, so they are faults,
// reported once, not bad input warned about on every reconnect. Loop only.
func (lk *links) configMismatch(l *link, err error) bool {
	if l.side == protocol.Pred && lk.pred != nil && l != lk.pred {
		// A new connection while the predecessor is up and well-behaved
		// is a stranger (on plain TCP anyone can connect): its bad line
		// is bad input, never a reason to halt the chain.
		return false
	}
	if lk.undo.undoMismatch(l, err) {
		return true // undo.go
	}
	peer := lk.peerName(l.side)
	var pe *wire.ProtocolError
	if errors.As(err, &pe) && pe.Extension {
		cmd, _, _ := strings.Cut(string(pe.Line), " ")
		cmd = strings.TrimSuffix(cmd, "\r")
		lk.mismatch(l, "extension", "", fmt.Sprintf("%s sends %s, an extension line (it runs with --heartbeat or --receipts); this node runs without --heartbeat and without --receipts: set the same --heartbeat and --receipts on every node of the chain",
			peer, cmd))
		return true
	}
	var v *protocol.Violation
	if !errors.As(err, &v) {
		return false
	}
	notRun := lk.cfg.Rounds != nil && !slices.Contains(lk.cfg.Rounds, v.Msg.Round)
	switch {
	case v.Mismatch && v.Msg.Cmd == protocol.FaultNotice:
		lk.mismatch(l, "extension", "", fmt.Sprintf("%s sends fault notices, an extension line (it runs with --heartbeat or --receipts); this node runs without --heartbeat and without --receipts: set the same --heartbeat and --receipts on every node of the chain", peer))
	case v.Mismatch || v.State == 0 && notRun && v.Msg.Cmd == protocol.Ready && v.From == protocol.Pred:
		lk.mismatch(l, "round", v.Msg.Round, fmt.Sprintf("%s opens round %s; this node runs %s", peer, roundName(v.Msg.Round), runsText(lk.cfg.Rounds)))
	case v.State == 0 && notRun && v.Msg.Cmd == protocol.Start && v.From == protocol.Succ:
		lk.mismatch(l, "round", v.Msg.Round, fmt.Sprintf("%s sends START for round %s; this node runs %s", peer, roundName(v.Msg.Round), runsText(lk.cfg.Rounds)))
	default:
		return false
	}
	return true
}

// restarting reports whether a restart grace is in force for a node on
// side. Loop only.
func (lk *links) restarting(side protocol.Side) bool {
	return slices.ContainsFunc(lk.view.Graces(), func(g protocol.GraceView) bool { return g.Side == side })
}

// refusedWithin: a successor that closes a new connection this soon after
// this node's first line, having said nothing on it, refused that line.
const refusedWithin = time.Second

// refused logs, once, a successor that closed the connection right after
// this node's first line on it without a word: the way a node without the
// extension lines says it is configured differently (it cannot send a
// notice). Not while a node on that side may be restarting (its restart
// grace is in force): a successor on its way down may still take a
// connection and then reset it, which looks the same. Loop only.
func (lk *links) refused(l *link, err error) {
	if l.side != protocol.Succ || lk.refusedOnce || l.heardAt() != 0 || l.firstAt.IsZero() ||
		time.Since(l.firstAt) > refusedWithin || !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) ||
		lk.restarting(l.side) {
		return
	}
	lk.refusedOnce = true
	if lk.faults.mismatchedOn(l.side) || lk.undo.undoRefused(l) || lk.extensionsRefused(l) { // identity.go, undo.go
		return
	}
	lk.log.Error("the successor closed the connection right after this node's first line ("+l.firstLine+"), without answering: the two nodes are probably configured differently; compare both nodes' flags (--round/--rounds, --heartbeat, --serve), or run chainsync check on both",
		"peer", l.peer)
}
