package receipt_test

// Receipts (docs/RECEIPTS.md): a round's receipts, signed with the keys
// of chainsync certs or with receipt keys, verify; each envelope verifies
// with an independent DSSE check; and every tampering is caught, naming
// the node and the rule. Draft: Security Considerations ("this protocol
// implicitly trusts every node"), and its business-process example.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/receipttest"
	"github.com/chainsync-go/chainsync/receipt"
	"github.com/chainsync-go/chainsync/secure"
	"github.com/chainsync-go/chainsync/wire"
)

var names = []string{"A", "B", "C", "D"}

type signer = receipttest.Signer

// certChain makes a CA and a certificate per node with chainsync certs'
// code, and returns each node's signer and the CA's pool.
func certChain(t testing.TB, nodes ...string) (map[string]signer, *x509.CertPool) {
	t.Helper()
	specs := make([]secure.NodeSpec, len(nodes))
	for i, n := range nodes {
		specs[i] = secure.NodeSpec{Name: n}
	}
	dir := t.TempDir()
	gen, err := secure.GenerateCerts(dir, specs, false)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(receipttest.ReadCert(t, gen[0].CAFile))
	return receipttest.LoadCerts(t, dir, nodes...), pool
}

// edKeys makes an Ed25519 receipt key per node, and the pins of them.
func edKeys(t testing.TB, nodes ...string) (map[string]signer, map[string][]string) {
	t.Helper()
	keys, pins := map[string]signer{}, map[string][]string{}
	for _, n := range nodes {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		keys[n] = signer{Key: k}
		p, err := secure.PinOfKey(k.Public())
		if err != nil {
			t.Fatal(err)
		}
		pins[n] = []string{p}
	}
	return keys, pins
}

var t0 = receipttest.T0

func base(i int, round string, o receipt.Outcome) receipt.Receipt {
	return receipttest.Base(names, i, round, o)
}

func signRound(t *testing.T, keys map[string]signer, round string, outs []receipt.Outcome, edit func(*receipt.Receipt)) []receipt.Envelope {
	t.Helper()
	return receipttest.SignRound(t, keys, names, round, outs, edit)
}

var independentVerify = receipttest.IndependentVerify

var allOK = []receipt.Outcome{receipt.RanOK, receipt.RanOK, receipt.RanOK, receipt.RanOK}

