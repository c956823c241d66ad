package secure

import (
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

func TestLoadWarnings(t *testing.T) {
	certs := chain(t, "A")
	a := certs["A"]
	c := mustLoad(t, Options{CertFile: a.CertFile, KeyFile: a.KeyFile})
	w := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{"any TLS client can become this node's predecessor", "system's trust roots"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
	// The Head is warned only about its successor, the Tail only about
	// its predecessor.
	head := strings.Join(mustLoad(t, Options{CertFile: a.CertFile, KeyFile: a.KeyFile, NoPred: true}).Warnings(), "\n")
	tail := strings.Join(mustLoad(t, Options{CertFile: a.CertFile, KeyFile: a.KeyFile, NoSucc: true}).Warnings(), "\n")
	if strings.Contains(head, "predecessor") || !strings.Contains(head, "system's trust roots") {
		t.Errorf("Head's warnings %q: want the successor's, none about a predecessor", head)
	}
	if strings.Contains(tail, "successor") || !strings.Contains(tail, "predecessor") {
		t.Errorf("Tail's warnings %q: want the predecessor's, none about a successor", tail)
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
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile}, "TLS 1.3 (successor checked against system roots, predecessor NOT authenticated)"},
		// A Head has no predecessor, a Tail no successor: nothing is said
		// about the link a node does not have.
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, PinNext: a.Pin, NoPred: true}, "TLS 1.3 (pinned successor)"},
		{Options{CertFile: a.CertFile, KeyFile: a.KeyFile, NoPred: true}, "TLS 1.3 (successor checked against system roots)"},
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
