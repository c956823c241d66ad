package secure

import (
	"bufio"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if a test leaves a goroutine of this package
// behind (a handshake or a read that never returned).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func leakedGoroutines() string {
	var leaked []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leaked = leaked[:0]
		for g := range strings.SplitSeq(string(buf), "\n\n") {
			if strings.Contains(g, "chainsync/secure.") && !strings.Contains(g, "secure.TestMain") &&
				!strings.Contains(g, "secure.leakedGoroutines") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
	}
	return strings.Join(leaked, "\n\n")
}

// testTimeout bounds every handshake in tests that expect one to finish.
const testTimeout = 10 * time.Second

// chain generates a CA and certificates for the named nodes, all at
// 127.0.0.1, and returns them by name.
func chain(t *testing.T, names ...string) map[string]Generated {
	t.Helper()
	var nodes []NodeSpec
	for _, n := range names {
		nodes = append(nodes, NodeSpec{Name: n, Host: "127.0.0.1"})
	}
	gen, err := GenerateCerts(t.TempDir(), nodes, false)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Generated{}
	for _, g := range gen {
		m[g.Name] = g
	}
	return m
}

// mtls returns the Options of g in a mutual-TLS chain.
func mtls(g Generated) Options {
	return Options{CertFile: g.CertFile, KeyFile: g.KeyFile, CAFile: g.CAFile}
}

// selfSigned writes a self-signed certificate (IP SAN 127.0.0.1, DNS SANs
// dns) and its key, and returns the file names and the pin.
func selfSigned(t *testing.T, name string, dns ...string) (certFile, keyFile, pin string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = writePair(t, name, der, key)
	leaf, _ := x509.ParseCertificate(der)
	return certFile, keyFile, PinOf(leaf)
}

// leafCA makes a CA-signed certificate with the given DNS SANs only (no IP).
func leafCA(t *testing.T, caCert *x509.Certificate, caKey any, name string, dns ...string) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = writePair(t, name, der, key)
	return certFile, keyFile
}

// loadCA reads back a CA GenerateCerts wrote.
func loadCA(t *testing.T, g Generated) (*x509.Certificate, any) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(g.CAFile, filepath.Join(filepath.Dir(g.CAFile), CAKeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf, pair.PrivateKey
}

// newKeyFile writes a new random key to a 0600 file.
func newKeyFile(t *testing.T) string {
	t.Helper()
	return pskFile(t, string(NewPSK()))
}

// pskOpts returns the PSK Options of node self between prev and next ("":
// none).
func pskOpts(key, prev, self, next string) Options {
	return Options{PSKFile: key, PrevName: prev, SelfName: self, NextName: next}
}

// pskFile writes key to a 0600 file.
func pskFile(t *testing.T, key string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "psk")
	if err := os.WriteFile(p, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustLoad(t *testing.T, o Options) *Config {
	t.Helper()
	c, err := Load(o)
	if err != nil {
		t.Fatalf("Load(%+v): %v", o, err)
	}
	return c
}

type result struct {
	conn net.Conn
	err  error
}

// listen starts a listener on 127.0.0.1 that runs accept on the first
// connection and delivers its result.
func listen(t *testing.T, accept func(net.Conn) (net.Conn, error)) (string, <-chan result) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan result, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			ch <- result{err: err}
			return
		}
		c, err := accept(raw)
		ch <- result{c, err}
	}()
	return ln.Addr().String(), ch
}

// connect runs srv.Server against cli.Client over real TCP on 127.0.0.1
// and returns both results.
func connect(t *testing.T, srv, cli *Config) (client, server result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	addr, ch := listen(t, func(raw net.Conn) (net.Conn, error) { return srv.Server(ctx, raw) })
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cli.Client(ctx, raw, addr)
	client = result{c, err}
	server = <-ch
	closeLater(t, client.conn, server.conn)
	return client, server
}

func closeLater(t *testing.T, conns ...net.Conn) {
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
}

// exchange sends a protocol line each way and checks it arrives.
func exchange(t *testing.T, client, server net.Conn) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	client.SetDeadline(deadline)
	server.SetDeadline(deadline)
	if _, err := client.Write([]byte("READY:r1\n")); err != nil {
		t.Fatalf("client write: %v", err)
	}
	line, err := bufio.NewReader(server).ReadString('\n')
	if err != nil || line != "READY:r1\n" {
		t.Fatalf("server read %q, %v; want READY:r1", line, err)
	}
	if _, err := server.Write([]byte("START:r1\n")); err != nil {
		t.Fatalf("server write: %v", err)
	}
	line, err = bufio.NewReader(client).ReadString('\n')
	if err != nil || line != "START:r1\n" {
		t.Fatalf("client read %q, %v; want START:r1", line, err)
	}
}

// wantRefused checks that err is a *RefusedError with the reason, and that
// its message contains each of parts.
func wantRefused(t *testing.T, side string, err error, reason Reason, parts ...string) *RefusedError {
	t.Helper()
	var re *RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("%s: got error %v (%T), want a *RefusedError %q", side, err, err, reason)
	}
	if re.Reason != reason {
		t.Fatalf("%s: reason %q, want %q; error: %v", side, re.Reason, reason, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not mention %q", side, err, p)
		}
	}
	t.Logf("%s: %v", side, err)
	return re
}

// readErr reads from c until an error, which it returns.
func readErr(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(testTimeout))
	buf := make([]byte, 64)
	for {
		if _, err := c.Read(buf); err != nil {
			return err
		}
	}
}

// tlsState returns the connection state of a conn from Client or Server.
func tlsState(t *testing.T, c net.Conn) tls.ConnectionState {
	t.Helper()
	s, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		t.Fatalf("%T has no ConnectionState", c)
	}
	return s.ConnectionState()
}

// writePair writes a certificate and its key as NAME.pem and NAME-key.pem
// in a fresh temporary directory.
func writePair(t *testing.T, name string, der []byte, key crypto.Signer) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	kp, err := keyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(certFile, certPEM(der), 0o644, false); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(keyFile, kp, 0o600, false); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
