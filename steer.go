package chainsync

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"log/slog"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
)

// Steering (docs/STEERING.md): people hold a node, gate its tasks on an
// approval, or deny one. Each request is taken on the loop: it is written
// to the state directory first (with Config.StateDir), then stepped into
// the machine, which starts no task at a gated node and tells the chain
// with a steering line; every node's Snapshot then shows who is gated,
// since when, who asked and why.

// Request is a person's steering request: which round (for Approve and
// Deny; "" is the round waiting now), who asks (a name for the record, not
// an authentication), and why.
type Request struct {
	Round    string
	HasRound bool // Round is given (the unnamed round is "")
	By       string
	Reason   string
}

// SteerStatus is one node's steering state as a Snapshot shows it: held,
// waiting for an approval, paused, or a task denied.
type SteerStatus struct {
	Node     string    // the node it is about (its name in the chain)
	Here     bool      // this node
	What     string    // hold, approval, pause, denied, cancel or retry (protocol.SteerWhat); here also approved, none (released) and resume
	Round    string    // the round (approval, denied, cancel)
	HasRound bool      // Round is set
	Since    time.Time // when it began
	By       string    // who asked ("" unknown)
	Reason   string    // why ("" not given)
}

// Text says the state in words, e.g. "held at C since 10:02 (change
// window), by ann"; at is the time zone to show times in.
func (s SteerStatus) Text(at *time.Location) string {
	since := s.Since.In(at).Format("15:04")
	var t string
	switch s.What {
	case "hold":
		t = "held at " + s.Node + " since " + since
	case "approval":
		t = "waiting for approval at " + s.Node + " (round " + roundName(s.Round) + ") since " + since
	case "pause":
		t = "paused at the Head " + s.Node + " since " + since
	case "denied":
		t = "denied at " + s.Node + " (round " + roundName(s.Round) + ") at " + since
	case "cancel":
		t = "round " + roundName(s.Round) + " cancelled at the Head " + s.Node + " at " + since
	case "retry":
		t = "round " + roundName(s.Round) + " retried at the Head " + s.Node + " at " + since
	case "none":
		t = "released at " + s.Node + " at " + since
	case "approved":
		t = "approved at " + s.Node + " (round " + roundName(s.Round) + ") at " + since
	case "resume":
		t = "resumed at the Head " + s.Node + " at " + since
	default:
		t = s.What + " at " + s.Node + " since " + since
	}
	if s.Reason != "" {
		t += " (" + s.Reason + ")"
	}
	if s.By != "" {
		t += ", by " + s.By
	}
	return t
}

// HoldEvent is what Config.OnHold is told: a hold or an approval wait
// began at this node.
type HoldEvent struct {
	Kind   string // "hold" or "approval"
	Round  string // the round that waits (approval; for a hold, the one whose turn came, if any)
	Reason string // the hold's reason
	By     string // who asked for the hold
	Since  time.Time
}

// ErrRefused is the error of a steering request the node refused; the
// wrapping error says why.
var ErrRefused = errors.New("chainsync: refused")

func refused(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, a...))
}

