package protocol

import (
	"slices"
	"strings"
	"time"
)

// Liveness (docs/DESIGN.md, "Liveness: a restart is not a death"): restart
// graces, and a neighbour heard from again after a fault.
//
// A node whose task may restart it (Config.RestartGrace) announces, just
// before each task, that it may be gone for up to the grace: a GRACE line
// to both neighbours, which every node passes on away from where it came.
// While a grace holds, no node reports that node's silence, its down
// link, or a phase timeout of a round that waits on the side where it
// lies. The grace ends when the node is back: its task ended (it says so
// with a GRACE line of grace 0), or, after a restart, a neighbour heard a
// line from it on a new connection (that neighbour then passes a GRACE
// line of grace 0 on). When the grace passes first, every node reports a
// TimeoutGrace blaming it, and the policy applies as for an unreachable
// neighbour.
//
// A neighbour this machine reported silent or unreachable (or whose
// grace ran out) that is heard from again is reported with ActBack, so
// that the driver can clear the fault. A KindCleared notice says the
// same to the rest of the chain; it ends nothing, and every node forgets
// the notices it remembers that blame that node, so that a later fault of
// the same node is passed on again.

// KindCleared is the kind of the notice a node sends when the node its
// earlier notice blamed is heard from again (under PolicyWait): the fault
// is over. It ends no round, under either policy.
const KindCleared = "fault-cleared"

// Bounds of a GRACE line.
const (
	// MaxGrace is the longest restart grace a GRACE line may carry.
	MaxGrace = 7 * 24 * time.Hour
	// MaxGraceHops bounds a GRACE line's hop count; a line passed on
	// beyond it keeps it.
	MaxGraceHops = 65535
)

// Grace is the GRACE line's command, the project's extension line for
// restart graces (docs/PROTOCOL.md, "Restart graces"). Like FaultNotice it
// is spoken only with Config.Extensions, Valid reports false for it, and
// Message.Grace carries its fields. Its value, like those of the kinds
// below, is apart from the machine's others.
const Grace Command = 40

// TimeoutGrace: the node Msg.Grace names, which announced a restart
// grace, did not come back within it (After is the grace). To is the side
// where it lies.
const TimeoutGrace TimeoutKind = 16

// The liveness actions.
const (
	// ActGrace reports a restart grace that began (Msg.Grace.For > 0)
	// or ended because the node is back (For 0) at this node; To is the
	// side where the node lies. The machine has passed the line on.
	ActGrace ActionKind = 96 + iota
	// ActBack reports that the neighbour on side To, which this machine
	// reported silent or unreachable (or whose grace ran out), is heard
	// from again; After is how long it had not been heard from.
	ActBack
)

// GraceNote is a GRACE line's content (docs/PROTOCOL.md, "Restart
// graces"): the node Node may be gone for up to For, from the start of
// its task in a round (or in none); For 0 says it is back. Hops is 1 on
// the line the node itself sends, one more at each node that passes it
// on, so a node knows whether the grace is its neighbour's.
type GraceNote struct {
	HasRound bool
	Round    string
	Node     string        // a NoticeName
	For      time.Duration // whole milliseconds, 0..MaxGrace; 0: back
	Hops     int           // 1..MaxGraceHops
}

// Valid reports whether g can travel on the wire.
func (g GraceNote) Valid() bool {
	if !ValidRound(g.Round) || !g.HasRound && g.Round != "" {
		return false
	}
	if g.Node == "" || g.Node == "-" || NoticeName(g.Node) != g.Node {
		return false
	}
	return g.For >= 0 && g.For <= MaxGrace && g.For%time.Millisecond == 0 && g.Hops >= 1 && g.Hops <= MaxGraceHops
}

