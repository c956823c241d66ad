package protocol

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/chainsync-go/chainsync/internal/hot"
)

// Receipts (docs/RECEIPTS.md): with Config.Receipts, every node signs one
// receipt per round, its signed account of its part there, bound to its
// predecessor's receipt by that receipt's digest. The machine decides
// when a node signs and what the receipt must say (ActSignReceipt), and
// carries the receipts: the signer's digest forward (RDIGEST), so that the
// successor's receipt binds it, and every receipt backward, so that the
// Head ends the round holding the receipts of every node. The envelopes
// are opaque here: the driver builds, signs and parses them.
//
// When a node signs:
//
//   - Without undo, a task that succeeded (or was skipped as already
//     done) settles the node's part at once: the node signs then, and
//     the COMPLETE that lets the successor's task start waits for the
//     signature; RDIGEST goes before it on the same link.
//   - Every other outcome (a failed or timed-out task, a denial, a round
//     that ended here before its task started, and with undo every
//     outcome) settles when the round is over here (ActDone).
//   - Either way, a node that is not the Head signs only once it holds
//     its predecessor's digest. So with undo the receipts are signed
//     after the round, Head first, and a node that the round never
//     reached signs "not-reached" binding its predecessor's receipt.
//
// What the receipts' travel adds to a round:
//
//   - A node sends its own receipt to its predecessor as soon as it has
//     signed it, and passes on each receipt its successor sends, in the
//     chain's order: own first, then those of the nodes after it. Each
//     is journalled (ActSave) before it is sent on.
//   - A COMPLETE from the predecessor before its RDIGEST is a violation
//     (without undo): no task starts before the digest it must bind.
//   - A link that comes up carries again, before the round lines, this
//     node's digest (to the successor, until the receipts of every node
//     after this one are here) and the receipts not yet handed to the
//     predecessor (ReceiptHanded). A digest that comes again is such a
//     re-send: its receiver sends back again every receipt it holds of
//     the round, since a receipt handed to a connection that then broke
//     may be lost.
//   - ActReceipts says a node holds its own receipt and those of every
//     node after it: at the Head, the round's whole bundle. It is
//     independent of the round's ActDone, which it may follow: the round
//     ends as it always did, and its receipts settle after it. The
//     machine keeps a round's receipts as long as it keeps the round
//     (Config.KeepFinished): the bounded wait for late receipts is the
//     driver's.

// The receipt lines, extension lines of a chain with receipts on. Their
// values are apart from the other commands'.
const (
	// RDigestLine: Msg.Receipt.Node's receipt for Msg.Round has the
	// digest Msg.Receipt.Digest (forward only).
	RDigestLine Command = 56 + iota
	// ReceiptLine: Msg.Receipt.Node's receipt for Msg.Round, whole
	// (Envelope; backward only). On the wire it is cut into RECEIPT
	// lines; the driver puts them together and computes the digest.
	ReceiptLine
)

// ReceiptNote is what a receipt line carries: whose receipt, its digest
// (SHA-256 of its payload as signed, 64 lower-case hex digits) and, for a
// ReceiptLine, the envelope itself as signed (one line of printable
// ASCII).
type ReceiptNote struct {
	Node     string
	Digest   string
	Envelope string
}

// String formats n for logs: "B 95077ed1c863".
func (n ReceiptNote) String() string {
	return n.Node + " " + n.Digest[:min(12, len(n.Digest))]
}

// ReceiptOutcome is what became of a node's part in a round, spelled as
// the receipt's predicate spells it.
type ReceiptOutcome string

// The outcomes a receipt may state.
const (
	ReceiptRanOK      ReceiptOutcome = "ran-ok"
	ReceiptFailed     ReceiptOutcome = "failed"
	ReceiptTimedOut   ReceiptOutcome = "timed-out"
	ReceiptDenied     ReceiptOutcome = "denied"
	ReceiptSkipped    ReceiptOutcome = "skipped-already-done"
	ReceiptUndone     ReceiptOutcome = "undone"
	ReceiptUndoFailed ReceiptOutcome = "undo-failed"
	ReceiptNotReached ReceiptOutcome = "not-reached"
)