// steerHold is a hold (or pause) as it is kept and journalled.
type steerHold struct {
	Since  int64  `json:"since"` // Unix milliseconds
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// steerFile is the state directory's steering file (internal/journal,
// SaveSteer).
type steerFile struct {
	At       int64      `json:"at"`              // the last steering line's At
	Hold     *steerHold `json:"hold,omitempty"`  // this node is held
	Pause    *steerHold `json:"pause,omitempty"` // this node, the Head, paused the chain
	Approved []string   `json:"approved,omitempty"`
	// Skip: rounds reopened by a retry whose task had succeeded here:
	// they pass on without running again, after a restart too.
	Skip []string `json:"skip,omitempty"`
	// ChainPause is the Head's pause line as this node last heard it (a
	// node restarted while the chain is paused starts no task before its
	// link to the Head's side is up again to say otherwise).
	ChainPause *protocol.Steer `json:"chain_pause,omitempty"`
}

// keepApprovals bounds the approvals a node journals.
const keepApprovals = 1024

// steering is a node's steering part: the holds, approvals and pause
// asked of it and journalled in the steering file, the rounds waiting
// for an approval, what it heard of other nodes' steering, and the
// machine's steering actions. It never steps the machine: what it asks
// the machine (a steering line, an approval, a denial, a restored skip)
// it queues in steps, which the driver steps as soon as the call into
// steering returns (driver.steerSteps), in order. Loop only.
type steering struct {
	file    steerFile
	waiting waitingRounds     // rounds waiting for an approval here (ActGate), since
	denied  map[string]string // "origin round" -> the reason of a denial, from its line
	sent    protocol.Steer    // the last own state stepped
	resumed chan struct{}     // closed when a pause at this Head ends (Paused)
	events  []SteerStatus     // the latest denials and cancels, here and heard of

	steps   []steerStep // handed back to the driver, stepped in order
	loop    *loop
	st      *stepper   // the turn's write: the steering file, a fault record
	undo    *undoState // a retry forgets the undo outcome of the attempt before it
	faults  *faultBook
	view    machineView
	book    *roundBook
	store   *store // nil without a state directory
	log     *slog.Logger
	self    string        // this node's name in steering lines
	role    protocol.Role // pause, cancel and retry are the Head's
	approve bool          // Config.Approve
	// decided, if set, is told of each approval and denial given here
	// (receipts.go).
	decided func(round string, approved bool, req Request, at time.Time)
	ext     bool        // the extension lines are on
	dir     string      // Config.StateDir, for the log
	policy  FaultPolicy // what a denial does
	onHold  func(HoldEvent)
}

// steerStep is one step steering hands back to the driver: ev, or with
// announce this node's own steering line as it stands when its turn
// comes (announceNow). then, if set, is told the step's error; what it
// returns answers the request being carried out (nil: the request's own
// answer stands).
type steerStep struct {
	ev       protocol.Event
	announce bool
	then     func(error) error
}

// hand queues ev for the driver to step, then tells then its error.
// Loop only.
func (d *steering) hand(ev protocol.Event, then func(error) error) {
	d.steps = append(d.steps, steerStep{ev: ev, then: then})
}

// stateOf returns round id's state in the machine, 0 if it does not keep
// the round.
func (d *steering) stateOf(id string) protocol.State {
	st, _ := d.view.State(id)
	return st
}

// steerKey keys a denial by origin and round.
func steerKey(origin, round string) string { return origin + " " + round }

// nextAt returns the At of a new own steering line: now in Unix
// milliseconds, later than every line before.
func (d *steering) nextAt() int64 {
	at := max(time.Now().UnixMilli(), d.file.At+1)
	d.file.At = at
	return at
}

// saveSteer queues the steering file (with a state directory) for the
// turn's write, before anything the change it records does acts (the
// request that made it is answered after that write). Loop only.
func (d *steering) saveSteer() error {
	if d.store == nil {
		return nil
	}
	data, err := json.Marshal(d.file)
	if err != nil {
		return err
	}
	return d.st.saveSteerFile(data) // written with the turn's records (store.go)
}

// restoreSteer reinstates what the steering file says (Start, on the
// loop, before the first tick): a node restarted while held is held, and
// the approvals given stand.
func (d *steering) restoreSteer() {
	if d.store == nil {
		return
	}
	data, err := d.store.loadSteer()
	if err == nil && len(data) > 0 {
		err = json.Unmarshal(data, &d.file)
	}
	if err != nil {
		d.log.Error("cannot read the steering state; starting without holds or approvals", "dir", d.dir, "err", err.Error())
		return
	}
	if h := d.file.Hold; h != nil {
		d.log.Warn("resumed held (chainsync hold before the restart): no task starts until chainsync release",
			"since", time.UnixMilli(h.Since).Format(time.RFC3339), "by", h.By, "reason", h.Reason)
	}
	if h := d.file.Pause; h != nil {
		d.log.Warn("resumed paused (chainsync pause before the restart): no round opens and no task starts until chainsync resume",
			"since", time.UnixMilli(h.Since).Format(time.RFC3339), "by", h.By, "reason", h.Reason)
		d.resumed = make(chan struct{})
	}
	if cp := d.file.ChainPause; cp != nil && d.role.HasPred() && d.ext && cp.Valid() {
		// As heard before the restart; the link to the predecessor
		// re-sends the Head's latest line when it is up.
		d.hand(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.SteerLine, Steer: cp}), nil)
	}
	d.announceSteer() // the hold first: no approval below may start a task of a held node
	for _, id := range d.file.Skip {
		d.hand(protocol.AlreadyDone(id), nil) // an error: a round since ended, nothing to do
	}
	for _, id := range d.file.Approved {
		d.hand(protocol.Approve(id), nil) // an error: a round since ended, or forgotten, nothing to do
	}
}

// ownSteer is the steering state this node tells the chain: held, else
// waiting for an approval, else none (after a gate opened).
func (d *steering) ownSteer(self string) protocol.Steer {
	s := protocol.Steer{Origin: self, What: protocol.SteerNone}
	switch {
	case d.file.Pause != nil:
		// A pause gates every node, this one included: it says more
		// than a hold of the Head.
		h := d.file.Pause
		s.What, s.By, s.Reason = protocol.SteerPause, protocol.NoticeName(h.By), h.Reason
	case d.file.Hold != nil:
		h := d.file.Hold
		s.What, s.By, s.Reason = protocol.SteerHold, protocol.NoticeName(h.By), h.Reason
	case len(d.waiting) > 0:
		s.What, s.HasRound, s.Round = protocol.SteerApproval, true, d.waiting.first()
	}
	return s
}

