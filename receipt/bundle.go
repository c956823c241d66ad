package receipt

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/chainsync-go/chainsync/secure"
)

// ParseBundle reads a bundle: one envelope a line, as Marshal writes it
// (JSON Lines). Blank lines are skipped. A line that is not an envelope
// is an error naming its line.
func ParseBundle(r io.Reader) ([]Envelope, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxEnvelope+2)
	var out []Envelope
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		e, err := Unmarshal(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, e)
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return nil, fmt.Errorf("line %d: longer than %d bytes: not an envelope", len(out)+1, MaxEnvelope)
	}
	return out, sc.Err()
}

// AppendBundle appends envs to dst as a bundle: one envelope a line.
func AppendBundle(dst []byte, envs []Envelope) ([]byte, error) {
	for _, e := range envs {
		b, err := e.Marshal()
		if err != nil {
			return nil, err
		}
		dst = append(append(dst, b...), '\n')
	}
	return dst, nil
}

// WriteBundle writes envs to path as a bundle, mode 0600, replacing the
// file whole: a reader sees the old bundle or the new one, never a part.
func WriteBundle(path string, envs []Envelope) error {
	data, err := AppendBundle(nil, envs)
	if err != nil {
		return err
	}
	return secure.WritePrivateFile(path, data, true)
}

// LoadKey reads a signing key from a PEM file: a PKCS #8 "PRIVATE KEY"
// (as chainsync keygen and chainsync certs write them) or an "EC PRIVATE
// KEY", ECDSA P-256 or Ed25519.
func LoadKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, fmt.Errorf("%s: no PEM private key found (expected -----BEGIN PRIVATE KEY-----)", path)
		}
		var k any
		switch b.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(b.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s: a %T cannot sign", path, k)
		}
		if err := checkKey(s.Public()); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return s, nil
	}
}
