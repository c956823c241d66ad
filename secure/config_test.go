package secure

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Load refuses bad options at startup, naming the flag (and file) at fault.
func TestLoadErrors(t *testing.T) {
	certs := chain(t, "A", "B")
	a, b := certs["A"], certs["B"]
	dir := t.TempDir()
	write := func(name, data string, perm os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), perm); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(dir, "missing.pem")
	empty := write("empty", " \n", 0o600)
	short := write("short", "tooshort\n", 0o600)
	good := write("good", string(NewPSK()), 0o600)
	garbage := write("garbage.pem", "hello", 0o644)
	for _, tc := range []struct {
		name string
		o    Options
		want []string // substrings of the error
	}{
		{"cert without key", Options{CertFile: a.CertFile}, []string{"--tls-cert " + a.CertFile, "without --tls-key"}},
		{"key without cert", Options{KeyFile: a.KeyFile}, []string{"--tls-key " + a.KeyFile, "without --tls-cert"}},
		{"missing cert", Options{CertFile: missing, KeyFile: a.KeyFile}, []string{"--tls-cert " + missing, "no such file"}},
		{"cert is a key", Options{CertFile: a.KeyFile, KeyFile: a.KeyFile}, []string{"--tls-cert", "private key, not a certificate"}},
		{"cert not PEM", Options{CertFile: garbage, KeyFile: a.KeyFile}, []string{"--tls-cert " + garbage, "no PEM certificate"}},
		{"key of another node", Options{CertFile: a.CertFile, KeyFile: b.KeyFile}, []string{"do not belong together"}},
		{"missing CA", Options{CertFile: a.CertFile, KeyFile: a.KeyFile, CAFile: missing}, []string{"--tls-ca " + missing}},
		{"CA not PEM", Options{CertFile: a.CertFile, KeyFile: a.KeyFile, CAFile: garbage}, []string{"--tls-ca " + garbage, "no PEM certificate"}},
		{"CA without own cert", Options{CAFile: a.CAFile}, []string{"--tls-ca", "give --tls-cert and --tls-key"}},
		{"pin without own cert", Options{PinNext: b.Pin}, []string{"--pin-next", "give --tls-cert and --tls-key"}},
		{"pin not a pin", Options{CertFile: a.CertFile, KeyFile: a.KeyFile, PinPrev: "abc"}, []string{"--pin-prev \"abc\"", "sha256//"}},
		{"pin wrong length", Options{CertFile: a.CertFile, KeyFile: a.KeyFile, PinNext: "sha256//AAAA"}, []string{"--pin-next", "44 characters"}},
		{"pin empty list", Options{CertFile: a.CertFile, KeyFile: a.KeyFile, PinNext: ";"}, []string{"--pin-next is empty"}},
		{"missing PSK", Options{PSKFile: missing}, []string{"--psk-file " + missing, "chainsync psk FILE"}},
		{"empty PSK", Options{PSKFile: empty}, []string{"--psk-file " + empty, "empty"}},
		{"short PSK", Options{PSKFile: short, SelfName: "A"}, []string{"--psk-file " + short, "6 bytes of key material (read as base64), need at least 32 random bytes", "chainsync psk FILE"}},
		{"PSK without names", Options{PSKFile: good}, []string{"--psk-file needs the chain's names", "--chain"}},
		{"PSK, own neighbour", pskOpts(good, "A", "A", ""), []string{"cannot be its own neighbour"}},
		{"server name alone", Options{ServerName: "b.example"}, []string{"--tls-server-name needs TLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.o)
			if err == nil {
				t.Fatalf("Load succeeded: %s", c.Describe())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestHalfAuthenticatedRefused (issue: a TLS node without --tls-ca,
// --pin-prev or --psk-file accepted anyone as its predecessor): TLS
// settings that authenticate nobody on a side the node has are refused,
// each side on its own, unless the operator says so with
// --insecure-accept-any-predecessor or --insecure-accept-any-successor
// (then a warning says it). The system's trust roots authenticate no
// successor. Client and Server refuse such a side too, for library users
// who skip CheckSides.
func TestHalfAuthenticatedRefused(t *testing.T) {
	certs := chain(t, "A", "B")
	a := certs["A"]
	psk := newKeyFile(t)
	bare := Options{CertFile: a.CertFile, KeyFile: a.KeyFile}
	with := func(f func(*Options)) Options { o := bare; f(&o); return o }
	for _, tc := range []struct {
		name             string
		o                Options
		hasPred, hasSucc bool
		want             string // "" means accepted
	}{
		{"cert only, middle", bare, true, true, "authenticate no predecessor"},
		{"cert only, tail", bare, true, false, "authenticate no predecessor"},
		{"cert only, head", bare, false, true, "authenticate no successor"},
		{"pin-next only, middle", with(func(o *Options) { o.PinNext = a.Pin }), true, true, "--insecure-accept-any-predecessor"},
		{"pin-next only, head", with(func(o *Options) { o.PinNext = a.Pin }), false, true, ""},
		{"pin-prev only, middle", with(func(o *Options) { o.PinPrev = a.Pin }), true, true, "--insecure-accept-any-successor"},
		{"pin-prev only, tail", with(func(o *Options) { o.PinPrev = a.Pin }), true, false, ""},
		{"both pins", with(func(o *Options) { o.PinPrev, o.PinNext = a.Pin, a.Pin }), true, true, ""},
		{"CA", mtls(a), true, true, ""},
		{"PSK", Options{PSKFile: psk, SelfName: "B", PrevName: "A", NextName: "C"}, true, true, ""},
		{"accepted predecessor", with(func(o *Options) { o.PinNext, o.AcceptAnyPredecessor = a.Pin, true }), true, true, ""},
		{"accepted both", with(func(o *Options) { o.AcceptAnyPredecessor, o.AcceptAnySuccessor = true, true }), true, true, ""},
		{"accepted successor only", with(func(o *Options) { o.AcceptAnySuccessor = true }), true, true, "authenticate no predecessor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustLoad(t, tc.o)
			err := c.CheckSides(tc.hasPred, tc.hasSucc)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	c := mustLoad(t, with(func(o *Options) { o.AcceptAnyPredecessor, o.AcceptAnySuccessor = true, true }))
	w := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{"any TLS client can become this node's predecessor", "not checked at all"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
	// The Head is warned only about its successor, the Tail only about
	// its predecessor.
	both := Options{CertFile: a.CertFile, KeyFile: a.KeyFile, AcceptAnyPredecessor: true, AcceptAnySuccessor: true}
	headOpts, tailOpts := both, both
	headOpts.NoPred, tailOpts.NoSucc = true, true
	head := strings.Join(mustLoad(t, headOpts).Warnings(), "\n")
	tail := strings.Join(mustLoad(t, tailOpts).Warnings(), "\n")
	if strings.Contains(head, "predecessor") || !strings.Contains(head, "not checked at all") {
		t.Errorf("Head's warnings %q: want the successor's, none about a predecessor", head)
	}
	if strings.Contains(tail, "successor") || !strings.Contains(tail, "predecessor") {
		t.Errorf("Tail's warnings %q: want the predecessor's, none about a successor", tail)
	}
	if w := mustLoad(t, bare).Warnings(); len(w) != 0 {
		t.Errorf("warnings without the flags: %q (CheckSides refuses instead)", w)
	}
	// Library users who skip CheckSides: nothing to authenticate with is
	// refused at the connection.
	c = mustLoad(t, bare)
	p1, p2 := net.Pipe()
	defer p2.Close()
	if _, err := c.Server(context.Background(), p1); err == nil || !strings.Contains(err.Error(), "nothing authenticates the predecessor") {
		t.Errorf("Server: %v", err)
	}
	p1, p2 = net.Pipe()
	defer p2.Close()
	if _, err := c.Client(context.Background(), p1, "b:1"); err == nil || !strings.Contains(err.Error(), "nothing authenticates the successor") {
		t.Errorf("Client: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	certs := chain(t, "A")
	a := certs["A"]
	psk := newKeyFile(t)
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "plain TCP (no TLS: use only on loopback or a trusted network)"},
		{mtls(a), "mutual TLS 1.3 (CA " + a.CAFile + ")"},
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, CAFile: a.CAFile, PinNext: a.Pin}, "mutual TLS 1.3 (CA " + a.CAFile + ", pinned successor)"},
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, CAFile: a.CAFile, ServerName: "b"}, "mutual TLS 1.3 (CA " + a.CAFile + ", successor name b)"},
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, PinNext: a.Pin}, "TLS 1.3 (pinned successor, predecessor NOT authenticated)"},
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, PSKFile: psk, SelfName: "A"}, "TLS 1.3 (PSK " + psk + ")"},
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile}, "TLS 1.3 (successor NOT authenticated, predecessor NOT authenticated)"},
		// A Head has no predecessor, a Tail no successor: nothing is said
		// about the link a node does not have.
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, PinNext: a.Pin, NoPred: true}, "TLS 1.3 (pinned successor)"},
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, NoPred: true}, "TLS 1.3 (successor NOT authenticated)"},
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, NoSucc: true}, "TLS 1.3 (predecessor NOT authenticated)"},
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, CAFile: a.CAFile, NoSucc: true}, "mutual TLS 1.3 (CA " + a.CAFile + ")"},
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, NoPred: true, NoSucc: true}, "TLS 1.3"},
	} {
		if got := mustLoad(t, tc.o).Describe(); got != tc.want {
			t.Errorf("Describe(%+v) = %q, want %q", tc.o, got, tc.want)
		}
	}
}

func TestPinFile(t *testing.T) {
	certs := chain(t, "A")
	if got, err := PinFile(certs["A"].CertFile); err != nil || got != certs["A"].Pin {
		t.Errorf("PinFile = %q, %v; want %q", got, err, certs["A"].Pin)
	}
	if _, err := PinFile(certs["A"].KeyFile); err == nil || !strings.Contains(err.Error(), "private key") {
		t.Errorf("PinFile(key) error = %v", err)
	}
	if p, err := parsePins("--pin-next", certs["A"].Pin+"; "+certs["A"].Pin); err != nil || len(p) != 2 {
		t.Errorf("parsePins of two pins = %q, %v", p, err)
	}
}
