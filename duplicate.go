package chainsync

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// One node in each place (docs/DESIGN.md, "Roles and connections", and
// docs/FAULTS.md, "duplicate-node"). With the extension lines on, a new
// predecessor connection replaces the current one only if the current one
// is down or silent: a restarted predecessor whose old connection is
// half-open gets in once that one has gone quiet. While the current one
// is alive the newcomer is held, its lines kept unread by the machine; if
// the current connection is heard from after the newcomer arrived, two
// live processes claim one place: this node reports duplicate-node
// (naming both addresses), tells the newcomer with a notice and closes
// it, and the newcomer reports duplicate-node itself and ends the rounds
// it opened, so that none of their tasks runs anywhere. Without the
// extension lines there is no telling a live connection from a dead one:
// the newcomer replaces the current one as the draft's reconnects want,
// and a link that flips again and again between two addresses is logged
// at ERROR, at most once a minute.

// dupState is the duplicate guard: the would-be predecessors that claim
// the current one's place, held, refused or let in. The loop's.
type dupState struct {
	loop  *loop
	held  *link              // a predecessor connection held while the current one is alive
	since time.Time          // when it was held
	queue []protocol.Message // its protocol lines meanwhile, in order
	timer *time.Timer        // checks on the held connection

	reported *link           // the current predecessor connection a duplicate was reported against
	strays   map[string]bool // the nodes whose stray connections were logged (identity.go)
	refused  bool            // this node was refused as a duplicate (reported once)

	// The draft's wire: replacements of a predecessor connection.
	swaps  []time.Time
	logged time.Time

	host      dupHost
	st        *stepper // the journal's state
	faults    *faultBook
	view      machineView
	book      *roundBook
	log       *slog.Logger
	plim      *admitLimiter
	heartbeat time.Duration // Config.Heartbeat
	ext       bool          // the extension lines are on
	self      string        // this node's name in a notice
	buf       []byte        // scratch for a notice
}

// dupHost is what the duplicate guard reaches of the links: the current
// predecessor, the pending ones, and their handlers (the step goes
// through act, the fault record through faults).
type dupHost interface {
	predLink() *link
	isPending(l *link) bool
	isClosed() bool
	drop(l *link, err error)
	takePred(l *link)
	peerName(side protocol.Side) string
}

// predLink is the current predecessor link, nil when down. Loop only.
func (lk *links) predLink() *link { return lk.pred }

// isPending reports whether l is a pending predecessor connection. Loop
// only.
func (lk *links) isPending(l *link) bool { return lk.adm.pending[l] }

// isClosed reports whether Close has begun. Loop only.
func (lk *links) isClosed() bool { return lk.lp.closed }

// KindDuplicateNode is the notice kind that tells a refused newcomer why.
const kindDuplicateNode = string(FaultDuplicateNode)

// maxHeld bounds the lines a held connection may send before it is
// closed (it re-dials; nothing is lost).
const maxHeld = 1024

// silentFor is how long the current predecessor connection l has said
// nothing.
func silentFor(l *link) time.Duration {
	return time.Since(time.Unix(0, l.heardAt()))
}

// predGone reports whether the current predecessor connection is down or
// has gone quiet: silent for two heartbeat intervals, where a live one
// says something at least every interval and a half, and before the
// machine, at three, would call it silent. Loop only.
func (g *dupState) predGone() bool {
	return g.host.predLink() == nil || g.host.predLink().heardAt() == 0 || silentFor(g.host.predLink()) >= 2*g.heartbeat
}

// holdPred decides on msg, a protocol line from the pending predecessor
// connection l: true if l is held (msg is kept for later), false if l may
// replace the current connection now. Loop only.
func (g *dupState) holdPred(l *link, msg protocol.Message) bool {
	if g.held == l {
		if len(g.queue) >= maxHeld {
			g.log.Warn("closed a held would-be predecessor connection: too many lines while it waited (it re-dials)", "peer", l.peer)
			g.release()
			g.host.drop(l, fmt.Errorf("more than %d lines while held", maxHeld))
			return true
		}
		g.queue = append(g.queue, msg)
		return true
	}
	if !g.ext || g.predGone() {
		return false
	}
	g.hold(l)
	g.queue = append(g.queue, msg)
	return true
}

