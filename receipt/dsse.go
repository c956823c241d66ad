package receipt

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/chainsync-go/chainsync/secure"
)

// Envelope is a DSSE envelope: a payload, its type, and signatures over
// both (the pre-authentication encoding, PAE).
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     []byte      `json:"payload"` // base64 in JSON
	Signatures  []Signature `json:"signatures"`
}

// Signature is one signature of an envelope. KeyID is a hint: the pin of
// the signing key (sha256//...), which a verifier need not trust.
type Signature struct {
	KeyID string `json:"keyid,omitempty"`
	Sig   []byte `json:"sig"` // base64 in JSON
}

// maxSignatures bounds an envelope's signatures (one is what Sign makes).
const maxSignatures = 4

// PAE is DSSE's pre-authentication encoding of a payload: what is signed.
//
//	"DSSEv1" SP len(type) SP type SP len(body) SP body
//
// with the lengths in ASCII decimal.
func PAE(payloadType string, body []byte) []byte {
	b := make([]byte, 0, 32+len(payloadType)+len(body))
	b = append(b, "DSSEv1 "...)
	b = strconv.AppendInt(b, int64(len(payloadType)), 10)
	b = append(b, ' ')
	b = append(b, payloadType...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, ' ')
	return append(b, body...)
}

// checkKey reports whether pub is a key receipts are signed with: ECDSA
// P-256 (the keys of chainsync certs) or Ed25519 (chainsync keygen).
func checkKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return fmt.Errorf("an ECDSA key on %s: receipts take P-256 or Ed25519", k.Curve.Params().Name)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("a %T key: receipts take ECDSA P-256 or Ed25519", pub)
}

// Sign makes r a signed receipt: it sets r.Signer from cert (the signer's
// certificate, whose key must be key's) or, with cert nil, from key's
// public key; checks r (Receipt.Validate); and signs the statement with
// key over DSSE's PAE. Ed25519 signatures are deterministic, ECDSA ones
// are not: a node that must send the same receipt after a restart keeps
// the envelope it signed (Marshal), not only the receipt.
func Sign(key crypto.Signer, cert *x509.Certificate, r Receipt) (Envelope, error) {
	pub := key.Public()
	if err := checkKey(pub); err != nil {
		return Envelope{}, fmt.Errorf("receipt: signing key: %w", err)
	}
	if cert != nil {
		eq, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
		if !ok || !eq.Equal(pub) {
			return Envelope{}, errors.New("receipt: the certificate is not the signing key's")
		}
		r.Signer = Signer{Certificate: cert.Raw}
	} else {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return Envelope{}, fmt.Errorf("receipt: %w", err)
		}
		r.Signer = Signer{PublicKey: der}
	}
	normalise(&r)
	if err := r.Validate(); err != nil {
		return Envelope{}, fmt.Errorf("receipt: %s's receipt: %w", r.Node, err)
	}
	payload, err := marshalJSON(r.Statement())
	if err != nil {
		return Envelope{}, fmt.Errorf("receipt: %w", err)
	}
	pin, err := secure.PinOfKey(pub)
	if err != nil {
		return Envelope{}, fmt.Errorf("receipt: %w", err)
	}
	msg := PAE(PayloadType, payload)
	var sig []byte
	if _, ok := pub.(ed25519.PublicKey); ok {
		sig, err = key.Sign(rand.Reader, msg, crypto.Hash(0))
	} else {
		h := sha256.Sum256(msg)
		sig, err = key.Sign(rand.Reader, h[:], crypto.SHA256)
	}
	if err != nil {
		return Envelope{}, fmt.Errorf("receipt: signing: %w", err)
	}
	e := Envelope{PayloadType: PayloadType, Payload: payload, Signatures: []Signature{{KeyID: pin, Sig: sig}}}
	if b, err := e.Marshal(); err != nil {
		return Envelope{}, err
	} else if len(b) > MaxEnvelope {
		return Envelope{}, fmt.Errorf("receipt: %s's receipt is %d bytes, more than %d", r.Node, len(b), MaxEnvelope)
	}
	return e, nil
}

// normalise puts r's times in UTC without a monotonic reading, so that
// the payload says what the receipt holds and nothing else.
func normalise(r *Receipt) {
	for _, t := range []*time.Time{&r.TaskStart, &r.TaskEnd, &r.UndoStart, &r.UndoEnd, &r.Signed} {
		if !t.IsZero() {
			*t = t.UTC().Round(0)
		}
	}
	for i := range r.Decisions {
		r.Decisions[i].At = r.Decisions[i].At.UTC().Round(0)
	}
}

// marshalJSON encodes v as compact JSON without HTML escaping.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}

