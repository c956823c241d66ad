package chainsync

import (
	"slices"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// docs/DESIGN.md, "Heartbeats" and "Time". The machine owns the
// timeouts (phase, exit wave, heartbeat silence, connect) and judges them
// against the time the driver's events carry; this file is the driver's
// clock: one goroutine that, a few times per shortest timeout, sends
// HEARTBEAT on idle links (an extension, off by default) and steps a
// Tick. A neighbour whose link is up but has said nothing for 3 heartbeat
// intervals while a round is in progress is silent (stopped, hung or
// partitioned) and is blamed for it; only the silent node's own
// neighbours can see that, so nobody else is blamed: a node further away
// sees at most a link that went down.

// tickEvery is how often the clock ticks: half a heartbeat interval, and
// at least ten times per timeout, within [5ms, 1s].
func (n *Node) tickEvery() time.Duration {
	d := time.Second
	if hb := n.cfg.Heartbeat; hb > 0 {
		d = min(d, hb/2)
	}
	for _, t := range []time.Duration{n.cfg.PhaseTimeout, n.cfg.ExitWaveTimeout, n.cfg.ConnectTimeout} {
		if t > 0 {
			d = min(d, t/10)
		}
	}
	return max(d, 5*time.Millisecond)
}

// clock runs while the node does (Config timeouts or heartbeats): every
// tickEvery it sends HEARTBEAT on links idle for an interval and steps a
// Tick, so a silent neighbour is reported within 3 intervals and a half,
// a timeout within a tenth of it.
func (n *Node) clock() {
	defer n.wg.Done()
	every := n.tickEvery()
	// A gap between ticks longer than stalled means this process itself
	// did not run (stopped with SIGSTOP, or starved): what its neighbours
	// sent meanwhile may still be unread, so the tick says Resumed and
	// their silence is counted from then, never blamed on them.
	stalled := 4 * every
	if n.cfg.Heartbeat > 0 {
		stalled = n.cfg.Heartbeat
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.lock()
		now := time.Now()
		resumed := now.Sub(last) > stalled
		last = now
		if hb := n.cfg.Heartbeat; hb > 0 {
			for _, l := range []*link{n.pred, n.succ} {
				if l != nil && now.Sub(time.Unix(0, l.lastSent.Load())) >= hb {
					n.queueLine(l, heartbeatLine, false, "")
				}
			}
		}
		if !n.closed {
			if err := n.step(n.tick(resumed)); err != nil && n.broken == nil {
				n.log.Error("internal error: tick", "err", err)
			}
		}
		n.unlock()
	}
}

// tick is the Tick event for now: when a line last arrived on each
// current link. Caller holds mu.
func (n *Node) tick(resumed bool) protocol.Event {
	var heard [3]time.Duration
	if l := n.pred; l != nil {
		heard[protocol.Pred] = n.since(l.heardAt())
	}
	if l := n.succ; l != nil {
		heard[protocol.Succ] = n.since(l.heardAt())
	}
	return protocol.Tick(time.Since(n.epoch), heard, resumed)
}

// since converts a UnixNano time (0: none) to the machine's time.
func (n *Node) since(unixNano int64) time.Duration {
	if unixNano == 0 {
		return 0
	}
	return max(time.Unix(0, unixNano).Sub(n.epoch), 1)
}

var heartbeatLine = []byte("HEARTBEAT\n")

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
