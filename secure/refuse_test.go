package secure

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Refusals. Draft: Security Considerations ("to prevent node impersonation";
// mutual TLS "only prevents untrusted nodes from joining the chain"). Each
// test plays one kind of untrusted peer and checks that it is refused, with
// a reason the operator can act on.

// foreignClient dials the server at addr with crypto/tls configured by cfg
// and returns the handshake error (nil if the client side completed).
func foreignClient(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, cfg)
	t.Cleanup(func() { tc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	return tc, tc.HandshakeContext(ctx)
}

// serve starts srv.Server on a listener and returns its address.
func serve(t *testing.T, srv *Config) (string, <-chan result) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return listen(t, func(raw net.Conn) (net.Conn, error) { return srv.Server(ctx, raw) })
}

func TestRefuseNoClientCert(t *testing.T) {
	certs := chain(t, "A", "B")
	roots := x509.NewCertPool()
	ca, _ := loadCA(t, certs["A"])
	roots.AddCert(ca)
	_, _, pin := selfSigned(t, "P")
	for name, o := range map[string]Options{
		"CA":  mtls(certs["B"]),
		"pin": {CertFile: certs["B"].CertFile, KeyFile: certs["B"].KeyFile, PinPrev: pin},
	} {
		t.Run(name, func(t *testing.T) {
			addr, ch := serve(t, mustLoad(t, o))
			// A TLS 1.3 client with no certificate of its own.
			tc, err := foreignClient(t, addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
			r := <-ch
			wantRefused(t, "server", r.err, ReasonNoClientCert, "refused peer 127.0.0.1:")
			if r.conn != nil {
				t.Error("server returned a connection")
			}
			if err == nil { // TLS 1.3: the client learns at its first read.
				_, err = tc.Read(make([]byte, 1))
			}
			if err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("client error %v, want a certificate alert", err)
			}
		})
	}
}

func TestRefuseWrongCA(t *testing.T) {
	ours, theirs := chain(t, "A", "B"), chain(t, "M")
	// M's certificate is signed by another CA; M trusts our CA, so only the
	// server side can refuse.
	om := mtls(theirs["M"])
	om.CAFile = ours["A"].CAFile
	m := mustLoad(t, om)
	if w := strings.Join(m.Warnings(), "\n"); !strings.Contains(w, "does not verify against --tls-ca") {
		t.Errorf("Load did not warn about a certificate the CA did not sign: %q", w)
	}
	cli, srv := connect(t, mustLoad(t, mtls(ours["B"])), m)
	wantRefused(t, "server", srv.err, ReasonUntrusted, "certificate not signed by CA", "trusted: --tls-ca ", theirs["M"].Pin)
	if srv.conn != nil {
		t.Error("server returned a connection")
	}
	if cli.err == nil {
		// TLS 1.3: the client's handshake ended before the server's
		// verdict; its first read reports the refusal.
		cli.err = readErr(cli.conn)
	}
	wantRefused(t, "client", cli.err, ReasonRejectedByPeer, "refused this node", "unknown certificate authority")
}

func TestRefuseWrongPin(t *testing.T) {
	certs := chain(t, "A", "B")
	_, _, otherPin := selfSigned(t, "O")
	t.Run("predecessor", func(t *testing.T) {
		ob := mtls(certs["B"])
		ob.PinPrev = otherPin
		cli, srv := connect(t, mustLoad(t, ob), mustLoad(t, mtls(certs["A"])))
		wantRefused(t, "server", srv.err, ReasonWrongPin,
			"wrong pin (got "+certs["A"].Pin+", want "+otherPin+")")
		if cli.err == nil {
			cli.err = readErr(cli.conn)
		}
		wantRefused(t, "client", cli.err, ReasonRejectedByPeer, "bad certificate")
	})
	t.Run("successor, self-signed", func(t *testing.T) {
		sc, sk, spin := selfSigned(t, "S")
		ac, ak, apin := selfSigned(t, "A")
		srv := mustLoad(t, Options{CertFile: sc, KeyFile: sk, PinPrev: apin})
		cli, s := connect(t, srv, mustLoad(t, Options{CertFile: ac, KeyFile: ak, PinNext: otherPin}))
		wantRefused(t, "client", cli.err, ReasonWrongPin, "got "+spin, "want "+otherPin)
		if cli.conn != nil {
			t.Error("client returned a connection")
		}
		if s.err == nil {
			t.Error("server completed a handshake the client refused")
		}
	})
}

func TestRefuseWrongPSK(t *testing.T) {
	good, bad := newKeyFile(t), newKeyFile(t)
	t.Run("our client", func(t *testing.T) {
		cli, srv := connect(t, mustLoad(t, pskOpts(good, "A", "B", "")), mustLoad(t, pskOpts(bad, "", "A", "B")))
		wantRefused(t, "server", srv.err, ReasonPSKMismatch, "PSK proof mismatch")
		wantRefused(t, "client", cli.err, ReasonPSKMismatch, "successor rejected this node's PSK proof")
		if srv.conn != nil || cli.conn != nil {
			t.Error("a connection was returned")
		}
	})
	t.Run("impostor sends a line after a wrong proof", func(t *testing.T) {
		// The impostor completes TLS (the server cannot tell it apart
		// yet), then sends a forged proof and a protocol line in one
		// write. The server must refuse without ever handing a connection
		// (and so that line) to the protocol.
		srv, imp := mustLoad(t, pskOpts(good, "A", "B", "")), mustLoad(t, pskOpts(bad, "", "A", "B"))
		addr, ch := serve(t, srv)
		tc, err := foreignClient(t, addr, imp.client.Clone())
		if err != nil {
			t.Fatal(err)
		}
		p, _ := imp.proof(tc, macClient, "A", "B")
		if _, err := tc.Write([]byte(pskLinePrefix + "A B " + hex.EncodeToString(p) + "\nREADY\n")); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		wantRefused(t, "server", r.err, ReasonPSKMismatch)
		if r.conn != nil {
			t.Fatal("server returned a connection to a peer with the wrong key")
		}
		line, _ := bufio.NewReader(tc).ReadString('\n')
		if line != pskLinePrefix+pskReject+"\n" {
			t.Errorf("impostor got %q, want the REJECT line and nothing else", line)
		}
	})
	t.Run("peer without PSK", func(t *testing.T) {
		certs := chain(t, "A", "B")
		ob := mtls(certs["B"])
		ob.PSKFile, ob.PrevName, ob.SelfName = good, "A", "B"
		srv := mustLoad(t, ob)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		addr, ch := listen(t, func(raw net.Conn) (net.Conn, error) { return srv.Server(ctx, raw) })
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c, err := mustLoad(t, mtls(certs["A"])).Client(context.Background(), raw, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wantRefused(t, "server", (<-ch).err, ReasonNoPSKProof, "is --psk-file set on the predecessor too?")
	})
}

func TestRefuseTLS12Client(t *testing.T) {
	certs := chain(t, "A", "B")
	addr, ch := serve(t, mustLoad(t, mtls(certs["B"])))
	pair, err := tls.LoadX509KeyPair(certs["A"].CertFile, certs["A"].KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	_, err = foreignClient(t, addr, &tls.Config{
		MaxVersion:         tls.VersionTLS12,
		Certificates:       []tls.Certificate{pair},
		InsecureSkipVerify: true,
	})
	r := <-ch
	wantRefused(t, "server", r.err, ReasonOldTLS, "TLS version too old", "TLS 1.2")
	if err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("client error %v, want a protocol version alert", err)
	}
}

// A successor that speaks only TLS 1.2 is refused by the client.
func TestRefuseTLS12Successor(t *testing.T) {
	certs := chain(t, "A", "B")
	pair, err := tls.LoadX509KeyPair(certs["B"].CertFile, certs["B"].KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := listen(t, func(raw net.Conn) (net.Conn, error) {
		tc := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{pair}, MaxVersion: tls.VersionTLS12})
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(testTimeout))
		return nil, tc.Handshake()
	})
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mustLoad(t, mtls(certs["A"])).Client(context.Background(), raw, addr)
	wantRefused(t, "client", err, ReasonOldTLS, "refused peer "+addr)
}

