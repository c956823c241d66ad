package protocol

import (
	"slices"
	"strings"
	"time"
)

// Logical time. The machine keeps no clock of its own: every event may
// carry the driver's time (Event.At, a monotonic duration from any fixed
// origin; 0: not known), and the machine's timeouts are judged against the
// latest time it has seen. A driver steps Tick now and then (a few times
// per shortest timeout), a simulator whenever it moves its clock, so the
// same timeouts run in a real node, in internal/sim's seeded schedules and
// in the golden traces (docs/DESIGN.md, "Time").
//
// The timeouts (each off when its Config field is zero):
//   - PhaseTimeout: a round that waits for a neighbour's message, or that
//     the predecessor opened and this node has not claimed, for this long
//     in one state (ActTimeout, TimeoutPhase);
//   - ExitWaveTimeout: a round done here whose final COMPLETE was not
//     handed to the predecessor for this long ends NotDelivered;
//   - Silence: a neighbour whose link is up and that sent nothing, not even
//     a heartbeat, for this long while a round is in progress
//     (TimeoutSilence);
//   - ConnectTimeout: a neighbour whose link has been down for this long
//     since it was last healthy, while a round is in progress
//     (TimeoutUnreachable).

// flapTime: a connection that carried nothing from the peer and lasted
// less than this does not count as the neighbour being healthy, so a peer
// that keeps connecting and dropping cannot hold off ConnectTimeout.
const flapTime = 2 * time.Second

// TimeoutKind says which timeout an ActTimeout reports.
type TimeoutKind uint8

// The timeouts a Machine reports.
const (
	// TimeoutPhase: Round waited for Wait (a message from the side To, or
	// this node's local readiness) for Config.PhaseTimeout in state From.
	TimeoutPhase TimeoutKind = iota + 1
	// TimeoutSilence: the neighbour on side To, whose link is up, has sent
	// nothing for After (at least Config.Silence) while a round is in
	// progress: it is stopped, hung or cut off.
	TimeoutSilence
	// TimeoutUnreachable: the link to the neighbour on side To has been
	// down for After (at least Config.ConnectTimeout) since that neighbour
	// was last healthy, while a round is in progress.
	TimeoutUnreachable
)

// String returns "phase", "silence" or "unreachable".
func (k TimeoutKind) String() string {
	switch k {
	case TimeoutPhase:
		return "phase"
	case TimeoutSilence:
		return "silence"
	case TimeoutUnreachable:
		return "unreachable"
	case TimeoutGrace:
		return "grace"
	}
	return "TimeoutKind(?)"
}

// Tick is the event "the time is at": the machine judges its timeouts.
// heard, indexed by Side, is when a line (a heartbeat included) last
// arrived on the current connection to each neighbour (0: none yet);
// resumed says the driver itself did not run for a while (stopped or
// starved), so what its neighbours sent meanwhile may be unread: their
// silence is counted from now.
func Tick(at time.Duration, heard [3]time.Duration, resumed bool) Event {
	return Event{Kind: EvTick, At: at, Heard: heard, Resumed: resumed}
}

// LinkDown is the event "the connection to side is gone"; heard is when a
// line last arrived on it (0: never), for ConnectTimeout's count.
func LinkDown(side Side, heard time.Duration) Event {
	ev := Event{Kind: EvLinkDown, From: side}
	if side == Pred || side == Succ {
		ev.Heard[side] = heard
	}
	return ev
}

// sideClock is what the machine knows of the link to one neighbour.
type sideClock struct {
	up      bool
	upAt    time.Duration // when the current connection came up
	heard   time.Duration // the last line from the neighbour on it (0: none)
	spoke   time.Duration // this node's first line on it (0: none)
	healthy time.Duration // when the neighbour was last known healthy
	silent  bool          // TimeoutSilence reported, until it speaks again
	unreach bool          // TimeoutUnreachable reported, until the link is up
}

// clock is the machine's part that keeps time: the latest time seen, the
// per-link clocks and the rounds' deadlines. It owns its fields; the
// machine asks it what ran out and applies the policy itself.
type clock struct {
	role                              Role
	phase, exitWave, silence, connect time.Duration // Config's timeouts
	timing                            bool          // some timeout is configured

	now   time.Duration   // the latest Event.At seen
	woke  time.Duration   // the driver resumed then: silence counts from here
	sides [3]sideClock    // per Side
	armed map[*round]bool // the rounds with a deadline
	// suspended: phase timeouts are off (some node is gated, steer.go),
	// as of the end of the last step.
	suspended bool
}