// waitingRounds are the rounds waiting for an approval at a node, each
// with the time it began to wait.
type waitingRounds map[string]time.Time

// first returns the round that waits longest.
func (w waitingRounds) first() string {
	var first string
	var at time.Time
	for id, t := range w {
		if at.IsZero() || t.Before(at) || t.Equal(at) && id < first {
			first, at = id, t
		}
	}
	return first
}

// announceSteer queues this node's steering state, to be stepped into
// the machine (which sends it on) if it changed since the last one when
// its turn comes (announceNow). Loop only.
func (d *steering) announceSteer() {
	d.steps = append(d.steps, steerStep{announce: true})
}

// announceNow returns the steering line announceSteer asked for, if this
// node's state changed since the last one stepped. Loop only.
func (d *steering) announceNow() (protocol.Event, func(error) error, bool) {
	s := d.ownSteer(d.self)
	last := d.sent
	if s.What == last.What && s.Round == last.Round && s.Reason == last.Reason && s.By == last.By {
		return protocol.Event{}, nil, false
	}
	if !last.What.Gates() && s.What == protocol.SteerNone {
		return protocol.Event{}, nil, false // nothing to say: not gated before either
	}
	ev, then := d.steerLine(s, nil)
	return ev, then, true
}

// steerLine is the event of s, this node's new steering line, and what
// follows its step (for hand); refused, if set, is told the machine's
// refusal of it (a retry the machine cannot take now) or nil, and what
// it returns answers the request. Loop only.
func (d *steering) steerLine(s protocol.Steer, refused func(error) error) (protocol.Event, func(error) error) {
	s.At = d.nextAt()
	s = s.FitReason()
	return protocol.Steering(s), func(err error) error {
		if err != nil {
			if refused != nil && (errors.Is(err, protocol.ErrUndoUnderWay) || errors.Is(err, protocol.ErrRoundsInFlight)) {
				return refused(err) // the machine refuses the retry now: the request says why
			}
			if d.st.broken == nil {
				d.log.Error("internal error: steering line", "err", err.Error())
			}
			if refused != nil {
				return err // the request failed
			}
			return nil
		}
		if s.What.Event() {
			d.noteEvent(steerStatus(s, true))
			d.loop.trace(TraceEvent{Kind: TraceSteer, Round: s.Round, Steer: s.What.String(), Err: steerWhy(Request{By: s.By, Reason: s.Reason})})
		} else {
			d.sent = s
		}
		if refused != nil {
			return refused(nil)
		}
		return nil
	}
}

// keepEvents is how many recent denials and cancels Snapshot shows.
const keepEvents = 16

// noteEvent keeps a denial or a cancel for Snapshot. Loop only.
func (d *steering) noteEvent(st SteerStatus) {
	if len(d.events) == keepEvents {
		d.events = slices.Delete(d.events, 0, 1)
	}
	d.events = append(d.events, st)
}

// steerAct carries out the machine's steering actions. Loop only.
func (d *steering) steerAct(a *protocol.Action) {
	switch a.Kind {
	case protocol.ActGate:
		if slices.Contains(d.file.Approved, a.Round) {
			return // approved before a restart: restoreSteer approves it again now
		}
		if d.waiting == nil {
			d.waiting = make(waitingRounds)
		}
		now := time.Now()
		d.waiting[a.Round] = now
		d.log.Warn("waiting for approval: the round's turn has come; its task starts after chainsync approve (or fails at chainsync deny)", "round", a.Round)
		d.loop.trace(TraceEvent{Kind: TraceSteer, Round: a.Round, Steer: "approval"})
		if d.onHold != nil {
			d.loop.callback(func() { d.onHold(HoldEvent{Kind: "approval", Round: a.Round, Since: now}) })
		}
		d.loop.later(input{kind: inAnnounceSteer})
	case protocol.ActSkip:
		d.log.Info("already done here: this node's task for the round succeeded before the retry; passing the round on without running it again", "round", a.Round)
		d.loop.trace(TraceEvent{Kind: TraceSteer, Round: a.Round, Steer: "skip"})
	case protocol.ActSteer:
		s := *a.Msg.Steer
		st := steerStatus(s, false)
		if s.What.Event() {
			d.noteEvent(st)
		}
		switch s.What {
		case protocol.SteerDenied:
			if d.denied == nil {
				d.denied = make(map[string]string)
			}
			if len(d.denied) > keepApprovals {
				clear(d.denied)
			}
			d.denied[steerKey(s.Origin, s.Round)] = s.Reason
			d.log.Warn("steering: "+st.Text(time.Local), "origin", s.Origin, "round", s.Round)
		case protocol.SteerNone:
			d.log.Info("steering: "+s.Origin+" starts its tasks again", "origin", s.Origin)
			d.chainPause(s)
		case protocol.SteerPause:
			d.log.Warn("steering: "+st.Text(time.Local)+"; no task starts here until the Head resumes", "origin", s.Origin)
			d.chainPause(s)
		case protocol.SteerRetry:
			d.loop.later(input{kind: inRetried, round: s.Round}) // retriedNow
			d.log.Warn("steering: round "+roundName(s.Round)+" reopened by a retry at the Head "+s.Origin+byText(s.By), "round", s.Round)
		case protocol.SteerCancel:
			d.cancelled(s.Round, &CancelledError{By: s.By, Reason: s.Reason})
			d.log.Warn("steering: "+st.Text(time.Local)+"; no task of it starts here", "origin", s.Origin, "round", s.Round)
		default:
			d.log.Info("steering: "+st.Text(time.Local), "origin", s.Origin)
		}
		d.loop.trace(TraceEvent{Kind: TraceSteer, Round: s.Round, Origin: s.Origin, Steer: s.What.String(), Err: errors.New(st.Text(time.Local))})
	}
}

