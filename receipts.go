package chainsync

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/receipt"
	"github.com/chainsync-go/chainsync/wire"
)

// Receipts (docs/RECEIPTS.md): the machine decides when this node signs
// and what its receipt says of the round's outcome (protocol/receipt.go);
// this file is the driver's part: it keeps the facts a receipt states
// that only the driver knows (when the task and the undo ran, who
// approved or denied), signs, reads the receipt lines, and writes the
// bundles.

// receipts is the driver's receipts part (Config.Receipts). It reaches
// the node through receiptsHost. Loop only.
type receipts struct {
	host     receiptsHost
	log      *slog.Logger
	key      crypto.Signer
	cert     *x509.Certificate
	chain    []string
	name     string
	place    int    // 1: the Head
	settings string // digest of Config.RoundSettings
	dir      string // Config.ReceiptsDir
	facts    map[string]*roundFacts

	// mu guards the rounds whose receipts are settled here (WaitReceipts
	// reads them off the loop).
	mu      sync.Mutex
	settled map[string]*settling
}

// settling is how far a round's receipts are at this node: all held
// (ActReceipts), and which of them were handed to the predecessor.
type settling struct {
	held   bool
	handed map[string]bool
	done   chan struct{} // closed once held and, but at the Head, all handed
}

// maxSettled bounds the rounds whose settling is kept (a served chain
// runs rounds without end): the oldest are dropped beyond it.
const maxSettled = 4096

// roundFacts is what the driver saw of a round at this node, for its
// receipt.
type roundFacts struct {
	taskStart, taskEnd, undoStart, undoEnd time.Time
	decisions                              []receipt.Decision
}

// receiptsHost is what the receipts part reaches of its node: the loop's
// step, run after the actions being carried out (stepLater), and the
// receipts the machine holds.
type receiptsHost interface {
	stepLater(ev protocol.Event, then func(error))
	heldReceipts(round string) []protocol.ReceiptNote
	receiptsToSign() []protocol.Action
	spawn(f func()) bool // on a goroutine Close waits for; false: not started
}

// newReceipts returns the receipts part of a node configured by cfg, nil
// with receipts off.
func newReceipts(cfg *Config, host receiptsHost, log *slog.Logger) *receipts {
	if !cfg.Receipts {
		return nil
	}
	return &receipts{host: host, log: log, key: cfg.ReceiptKey, cert: cfg.ReceiptCert, chain: cfg.Chain, name: cfg.Name,
		place: slices.Index(cfg.Chain, cfg.Name) + 1, settings: wire.Digest(cfg.RoundSettings), dir: cfg.ReceiptsDir,
		facts: map[string]*roundFacts{}, settled: map[string]*settling{}}
}

// settlingOf returns round's settling, made on first use. rc.mu held.
func (rc *receipts) settlingOf(round string) *settling {
	s := rc.settled[round]
	if s == nil {
		if len(rc.settled) >= maxSettled {
			for id, o := range rc.settled {
				if o.held {
					delete(rc.settled, id)
					break
				}
			}
		}
		s = &settling{handed: map[string]bool{}, done: make(chan struct{})}
		rc.settled[round] = s
	}
	return s
}

// settle closes s.done once this node holds round's receipts and, but at
// the Head, handed every one of them to its predecessor. rc.mu held.
func (rc *receipts) settle(s *settling) {
	if s.held && (rc.place == 1 || len(s.handed) >= len(rc.chain)-rc.place+1) {
		select {
		case <-s.done:
		default:
			close(s.done)
		}
	}
}

// handed notes that node's receipt of round was handed to the
// predecessor (rounds.go).
func (rc *receipts) handed(round, node string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	s := rc.settlingOf(round)
	s.handed[node] = true
	rc.settle(s)
}

// wait returns a channel closed once round's receipts are settled here.
func (rc *receipts) wait(round string) <-chan struct{} {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.settlingOf(round).done
}