// ReceiptOrder is what ActSignReceipt asks the driver to sign: this
// node's receipt for the round, attempt Attempt (1, then one more per
// retry), saying Outcome (with Status, the exit status of a failed task
// or of a failed undo, -1 if none is known), binding Pred (the
// predecessor's receipt digest, "" at the Head). The rest of the receipt
// (the chain, the settings, the times, the decisions) is the driver's.
type ReceiptOrder struct {
	Attempt int
	Outcome ReceiptOutcome
	Status  int
	Pred    string
}

// The receipt events and actions. Their values are apart from the
// machine's others.
const (
	// EvReceiptSigned: this node's receipt for Round was signed, as
	// ActSignReceipt asked (ReceiptSigned).
	EvReceiptSigned EventKind = 160 + iota
	// EvReceiptHanded: the receipt of Msg.Receipt.Node for Round, sent to
	// the predecessor, was handed to a live connection (ReceiptHanded).
	EvReceiptHanded
)

// The receipt actions.
const (
	// ActSignReceipt: sign this node's receipt for Round as Sign says,
	// then report ReceiptSigned. Once per round and attempt: the machine
	// never asks again for a receipt it holds, even after a restart.
	ActSignReceipt ActionKind = 160 + iota
	// ActReceipts: this node holds its own receipt for Round and those of
	// every node after it (at the Head, every node's): Machine.Receipts
	// returns them, for the bundle. Once per round (again after a
	// restart).
	ActReceipts
)

// ReceiptSigned is the event "this node's receipt for round was signed:
// env is its envelope, as it will be kept and sent, and digest the
// SHA-256 (lower-case hex) of its payload".
func ReceiptSigned(round, env, digest string) Event {
	return Event{Kind: EvReceiptSigned, Round: round,
		Msg: Message{Cmd: ReceiptLine, Round: round, Receipt: &ReceiptNote{Digest: digest, Envelope: env}}}
}

// ReceiptHanded is the event "node's receipt for round, sent to the
// predecessor, was handed to a live connection": a link that comes up
// later does not carry it again.
func ReceiptHanded(round, node string) Event {
	return Event{Kind: EvReceiptHanded, Round: round,
		Msg: Message{Cmd: ReceiptLine, Round: round, Receipt: &ReceiptNote{Node: node}}}
}

// ReceiptRecord is everything durable about a round's receipts at one
// node (Record.Receipt). It is comparable, as Record is.
type ReceiptRecord struct {
	// Outcome is this node's part as settled ("": not yet); Status the
	// exit status that goes with it (-1: none).
	Outcome ReceiptOutcome
	Status  int
	// Pred is the predecessor's receipt digest, once it arrived.
	Pred string
	// Digest and Envelope are this node's signed receipt ("": not signed
	// yet): sent as they are, never signed again.
	Digest, Envelope string
	// After holds the receipts received of the nodes after this one, in
	// chain order, each "NODE DIGEST ENVELOPE" and an LF.
	After string
	// Handed counts the receipts (this node's first, then After's) handed
	// to the predecessor (ReceiptHanded).
	Handed int
}

// receipts is a round's receipt state: its record and what is not
// durable (asked to sign, sent on the current link, complete reported).
type receipts struct {
	ReceiptRecord
	asked    bool // ActSignReceipt was asked since the outcome settled
	sent     int  // receipts sent to the predecessor on its current link
	complete bool // ActReceipts was reported
	why      Failure
	denied   bool
	skipped  bool
}

// rcpt returns r's receipt state, made on first use: a round of a chain
// without receipts carries none.
func (r *round) rcpt() *receipts {
	if r.rc == nil {
		r.rc = new(receipts)
	}
	return r.rc
}

// receiptRecord is r's receipt record for the journal (zero: none).
func (r *round) receiptRecord() ReceiptRecord {
	if r.rc == nil {
		return ReceiptRecord{}
	}
	return r.rc.ReceiptRecord
}