// admitPred admits l, a pending predecessor connection whose identity
// line checked out: it replaces the current connection now (true: the
// loop then steps the link up), or is held while that one is alive.
// Loop only.
func (g *dupState) admitPred(l *link) (up bool) {
	if g.held == l {
		return false
	}
	if g.ext && !g.predGone() {
		g.hold(l)
		return false
	}
	g.host.takePred(l)
	return true
}

// aliveFirst acts on a HEARTBEAT as the first line of the pending
// predecessor connection l (a peer without an identity line): it is held
// if the current connection is alive, so that a second live process is
// found even before it opens a round; otherwise it stays pending until
// its first protocol line. Loop only.
func (g *dupState) aliveFirst(l *link) {
	if g.host.isClosed() || !g.host.isPending(l) || g.held == l || !g.ext || g.predGone() {
		return
	}
	g.hold(l)
}

// hold starts holding l. Loop only.
func (g *dupState) hold(l *link) {
	if old := g.held; old != nil && old != l {
		g.release()
		g.host.drop(old, fmt.Errorf("a newer connection claims the predecessor's place"))
	}
	g.held, g.since, g.queue = l, time.Now(), g.queue[:0]
	// It waits for a verdict, not for its first line: no pending deadline.
	_ = l.c.SetReadDeadline(time.Time{})
	g.log.Warn("a new connection claims to be the predecessor while the current one is alive; holding it: it gets in if the current one goes silent (a restart), and is refused if both stay alive",
		"current", g.host.predLink().peer, "new", l.peer)
	g.armHeld()
}

// armHeld schedules the next check on the held connection.
func (g *dupState) armHeld() {
	every := max(g.heartbeat/4, 5*time.Millisecond)
	if g.timer != nil {
		g.timer.Reset(every)
		return
	}
	g.timer = time.AfterFunc(every, func() { safely(g.postCheckHeld) })
}

// postCheckHeld is the held connection's timer: time for checkHeld.
func (g *dupState) postCheckHeld() { g.loop.post(input{kind: inCheckHeld}) }

// release forgets the held connection (it got in, or was closed).
func (g *dupState) release() {
	g.held, g.queue = nil, nil
	if g.timer != nil {
		g.timer.Stop()
	}
}

// swapped notes a replacement of the predecessor connection at now: how
// many there were within the last minute, and whether to log them (at
// most once a minute, from flipsLogged on).
func (g *dupState) swapped(now time.Time) (count int, log bool) {
	keep := g.swaps[:0]
	for _, t := range g.swaps {
		if now.Sub(t) < time.Minute {
			keep = append(keep, t)
		}
	}
	g.swaps = append(keep, now)
	if len(g.swaps) >= flipsLogged && now.Sub(g.logged) >= time.Minute {
		g.logged = now
		return len(g.swaps), true
	}
	return len(g.swaps), false
}

// checkHeld decides on the held connection: in, once the current one is
// gone; refused as a duplicate once the current one is heard from after
// the newcomer arrived (half a heartbeat interval later, so that what was
// in flight from a process that died does not count); else later. Once
// the current one is gone: up if the held connection, with no line
// queued, is now the predecessor link (the loop then steps it up), else
// in is the held connection and queue the lines it sent meanwhile, for
// the loop to promote it with the first and act on the rest. Loop only.
func (g *dupState) checkHeld() (up bool, in *link, queue []protocol.Message) {
	l := g.held
	if l == nil || g.host.isClosed() {
		return false, nil, nil
	}
	if !g.host.isPending(l) {
		g.release() // closed or evicted meanwhile
		return false, nil, nil
	}
	switch {
	case g.predGone():
		queue := append([]protocol.Message(nil), g.queue...)
		g.release()
		if len(queue) == 0 {
			g.host.takePred(l)
			return true, nil, nil
		}
		return false, l, queue
	case g.host.predLink().heardAt() > g.since.Add(g.heartbeat/2).UnixNano():
		g.duplicate(l)
	default:
		g.armHeld()
	}
	return false, nil, nil
}