func newClock(cfg *Config) clock {
	return clock{role: cfg.Role, phase: cfg.PhaseTimeout, exitWave: cfg.ExitWaveTimeout, silence: cfg.Silence,
		connect: cfg.ConnectTimeout,
		timing:  cfg.PhaseTimeout > 0 || cfg.ExitWaveTimeout > 0 || cfg.Silence > 0 || cfg.ConnectTimeout > 0 || cfg.Extensions}
}

// setNow moves the clock to at (never back), and reports whether this is
// the first time it learns the time: every neighbour counts as healthy
// from then, and the caller arms the rounds restored before.
func (c *clock) setNow(at time.Duration) (first bool) {
	if at <= c.now {
		return false
	}
	first = c.now == 0
	c.now = at
	if first {
		for s := range c.sides {
			c.sides[s].healthy = at
		}
	}
	return first
}

// arm sets round r's deadlines for the state it has just entered (or its
// new local readiness): PhaseTimeout if it waits for a neighbour, or if
// the predecessor opened it and this node has not claimed it;
// ExitWaveTimeout if it is handing its final COMPLETE over.
func (c *clock) arm(r *round) {
	if !c.timing {
		return
	}
	r.deadline, r.exitBy = 0, 0
	if c.phase > 0 && !r.over && !c.suspended {
		if _, side := WaitIn(c.role, r.state, r.localReady).Msg(); side != 0 || r.state == StateSync && c.role.HasPred() {
			r.deadline = c.now + c.phase
		}
	}
	if c.exitWave > 0 && r.handingOver(c.role) {
		r.exitBy = c.now + c.exitWave
	}
	if r.deadline != 0 || r.exitBy != 0 {
		if c.armed == nil {
			c.armed = make(map[*round]bool)
		}
		c.armed[r] = true
	} else {
		delete(c.armed, r)
	}
}

// disarm clears round r's deadlines (it is over).
func (c *clock) disarm(r *round) {
	if r.deadline != 0 || r.exitBy != 0 {
		r.deadline, r.exitBy = 0, 0
		delete(c.armed, r)
	}
}

// step keeps the per-link clocks after a successful step of ev with the
// given actions.
func (c *clock) step(ev Event, acts []Action) {
	s := ev.From
	switch ev.Kind {
	case EvRecv:
		c.heardFrom(s)
	case EvLinkUp:
		if s != Pred && s != Succ {
			break
		}
		c.sides[s] = sideClock{up: true, upAt: c.now, healthy: c.sides[s].healthy}
		if ev.Msg.Cmd != 0 {
			c.heardFrom(s) // Promote: its first line
		}
	case EvLinkDown:
		if s != Pred && s != Succ {
			break
		}
		sc := &c.sides[s]
		if sc.up && (sc.heard != 0 || ev.Heard[s] != 0 || c.now-sc.upAt >= flapTime) {
			sc.healthy = c.now
			if h := max(sc.heard, ev.Heard[s]); c.silence > 0 && h > 0 {
				// With heartbeats a neighbour is heard from every interval:
				// its link has been down since it was last heard from, not
				// since the connection noticed (docs/DESIGN.md, "Liveness").
				sc.healthy = min(h, c.now)
			}
		}
		*sc = sideClock{healthy: sc.healthy}
	}
	if c.silence > 0 {
		for i := range acts {
			if a := &acts[i]; a.Kind == ActSend && (a.To == Pred || a.To == Succ) {
				if sc := &c.sides[a.To]; sc.up && sc.spoke == 0 {
					sc.spoke = c.now
				}
			}
		}
	}
}

func (c *clock) heardFrom(s Side) {
	if (s == Pred || s == Succ) && c.now > 0 {
		c.sides[s].heard = c.now
		c.sides[s].silent = false
	}
}

// gone notes that the neighbour on side s did not come back within its
// restart grace: its silence or down link counts as reported already.
func (c *clock) gone(s Side) {
	sc := &c.sides[s]
	sc.silent, sc.unreach = sc.up, !sc.up
}

