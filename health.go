package chainsync

import (
	"fmt"
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
func tickEvery(cfg *Config) time.Duration {
	d := time.Second
	if hb := cfg.Heartbeat; hb > 0 {
		d = min(d, hb/2)
	}
	for _, t := range []time.Duration{cfg.PhaseTimeout, cfg.ExitWaveTimeout, cfg.ConnectTimeout} {
		if t > 0 {
			d = min(d, t/10)
		}
	}
	return max(d, 5*time.Millisecond)
}

// clockState is the loop's clock: its ticker and when it last ticked. A
// node without timing has none (nil), and its loop never ticks.
type clockState struct {
	t       *time.Ticker
	last    time.Time
	stalled time.Duration
}

// newClock makes the loop tick every tickEvery (Config timeouts or
// heartbeats): each tick sends HEARTBEAT on links idle for an interval
// and steps a Tick, so a silent neighbour is reported within 3 intervals
// and a half, a timeout within a tenth of it. Called by Start before the
// loop runs.
func newClock(cfg *Config) *clockState {
	every := tickEvery(cfg)
	// A gap between ticks longer than stalled means this process itself
	// did not run (stopped with SIGSTOP, or starved): what its neighbours
	// sent meanwhile may still be unread, so the tick says Resumed and
	// their silence is counted from then, never blamed on them.
	stalled := 4 * every
	if cfg.Heartbeat > 0 {
		stalled = cfg.Heartbeat
	}
	return &clockState{t: time.NewTicker(every), last: time.Now(), stalled: stalled}
}

// C is the channel the loop's ticks arrive on; nil (never) without
// timing.
func (c *clockState) C() <-chan time.Time {
	if c == nil {
		return nil
	}
	return c.t.C
}

// stop stops the ticker, if any.
func (c *clockState) stop() {
	if c != nil {
		c.t.Stop()
	}
}

// tick notes a tick at now: true if the process itself did not run for a
// while before it (resumed).
func (c *clockState) tick(now time.Time) (resumed bool) {
	resumed = now.Sub(c.last) > c.stalled
	c.last = now
	return resumed
}

// onTick is the clock's event. Loop only.
func (d *driver) onTick() {
	if d.lp.closed {
		return
	}
	now := time.Now()
	resumed := d.clock.tick(now)
	if hb := d.cfg.Heartbeat; hb > 0 {
		for _, l := range []*link{d.links.pred, d.links.succ} {
			if l != nil && now.Sub(time.Unix(0, l.lastSent.Load())) >= hb {
				d.lp.cur.line(l, heartbeatLine, false, "")
			}
		}
	}
	if err := d.step(d.links.tick(resumed), nil); err != nil && d.st.broken == nil {
		d.log.Error("internal error: tick", "err", err)
	}
}

// tick is the Tick event for now: when a line last arrived on each
// current link. Loop only.
func (lk *links) tick(resumed bool) protocol.Event {
	var heard [3]time.Duration
	if l := lk.pred; l != nil {
		heard[protocol.Pred] = lk.st.since(l.heardAt())
	}
	if l := lk.succ; l != nil {
		heard[protocol.Succ] = lk.st.since(l.heardAt())
	}
	return protocol.Tick(lk.st.now(), heard, resumed)
}

var heartbeatLine = []byte("HEARTBEAT\n")

// timedOut reports the machine's timeout a as a fault. The machine has
// applied the fault policy itself: under halt the rounds the fault ends
// follow as their own actions, and take this fault as their cause (the
// fault returned). Loop only.
func (fb *faultBook) timedOut(a *protocol.Action) *FaultError {
	after := a.After.Round(time.Millisecond)
	fe := &FaultError{Round: a.Round, State: a.From, Side: a.To, Peer: fb.host.peerName(a.To), After: after}
	wait := fb.policy == FaultWait
	switch a.Timeout {
	case protocol.TimeoutPhase:
		fe.Kind, fe.After, fe.Peer = FaultPhaseTimeout, a.After, ""
		if a.Wait == protocol.WaitLocal {
			// Ended whatever the policy: it must not hold a slot for ever.
			fe.Reason, wait = "the predecessor opened this round but this node never became locally ready for it", false
			break
		}
		// A phase timeout knows which way the round waits, not who is
		// slow: the neighbour, or any node beyond it. It names no peer.
		cmd, side := a.Wait.Msg()
		fe.Reason = fmt.Sprintf("no %s from the %s (that neighbour, or a node beyond it, is slow or stuck; heartbeats and --task-timeout find which)",
			cmd, sideWord(side))
	case protocol.TimeoutSilence:
		fe.Kind = FaultPeerSilent
		fe.Reason = fmt.Sprintf("the %s %s has sent nothing, not even a heartbeat, for %v (3 heartbeat intervals): it is stopped, hung or cut off",
			sideWord(a.To), fb.host.peerName(a.To), after)
	case protocol.TimeoutGrace:
		fb.graceTimedOut(a, fe) // liveness.go
	case protocol.TimeoutUnreachable:
		fe.Kind = FaultPeerUnreachable
		fe.Reason = fmt.Sprintf("the successor at %s has not been reachable", fb.next)
		if a.To == protocol.Pred {
			fe.Reason = fmt.Sprintf("no healthy predecessor has connected on %s", fb.listen)
		}
		if fb.heartbeat > 0 {
			// The machine counts from when the neighbour was last heard
			// from, not from when the connection noticed it was gone.
			fe.Reason += fmt.Sprintf(" since it was last heard from, %s ago", fmtSecs(a.After))
		}
	default:
		return nil
	}
	fb.record(fe.fault())
	switch {
	case wait && a.Timeout == protocol.TimeoutPhase:
		fb.log.Warn("fault policy wait: the round keeps waiting", "round", a.Round)
	case wait:
		fb.log.Warn("fault policy wait: keeping every round and waiting for the neighbour to come back", "round", a.Round)
	}
	return fe
}
