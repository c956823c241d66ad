package secure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
)

// Reason is the category of a refusal, for callers that react differently
// (count, alert, back off) and for the log line.
type Reason string

// The reasons a connection is refused. The string is the log text.
const (
	// ReasonNotTLS: the peer did not speak TLS (a plaintext ChainSync node,
	// a port scanner). Detail quotes its first bytes.
	ReasonNotTLS Reason = "not TLS"
	// ReasonOldTLS: the peer offered or chose only TLS 1.2 or older.
	ReasonOldTLS Reason = "TLS version too old"
	// ReasonNoClientCert: a predecessor that must authenticate sent no
	// certificate.
	ReasonNoClientCert Reason = "no client certificate"
	// ReasonUntrusted: the peer's certificate does not chain to --tls-ca.
	ReasonUntrusted Reason = "certificate not signed by CA"
	// ReasonBadCert: the certificate chains to the CA but is unusable:
	// expired, not yet valid, or lacking the needed key usage.
	ReasonBadCert Reason = "certificate not valid"
	// ReasonWrongName: the successor's certificate does not carry the name
	// that was dialed (or --tls-server-name).
	ReasonWrongName Reason = "certificate name mismatch"
	// ReasonWrongPin: the peer's public key does not hash to the pin.
	ReasonWrongPin Reason = "wrong pin"
	// ReasonPSKMismatch: the peer's PSK proof is wrong, or the peer
	// rejected this node's: the two --psk-file keys differ.
	ReasonPSKMismatch Reason = "PSK proof mismatch"
	// ReasonWrongPosition: the peer proved the PSK, or showed a valid
	// certificate, but for another position of the chain: a connection
	// redirected to the wrong node, or looped back to this node itself.
	// Detail names both positions.
	ReasonWrongPosition Reason = "position mismatch"
	// ReasonNoPSKProof: the peer completed TLS but sent no PSK proof
	// (it probably runs without --psk-file).
	ReasonNoPSKProof Reason = "no PSK proof"
	// ReasonTimeout: the handshake (TLS and PSK proof) did not finish
	// before the context's deadline.
	ReasonTimeout Reason = "handshake timed out"
	// ReasonRejectedByPeer: the peer sent a TLS alert: it refused this node
	// (typically this node's certificate).
	ReasonRejectedByPeer Reason = "rejected by peer"
	// ReasonHandshake: any other TLS handshake failure.
	ReasonHandshake Reason = "TLS handshake failed"
)

// Roles of the peer in a [RefusedError].
const (
	// RolePredecessor marks errors from [Config.Server]: the peer wanted to
	// be this node's predecessor.
	RolePredecessor = "predecessor"
	// RoleSuccessor marks errors from [Config.Client] and from reads on the
	// connection it returned.
	RoleSuccessor = "successor"
)

// RefusedError reports a peer refused by [Config.Client] or [Config.Server]
// (or a refusal by the peer, [ReasonRejectedByPeer]). Use errors.As to get it.
type RefusedError struct {
	Peer   string // the peer's address, host:port
	Role   string // RolePredecessor or RoleSuccessor
	Reason Reason // category
	Detail string // what exactly, and a hint what to check; may be empty
	Err    error  // underlying error, may be nil
}