// link judges the link to the neighbour on side s at a tick: a silent
// or unreachable neighbour (ActTimeout, once per silence or per down
// link). graced: that neighbour is in a restart grace; active: the
// rounds in progress.
func (c *clock) link(s Side, ev Event, graced bool, active int) (Action, bool) {
	sc := &c.sides[s]
	if sc.up && ev.Heard[s] > sc.heard {
		sc.heard = ev.Heard[s]
		sc.silent = false
	}
	if graced {
		// In its restart grace: neither its silence nor its down link is
		// a fault (liveness.go); both count from its end.
		sc.healthy, sc.silent = c.now, false
		return Action{}, false
	}
	switch {
	case sc.up && c.silence > 0:
		// Silence counts from the neighbour's last line; on a connection
		// it has not spoken on yet, from this node's first line there
		// (before that a successor holds the connection pending and says
		// nothing).
		since := sc.heard
		if since == 0 {
			since = sc.spoke
		}
		if since == 0 {
			break
		}
		since = max(since, c.woke)
		if c.now-since < c.silence || active == 0 {
			sc.silent = false
		} else if !sc.silent {
			sc.silent = true // once per silence
			return Action{Kind: ActTimeout, Timeout: TimeoutSilence, To: s, After: c.now - since}, true
		}
	case !sc.up && c.connect > 0 && !sc.unreach && c.now-sc.healthy >= c.connect:
		if active == 0 {
			sc.healthy = c.now // nothing in progress: not a fault; keep watching
			break
		}
		sc.unreach = true // once until the link is up
		return Action{Kind: ActTimeout, Timeout: TimeoutUnreachable, To: s, After: c.now - sc.healthy}, true
	}
	return Action{}, false
}

// due returns the rounds a deadline of which has passed, by id.
func (c *clock) due() []*round {
	var due []*round
	for r := range c.armed {
		if r.deadline != 0 && c.now >= r.deadline || r.exitBy != 0 && c.now >= r.exitBy {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b *round) int { return strings.Compare(a.id, b.id) })
	return due
}

// timedOut appends a, a neighbour that is silent, unreachable or did not
// come back within its restart grace, naming the round it restarted in
// (a grace's, if unfinished) or the first unfinished round; under
// PolicyHalt it aborts every unfinished round.
func (m *Machine) timedOut(a Action, out []Action) []Action {
	var r *round
	if g := a.Msg.Grace; a.Timeout == TimeoutGrace {
		if g.Hops == 1 {
			m.clock.gone(a.To)
		}
		if r = m.rounds.Get(g.Round); !g.HasRound || r != nil && r.state.Terminal() {
			r = nil
		}
	}
	if rs := m.unfinished(); r == nil && len(rs) > 0 {
		r = rs[0]
	}
	if r != nil {
		a.Round, a.From = r.id, r.state
	}
	out = append(out, a)
	if m.cfg.Policy == PolicyHalt {
		out = m.abortAll(out)
	}
	return out
}

// tick judges every timeout at the current time (EvTick).
func (m *Machine) tick(ev Event, out []Action) []Action {
	c := &m.clock
	if ev.Resumed {
		c.woke = c.now
	}
	for _, g := range m.live.due(c.now) {
		out = m.timedOut(m.live.expire(g), out)
	}
	for _, s := range [...]Side{Pred, Succ} {
		if hasSide(m.cfg.Role, s) {
			if a, ok := c.link(s, ev, m.live.graced(s), m.active); ok {
				out = m.timedOut(a, out)
			}
		}
	}
	if len(c.armed) == 0 {
		return out
	}
	for _, r := range c.due() {
		if r.exitBy != 0 && c.now >= r.exitBy && r.handingOver(m.cfg.Role) {
			out = m.finish(r, NotDelivered, out)
			continue
		}
		if r.deadline != 0 && c.now >= r.deadline {
			w := WaitIn(m.cfg.Role, r.state, r.localReady)
			_, side := w.Msg()
			if side != 0 && m.live.graceOn(side) {
				// It waits on a node in its restart grace: counted again.
				r.deadline = c.now + c.phase
				continue
			}
			r.deadline = 0 // once per state
			out = append(out, Action{Kind: ActTimeout, Timeout: TimeoutPhase, Round: r.id, From: r.state, Wait: w, To: side, After: c.phase})
			// A round this node never claimed must not hold a slot for
			// ever, whatever the policy.
			if m.cfg.Policy == PolicyHalt || w == WaitLocal {
				out = m.abortRound(r, out)
				continue
			}
		}
		if r.deadline == 0 && r.exitBy == 0 {
			delete(c.armed, r)
		}
	}
	return out
}
