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

// dupState is the loop's record of would-be predecessors that claim the
// current one's place.
type dupState struct {
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
}

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
func (n *Node) predGone() bool {
	return n.pred == nil || n.pred.heardAt() == 0 || silentFor(n.pred) >= 2*n.cfg.Heartbeat
}

// holdPred decides on msg, a protocol line from the pending predecessor
// connection l: true if l is held (msg is kept for later), false if l may
// replace the current connection now. Loop only.
func (n *Node) holdPred(l *link, msg protocol.Message) bool {
	d := &n.dup
	if d.held == l {
		if len(d.queue) >= maxHeld {
			n.log.Warn("closed a held would-be predecessor connection: too many lines while it waited (it re-dials)", "peer", l.peer)
			n.dup.release()
			n.drop(l, fmt.Errorf("more than %d lines while held", maxHeld))
			return true
		}
		d.queue = append(d.queue, msg)
		return true
	}
	if !n.extensions() || n.predGone() {
		return false
	}
	n.hold(l)
	d.queue = append(d.queue, msg)
	return true
}

// admitPred admits l, a pending predecessor connection whose identity
// line checked out: it replaces the current connection now, or is held
// while that one is alive. Loop only.
func (n *Node) admitPred(l *link) {
	if n.dup.held == l {
		return
	}
	if n.extensions() && !n.predGone() {
		n.hold(l)
		return
	}
	n.takePred(l)
	if err := n.step(protocol.LinkUp(protocol.Pred), nil); err != nil && n.st.broken == nil {
		n.log.Error("internal error: link up", "err", err)
	}
}

// aliveFirst acts on a HEARTBEAT as the first line of the pending
// predecessor connection l (a peer without an identity line): it is held
// if the current connection is alive, so that a second live process is
// found even before it opens a round; otherwise it stays pending until
// its first protocol line. Loop only.
func (n *Node) aliveFirst(l *link) {
	if n.closed || !n.adm.pending[l] || n.dup.held == l || !n.extensions() || n.predGone() {
		return
	}
	n.hold(l)
}

// hold starts holding l. Loop only.
func (n *Node) hold(l *link) {
	d := &n.dup
	if old := d.held; old != nil && old != l {
		n.dup.release()
		n.drop(old, fmt.Errorf("a newer connection claims the predecessor's place"))
	}
	d.held, d.since, d.queue = l, time.Now(), d.queue[:0]
	// It waits for a verdict, not for its first line: no pending deadline.
	_ = l.c.SetReadDeadline(time.Time{})
	n.log.Warn("a new connection claims to be the predecessor while the current one is alive; holding it: it gets in if the current one goes silent (a restart), and is refused if both stay alive",
		"current", n.pred.peer, "new", l.peer)
	n.armHeld()
}

// armHeld schedules the next check on the held connection.
func (n *Node) armHeld() {
	every := max(n.cfg.Heartbeat/4, 5*time.Millisecond)
	d := &n.dup
	if d.timer != nil {
		d.timer.Reset(every)
		return
	}
	d.timer = time.AfterFunc(every, func() { safely(n.postCheckHeld) })
}

// postCheckHeld is the held connection's timer: time for checkHeld.
func (n *Node) postCheckHeld() { n.post(input{kind: inCheckHeld}) }

// release forgets the held connection (it got in, or was closed).
func (d *dupState) release() {
	d.held, d.queue = nil, nil
	if d.timer != nil {
		d.timer.Stop()
	}
}

// swapped notes a replacement of the predecessor connection at now: how
// many there were within the last minute, and whether to log them (at
// most once a minute, from flipsLogged on).
func (d *dupState) swapped(now time.Time) (count int, log bool) {
	keep := d.swaps[:0]
	for _, t := range d.swaps {
		if now.Sub(t) < time.Minute {
			keep = append(keep, t)
		}
	}
	d.swaps = append(keep, now)
	if len(d.swaps) >= flipsLogged && now.Sub(d.logged) >= time.Minute {
		d.logged = now
		return len(d.swaps), true
	}
	return len(d.swaps), false
}

