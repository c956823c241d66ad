package rawio

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBlockingSocketPassesThrough checks that a TCP connection whose
// socket was put in blocking mode (by a Dial function that took its
// descriptor, say) is read and written the standard way: a raw call on
// it could wait in the kernel with the scheduler none the wiser.
func TestBlockingSocketPassesThrough(t *testing.T) {
	a, b := pair(t)
	rc, err := a.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Control(func(fd uintptr) { err = syscall.SetNonblock(int(fd), false) }); err != nil {
		t.Fatal(err)
	}
	if r := NewReader(a); r != io.Reader(a) {
		t.Fatalf("NewReader of a blocking socket: %T, want the connection itself", r)
	}
	if c := NewConn(a); c != net.Conn(a) {
		t.Fatalf("NewConn of a blocking socket: %T, want the connection itself", c)
	}
	if k, err := NewWriter(a).WriteNow([]byte("x\n")); k != 0 || err != nil {
		t.Fatalf("WriteNow to a blocking socket: %d, %v; want 0, nil", k, err)
	}
	if _, err := NewWriter(a).Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(NewReader(b)).ReadString('\n')
	if err != nil || line != "x\n" {
		t.Fatalf("read %q, %v", line, err)
	}
}

// wrapped is a connection that wraps another and names it, as the
// secure package's handshake recorder does under its TLS connections.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

// tlsConn embeds a TLS connection, as the secure package's links do.
type tlsConn struct{ *tls.Conn }

// tlsPair returns the client end of a TLS connection over loopback TCP
// (through a wrapped, as the nodes' links are), the TCP connection under
// it, and the server's TCP end, which the test reads or not as it needs.
// With raw, both ends of the TLS connection read and write through
// NewConn, as the secure package's do.
func tlsPair(t *testing.T, raw bool) (client net.Conn, under, server *net.TCPConn, srv *tls.Conn) {
	t.Helper()
	a, b := pair(t)
	var ca, cb net.Conn = a, b
	if raw {
		ca, cb = NewConn(a), NewConn(b)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	srv = tls.Server(cb, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	done := make(chan error, 1)
	go func() { done <- srv.Handshake() }()
	cl := tls.Client(wrapped{ca}, &tls.Config{InsecureSkipVerify: true})
	if err := cl.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return tlsConn{cl}, a, b, srv
}

// TestTakesNowTellsAFullSocket checks TakesNow, which lets a TLS link
// write its lines without waiting on a peer that does not read (the
// draft's section 3 transport; its Security Considerations' TLS): yes on
// an empty socket; no once the socket under the TLS connection is full,
// and for more than one record's worth; yes again once the peer has
// read; and never for a connection that is not TLS.
func TestTakesNowTellsAFullSocket(t *testing.T) {
	c, under, server, _ := tlsPair(t, false)
	w := NewWriter(c)
	if !w.OverTLS() {
		t.Fatal("OverTLS false for a TLS connection over TCP")
	}
	if !w.TakesNow(100) {
		t.Fatal("TakesNow(100) false on an empty socket")
	}
	// With room for it, still no for more than one record's worth.
	if err := under.SetWriteBuffer(4 << 20); err != nil {
		t.Fatal(err)
	}
	if !w.TakesNow(maxTakes) {
		t.Fatalf("TakesNow(%d) false on an empty socket with a 4 MiB buffer", maxTakes)
	}
	if w.TakesNow(maxTakes + 1) {
		t.Fatalf("TakesNow(%d) true: more than one record's worth", maxTakes+1)
	}
	if k, err := w.WriteNow([]byte("x\n")); k != 0 || err != nil {
		t.Fatalf("WriteNow to a TLS connection: %d, %v; want 0, nil (it writes through crypto/tls)", k, err)
	}
	// Fill the socket under the TLS connection (its bytes are not TLS
	// records; the peer does not read them as such).
	fill := NewWriter(under)
	chunk := make([]byte, 4096)
	for i := 0; ; i++ {
		k, err := fill.WriteNow(chunk)
		if err != nil {
			t.Fatal(err)
		}
		if k < len(chunk) {
			break
		}
		if i > 1<<16 {
			t.Fatal("the socket took 256 MiB without filling")
		}
	}
	if w.TakesNow(100) {
		t.Fatal("TakesNow(100) true on a socket that takes nothing more")
	}
	// Once the peer has read everything, there is room again.
	go io.Copy(io.Discard, server)
	deadline := time.Now().Add(10 * time.Second)
	for !w.TakesNow(100) {
		if time.Now().After(deadline) {
			t.Fatal("TakesNow(100) still false 10s after the peer began reading")
		}
		time.Sleep(time.Millisecond)
	}
	plain, _ := pair(t)
	if pw := NewWriter(plain); pw.OverTLS() || pw.TakesNow(1) {
		t.Fatal("a plain TCP connection counted as TLS")
	}
}

// TestConnUnderTLS checks NewConn, on which a TLS link reads and writes
// with raw system calls as a plain TCP link does (the draft's section 3
// transport; its Security Considerations' TLS): lines cross a TLS
// connection both ways; its deadlines and Close are the TCP
// connection's, and fail as they do; and TakesNow still finds the
// socket under it (a socket in blocking mode is left as it is:
// TestBlockingSocketPassesThrough).
func TestConnUnderTLS(t *testing.T) {
	c, under, _, srv := tlsPair(t, true)
	for i := range 50 {
		line := strings.Repeat("y", i) + "\n"
		if _, err := c.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(line))
		if _, err := io.ReadFull(srv, got); err != nil || string(got) != line {
			t.Fatalf("line %d: the server read %q, %v", i, got, err)
		}
		if _, err := srv.Write(got); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil || string(got) != line {
			t.Fatalf("line %d: the client read %q, %v", i, got, err)
		}
	}
	w := NewWriter(c)
	if !w.OverTLS() || !w.TakesNow(100) {
		t.Fatalf("through NewConn: OverTLS %v, TakesNow(100) %v; want both", w.OverTLS(), w.TakesNow(100))
	}
	nc := NewConn(under)
	if u, ok := nc.(interface{ NetConn() net.Conn }); !ok || u.NetConn() != net.Conn(under) {
		t.Fatalf("NewConn's NetConn does not return the TCP connection")
	}
	// A read past its deadline fails as the connection's own does.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a read past its deadline: %v; want a timeout", err)
	}
}