// steerStatus is s as a Snapshot shows it.
func steerStatus(s protocol.Steer, here bool) SteerStatus {
	return SteerStatus{Node: s.Origin, Here: here, What: s.What.String(), Round: s.Round, HasRound: s.HasRound,
		Since: time.UnixMilli(s.At), By: s.By, Reason: s.Reason}
}

// steerSnapshot fills st's steering: every node this node knows to be
// gated (itself first), and the denials it heard of. Loop only.
func (d *steering) steerSnapshot(st *Snapshot) {
	for i, s := range d.view.Steers() {
		own := i == 0 && s.Origin == d.sent.Origin && d.sent.What != 0
		if !s.What.Gates() {
			continue
		}
		ss := steerStatus(s, own)
		if own && s.What == protocol.SteerHold && d.file.Hold != nil {
			ss.Since = time.UnixMilli(d.file.Hold.Since)
			ss.By, ss.Reason = d.file.Hold.By, d.file.Hold.Reason
		}
		st.Steering = append(st.Steering, ss)
	}
	st.Steering = append(st.Steering, d.events...)
	for i := range st.Rounds {
		r := &st.Rounds[i]
		if g := d.view.Gate(r.Round); g != protocol.WaitNothing {
			r.WaitingFor = g
			r.Gate = d.self
		}
	}
}

// deniedReason returns the reason of origin's denial of round, if a
// steering line told it. Loop only.
func (d *steering) deniedReason(origin, round string) (string, bool) {
	r, ok := d.denied[steerKey(origin, round)]
	return r, ok
}

// Hold stops this node from starting any task until Release: a task
// running now finishes, and its COMPLETE goes on. The node keeps
// heartbeating and tells the chain, so that no phase timeout fires
// anywhere while it is held. With Config.StateDir the hold is journalled:
// a node restarted while held is held. Holding a held node is refused
// (ErrRefused).
func (n *Node) Hold(req Request) error {
	_, err := n.steerAsk(opHold, req)
	return err
}

// holdReq is Hold, on the loop.
func (d *steering) holdReq(req Request) error {
	if h := d.file.Hold; h != nil {
		return refused("this node is held already, since %s%s", time.UnixMilli(h.Since).Format("15:04:05"), byText(h.By))
	}
	old := d.file.Hold
	d.file.Hold = &steerHold{Since: time.Now().UnixMilli(), By: req.By, Reason: req.Reason}
	if err := d.saveSteer(); err != nil {
		d.file.Hold = old
		return err
	}
	d.log.Warn("held: no task starts here until chainsync release", "by", req.By, "reason", req.Reason)
	d.loop.trace(TraceEvent{Kind: TraceSteer, Steer: "hold", Err: steerWhy(req)})
	if d.onHold != nil {
		ev := HoldEvent{Kind: "hold", Round: d.turnRound(), Reason: req.Reason, By: req.By, Since: time.Now()}
		d.loop.callback(func() { d.onHold(ev) })
	}
	d.announceSteer()
	return nil
}

// turnRound returns the round whose task would start next here, if its
// turn has come ("" if none). Loop only.
func (d *steering) turnRound() string {
	for _, v := range d.view.View() {
		if d.view.Gate(v.Round) != protocol.WaitNothing {
			return v.Round
		}
	}
	return ""
}

// Release undoes Hold: the tasks whose turn has come start. Releasing a
// node that is not held is refused.
func (n *Node) Release(req Request) error {
	_, err := n.steerAsk(opRelease, req)
	return err
}