// restoredReceipts is the receipt state of a round restored with rec
// (nil if rec is empty).
func restoredReceipts(rec ReceiptRecord) *receipts {
	if rec == (ReceiptRecord{}) {
		return nil
	}
	return &receipts{ReceiptRecord: rec}
}

// held is one receipt of After.
type held struct{ node, digest, env string }

func (rr *ReceiptRecord) after() []held {
	var hs []held
	for line := range strings.Lines(rr.After) {
		node, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		digest, env, _ := strings.Cut(rest, " ")
		hs = append(hs, held{node, digest, env})
	}
	return hs
}

// place is this node's index in Config.Chain, -1 if it is not there.
func (rb *receiptBook) place() int { return slices.Index(rb.cfg.Chain, rb.cfg.Name) }

// receiptsOn reports whether this node runs receipts: Config.Receipts,
// with its name in Config.Chain.
func (rb *receiptBook) receiptsOn() bool { return rb.cfg.Receipts && rb.place() >= 0 }

// held returns the receipts this node holds for round: its own first
// (if signed), then those of the nodes after it, in chain order.
func (rb *receiptBook) held(round string) []ReceiptNote {
	r := rb.rounds.Get(round)
	if r == nil || r.rcpt().Envelope == "" {
		return nil
	}
	ns := []ReceiptNote{{Node: rb.cfg.Name, Digest: r.rcpt().Digest, Envelope: r.rcpt().Envelope}}
	for _, h := range r.rcpt().after() {
		ns = append(ns, ReceiptNote{Node: h.node, Digest: h.digest, Envelope: h.env})
	}
	return ns
}

// ReceiptsToSign appends the ActSignReceipt of every restored round whose
// outcome settled before the restart but whose receipt was not signed
// yet: a restarted node's driver carries them out after Restore.
func (rb *receiptBook) toSign(out []Action) []Action {
	if !rb.receiptsOn() {
		return out
	}
	rs := make([]*round, 0, rb.rounds.Len())
	for _, r := range rb.rounds.All() {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, bySeq)
	for _, r := range rs {
		out = rb.askSign(r, out)
	}
	return out
}

func bySeq(a, b *round) int {
	if a.seq != b.seq {
		if a.seq < b.seq {
			return -1
		}
		return 1
	}
	return strings.Compare(a.id, b.id)
}

// passOn is what a node does when its task succeeded (or was skipped as
// done before a retry) and the round goes on: COMPLETE to the successor,
// or at the Tail the exit wave begins. Without undo, with receipts, the
// node signs first, and the COMPLETE (or the Tail's exit wave) waits for
// the signature: receiptSigned sends it, after the digest.
func (rb *receiptBook) passOn(r *round, o ReceiptOutcome, out []Action) []Action {
	if rb.receiptsOn() && !rb.cfg.Undo {
		if r.rcpt().Outcome == "" {
			r.rcpt().Outcome, r.rcpt().Status = o, -1
		}
		if out = rb.askSign(r, out); r.rcpt().Envelope == "" {
			return out
		}
	}
	if !rb.cfg.Role.HasSucc() {
		r.exitRecv = true // the Tail starts the exit wave itself
		return out
	}
	return r.send(Succ, Complete, out) // triggers the successor's task
}

// askSign asks for r's receipt once its outcome settled and, but at the
// Head, its predecessor's digest is here.
func (rb *receiptBook) askSign(r *round, out []Action) []Action {
	rc := r.rcpt()
	if rc.Outcome == "" || rc.Envelope != "" || rc.asked || rb.place() > 0 && rc.Pred == "" {
		return out
	}
	rc.asked = true
	return append(out, Action{Kind: ActSignReceipt, Round: r.id,
		Sign: &ReceiptOrder{Attempt: r.retries + 1, Outcome: rc.Outcome, Status: rc.Status, Pred: rc.Pred}})
}

