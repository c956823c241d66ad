package protocol

import (
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
)

// The undo wave (docs/UNDO.md): when a round fails at a node (its task
// failed, ran past its timeout, or was denied), every node whose task in
// that round had succeeded runs its undo, in reverse chain order. The
// node where the round failed sends UNDO to its predecessor; a node that
// receives UNDO runs its undo and, once it has ended, sends UNDO on to its
// own predecessor, with its name added to the list of nodes that undid.
// The Head ends the wave and sends UNDONE, the outcome, forward along the
// whole chain; an undo that fails ends it where it failed, with an UNDONE
// sent both ways. Every node holds the end of its round (ActDone) until it
// knows the outcome (ActUndone), so that the Head's result and every
// node's log say how the round ended.
//
// Undo is a chain setting: with Config.Undo, the first line a node sends
// on every new connection is "UNDO ON", and a round's message on a
// connection that did not begin with it is a configuration mismatch, as
// is "UNDO ON" at a node without Config.Undo.

// The undo lines: commands apart from the draft's and the other
// extensions'. Valid reports false for them.
const (
	// UndoOn is "UNDO ON": the sender runs with an undo.
	UndoOn Command = 48 + iota
	// UndoLine is "UNDO ...": undo your part of Message.Round; every node
	// after you has undone its part (Message.Undo says who, and why the
	// round failed). It travels backward, successor to predecessor.
	UndoLine
	// UndoEnd is "UNDONE ...": how the undo wave of Message.Round ended
	// (Message.Undo). Each node passes it on away from where it came.
	UndoEnd
)

// undoName spells the undo commands.
func undoName(c Command) (string, bool) {
	switch c {
	case UndoOn:
		return "UNDO ON", true
	case UndoLine:
		return "UNDO", true
	case UndoEnd:
		return "UNDONE", true
	}
	return "", false
}

// IsUndo reports whether c is one of the undo lines.
func (c Command) IsUndo() bool { return c >= UndoOn && c <= UndoEnd }

// EvUndoDone is the event "the undo of Event.Round ended" (UndoDone).
const EvUndoDone EventKind = 128

// The undo actions.
const (
	// ActRunUndo: run this node's undo for Round (Action.Wave says where
	// and why the round failed), then report UndoDone.
	ActRunUndo ActionKind = 128 + iota
	// ActUndone: the undo wave of Round has ended; Action.Wave says how
	// (Wave.Outcome). The round's ActDone follows.
	ActUndone
)

// Failure says why a task failed, for the undo wave: a fault kind (e.g.
// "task-failed", "task-timeout") and the task's exit status (-1: none).
type Failure struct {
	Kind string
	Code int
}

// TaskFailedWhy is TaskDone(round, true) saying why, for the undo wave.
func TaskFailedWhy(round string, why Failure) Event {
	return Event{Kind: EvTaskDone, Round: round, Failed: true, Why: why}
}

// UndoDone is the event "this node's undo for round ended": failed says it
// failed, with exit status code (-1: none, CodeTimeout: it ran past its
// timeout).
func UndoDone(round string, failed bool, code int) Event {
	return Event{Kind: EvUndoDone, Round: round, Failed: failed, Why: Failure{Code: code}}
}

// CodeTimeout, as an exit status, says the task or undo ran past its
// timeout.
const CodeTimeout = -2

// Wave is what the undo lines carry about one round.
type Wave struct {
	Failed string // the node where the round failed (a NoticeName)
	Kind   string // why (a fault kind, like a notice's), CHAINSYNC_FAULT
	Code   int    // the failed task's exit status, -1 none, CodeTimeout
	// Undone: the nodes that undid their part so far, in the order they
	// did (comma separated NoticeNames); UndoneN counts them all, the
	// earliest of them left out of Undone when the line would be too long.
	Undone  string
	UndoneN int
	// UndoEnd only. Stop: the node whose undo failed ("" the wave reached
	// the Head), with its exit status StopCode. Kept: the nodes before
	// Stop, which keep their work, in the order the outcome reached them
	// (KeptN counts them; -1: not known here, this node is at or after
	// Stop).
	Stop     string
	StopCode int
	Kept     string
	KeptN    int
}

// Bounds of the undo lines' fields.
const (
	MaxUndoCount = 99999 // UndoneN and KeptN
	MaxUndoCode  = 255   // an exit status
)