// Error returns "refused peer ADDR: REASON (DETAIL)", or for
// [ReasonRejectedByPeer] "peer ADDR refused this node (DETAIL)".
func (e *RefusedError) Error() string {
	var b strings.Builder
	if e.Reason == ReasonRejectedByPeer {
		fmt.Fprintf(&b, "peer %s refused this node", e.Peer)
	} else {
		fmt.Fprintf(&b, "refused peer %s: %s", e.Peer, e.Reason)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *RefusedError) Unwrap() error { return e.Err }

// pinError is returned by the VerifyConnection callbacks when the peer's key
// does not match the pin.
type pinError struct {
	got  string
	want []string
}

func (e *pinError) Error() string {
	return fmt.Sprintf("got %s, want %s", e.got, strings.Join(e.want, " or "))
}

// errNoClientCert is returned by the server's VerifyConnection when a
// required client certificate is missing. (crypto/tls's own check returns an
// untyped error; doing it ourselves keeps the classification exact.)
var errNoClientCert = errors.New("secure: no client certificate")

// pskError carries a classified PSK failure out of the proof exchange.
type pskError struct {
	reason Reason
	detail string
	err    error
}

func (e *pskError) Error() string { return string(e.reason) + ": " + e.detail }
func (e *pskError) Unwrap() error { return e.err }

// TLS alert numbers (RFC 8446 section 6) that the classification needs.
const (
	alertProtocolVersion = 70
)

// classify turns a handshake error into a RefusedError. rec holds what the
// peer sent first; ctx is the handshake context (its error tells a timeout).
func (c *Config) classify(ctx context.Context, err error, rec *recorder, role, peer string) error {
	if ctx.Err() == context.Canceled {
		return fmt.Errorf("secure: handshake with %s %s canceled: %w", role, peer, ctx.Err())
	}
	r := &RefusedError{Peer: peer, Role: role, Err: err}
	first, versions := rec.snapshot()
	var (
		pe   *pinError
		pske *pskError
		cve  *tls.CertificateVerificationError
		rhe  tls.RecordHeaderError
		ope  *net.OpError
	)
	var pose *positionError
	switch {
	case errors.As(err, &pe):
		r.Reason, r.Detail = ReasonWrongPin, pe.Error()
	case errors.As(err, &pose):
		r.Reason, r.Detail = ReasonWrongPosition, pose.Error()
	case errors.Is(err, errNoClientCert):
		r.Reason = ReasonNoClientCert
		r.Detail = "this node requires one: give the predecessor --tls-cert and --tls-key"
	case errors.As(err, &pske):
		r.Reason, r.Detail = pske.reason, pske.detail
		if pske.err != nil && isRemoteAlert(pske.err, &ope) {
			// A TLS 1.3 client learns only now that the server refused
			// its certificate.
			return c.rejected(r, ope)
		}
	case errors.As(err, &cve):
		c.classifyVerify(r, cve)
	case errors.As(err, &rhe) || (len(first) > 0 && first[0] != recordHandshake && first[0] != recordAlert):
		r.Reason = ReasonNotTLS
		r.Detail = fmt.Sprintf("plaintext? first bytes %q", first)
	case role == RolePredecessor && len(versions) > 0 && !slices.Contains(versions, tls.VersionTLS13):
		r.Reason = ReasonOldTLS
		r.Detail = "peer offers only " + versionList(versions) + "; TLS 1.3 is required"
	case isRemoteAlert(err, &ope):
		return c.rejected(r, ope)
	case ctx.Err() != nil || isTimeout(err):
		r.Reason, r.Err = ReasonTimeout, context.DeadlineExceeded
		r.Detail = "not completed in time: a peer must finish the handshake promptly"
	case strings.Contains(err.Error(), "unsupported protocol version"):
		// Only our client sees this: the successor chose TLS 1.2 or
		// older. crypto/tls has no typed error for it.
		r.Reason = ReasonOldTLS
		r.Detail = "successor does not speak TLS 1.3: " + err.Error()
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		r.Reason = ReasonHandshake
		r.Detail = "peer closed the connection during the handshake: does it run TLS, and does it trust this node?"
	default:
		r.Reason, r.Detail = ReasonHandshake, err.Error()
	}
	return r
}

// classifyVerify fills r from a certificate verification failure.
func (c *Config) classifyVerify(r *RefusedError, cve *tls.CertificateVerificationError) {
	var subject string
	if len(cve.UnverifiedCertificates) > 0 {
		subject = "; peer certificate " + certSummary(cve.UnverifiedCertificates[0])
	}
	var (
		uae x509.UnknownAuthorityError
		hne x509.HostnameError
		cie x509.CertificateInvalidError
	)
	switch {
	case errors.As(cve.Err, &uae):
		r.Reason = ReasonUntrusted
		r.Detail = "trusted: " + c.caName() + subject
	case errors.As(cve.Err, &hne):
		r.Reason = ReasonWrongName
		r.Detail = hne.Error() + subject + "; set --tls-server-name or regenerate the certificate with the right host"
	case errors.As(cve.Err, &cie):
		r.Reason = ReasonBadCert
		r.Detail = cie.Error() + subject
	default:
		r.Reason = ReasonBadCert
		r.Detail = cve.Err.Error() + subject
	}
}

// rejected fills r for a TLS alert received from the peer.
func (c *Config) rejected(r *RefusedError, ope *net.OpError) error {
	alert := ope.Err.Error()
	if alert == tls.AlertError(alertProtocolVersion).Error() {
		r.Reason = ReasonOldTLS
		r.Detail = "peer does not speak TLS 1.3; remote error: " + alert
		return r
	}
	r.Reason = ReasonRejectedByPeer
	r.Detail = "remote error: " + alert
	if r.Role == RoleSuccessor {
		r.Detail += ": check that this node's certificate is signed by the successor's --tls-ca or matches its --pin-prev"
	} else {
		r.Detail += ": check that this node's certificate is signed by the predecessor's --tls-ca or matches its --pin-next, and its name"
	}
	return r
}

// isRemoteAlert reports whether err is a TLS alert sent by the peer.
func isRemoteAlert(err error, ope **net.OpError) bool {
	return errors.As(err, ope) && (*ope).Op == "remote error"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func (c *Config) caName() string {
	if c.opts.CAFile != "" {
		return "--tls-ca " + c.opts.CAFile
	}
	return "a CA trusted by this system"
}

// certSummary names a certificate for a log line.
func certSummary(cert *x509.Certificate) string {
	s := fmt.Sprintf("subject %q issuer %q", cert.Subject.String(), cert.Issuer.String())
	return s + ", " + PinOf(cert)
}

func versionList(vs []uint16) string {
	names := make([]string, 0, len(vs))
	for _, v := range vs {
		names = append(names, tls.VersionName(v))
	}
	return strings.Join(names, ", ")
}
