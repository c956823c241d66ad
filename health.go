package chainsync

import (
	"fmt"
	"slices"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// docs/DESIGN.md, "Heartbeats": an extension, off by default. A link that
// carried nothing for the interval D gets the line HEARTBEAT; a neighbour
// whose link is up but has said nothing for 3D while a round is in
// progress is silent (stopped, hung or partitioned) and is blamed for it.
// Only the silent node's own neighbours can see that, so nobody else is
// blamed: a node further away sees at most a link that went down.

// heartbeats runs while the node does, every D/2: it sends HEARTBEAT on
// idle links and looks for silent neighbours, so a silent neighbour is
// reported within 3D + D/2.
func (n *Node) heartbeats() {
	defer n.wg.Done()
	d := n.cfg.Heartbeat
	t := time.NewTicker(d / 2)
	defer t.Stop()
	last := time.Now()
	var woke int64 // UnixNano: silence is not counted before this
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.lock()
		now := time.Now()
		if now.Sub(last) > d {
			// This process itself did not run for longer than an
			// interval (stopped with SIGSTOP, or starved): what its
			// neighbours sent meanwhile may still be unread, so their
			// silence is counted from now, never blamed on them.
			woke = now.UnixNano()
		}
		last = now
		for _, l := range []*link{n.pred, n.succ} {
			if l == nil {
				continue
			}
			if now.Sub(time.Unix(0, l.lastSent.Load())) >= d {
				n.queueLine(l, heartbeatLine, false, "")
			}
			// Silence counts from the peer's last line; on a connection
			// it has not spoken on yet, from this node's first protocol
			// line. Before that a successor holds the connection pending
			// and says nothing (HEARTBEAT does not promote it), so its
			// silence means nothing.
			since := l.heardAt()
			if since == 0 && !l.spokeAt.IsZero() {
				since = l.spokeAt.UnixNano()
			}
			if since != 0 {
				since = max(since, woke)
			}
			silent := now.Sub(time.Unix(0, since))
			switch {
			case since == 0 || silent < 3*d || !n.inProgress():
				l.silent = false
			case !l.silent:
				l.silent = true // once per silence: it ends when the neighbour speaks
				what := "predecessor"
				if l.side == protocol.Succ {
					what = "successor"
				}
				n.linkFault(FaultPeerSilent, l.side,
					fmt.Sprintf("the %s %s has sent nothing, not even a heartbeat, for %v (3 heartbeat intervals): it is stopped, hung or cut off",
						what, n.peerName(l.side), silent.Round(time.Millisecond)), silent.Round(time.Millisecond))
			}
		}
		n.unlock()
	}
}

var heartbeatLine = []byte("HEARTBEAT\n")

// inProgress reports whether any round is in progress here: open in the
// machine, or done but still handing its final COMPLETE over. Caller
// holds mu.
func (n *Node) inProgress() bool {
	return n.active > 0
}

// linkFault reports a fault that blames the neighbour on side. With
// FaultHalt every unfinished round ends with it; with FaultWait the
// rounds keep waiting for the neighbour to come back. Caller holds mu.
func (n *Node) linkFault(kind FaultKind, side protocol.Side, reason string, after time.Duration) {
	ids := n.unfinished()
	round := ""
	if len(ids) > 0 {
		round = ids[0]
	}
	fe := &FaultError{Round: round, State: n.stateOf(round), Kind: kind, Side: side, Peer: n.peerName(side), Reason: reason, After: after}
	n.recordFault(fe.fault())
	if n.cfg.FaultPolicy == FaultWait {
		n.log.Warn("fault policy wait: keeping every round and waiting for the neighbour to come back", "rounds", len(ids))
		return
	}
	n.endAll(fe)
}

// unfinished returns the rounds not yet over here, by id. Caller holds mu.
func (n *Node) unfinished() []string {
	var ids []string
	for id, ri := range n.rounds {
		if !ri.finished() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// endAll ends every unfinished round with the fault fe (the chain halts
// here). Caller holds mu.
func (n *Node) endAll(fe *FaultError) {
	for _, id := range n.unfinished() {
		f := *fe
		f.Round = id
		f.State = n.stateOf(id)
		n.endRound(id, &f)
	}
}