// openssl s_client -tls1_2 is a foreign TLS 1.2 client.
func TestRefuseTLS12OpenSSL(t *testing.T) {
	openssl := lookOpenSSL(t)
	certs := chain(t, "A", "B")
	addr, ch := serve(t, mustLoad(t, mtls(certs["B"])))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, openssl, "s_client", "-connect", addr, "-tls1_2",
		"-cert", certs["A"].CertFile, "-key", certs["A"].KeyFile)
	cmd.Stdin = strings.NewReader("READY\n")
	out, err := cmd.CombinedOutput()
	r := <-ch
	wantRefused(t, "server", r.err, ReasonOldTLS, "TLS 1.2")
	if err == nil {
		t.Errorf("openssl s_client -tls1_2 succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "protocol version") {
		t.Logf("openssl output:\n%s", out)
	}
}

// openssl s_client -tls1_3 with a chain certificate is a foreign node that
// follows the rules: mutual TLS succeeds and its line arrives. This shows the
// link is standard TLS around the unchanged line protocol.
func TestOpenSSLMutualTLS13(t *testing.T) {
	openssl := lookOpenSSL(t)
	certs := chain(t, "A", "B")
	addr, ch := serve(t, mustLoad(t, mtls(certs["B"])))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, openssl, "s_client", "-connect", addr, "-tls1_3",
		"-cert", certs["A"].CertFile, "-key", certs["A"].KeyFile,
		"-CAfile", certs["A"].CAFile, "-verify_return_error", "-verify_ip", "127.0.0.1",
		"-nocommands") // else a line starting with R means "renegotiate"
	pr, pw := io.Pipe()
	cmd.Stdin = pr
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		pw.Close()
		cmd.Wait()
		t.Fatalf("server: %v\nopenssl:\n%s", r.err, out.String())
	}
	defer r.conn.Close()
	pw.Write([]byte("READY\n"))
	r.conn.SetReadDeadline(time.Now().Add(testTimeout))
	line, err := bufio.NewReader(r.conn).ReadString('\n')
	pw.Close()
	r.conn.Close()
	cmd.Wait()
	if line != "READY\n" || err != nil {
		t.Fatalf("server read %q, %v\nopenssl:\n%s", line, err, out.String())
	}
	if got := tlsState(t, r.conn).PeerCertificates[0].Subject.CommonName; got != "A" {
		t.Errorf("peer %q, want A", got)
	}
}