// duplicate refuses the held connection l: two live processes claim the
// predecessor's place. Loop only.
func (g *dupState) duplicate(l *link) {
	cur := g.host.predLink()
	g.release()
	place := g.host.peerName(protocol.Pred)
	if g.reported != cur {
		g.reported = cur
		fe := &FaultError{Kind: FaultDuplicateNode, Side: protocol.Pred, Peer: place,
			Reason: fmt.Sprintf("two live processes claim the place of this node's predecessor %s: %s (the current connection, alive) and %s (a new one, refused); stop one of them: the rounds the current one opens go on, the newcomer's never run",
				place, cur.peer, l.peer)}
		g.faults.record(fe.fault())
	} else {
		g.plim.note(kindRefused, slog.LevelWarn, "refused a second process claiming the predecessor's place again (duplicate-node, reported already)",
			"peer", l.peer, "current", cur.peer)
	}
	if g.ext {
		note := protocol.Notice{Kind: kindDuplicateNode, Origin: g.self, Blamed: protocol.NoticeName(place)}
		g.buf = wire.Append(g.buf[:0], protocol.Message{Cmd: protocol.FaultNotice, Note: &note}, false)
		g.loop.lastWords(l, g.buf)
	}
	g.host.drop(l, fmt.Errorf("refused: another live connection holds the predecessor's place"))
}

// refusedAsDuplicate acts on a notice from the successor, true if it was
// the successor's refusal of this node as a duplicate: this node then
// reports duplicate-node itself and ends every round it has not
// finished, whatever the fault policy, so that no task of a round it
// opened runs anywhere: open are those rounds, for the caller to abort
// (in this order) with cause. Loop only.
func (g *dupState) refusedAsDuplicate(l *link, msg protocol.Message) (refused bool, open []string, cause *FaultError) {
	note := msg.Note
	if l.side != protocol.Succ || msg.Cmd != protocol.FaultNotice || note == nil || note.Kind != kindDuplicateNode || note.HasRound {
		return false, nil, nil
	}
	fe := &FaultError{Kind: FaultDuplicateNode, Side: protocol.Succ, Peer: g.host.peerName(protocol.Succ),
		Reason: fmt.Sprintf("%s refused this node as its predecessor: another live process already holds this node's place (%s) there; stop one of the two (the rounds this node opens never run)",
			note.Origin, note.Blamed)}
	if !g.refused {
		g.refused = true
		g.faults.record(fe.fault())
	}
	for _, e := range g.book.all() {
		if st, _ := g.view.State(e.id); st != 0 && !st.Terminal() && !e.ri.finished() {
			open = append(open, e.id)
		}
	}
	slices.Sort(open)
	return true, open, fe
}

// replaced logs that l replaced cur as the predecessor connection and,
// on the draft's wire, notes a link that flips between two processes.
// Loop only.
func (g *dupState) replaced(cur, l *link) {
	g.log.Info("predecessor connection replaced by a new one", "old", cur.peer, "new", l.peer)
	if count, log := g.swapped(time.Now()); log {
		g.log.Error(fmt.Sprintf("two nodes dial this node as its predecessor: %s and %s", cur.peer, l.peer),
			"replacements_last_minute", count,
			"hint", "each new connection replaces the other: two processes claim one place (a second copy of the predecessor, or a node whose --chain differs); stop one, or compare the nodes' --chain (chainsync check)")
	}
}

// flipsLogged is how many replacements of a live predecessor connection
// within a minute are logged as two nodes dialing.
const flipsLogged = 3
