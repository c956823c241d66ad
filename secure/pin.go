package secure

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// pinPrefix starts every pin: curl's --pinnedpubkey form.
const pinPrefix = "sha256//"

// pinHowTo tells an operator how to compute a pin by hand.
const pinHowTo = "a pin is sha256// followed by the base64 SHA-256 of the certificate's DER public key, " +
	"as printed by `chainsync certs`, or computed with: openssl x509 -in CERT.pem -pubkey -noout | " +
	"openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | openssl enc -base64"

// PinOf returns the pin of a certificate's public key:
// "sha256//" + base64(SHA-256(DER SubjectPublicKeyInfo)), the form curl's
// --pinnedpubkey and HPKP use. The pin survives re-issuing a certificate
// for the same key.
func PinOf(cert *x509.Certificate) string {
	return pinOfSPKI(cert.RawSubjectPublicKeyInfo)
}

// pinOfSPKI returns the pin of a DER SubjectPublicKeyInfo.
func pinOfSPKI(der []byte) string {
	sum := sha256.Sum256(der)
	return pinPrefix + base64.StdEncoding.EncodeToString(sum[:])
}

// PinFile returns the pin ([PinOf]) of the first certificate in a PEM file.
func PinFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	cert, err := firstCert(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return PinOf(cert), nil
}

// firstCert parses the first CERTIFICATE block of PEM data.
func firstCert(data []byte) (*x509.Certificate, error) {
	sawKey := false
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
		if strings.Contains(block.Type, "PRIVATE KEY") {
			sawKey = true
		}
	}
	if sawKey {
		return nil, errors.New("holds a private key, not a certificate (expected -----BEGIN CERTIFICATE-----)")
	}
	return nil, errors.New("no PEM certificate found (expected -----BEGIN CERTIFICATE-----)")
}

// parsePins parses one or more pins joined by ';' (curl allows that too, and
// it lets an operator roll a neighbour's key without downtime).
func parsePins(flag, s string) ([]string, error) {
	var pins []string
	for p := range strings.SplitSeq(s, ";") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		b64, ok := strings.CutPrefix(p, pinPrefix)
		if !ok {
			return nil, fmt.Errorf("%s %q: not a pin: %s", flag, p, pinHowTo)
		}
		sum, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("%s %q: not a SHA-256 pin (the part after sha256// must be 44 characters of base64): %s", flag, p, pinHowTo)
		}
		pins = append(pins, p)
	}
	if len(pins) == 0 {
		return nil, fmt.Errorf("%s is empty: %s", flag, pinHowTo)
	}
	return pins, nil
}

// checkPin returns a *pinError unless cert's key matches one of pins.
func checkPin(cert *x509.Certificate, pins []string) error {
	got := PinOf(cert)
	if slices.Contains(pins, got) {
		return nil
	}
	return &pinError{got: got, want: pins}
}

// positionError is returned by the VerifyConnection callbacks when the
// peer's certificate names another node of the chain.
type positionError struct{ detail string }

func (e *positionError) Error() string { return e.detail }

// checkPosition refuses a neighbour's certificate whose common name is a
// node of the chain other than want (the expected neighbour's name).
func (c *Config) checkPosition(cert *x509.Certificate, want, role string) error {
	cn := cert.Subject.CommonName
	if want == "" || cn == want || !slices.Contains(c.opts.ChainNames, cn) {
		return nil
	}
	if cn == c.opts.SelfName {
		return &positionError{fmt.Sprintf("the %s's certificate is this node's own (%q): the connection looped back to this node, instead of reaching %q", role, cn, want)}
	}
	return &positionError{fmt.Sprintf("the %s's certificate is that of chain node %q, not of %q: the connection was redirected to the wrong node, or --chain differs between the nodes", role, cn, want)}
}
