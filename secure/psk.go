package secure

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Constants of the PSK proof exchange; the design is in the package
// documentation (doc.go, "Pre-shared keys") and DESIGN.md.
const (
	pskExporterLabel = "EXPORTER-chainsync-psk"
	pskMACLabel      = "chainsync psk proof v1"
	pskLinePrefix    = "CHAINSYNC-PSK1 "
	pskReject        = "REJECT"
	maxProofLine     = 128
)

// proof computes this session's proof for role.
func (c *Config) proof(tc *tls.Conn, role string) ([]byte, error) {
	cs := tc.ConnectionState()
	ekm, err := cs.ExportKeyingMaterial(pskExporterLabel, nil, sha256.Size)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, c.psk)
	m.Write([]byte(pskMACLabel))
	m.Write([]byte{0})
	m.Write([]byte(role))
	m.Write([]byte{0})
	m.Write(ekm)
	return m.Sum(nil), nil
}

// proveClient runs the dialing side of the exchange.
func (c *Config) proveClient(tc *tls.Conn) error {
	mine, err := c.proof(tc, "client")
	if err != nil {
		return err
	}
	if _, err := io.WriteString(tc, pskLinePrefix+hex.EncodeToString(mine)+"\n"); err != nil {
		return &pskError{reason: ReasonNoPSKProof, detail: "could not send this node's PSK proof: " + err.Error(), err: err}
	}
	line, err := readProofLine(tc)
	if err != nil {
		return &pskError{reason: ReasonNoPSKProof, err: err,
			detail: "successor sent no PSK proof (" + err.Error() + "): is --psk-file set on the successor too?"}
	}
	want, err := c.proof(tc, "server")
	if err != nil {
		return err
	}
	got, status := parseProof(line)
	switch {
	case status == pskReject:
		return &pskError{reason: ReasonPSKMismatch, detail: "successor rejected this node's PSK proof: the --psk-file keys differ"}
	case got == nil:
		return &pskError{reason: ReasonNoPSKProof, detail: fmt.Sprintf("successor sent %q instead of a PSK proof: is --psk-file set on the successor too?", line)}
	case !hmac.Equal(got, want):
		return &pskError{reason: ReasonPSKMismatch, detail: "successor's PSK proof is wrong: the --psk-file keys differ"}
	}
	return nil
}

// proveServer runs the accepting side of the exchange.
func (c *Config) proveServer(tc *tls.Conn) error {
	line, err := readProofLine(tc)
	if err != nil {
		return &pskError{reason: ReasonNoPSKProof, err: err,
			detail: "predecessor sent no PSK proof (" + err.Error() + "): is --psk-file set on the predecessor too?"}
	}
	want, err := c.proof(tc, "client")
	if err != nil {
		return err
	}
	got, _ := parseProof(line)
	switch {
	case got == nil:
		return &pskError{reason: ReasonNoPSKProof, detail: fmt.Sprintf("predecessor sent %q instead of a PSK proof: is --psk-file set on the predecessor too?", line)}
	case !hmac.Equal(got, want):
		// Tell the peer, so its log names the problem; then close.
		_, _ = io.WriteString(tc, pskLinePrefix+pskReject+"\n")
		return &pskError{reason: ReasonPSKMismatch, detail: "the predecessor's --psk-file key differs from this node's"}
	}
	mine, err := c.proof(tc, "server")
	if err != nil {
		return err
	}
	if _, err := io.WriteString(tc, pskLinePrefix+hex.EncodeToString(mine)+"\n"); err != nil {
		return &pskError{reason: ReasonNoPSKProof, detail: "could not send this node's PSK proof: " + err.Error(), err: err}
	}
	return nil
}

// readProofLine reads one LF-terminated line, one byte at a time so that no
// protocol byte after it is consumed. The line is returned without LF.
func readProofLine(r io.Reader) (string, error) {
	var buf [maxProofLine]byte
	for n := 0; n < len(buf); n++ {
		if _, err := io.ReadFull(r, buf[n:n+1]); err != nil {
			if n > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return string(buf[:n]), err
		}
		if buf[n] == '\n' {
			return string(buf[:n]), nil
		}
	}
	return "", fmt.Errorf("proof line longer than %d bytes", maxProofLine)
}

// parseProof returns the proof in line, or nil and the status word
// (pskReject) if it carries none.
func parseProof(line string) ([]byte, string) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\r"), pskLinePrefix)
	if !ok {
		return nil, ""
	}
	p, err := hex.DecodeString(rest)
	if err != nil || len(p) != sha256.Size {
		return nil, rest
	}
	return p, ""
}
