package receipt

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chainsync-go/chainsync/protocol"
)

// The types a receipt is labelled with.
const (
	// PredicateType names this package's predicate, version 1. A later
	// version that changes the meaning of a field gets a new URI; a
	// verifier refuses a type it does not know.
	PredicateType = "https://chainsync.dev/receipt/v1"
	// StatementType is the in-toto Statement, version 1.
	StatementType = "https://in-toto.io/Statement/v1"
	// PayloadType is the DSSE payload type of an in-toto Statement.
	PayloadType = "application/vnd.in-toto+json"
)

// Bounds of a receipt. They keep a receipt to a few KiB, so that it can
// travel on a chain's links (in lines of at most 256 bytes) and be kept
// for every round.
const (
	// MaxEnvelope is the longest envelope, in bytes, as Marshal writes it.
	MaxEnvelope = 16 << 10
	// MaxChain is the longest chain a receipt names.
	MaxChain = 64
	// MaxDecisions is the most approvals and denials one receipt records.
	MaxDecisions = 16
	// MaxReason is the longest reason of a decision, in bytes.
	MaxReason = protocol.MaxSteerReason
	// MaxBy is the longest name of who decided, in bytes.
	MaxBy = 64
)

// Outcome is what became of a node's part in a round.
type Outcome string

// The outcomes.
const (
	// RanOK: the task ran and exited 0.
	RanOK Outcome = "ran-ok"
	// Failed: the task ran and exited non-zero (Receipt.Status).
	Failed Outcome = "failed"
	// TimedOut: the task ran past its timeout and was stopped.
	TimedOut Outcome = "timed-out"
	// Denied: a person denied the task before it started.
	Denied Outcome = "denied"
	// Skipped: a retried round whose task had already succeeded here;
	// it was passed on without running again.
	Skipped Outcome = "skipped-already-done"
	// Undone: the task ran and succeeded, and was undone after a later
	// node's task failed.
	Undone Outcome = "undone"
	// UndoFailed: the task ran and succeeded; undoing it failed
	// (Receipt.Status is the undo's exit status, none if it timed out).
	UndoFailed Outcome = "undo-failed"
	// NotReached: the round ended before this node's task could start.
	NotReached Outcome = "not-reached"
)

var outcomes = []Outcome{RanOK, Failed, TimedOut, Denied, Skipped, Undone, UndoFailed, NotReached}

// Valid reports whether o is one of the outcomes.
func (o Outcome) Valid() bool {
	for _, x := range outcomes {
		if o == x {
			return true
		}
	}
	return false
}

// ran reports whether a task ran to success here (whatever happened
// after): the outcomes that need task times and are undoable.
func (o Outcome) ran() bool { return o == RanOK || o == Undone || o == UndoFailed }

// Verdict is what a person decided about a task waiting for approval.
type Verdict string

// The verdicts.
const (
	VerdictApproved Verdict = "approved"
	VerdictDenied   Verdict = "denied"
)

// Decision is an approval or a denial given at a node.
type Decision struct {
	Verdict Verdict   `json:"verdict"`
	By      string    `json:"by"` // who decided, as the control socket was told
	At      time.Time `json:"at"`
	Reason  string    `json:"reason,omitempty"`
}

// Signer is the key a receipt is signed with, as the receipt carries it:
// the signer's certificate (DER) for a node signing with its TLS key, or
// its public key (DER SubjectPublicKeyInfo) for a receipt key. Sign fills
// it in.
type Signer struct {
	Certificate []byte `json:"certificate,omitempty"`
	PublicKey   []byte `json:"publicKey,omitempty"`
}

