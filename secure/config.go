package secure

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Options are the security settings as an operator gives them on the command
// line. The zero value means plain TCP.
type Options struct {
	// CertFile and KeyFile are this node's certificate and private key
	// (PEM; --tls-cert, --tls-key). The certificate serves both links: as
	// server certificate toward the predecessor and client certificate
	// toward the successor.
	CertFile, KeyFile string
	// CAFile holds the trust roots for neighbours' certificates (PEM,
	// --tls-ca). Setting it makes the predecessor link mutual TLS.
	CAFile string
	// PinPrev and PinNext pin the predecessor's and the successor's public
	// key (--pin-prev, --pin-next): "sha256//BASE64", several joined by ';'.
	// PinPrev makes the predecessor link mutual TLS.
	PinPrev, PinNext string
	// PSKFile holds a pre-shared key every node of the chain knows
	// (--psk-file): at least 32 random bytes, written as base64 or hex
	// (`chainsync psk FILE` makes one). Passphrases are refused.
	PSKFile string
	// SelfName, PrevName and NextName are the names of this node and of
	// its neighbours as --chain gives them. A PSK proof covers the names
	// of both ends of its link, so that a connection redirected to another
	// node of the chain, or looped back to this node, is refused. PSK mode
	// needs SelfName; PrevName is needed to accept a predecessor and
	// NextName to dial a successor. Other modes ignore them.
	SelfName, PrevName, NextName string
	// ChainNames are the names of every node of the chain (--chain). A
	// neighbour whose certificate's common name is one of them must be
	// the expected neighbour (PrevName or NextName): certificates made by
	// `chainsync certs` carry the node's name, so a connection redirected
	// to another node, or looped back, is refused even where the nodes'
	// certificates share an address. Certificates named otherwise are
	// not affected.
	ChainNames []string
	// ServerName, if set, is the name the successor's certificate must
	// carry (--tls-server-name), instead of the host it was dialed at.
	ServerName string
	// NoPred and NoSucc say this node has no predecessor (the Head) or no
	// successor (the Tail): Describe and Warnings then say nothing about
	// the link it does not have. Zero: both links.
	NoPred, NoSucc bool
	// AcceptAnyPredecessor (--insecure-accept-any-predecessor) says that
	// a predecessor that nothing authenticates (no CAFile, PinPrev or
	// PSKFile) is intended: any TLS client may then connect as the
	// predecessor. Without it, CheckSides refuses that setup and Server
	// refuses every connection.
	AcceptAnyPredecessor bool
	// AcceptAnySuccessor (--insecure-accept-any-successor) says that a
	// successor that nothing authenticates (no CAFile, PinNext or PSKFile)
	// is intended: its certificate is then not checked at all. Without
	// it, CheckSides refuses that setup and Client refuses to dial. The
	// system's trust roots never authenticate a neighbour: the nodes of a
	// chain are not public web servers, and any public certificate would
	// pass them.
	AcceptAnySuccessor bool
}

// Enabled reports whether any security option is set, that is whether the
// links use TLS.
func (o Options) Enabled() bool {
	return o.CertFile != "" || o.KeyFile != "" || o.CAFile != "" || o.PinPrev != "" ||
		o.PinNext != "" || o.PSKFile != "" || o.ServerName != "" || o.AcceptAnyPredecessor || o.AcceptAnySuccessor
}

// DefaultHandshakeTimeout bounds a handshake (TLS and PSK proof) whose
// context has no deadline, so that a peer that never finishes cannot hold a
// connection forever.
const DefaultHandshakeTimeout = 10 * time.Second

// MinPSKBytes is the least key material a PSK file must hold, in bytes
// after decoding its base64 or hex.
const MinPSKBytes = 32

// maxNameLen bounds SelfName, PrevName and NextName (they travel in the
// PSK proof line).
const maxNameLen = 255

// maxPSKFileSize catches a --psk-file that points at the wrong file.
const maxPSKFileSize = 64 << 10

// Config is a loaded, validated security configuration. It is safe for
// concurrent use. A nil *Config means plain TCP.
type Config struct {
	opts      Options
	enabled   bool
	ephemeral bool // cert was generated at Load (PSK without --tls-cert)
	cert      tls.Certificate
	roots     *x509.CertPool // from CAFile, nil without it
	pinPrev   []string
	pinNext   []string
	psk       []byte
	warnings  []string

	requireClientCert bool        // the server demands a client certificate
	server            *tls.Config // shared by all accepted connections
	client            *tls.Config // cloned per dial to set ServerName
}

