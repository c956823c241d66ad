package secure

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"testing"
)

// Draft: Security Considerations ("Production deployments SHOULD use mutual
// TLS ... to prevent node impersonation"): a chain pair with CA-signed
// certificates completes mutual TLS 1.3 and carries protocol lines.
func TestMutualTLS(t *testing.T) {
	certs := chain(t, "A", "B")
	a, b := mustLoad(t, mtls(certs["A"])), mustLoad(t, mtls(certs["B"]))
	if w := a.Warnings(); len(w) != 0 {
		t.Errorf("warnings for a generated chain: %q", w)
	}
	if got := a.Describe(); !strings.HasPrefix(got, "mutual TLS 1.3 (CA ") {
		t.Errorf("Describe = %q", got)
	}
	cli, srv := connect(t, b, a)
	if cli.err != nil || srv.err != nil {
		t.Fatalf("client: %v; server: %v", cli.err, srv.err)
	}
	exchange(t, cli.conn, srv.conn)
	cs, ss := tlsState(t, cli.conn), tlsState(t, srv.conn)
	if cs.Version != tls.VersionTLS13 {
		t.Errorf("version %s, want TLS 1.3", tls.VersionName(cs.Version))
	}
	if got := cs.PeerCertificates[0].Subject.CommonName; got != "B" {
		t.Errorf("client sees successor %q, want B", got)
	}
	if got := ss.PeerCertificates[0].Subject.CommonName; got != "A" {
		t.Errorf("server sees predecessor %q, want A", got)
	}
	if len(ss.VerifiedChains) == 0 {
		t.Error("server did not verify the client chain")
	}
}

// Draft: Security Considerations (certificate pinning): self-signed
// certificates are accepted on the pin alone, in both directions of a link
// and on both ends of it.
func TestPinnedSelfSigned(t *testing.T) {
	xc, xk, xpin := selfSigned(t, "X")
	yc, yk, ypin := selfSigned(t, "Y")
	x := mustLoad(t, Options{CertFile: xc, KeyFile: xk, PinPrev: ypin, PinNext: ypin})
	y := mustLoad(t, Options{CertFile: yc, KeyFile: yk, PinPrev: xpin, PinNext: xpin})
	if got, want := x.Describe(), "mutual TLS 1.3 (pinned predecessor, pinned successor)"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name     string
		srv, cli *Config
		srvCN    string
	}{{"X dials Y", y, x, "Y"}, {"Y dials X", x, y, "X"}} {
		t.Run(tc.name, func(t *testing.T) {
			cli, srv := connect(t, tc.srv, tc.cli)
			if cli.err != nil || srv.err != nil {
				t.Fatalf("client: %v; server: %v", cli.err, srv.err)
			}
			exchange(t, cli.conn, srv.conn)
			if got := tlsState(t, cli.conn).PeerCertificates[0].Subject.CommonName; got != tc.srvCN {
				t.Errorf("client connected to %q, want %q", got, tc.srvCN)
			}
		})
	}
}

// Draft: Security Considerations: with a CA and a pin, both must hold.
func TestCAAndPin(t *testing.T) {
	certs := chain(t, "A", "B", "C")
	a, b, c := certs["A"], certs["B"], certs["C"]
	withPins := func(g Generated, prev, next string) *Config {
		o := mtls(g)
		o.PinPrev, o.PinNext = prev, next
		return mustLoad(t, o)
	}
	t.Run("both hold", func(t *testing.T) {
		cli, srv := connect(t, withPins(b, a.Pin, c.Pin), withPins(a, "", b.Pin))
		if cli.err != nil || srv.err != nil {
			t.Fatalf("client: %v; server: %v", cli.err, srv.err)
		}
		exchange(t, cli.conn, srv.conn)
	})
	t.Run("CA holds, pin does not", func(t *testing.T) {
		// C has a valid CA-signed certificate but B expects A's key.
		cli, srv := connect(t, withPins(b, a.Pin, ""), mustLoad(t, mtls(c)))
		wantRefused(t, "server", srv.err, ReasonWrongPin, "got "+c.Pin, "want "+a.Pin)
		if cli.err == nil {
			wantRefused(t, "client read", readErr(cli.conn), ReasonRejectedByPeer)
		}
	})
	t.Run("pin holds, CA does not", func(t *testing.T) {
		xc, xk, xpin := selfSigned(t, "X")
		x := mustLoad(t, Options{CertFile: xc, KeyFile: xk, CAFile: a.CAFile})
		cli, srv := connect(t, withPins(b, xpin, ""), x)
		wantRefused(t, "server", srv.err, ReasonUntrusted, "trusted: --tls-ca "+a.CAFile)
		if cli.err == nil {
			wantRefused(t, "client read", readErr(cli.conn), ReasonRejectedByPeer)
		}
	})
}