// Receipt is the predicate: what one node says it did in one round.
type Receipt struct {
	// Chain is the chain's node names, Head first.
	Chain []string `json:"chain"`
	// Settings is the digest of the chain's round settings, in lower-case
	// hex (the one the identity line carries).
	Settings string `json:"settings"`
	// Round is the round id ("" is the unnamed round).
	Round string `json:"round"`
	// Attempt counts the round's tries: 1, then one more for each retry.
	Attempt int `json:"attempt"`
	// Node is the signer's name, and Place its place in Chain (1: Head).
	Node  string `json:"node"`
	Place int    `json:"place"`
	// Outcome is what became of the node's part.
	Outcome Outcome `json:"outcome"`
	// Status is the exit status of a failed task, or of a failed undo.
	Status *int `json:"status,omitempty"`
	// TaskStart and TaskEnd bound the task, when it ran.
	TaskStart time.Time `json:"taskStart,omitzero"`
	TaskEnd   time.Time `json:"taskEnd,omitzero"`
	// UndoStart and UndoEnd bound the undo, when there was one.
	UndoStart time.Time `json:"undoStart,omitzero"`
	UndoEnd   time.Time `json:"undoEnd,omitzero"`
	// Decisions are the approvals and denials given at this node for
	// this round, in the order they were given.
	Decisions []Decision `json:"decisions,omitempty"`
	// Pred is the SHA-256 (lower-case hex) of the predecessor's receipt
	// payload, as signed; empty at the Head.
	Pred string `json:"pred,omitempty"`
	// Signed is when the receipt was made.
	Signed time.Time `json:"signed"`
	// Signer is the signing key; Sign sets it.
	Signer Signer `json:"signer"`
}

// Subject is an in-toto resource descriptor.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Statement is an in-toto Statement v1 whose predicate is a Receipt.
type Statement struct {
	Type          string    `json:"_type"`
	Subject       []Subject `json:"subject"`
	PredicateType string    `json:"predicateType"`
	Predicate     Receipt   `json:"predicate"`
}

// RoundText is the canonical text of the round a receipt is about: its
// SHA-256 is the statement's subject digest, the same in every receipt
// of the round.
func (r *Receipt) RoundText() string {
	return "chainsync round\nchain " + strings.Join(r.Chain, ",") + "\nsettings " + r.Settings +
		"\nround " + r.Round + "\nattempt " + strconv.Itoa(r.Attempt) + "\n"
}

// subject returns the statement's subject for r: named by the chain (the
// first 8 bytes of the SHA-256 of its names, in hex) and the round id.
func (r *Receipt) subject() Subject {
	chain := sha256.Sum256([]byte(strings.Join(r.Chain, ",")))
	sum := sha256.Sum256([]byte(r.RoundText()))
	return Subject{
		Name:   hex.EncodeToString(chain[:8]) + "/" + r.Round,
		Digest: map[string]string{"sha256": hex.EncodeToString(sum[:])},
	}
}

// Statement returns the in-toto Statement that carries r.
func (r *Receipt) Statement() Statement {
	return Statement{Type: StatementType, Subject: []Subject{r.subject()}, PredicateType: PredicateType, Predicate: *r}
}

// validName reports whether s is a node name as the chain's lines carry
// it (1 to 40 of letters, digits and . _ : @ [ ] -, not "-").
func validName(s string) bool {
	return s != "" && s != "-" && protocol.NoticeName(s) == s
}

