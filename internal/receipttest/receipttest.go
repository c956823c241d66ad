// Package receipttest signs rounds of receipts for tests, and checks an
// envelope as an independent DSSE implementation would: for the tests of
// package receipt, of the wire's receipt lines and of chainsync receipts.
package receipttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/receipt"
)

// Signer is one node's key, and its certificate if it has one.
type Signer struct {
	Key  crypto.Signer
	Cert *x509.Certificate
}

// Public returns the signer's public key.
func (s Signer) Public() crypto.PublicKey { return s.Key.Public() }

// LoadCerts reads the keys and certificates chainsync certs wrote in dir
// for names (NAME-key.pem, NAME.pem).
func LoadCerts(t testing.TB, dir string, names ...string) map[string]Signer {
	t.Helper()
	out := map[string]Signer{}
	for _, n := range names {
		key, err := receipt.LoadKey(filepath.Join(dir, n+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = Signer{Key: key, Cert: ReadCert(t, filepath.Join(dir, n+".pem"))}
	}
	return out
}

// ReadCert reads the first certificate of a PEM file.
func ReadCert(t testing.TB, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// T0 is when the rounds Base describes begin: the start of the hour
// before the current one, so that every task and undo time Base gives
// (within T0's first 11 minutes) is in the past and shares one date and
// hour (Hour) that tests can match.
var T0 = time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)

// Hour is T0's date and hour as receipts spell their times
// ("2006-01-02T15:"), for tests that match the minutes and seconds.
var Hour = T0.Format("2006-01-02T15:")

// Base is the receipt of node i of chain for round, with outcome o and
// the times (and exit status 3, for a failure) that o needs: task i
// starts i minutes after T0 and lasts 30s; undo i runs 10-i minutes
// after T0 (the last first). The receipt is signed now: certificates
// that chainsync certs makes before it (dated an hour back) are valid
// then, whenever the tests run (a fixed signing time fell before the
// certificates' start when the hour changed between the two).
func Base(chain []string, i int, round string, o receipt.Outcome) receipt.Receipt {
	r := receipt.Receipt{Chain: chain, Settings: "69e51a080b5ec448", Round: round, Attempt: 1,
		Node: chain[i], Place: i + 1, Outcome: o, Signed: time.Now().UTC().Truncate(time.Millisecond)}
	start := T0.Add(time.Duration(i) * time.Minute)
	switch o {
	case receipt.RanOK, receipt.Failed, receipt.TimedOut, receipt.Undone, receipt.UndoFailed:
		r.TaskStart, r.TaskEnd = start, start.Add(30*time.Second)
	}
	switch o {
	case receipt.Undone, receipt.UndoFailed:
		u := T0.Add(time.Duration(10-i) * time.Minute)
		r.UndoStart, r.UndoEnd = u, u.Add(time.Second)
	}
	if o == receipt.Failed {
		st := 3
		r.Status = &st
	}
	return r
}

// SignRound signs a round's receipts in chain order, each binding the one
// before it; edit, if set, changes a receipt before it is signed.
func SignRound(t testing.TB, keys map[string]Signer, chain []string, round string, outs []receipt.Outcome, edit func(*receipt.Receipt)) []receipt.Envelope {
	t.Helper()
	var envs []receipt.Envelope
	pred := ""
	for i, o := range outs {
		r := Base(chain, i, round, o)
		r.Pred = pred
		if edit != nil {
			edit(&r)
		}
		k := keys[r.Node]
		e, err := receipt.Sign(k.Key, k.Cert, r)
		if err != nil {
			t.Fatalf("%s: %v", r.Node, err)
		}
		envs = append(envs, e)
		pred = e.Digest()
	}
	return envs
}

// IndependentVerify checks an envelope as another DSSE implementation
// would, from the JSON text and the node's public key, with nothing of
// package receipt: PAE = "DSSEv1" SP len(type) SP type SP len(body) SP
// body; ECDSA P-256 ASN.1 signatures over its SHA-256, Ed25519 over it.
func IndependentVerify(line []byte, pub crypto.PublicKey) error {
	var env struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
		Signatures  []struct {
			Sig string `json:"sig"`
		} `json:"signatures"`
	}
	if err := json.Unmarshal(line, &env); err != nil {
		return err
	}
	body, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return err
	}
	pae := fmt.Sprintf("DSSEv1 %d %s %d %s", len(env.PayloadType), env.PayloadType, len(body), body)
	h := sha256.Sum256([]byte(pae))
	for _, s := range env.Signatures {
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err != nil {
			return err
		}
		switch k := pub.(type) {
		case *ecdsa.PublicKey:
			if ecdsa.VerifyASN1(k, h[:], sig) {
				return nil
			}
		case ed25519.PublicKey:
			if ed25519.Verify(k, []byte(pae), sig) {
				return nil
			}
		}
	}
	return errors.New("no signature verifies")
}