// String formats g as "B for 10m0s round r7 hops 1" (or "B back ..."),
// for logs and traces.
func (g GraceNote) String() string {
	s := g.Node + " for " + g.For.String()
	if g.For == 0 {
		s = g.Node + " back"
	}
	if g.HasRound {
		if g.Round == "" {
			s += " round (unnamed)"
		} else {
			s += " round " + g.Round
		}
	}
	return s + " hops " + itoa(g.Hops)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// GraceView is one restart grace in force at this node (Machine.Graces).
type GraceView struct {
	Node     string
	HasRound bool
	Round    string
	Side     Side          // where the node lies
	Neighbor bool          // the node is this node's neighbour on Side
	For      time.Duration // the grace it announced
	Left     time.Duration // what is left of it
}

// grace is one restart grace in force.
type grace struct {
	note  GraceNote // as it arrived
	side  Side
	until time.Duration
	gen   uint64 // a neighbour's: the connection the announcement came on
}

// reported is a neighbour this machine reported silent or unreachable.
type reported struct {
	at   time.Duration // when
	last time.Duration // when it was last heard from (or healthy) then
}

// liveness is the machine's part that keeps the restart graces (this
// node's own and the other nodes') and the neighbours reported and not
// heard from since. It is told the time with each call; what ran out it
// hands back for the machine to apply the policy.
type liveness struct {
	role  Role
	ext   bool          // Config.Extensions
	self  string        // this node's name in GRACE lines ("" none)
	grace time.Duration // Config.RestartGrace

	graces map[string]*grace // by node
	gen    [3]uint64         // per Side: connections so far
	rep    [3]*reported      // per Side: reported and not heard from since
	// ann: this node's own graces in force, by round: when each was
	// announced, so that a link that comes back hears what is left.
	ann map[string]time.Duration
	// ended: the graces of other nodes that ended because the node is
	// back, by node (the GRACE line of grace 0, and where it came from),
	// so that a link that comes back hears of it too.
	ended map[string]grace
}

func newLiveness(cfg *Config) liveness {
	l := liveness{role: cfg.Role, ext: cfg.Extensions, grace: cfg.RestartGrace}
	if cfg.Self != "" {
		l.self = NoticeName(cfg.Self)
	}
	return l
}

// views returns the restart graces in force at time now, by node name.
func (l *liveness) views(now time.Duration) []GraceView {
	vs := make([]GraceView, 0, len(l.graces))
	for _, g := range l.graces {
		vs = append(vs, GraceView{Node: g.note.Node, HasRound: g.note.HasRound, Round: g.note.Round, Side: g.side,
			Neighbor: g.note.Hops == 1, For: g.note.For, Left: max(g.until-now, 0)})
	}
	slices.SortFunc(vs, func(a, b GraceView) int { return strings.Compare(a.Node, b.Node) })
	return vs
}

// Graces returns the restart graces in force, by node name.
func (m *Machine) Graces() []GraceView { return m.live.views(m.clock.now) }

// hasSide reports whether a node in role has a neighbour on side s.
func hasSide(role Role, s Side) bool {
	return s == Pred && role.HasPred() || s == Succ && role.HasSucc()
}

// other is the side opposite s.
func other(s Side) Side {
	if s == Pred {
		return Succ
	}
	return Pred
}

// announce appends this node's GRACE line for round id (grace d, 0: back)
// to both neighbours (Config.RestartGrace with extensions only), at time
// now.
func (l *liveness) announce(id string, d, now time.Duration, out []Action) []Action {
	if l.grace <= 0 || !l.ext || l.self == "" {
		return out
	}
	g := &GraceNote{HasRound: true, Round: id, Node: l.self, For: d, Hops: 1}
	if d > 0 {
		if l.ann == nil {
			l.ann = make(map[string]time.Duration)
		}
		l.ann[id] = now
	} else if _, ok := l.ann[id]; !ok {
		return out // no grace of this process to end (a task resumed after a restart)
	} else {
		delete(l.ann, id)
	}
	for _, s := range [...]Side{Pred, Succ} {
		if hasSide(l.role, s) {
			out = append(out, Action{Kind: ActSend, To: s, Msg: Message{Cmd: Grace, Grace: g}})
		}
	}
	return out
}

// runTask appends round id's ActRunTask, after this node's restart grace.
func (l *liveness) runTask(id string, now time.Duration, out []Action) []Action {
	out = l.announce(id, l.grace.Truncate(time.Millisecond), now, out)
	return append(out, Action{Kind: ActRunTask, Round: id})
}

// recv takes a GRACE line from side from at time now: it begins, renews
// or ends a grace and is passed on away from where it came.
func (l *liveness) recv(from Side, msg Message, now time.Duration, out []Action) ([]Action, error) {
	if !l.ext {
		return out, &Violation{From: from, Msg: msg, Reason: "a GRACE line, an extension line, at a node without extensions", Mismatch: true}
	}
	if msg.Grace == nil || !msg.Grace.Valid() {
		return out, &Violation{From: from, Msg: msg, Reason: "malformed GRACE line"}
	}
	g := *msg.Grace
	if g.Node == l.self && l.self != "" {
		return out, nil // its own, back again: nothing to do
	}
	if l.graces == nil {
		l.graces = make(map[string]*grace)
	}
	cur := l.graces[g.Node]
	if g.For == 0 {
		if cur == nil {
			return out, nil // over here already (or never known): passed on then
		}
		l.back(g, from)
	} else {
		delete(l.ended, g.Node)
		gr := &grace{note: g, side: from, until: now + g.For}
		if g.Hops == 1 {
			gr.gen = l.gen[from]
		}
		l.graces[g.Node] = gr
	}
	return l.pass(from, g, out), nil
}

// pass passes g, which arrived from side from (or was found there), on to
// the other side and reports it (ActGrace).
func (l *liveness) pass(from Side, g GraceNote, out []Action) []Action {
	if to := other(from); hasSide(l.role, to) {
		fwd := g
		fwd.Hops = min(g.Hops+1, MaxGraceHops)
		out = append(out, Action{Kind: ActSend, To: to, Msg: Message{Cmd: Grace, Grace: &fwd}})
	}
	return append(out, Action{Kind: ActGrace, To: from, Msg: Message{Cmd: Grace, Grace: &g}})
}

// graced reports whether the neighbour on side s is in a restart grace.
func (l *liveness) graced(s Side) bool {
	for _, g := range l.graces {
		if g.side == s && g.note.Hops == 1 {
			return true
		}
	}
	return false
}

// graceOn reports whether some node on side s is in a restart grace.
func (l *liveness) graceOn(s Side) bool {
	for _, g := range l.graces {
		if g.side == s {
			return true
		}
	}
	return false
}

// heardNew notes a line heard at time at from the neighbour on side s
// (the time is now): a grace of that neighbour announced on an earlier
// connection is over (it restarted and is back), and a neighbour
// reported before is back (ActBack).
func (l *liveness) heardNew(s Side, at, now time.Duration, out []Action) []Action {
	if s != Pred && s != Succ {
		return out
	}
	var back []*grace
	for _, g := range l.graces {
		if g.side == s && g.note.Hops == 1 && l.gen[s] > g.gen {
			back = append(back, g)
		}
	}
	slices.SortFunc(back, func(a, b *grace) int { return strings.Compare(a.note.Node, b.note.Node) })
	for _, g := range back {
		over := g.note
		over.For = 0
		l.back(over, s)
		out = l.pass(s, over, out)
	}
	if rep := l.rep[s]; rep != nil && at > rep.at {
		l.rep[s] = nil
		out = append(out, Action{Kind: ActBack, To: s, After: now - rep.last})
	}
	return out
}

// step keeps the liveness state after a successful step of ev at time
// now with the given actions, and appends what follows from it.
func (l *liveness) step(ev Event, acts []Action, now time.Duration, out []Action) []Action {
	s := ev.From
	switch ev.Kind {
	case EvLinkUp:
		if s == Pred || s == Succ {
			l.gen[s]++
			out = l.reannounce(s, now, out)
			if ev.Msg.Cmd != 0 {
				out = l.heardNew(s, now, now, out) // Promote: its first line
			}
		}
	case EvRecv:
		out = l.heardNew(s, now, now, out)
	case EvTick:
		for _, s := range [...]Side{Pred, Succ} {
			if h := ev.Heard[s]; h > 0 && hasSide(l.role, s) {
				if rep := l.rep[s]; rep != nil && h > rep.at || l.graceBack(s) {
					out = l.heardNew(s, h, now, out)
				}
			}
		}
	}
	for i := range acts {
		if a := &acts[i]; a.Kind == ActTimeout && a.Timeout != TimeoutPhase && (a.To == Pred || a.To == Succ) {
			if a.Timeout == TimeoutGrace && (a.Msg.Grace == nil || a.Msg.Grace.Hops != 1) {
				continue // not the neighbour's
			}
			if l.rep[a.To] == nil {
				l.rep[a.To] = &reported{at: now, last: now - a.After}
			}
		}
	}
	return out
}

// graceBack reports whether a line heard on the current connection on
// side s ends a grace of the neighbour there: the connection is newer
// than the announcement's.
func (l *liveness) graceBack(s Side) bool {
	for _, g := range l.graces {
		if g.side == s && g.note.Hops == 1 && l.gen[s] > g.gen {
			return true
		}
	}
	return false
}

// due returns the graces that ran out by now, in node order.
func (l *liveness) due(now time.Duration) []*grace {
	var due []*grace
	for _, g := range l.graces {
		if now >= g.until {
			due = append(due, g)
		}
	}
	slices.SortFunc(due, func(a, b *grace) int { return strings.Compare(a.note.Node, b.note.Node) })
	return due
}

// KindUnreachable is the kind of the notice of a node that did not come
// back within its grace (as of an unreachable neighbour).
const KindUnreachable = "peer-unreachable"

// noticed: another node's notice n says a node in a restart grace here is
// unreachable, which it can only say once that grace ran out there: the
// grace runs out here too, now (the grace returned, nil if none), so that
// this node reports it as its own (its grace was the same, announced
// moments apart).
func (l *liveness) noticed(n *Notice) *grace {
	if g := l.graces[n.Blamed]; g != nil && n.Kind == KindUnreachable {
		return g
	}
	return nil
}

// expire forgets g, a grace that ran out, and returns its TimeoutGrace
// (Machine.timedOut applies it).
func (l *liveness) expire(g *grace) Action {
	delete(l.graces, g.note.Node)
	note := g.note
	return Action{Kind: ActTimeout, Timeout: TimeoutGrace, To: g.side, After: note.For, Msg: Message{Cmd: Grace, Grace: &note}}
}

// back ends the grace of g.Node (g is its GRACE line of grace 0, which
// came from side from) and keeps the line for the links that come back.
func (l *liveness) back(g GraceNote, from Side) {
	delete(l.graces, g.Node)
	if l.ended == nil {
		l.ended = make(map[string]grace)
	}
	if len(l.ended) >= maxSteerOrigins {
		clear(l.ended)
	}
	l.ended[g.Node] = grace{note: g, side: from}
}

// reannounce sends on the new connection on side s what is left at time
// now of this node's own graces in force (a neighbour that lost the link
// meanwhile would otherwise take the grace for over), then the graces of
// other nodes in force or ended that came from the other side, as this
// node passed them on: a neighbour whose link was down when they passed
// learns of them.
func (l *liveness) reannounce(s Side, now time.Duration, out []Action) []Action {
	ids := make([]string, 0, len(l.ann))
	for id := range l.ann {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		left := (l.grace - (now - l.ann[id])).Truncate(time.Millisecond)
		if left <= 0 {
			continue
		}
		g := &GraceNote{HasRound: true, Round: id, Node: l.self, For: left, Hops: 1}
		out = append(out, Action{Kind: ActSend, To: s, Msg: Message{Cmd: Grace, Grace: g}, Resend: true})
	}
	var others []grace
	for _, g := range l.graces {
		if left := (g.until - now).Truncate(time.Millisecond); g.side != s && left > 0 {
			gr := *g
			gr.note.For = left
			others = append(others, gr)
		}
	}
	for _, g := range l.ended {
		if g.side != s {
			others = append(others, g)
		}
	}
	slices.SortFunc(others, func(a, b grace) int { return strings.Compare(a.note.Node, b.note.Node) })
	for _, g := range others {
		fwd := g.note
		fwd.Hops = min(fwd.Hops+1, MaxGraceHops)
		out = append(out, Action{Kind: ActSend, To: s, Msg: Message{Cmd: Grace, Grace: &fwd}, Resend: true})
	}
	return out
}

// EvRerun: the driver runs the task of Round again, a task its restart
// interrupted (a resume policy of "rerun"; Rerun). Its value is apart
// from the machine's others.
const EvRerun EventKind = 96

// Rerun is the event "the task of round, interrupted by this node's
// restart, runs again": the round stays in StateStart, and a node with a
// restart grace announces it again (on the links as they come up).
func Rerun(round string) Event { return Event{Kind: EvRerun, Round: round} }
