package secure

import (
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Draft: Security Considerations: `chainsync certs` material for mutual TLS
// and pinning.
func TestGenerateCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	nodes := []NodeSpec{
		{Name: "A", Host: "127.0.0.1:7000"},
		{Name: "node-b", Host: "b.example.com"},
		{Name: "C", Host: "[2001:db8::1]:7000"},
		{Name: "D", Host: "localhost"},
		{Name: "E_1"},
	}
	gen, err := GenerateCerts(dir, nodes, false)
	if err != nil {
		t.Fatal(err)
	}
	wantSANs := map[string]struct{ dns, ips []string }{
		"A":      {[]string{"a", "localhost"}, []string{"127.0.0.1", "::1"}},
		"node-b": {[]string{"b.example.com", "node-b"}, nil},
		"C":      {[]string{"c"}, []string{"2001:db8::1"}},
		"D":      {[]string{"localhost", "d"}, []string{"127.0.0.1", "::1"}},
		"E_1":    {[]string{"localhost"}, []string{"127.0.0.1", "::1"}},
	}
	mode := func(p string) fs.FileMode {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	if m := mode(filepath.Join(dir, CAKeyFileName)); m != 0o600 {
		t.Errorf("CA key mode %04o, want 0600", m)
	}
	if m := mode(filepath.Join(dir, CAFileName)); m != 0o644 {
		t.Errorf("CA cert mode %04o, want 0644", m)
	}
	caPEM, _ := os.ReadFile(filepath.Join(dir, CAFileName))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for i, g := range gen {
		if g.Name != nodes[i].Name {
			t.Fatalf("result %d is %q, want %q", i, g.Name, nodes[i].Name)
		}
		if m := mode(g.KeyFile); m != 0o600 {
			t.Errorf("%s: key mode %04o, want 0600", g.Name, m)
		}
		if m := mode(g.CertFile); m != 0o644 {
			t.Errorf("%s: cert mode %04o, want 0644", g.Name, m)
		}
		if pin, err := PinFile(g.CertFile); err != nil || pin != g.Pin {
			t.Errorf("%s: PinFile = %q, %v; Generated.Pin = %q", g.Name, pin, err, g.Pin)
		}
		data, _ := os.ReadFile(g.CertFile)
		cert, err := firstCert(data)
		if err != nil {
			t.Fatal(err)
		}
		var ips []string
		for _, ip := range cert.IPAddresses {
			ips = append(ips, ip.String())
		}
		w := wantSANs[g.Name]
		if !slices.Equal(cert.DNSNames, w.dns) || !slices.Equal(ips, w.ips) {
			t.Errorf("%s: SANs DNS %q IP %q, want DNS %q IP %q", g.Name, cert.DNSNames, ips, w.dns, w.ips)
		}
		if cert.Subject.CommonName != g.Name {
			t.Errorf("%s: CN %q", g.Name, cert.Subject.CommonName)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s: does not verify for usage %v: %v", g.Name, usage, err)
			}
		}
		if host := hostOf(nodes[i].Host); host != "" && net.ParseIP(host) == nil {
			if err := cert.VerifyHostname(host); err != nil {
				t.Errorf("%s: %v", g.Name, err)
			}
		}
	}

	// A generated pair completes mutual TLS (and the node name works as
	// --tls-server-name).
	byName := map[string]Generated{}
	for _, g := range gen {
		byName[g.Name] = g
	}
	o := mtls(byName["A"])
	o.ServerName = "d"
	cli, srv := connect(t, mustLoad(t, mtls(byName["D"])), mustLoad(t, o))
	if cli.err != nil || srv.err != nil {
		t.Fatalf("client: %v; server: %v", cli.err, srv.err)
	}
	exchange(t, cli.conn, srv.conn)

	// Existing files are kept unless overwrite is set.
	if _, err := GenerateCerts(dir, nodes[:1], false); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second run: %v, want fs.ErrExist", err)
	}
	if pin, _ := PinFile(byName["A"].CertFile); pin != byName["A"].Pin {
		t.Error("a refused run changed a file")
	}
	again, err := GenerateCerts(dir, nodes[:1], true)
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Pin == byName["A"].Pin {
		t.Error("overwrite kept the old key")
	}
	if m := mode(again[0].KeyFile); m != 0o600 {
		t.Errorf("overwritten key mode %04o", m)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) != 0 {
		t.Errorf("temporary files left: %q", left)
	}
}

func TestGenerateCertsRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []NodeSpec
		want  string
	}{
		{"none", nil, "no nodes"},
		{"bad name", []NodeSpec{{Name: "../x"}}, "node name"},
		{"CA clash", []NodeSpec{{Name: "CA"}}, "clashes"},
		{"duplicate", []NodeSpec{{Name: "a"}, {Name: "A"}}, "clashes"},
		{"key clash", []NodeSpec{{Name: "x"}, {Name: "x-key"}}, "clashes"},
		{"bad host", []NodeSpec{{Name: "a", Host: "b c"}}, "neither an IP address nor a DNS name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := GenerateCerts(dir, tc.nodes, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("files written despite the error: %v", left)
			}
		})
	}
}

// snapshotDir returns every file in dir (not subdirectories) and its bytes.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if e.IsDir() {
			m[e.Name()] = "<dir>"
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

func sameDir(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for k, v := range after {
		if before[k] != v {
			t.Errorf("%s: %s changed or appeared", what, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			t.Errorf("%s: %s disappeared", what, k)
		}
	}
}

// The certificate writer never leaves a mix of old and new files, nor
// temporary ones: a failure part-way (an existing file, a file that appears
// meanwhile, a name it cannot replace, a read-only directory) leaves the
// directory as it was.
func TestGenerateCertsFailures(t *testing.T) {
	nodes := []NodeSpec{{Name: "A"}, {Name: "B"}}
	t.Run("existing file", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "B.pem"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := snapshotDir(t, dir)
		_, err := GenerateCerts(dir, nodes, false)
		if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "B.pem") {
			t.Fatalf("err = %v, want fs.ErrExist naming B.pem", err)
		}
		sameDir(t, "existing file", before, snapshotDir(t, dir))
	})
	t.Run("file appears between check and write", func(t *testing.T) {
		dir := t.TempDir()
		var ss []*staged
		for _, n := range []string{"ca.pem", "A.pem", "B.pem"} {
			s, err := stage(filepath.Join(dir, n), []byte("new "+n), 0o644)
			if err != nil {
				t.Fatal(err)
			}
			ss = append(ss, s)
		}
		if err := os.WriteFile(filepath.Join(dir, "B.pem"), []byte("theirs"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := snapshotDir(t, dir)
		delete(before, filepath.Base(ss[0].tmp)) // the writer's own temporaries go
		delete(before, filepath.Base(ss[1].tmp))
		delete(before, filepath.Base(ss[2].tmp))
		if err := commit(ss, false); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("commit = %v, want fs.ErrExist", err)
		}
		sameDir(t, "raced file", before, snapshotDir(t, dir))
	})
	t.Run("overwrite fails part-way", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := GenerateCerts(dir, nodes, false); err != nil {
			t.Fatal(err)
		}
		// B-key.pem becomes a non-empty directory: renaming over it fails
		// after the CA and A's files were already replaced.
		kb := filepath.Join(dir, "B-key.pem")
		os.Remove(kb)
		if err := os.MkdirAll(filepath.Join(kb, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		before := snapshotDir(t, dir)
		if _, err := GenerateCerts(dir, nodes, true); err == nil || !strings.Contains(err.Error(), "B-key.pem") {
			t.Fatalf("err = %v, want a failure naming B-key.pem", err)
		}
		sameDir(t, "overwrite", before, snapshotDir(t, dir))
	})
	t.Run("read-only directory", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes to read-only directories (the end-to-end test uses a read-only mount)")
		}
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		if _, err := GenerateCerts(dir, nodes, false); err == nil {
			t.Fatal("wrote into a read-only directory")
		}
		if got := snapshotDir(t, dir); len(got) != 0 {
			t.Errorf("files left: %v", got)
		}
	})
}
