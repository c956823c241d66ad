package secure

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
)

// Constants of the PSK proof exchange; the design is in the package
// documentation (doc.go, "Pre-shared keys") and DESIGN.md.
const (
	pskExporterLabel = "EXPORTER-chainsync-psk"
	pskMACLabel      = "chainsync psk proof v2"
	pskLinePrefix    = "CHAINSYNC-PSK2 "
	pskReject        = "REJECT"
	pskRejectPos     = "REJECT-POSITION"
	maxProofLine     = 2048
)

// Roles inside the MAC: whose proof it is.
const (
	macClient    = "client"
	macServer    = "server"
	macRejectPos = "reject-position"
)

// proof computes this session's MAC for role over the link from dialer
// (the predecessor) to listener (the successor).
func (c *Config) proof(tc *tls.Conn, role, dialer, listener string) ([]byte, error) {
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
	for _, name := range []string{dialer, listener} {
		m.Write(binary.BigEndian.AppendUint16(nil, uint16(len(name))))
		m.Write([]byte(name))
	}
	m.Write(ekm)
	return m.Sum(nil), nil
}

// orNone shows an empty name in a log line.
func orNone(name string) string {
	if name == "" {
		return "(none)"
	}
	return strconv.Quote(name)
}

// proveClient runs the dialing side of the exchange: this node (SelfName)
// dials its successor (NextName).
func (c *Config) proveClient(tc *tls.Conn) error {
	self, next := c.opts.SelfName, c.opts.NextName
	mine, err := c.proof(tc, macClient, self, next)
	if err != nil {
		return err
	}
	line := pskLinePrefix + url.PathEscape(self) + " " + url.PathEscape(next) + " " + hex.EncodeToString(mine) + "\n"
	if _, err := io.WriteString(tc, line); err != nil {
		return &pskError{reason: ReasonNoPSKProof, detail: "could not send this node's PSK proof: " + err.Error(), err: err}
	}
	reply, err := readProofLine(tc)
	if err != nil {
		return &pskError{reason: ReasonNoPSKProof, err: err,
			detail: "successor sent no PSK proof (" + err.Error() + "): is --psk-file set on the successor too?"}
	}
	fields, ok := splitProofLine(reply)
	switch {
	case ok && len(fields) == 1 && fields[0] == pskReject:
		return &pskError{reason: ReasonPSKMismatch, detail: "successor rejected this node's PSK proof: the --psk-file keys differ"}
	case ok && len(fields) == 4 && fields[0] == pskRejectPos:
		prev, who, okNames := unescape2(fields[1], fields[2])
		got, _ := hex.DecodeString(fields[3])
		want, err := c.proof(tc, macRejectPos, prev, who)
		if err != nil {
			return err
		}
		if !okNames || !hmac.Equal(got, want) {
			return &pskError{reason: ReasonPSKMismatch, detail: "successor refused this node's position, but its refusal carries no valid proof of the key"}
		}
		if who == self {
			return &pskError{reason: ReasonWrongPosition, detail: fmt.Sprintf(
				"the node that answered is this node itself (%s): its connection to its successor %s was looped back to its own listener; check what answers at the successor's address",
				orNone(self), orNone(next))}
		}
		return &pskError{reason: ReasonWrongPosition, detail: fmt.Sprintf(
			"the node that answered is %s, whose predecessor is %s, not this node's successor %s: the connection was redirected to another node of the chain, or --chain differs between the nodes",
			orNone(who), orNone(prev), orNone(next))}
	case ok && len(fields) == 1:
		got, err := hex.DecodeString(fields[0])
		if err != nil || len(got) != sha256.Size {
			break
		}
		want, err := c.proof(tc, macServer, self, next)
		if err != nil {
			return err
		}
		if !hmac.Equal(got, want) {
			return &pskError{reason: ReasonPSKMismatch, detail: "successor's PSK proof is wrong: the --psk-file keys differ"}
		}
		return nil
	}
	return &pskError{reason: ReasonNoPSKProof, detail: fmt.Sprintf("successor sent %q instead of a PSK proof: is --psk-file set on the successor too, and does it run the same version?", reply)}
}

// proveServer runs the accepting side of the exchange: this node
// (SelfName) accepts its predecessor (PrevName).
func (c *Config) proveServer(tc *tls.Conn) error {
	prev, self := c.opts.PrevName, c.opts.SelfName
	line, err := readProofLine(tc)
	if err != nil {
		return &pskError{reason: ReasonNoPSKProof, err: err,
			detail: "predecessor sent no PSK proof (" + err.Error() + "): is --psk-file set on the predecessor too?"}
	}
	fields, ok := splitProofLine(line)
	var dialer, listener string
	var got []byte
	if ok && len(fields) == 3 {
		var okNames bool
		dialer, listener, okNames = unescape2(fields[0], fields[1])
		got, err = hex.DecodeString(fields[2])
		if !okNames || err != nil || len(got) != sha256.Size {
			got = nil
		}
	}
	if got == nil {
		return &pskError{reason: ReasonNoPSKProof, detail: fmt.Sprintf("predecessor sent %q instead of a PSK proof: is --psk-file set on the predecessor too, and does it run the same version?", line)}
	}
	// The MAC is checked over the names the peer claims, so that a peer
	// with the right key in the wrong place is told from a wrong key.
	want, err := c.proof(tc, macClient, dialer, listener)
	if err != nil {
		return err
	}
	if !hmac.Equal(got, want) {
		// Tell the peer, so its log names the problem; then close.
		_, _ = io.WriteString(tc, pskLinePrefix+pskReject+"\n")
		return &pskError{reason: ReasonPSKMismatch, detail: "the predecessor's --psk-file key differs from this node's"}
	}
	if dialer != prev || listener != self {
		rej, err := c.proof(tc, macRejectPos, prev, self)
		if err != nil {
			return err
		}
		_, _ = io.WriteString(tc, pskLinePrefix+pskRejectPos+" "+url.PathEscape(prev)+" "+url.PathEscape(self)+" "+hex.EncodeToString(rej)+"\n")
		if dialer == self {
			return &pskError{reason: ReasonWrongPosition, detail: fmt.Sprintf(
				"the peer is this node itself (%s dialing its successor %s): its connection to the successor was looped back to its own listener",
				orNone(dialer), orNone(listener))}
		}
		return &pskError{reason: ReasonWrongPosition, detail: fmt.Sprintf(
			"the peer knows the key but is %s dialing its successor %s, while this node is %s and its predecessor is %s: the connection was redirected to the wrong node, or --chain differs between the nodes",
			orNone(dialer), orNone(listener), orNone(self), orNone(prev))}
	}
	mine, err := c.proof(tc, macServer, prev, self)
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

// splitProofLine returns the space-separated fields after the line
// prefix, or false if line does not start with it.
func splitProofLine(line string) ([]string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\r"), pskLinePrefix)
	if !ok {
		return nil, false
	}
	return strings.Split(rest, " "), true
}

// unescape2 decodes two names sent in a proof line.
func unescape2(a, b string) (string, string, bool) {
	x, err1 := url.PathUnescape(a)
	y, err2 := url.PathUnescape(b)
	return x, y, err1 == nil && err2 == nil
}
