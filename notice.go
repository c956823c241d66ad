package chainsync

import (
	"fmt"
	"net"
	"strings"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// Fault notices (docs/DESIGN.md, "Extension lines"): a node that reports
// a fault tells its neighbours, and every node passes the notice on away
// from where it came, so that every node of the chain learns of a fault
// that only the faulty node's neighbours can see. The machine sends and
// forwards the line, once per notice; this file is the driver's part: what
// to put in a notice, and what one does here (the fault policy).

// selfName names a node in the notices it sends: its name, else its
// listen address, else its role (driver.self, set by Start).
func selfName(cfg *Config, ln net.Listener, role protocol.Role) string {
	switch {
	case cfg.Name != "":
		return protocol.NoticeName(cfg.Name)
	case ln != nil:
		return protocol.NoticeName(ln.Addr().String())
	}
	return role.String()
}

// extensionsOn reports whether cfg's node speaks the extension lines
// (HEARTBEAT, the fault notice, the identity line): with heartbeats or
// the undo wave on.
func extensionsOn(cfg *Config) bool { return cfg.Heartbeat > 0 || cfg.Undo != nil || cfg.Receipts }

// reports says whether a fault of kind is announced to the chain: every
// fault this node finds itself, but not a restarted neighbour (nothing is
// lost; it is only a warning) nor a notice that came from elsewhere (the
// machine passes those on).
func reports(kind FaultKind) bool {
	switch kind {
	case FaultPeerRestarted, FaultChainHalted, FaultChainFault:
		return false
	}
	return true
}

// announce sends the notice of f, a fault this node found, to both
// neighbours; with halt it is a halting report (ReportHalt): under the
// halt policy the machine ends every unfinished round for it, taking
// cause as their fault. Stepped as an event of its own, after the step
// that found the fault. Loop only.
func (d *driver) announce(f Fault, halt bool, cause *FaultError) {
	ev := protocol.Report(d.faults.noticeOf(f))
	if halt {
		ev = protocol.ReportHalt(ev.Note)
	}
	if err := d.step(ev, cause); err != nil && d.st.broken == nil {
		d.log.Error("internal error: fault notice", "err", err.Error())
	}
}

// announceLater queues the announcement of f after the current input's
// actions (an input of its own, inAnnounce). Loop only.
func (fb *faultBook) announceLater(f Fault, halt bool, cause *FaultError) {
	fb.loop.later(input{kind: inAnnounce, fault: &f, flag: halt, cause: cause})
}

// noticeOf is the notice of f, a fault this node found: it blames the
// neighbour f names, or this node for its own task, whose error it
// carries in words (as many as fit the line). Loop only.
func (fb *faultBook) noticeOf(f Fault) protocol.Notice {
	note := protocol.Notice{HasRound: true, Round: f.Round, Kind: string(f.Kind), Origin: fb.self}
	switch {
	case f.Side != 0:
		note.Blamed = protocol.NoticeName(f.Peer)
	case f.Kind == FaultTaskFailed || f.Kind == FaultTaskTimeout:
		note.Blamed = note.Origin // its own task
	}
	if f.why != "" {
		note = note.WithWhy(f.why, wire.MaxLine)
	}
	return note
}

// noticeArrived reports a neighbour's notice, which the machine has
// already passed on: under FaultHalt it halts this node's rounds
// (chain-halted), under FaultWait it is reported (chain-fault); the
// rounds the machine's policy ends for it follow, with it as their cause.
// started and from (the machine's ActNotice) say whether this node's task
// of the round had started, and the round's state here before the notice,
// so that a halt says what it means for that task. Loop only.
func (fb *faultBook) noticeArrived(note protocol.Notice, started bool, from protocol.State) *FaultError {
	fe := &FaultError{Round: note.Round, Kind: FaultChainFault, Peer: note.Blamed, Origin: note.Origin,
		Cause: FaultKind(note.Kind), Reason: describeNotice(note)}
	if why, ok := fb.steer.deniedReason(note.Origin, note.Round); ok && note.HasRound {
		fe.Reason = fmt.Sprintf("%s denied the task of round %s: %s", note.Origin, roundName(note.Round), why) // steer.go
	}
	if fb.policy != FaultWait {
		fe.Kind = FaultChainHalted
	}
	if note.HasRound {
		fe.State = fb.stateOf(note.Round)
		if ri := fb.book.find(note.Round); ri != nil && (fe.Cause == FaultTaskFailed || fe.Cause == FaultTaskTimeout) {
			ri.failedWhy = note.Why // this attempt's words, or none
		}
	}
	f := fe.fault()
	switch {
	case !started:
	case from == protocol.StateStart:
		f.ran = "this node's task of the round is still running (it is not stopped)"
	default:
		f.ran = "this node's task of the round had run already (its work stays)"
	}
	fb.record(f)
	return fe
}

// describeNotice says in words who found what: "C reported B silent",
// and in the origin's words why, if the notice carries them: "C
// reported that C's task failed: disk full".
func describeNotice(note protocol.Notice) string {
	s := noticeWhat(note)
	if note.Why != "" {
		s += ": " + note.Why
	}
	return s
}

// noticeWhat is describeNotice without the origin's words.
func noticeWhat(note protocol.Notice) string {
	o, b := note.Origin, note.Blamed
	if b == "" {
		b = "a node"
	}
	switch FaultKind(note.Kind) {
	case FaultPeerSilent:
		return fmt.Sprintf("%s reported %s silent", o, b)
	case FaultPeerUnreachable:
		return fmt.Sprintf("%s reported %s unreachable", o, b)
	case FaultTaskFailed:
		return fmt.Sprintf("%s reported that %s's task failed", o, b)
	case FaultTaskTimeout:
		return fmt.Sprintf("%s reported that %s's task ran past its timeout", o, b)
	case FaultConfigMismatch:
		return fmt.Sprintf("%s reported a configuration mismatch with %s", o, b)
	case FaultPhaseTimeout:
		return fmt.Sprintf("%s reported a phase timeout", o)
	case FaultExitWaveUndelivered:
		return fmt.Sprintf("%s reported that its final COMPLETE could not be delivered", o)
	}
	if note.Blamed == "" {
		return fmt.Sprintf("%s reported a %s fault", o, note.Kind)
	}
	return fmt.Sprintf("%s reported a %s fault blaming %s", o, note.Kind, b)
}

// mismatchKey identifies one configuration mismatch, reported once
// however often the neighbour reconnects.
type mismatchKey struct {
	side  protocol.Side
	what  string
	round string
}

// mismatch reports that the neighbour on l's side is configured
// differently from this node (a config-mismatch fault, once per kind of
// mismatch), tells it with a notice where extensions are on, and under
// FaultHalt ends every unfinished round. The caller then closes l.
// Loop only.
func (lk *links) mismatch(l *link, what, round, reason string) {
	key := mismatchKey{l.side, what, round}
	if !lk.faults.firstMismatch(key) {
		return
	}
	fe := &FaultError{Round: round, Kind: FaultConfigMismatch, Side: l.side, Peer: lk.peerName(l.side),
		Reason: reason + "; compare both nodes' flags (chainsync check compares them)"}
	f := fe.fault()
	lk.faults.record(f)
	if extensionsOn(lk.cfg) && l != lk.pred && l != lk.succ {
		// A connection still pending gets the notice itself, before it is
		// closed: it is the only way to the neighbour that sent the line.
		note := lk.faults.noticeOf(f)
		lk.wbuf = wire.Append(lk.wbuf[:0], protocol.Message{Cmd: protocol.FaultNotice, Note: &note}, false)
		lk.lp.lastWords(l, lk.wbuf)
	}
	// The notice to the chain and the policy's halt: the machine's.
	lk.faults.announceLater(f, true, fe)
}

// runsText says which rounds a node configured with rs runs, for a
// mismatch's message.
func runsText(rs []string) string {
	switch {
	case rs == nil:
		return "any round its predecessor opens"
	case len(rs) == 1:
		return "round " + roundName(rs[0])
	case len(rs) <= 4:
		return "rounds " + strings.Join(rs, ", ")
	}
	return fmt.Sprintf("rounds %s, ... (%d in all)", strings.Join(rs[:3], ", "), len(rs))
}
