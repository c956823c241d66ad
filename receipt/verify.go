package receipt

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	"github.com/chainsync-go/chainsync/secure"
)

// Trust is what a verifier knows of a chain's keys, from outside the
// receipts.
type Trust struct {
	// Roots verifies certificates: a node that has no pin must sign with
	// a certificate from these roots whose common name is its name.
	Roots *x509.CertPool
	// Pins maps a node's name to the pins (sha256//...) of the keys it
	// may sign with: its TLS certificate's key or its receipt key. A pin
	// is checked instead of Roots for that node.
	Pins map[string][]string
	// Chain, if set, is the chain the receipts must name, Head first;
	// otherwise the chain is the one the receipts agree on.
	Chain []string
}

// Rule names the rule a bundle breaks.
type Rule string

// The rules Verify checks.
const (
	RuleFormat    Rule = "format"    // a line is not a receipt
	RuleNode      Rule = "node"      // a receipt of a node that is not in the chain
	RuleKey       Rule = "key"       // not signed with the node's key
	RuleSignature Rule = "signature" // the signature does not verify
	RuleRound     Rule = "round"     // a receipt of another round or chain
	RuleOne       Rule = "one"       // a node signed more than one receipt
	RuleMissing   Rule = "missing"   // a node's receipt is missing
	RuleOrder     Rule = "order"     // the receipts are not in chain order
	RuleBinding   Rule = "binding"   // a receipt does not bind its predecessor's
	RuleOutcome   Rule = "outcome"   // the outcomes disagree
)

// Error says which rule a bundle breaks, and at which node.
type Error struct {
	Node   string // the node whose receipt breaks the rule ("" if not known)
	Line   int    // the bundle line, from 1 (0 if none)
	Rule   Rule
	Detail string // the whole sentence, naming the node
}

// Error is the sentence, after the bundle line it is about.
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Detail)
	}
	return e.Detail
}

func fail(node string, line int, rule Rule, format string, a ...any) *Error {
	return &Error{Node: node, Line: line, Rule: rule, Detail: fmt.Sprintf(format, a...)}
}

// Verify checks a round's receipts, the lines of a bundle in order,
// against t, offline. They are valid when every node of the chain signed
// exactly one receipt for the same round of the same chain, with the key
// its pin or its certificate names; they are in chain order; each binds
// its predecessor's receipt (Pred is the digest of the payload before
// it; none at the Head); and their outcomes agree: no node after one that
// failed, timed out, was denied or was not reached ran, and a task was
// undone only before a failed one, the undo wave going back from the
// failure without a gap until an undo failed. It returns the receipts in
// chain order, or an *Error naming the node and the rule.
//
// Clocks of different nodes are not compared: each receipt's times are
// its signer's.
func Verify(envs []Envelope, t Trust) ([]Receipt, error) {
	type rec struct {
		line int
		st   Statement
		env  Envelope
		err  error
	}
	recs := make([]rec, len(envs))
	votes := map[string]int{}
	var ref string // the subject most receipts name; ties: the earliest
	for i, e := range envs {
		recs[i] = rec{line: i + 1, env: e}
		recs[i].st, recs[i].err = e.Open()
		if recs[i].err == nil {
			d := recs[i].st.Subject[0].Digest["sha256"]
			if votes[d]++; ref == "" || votes[d] > votes[ref] {
				ref = d
			}
		}
	}
	var want Receipt // the round, as the chosen receipts say
	for _, r := range recs {
		if r.err == nil && r.st.Subject[0].Digest["sha256"] == ref {
			want = r.st.Predicate
			break
		}
	}
	chain := want.Chain
	if t.Chain != nil {
		chain = t.Chain
	}
	if len(chain) == 0 {
		if len(envs) == 0 {
			return nil, fail("", 0, RuleMissing, "no receipts")
		}
		return nil, fail("", 1, RuleFormat, "not a receipt: %v", recs[0].err)
	}
	if t.Chain != nil && want.Chain != nil && !slices.Equal(t.Chain, want.Chain) {
		return nil, fail("", 0, RuleRound, "the receipts are of the chain %s, not %s", strings.Join(want.Chain, ","), strings.Join(t.Chain, ","))
	}
	byNode := map[string]int{} // node -> index in recs
	for i, r := range recs {
		if r.err != nil {
			// A line that is no receipt stands, in a bundle in chain
			// order, where the node of its line belongs.
			if i < len(chain) && !slices.ContainsFunc(recs, func(o rec) bool { return o.err == nil && o.st.Predicate.Node == chain[i] }) {
				return nil, fail(chain[i], r.line, RuleFormat, "%s's receipt is not a valid receipt: %v", chain[i], r.err)
			}
			return nil, fail("", r.line, RuleFormat, "not a valid receipt: %v", r.err)
		}
		p := r.st.Predicate
		if !slices.Contains(chain, p.Node) {
			return nil, fail(p.Node, r.line, RuleNode, "%s is not a node of the chain %s", p.Node, strings.Join(chain, ","))
		}
		if err := checkSigner(r.env, p, t); err != nil {
			err.Line = r.line
			return nil, err
		}
		if r.st.Subject[0].Digest["sha256"] != ref {
			return nil, fail(p.Node, r.line, RuleRound, "%s's receipt is of another round: %s, not %s", p.Node, describeRound(p), describeRound(want))
		}
		if j, dup := byNode[p.Node]; dup {
			if recs[j].env.Digest() == r.env.Digest() {
				return nil, fail(p.Node, r.line, RuleOne, "%s's receipt is in the bundle twice (lines %d and %d)", p.Node, recs[j].line, r.line)
			}
			return nil, fail(p.Node, r.line, RuleOne, "%s signed two different receipts for the round (lines %d and %d)", p.Node, recs[j].line, r.line)
		}
		byNode[p.Node] = i
	}
	for _, n := range chain {
		if _, ok := byNode[n]; !ok {
			return nil, fail(n, 0, RuleMissing, "%s's receipt is missing", n)
		}
	}
	out := make([]Receipt, len(chain))
	for i, r := range recs {
		p := r.st.Predicate
		if p.Node != chain[i] {
			return nil, fail(p.Node, r.line, RuleOrder, "%s's receipt stands where %s's belongs: a bundle lists the receipts in chain order (%s)",
				p.Node, chain[i], strings.Join(chain, ","))
		}
		if i > 0 && p.Pred != recs[i-1].env.Digest() {
			return nil, fail(p.Node, r.line, RuleBinding, "%s's receipt binds a predecessor receipt that is not %s's", p.Node, chain[i-1])
		}
		out[i] = p
	}
	if err := checkOutcomes(out); err != nil {
		err.Line = byNode[err.Node] + 1
		return nil, err
	}
	return out, nil
}

