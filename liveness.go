package chainsync

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// docs/DESIGN.md, "Liveness: a restart is not a death". The machine keeps
// the restart graces and says when a neighbour it reported is heard from
// again (protocol/liveness.go); this file is the driver's part:
//
//   - a liveness fault (a neighbour silent or unreachable, or a node that
//     did not come back within its grace, found here or told by a notice)
//     pages once per blamed node: the first report of it runs the fault
//     hook, every further report until it cleared is traced with Again
//     set (TraceEvent.Again), which the hook skips;
//   - under FaultWait, when the blamed node is heard from again (the
//     machine's ActBack here, or another node's fault-cleared notice),
//     the fault clears: it is logged at WARN ("fault cleared: B is back
//     after 3.4s"), traced as TraceFaultCleared (the recover hook), taken
//     out of Snapshot's faults, and, if this node found it, announced to
//     the chain with a fault-cleared notice;
//   - a notice of a liveness fault that arrives just after that fault
//     cleared here (it was queued behind the stopped node, and comes
//     when the fault is over) is logged and otherwise ignored.

// liveFault is a liveness fault in force at this node, by blamed node.
type liveFault struct {
	kind  FaultKind // the kind reported first (for a notice, its cause)
	round string
	since time.Time
	found bool // this node found it itself (it announces the clearing)
}

// liveFaults is the driver's liveness state (faultBook.live). Loop only.
type liveFaults struct {
	active  map[string]*liveFault
	cleared map[string]time.Time // when each blamed node's fault cleared here
}

// liveKind reports whether f is a liveness fault and, if so, the kind
// it is of (a notice's cause) and the node it blames.
func liveKind(f Fault) (FaultKind, string, bool) {
	kind := f.Kind
	if kind == FaultChainFault || kind == FaultChainHalted {
		kind = f.Cause
	}
	if kind != FaultPeerSilent && kind != FaultPeerUnreachable || f.Peer == "" {
		return "", "", false
	}
	return kind, protocol.NoticeName(f.Peer), true
}

// page notes f, a fault being recorded, and reports whether it is a
// further report of a liveness fault in force here (no page). Loop only.
func (lv *liveFaults) page(f Fault) (again bool) {
	kind, who, ok := liveKind(f)
	if !ok {
		return false
	}
	if lv.active[who] != nil {
		return true
	}
	if lv.active == nil {
		lv.active = make(map[string]*liveFault)
	}
	lv.active[who] = &liveFault{kind: kind, round: f.Round, since: time.Now(), found: f.Origin == ""}
	return false
}

// staleWindow is how long after a blamed node's fault cleared here a
// notice of it is taken for one that was queued behind the fault: a new
// silence cannot be found sooner than three heartbeat intervals after the
// node was heard again, nor a down link sooner than the connect timeout.
func (fb *faultBook) staleWindow() time.Duration {
	w := 3 * fb.heartbeat
	if t := fb.connectTimeout; t > 0 && t < w {
		w = t
	}
	return w
}

// noticeLive handles the liveness side of a neighbour's notice before it
// is reported: a fault-cleared notice clears the fault here; a late notice
// of a fault that has just cleared is logged and dropped. It reports
// whether the notice is dealt with (not to be reported as a fault).
// Loop only.
func (fb *faultBook) noticeLive(note protocol.Notice) bool {
	who := protocol.NoticeName(note.Blamed)
	if note.Kind == protocol.KindCleared {
		if lf := fb.live.active[who]; lf != nil && fb.policy == FaultWait {
			fb.clearFault(who, lf, time.Since(lf.since), note.Origin)
		}
		return true
	}
	if fb.policy != FaultWait || fb.live.active[who] != nil {
		return false
	}
	k := FaultKind(note.Kind)
	if k != FaultPeerSilent && k != FaultPeerUnreachable {
		return false
	}
	if at, ok := fb.live.cleared[who]; ok && time.Since(at) < fb.staleWindow() {
		fb.log.Info("late notice of a fault that has cleared; nothing to do", "notice", note.String(), "cleared", time.Since(at).Round(time.Millisecond).String()+" ago")
		return true
	}
	return false
}

// staleToBlamed reports whether note, re-sent on a link that just came
// up to the neighbour named to, is a notice of to's own silence or
// unreachability under FaultWait: the link shows to is back, so the
// notice is over, and passed on from there it would page the nodes
// beyond for a fault that has cleared (under FaultHalt it still goes: it
// ended the round). It logs what it drops. Loop only.
func (fb *faultBook) staleToBlamed(note protocol.Notice, to string) bool {
	k := FaultKind(note.Kind)
	if fb.policy != FaultWait || k != FaultPeerSilent && k != FaultPeerUnreachable || note.Blamed != protocol.NoticeName(to) {
		return false
	}
	fb.log.Info("not re-sent: a notice of the fault of the node this link goes to, which is back", "notice", note.String())
	return true
}

// back handles the machine's ActBack: the neighbour on side a.To, which
// this node reported, is heard from again. Loop only.
func (fb *faultBook) back(a *protocol.Action) {
	who := protocol.NoticeName(fb.host.peerName(a.To))
	lf := fb.live.active[who]
	if lf == nil {
		return
	}
	if fb.policy != FaultWait {
		fb.log.Info(fmt.Sprintf("%s is heard from again after %s (fault policy halt: the rounds it ended stay ended)", who, fmtSecs(a.After)))
		return
	}
	fb.clearFault(who, lf, a.After, "")
}

