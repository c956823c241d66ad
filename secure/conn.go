package secure

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync/internal/rawio"
)

// TLS record content types (RFC 8446 section 5.1) a TLS peer starts with.
const (
	recordAlert     = 0x15
	recordHandshake = 0x16
)

// recordLen is how many of the peer's first bytes are kept for the log.
const recordLen = 24

// recorder wraps the raw connection to remember what the peer sent first
// (to tell "not TLS" from a TLS failure and quote it) and which versions a
// client offered (to tell "TLS too old").
type recorder struct {
	net.Conn
	mu       sync.Mutex
	first    []byte
	versions []uint16
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	if k := min(n, recordLen-len(r.first)); k > 0 {
		r.first = append(r.first, p[:k]...)
	}
	r.mu.Unlock()
	return n, err
}

// NetConn returns the connection r records, for a caller that looks
// under a link's TLS connection at its socket (how much room it has).
func (r *recorder) NetConn() net.Conn { return r.Conn }

func (r *recorder) snapshot() ([]byte, []uint16) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.first), slices.Clone(r.versions)
}

// conn is the connection Client and Server return. It is a *tls.Conn (so
// ConnectionState and CloseWrite are there) whose Read turns a TLS alert
// from the peer into a *RefusedError: a TLS 1.3 client learns that the
// server refused its certificate only at its first read.
type conn struct {
	*tls.Conn
	cfg  *Config
	role string
	peer string
}

// Read reads from the TLS connection; see conn.
func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	var ope *net.OpError
	if err != nil && isRemoteAlert(err, &ope) {
		return n, c.cfg.rejected(&RefusedError{Peer: c.peer, Role: c.role, Err: err}, ope)
	}
	return n, err
}

func (c *Config) buildServer() {
	s := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		// Resumption would skip nothing we check, but a chain link is one
		// long-lived connection: tickets buy nothing here.
		SessionTicketsDisabled: true,
		GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			if r, ok := hi.Conn.(*recorder); ok {
				r.mu.Lock()
				r.versions = slices.Clone(hi.SupportedVersions)
				r.mu.Unlock()
			}
			return nil, nil
		},
	}
	switch {
	case c.roots != nil:
		// The chain is verified by crypto/tls when a certificate is given;
		// VerifyConnection below requires one. (RequireAndVerifyClientCert
		// would fail with an untyped error we could only string-match.)
		s.ClientCAs = c.roots
		s.ClientAuth = tls.VerifyClientCertIfGiven
		c.requireClientCert = true
	case c.pinPrev != nil:
		// Self-signed is fine: the pin is the identity.
		s.ClientAuth = tls.RequestClientCert
		c.requireClientCert = true
	default:
		// PSK, or no authentication of the predecessor at all.
		s.ClientAuth = tls.NoClientCert
	}
	s.VerifyConnection = func(cs tls.ConnectionState) error {
		if !c.requireClientCert {
			return nil
		}
		if len(cs.PeerCertificates) == 0 {
			return errNoClientCert
		}
		if c.pinPrev != nil {
			if err := checkPin(cs.PeerCertificates[0], c.pinPrev); err != nil {
				return err
			}
		}
		return c.checkPosition(cs.PeerCertificates[0], c.opts.PrevName, RolePredecessor)
	}
	c.server = s
}

func (c *Config) buildClient() {
	cert := c.cert
	cl := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Always present our certificate when asked. crypto/tls would
		// otherwise send none when it is not signed by one of the server's
		// CAs, and the successor would log "no client certificate" instead
		// of the real problem.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert, nil
		},
	}
	switch {
	case c.roots != nil:
		cl.RootCAs = c.roots
	case c.pinNext != nil || c.psk != nil:
		// No CA: crypto/tls must not check the chain or name; the pin
		// check in VerifyConnection, or the PSK proof after the handshake,
		// authenticates the successor. Both are mandatory on this path.
		cl.InsecureSkipVerify = true
	default:
		// Neither CA, pin nor PSK: nothing authenticates the successor.
		// Client refuses to dial unless AcceptAnySuccessor says that is
		// intended; then nothing is checked (the system's roots would
		// authenticate no one: any public certificate passes them).
		cl.InsecureSkipVerify = true
	}
	cl.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("secure: successor sent no certificate")
		}
		if c.pinNext != nil {
			if err := checkPin(cs.PeerCertificates[0], c.pinNext); err != nil {
				return err
			}
		}
		return c.checkPosition(cs.PeerCertificates[0], c.opts.NextName, RoleSuccessor)
	}
	c.client = cl
}