// releaseReq is Release, on the loop.
func (d *steering) releaseReq(req Request) error {
	h := d.file.Hold
	if h == nil {
		return refused("this node is not held")
	}
	d.file.Hold = nil
	if err := d.saveSteer(); err != nil {
		d.file.Hold = h
		return err
	}
	d.log.Warn("released: tasks start here again", "by", req.By, "reason", req.Reason, "held_since", time.UnixMilli(h.Since).Format(time.RFC3339))
	d.loop.trace(TraceEvent{Kind: TraceSteer, Steer: "none", Err: steerWhy(req)})
	d.noteEvent(SteerStatus{Node: d.self, Here: true, What: "none", Since: time.Now(), By: req.By, Reason: req.Reason})
	d.announceSteer()
	return nil
}

// waitingRound picks the round an Approve or Deny is about: req's, or
// the one waiting for an approval now.
func (d *steering) waitingRound(req Request, what string) (string, error) {
	if req.HasRound {
		if _, ok := d.waiting[req.Round]; ok {
			return req.Round, nil
		}
		if what == "deny" {
			if st := d.stateOf(req.Round); st != 0 && st < protocol.StateStart {
				return req.Round, nil
			}
		}
		return "", refused("round %s is not waiting for an approval here%s", roundName(req.Round), d.waiting.text())
	}
	switch len(d.waiting) {
	case 0:
		if !d.approve {
			return "", refused("this node does not gate its tasks on an approval (start it with --approve)")
		}
		return "", refused("no round is waiting for an approval here (a round waits once its predecessor's COMPLETE has come)")
	case 1:
		return d.waiting.first(), nil
	}
	return "", refused("several rounds wait for an approval here%s: give --round", d.waiting.text())
}

// text lists the rounds, for a refusal.
func (w waitingRounds) text() string {
	ids := make([]string, 0, len(w))
	for id := range w {
		ids = append(ids, roundName(id))
	}
	if len(ids) == 0 {
		return ""
	}
	slices.Sort(ids)
	return " (waiting: " + strings.Join(ids, ", ") + ")"
}

// Approve lets the task of the round waiting for an approval here start
// (Config.Approve): req.Round, or without HasRound the one waiting now.
// It returns the round approved. With Config.StateDir the approval is
// journalled before the task starts.
func (n *Node) Approve(req Request) (string, error) {
	return n.steerAsk(opApprove, req)
}

// approveReq is Approve, on the loop.
func (d *steering) approveReq(req Request) (id string, err error) {
	if id, err = d.waitingRound(req, "approve"); err != nil {
		return id, err
	}
	d.file.Approved = append(d.file.Approved, id)
	if k := len(d.file.Approved) - keepApprovals; k > 0 {
		d.file.Approved = slices.Delete(d.file.Approved, 0, k)
	}
	if err := d.saveSteer(); err != nil {
		d.file.Approved = d.file.Approved[:len(d.file.Approved)-1]
		return id, err
	}
	delete(d.waiting, id)
	if d.decided != nil {
		d.decided(id, true, req, time.Now())
	}
	d.log.Warn("approved: the task starts", "round", id, "by", req.By, "reason", req.Reason)
	d.loop.trace(TraceEvent{Kind: TraceSteer, Round: id, Steer: "approved", Err: steerWhy(req)})
	d.noteEvent(SteerStatus{Node: d.self, Here: true, What: "approved", Round: id, HasRound: true, Since: time.Now(), By: req.By, Reason: req.Reason})
	d.hand(protocol.Approve(id), func(err error) error {
		if err == nil {
			d.announceSteer()
		}
		return err
	})
	return id, nil
}

// Deny fails the round waiting for an approval here (req.Round, or the
// one waiting now) as a failed task would: its Result is StatusTaskFailed
// with a *DeniedError, the fault is task-failed, and the chain learns the
// reason from a steering line before the fault notice.
func (n *Node) Deny(req Request) (string, error) {
	return n.steerAsk(opDeny, req)
}

// denyReq is Deny, on the loop.
func (d *steering) denyReq(req Request) (id string, err error) {
	if id, err = d.waitingRound(req, "deny"); err != nil {
		return id, err
	}
	delete(d.waiting, id)
	if d.decided != nil {
		d.decided(id, false, req, time.Now())
	}
	reason := req.Reason
	if reason == "" {
		reason = "no reason given"
	}
	de := &DeniedError{Node: d.self, By: req.By, Reason: reason}
	d.hand(d.steerLine(protocol.Steer{Origin: d.self, What: protocol.SteerDenied, HasRound: true, Round: id,
		By: protocol.NoticeName(req.By), Reason: reason}, nil))
	ri := d.book.get(id)
	ri.cause = de
	te := &TaskError{Round: id, Err: de}
	d.faults.record(Fault{Kind: FaultTaskFailed, Round: id, Err: te.Error() + failedHere(d.policy)})
	d.hand(protocol.Deny(id), func(err error) error {
		if err == nil {
			d.announceSteer()
		}
		return err
	})
	return id, nil
}