// receiptsStep settles the outcome of the rounds the step ended here
// (their ActDone among acts), and of a task that ended after its round
// did, and asks for their receipts.
func (rb *receiptBook) receiptsStep(ev Event, acts []Action, out []Action) []Action {
	if r := rb.rounds.Get(ev.Round); r != nil {
		switch ev.Kind {
		case EvTaskDone:
			r.rcpt().why = Failure{Code: -1}
			if ev.Failed {
				r.rcpt().why = ev.Why
				if ev.Why.Kind == "" {
					r.rcpt().why.Kind = KindTaskFailed
				}
			}
			if r.over && r.rcpt().Outcome == "" && r.started {
				// The round ended while its task ran: the task's end
				// settles what this node did.
				out = rb.settle(r, out)
			}
		case EvDeny:
			r.rcpt().denied = true
		case EvAlreadyDone:
			r.rcpt().skipped = true
		}
	}
	for i := range acts {
		if a := acts[i]; a.Kind == ActDone {
			if r := rb.rounds.Get(a.Round); r != nil && r.rcpt().Outcome == "" && !r.taskOpen {
				out = rb.settle(r, out)
			}
		}
	}
	return out
}

// settle fixes the outcome of r, over at this node, and asks for its
// receipt.
func (rb *receiptBook) settle(r *round, out []Action) []Action {
	rc := r.rcpt()
	rc.Status = -1
	switch {
	case r.ext().undo.Phase == PhaseDone:
		rc.Outcome = ReceiptUndone
	case r.ext().undo.Phase == PhaseFailed:
		rc.Outcome = ReceiptUndoFailed
		if c := r.ext().undo.Wave.StopCode; c >= 0 { // set by this node's failed undo
			rc.Status = c // the undo's exit status (none if it timed out)
		}
	case rc.denied:
		rc.Outcome = ReceiptDenied
	case r.started && rc.why.Kind == KindTaskTimeout:
		rc.Outcome = ReceiptTimedOut
	case r.started && rc.why.Kind != "":
		rc.Outcome, rc.Status = ReceiptFailed, rc.why.Code
	case rc.skipped || r.taskOK && r.ran:
		rc.Outcome = ReceiptSkipped
	case r.started || r.ran:
		rc.Outcome = ReceiptRanOK
	default:
		rc.Outcome = ReceiptNotReached
	}
	rb.moved.add(r)
	return rb.askSign(r, out)
}

// receiptSigned takes this node's signed receipt: it is kept (saved with
// the step, before anything is sent), its digest goes forward, then the
// COMPLETE it held back, and it goes backward.
func (rb *receiptBook) receiptSigned(ev Event, out []Action) ([]Action, error) {
	r := rb.rounds.Get(ev.Round)
	n := ev.Msg.Receipt
	switch {
	case !rb.receiptsOn():
		return out, ErrNoReceipts
	case r == nil || n == nil || !r.rcpt().asked || r.rcpt().Envelope != "":
		return out, ErrNotAsked
	case !validDigest(n.Digest) || !validEnvelope(n.Envelope):
		return out, ErrBadReceipt
	}
	r.rcpt().Digest, r.rcpt().Envelope = n.Digest, n.Envelope
	// The task succeeded and the round went on held for this receipt
	// (passOn), unless it ended meanwhile.
	held := r.state == StateComplete && !rb.cfg.Undo
	if rb.cfg.Role.HasSucc() {
		out = append(out, Action{Kind: ActSend, To: Succ, Msg: rb.digestMsg(r)})
		if held && r.lastSucc < Complete {
			out = r.send(Succ, Complete, out) // triggers the successor's task
		}
	}
	out = rb.receiptsOnward(r, out)
	if held && !rb.cfg.Role.HasSucc() && !r.exitRecv {
		r.exitRecv = true // the Tail starts the exit wave, after its receipt
		out = rb.advance(r, out)
	}
	return out, nil
}

func (rb *receiptBook) digestMsg(r *round) Message {
	return Message{Cmd: RDigestLine, Round: r.id, Receipt: &ReceiptNote{Node: rb.cfg.Name, Digest: r.rcpt().Digest}}
}