// Load validates the options and loads every file they name, so that a
// mistake surfaces at startup rather than at the first connection. Its
// errors start with the flag at fault and say what to do.
// Load of zero Options returns a plain-TCP Config.
func Load(o Options) (*Config, error) {
	c := &Config{opts: o, enabled: o.Enabled()}
	if !c.enabled {
		return c, nil
	}
	if err := c.loadPSK(); err != nil {
		return nil, err
	}
	if err := c.checkNames(); err != nil {
		return nil, err
	}
	if err := c.loadCert(); err != nil {
		return nil, err
	}
	if err := c.loadTrust(); err != nil {
		return nil, err
	}
	c.checkCert()
	c.buildServer()
	c.buildClient()
	return c, nil
}

// pskHowTo tells an operator how to make a good key.
const pskHowTo = "make a key with: chainsync psk FILE (or: openssl rand -base64 32 > FILE && chmod 600 FILE), and copy that file to every node of the chain"

func (c *Config) loadPSK() error {
	path := c.opts.PSKFile
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("--psk-file %s: %w (%s)", path, err, pskHowTo)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("--psk-file %s: not a regular file", path)
	}
	if fi.Size() > maxPSKFileSize {
		return fmt.Errorf("--psk-file %s: %d bytes is far too large for a key: is this the right file? (%s)", path, fi.Size(), pskHowTo)
	}
	if err := checkPerm("--psk-file", path, fi); err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--psk-file %s: %w", path, err)
	}
	key, err := ParsePSK(data)
	if err != nil {
		return fmt.Errorf("--psk-file %s: %w (%s)", path, err, pskHowTo)
	}
	c.psk = key
	return nil
}

// checkNames checks the link-end names that PSK proofs cover.
func (c *Config) checkNames() error {
	o := c.opts
	for _, n := range []struct{ what, v string }{{"this node's name", o.SelfName}, {"the predecessor's name", o.PrevName}, {"the successor's name", o.NextName}} {
		if len(n.v) > maxNameLen {
			return fmt.Errorf("%s is %d bytes long; at most %d", n.what, len(n.v), maxNameLen)
		}
	}
	if c.psk == nil {
		return nil
	}
	if o.SelfName == "" {
		return errors.New("--psk-file needs the chain's names: give --chain NAME=HOST:PORT,... and --name " +
			"(each PSK proof covers the names of both ends of its link, so that a connection redirected to another node, " +
			"or looped back to this one, is refused; without names that cannot be checked)")
	}
	if o.PrevName == o.SelfName || o.NextName == o.SelfName {
		return fmt.Errorf("--psk-file: this node %q cannot be its own neighbour", o.SelfName)
	}
	return nil
}

// checkPerm refuses a secret file that group or others can read (as ssh
// does with private keys): its key is then no longer a secret of this
// node's user.
func checkPerm(flag, path string, fi fs.FileInfo) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s %s is accessible by group or others (mode %04o): a secret key must be readable only by its owner; run: chmod 600 %s", flag, path, perm, path)
	}
	return nil
}

func (c *Config) warnf(format string, args ...any) {
	c.warnings = append(c.warnings, fmt.Sprintf(format, args...))
}

