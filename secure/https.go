package secure

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// HTTPSOptions secure a node's status endpoint (--status-addr) and
// `chainsync status`, its client, across organisations: both sides show a
// certificate, and each accepts the other's only if it chains to CAFile
// or its key matches one of Pins.
type HTTPSOptions struct {
	// CertFile and KeyFile are this side's certificate and private key
	// (PEM; the node's --tls-cert and --tls-key, or chainsync status's).
	CertFile, KeyFile string
	// CAFile holds the trust roots for the other side's certificate
	// (--tls-ca). The name in it is not checked: a status address is
	// often not the name a certificate carries.
	CAFile string
	// Pins are the other side's accepted keys, "sha256//BASE64" joined by
	// ';' (the node's --status-pin, chainsync status's --pin).
	Pins string
	// CAFlag and PinFlag name the flags of CAFile and Pins, for errors.
	CAFlag, PinFlag string
}

// StatusServerTLS returns the TLS configuration of a status endpoint: it
// presents CertFile and requires a client certificate that chains to
// CAFile or whose key is pinned in Pins. Either must be given.
func StatusServerTLS(o HTTPSOptions) (*tls.Config, error) {
	cert, v, err := o.load()
	if err != nil {
		return nil, err
	}
	if cert == nil {
		return nil, errors.New("the status endpoint needs this node's certificate (--tls-cert, --tls-key)")
	}
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{*cert},
		ClientAuth:             tls.RequireAnyClientCert,
		SessionTicketsDisabled: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return v.check(raw, x509.ExtKeyUsageClientAuth, "client")
		},
	}, nil
}

// StatusClientTLS returns the TLS configuration of chainsync status: it
// presents CertFile (if given) and accepts the node's certificate only if
// it chains to CAFile or its key is pinned in Pins. Either must be given.
func StatusClientTLS(o HTTPSOptions) (*tls.Config, error) {
	cert, v, err := o.load()
	if err != nil {
		return nil, err
	}
	c := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The node is verified below, by CA or pin, and not by name.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return v.check(raw, x509.ExtKeyUsageServerAuth, "node")
		},
	}
	if cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return c, nil
}

// peerCheck accepts a peer's certificate by CA or by pin.
type peerCheck struct {
	roots *x509.CertPool
	pins  []string
}

func (o HTTPSOptions) load() (*tls.Certificate, *peerCheck, error) {
	caFlag, pinFlag := o.CAFlag, o.PinFlag
	if caFlag == "" {
		caFlag = "--tls-ca"
	}
	if pinFlag == "" {
		pinFlag = "--pin"
	}
	v := &peerCheck{}
	if o.CAFile == "" && o.Pins == "" {
		return nil, nil, fmt.Errorf("give %s or %s: with neither, anyone's certificate would do", caFlag, pinFlag)
	}
	if o.CAFile != "" {
		data, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", caFlag, o.CAFile, err)
		}
		v.roots = x509.NewCertPool()
		if !v.roots.AppendCertsFromPEM(data) {
			return nil, nil, fmt.Errorf("%s %s: no usable certificate in the file", caFlag, o.CAFile)
		}
	}
	if o.Pins != "" {
		var err error
		if v.pins, err = parsePins(pinFlag, o.Pins); err != nil {
			return nil, nil, err
		}
	}
	switch {
	case o.CertFile == "" && o.KeyFile == "":
		return nil, v, nil
	case o.CertFile == "" || o.KeyFile == "":
		return nil, nil, errors.New("give both --tls-cert and --tls-key")
	}
	fi, err := os.Stat(o.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-key %s: %w", o.KeyFile, err)
	}
	if err := checkPerm("--tls-key", o.KeyFile, fi); err != nil {
		return nil, nil, err
	}
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", o.CertFile, o.KeyFile, err)
	}
	return &cert, v, nil
}

// check accepts raw (the peer's chain, leaf first) if its leaf's key is
// pinned, or if it chains to the roots for usage.
func (v *peerCheck) check(raw [][]byte, usage x509.ExtKeyUsage, who string) error {
	if len(raw) == 0 {
		return fmt.Errorf("the %s sent no certificate", who)
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, der := range raw {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("the %s's certificate does not parse: %w", who, err)
		}
		certs[i] = c
	}
	if v.pins != nil && checkPin(certs[0], v.pins) == nil {
		return nil
	}
	if v.roots != nil {
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: v.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
		if err == nil {
			return nil
		}
		if v.pins == nil {
			return fmt.Errorf("the %s's certificate is not from the CA: %w", who, err)
		}
	}
	return fmt.Errorf("the %s's key %s is neither pinned nor certified by the CA", who, PinOf(certs[0]))
}