// A round of four nodes with certificates from chainsync certs verifies,
// and each envelope verifies with an independent DSSE check and the
// node's certificate key. It binds the in-toto statement's fields.
func TestFourNodesVerify(t *testing.T) {
	keys, roots := certChain(t, names...)
	envs := signRound(t, keys, "r1", allOK, nil)
	rs, err := receipt.Verify(envs, receipt.Trust{Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 || rs[3].Node != "D" || rs[0].Pred != "" || rs[1].Pred != envs[0].Digest() {
		t.Fatalf("receipts %+v", rs)
	}
	for i, e := range envs {
		line, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := independentVerify(line, keys[names[i]].Cert.PublicKey); err != nil {
			t.Errorf("%s: independent DSSE check: %v", names[i], err)
		}
		if independentVerify(line, keys[names[(i+1)%4]].Cert.PublicKey) == nil {
			t.Errorf("%s's envelope verifies with another node's key", names[i])
		}
		var st map[string]any
		if err := json.Unmarshal(e.Payload, &st); err != nil {
			t.Fatal(err)
		}
		if st["_type"] != "https://in-toto.io/Statement/v1" || st["predicateType"] != receipt.PredicateType {
			t.Errorf("statement %v", st)
		}
	}
	// The same with the certificates' pins instead of the CA.
	pins := map[string][]string{}
	for n, k := range keys {
		pins[n] = []string{secure.PinOf(k.Cert)}
	}
	if _, err := receipt.Verify(envs, receipt.Trust{Pins: pins, Chain: names}); err != nil {
		t.Fatal(err)
	}
}

// wantErr checks that err is a *receipt.Error naming node for rule, and
// that its text contains each of subs.
func wantErr(t *testing.T, err error, node string, rule receipt.Rule, subs ...string) {
	t.Helper()
	var re *receipt.Error
	if !errors.As(err, &re) {
		t.Fatalf("got %v, want a *receipt.Error naming %s (%s)", err, node, rule)
	}
	if re.Node != node || re.Rule != rule {
		t.Fatalf("got %q naming %q for %s, want %q for %s", err, re.Node, re.Rule, node, rule)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("got %q, want it to say %q", err, s)
		}
	}
}

// Every tampering the issue lists fails, naming the node.
func TestTampering(t *testing.T) {
	keys, roots := certChain(t, names...)
	other, _ := certChain(t, "C") // the same name, another CA
	trust := receipt.Trust{Roots: roots}
	envs := signRound(t, keys, "r1", allOK, nil)
	clone := func() []receipt.Envelope {
		out := make([]receipt.Envelope, len(envs))
		for i, e := range envs {
			out[i] = e
			out[i].Payload = bytes.Clone(e.Payload)
		}
		return out
	}

	t.Run("byte flipped in B's payload", func(t *testing.T) {
		es := clone()
		end := `"taskEnd":"` + receipttest.Hour + `01:30Z"`
		i := bytes.Index(es[1].Payload, []byte(end)) + len(end) - len(`0Z"`)
		es[1].Payload[i] = '1' // still a time: 06:01:31
		_, err := receipt.Verify(es, trust)
		wantErr(t, err, "B", receipt.RuleSignature, "B's signature does not verify with B's key")
	})
	t.Run("any bit flipped in B's payload", func(t *testing.T) {
		for i := range envs[1].Payload {
			es := clone()
			es[1].Payload[i] ^= 1
			_, err := receipt.Verify(es, trust)
			var re *receipt.Error
			if !errors.As(err, &re) || re.Node != "B" {
				t.Fatalf("byte %d of B's payload flipped (%q): %v, want an error naming B", i, es[1].Payload[max(0, i-10):i+10], err)
			}
		}
	})
	t.Run("B and C swapped", func(t *testing.T) {
		es := clone()
		es[1], es[2] = es[2], es[1]
		_, err := receipt.Verify(es, trust)
		wantErr(t, err, "C", receipt.RuleOrder, "C's receipt stands where B's belongs")
	})
	t.Run("C removed", func(t *testing.T) {
		es := clone()
		es = append(es[:2], es[3])
		_, err := receipt.Verify(es, trust)
		wantErr(t, err, "C", receipt.RuleMissing, "C's receipt is missing")
	})
	t.Run("C re-signed with another CA's C key", func(t *testing.T) {
		es := clone()
		es[2] = signRound(t, map[string]signer{"A": keys["A"], "B": keys["B"], "C": other["C"]}, "r1", allOK[:3], nil)[2]
		_, err := receipt.Verify(es, trust)
		wantErr(t, err, "C", receipt.RuleKey, "C's receipt is signed with a certificate that does not verify")
	})
	t.Run("C re-signed with D's key", func(t *testing.T) {
		es := clone()
		r := base(2, "r1", receipt.RanOK)
		r.Pred = es[1].Digest()
		e, err := receipt.Sign(keys["D"].Key, keys["D"].Cert, r)
		if err != nil {
			t.Fatal(err)
		}
		es[2] = e
		_, err = receipt.Verify(es, trust)
		wantErr(t, err, "C", receipt.RuleKey, `the certificate of "D", not of C`)
	})
	t.Run("C's payload signed by another key, C's certificate kept", func(t *testing.T) {
		es := clone()
		r := base(3, "r1", receipt.RanOK)
		r.Pred = es[2].Digest()
		forged, err := receipt.Sign(keys["D"].Key, keys["D"].Cert, r)
		if err != nil {
			t.Fatal(err)
		}
		es[2].Signatures = forged.Signatures
		_, err = receipt.Verify(es, trust)
		wantErr(t, err, "C", receipt.RuleSignature, "C's signature does not verify with C's key")
	})
	t.Run("C's receipt from another round", func(t *testing.T) {
		es := clone()
		r2 := signRound(t, keys, "r2", allOK, nil)
		es[2] = r2[2]
		_, err := receipt.Verify(es, trust)
		wantErr(t, err, "C", receipt.RuleRound, "C's receipt is of another round: round r2")
	})
	t.Run("C binds A's receipt", func(t *testing.T) {
		es := signRound(t, keys, "r1", allOK, func(r *receipt.Receipt) {
			if r.Node == "C" {
				r.Pred = envs[0].Digest()
			}
		})
		_, err := receipt.Verify(es, trust)
		wantErr(t, err, "C", receipt.RuleBinding, "C's receipt binds a predecessor receipt that is not B's")
	})
	t.Run("C twice", func(t *testing.T) {
		es := append(clone(), envs[2])
		_, err := receipt.Verify(es, trust)
		wantErr(t, err, "C", receipt.RuleOne, "twice")
	})
	t.Run("no trust for D", func(t *testing.T) {
		pins := map[string][]string{}
		for _, n := range names[:3] {
			pins[n] = []string{secure.PinOf(keys[n].Cert)}
		}
		_, err := receipt.Verify(envs, receipt.Trust{Pins: pins})
		wantErr(t, err, "D", receipt.RuleKey, "no key is known for D")
	})
	t.Run("a chain other than the one given", func(t *testing.T) {
		_, err := receipt.Verify(envs, receipt.Trust{Roots: roots, Chain: []string{"A", "B", "C", "D", "E"}})
		if err == nil || !strings.Contains(err.Error(), "not A,B,C,D,E") {
			t.Fatalf("got %v", err)
		}
	})
}

// The undo case: A and B ran and were undone, C failed with its status,
// D was not reached. docs/UNDO.md's wave, as the receipts tell it.
func TestUndoRoundVerifies(t *testing.T) {
	keys, roots := certChain(t, names...)
	envs := signRound(t, keys, "r1", []receipt.Outcome{receipt.Undone, receipt.Undone, receipt.Failed, receipt.NotReached}, nil)
	rs, err := receipt.Verify(envs, receipt.Trust{Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	if rs[2].Status == nil || *rs[2].Status != 3 || rs[0].UndoEnd.IsZero() {
		t.Fatalf("%+v", rs)
	}
}

// Outcomes that cannot happen together fail, naming the node that
// claims what could not be.
func TestOutcomesAgree(t *testing.T) {
	keys, roots := certChain(t, names...)
	o := func(s ...receipt.Outcome) []receipt.Outcome { return s }
	ok := []receipt.Outcome{receipt.RanOK, receipt.RanOK, receipt.Failed, receipt.NotReached}
	for _, tc := range []struct {
		outs []receipt.Outcome
		node string // "" valid
		say  string
	}{
		{ok, "", ""},
		{o(receipt.RanOK, receipt.UndoFailed, receipt.Undone, receipt.TimedOut), "", ""},
		{o(receipt.Denied, receipt.NotReached, receipt.NotReached, receipt.NotReached), "", ""},
		{o(receipt.RanOK, receipt.RanOK, receipt.NotReached, receipt.NotReached), "", ""},
		{o(receipt.Skipped, receipt.RanOK, receipt.RanOK, receipt.RanOK), "", ""},
		{o(receipt.RanOK, receipt.RanOK, receipt.Failed, receipt.RanOK), "D", "D's receipt says ran-ok, but the round stopped at C"},
		{o(receipt.RanOK, receipt.Failed, receipt.Failed, receipt.NotReached), "C", "stopped at B"},
		{o(receipt.RanOK, receipt.Undone, receipt.Failed, receipt.NotReached), "A", "B after it was undone"},
		{o(receipt.Undone, receipt.RanOK, receipt.Failed, receipt.NotReached), "A", "B after it says ran-ok"},
		{o(receipt.Undone, receipt.UndoFailed, receipt.Failed, receipt.NotReached), "A", "B after it says undo-failed"},
		{o(receipt.Undone, receipt.Undone, receipt.RanOK, receipt.RanOK), "B", "no task after it failed"},
		{o(receipt.Undone, receipt.RanOK, receipt.NotReached, receipt.NotReached), "A", "no task after it failed"},
	} {
		envs := signRound(t, keys, "r1", tc.outs, func(r *receipt.Receipt) {
			if r.Outcome == receipt.Denied {
				r.Decisions = []receipt.Decision{{Verdict: receipt.VerdictDenied, By: "ann", At: t0}}
			}
		})
		_, err := receipt.Verify(envs, receipt.Trust{Roots: roots})
		if tc.node == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.outs, err)
			}
			continue
		}
		var re *receipt.Error
		if !errors.As(err, &re) || re.Node != tc.node || re.Rule != receipt.RuleOutcome || !strings.Contains(err.Error(), tc.say) {
			t.Errorf("%v: got %v, want %s named: %q", tc.outs, err, tc.node, tc.say)
		}
	}
}