func (c *Config) loadCert() error {
	o := c.opts
	switch {
	case o.CertFile == "" && o.KeyFile == "":
		if o.CAFile != "" || o.PinPrev != "" || o.PinNext != "" {
			return errors.New("--tls-ca, --pin-prev and --pin-next need this node's own certificate: " +
				"give --tls-cert and --tls-key (`chainsync certs` makes them)")
		}
		if c.psk == nil {
			// Only --tls-server-name or --insecure-accept-any-* is left.
			flag := "--tls-server-name"
			switch {
			case o.ServerName != "":
			case o.AcceptAnyPredecessor:
				flag = "--insecure-accept-any-predecessor"
			default:
				flag = "--insecure-accept-any-successor"
			}
			return errors.New(flag + " needs TLS: give --tls-cert and --tls-key, or --psk-file")
		}
		cert, err := ephemeralCert()
		if err != nil {
			return fmt.Errorf("--psk-file: making an ephemeral certificate: %w", err)
		}
		c.cert, c.ephemeral = cert, true
		return nil
	case o.KeyFile == "":
		return fmt.Errorf("--tls-cert %s given without --tls-key: give both, this node's certificate and its private key", o.CertFile)
	case o.CertFile == "":
		return fmt.Errorf("--tls-key %s given without --tls-cert: give both, this node's certificate and its private key", o.KeyFile)
	}
	certPEM, err := os.ReadFile(o.CertFile)
	if err != nil {
		return fmt.Errorf("--tls-cert %s: %w", o.CertFile, err)
	}
	if _, err := firstCert(certPEM); err != nil {
		return fmt.Errorf("--tls-cert %s: %w", o.CertFile, err)
	}
	fi, err := os.Stat(o.KeyFile)
	if err != nil {
		return fmt.Errorf("--tls-key %s: %w", o.KeyFile, err)
	}
	if err := checkPerm("--tls-key", o.KeyFile, fi); err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(o.KeyFile)
	if err != nil {
		return fmt.Errorf("--tls-key %s: %w", o.KeyFile, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return fmt.Errorf("--tls-cert %s and --tls-key %s do not belong together: %w", o.CertFile, o.KeyFile, err)
		}
		return fmt.Errorf("--tls-key %s: %w", o.KeyFile, err)
	}
	if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("--tls-cert %s: %w", o.CertFile, err)
		}
	}
	c.cert = cert
	now := time.Now()
	leaf := cert.Leaf
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("--tls-cert %s expired on %s: issue a new one (`chainsync certs`)", o.CertFile, leaf.NotAfter.Format(time.DateOnly))
	case now.Before(leaf.NotBefore):
		c.warnf("--tls-cert %s is not valid before %s: check this machine's clock", o.CertFile, leaf.NotBefore.Format(time.RFC3339))
	case leaf.NotAfter.Sub(now) < 30*24*time.Hour:
		c.warnf("--tls-cert %s expires on %s", o.CertFile, leaf.NotAfter.Format(time.DateOnly))
	}
	return nil
}

func (c *Config) loadTrust() error {
	o := c.opts
	if o.CAFile != "" {
		data, err := os.ReadFile(o.CAFile)
		if err != nil {
			return fmt.Errorf("--tls-ca %s: %w", o.CAFile, err)
		}
		if _, err := firstCert(data); err != nil {
			return fmt.Errorf("--tls-ca %s: %w", o.CAFile, err)
		}
		c.roots = x509.NewCertPool()
		if !c.roots.AppendCertsFromPEM(data) {
			return fmt.Errorf("--tls-ca %s: no usable certificate in the file", o.CAFile)
		}
	}
	var err error
	if o.PinPrev != "" {
		if c.pinPrev, err = parsePins("--pin-prev", o.PinPrev); err != nil {
			return err
		}
	}
	if o.PinNext != "" {
		if c.pinNext, err = parsePins("--pin-next", o.PinNext); err != nil {
			return err
		}
	}
	if o.ServerName != "" && c.roots == nil && (c.pinNext != nil || c.psk != nil) {
		c.warnf("--tls-server-name %s is not checked: without --tls-ca the successor is verified by pin or PSK, not by name", o.ServerName)
	}
	return nil
}

// checkCert warns about certificates the neighbours will refuse.
func (c *Config) checkCert() {
	if c.ephemeral {
		return
	}
	leaf, file := c.cert.Leaf, c.opts.CertFile
	if eku := leaf.ExtKeyUsage; len(eku) > 0 && !slices.Contains(eku, x509.ExtKeyUsageAny) {
		if !slices.Contains(eku, x509.ExtKeyUsageClientAuth) {
			c.warnf("--tls-cert %s lacks the clientAuth extended key usage: a successor with --tls-ca will refuse it", file)
		}
		if !slices.Contains(eku, x509.ExtKeyUsageServerAuth) {
			c.warnf("--tls-cert %s lacks the serverAuth extended key usage: a predecessor with --tls-ca will refuse it", file)
		}
	}
	if c.roots != nil {
		inter := x509.NewCertPool()
		for _, der := range c.cert.Certificate[1:] {
			if ic, err := x509.ParseCertificate(der); err == nil {
				inter.AddCert(ic)
			}
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: c.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			c.warnf("--tls-cert %s does not verify against --tls-ca %s (%v): neighbours using that CA will refuse this node", file, c.opts.CAFile, err)
		}
	}
	if !c.AuthenticatesPredecessor() && c.opts.AcceptAnyPredecessor && !c.opts.NoPred {
		c.warnf("--insecure-accept-any-predecessor: no --tls-ca, --pin-prev or --psk-file, so any TLS client can become this node's predecessor")
	}
	if !c.AuthenticatesSuccessor() && c.opts.AcceptAnySuccessor && !c.opts.NoSucc {
		c.warnf("--insecure-accept-any-successor: no --tls-ca, --pin-next or --psk-file, so the successor's certificate is not checked at all")
	}
}