// receiptsOnward sends the predecessor the receipts not sent on its
// current link (once this node's own is signed), and reports ActReceipts
// when every receipt this node must hold is here.
func (rb *receiptBook) receiptsOnward(r *round, out []Action) []Action {
	rc := r.rcpt()
	if rc.Envelope == "" {
		return out
	}
	hs := rc.after()
	if rb.cfg.Role.HasPred() {
		all := append([]held{{rb.cfg.Name, rc.Digest, rc.Envelope}}, hs...)
		for _, h := range all[rc.sent:] {
			out = append(out, Action{Kind: ActSend, To: Pred,
				Msg: Message{Cmd: ReceiptLine, Round: r.id, Receipt: &ReceiptNote{Node: h.node, Digest: h.digest, Envelope: h.env}}})
		}
		rc.sent = len(all)
	}
	if !rc.complete && len(hs) == rb.needed() {
		rc.complete = true
		out = append(out, Action{Kind: ActReceipts, Round: r.id})
	}
	return out
}

// needed is how many receipts of the nodes after this one it must hold.
func (rb *receiptBook) needed() int { return len(rb.cfg.Chain) - rb.place() - 1 }

// resendBack sends the predecessor again the receipts from the from-th
// (this node's is the 0th).
func (rb *receiptBook) resendBack(r *round, from int, out []Action) []Action {
	if !rb.cfg.Role.HasPred() {
		return out
	}
	r.rcpt().sent = min(from, r.rcpt().sent)
	k := len(out)
	out = rb.receiptsOnward(r, out)
	for i := k; i < len(out); i++ {
		out[i].Resend = out[i].Kind == ActSend
	}
	return out
}

// receiptRecv takes a receipt line from a neighbour.
func (rb *receiptBook) receiptRecv(from Side, msg Message, out []Action) ([]Action, error) {
	bad := func(why string) ([]Action, error) {
		return out, &Violation{From: from, Msg: msg, Reason: why}
	}
	if !rb.receiptsOn() {
		return out, &Violation{From: from, Msg: msg, Reason: "a receipt line at a node without receipts", Mismatch: true, Setting: "receipts"}
	}
	n := msg.Receipt
	if n == nil || !ValidRound(msg.Round) || !validDigest(n.Digest) || msg.Cmd == ReceiptLine && !validEnvelope(n.Envelope) {
		return bad("malformed receipt line")
	}
	p := rb.place()
	r := rb.rounds.Get(msg.Round)
	if msg.Cmd == RDigestLine {
		switch {
		case from != Pred:
			return bad("RDIGEST travels forward; the successor must not send it")
		case n.Node != rb.cfg.Chain[p-1]:
			return bad("RDIGEST of " + n.Node + ", not of the predecessor " + rb.cfg.Chain[p-1])
		case r != nil && r.rcpt().Pred != "" && r.rcpt().Pred != n.Digest:
			return bad("a second, different receipt digest of the predecessor")
		case r != nil && r.rcpt().Pred != "":
			// A re-send: the predecessor's link came back and it lacks
			// receipts of this node or after it. Send them again.
			return rb.resendBack(r, 0, out), nil
		}
		if r == nil {
			// The round ended before it reached this node: it ends here
			// too, and this node signs "not-reached".
			if *rb.active >= rb.cfg.MaxRounds {
				return bad("too many concurrent rounds (limit " + strconv.Itoa(rb.cfg.MaxRounds) + ")")
			}
			r, out = rb.open(msg.Round, Pred, out)
			out = rb.abortRound(r, out)
		}
		r.rcpt().Pred = n.Digest
		return rb.askSign(r, out), nil
	}
	if from != Succ {
		return bad("RECEIPT travels backward; the predecessor must not send it")
	}
	if r == nil {
		return out, nil // a late re-send of a round this node no longer keeps
	}
	hs := r.rcpt().after()
	if i := slices.Index(rb.cfg.Chain[p+1:], n.Node); i >= 0 && i < len(hs) {
		if hs[i].digest != n.Digest {
			return bad("a second, different receipt of " + n.Node)
		}
		return out, nil // a re-send
	}
	if k := p + 1 + len(hs); k >= len(rb.cfg.Chain) || rb.cfg.Chain[k] != n.Node {
		return bad("a receipt of " + n.Node + " out of the chain's order")
	}
	r.rcpt().After += n.Node + " " + n.Digest + " " + n.Envelope + "\n"
	return rb.receiptsOnward(r, out), nil
}