// printable reports whether s is UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c >= 0x80 && c < 0xa0 {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Validate checks that r is a well-formed receipt: every field within its
// bounds, and the times and status its outcome needs (and no others).
// It checks nothing about the signature or the other nodes' receipts.
func (r *Receipt) Validate() error {
	if len(r.Chain) == 0 || len(r.Chain) > MaxChain {
		return fmt.Errorf("a chain of %d nodes (1 to %d)", len(r.Chain), MaxChain)
	}
	seen := make(map[string]bool, len(r.Chain))
	for _, n := range r.Chain {
		if !validName(n) {
			return fmt.Errorf("chain node %q is not a node name", n)
		}
		if seen[n] {
			return fmt.Errorf("chain names %q twice", n)
		}
		seen[n] = true
	}
	if len(r.Settings) < 16 || len(r.Settings) > 64 || !lowerHex(r.Settings) {
		return fmt.Errorf("settings %q is not a digest (16 to 64 lower-case hex digits)", r.Settings)
	}
	if !protocol.ValidRound(r.Round) {
		return fmt.Errorf("round %q is not a round id", r.Round)
	}
	if r.Attempt < 1 || r.Attempt > 1e6 {
		return fmt.Errorf("attempt %d (1 to 1000000)", r.Attempt)
	}
	if r.Place < 1 || r.Place > len(r.Chain) || r.Chain[r.Place-1] != r.Node {
		return fmt.Errorf("node %q is not at place %d of the chain %s", r.Node, r.Place, strings.Join(r.Chain, ","))
	}
	if !r.Outcome.Valid() {
		return fmt.Errorf("unknown outcome %q", r.Outcome)
	}
	if err := r.validTimes(); err != nil {
		return fmt.Errorf("%s: %w", r.Outcome, err)
	}
	switch {
	case r.Outcome == Failed && r.Status == nil:
		return errors.New("failed: no exit status")
	case r.Status != nil && r.Outcome != Failed && r.Outcome != UndoFailed:
		return fmt.Errorf("%s: an exit status belongs to a failed task or undo", r.Outcome)
	case r.Status != nil && (*r.Status < -255 || *r.Status > 255):
		return fmt.Errorf("exit status %d", *r.Status)
	}
	if len(r.Decisions) > MaxDecisions {
		return fmt.Errorf("%d decisions (at most %d)", len(r.Decisions), MaxDecisions)
	}
	denied := false
	for _, d := range r.Decisions {
		switch {
		case d.Verdict != VerdictApproved && d.Verdict != VerdictDenied:
			return fmt.Errorf("decision verdict %q (approved or denied)", d.Verdict)
		case d.By == "" || len(d.By) > MaxBy || !printable(d.By):
			return fmt.Errorf("decision by %q (1 to %d printable bytes)", d.By, MaxBy)
		case d.At.IsZero():
			return errors.New("a decision without its time")
		case len(d.Reason) > MaxReason || !printable(d.Reason):
			return fmt.Errorf("decision reason of %d bytes (at most %d, printable)", len(d.Reason), MaxReason)
		}
		denied = denied || d.Verdict == VerdictDenied
	}
	if r.Outcome == Denied && !denied {
		return errors.New("denied, but no denial is recorded")
	}
	if (r.Pred == "") != (r.Place == 1) {
		if r.Place == 1 {
			return errors.New("the Head binds a predecessor receipt")
		}
		return errors.New("no predecessor receipt bound")
	}
	if r.Pred != "" && (len(r.Pred) != 64 || !lowerHex(r.Pred)) {
		return fmt.Errorf("pred %q is not a SHA-256 in lower-case hex", r.Pred)
	}
	if r.Signed.IsZero() {
		return errors.New("no signing time")
	}
	return nil
}

// validTimes checks the task and undo times r's outcome needs.
func (r *Receipt) validTimes() error {
	task := !r.TaskStart.IsZero() || !r.TaskEnd.IsZero()
	undo := !r.UndoStart.IsZero() || !r.UndoEnd.IsZero()
	ranTask := r.Outcome.ran() || r.Outcome == Failed || r.Outcome == TimedOut
	switch {
	case ranTask && (r.TaskStart.IsZero() || r.TaskEnd.IsZero()):
		return errors.New("the task's start and end are needed")
	case !ranTask && task:
		return errors.New("no task ran, yet task times are given")
	case ranTask && r.TaskEnd.Before(r.TaskStart):
		return errors.New("the task ends before it starts")
	}
	undone := r.Outcome == Undone || r.Outcome == UndoFailed
	switch {
	case undone && (r.UndoStart.IsZero() || r.UndoEnd.IsZero()):
		return errors.New("the undo's start and end are needed")
	case !undone && undo:
		return errors.New("nothing was undone, yet undo times are given")
	case undone && (r.UndoStart.Before(r.TaskEnd) || r.UndoEnd.Before(r.UndoStart)):
		return errors.New("the undo starts before the task ended, or ends before it starts")
	}
	return nil
}