// DeniedError is the task error of a round denied at a node (Deny).
type DeniedError struct {
	Node   string // where
	By     string // who denied it ("" unknown)
	Reason string
}

// Error says who denied the task and why.
func (e *DeniedError) Error() string {
	return "denied at " + e.Node + byText(e.By) + ": " + e.Reason
}

func byText(by string) string {
	if by == "" {
		return ""
	}
	return " by " + by
}

// steerOp is which steering request a steerReq is.
type steerOp uint8

const (
	opHold steerOp = iota + 1
	opRelease
	opApprove
	opDeny
	opPause
	opResume
	opCancel
	opRetry
)

// steerReq is a steering request for the loop (inSteer).
type steerReq struct {
	op  steerOp
	req Request
}

// steerAsk hands a steering request to the loop and waits until what it
// changed is carried out (its journal records on disk, its lines
// queued): a request is answered only once it has been taken. It returns
// the round an approval or a denial was about.
func (n *Node) steerAsk(op steerOp, req Request) (string, error) {
	r, ok := n.lp.ask(input{kind: inSteer, steer: &steerReq{op: op, req: req}})
	if !ok {
		return "", ErrStopped
	}
	return r.id, r.err
}

// steerRequest carries out a steering request; its answer is an effect
// of the turn, given once the turn's records are on disk. Loop only.
func (d *driver) steerRequest(in *input) {
	if d.lp.closed {
		in.answer(reply{err: ErrStopped})
		return
	}
	id, err := d.steer.request(in.steer)
	if stepErr := d.steerSteps(); err == nil {
		err = stepErr // what the machine said of the request's step
	}
	d.lp.cur.add(effect{kind: effAnswer, reply: in.reply, err: err, id: id})
	in.reply = nil
}

// steerSteps steps what steering handed back (steering.steps), in order,
// until none is left: a step's then may queue more. It returns the
// first error a then returned. Loop only.
func (d *driver) steerSteps() error {
	var first error
	for len(d.steer.steps) > 0 {
		s := d.steer.steps[0]
		d.steer.steps = d.steer.steps[1:]
		ev, then := s.ev, s.then
		if s.announce {
			var ok bool
			if ev, then, ok = d.steer.announceNow(); !ok {
				continue
			}
		}
		err := d.step(ev, nil)
		if then != nil {
			err = then(err)
		} else {
			err = nil // a restored step the machine has no use for now
		}
		if err != nil && first == nil {
			first = err
		}
	}
	d.steer.steps = d.steer.steps[:0]
	return first
}

// request carries out a steering request: the round an approval or a
// denial was about, and the request's error. Loop only.
func (d *steering) request(r *steerReq) (id string, err error) {
	switch req := r.req; r.op {
	case opHold:
		err = d.holdReq(req)
	case opRelease:
		err = d.releaseReq(req)
	case opApprove:
		id, err = d.approveReq(req)
	case opDeny:
		id, err = d.denyReq(req)
	case opPause:
		err = d.pauseReq(req)
	case opResume:
		err = d.resumeReq(req)
	case opCancel:
		err = d.cancelReq(req)
	case opRetry:
		err = d.retryReq(req)
	}
	return id, err
}

// TraceSteer is the trace event of a steering change, here (Origin "")
// or at another node (Origin): Steer says which.
const TraceSteer TraceKind = 64

// chainPause journals the Head's pause line s (pause, or none ending
// one), so that a node restarted while the chain is paused stays paused.
// Loop only.
func (d *steering) chainPause(s protocol.Steer) {
	cp := d.file.ChainPause
	switch {
	case s.What == protocol.SteerPause:
	case cp != nil && cp.Origin == s.Origin:
		// The Head that paused has resumed.
	default:
		return
	}
	old := cp
	if s.What == protocol.SteerPause {
		d.file.ChainPause = &s
	} else {
		d.file.ChainPause = nil
	}
	if err := d.saveSteer(); err != nil {
		d.file.ChainPause = old
		d.log.Error("cannot journal the chain's pause", "err", err.Error())
	}
}

// FaultCancelled is how a state directory records a round cancelled at
// the Head (chainsync journal shows it as the round's fault kind); the
// round's status is StatusCancelled, not a fault.
const FaultCancelled FaultKind = "cancelled"

// CancelledError is the error of a round cancelled at the Head
// (Node.Cancel): StatusCancelled.
type CancelledError struct {
	By     string // who cancelled it ("" unknown)
	Reason string
}