// describeRound names the round r is about, for errors.
func describeRound(r Receipt) string {
	s := "round " + r.Round
	if r.Round == "" {
		s = "the unnamed round"
	}
	return fmt.Sprintf("%s (attempt %d) of the chain %s, settings %s", s, r.Attempt, strings.Join(r.Chain, ","), r.Settings)
}

// checkSigner checks that e is signed by p.Node's key, as t knows it.
func checkSigner(e Envelope, p Receipt, t Trust) *Error {
	n := p.Node
	pub, cert, err := p.Signer.key()
	if err != nil {
		return fail(n, 0, RuleKey, "%s's receipt names no usable key: %v", n, err)
	}
	pin, err := secure.PinOfKey(pub)
	if err != nil {
		return fail(n, 0, RuleKey, "%s's receipt names no usable key: %v", n, err)
	}
	switch pins, pinned := t.Pins[n]; {
	case pinned:
		if !slices.Contains(pins, pin) {
			return fail(n, 0, RuleKey, "%s's receipt is signed with a key that is not %s's (its pin is %s, %s's is %s)", n, n, pin, n, strings.Join(pins, " or "))
		}
	case t.Roots != nil:
		if cert == nil {
			return fail(n, 0, RuleKey, "%s's receipt is signed with a key without a certificate: give its pin (--receipt-pin %s=PIN)", n, n)
		}
		_, err := cert.Verify(x509.VerifyOptions{Roots: t.Roots, CurrentTime: p.Signed, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return fail(n, 0, RuleKey, "%s's receipt is signed with a certificate that does not verify with the CA: %v", n, err)
		}
		if cert.Subject.CommonName != n {
			return fail(n, 0, RuleKey, "%s's receipt is signed with the certificate of %q, not of %s", n, cert.Subject.CommonName, n)
		}
	default:
		return fail(n, 0, RuleKey, "no key is known for %s: give the CA (--tls-ca) or its pin (--pin %s=PIN or --receipt-pin %s=PIN)", n, n, n)
	}
	if !e.VerifySignature(pub) {
		return fail(n, 0, RuleSignature, "%s's signature does not verify with %s's key", n, n)
	}
	return nil
}

// stops reports whether o ends the round's forward pass at its node.
func stops(o Outcome) bool {
	return o == Failed || o == TimedOut || o == Denied || o == NotReached
}

// checkOutcomes checks that the outcomes, in chain order, tell one story.
func checkOutcomes(rs []Receipt) *Error {
	f := slices.IndexFunc(rs, func(r Receipt) bool { return stops(r.Outcome) })
	if f >= 0 {
		for _, r := range rs[f+1:] {
			if r.Outcome != NotReached {
				return fail(r.Node, 0, RuleOutcome, "%s's receipt says %s, but the round stopped at %s before it (%s)", r.Node, r.Outcome, rs[f].Node, rs[f].Outcome)
			}
		}
	} else {
		f = len(rs)
	}
	// Back from the failure: undone, undone, ..., then at most one
	// undo-failed, then the work that was kept.
	const (
		undoing = iota
		kept
	)
	mode := undoing
	if f == len(rs) || rs[f].Outcome == NotReached {
		mode = kept // no task failed: nothing to undo
	}
	for i := f - 1; i >= 0; i-- {
		r := rs[i]
		undo := r.Outcome == Undone || r.Outcome == UndoFailed
		switch {
		case undo && mode == kept && (f == len(rs) || rs[f].Outcome == NotReached):
			return fail(r.Node, 0, RuleOutcome, "%s's receipt says %s, but no task after it failed", r.Node, r.Outcome)
		case undo && mode == kept:
			return fail(r.Node, 0, RuleOutcome, "%s's receipt says %s, but %s after it says %s: the undo wave goes back from the failure without a gap, and stops where an undo fails",
				r.Node, r.Outcome, rs[i+1].Node, rs[i+1].Outcome)
		case r.Outcome == UndoFailed:
			mode = kept
		case r.Outcome == Undone:
		case i+1 < f && rs[i+1].Outcome == Undone:
			return fail(r.Node, 0, RuleOutcome, "%s's receipt says %s, but %s after it was undone: the undo wave goes on to the Head until an undo fails", r.Node, r.Outcome, rs[i+1].Node)
		default:
			mode = kept
		}
	}
	return nil
}