// names splits a comma-separated list.
func names(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Valid reports whether w can travel on an undo line of command c.
func (w Wave) Valid(c Command) bool {
	okName := func(s string) bool { return s != "" && s != "-" && NoticeName(s) == s && !strings.Contains(s, ",") }
	okCode := func(c int) bool { return c == -1 || c == CodeTimeout || c >= 0 && c <= MaxUndoCode }
	okList := func(s string, n int) bool {
		ns := names(s)
		if n < len(ns) || n > MaxUndoCount {
			return false
		}
		for _, x := range ns {
			if !okName(x) {
				return false
			}
		}
		return true
	}
	if !okName(w.Failed) || !(Notice{Kind: w.Kind, Origin: "x"}).Valid() || !okCode(w.Code) || !okList(w.Undone, w.UndoneN) {
		return false
	}
	switch c {
	case UndoLine:
		return w.Stop == "" && w.StopCode == -1 && w.Kept == "" && w.KeptN == 0
	case UndoEnd:
		if w.Stop != "" && !okName(w.Stop) || !okCode(w.StopCode) || w.Stop == "" && w.StopCode != -1 {
			return false
		}
		if w.KeptN == -1 {
			return w.Kept == ""
		}
		return okList(w.Kept, w.KeptN)
	}
	return false
}

// Len is the length of the line of command c (UndoLine, UndoEnd) for
// round that carries w, without its LF; the wire grammar is in
// docs/PROTOCOL.md, "The undo wave".
func (w Wave) Len(c Command, round string) int {
	code := func(c int) int {
		if c < 0 {
			return 1 // "-" or "T"
		}
		return len(strconv.Itoa(c))
	}
	list := func(s string, n int) int {
		if n < 0 {
			return 1
		}
		k := len(strconv.Itoa(n))
		if s != "" {
			k += 1 + len(s)
		}
		return k
	}
	n := len("UNDO") + 2 + len(round) + 1 + len(w.Failed) + 1 + len(w.Kind) + 1 + code(w.Code) + 1 + list(w.Undone, w.UndoneN)
	if c == UndoEnd {
		stop := 1
		if w.Stop != "" {
			stop = len(w.Stop)
		}
		n += len("NE") + 1 + stop + 1 + code(w.StopCode) + 1 + list(w.Kept, w.KeptN)
	}
	return n
}

// maxUndoLine is the wire's limit on a line (wire.MaxLine).
const maxUndoLine = 256

// Fit leaves out the earliest names of w's lists until its line (of
// command c, for round) fits the wire's limit; the counts keep counting
// them.
func (w *Wave) Fit(c Command, round string) {
	for w.Len(c, round) > maxUndoLine {
		switch {
		case w.Kept != "" && (len(w.Kept) >= len(w.Undone)):
			w.Kept = dropFirst(w.Kept)
		case w.Undone != "":
			w.Undone = dropFirst(w.Undone)
		default:
			return // cannot happen: the fixed fields fit
		}
	}
}

func dropFirst(s string) string {
	if _, rest, ok := strings.Cut(s, ","); ok {
		return rest
	}
	return ""
}

func addName(list string, n int, name string) (string, int) {
	if list == "" {
		return name, n + 1
	}
	return list + "," + name, n + 1
}

// String formats w for logs and golden traces.
func (w Wave) String() string { return w.Outcome() }

// Outcome says in words how the round ended, as far as this line says:
// "failed at C (task exited 1); undone by B, A" or "failed at C; undo
// failed at B (exit 2); A not undone".
func (w Wave) Outcome() string {
	s := "failed at " + w.Failed
	if w.Stop == "" {
		s += " (" + failureWords(w.Kind, w.Code) + ")"
	}
	if w.UndoneN > 0 {
		s += "; undone by " + listWords(w.Undone, w.UndoneN)
	} else if w.Stop == "" {
		s += "; nothing to undo"
	}
	if w.Stop != "" {
		s += "; undo failed at " + w.Stop + " (" + codeWords(w.StopCode) + ")"
		switch {
		case w.KeptN > 0:
			s += "; " + listWords(w.Kept, w.KeptN) + " not undone"
		case w.KeptN < 0:
			s += "; the nodes before " + w.Stop + " not undone"
		}
	}
	return s
}

func failureWords(kind string, code int) string {
	switch {
	case kind == KindTaskTimeout || code == CodeTimeout:
		return "task ran past its timeout"
	case kind == KindTaskFailed && code >= 0:
		return "task exited " + strconv.Itoa(code)
	case kind == KindTaskFailed:
		return "task failed"
	case kind == "denied":
		return "task denied"
	}
	return kind
}

func codeWords(code int) string {
	switch {
	case code == CodeTimeout:
		return "ran past its timeout"
	case code >= 0:
		return "exit " + strconv.Itoa(code)
	}
	return "failed"
}

func listWords(s string, n int) string {
	ns := names(s)
	w := strings.Join(ns, ", ")
	if more := n - len(ns); more > 0 {
		if w == "" {
			return fmt.Sprintf("%d nodes", more)
		}
		return fmt.Sprintf("%d more, %s", more, w)
	}
	return w
}

// UndoPhase is where a round's undo stands at one node.
type UndoPhase uint8

// The undo phases.
const (
	PhaseNone    UndoPhase = iota // the round has not failed (or undo is off)
	PhaseAwait                    // the round failed; this node's task had succeeded: its undo waits for UNDO from the successor
	PhaseRunning                  // this node's undo runs (ActRunUndo)
	PhaseDone                     // this node's undo ended; UNDO went on to the predecessor
	PhaseFailed                   // this node's undo failed: the wave stopped here
	PhaseNothing                  // the round failed; this node has nothing to undo (its task did not succeed)
	PhaseKept                     // the wave stopped before it reached this node: its work stays
)

var undoPhaseNames = [...]string{"none", "awaiting", "running", "done", "failed", "nothing", "kept"}

// String names the phase, e.g. "running".
func (p UndoPhase) String() string {
	if int(p) < len(undoPhaseNames) {
		return undoPhaseNames[p]
	}
	return "UndoPhase(?)"
}

// UndoRecord is everything durable about one round's undo at one node
// (Record.Undo).
type UndoRecord struct {
	Phase UndoPhase
	Wave  Wave // what this node knows of the wave
	// Ended: the outcome is known here (ActUndone was reported).
	Ended bool
	// Held: the round's outcome, withheld (no ActDone) until Ended; 0:
	// none is withheld.
	Held Outcome
	// The last undo line sent to each neighbour (UndoLine, UndoEnd; 0:
	// none), re-sent when a link comes back.
	SentPred, SentSucc Command
}

// undoWave is the machine's part that runs the undo wave: whether each
// current connection began with UNDO ON, and the failure of the task
// being reported. A round's own undo state is its UndoRecord; the
// machine hands the round in, and the part says what follows (an
// undoVerdict) for the machine to apply.
type undoWave struct {
	on   bool   // Config.Undo
	role Role   //
	self string // this node's name in the undo lines
	// heard, per Side: the current connection began with UNDO ON.
	heard [3]bool
	// The failure of the task being reported (EvTaskDone), set for the
	// step: the wave's to say why.
	why    Failure
	whySet bool
}

func newUndoWave(cfg *Config) undoWave {
	self := cfg.Role.String()
	if cfg.Name != "" {
		self = strings.ReplaceAll(NoticeName(cfg.Name), ",", "_")
	}
	return undoWave{on: cfg.Undo, role: cfg.Role, self: self}
}

// undoVerdict is what an undo line means for its round, for the machine
// to apply.
type undoVerdict uint8

const (
	undoNothing undoVerdict = iota // nothing more
	undoRun                        // run this node's undo (the round ends here first, held)
	undoOver                       // the wave's outcome is known here (Machine.undoEnd)
)

// msg is the undo line c of r to side to.
func (u *undoWave) msg(r *round, c Command, to Side) Message {
	w := r.ext().undo.Wave
	switch {
	case c == UndoLine:
		w.Stop, w.StopCode, w.Kept, w.KeptN = "", -1, "", 0
	case r.ext().undo.Phase == PhaseFailed && to == Pred:
		w.Kept, w.KeptN = "", 0 // the nodes before it add themselves
	}
	w.Fit(c, r.id)
	return Message{Cmd: c, Round: r.id, Undo: &w}
}

// send sends the undo line c of r to side, if the node has that
// neighbour, and remembers it for re-sends.
func (u *undoWave) send(r *round, c Command, to Side, out []Action) []Action {
	if !hasSide(u.role, to) {
		return out
	}
	if to == Pred {
		r.own().undo.SentPred = c
	} else {
		r.own().undo.SentSucc = c
	}
	return append(out, Action{Kind: ActSend, To: to, Msg: u.msg(r, c, to)})
}

// linkUp: with Config.Undo the first line on a new connection says so,
// and the undo lines of rounds sent that way are sent again. Called
// first by Machine.linkUp.
func (u *undoWave) linkUp(side Side, rounds iter.Seq2[string, *round], out []Action) []Action {
	if !u.on {
		return out
	}
	u.heard[side] = false
	out = append(out, Action{Kind: ActSend, To: side, Msg: Message{Cmd: UndoOn}})
	var rs []*round
	for _, r := range rounds {
		if side == Pred && r.ext().undo.SentPred != 0 || side == Succ && r.ext().undo.SentSucc != 0 {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *round) int { return strings.Compare(a.id, b.id) })
	for _, r := range rs {
		c := r.ext().undo.SentSucc
		if side == Pred {
			c = r.ext().undo.SentPred
		}
		out = append(out, Action{Kind: ActSend, To: side, Msg: u.msg(r, c, side), Resend: true})
	}
	return out
}

// gate is the check of every round message from side: with Config.Undo,
// its connection must have begun with UNDO ON.
func (u *undoWave) gate(from Side, msg Message) error {
	if !u.on || u.heard[from] {
		return nil
	}
	return &Violation{From: from, Msg: msg, Reason: "the " + sideName(from) + " runs without --undo (its connection did not begin with UNDO ON); this node runs with it",
		Mismatch: true, Setting: "undo"}
}

func sideName(s Side) string {
	if s == Pred {
		return "predecessor"
	}
	return "successor"
}

// recv takes an undo line from side from; r is its round here (nil if
// unknown).
func (u *undoWave) recv(from Side, msg Message, r *round, out []Action) ([]Action, undoVerdict, error) {
	bad := func(reason string) ([]Action, undoVerdict, error) {
		return out, undoNothing, &Violation{From: from, Msg: msg, Reason: reason}
	}
	if !u.on {
		return out, undoNothing, &Violation{From: from, Msg: msg, Reason: "the " + sideName(from) + " runs with --undo (it sent " + msg.Cmd.String() + "); this node runs without it",
			Mismatch: true, Setting: "undo"}
	}
	if msg.Cmd == UndoOn {
		u.heard[from] = true
		return out, undoNothing, nil
	}
	if msg.Undo == nil || !msg.Undo.Valid(msg.Cmd) || !ValidRound(msg.Round) {
		return bad("malformed undo line")
	}
	if err := u.gate(from, msg); err != nil {
		return out, undoNothing, err
	}
	if msg.Cmd == UndoLine {
		switch {
		case from != Succ:
			return bad("UNDO travels backward; the predecessor must not send it")
		case r == nil:
			return bad("UNDO for a round this node has not seen")
		case !r.ran || r.state == StateDone:
			return bad("UNDO for a round whose task did not succeed here, or that is done here")
		}
		switch r.ext().undo.Phase {
		case PhaseRunning, PhaseDone, PhaseFailed, PhaseKept:
			return out, undoNothing, nil // a re-send
		}
		if r.ext().undo.Ended {
			return out, undoNothing, nil
		}
		r.own().undo.Phase, r.own().undo.Wave = PhaseRunning, *msg.Undo
		return out, undoRun, nil
	}
	// UNDONE: pass it on, once.
	to := other(from)
	if r == nil {
		if hasSide(u.role, to) {
			out = append(out, Action{Kind: ActSend, To: to, Msg: msg})
		}
		return out, undoNothing, nil
	}
	if r.ext().undo.Ended {
		return out, undoNothing, nil
	}
	r.own().undo.Wave = *msg.Undo
	switch {
	case r.ext().undo.Phase == PhaseAwait || r.ext().undo.Phase == PhaseNone && r.ran && from == Succ:
		r.own().undo.Phase = PhaseKept
		r.own().undo.Wave.Kept, r.own().undo.Wave.KeptN = addName(r.own().undo.Wave.Kept, r.own().undo.Wave.KeptN, u.self)
	case r.ext().undo.Phase == PhaseNone:
		r.own().undo.Phase = PhaseNothing
	}
	return u.send(r, UndoEnd, to, out), undoOver, nil
}

// ended takes the end of this node's undo of r (nil: unknown): undoOver
// if the wave's outcome is known here now.
func (u *undoWave) ended(r *round, failed bool, code int, out []Action) ([]Action, undoVerdict, error) {
	if r == nil || r.ext().undo.Phase != PhaseRunning {
		return out, undoNothing, ErrNoUndo
	}
	w := &r.own().undo.Wave
	if failed {
		r.own().undo.Phase = PhaseFailed
		w.Stop, w.StopCode, w.Kept, w.KeptN = u.self, code, "", -1
		if !u.role.HasPred() {
			w.KeptN = 0
		}
		out = u.send(r, UndoEnd, Succ, out)
		return u.send(r, UndoEnd, Pred, out), undoOver, nil
	}
	r.own().undo.Phase = PhaseDone
	w.Undone, w.UndoneN = addName(w.Undone, w.UndoneN, u.self)
	if u.role.HasPred() {
		return u.send(r, UndoLine, Pred, out), undoNothing, nil
	}
	return u.send(r, UndoEnd, Succ, out), undoOver, nil // the Head: the wave is over
}

// undoEnd reports the outcome of r's wave here and ends the round:
// aborted if it was still in progress, else with the outcome withheld.
// An undo that failed is a fault everywhere: under PolicyHalt it ends
// every other unfinished round here too.
func (m *Machine) undoEnd(r *round, out []Action) []Action {
	r.own().undo.Ended = true
	out = append(out, Action{Kind: ActUndone, Round: r.id, Wave: r.ext().undo.Wave})
	switch {
	case !r.state.Terminal():
		out = m.abortRound(r, out)
	case r.ext().undo.Held != 0:
		o := r.ext().undo.Held
		r.own().undo.Held = 0
		out = m.finish(r, o, out)
	}
	if r.ext().undo.Wave.Stop != "" && m.cfg.Policy == PolicyHalt {
		out = m.abortAll(out)
	}
	return out
}

// ErrNoUndo is an UndoDone for a round whose undo is not running.
var ErrNoUndo = fmt.Errorf("chainsync: no undo is running for this round")

// finish is Machine.finish's hook: with Config.Undo a round that fails
// here starts the wave (a failed task, or a denial), and a failed round's
// end is withheld until the wave's outcome is known. held: the round
// must not end now.
//
// A round the wave ends after this node's COMPLETE went on ends Aborted,
// not NoExitWave: the wave says what happened beyond this node.
func (u *undoWave) finish(r *round, op *Outcome, out []Action) ([]Action, bool) {
	o := *op
	if !u.on || o == Done || o == NotDelivered {
		return out, false
	}
	defer func() {
		if *op == NoExitWave && r.ext().undo.Phase != PhaseNone {
			*op = Aborted
			if r.ext().undo.Held == NoExitWave {
				r.own().undo.Held = Aborted
			}
		}
	}()
	if o == TaskFailed && r.ext().undo.Phase == PhaseNone {
		why := u.why
		if why.Kind == "" {
			why = Failure{Kind: KindTaskFailed, Code: -1}
			if !u.whySet {
				why.Kind = "denied" // not a task's end: a denial
			}
		}
		r.own().undo.Phase = PhaseNothing
		r.own().undo.Wave = Wave{Failed: u.self, Kind: why.Kind, Code: why.Code, StopCode: -1}
		if u.role.HasPred() {
			out = u.send(r, UndoLine, Pred, out)
		} else {
			r.own().undo.Wave.KeptN = 0
			out = u.send(r, UndoEnd, Succ, out)
			r.own().undo.Ended = true
			out = append(out, Action{Kind: ActUndone, Round: r.id, Wave: r.ext().undo.Wave})
		}
	}
	if r.ext().undo.Phase == PhaseNone || r.ext().undo.Ended {
		return out, false
	}
	r.own().undo.Held = o
	return out, true
}

// noticed is the notice's hook: with Config.Undo a round r that a
// neighbour's failed task ends here (notice n) waits for the wave: to
// undo this node's part if its task had succeeded, or only for the
// outcome.
func (u *undoWave) noticed(n *Notice, r *round) {
	if !u.on || !n.HasRound || n.Kind != KindTaskFailed && n.Kind != KindTaskTimeout && n.Kind != "denied" {
		return
	}
	if r == nil || r.state.Terminal() || r.ext().undo.Phase != PhaseNone {
		return
	}
	r.own().undo.Phase = PhaseNothing
	if r.ran {
		r.own().undo.Phase = PhaseAwait
	}
	r.own().undo.Wave = Wave{Failed: n.Origin, Kind: n.Kind, Code: -1, StopCode: -1}
}

// settled reports whether r lets a later round's task run here
// (Config.Ordered): without undo once r's task ran here or r ended; with
// it once r is done here, or ended with no undo of this node's to come.
func (r *round) settled(undo bool) bool {
	if !undo {
		return r.state >= StateComplete
	}
	switch {
	case r.state == StateDone:
		return true
	case !r.state.Terminal():
		return false
	}
	return r.ext().undo.Phase != PhaseAwait && r.ext().undo.Phase != PhaseRunning
}

// Undo returns where round's undo stands here, and what this node knows
// of its wave (a read-only view for status reports).
func (m *Machine) Undo(round string) (UndoPhase, Wave, bool) {
	r := m.rounds.Get(round)
	if r == nil {
		return 0, Wave{}, false
	}
	return r.ext().undo.Phase, r.ext().undo.Wave, true
}