// WaitReceipts waits until this node holds the receipts of round it must
// hold (its own and those of every node after it; at the Head, the whole
// chain's) and, but at the Head, has handed them all to its predecessor;
// or until ctx ends (its error). With receipts off it returns at once. A
// command waits so before it exits: after a round that ended early, the
// receipts travel after the round's end (docs/RECEIPTS.md).
func (n *Node) WaitReceipts(ctx context.Context, round string) error {
	rc := n.d.rcpt // set at Start, never changed: safe to read here
	if rc == nil {
		return nil
	}
	select {
	case <-rc.wait(round):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// KeepReceipts writes the receipts this node holds for round to
// Config.ReceiptsDir now, however many of the chain's have come: for a
// round whose receipts did not all come back before the node stops (a
// node was lost), so that what came is kept; the verifier names what is
// missing. A later arrival of them all writes the bundle again, whole.
// Nothing without ReceiptsDir.
func (n *Node) KeepReceipts(round string) error {
	if rc := n.d.rcpt; rc == nil || rc.dir == "" {
		return nil
	}
	if _, ok := n.lp.ask(input{kind: inKeep, round: round}); !ok {
		return ErrStopped
	}
	return nil
}

// checkReceipts checks the receipt fields of c (Validate).
func (c *Config) checkReceipts(bad func(field, value, format string, a ...any) error) error {
	if !c.Receipts {
		if c.ReceiptsDir != "" {
			return bad("ReceiptsDir", c.ReceiptsDir, "ReceiptsDir needs Receipts")
		}
		return nil
	}
	switch {
	case c.ReceiptKey == nil:
		return bad("ReceiptKey", "", "Receipts needs ReceiptKey, the key that signs this node's receipts (its TLS key, or one from chainsync keygen)")
	case len(c.Chain) == 0 || !slices.Contains(c.Chain, c.Name):
		return bad("Chain", strings.Join(c.Chain, ","), "Receipts needs Chain, the chain's node names in order, with Name %q in it", c.Name)
	case len(c.Chain) > receipt.MaxChain:
		return bad("Chain", strings.Join(c.Chain, ","), "Receipts takes a chain of at most %d nodes", receipt.MaxChain)
	}
	if c.ReceiptCert != nil {
		eq, ok := c.ReceiptCert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
		if !ok || !eq.Equal(c.ReceiptKey.Public()) {
			return bad("ReceiptCert", c.ReceiptCert.Subject.String(), "ReceiptCert is not ReceiptKey's certificate")
		}
	}
	if c.ReceiptsDir != "" {
		if fi, err := os.Stat(c.ReceiptsDir); err != nil || !fi.IsDir() {
			return bad("ReceiptsDir", c.ReceiptsDir, "ReceiptsDir %q is not a directory", c.ReceiptsDir)
		}
	}
	return nil
}

// of returns round's facts, made on first use.
func (rc *receipts) of(round string) *roundFacts {
	f := rc.facts[round]
	if f == nil {
		f = &roundFacts{}
		rc.facts[round] = f
	}
	return f
}

// observe notes the times of the task and the undo from the node's trace
// events (the moment each is traced is the moment it happened).
func (rc *receipts) observe(ev *TraceEvent) {
	switch ev.Kind {
	case TraceTaskStart:
		f := rc.of(ev.Round)
		f.taskStart, f.taskEnd = ev.Time, time.Time{} // a retry runs it again
	case TraceTaskEnd:
		rc.of(ev.Round).taskEnd = ev.Time
	case TraceUndoStart:
		rc.of(ev.Round).undoStart = ev.Time
	case TraceUndoEnd:
		rc.of(ev.Round).undoEnd = ev.Time
	}
}

// decided notes an approval or denial given at this node (steer.go).
func (rc *receipts) decided(round string, approved bool, req Request, at time.Time) {
	d := receipt.Decision{Verdict: receipt.VerdictDenied, By: req.By, At: at, Reason: req.Reason}
	if approved {
		d.Verdict = receipt.VerdictApproved
	}
	if d.By == "" {
		d.By = "unknown"
	}
	d.By = truncate(d.By, receipt.MaxBy)
	d.Reason = truncate(d.Reason, receipt.MaxReason)
	f := rc.of(round)
	if len(f.decisions) < receipt.MaxDecisions {
		f.decisions = append(f.decisions, d)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// resume seeds the task times of the rounds a restarted node found in
// its journal, then signs the receipts the machine still wants signed.
func (rc *receipts) resume(times map[string]journal.TaskTimes) {
	for id, t := range times {
		f := rc.of(id)
		f.taskStart, f.taskEnd = t.Started, t.Ended
		if f.taskEnd.IsZero() && !t.Interrupted.IsZero() {
			f.taskEnd = t.Interrupted
		}
	}
	for _, a := range rc.host.receiptsToSign() {
		rc.act(&a)
	}
}

// act carries out ActSignReceipt and ActReceipts.
func (rc *receipts) act(a *protocol.Action) {
	switch a.Kind {
	case protocol.ActSignReceipt:
		rc.sign(a.Round, a.Sign)
	case protocol.ActReceipts:
		rc.keep(a.Round)
		rc.mu.Lock()
		s := rc.settlingOf(a.Round)
		s.held = true
		rc.settle(s)
		rc.mu.Unlock()
	}
}

// sign makes, signs and reports this node's receipt for round as o says.
// Signing is on the loop: an ECDSA P-256 or Ed25519 signature takes tens
// of microseconds (docs/BENCHMARKS.md, "Receipts").
func (rc *receipts) sign(round string, o *protocol.ReceiptOrder) {
	if o == nil {
		return
	}
	now := time.Now()
	f := rc.of(round)
	r := receipt.Receipt{Chain: rc.chain, Settings: rc.settings, Round: round, Attempt: o.Attempt, Node: rc.name,
		Place: rc.place, Outcome: receipt.Outcome(o.Outcome), Pred: o.Pred, Signed: now, Decisions: f.decisions}
	if r.Outcome == receipt.Failed || r.Outcome == receipt.UndoFailed {
		st := o.Status
		r.Status = &st
	}
	ran := r.Outcome == receipt.RanOK || r.Outcome == receipt.Undone || r.Outcome == receipt.UndoFailed ||
		r.Outcome == receipt.Failed || r.Outcome == receipt.TimedOut
	if ran {
		// A time this process did not see (the task ran before a restart
		// whose journal kept no time of it) is the signing time.
		r.TaskStart, r.TaskEnd = orNow(f.taskStart, now), orNow(f.taskEnd, now)
		if r.TaskEnd.Before(r.TaskStart) {
			r.TaskEnd = r.TaskStart
		}
	}
	if r.Outcome == receipt.Undone || r.Outcome == receipt.UndoFailed {
		r.UndoStart, r.UndoEnd = orNow(f.undoStart, now), orNow(f.undoEnd, now)
		if r.UndoStart.Before(r.TaskEnd) {
			r.UndoStart = r.TaskEnd
		}
		if r.UndoEnd.Before(r.UndoStart) {
			r.UndoEnd = r.UndoStart
		}
	}
	if r.Outcome == receipt.Denied && !slices.ContainsFunc(r.Decisions, func(d receipt.Decision) bool { return d.Verdict == receipt.VerdictDenied }) {
		// Denied before a restart: who denied it is in the log, not here.
		r.Decisions = append(slices.Clip(r.Decisions), receipt.Decision{Verdict: receipt.VerdictDenied, By: "unknown", At: now,
			Reason: "denied before this node restarted"})
	}
	env, err := receipt.Sign(rc.key, rc.cert, r)
	var b []byte
	if err == nil {
		b, err = env.Marshal()
	}
	if err != nil {
		rc.log.Error("cannot sign this node's receipt; the round's receipts stop here", "round", round, "err", err.Error())
		return
	}
	// The step waits for the actions being carried out: a step inside
	// one would reuse their buffer.
	rc.host.stepLater(protocol.ReceiptSigned(round, string(b), env.Digest()), func(err error) {
		if err != nil {
			if !errors.Is(err, protocol.ErrNotAsked) {
				rc.log.Error("receipt signed but not taken", "round", round, "err", err.Error())
			}
			return
		}
		delete(rc.facts, round)
	})
}

func orNow(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}

// keep writes the receipts this node holds for round to ReceiptsDir, if
// set: its own and every one after it, in chain order; off the loop (a
// file written and synced), before the node's Close returns.
func (rc *receipts) keep(round string) {
	if rc.dir == "" {
		return
	}
	notes := rc.host.heldReceipts(round)
	if !rc.host.spawn(func() { rc.write(round, notes) }) {
		rc.write(round, notes)
	}
}

// write writes notes, round's receipts, as its bundle in ReceiptsDir.
func (rc *receipts) write(round string, notes []protocol.ReceiptNote) {
	if len(notes) == 0 {
		return // none held (KeepReceipts): no empty bundle
	}
	envs := make([]receipt.Envelope, 0, len(notes))
	for _, n := range notes {
		e, err := receipt.Unmarshal([]byte(n.Envelope))
		if err != nil {
			rc.log.Error("a held receipt does not parse; bundle not written", "round", round, "node", n.Node, "err", err.Error())
			return
		}
		envs = append(envs, e)
	}
	path := filepath.Join(rc.dir, bundleName(round))
	if earlier, ok := rc.keepEarlier(path, envs[0]); ok {
		rc.log.Info("receipts of the attempt before kept", "round", round, "path", earlier)
	}
	if err := receipt.WriteBundle(path, envs); err != nil {
		rc.log.Error("cannot write the round's receipts", "round", round, "path", path, "err", err.Error())
		return
	}
	rc.log.Info("receipts kept", "round", round, "path", path, "receipts", len(envs))
}

// keepEarlier moves the bundle at path aside, to its attempt's name
// (attemptName), when it holds an attempt of the round before next's:
// a retried round's bundle does not replace the evidence of the attempt
// that failed. next is a receipt of the bundle about to be written; its
// attempt is read only when there is a bundle to compare it with. It
// reports where the bundle went, if it moved it.
func (rc *receipts) keepEarlier(path string, next receipt.Envelope) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false // none yet (or unreadable: WriteBundle says so)
	}
	envs, err := receipt.ParseBundle(f)
	f.Close()
	if err != nil || len(envs) == 0 {
		return "", false
	}
	old := attemptOf(envs[0])
	if old <= 0 || old >= attemptOf(next) {
		return "", false // the same attempt, held more fully now
	}
	to := attemptName(path, old)
	if err := os.Rename(path, to); err != nil {
		rc.log.Error("cannot keep the receipts of the attempt before; the retry's replace them", "path", path, "err", err.Error())
		return "", false
	}
	return to, true
}

// attemptOf is the attempt e's receipt states (0 if it does not open).
func attemptOf(e receipt.Envelope) int {
	st, err := e.Open()
	if err != nil {
		return 0
	}
	return st.Predicate.Attempt
}

// attemptName is the name a bundle of attempt of a retried round is
// kept under once a later attempt's takes its place: "round-ID.jsonl"
// becomes "round-ID@attempt-1.jsonl" ("@" is in no round id).
func attemptName(path string, attempt int) string {
	return strings.TrimSuffix(path, ".jsonl") + "@attempt-" + strconv.Itoa(attempt) + ".jsonl"
}

// bundleName is the file of round's receipts in ReceiptsDir:
// "round-ID.jsonl", "round.jsonl" for the unnamed round.
func bundleName(round string) string {
	if round == "" {
		return "round.jsonl"
	}
	return "round-" + round + ".jsonl"
}

// receiptMark is the outbox mark of node's receipt for round, sent to the
// predecessor: a round id holds no NUL, so it is told from a round's
// final COMPLETE (link.enqueue).
func receiptMark(round, node string) string { return "\x00" + node + "\x00" + round }

// handedReceipt reads a mark: the receipt handed, if it is one.
func handedReceipt(mark string) (round, node string, ok bool) {
	rest, ok := strings.CutPrefix(mark, "\x00")
	if !ok {
		return "", "", false
	}
	node, round, _ = strings.Cut(rest, "\x00")
	return round, node, true
}

// receiptMessage turns a receipt line that msg stood for (the reader
// returns a HEARTBEAT for one) into the machine's message: an RDIGEST at
// once, a RECEIPT once its last part is read (a HEARTBEAT until then).
// Reader goroutine of l only.
func (l *link) receiptMessage(msg protocol.Message) (protocol.Message, error) {
	rl, ok := l.r.Receipt()
	if !ok {
		return msg, nil
	}
	if rl.Digest != nil {
		return rl.Digest.Message(), nil
	}
	env, done, err := l.rasm.Add(*rl.Part)
	if err != nil || !done {
		return protocol.Message{Cmd: protocol.Heartbeat}, err
	}
	e, err := receipt.Unmarshal(env)
	if err != nil {
		return msg, &wire.ProtocolError{Reason: "a RECEIPT of " + rl.Part.Node + " that is no DSSE envelope: " + err.Error()}
	}
	return protocol.Message{Cmd: protocol.ReceiptLine, Round: rl.Part.Round,
		Receipt: &protocol.ReceiptNote{Node: rl.Part.Node, Digest: e.Digest(), Envelope: string(env)}}, nil
}

// receiptsPort is what the receipts part may reach of the node
// (receiptsHost): the loop, to hand back an event for the driver to step
// after the current input; the stepper, to read the receipts the machine
// holds; the crew, for the bundles' writes.
type receiptsPort struct {
	lp   *loop
	st   *stepper
	crew *crew
}

// stepLater hands ev back to the loop: the driver steps it after the
// current input, in the same turn, and hands then the step's error.
func (p *receiptsPort) stepLater(ev protocol.Event, then func(error)) {
	p.lp.later(input{kind: inStepLater, ev: &ev, then: then})
}

// spawn runs f on a goroutine of the node's crew.
func (p *receiptsPort) spawn(f func()) bool { return p.crew.spawn(f) }

// heldReceipts returns the receipts this node holds for round.
func (p *receiptsPort) heldReceipts(round string) []protocol.ReceiptNote { return p.st.receipts(round) }

// receiptsToSign returns the ActSignReceipt of each restored round whose
// receipt is still to be signed.
func (p *receiptsPort) receiptsToSign() []protocol.Action { return p.st.receiptsToSign() }