// checkHeld decides on the held connection: in, once the current one is
// gone; refused as a duplicate once the current one is heard from after
// the newcomer arrived (half a heartbeat interval later, so that what was
// in flight from a process that died does not count); else later.
// Loop only.
func (n *Node) checkHeld() {
	d := &n.dup
	l := d.held
	if l == nil || n.closed {
		return
	}
	if !n.adm.pending[l] {
		n.dup.release() // closed or evicted meanwhile
		return
	}
	switch {
	case n.predGone():
		queue := append([]protocol.Message(nil), d.queue...)
		n.dup.release()
		if len(queue) == 0 {
			n.takePred(l)
			if err := n.step(protocol.LinkUp(protocol.Pred), nil); err != nil && n.st.broken == nil {
				n.log.Error("internal error: link up", "err", err)
			}
			return
		}
		if n.promotePred(l, queue[0]) {
			n.handleAll(l, queue[1:])
		}
	case n.pred.heardAt() > d.since.Add(n.cfg.Heartbeat/2).UnixNano():
		n.duplicate(l)
	default:
		n.armHeld()
	}
}

// duplicate refuses the held connection l: two live processes claim the
// predecessor's place. Loop only.
func (n *Node) duplicate(l *link) {
	d := &n.dup
	cur := n.pred
	n.dup.release()
	place := n.peerName(protocol.Pred)
	if d.reported != cur {
		d.reported = cur
		fe := &FaultError{Kind: FaultDuplicateNode, Side: protocol.Pred, Peer: place,
			Reason: fmt.Sprintf("two live processes claim the place of this node's predecessor %s: %s (the current connection, alive) and %s (a new one, refused); stop one of them: the rounds the current one opens go on, the newcomer's never run",
				place, cur.peer, l.peer)}
		n.recordFault(fe.fault())
	} else {
		n.plim.note(kindRefused, slog.LevelWarn, "refused a second process claiming the predecessor's place again (duplicate-node, reported already)",
			"peer", l.peer, "current", cur.peer)
	}
	if n.extensions() {
		note := protocol.Notice{Kind: kindDuplicateNode, Origin: n.self, Blamed: protocol.NoticeName(place)}
		n.wbuf = wire.Append(n.wbuf[:0], protocol.Message{Cmd: protocol.FaultNotice, Note: &note}, false)
		n.lastWords(l, n.wbuf)
	}
	n.drop(l, fmt.Errorf("refused: another live connection holds the predecessor's place"))
}

// refusedAsDuplicate acts on a notice from the successor, true if it was
// the successor's refusal of this node as a duplicate: this node then
// reports duplicate-node itself and ends every round it has not
// finished, whatever the fault policy, so that no task of a round it
// opened runs anywhere. Loop only.
func (n *Node) refusedAsDuplicate(l *link, msg protocol.Message) bool {
	note := msg.Note
	if l.side != protocol.Succ || msg.Cmd != protocol.FaultNotice || note == nil || note.Kind != kindDuplicateNode || note.HasRound {
		return false
	}
	fe := &FaultError{Kind: FaultDuplicateNode, Side: protocol.Succ, Peer: n.peerName(protocol.Succ),
		Reason: fmt.Sprintf("%s refused this node as its predecessor: another live process already holds this node's place (%s) there; stop one of the two (the rounds this node opens never run)",
			note.Origin, note.Blamed)}
	if !n.dup.refused {
		n.dup.refused = true
		n.recordFault(fe.fault())
	}
	var open []string
	for id, ri := range n.book.byID {
		if st := n.stateOf(id); st != 0 && !st.Terminal() && !ri.finished() {
			open = append(open, id)
		}
	}
	slices.Sort(open)
	for _, id := range open {
		if err := n.step(protocol.Abort(id), fe); err != nil && n.st.broken == nil {
			n.log.Error("internal error: abort", "round", id, "err", err)
		}
	}
	return true
}

// replaced logs that l replaced cur as the predecessor connection and,
// on the draft's wire, notes a link that flips between two processes.
// Loop only.
func (n *Node) replaced(cur, l *link) {
	n.log.Info("predecessor connection replaced by a new one", "old", cur.peer, "new", l.peer)
	if count, log := n.dup.swapped(time.Now()); log {
		n.log.Error(fmt.Sprintf("two nodes dial this node as its predecessor: %s and %s", cur.peer, l.peer),
			"replacements_last_minute", count,
			"hint", "each new connection replaces the other: two processes claim one place (a second copy of the predecessor, or a node whose --chain differs); stop one, or compare the nodes' --chain (chainsync check)")
	}
}

// flipsLogged is how many replacements of a live predecessor connection
// within a minute are logged as two nodes dialing.
const flipsLogged = 3