// clearFault clears the liveness fault lf blaming who, after it lasted
// for: logs it, traces it (the recover hook), takes it out of the faults
// Snapshot reports and, if this node heard the node back itself, tells
// the chain with a fault-cleared notice. Loop only.
func (fb *faultBook) clearFault(who string, lf *liveFault, after time.Duration, by string) {
	fb.live.clear(who)
	args := []any{"kind", string(lf.kind), "peer", who, "round", lf.round}
	if by != "" {
		args = append(args, "origin", by)
	}
	// after is how long the fault lasted where it is measured: here, when
	// this node heard who back itself; when another node's notice clears
	// it (by), only since this node learned of the fault, which says
	// nothing of how long who was away: the words then name who heard it.
	back := fmt.Sprintf("%s is back after %s", who, fmtSecs(after))
	switch {
	case who == fb.self && by != "":
		back = fmt.Sprintf("%s (this node) is back: %s hears from it again", who, by)
	case by != "":
		back = fmt.Sprintf("%s is back: %s hears from it again", who, by)
	}
	fb.log.Warn("fault cleared: "+back, args...)
	fb.recent = slices.DeleteFunc(fb.recent, func(f Fault) bool {
		_, b, ok := liveKind(f)
		return ok && b == who
	})
	fb.loop.trace(TraceEvent{Kind: TraceFaultCleared, Fault: lf.kind, Peer: who, Round: lf.round, Origin: by,
		Err: errors.New(back)})
	if by == "" && fb.ext {
		note := protocol.Notice{HasRound: true, Round: lf.round, Kind: protocol.KindCleared, Origin: fb.self, Blamed: who}
		fb.loop.later(input{kind: inReport, note: &note})
	}
}

// clear notes that the fault blaming who cleared now.
func (lv *liveFaults) clear(who string) {
	delete(lv.active, who)
	if lv.cleared == nil {
		lv.cleared = make(map[string]time.Time)
	}
	lv.cleared[who] = time.Now()
}

// graceAct reports the machine's ActGrace: a restart grace began or
// ended here. Loop only.
func (fb *faultBook) graceAct(a *protocol.Action) {
	g := a.Msg.Grace
	if g == nil {
		return
	}
	if g.For > 0 {
		fb.log.Info(fmt.Sprintf("%s may restart: nothing is reported about it for up to %s (its restart grace)", g.Node, fmtGrace(g.For)),
			"node", g.Node, "round", g.Round, "grace", fmtGrace(g.For))
		return
	}
	fb.log.Info(fmt.Sprintf("%s is back: its restart grace is over", g.Node), "node", g.Node, "round", g.Round)
}

// graceTimedOut is the fault of a grace that ran out (TimeoutGrace).
func (fb *faultBook) graceTimedOut(a *protocol.Action, fe *FaultError) {
	g := a.Msg.Grace
	fe.Kind, fe.Peer, fe.After = FaultPeerUnreachable, g.Node, g.For
	fe.Reason = fmt.Sprintf("%s did not come back within the restart grace (%s)", g.Node, fmtGrace(g.For))
}

// GraceStatus is a restart grace in force at a node (Snapshot.Restarting).
type GraceStatus struct {
	Node  string        // the node that may be restarting
	Round string        // the round its task runs in
	Grace time.Duration // the grace it announced
	Left  time.Duration // what is left of it
	Side  protocol.Side // where it lies
}

// String says it as logs and status do: "B is restarting (grace 10m, 2m
// left)".
func (g GraceStatus) String() string {
	return fmt.Sprintf("%s is restarting (grace %s, %s left)", g.Node, fmtGrace(g.Grace), fmtLeft(g.Left))
}

// graceSnapshot adds gs, the machine's graces in force, to st. Loop only.
func (fb *faultBook) graceSnapshot(st *Snapshot, gs []protocol.GraceView) {
	for _, g := range gs {
		st.Restarting = append(st.Restarting, GraceStatus{Node: g.Node, Round: g.Round, Grace: g.For, Left: g.Left, Side: g.Side})
	}
}

// silentLink reports whether l is up but its neighbour has sent nothing
// for two heartbeat intervals (heartbeats on). Loop only.
func (lk *links) silentLink(l *link) bool {
	hb := lk.cfg.Heartbeat
	if l == nil || hb <= 0 {
		return false
	}
	h := l.heardAt()
	return h != 0 && time.Since(time.Unix(0, h)) > 2*hb
}

// fmtGrace writes d without zero units: 10m, 1h30m, 45s, 1.5s.
func fmtGrace(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtLeft rounds what is left of a grace for people: to the minute from
// a minute on, else to the second.
func fmtLeft(d time.Duration) string {
	if d >= time.Minute {
		return fmtGrace(d.Round(time.Minute))
	}
	return fmtGrace(d.Round(time.Second))
}

// fmtSecs writes a duration to a tenth of a second: 3.4s, 1m2.5s.
func fmtSecs(d time.Duration) string {
	return d.Round(100 * time.Millisecond).String()
}

// selfLabel names a node in the GRACE lines its machine sends, as
// selfName does once the node listens.
func selfLabel(cfg *Config, role protocol.Role) string {
	switch {
	case cfg.Name != "":
		return protocol.NoticeName(cfg.Name)
	case cfg.Listen != "":
		return protocol.NoticeName(cfg.Listen)
	}
	return role.String()
}

// TraceFaultCleared: a liveness fault in force here cleared (the
// recover hook): Fault is its kind, Peer the node that is back, Round the
// round it was reported in, Origin the node whose notice said so ("" if
// this node heard it back itself), Err says how long it was gone.
const TraceFaultCleared TraceKind = 96