// receiptHanded takes the driver's word that a receipt sent to the
// predecessor was handed to a live connection.
func (rb *receiptBook) receiptHanded(ev Event, out []Action) ([]Action, error) {
	r := rb.rounds.Get(ev.Round)
	if !rb.receiptsOn() || r == nil || ev.Msg.Receipt == nil {
		return out, ErrNotAsked
	}
	k := 0
	if node := ev.Msg.Receipt.Node; node != rb.cfg.Name {
		i := slices.Index(rb.cfg.Chain, node)
		k = i - rb.place()
		if i < 0 || k <= 0 {
			return out, ErrNotAsked
		}
	}
	r.rcpt().Handed = max(r.rcpt().Handed, k+1)
	return out, nil
}

// receiptResends is what a link that comes up carries again first: to
// the successor, this node's digest while its receipt is not here; to the
// predecessor, the receipts not handed to it yet.
func (rb *receiptBook) receiptResends(side Side, out []Action) []Action {
	if !rb.receiptsOn() {
		return out
	}
	rs := make([]*round, 0, rb.rounds.Len())
	for _, r := range rb.rounds.All() {
		if r.rcpt().Envelope != "" {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, bySeq)
	for _, r := range rs {
		switch side {
		case Succ:
			if len(r.rcpt().after()) < rb.needed() {
				a := Action{Kind: ActSend, To: Succ, Msg: rb.digestMsg(r), Resend: true}
				out = append(out, a)
			}
		case Pred:
			out = rb.resendBack(r, r.rcpt().Handed, out)
		}
	}
	return out
}

// digestKnown reports whether a COMPLETE from the predecessor may start
// r's task: without receipts or with undo, always; otherwise once the
// predecessor's digest is here.
func (rb *receiptBook) digestKnown(r *round) bool {
	return !rb.receiptsOn() || rb.cfg.Undo || r.rcpt().Pred != ""
}

func validDigest(d string) bool {
	if len(d) != 64 {
		return false
	}
	for i := 0; i < len(d); i++ {
		if c := d[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// MaxReceiptEnvelope is the longest envelope a receipt line carries.
const MaxReceiptEnvelope = 16 << 10

func validEnvelope(e string) bool {
	if len(e) == 0 || len(e) > MaxReceiptEnvelope {
		return false
	}
	for i := 0; i < len(e); i++ {
		if c := e[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// Errors of the receipt events.
var (
	ErrNoReceipts = errors.New("chainsync: receipts are off at this node")
	ErrNotAsked   = errors.New("chainsync: no receipt of this round was asked for, or it is signed already")
	ErrBadReceipt = errors.New("chainsync: a receipt needs a 64-hex digest and an envelope of printable ASCII")
)

// receiptBook is the machine's part for receipts (Config.Receipts): which
// node signs when, the digests forward, the receipts back, their
// re-sends. It reads the machine's configuration and rounds; what it
// does to a round beyond its receipts (open it, abort it, advance it,
// mark it moved for the step's saves) it does through what New hands it.
type receiptBook struct {
	cfg        *Config
	rounds     *hot.Table[*round]
	active     *int   // the machine's count of unfinished rounds
	moved      *saves // the rounds the step moved (Durable)
	advance    func(r *round, out []Action) []Action
	open       func(id string, by Side, out []Action) (*round, []Action)
	abortRound func(r *round, out []Action) []Action
}

// Receipts returns the receipts this node holds for round, its own first.
func (m *Machine) Receipts(round string) []ReceiptNote { return m.rcpt.held(round) }

// ReceiptsToSign appends to out an ActSignReceipt for each round restored
// whose receipt is still to be signed here (after Restore).
func (m *Machine) ReceiptsToSign(out []Action) []Action { return m.rcpt.toSign(out) }