// Error says "cancelled at the Head: REASON (by ann)".
func (e *CancelledError) Error() string {
	s := "cancelled at the Head"
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.By != "" {
		s += " (by " + e.By + ")"
	}
	return s
}

// cancelled notes that round is being cancelled (its abort follows in the
// same step's actions): it is no longer waiting for an approval here, and
// its result is StatusCancelled. Loop only.
func (d *steering) cancelled(round string, ce *CancelledError) {
	if d.stateOf(round) == 0 {
		return // not a round of this node's
	}
	ri := d.book.get(round)
	if ri.finished() {
		return // it ended before the cancel came
	}
	if ri.cause == nil {
		ri.cause, ri.reported = ce, true
		// Written with the turn's records: a restarted node knows the
		// round was cancelled, not faulted.
		d.st.journalFault(journal.Fault{Round: round, Kind: string(FaultCancelled)})
	}
	if _, ok := d.waiting[round]; ok {
		delete(d.waiting, round)
		d.loop.later(input{kind: inAnnounceSteer})
	}
}

// steerResult is res, round's result, as steering made it: a round
// cancelled at the Head ended StatusCancelled, whatever the machine's
// outcome (aborted, or undelivered after this node's task). Loop only.
func (d *steering) steerResult(ri *roundInfo, res Result) Result {
	if res.Status == StatusDone || ri.cause == nil {
		return res
	}
	var ce *CancelledError
	if errors.As(ri.cause, &ce) {
		res.Status, res.Err = StatusCancelled, ce
	}
	return res
}

// Pause, at the Head, opens no new round and holds every node of the
// chain before its next task (a running task finishes) until Resume.
// The chain learns it from a steering line; with Config.StateDir it is
// journalled. Pausing a paused chain, or pausing at another node, is
// refused.
func (n *Node) Pause(req Request) error {
	_, err := n.steerAsk(opPause, req)
	return err
}

// pauseReq is Pause, on the loop.
func (d *steering) pauseReq(req Request) error {
	if d.role.HasPred() {
		return refused("pause is the Head's: this node has a predecessor")
	}
	if h := d.file.Pause; h != nil {
		return refused("the chain is paused already, since %s%s", time.UnixMilli(h.Since).Format("15:04:05"), byText(h.By))
	}
	d.file.Pause = &steerHold{Since: time.Now().UnixMilli(), By: req.By, Reason: req.Reason}
	if err := d.saveSteer(); err != nil {
		d.file.Pause = nil
		return err
	}
	d.resumed = make(chan struct{})
	d.log.Warn("paused: no round opens and no node starts a task until chainsync resume", "by", req.By, "reason", req.Reason)
	d.loop.trace(TraceEvent{Kind: TraceSteer, Steer: "pause", Err: steerWhy(req)})
	d.announceSteer()
	return nil
}

// Resume undoes Pause: rounds open again and every node's tasks start.
func (n *Node) Resume(req Request) error {
	_, err := n.steerAsk(opResume, req)
	return err
}

// resumeReq is Resume, on the loop.
func (d *steering) resumeReq(req Request) error {
	h := d.file.Pause
	if h == nil {
		return refused("the chain is not paused")
	}
	d.file.Pause = nil
	if err := d.saveSteer(); err != nil {
		d.file.Pause = h
		return err
	}
	if d.resumed != nil {
		close(d.resumed)
		d.resumed = nil
	}
	d.log.Warn("resumed: rounds open and tasks start again", "by", req.By, "reason", req.Reason, "paused_since", time.UnixMilli(h.Since).Format(time.RFC3339))
	d.loop.trace(TraceEvent{Kind: TraceSteer, Steer: "resume", Err: steerWhy(req)})
	d.noteEvent(SteerStatus{Node: d.self, Here: true, What: "resume", Since: time.Now(), By: req.By, Reason: req.Reason})
	d.announceSteer()
	return nil
}

// Paused reports whether this node (the Head) paused the chain, and if so
// a channel closed when it resumes.
func (n *Node) Paused() (bool, <-chan struct{}) {
	r, _ := n.lp.ask(input{kind: inPaused})
	return r.ok, r.ch
}

// paused is Paused, on the loop.
func (d *steering) paused() (bool, <-chan struct{}) {
	if d.file.Pause == nil {
		return false, nil
	}
	return true, d.resumed
}

// Cancel, at the Head, ends round req.Round everywhere: no task of it
// starts at a node after the cancel reaches it (the tasks that ran keep
// their results), and it ends StatusCancelled with a *CancelledError. A
// round that is not in flight at the Head is refused.
func (n *Node) Cancel(req Request) error {
	_, err := n.steerAsk(opCancel, req)
	return err
}