// An approval at C is in C's receipt: who gave it and when.
func TestApprovalRecorded(t *testing.T) {
	keys, roots := certChain(t, names...)
	at := t0.Add(90 * time.Second)
	envs := signRound(t, keys, "r1", allOK, func(r *receipt.Receipt) {
		if r.Node == "C" {
			r.Decisions = []receipt.Decision{{Verdict: receipt.VerdictApproved, By: "ann", At: at, Reason: "change window open"}}
		}
	})
	rs, err := receipt.Verify(envs, receipt.Trust{Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	d := rs[2].Decisions
	if len(d) != 1 || d[0].By != "ann" || !d[0].At.Equal(at) || d[0].Verdict != receipt.VerdictApproved || len(rs[1].Decisions) != 0 {
		t.Fatalf("C's decisions %+v", d)
	}
}

// A chain without certificates (pre-shared keys) signs with receipt keys
// and verifies with their pins; without them, nothing is trusted.
func TestReceiptKeysWithPins(t *testing.T) {
	keys, pins := edKeys(t, names...)
	envs := signRound(t, keys, "r1", allOK, nil)
	if _, err := receipt.Verify(envs, receipt.Trust{Pins: pins}); err != nil {
		t.Fatal(err)
	}
	for i, e := range envs {
		line, _ := e.Marshal()
		if err := independentVerify(line, keys[names[i]].Public()); err != nil {
			t.Errorf("%s: %v", names[i], err)
		}
	}
	_, roots := certChain(t, "X")
	_, err := receipt.Verify(envs, receipt.Trust{Roots: roots})
	wantErr(t, err, "A", receipt.RuleKey, "without a certificate", "--receipt-pin A=PIN")
	// Ed25519 is deterministic: the same receipt, the same envelope.
	signed := func(r *receipt.Receipt) { r.Signed = receipttest.T0.Add(30 * time.Minute) }
	envs = signRound(t, keys, "r1", allOK, signed)
	again := signRound(t, keys, "r1", allOK, signed)
	a, _ := envs[2].Marshal()
	b, _ := again[2].Marshal()
	if !bytes.Equal(a, b) {
		t.Fatal("two Ed25519 signatures of one receipt differ")
	}
}

// A bundle is written 0600, one envelope a line, and reads back as the
// same bytes; Marshal's bytes are printable ASCII without spaces (they
// travel on the wire as they are).
func TestBundleRoundTrip(t *testing.T) {
	keys, roots := certChain(t, names...)
	envs := signRound(t, keys, "r1", allOK, nil)
	path := filepath.Join(t.TempDir(), "r1.jsonl")
	if err := receipt.WriteBundle(path, envs); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v", fi.Mode(), err)
	}
	data, _ := os.ReadFile(path)
	if n := bytes.Count(data, []byte{'\n'}); n != 4 {
		t.Fatalf("%d lines", n)
	}
	back, err := receipt.ParseBundle(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receipt.Verify(back, receipt.Trust{Roots: roots}); err != nil {
		t.Fatal(err)
	}
	for i := range envs {
		a, _ := envs[i].Marshal()
		b, _ := back[i].Marshal()
		if !bytes.Equal(a, b) {
			t.Fatalf("line %d changed on the way", i+1)
		}
		for _, c := range a {
			if c <= ' ' || c > '~' {
				t.Fatalf("byte %q in an envelope", c)
			}
		}
	}
	if _, err := receipt.ParseBundle(strings.NewReader("{}\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a line that is no envelope: %v", err)
	}
}

// The largest receipt the bounds allow (MaxChain names of 40 bytes,
// MaxDecisions with MaxReason each, a certificate) fits MaxEnvelope; a
// receipt beyond a bound is refused when signed.
func TestBounds(t *testing.T) {
	keys, _ := certChain(t, "n")
	chain := make([]string, receipt.MaxChain)
	for i := range chain {
		chain[i] = fmt.Sprintf("%040d", i)
	}
	chain[1] = "n"
	r := receipt.Receipt{Chain: chain, Settings: strings.Repeat("f", 64), Round: strings.Repeat("r", 128), Attempt: 1e6,
		Node: "n", Place: 2, Outcome: receipt.UndoFailed, Pred: strings.Repeat("a", 64), Signed: t0,
		TaskStart: t0, TaskEnd: t0.Add(time.Nanosecond), UndoStart: t0.Add(time.Second), UndoEnd: t0.Add(2 * time.Second)}
	st := -255
	r.Status = &st
	for range receipt.MaxDecisions {
		r.Decisions = append(r.Decisions, receipt.Decision{Verdict: receipt.VerdictDenied, By: strings.Repeat("b", receipt.MaxBy),
			At: t0.Add(123456789), Reason: strings.Repeat("\\", receipt.MaxReason)})
	}
	e, err := receipt.Sign(keys["n"].Key, keys["n"].Cert, r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := e.Marshal()
	t.Logf("largest receipt: %d bytes (MaxEnvelope %d)", len(b), receipt.MaxEnvelope)
	for _, bad := range []func(*receipt.Receipt){
		func(r *receipt.Receipt) { r.Chain = append(r.Chain, "x") },
		func(r *receipt.Receipt) { r.Decisions = append(r.Decisions, r.Decisions[0]) },
		func(r *receipt.Receipt) { r.Decisions[0].Reason += "x" },
		func(r *receipt.Receipt) { r.Round += "x" },
		func(r *receipt.Receipt) { r.Place = 1 },
		func(r *receipt.Receipt) { r.Outcome = receipt.RanOK },
		func(r *receipt.Receipt) { r.UndoStart = time.Time{} },
		func(r *receipt.Receipt) { r.Pred = "" },
	} {
		c := r
		c.Chain = append([]string(nil), r.Chain...)
		c.Decisions = append([]receipt.Decision(nil), r.Decisions...)
		bad(&c)
		if _, err := receipt.Sign(keys["n"].Key, keys["n"].Cert, c); err == nil {
			t.Errorf("signed a receipt beyond a bound")
		}
	}
}

// The largest envelope travels in the wire's RECEIPT lines, and the
// wire's bound is this package's. docs/PROTOCOL.md, "Receipt lines".
func TestEnvelopeFitsTheWire(t *testing.T) {
	if wire.MaxReceipt != receipt.MaxEnvelope {
		t.Fatalf("wire.MaxReceipt %d, receipt.MaxEnvelope %d", wire.MaxReceipt, receipt.MaxEnvelope)
	}
	keys, _ := certChain(t, names...)
	envs := signRound(t, keys, strings.Repeat("r", 128), allOK, nil)
	b, _ := envs[1].Marshal()
	t.Logf("a receipt of a four-node chain: %d bytes", len(b))
	lines, err := wire.AppendReceipt(nil, strings.Repeat("r", 128), "B", b)
	if err != nil {
		t.Fatal(err)
	}
	var asm wire.ReceiptAssembler
	for l := range bytes.Lines(lines) {
		rl, err := wire.ParseReceiptLine(bytes.TrimSuffix(l, []byte{'\n'}))
		if err != nil {
			t.Fatal(err)
		}
		if env, done, err := asm.Add(*rl.Part); err != nil {
			t.Fatal(err)
		} else if done {
			e, err := receipt.Unmarshal(env)
			if err != nil || e.Digest() != envs[1].Digest() {
				t.Fatalf("%v", err)
			}
			return
		}
	}
	t.Fatal("no envelope came back")
}