// Client secures raw, which this node dialed to its successor at addr
// ("host:port"; the peer's address is used if empty). The successor's
// certificate must chain to the CA with the name ServerName or addr's host,
// match PinNext, or both, as configured; with a PSK the successor must then
// prove the key. ctx bounds the whole handshake ([DefaultHandshakeTimeout]
// without a deadline). A refused successor fails here, before any protocol
// byte is written.
//
// The returned conn also has ConnectionState() tls.ConnectionState. On error
// raw is closed and the error is a *RefusedError, or wraps context.Canceled.
// A plain-TCP Config returns raw unchanged.
func (c *Config) Client(ctx context.Context, raw net.Conn, addr string) (net.Conn, error) {
	if !c.Enabled() {
		return raw, nil
	}
	if !c.AuthenticatesSuccessor() && !c.opts.AcceptAnySuccessor {
		raw.Close()
		return nil, errors.New("secure: nothing authenticates the successor (no CA, pin or PSK): set Options.AcceptAnySuccessor if that is intended")
	}
	if c.psk != nil && c.opts.NextName == "" {
		raw.Close()
		return nil, errors.New("secure: PSK mode needs the successor's name (Options.NextName, from --chain) to dial it")
	}
	peer := addr
	if peer == "" {
		peer = raw.RemoteAddr().String()
	}
	cfg := c.client.Clone()
	cfg.ServerName = c.opts.ServerName
	if cfg.ServerName == "" {
		cfg.ServerName = hostOf(peer)
	}
	rec := &recorder{Conn: rawio.NewConn(raw)}
	return c.handshake(ctx, tls.Client(rec, cfg), rec, RoleSuccessor, peer)
}

// Server secures raw, accepted from a would-be predecessor. TLS 1.2
// and older and plaintext are refused. With a CA or PinPrev the peer must
// present a client certificate that chains to the CA and/or matches the pin.
// With a PSK, the predecessor must first prove the key; this side reads
// nothing but that proof before it answers with its own, so a peer with the
// wrong key is refused before any protocol line is read. ctx bounds the
// whole handshake ([DefaultHandshakeTimeout] without a deadline).
//
// On error raw is closed and the error is a *RefusedError, or wraps
// context.Canceled. A plain-TCP Config returns raw unchanged.
func (c *Config) Server(ctx context.Context, raw net.Conn) (net.Conn, error) {
	if !c.Enabled() {
		return raw, nil
	}
	if !c.AuthenticatesPredecessor() && !c.opts.AcceptAnyPredecessor {
		raw.Close()
		return nil, errors.New("secure: nothing authenticates the predecessor (no CA, pin or PSK): set Options.AcceptAnyPredecessor if that is intended")
	}
	if c.psk != nil && c.opts.PrevName == "" {
		raw.Close()
		return nil, errors.New("secure: PSK mode needs the predecessor's name (Options.PrevName, from --chain) to accept it")
	}
	rec := &recorder{Conn: rawio.NewConn(raw)}
	return c.handshake(ctx, tls.Server(rec, c.server), rec, RolePredecessor, raw.RemoteAddr().String())
}

// handshake runs the TLS handshake and the PSK proof under ctx's deadline.
func (c *Config) handshake(ctx context.Context, tc *tls.Conn, rec *recorder, role, peer string) (net.Conn, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultHandshakeTimeout)
		defer cancel()
	}
	// The deadline covers the PSK exchange too, which HandshakeContext
	// does not; AfterFunc also interrupts it on cancellation.
	deadline, _ := ctx.Deadline()
	start := time.Now()
	raw := rec.Conn
	_ = raw.SetDeadline(deadline)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = raw.SetDeadline(time.Unix(1, 0))
		close(fired)
	})

	err := tc.HandshakeContext(ctx)
	if err == nil && c.psk != nil {
		if role == RoleSuccessor {
			err = c.proveClient(tc)
		} else {
			err = c.proveServer(tc)
		}
	}
	if !stop() {
		// ctx ended just as we finished: the deadline is now in the past.
		<-fired
		if err == nil {
			err = ctx.Err()
		}
	}
	if err != nil {
		// Close the raw conn, not tc: tls.Conn.Close would send
		// close_notify with its own 5s write deadline, past ours.
		_ = raw.Close()
		err = c.classify(ctx, err, rec, role, peer)
		if re, ok := err.(*RefusedError); ok && re.Reason == ReasonTimeout {
			re.Detail = fmt.Sprintf("not completed within %v: a peer must finish the handshake promptly",
				deadline.Sub(start).Round(time.Millisecond))
		}
		return nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	return &conn{Conn: tc, cfg: c, role: role, peer: peer}, nil
}

// hostOf returns the host of addr for certificate name checks: without
// port, brackets or IPv6 zone.
func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i]
	}
	return host
}