// cancelReq is Cancel, on the loop.
func (d *steering) cancelReq(req Request) error {
	if d.role.HasPred() {
		return refused("cancel is the Head's: this node has a predecessor")
	}
	if !req.HasRound {
		return refused("give the round to cancel (--round)")
	}
	switch st := d.stateOf(req.Round); {
	case st == 0:
		return refused("round %s is not in flight here", roundName(req.Round))
	case st.Terminal():
		return refused("round %s is over already (%s)", roundName(req.Round), strings.ToLower(st.String()))
	}
	d.cancelled(req.Round, &CancelledError{By: req.By, Reason: req.Reason})
	d.log.Warn("cancelling the round everywhere", "round", req.Round, "by", req.By, "reason", req.Reason)
	d.hand(d.steerLine(protocol.Steer{Origin: d.self, What: protocol.SteerCancel, HasRound: true, Round: req.Round,
		By: protocol.NoticeName(req.By), Reason: req.Reason}, nil))
	d.announceSteer()
	return nil
}

// retriedNow notes that round was reopened by a retry (the machine reset
// it in a step whose actions are done, which queued this as a follow-up):
// the round has a record of its own again (the old result stays with
// those who waited for it), and if its task had succeeded here that is
// journalled, so that a restarted node passes it on too. Loop only.
func (d *steering) retriedNow(round string) {
	st := d.stateOf(round)
	switch ri := d.book.find(round); {
	case ri != nil && ri.finished() && st != 0 && !st.Terminal():
		d.book.forget(round)
		d.book.get(round)
		// The retry's outcome is its own: the undo wave of the attempt
		// before it is history (the journal keeps it), not this attempt's.
		d.undo.forget(round)
	case ri != nil && !ri.finished():
		// Taken over while the task of the attempt before still runs
		// here (its end holds the retry's task): what ended that
		// attempt elsewhere (a cancel) is not the retry's cause.
		ri.cause, ri.reported, ri.timedOut = nil, false, false
	}
	if !d.view.TaskOK(round) || slices.Contains(d.file.Skip, round) {
		return
	}
	d.file.Skip = append(d.file.Skip, round)
	if k := len(d.file.Skip) - keepApprovals; k > 0 {
		d.file.Skip = slices.Delete(d.file.Skip, 0, k)
	}
	if err := d.saveSteer(); err != nil {
		d.log.Error("cannot journal that the round's task is done here", "round", round, "err", err.Error())
	}
}

// Retry, at the Head, reopens round req.Round, which failed, faulted, was
// denied or cancelled, under its own id: every node whose task for it had
// succeeded passes it on without running it again ("already done here"),
// the node where it failed and those after it run theirs, and it keeps
// its place in each node's order (a later round whose task has not run
// there yet waits for it). A round that ended done is refused ("done
// already"), and so is one in flight or not known here.
func (n *Node) Retry(req Request) error {
	_, err := n.steerAsk(opRetry, req)
	return err
}

// retryReq is Retry, on the loop.
func (d *steering) retryReq(req Request) error {
	if d.role.HasPred() {
		return refused("retry is the Head's: this node has a predecessor")
	}
	if !req.HasRound {
		return refused("give the round to retry")
	}
	switch st := d.stateOf(req.Round); {
	case st == 0:
		return refused("round %s is not known here (never opened, or long forgotten)", roundName(req.Round))
	case !st.Terminal():
		return refused("round %s is still in flight", roundName(req.Round))
	case st == protocol.StateDone:
		return refused("round %s ended done already: there is nothing to retry", roundName(req.Round))
	}
	d.hand(d.steerLine(protocol.Steer{Origin: d.self, What: protocol.SteerRetry, HasRound: true, Round: req.Round,
		By: protocol.NoticeName(req.By), Reason: req.Reason}, func(err error) error {
		switch {
		case errors.Is(err, protocol.ErrUndoUnderWay):
			return refused("round %s's undo wave is still under way: retry it once the wave has ended (chainsync status shows who is undoing)", roundName(req.Round))
		case errors.Is(err, protocol.ErrRoundsInFlight):
			return refused("a round whose task ran at this node is still in flight: retry round %s once it has ended, so that every node places the retry alike", roundName(req.Round))
		}
		d.log.Warn("retrying the round under its own id: the nodes whose task for it succeeded and was not undone pass it on", "round", req.Round, "by", req.By)
		d.loop.later(input{kind: inRetried, round: req.Round}) // retriedNow
		d.announceSteer()
		return nil
	}))
	return nil
}

// steerWhy says who asked and why, for a trace record.
func steerWhy(req Request) error {
	why := "asked" + byText(req.By)
	if req.Reason != "" {
		why += ": " + req.Reason
	}
	return errors.New(why)
}
