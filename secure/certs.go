package secure

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Files GenerateCerts writes in its directory, besides NAME.pem and
// NAME-key.pem for each node.
const (
	CAFileName    = "ca.pem"
	CAKeyFileName = "ca-key.pem"
)

// Validity of generated certificates. Chains are internal and long-lived;
// an expiry nobody planned for would stop them, so the periods are long.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 5 * 365 * 24 * time.Hour
	clockSkew    = time.Hour // NotBefore is backdated by this much
)

// NodeSpec names a node for [GenerateCerts].
type NodeSpec struct {
	// Name is the node's name: the certificate's CN and file names
	// (NAME.pem, NAME-key.pem). Letters, digits, '.', '_' and '-'.
	Name string
	// Host is where the node's predecessor dials it: a DNS name or an IP
	// address (a "host:port" is accepted; the port is ignored). Empty means
	// this machine only (loopback names).
	Host string
}

// Generated describes the files GenerateCerts wrote for one node.
type Generated struct {
	Name     string   // node name
	CertFile string   // path of NAME.pem (mode 0644)
	KeyFile  string   // path of NAME-key.pem (mode 0600)
	CAFile   string   // path of the shared ca.pem
	SANs     []string // DNS names and IP addresses in the certificate
	Pin      string   // PinOf the node's certificate, for --pin-prev/--pin-next
}

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// dnsNameRE is what is put in a DNS SAN: letters, digits, '-' and '.'.
var dnsNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`)

// GenerateCerts makes a certificate authority and, for each node, a
// certificate signed by it, in dir (created if missing): ca.pem and
// ca-key.pem, NAME.pem and NAME-key.pem. Keys are ECDSA P-256, written 0600
// as PKCS #8; certificates are written 0644.
//
// Each node certificate serves as both server and client certificate
// (extended key usage serverAuth and clientAuth), so one file pair covers
// both links. Its CN is the node name; its SANs are:
//   - the Host, as an IP SAN if it is an IP address, as a DNS SAN otherwise;
//   - the node name as a DNS SAN if it is a valid DNS name, so that
//     --tls-server-name NAME works when addresses are unstable (NAT, DHCP);
//   - "localhost", 127.0.0.1 and ::1 only when Host is loopback or empty.
//     Loopback names are not added to every certificate: they would let any
//     node of the chain pass for a successor dialed at localhost.
//
// GenerateCerts refuses to replace any existing file (the error wraps
// fs.ErrExist) unless overwrite is true. Every file is first written and
// synced under a temporary name; only then are they put in place, each by
// a hard link that fails if the name exists (a rename with overwrite), and
// the directory is synced. If one cannot be put in place, those already
// placed are removed: a failure leaves no new file behind, and a crash
// leaves no empty or partial one.
// It returns one Generated per node, in order.
func GenerateCerts(dir string, nodes []NodeSpec, overwrite bool) ([]Generated, error) {
	if len(nodes) == 0 {
		return nil, errors.New("secure: no nodes to make certificates for")
	}
	files := map[string]string{strings.ToLower(CAFileName): "the CA", strings.ToLower(CAKeyFileName): "the CA"}
	claim := func(name, owner string) error {
		k := strings.ToLower(name)
		if prev, dup := files[k]; dup {
			return fmt.Errorf("secure: node %q: file name %s clashes with %s", owner, name, prev)
		}
		files[k] = "node " + owner
		return nil
	}
	for _, n := range nodes {
		if !nodeNameRE.MatchString(n.Name) {
			return nil, fmt.Errorf("secure: node name %q: use letters, digits, '.', '_' and '-', starting with a letter or digit", n.Name)
		}
		if err := claim(n.Name+".pem", n.Name); err != nil {
			return nil, err
		}
		if err := claim(n.Name+"-key.pem", n.Name); err != nil {
			return nil, err
		}
		if _, err := sans(n); err != nil {
			return nil, err
		}
	}
	if !overwrite {
		// A courtesy check before any key is made; commit's links are
		// what guarantees that nothing is replaced.
		for _, name := range allFiles(nodes) {
			p := filepath.Join(dir, name)
			if _, err := os.Lstat(p); err == nil {
				return nil, existErr(p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("secure: %w", err)
	}
	var pend []*staged
	ok := false
	defer func() {
		if !ok {
			discard(pend)
		}
	}()
	add := func(path string, data []byte, perm fs.FileMode) error {
		s, err := stage(path, data, perm)
		if err == nil {
			pend = append(pend, s)
		}
		return err
	}

	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "ChainSync CA", Organization: []string{"ChainSync"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, CAFileName)
	if err := add(caFile, certPEM(caDER), 0o644); err != nil {
		return nil, err
	}
	caKeyPEM, err := keyPEM(caKey)
	if err != nil {
		return nil, err
	}
	if err := add(filepath.Join(dir, CAKeyFileName), caKeyPEM, 0o600); err != nil {
		return nil, err
	}

	out := make([]Generated, 0, len(nodes))
	for _, n := range nodes {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: n.Name, Organization: []string{"ChainSync"}},
			NotBefore:    now.Add(-clockSkew),
			NotAfter:     now.Add(leafValidity),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		names, _ := sans(n)
		for _, s := range names {
			if ip := net.ParseIP(s); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, s)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
		if err != nil {
			return nil, err
		}
		leaf, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		g := Generated{
			Name:     n.Name,
			CertFile: filepath.Join(dir, n.Name+".pem"),
			KeyFile:  filepath.Join(dir, n.Name+"-key.pem"),
			CAFile:   caFile,
			SANs:     names,
			Pin:      PinOf(leaf),
		}
		if err := add(g.CertFile, certPEM(der), 0o644); err != nil {
			return nil, err
		}
		kp, err := keyPEM(key)
		if err != nil {
			return nil, err
		}
		if err := add(g.KeyFile, kp, 0o600); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	ok = true
	if err := commit(pend, overwrite); err != nil {
		return nil, err
	}
	return out, nil
}

func allFiles(nodes []NodeSpec) []string {
	names := []string{CAFileName, CAKeyFileName}
	for _, n := range nodes {
		names = append(names, n.Name+".pem", n.Name+"-key.pem")
	}
	return names
}

// sans returns the SANs for n, IP addresses in text form.
func sans(n NodeSpec) ([]string, error) {
	host := strings.TrimSpace(n.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	var out []string
	add := func(s string) {
		if !slices.ContainsFunc(out, func(o string) bool { return strings.EqualFold(o, s) }) {
			out = append(out, s)
		}
	}
	loopback := host == "" || strings.EqualFold(host, "localhost")
	switch ip := net.ParseIP(host); {
	case ip != nil:
		add(ip.String())
		loopback = ip.IsLoopback()
	case host != "":
		if !dnsNameRE.MatchString(host) {
			return nil, fmt.Errorf("secure: node %q: host %q is neither an IP address nor a DNS name", n.Name, n.Host)
		}
		add(strings.ToLower(host))
	}
	if dnsNameRE.MatchString(n.Name) {
		add(strings.ToLower(n.Name))
	}
	if loopback {
		add("localhost")
		add("127.0.0.1")
		add("::1")
	}
	return out, nil
}

func serial() *big.Int {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return s.Add(s, big.NewInt(1))
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ephemeralCert makes a throwaway self-signed certificate for PSK mode
// without --tls-cert. Nobody verifies it: the PSK proof, bound to the TLS
// session, authenticates the peer.
func ephemeralCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "chainsync ephemeral"},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(caValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
