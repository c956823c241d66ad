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

// timed reports whether any timeout is configured.
func (m *Machine) timed() bool {
	c := &m.cfg
	return c.PhaseTimeout > 0 || c.ExitWaveTimeout > 0 || c.Silence > 0 || c.ConnectTimeout > 0 || c.Extensions
}

// setNow moves the machine's clock to at (never back). The first time
// it learns the time, every neighbour counts as healthy from then and the
// deadlines of the rounds restored before are set from then.
func (m *Machine) setNow(at time.Duration) {
	if at <= m.now {
		return
	}
	first := m.now == 0
	m.now = at
	if !first {
		return
	}
	for s := range m.sides {
		m.sides[s].healthy = at
	}
	for _, r := range m.rounds {
		if !r.over {
			m.arm(r)
		}
	}
}

// arm sets round r's deadlines for the state it has just entered (or its
// new local readiness): PhaseTimeout if it waits for a neighbour, or if
// the predecessor opened it and this node has not claimed it;
// ExitWaveTimeout if it is handing its final COMPLETE over.
func (m *Machine) arm(r *round) {
	if !m.timing {
		return
	}
	r.deadline, r.exitBy = 0, 0
	role := m.cfg.Role
	if d := m.cfg.PhaseTimeout; d > 0 && !r.over && !m.st.suspended {
		if _, side := WaitIn(role, r.state, r.localReady).Msg(); side != 0 || r.state == StateSync && role.HasPred() {
			r.deadline = m.now + d
		}
	}
	if d := m.cfg.ExitWaveTimeout; d > 0 && m.handingOver(r) {
		r.exitBy = m.now + d
	}
	if r.deadline != 0 || r.exitBy != 0 {
		if m.armed == nil {
			m.armed = make(map[*round]bool)
		}
		m.armed[r] = true
	} else {
		delete(m.armed, r)
	}
}

// disarm clears round r's deadlines (it is over).
func (m *Machine) disarm(r *round) {
	if r.deadline != 0 || r.exitBy != 0 {
		r.deadline, r.exitBy = 0, 0
		delete(m.armed, r)
	}
}

// clockStep keeps the per-link clocks after a successful step of ev with
// the given actions.
func (m *Machine) clockStep(ev Event, acts []Action) {
	s := ev.From
	switch ev.Kind {
	case EvRecv:
		m.heardFrom(s)
	case EvLinkUp:
		if s != Pred && s != Succ {
			break
		}
		m.sides[s] = sideClock{up: true, upAt: m.now, healthy: m.sides[s].healthy}
		if ev.Msg.Cmd != 0 {
			m.heardFrom(s) // Promote: its first line
		}
	case EvLinkDown:
		if s != Pred && s != Succ {
			break
		}
		c := &m.sides[s]
		if c.up && (c.heard != 0 || ev.Heard[s] != 0 || m.now-c.upAt >= flapTime) {
			c.healthy = m.now
			if h := max(c.heard, ev.Heard[s]); m.cfg.Silence > 0 && h > 0 {
				// With heartbeats a neighbour is heard from every interval:
				// its link has been down since it was last heard from, not
				// since the connection noticed (docs/DESIGN.md, "Liveness").
				c.healthy = min(h, m.now)
			}
		}
		*c = sideClock{healthy: c.healthy}
	}
	if m.cfg.Silence > 0 {
		for i := range acts {
			if a := &acts[i]; a.Kind == ActSend && (a.To == Pred || a.To == Succ) {
				if c := &m.sides[a.To]; c.up && c.spoke == 0 {
					c.spoke = m.now
				}
			}
		}
	}
}

func (m *Machine) heardFrom(s Side) {
	if (s == Pred || s == Succ) && m.now > 0 {
		m.sides[s].heard = m.now
		m.sides[s].silent = false
	}
}

// linkTimeout appends a, a silent or unreachable neighbour, naming the
// first unfinished round, and under PolicyHalt aborts every unfinished
// round.
func (m *Machine) linkTimeout(a Action, out []Action) []Action {
	rs := m.unfinished()
	if len(rs) > 0 {
		a.Round, a.From = rs[0].id, rs[0].state
	}
	out = append(out, a)
	if m.cfg.Policy == PolicyHalt {
		out = m.abortAll(out)
	}
	return out
}

// tick judges every timeout at the current time (EvTick).
func (m *Machine) tick(ev Event, out []Action) []Action {
	if ev.Resumed {
		m.woke = m.now
	}
	out = m.graceTick(out)
	role := m.cfg.Role
	for _, s := range [...]Side{Pred, Succ} {
		if s == Pred && !role.HasPred() || s == Succ && !role.HasSucc() {
			continue
		}
		c := &m.sides[s]
		if c.up && ev.Heard[s] > c.heard {
			c.heard = ev.Heard[s]
			c.silent = false
		}
		if m.graced(s) {
			// In its restart grace: neither its silence nor its down
			// link is a fault (liveness.go); both count from its end.
			c.healthy, c.silent = m.now, false
			continue
		}
		switch {
		case c.up && m.cfg.Silence > 0:
			// Silence counts from the neighbour's last line; on a
			// connection it has not spoken on yet, from this node's first
			// line there (before that a successor holds the connection
			// pending and says nothing).
			since := c.heard
			if since == 0 {
				since = c.spoke
			}
			if since == 0 {
				break
			}
			since = max(since, m.woke)
			if m.now-since < m.cfg.Silence || m.active == 0 {
				c.silent = false
			} else if !c.silent {
				c.silent = true // once per silence
				out = m.linkTimeout(Action{Kind: ActTimeout, Timeout: TimeoutSilence, To: s, After: m.now - since}, out)
			}
		case !c.up && m.cfg.ConnectTimeout > 0 && !c.unreach && m.now-c.healthy >= m.cfg.ConnectTimeout:
			if m.active == 0 {
				c.healthy = m.now // nothing in progress: not a fault; keep watching
				break
			}
			c.unreach = true // once until the link is up
			out = m.linkTimeout(Action{Kind: ActTimeout, Timeout: TimeoutUnreachable, To: s, After: m.now - c.healthy}, out)
		}
	}
	if len(m.armed) == 0 {
		return out
	}
	var due []*round
	for r := range m.armed {
		if r.deadline != 0 && m.now >= r.deadline || r.exitBy != 0 && m.now >= r.exitBy {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b *round) int { return strings.Compare(a.id, b.id) })
	for _, r := range due {
		if r.exitBy != 0 && m.now >= r.exitBy && m.handingOver(r) {
			out = m.finish(r, NotDelivered, out)
			continue
		}
		if r.deadline != 0 && m.now >= r.deadline {
			w := WaitIn(role, r.state, r.localReady)
			_, side := w.Msg()
			if side != 0 && m.graceOn(side) {
				// It waits on a node in its restart grace: counted again.
				r.deadline = m.now + m.cfg.PhaseTimeout
				continue
			}
			r.deadline = 0 // once per state
			out = append(out, Action{Kind: ActTimeout, Timeout: TimeoutPhase, Round: r.id, From: r.state, Wait: w, To: side, After: m.cfg.PhaseTimeout})
			// A round this node never claimed must not hold a slot for
			// ever, whatever the policy.
			if m.cfg.Policy == PolicyHalt || w == WaitLocal {
				out = m.abortRound(r, out)
				continue
			}
		}
		if r.deadline == 0 && r.exitBy == 0 {
			delete(m.armed, r)
		}
	}
	return out
}