// AuthenticatesPredecessor reports whether the predecessor link
// authenticates its peer: a client certificate from the CA (CAFile), a
// pinned key (PinPrev), or a proof of the pre-shared key (PSKFile).
func (c *Config) AuthenticatesPredecessor() bool {
	return c.Enabled() && (c.roots != nil || c.pinPrev != nil || c.psk != nil)
}

// AuthenticatesSuccessor reports whether the successor link authenticates
// its peer: a certificate from the CA with the dialed name (CAFile), a
// pinned key (PinNext), or a proof of the pre-shared key (PSKFile). The
// system's trust roots do not count.
func (c *Config) AuthenticatesSuccessor() bool {
	return c.Enabled() && (c.roots != nil || c.pinNext != nil || c.psk != nil)
}

// CheckSides refuses a half-authenticated node: TLS on, but a side the
// node has (hasPred: it accepts a predecessor; hasSucc: it dials a
// successor) authenticates nobody, and the operator did not say so with
// AcceptAnyPredecessor or AcceptAnySuccessor. Encryption without
// authentication lets a stranger be that neighbour: as predecessor it
// starts this node's task whenever it likes. A plain-TCP Config passes:
// that mode is chosen in full knowledge (the node says so at start).
func (c *Config) CheckSides(hasPred, hasSucc bool) error {
	if !c.Enabled() {
		return nil
	}
	if hasPred && !c.AuthenticatesPredecessor() && !c.opts.AcceptAnyPredecessor {
		return errors.New("these TLS settings authenticate no predecessor: any TLS client could connect as this node's predecessor and start its task. " +
			"Give --tls-ca CA.pem (its certificate must come from that CA), --pin-prev PIN (chainsync pin PRED.pem prints it) or --psk-file FILE; " +
			"if anyone at all may be the predecessor, say so with --insecure-accept-any-predecessor")
	}
	if hasSucc && !c.AuthenticatesSuccessor() && !c.opts.AcceptAnySuccessor {
		return errors.New("these TLS settings authenticate no successor (this system's public trust roots do not: any web server's certificate passes them): " +
			"a stranger at the successor's address could pose as it. Give --tls-ca CA.pem, --pin-next PIN (chainsync pin SUCC.pem prints it) or --psk-file FILE; " +
			"if anyone at all may be the successor, say so with --insecure-accept-any-successor")
	}
	return nil
}

// Warnings returns what Load found questionable but not fatal (a certificate
// close to expiry, an unauthenticated link), one log line each.
func (c *Config) Warnings() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.warnings)
}

// Enabled reports whether connections are secured (false: plain TCP).
func (c *Config) Enabled() bool { return c != nil && c.enabled }

// Describe returns a one-line description of the mode for the startup log,
// e.g. "mutual TLS 1.3 (CA ca.pem, pinned successor)".
func (c *Config) Describe() string {
	if !c.Enabled() {
		return "plain TCP (no TLS: use only on loopback or a trusted network)"
	}
	mode := "TLS 1.3"
	if c.requireClientCert {
		mode = "mutual TLS 1.3"
	}
	var parts []string
	if c.roots != nil {
		parts = append(parts, "CA "+c.opts.CAFile)
	}
	if c.pinPrev != nil {
		parts = append(parts, "pinned predecessor")
	}
	if c.pinNext != nil {
		parts = append(parts, "pinned successor")
	}
	if c.psk != nil {
		parts = append(parts, "PSK "+c.opts.PSKFile)
	}
	if c.ephemeral {
		parts = append(parts, "ephemeral certificate")
	}
	if c.opts.ServerName != "" && c.roots != nil && !c.opts.NoSucc {
		parts = append(parts, "successor name "+c.opts.ServerName)
	}
	if !c.AuthenticatesSuccessor() && !c.opts.NoSucc {
		parts = append(parts, "successor NOT authenticated")
	}
	if !c.AuthenticatesPredecessor() && !c.opts.NoPred {
		parts = append(parts, "predecessor NOT authenticated")
	}
	if len(parts) == 0 {
		return mode
	}
	return mode + " (" + strings.Join(parts, ", ") + ")"
}
