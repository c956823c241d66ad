package secure

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// The pin of a key is the pin of any certificate for it, so --pin and
// --receipt-pin take the same values; a receipt key is written 0600 and
// never over an existing file without overwrite.
func TestPinOfKeyAndWriteKeyFile(t *testing.T) {
	dir := t.TempDir()
	gen, err := GenerateCerts(dir, []NodeSpec{{Name: "B"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(gen[0].CertFile)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := firstCert(data)
	if err != nil {
		t.Fatal(err)
	}
	if pin, err := PinOfKey(cert.PublicKey); err != nil || pin != gen[0].Pin || pin != PinOf(cert) {
		t.Fatalf("PinOfKey = %q, %v; the certificate's pin is %q", pin, err, gen[0].Pin)
	}
	if _, err := ParsePins("--receipt-pin B", gen[0].Pin); err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePins("--receipt-pin B", "sha256//short"); err == nil {
		t.Fatal("ParsePins took a short pin")
	}

	_, key, _ := ed25519.GenerateKey(rand.Reader)
	path := filepath.Join(dir, "receipt.pem")
	if err := WriteKeyFile(path, key, false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	b, _ := os.ReadFile(path)
	blk, _ := pem.Decode(b)
	back, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil || !key.Equal(back) {
		t.Fatalf("read back %v", err)
	}
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	if err := WriteKeyFile(path, other, false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("over an existing key: %v", err)
	}
	if err := WriteKeyFile(path, other, true); err != nil {
		t.Fatal(err)
	}
}