// Draft: Security Considerations (pre-shared keys): PSK alone (ephemeral
// certificates) and PSK on top of mutual TLS both connect.
func TestPSK(t *testing.T) {
	key := newKeyFile(t)
	t.Run("PSK only", func(t *testing.T) {
		c := mustLoad(t, pskOpts(key, "", "A", "B"))
		if got := c.Describe(); got != "TLS 1.3 (PSK "+key+", ephemeral certificate)" {
			t.Errorf("Describe = %q", got)
		}
		cli, srv := connect(t, mustLoad(t, pskOpts(key, "A", "B", "")), c)
		if cli.err != nil || srv.err != nil {
			t.Fatalf("client: %v; server: %v", cli.err, srv.err)
		}
		exchange(t, cli.conn, srv.conn)
	})
	t.Run("PSK and mutual TLS", func(t *testing.T) {
		certs := chain(t, "A", "B")
		oa, ob := mtls(certs["A"]), mtls(certs["B"])
		oa.PSKFile, ob.PSKFile = key, key
		oa.SelfName, oa.NextName = "A", "B"
		ob.PrevName, ob.SelfName = "A", "B"
		cli, srv := connect(t, mustLoad(t, ob), mustLoad(t, oa))
		if cli.err != nil || srv.err != nil {
			t.Fatalf("client: %v; server: %v", cli.err, srv.err)
		}
		exchange(t, cli.conn, srv.conn)
	})
}

// Draft: Security Considerations: the server reads the PSK proof and not a
// byte more, so a protocol line sent in the same segment as the proof is
// delivered intact.
func TestPSKProofThenLinePipelined(t *testing.T) {
	key := newKeyFile(t)
	srv, cli := mustLoad(t, pskOpts(key, "A", "B", "")), mustLoad(t, pskOpts(key, "", "A", "B"))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	addr, ch := listen(t, func(raw net.Conn) (net.Conn, error) { return srv.Server(ctx, raw) })
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, cli.client.Clone())
	defer tc.Close()
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := cli.proof(tc, macClient, "A", "B")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Write([]byte(pskLinePrefix + "A B " + hex.EncodeToString(p) + "\nREADY\n")); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.conn.Close()
	line, err := bufio.NewReader(r.conn).ReadString('\n')
	if line != "READY\n" || err != nil {
		t.Fatalf("server read %q, %v; want READY", line, err)
	}
}

// A plain-TCP Config (no options, or nil) hands connections through.
func TestPlainTCP(t *testing.T) {
	c := mustLoad(t, Options{})
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	for _, cfg := range []*Config{c, nil} {
		if got, err := cfg.Client(context.Background(), a, "x:1"); got != a || err != nil {
			t.Errorf("Client = %v, %v; want the raw conn", got, err)
		}
		if got, err := cfg.Server(context.Background(), b); got != b || err != nil {
			t.Errorf("Server = %v, %v; want the raw conn", got, err)
		}
		if !strings.HasPrefix(cfg.Describe(), "plain TCP") || cfg.Enabled() || cfg.Warnings() != nil {
			t.Errorf("plain config: Describe %q, Enabled %v, Warnings %q", cfg.Describe(), cfg.Enabled(), cfg.Warnings())
		}
	}
}

// A canceled context is not a refusal: the node is shutting down.
func TestHandshakeCanceled(t *testing.T) {
	certs := chain(t, "A", "B")
	b := mustLoad(t, mtls(certs["B"]))
	ctx, cancel := context.WithCancel(context.Background())
	addr, ch := listen(t, func(raw net.Conn) (net.Conn, error) { return b.Server(ctx, raw) })
	raw, err := net.Dial("tcp", addr) // says nothing
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	cancel()
	r := <-ch
	var re *RefusedError
	if !errors.Is(r.err, context.Canceled) || errors.As(r.err, &re) {
		t.Fatalf("got %v, want an error wrapping context.Canceled", r.err)
	}
}