func lookOpenSSL(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not installed")
	}
	return p
}

func TestRefusePlaintext(t *testing.T) {
	certs := chain(t, "B")
	addr, ch := serve(t, mustLoad(t, mtls(certs["B"])))
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("READY\n")); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	wantRefused(t, "server", r.err, ReasonNotTLS, `not TLS (plaintext? first bytes "READY\n")`)
}

// The successor presents a certificate our CA did not sign: the client
// refuses it during the handshake, before writing any application data.
func TestRefuseUntrustedSuccessor(t *testing.T) {
	ours, theirs := chain(t, "A"), chain(t, "Z")
	pair, err := tls.LoadX509KeyPair(theirs["Z"].CertFile, theirs["Z"].KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	// The impostor accepts any client and records whatever arrives.
	got := make(chan error, 1)
	addr, _ := listen(t, func(raw net.Conn) (net.Conn, error) {
		tc := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert})
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(testTimeout))
		if err := tc.Handshake(); err != nil {
			got <- err
			return nil, err
		}
		n, err := tc.Read(make([]byte, 64))
		got <- errors.Join(errors.New("impostor handshake completed"), err, errors.New(strings.Repeat("x", n)))
		return nil, nil
	})
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mustLoad(t, mtls(ours["A"])).Client(context.Background(), raw, addr)
	wantRefused(t, "client", err, ReasonUntrusted, "refused peer "+addr, "trusted: --tls-ca ", theirs["Z"].Pin)
	if c != nil {
		t.Error("Client returned a connection")
	}
	if e := <-got; e == nil || !strings.Contains(e.Error(), "remote error") {
		t.Errorf("impostor: %v; want its handshake to fail on our alert", e)
	}
}

// The successor's certificate is signed by the CA but names another host.
func TestRefuseWrongName(t *testing.T) {
	certs := chain(t, "A")
	caCert, caKey := loadCA(t, certs["A"])
	bc, bk := leafCA(t, caCert, caKey, "B", "b.example")
	srv := mustLoad(t, Options{CertFile: bc, KeyFile: bk, CAFile: certs["A"].CAFile})
	cli, _ := connect(t, srv, mustLoad(t, mtls(certs["A"])))
	wantRefused(t, "client", cli.err, ReasonWrongName, "127.0.0.1", "--tls-server-name")

	o := mtls(certs["A"])
	o.ServerName = "b.example"
	cli, s := connect(t, srv, mustLoad(t, o))
	if cli.err != nil || s.err != nil {
		t.Fatalf("with --tls-server-name: client %v, server %v", cli.err, s.err)
	}
	exchange(t, cli.conn, s.conn)
}

// A peer that connects and never completes the handshake is dropped at the
// context's deadline, or DefaultHandshakeTimeout without one. Fake time
// (testing/synctest) over net.Pipe.
func TestHandshakeTimeout(t *testing.T) {
	certs := chain(t, "B")
	key := newKeyFile(t)
	b := mustLoad(t, mtls(certs["B"]))
	bPSK := mustLoad(t, pskOpts(key, "A", "B", ""))
	for _, tc := range []struct {
		name    string
		srv     *Config
		timeout time.Duration // 0: no deadline on ctx
		peer    func(net.Conn)
		reason  Reason
	}{
		{"silent peer", b, 3 * time.Second, func(net.Conn) {}, ReasonTimeout},
		{"silent peer, default", b, 0, func(net.Conn) {}, ReasonTimeout},
		{"TLS but no PSK proof", bPSK, 3 * time.Second, func(c net.Conn) {
			tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
			tc.Handshake()
		}, ReasonNoPSKProof},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, c := net.Pipe()
				defer c.Close()
				go tc.peer(c)
				ctx := context.Background()
				want := DefaultHandshakeTimeout
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
					want = tc.timeout
				}
				start := time.Now()
				conn, err := tc.srv.Server(ctx, s)
				if conn != nil {
					t.Fatal("Server returned a connection")
				}
				wantRefused(t, "server", err, tc.reason)
				if d := time.Since(start); d != want {
					t.Errorf("refused after %v, want %v", d, want)
				}
			})
		})
	}
}

// The same over real TCP with a client that sends half a ClientHello.
func TestHandshakeTimeoutTCP(t *testing.T) {
	certs := chain(t, "B")
	b := mustLoad(t, mtls(certs["B"]))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	addr, ch := listen(t, func(raw net.Conn) (net.Conn, error) { return b.Server(ctx, raw) })
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.Write([]byte{recordHandshake, 3, 1, 1, 0}) // a record header, no body
	select {
	case r := <-ch:
		wantRefused(t, "server", r.err, ReasonTimeout, "not completed within")
	case <-time.After(testTimeout):
		t.Fatal("handshake deadline not enforced")
	}
}