// Marshal encodes e as one line of compact JSON (without a line end): the
// bytes a node keeps and sends, and a bundle's line. They are printable
// ASCII without spaces.
func (e Envelope) Marshal() ([]byte, error) {
	b, err := marshalJSON(e)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	return b, nil
}

// Unmarshal decodes an envelope as Marshal writes it: at most MaxEnvelope
// bytes of JSON with exactly the envelope's fields, the in-toto payload
// type, and one to four signatures. It does not verify them.
func Unmarshal(b []byte) (Envelope, error) {
	var e Envelope
	if len(b) > MaxEnvelope {
		return e, fmt.Errorf("receipt: an envelope of %d bytes (at most %d)", len(b), MaxEnvelope)
	}
	if err := decodeStrict(b, &e); err != nil {
		return Envelope{}, fmt.Errorf("receipt: not a DSSE envelope: %w", err)
	}
	switch {
	case e.PayloadType != PayloadType:
		return Envelope{}, fmt.Errorf("receipt: payload type %q, not %s", e.PayloadType, PayloadType)
	case len(e.Payload) == 0:
		return Envelope{}, errors.New("receipt: an envelope without a payload")
	case len(e.Signatures) == 0 || len(e.Signatures) > maxSignatures:
		return Envelope{}, fmt.Errorf("receipt: an envelope with %d signatures (1 to %d)", len(e.Signatures), maxSignatures)
	}
	for _, s := range e.Signatures {
		if len(s.Sig) == 0 {
			return Envelope{}, errors.New("receipt: an empty signature")
		}
	}
	return e, nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// anything after the value.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}

// Digest is the SHA-256 of e's payload, as signed, in lower-case hex: what
// the successor's receipt binds as Pred.
func (e Envelope) Digest() string {
	sum := sha256.Sum256(e.Payload)
	return hex.EncodeToString(sum[:])
}

// Open decodes e's statement and checks that it is a well-formed receipt
// (Receipt.Validate). It does not verify the signature: Verify does.
func (e Envelope) Open() (Statement, error) {
	var st Statement
	if err := decodeStrict(e.Payload, &st); err != nil {
		return Statement{}, fmt.Errorf("the payload is not a receipt statement: %w", err)
	}
	switch {
	case st.Type != StatementType:
		return Statement{}, fmt.Errorf("statement type %q, not %s", st.Type, StatementType)
	case st.PredicateType != PredicateType:
		return Statement{}, fmt.Errorf("predicate type %q, not %s", st.PredicateType, PredicateType)
	}
	if err := st.Predicate.Validate(); err != nil {
		return Statement{}, fmt.Errorf("%s's receipt: %w", st.Predicate.Node, err)
	}
	want := st.Predicate.subject()
	if len(st.Subject) != 1 || st.Subject[0].Name != want.Name || len(st.Subject[0].Digest) != 1 ||
		st.Subject[0].Digest["sha256"] != want.Digest["sha256"] {
		return Statement{}, fmt.Errorf("%s's receipt: its subject is not the round its predicate names", st.Predicate.Node)
	}
	return st, nil
}

// key returns the key s names, and the certificate if it came
// with one.
func (s Signer) key() (crypto.PublicKey, *x509.Certificate, error) {
	switch {
	case len(s.Certificate) > 0 && len(s.PublicKey) > 0:
		return nil, nil, errors.New("the signer is given both as a certificate and as a key")
	case len(s.Certificate) > 0:
		c, err := x509.ParseCertificate(s.Certificate)
		if err != nil {
			return nil, nil, fmt.Errorf("the signer's certificate: %w", err)
		}
		return c.PublicKey, c, checkKey(c.PublicKey)
	case len(s.PublicKey) > 0:
		k, err := x509.ParsePKIXPublicKey(s.PublicKey)
		if err != nil {
			return nil, nil, fmt.Errorf("the signer's key: %w", err)
		}
		return k, nil, checkKey(k)
	}
	return nil, nil, errors.New("no signer")
}

// VerifySignature reports whether one of e's signatures verifies with pub
// over DSSE's PAE (ECDSA: ASN.1 over SHA-256; Ed25519: over the PAE).
func (e Envelope) VerifySignature(pub crypto.PublicKey) bool {
	msg := PAE(e.PayloadType, e.Payload)
	h := sha256.Sum256(msg)
	for _, s := range e.Signatures {
		switch k := pub.(type) {
		case *ecdsa.PublicKey:
			if ecdsa.VerifyASN1(k, h[:], s.Sig) {
				return true
			}
		case ed25519.PublicKey:
			if ed25519.Verify(k, msg, s.Sig) {
				return true
			}
		}
	}
	return false
}
