package secure

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Draft: Security Considerations (pre-shared keys). Whoever answers at a
// successor's address sees one proof and can test guesses offline, so a
// key must be random: ParsePSK refuses passphrases, short keys and
// patterns, and accepts what NewPSK and openssl rand write.
func TestParsePSK(t *testing.T) {
	raw32, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(string(NewPSK())))
	long := make([]byte, 96)
	for i := range long {
		long[i] = raw32[i%32] ^ byte(i*7)
	}
	for _, tc := range []struct {
		name, text string
		want       string // "" accepts; else a part of the error
	}{
		{"NewPSK", string(NewPSK()), ""},
		{"hex", hex.EncodeToString(raw32) + "\n", ""},
		{"HEX", strings.ToUpper(hex.EncodeToString(raw32)), ""},
		{"base64 url, unpadded", base64.RawURLEncoding.EncodeToString(raw32), ""},
		{"wrapped base64", base64.StdEncoding.EncodeToString(long)[:64] + "\n" + base64.StdEncoding.EncodeToString(long)[64:] + "\n", ""},
		{"empty", " \n\t", "empty"},
		{"the issue's passphrase", "passwordpassword\n", "12 bytes of key material (read as base64), need at least 32"},
		{"short hex", hex.EncodeToString(raw32[:16]), "16 bytes of key material (read as hex)"},
		{"sentence", "correct horse battery staple is my chain key", "several words"},
		{"punctuation", "Tr0ub4dor&3-is-a-very-long-password-indeed!!", "neither base64 nor hex"},
		{"long lower-case phrase", strings.Repeat("chainsynckeyphrase", 4), "upper and lower case"},
		{"digits only", strings.Repeat("31415926", 8), "both digits and letters"},
		{"repeated word", strings.Repeat("Password", 8), "only 6 different values"},
		{"zeros", strings.Repeat("00", 32), "both digits and letters"},
		{"pattern", strings.Repeat("0123456789abcdef", 4), "only 8 different values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := ParsePSK([]byte(tc.text))
			if tc.want == "" {
				if err != nil || len(key) < MinPSKBytes {
					t.Fatalf("refused %q: %v", tc.text, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %q", tc.text)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	// NewPSK's keys are always accepted (the randomness checks must not
	// refuse real keys).
	for range 2000 {
		if _, err := ParsePSK(NewPSK()); err != nil {
			t.Fatalf("NewPSK output refused: %v", err)
		}
	}
	if bytes.Equal(NewPSK(), NewPSK()) {
		t.Fatal("NewPSK repeated itself")
	}
}

// A key file that group or others can read is refused at Load, as ssh
// refuses such a private key; the error says how to fix it.
func TestKeyFilePermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	certs := chain(t, "A")
	a := certs["A"]
	key := newKeyFile(t)
	for _, mode := range []fs.FileMode{0o640, 0o604, 0o644, 0o660} {
		if err := os.Chmod(key, mode); err != nil {
			t.Fatal(err)
		}
		_, err := Load(pskOpts(key, "", "A", "B"))
		if err == nil || !strings.Contains(err.Error(), "--psk-file "+key+" is accessible by group or others") ||
			!strings.Contains(err.Error(), "chmod 600 "+key) {
			t.Errorf("PSK file mode %04o: %v", mode, err)
		}
		if err := os.Chmod(a.KeyFile, mode); err != nil {
			t.Fatal(err)
		}
		_, err = Load(mtls(a))
		if err == nil || !strings.Contains(err.Error(), "--tls-key "+a.KeyFile+" is accessible by group or others") {
			t.Errorf("TLS key mode %04o: %v", mode, err)
		}
	}
	for _, mode := range []fs.FileMode{0o600, 0o400} {
		os.Chmod(key, mode)
		os.Chmod(a.KeyFile, mode)
		mustLoad(t, pskOpts(key, "", "A", "B"))
		mustLoad(t, mtls(a))
	}
}

// WritePSKFile writes a key Load accepts, mode 0600, and never replaces a
// file unless asked to.
func TestWritePSKFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "chain.psk")
	if err := WritePSKFile(p, false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", fi.Mode().Perm())
	}
	first, _ := os.ReadFile(p)
	mustLoad(t, pskOpts(p, "", "A", "B"))
	if err := WritePSKFile(p, false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second write: %v, want fs.ErrExist", err)
	}
	if again, _ := os.ReadFile(p); !bytes.Equal(again, first) {
		t.Fatal("the refused write changed the file")
	}
	if err := WritePSKFile(p, true); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(p); bytes.Equal(again, first) {
		t.Fatal("overwrite kept the old key")
	}
	if left := tempFiles(t, dir); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// tempFiles lists the writer's temporary files in dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			out = append(out, e.Name())
		}
	}
	return out
}
