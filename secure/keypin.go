package secure

import (
	"crypto"
	"crypto/x509"
	"fmt"
)

// PinOfKey returns the pin of a public key, in the form [PinOf] gives a
// certificate's: the pin of a certificate is the pin of its key, so a
// key that signs without a certificate (a receipt key) is named the
// same way as one that comes with one.
func PinOfKey(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("secure: %w", err)
	}
	return pinOfSPKI(der), nil
}

// ParsePins checks one or more pins joined by ';' (sha256// and 44
// characters of base64 each), as --pin-prev takes them, and returns them;
// flag names the setting in the error.
func ParsePins(flag, s string) ([]string, error) { return parsePins(flag, s) }

// WriteKeyFile writes key as PKCS #8 PEM to path with mode 0600, synced
// together with its directory. It refuses to replace an existing file
// (the error wraps fs.ErrExist) unless overwrite is true.
func WriteKeyFile(path string, key crypto.Signer, overwrite bool) error {
	data, err := keyPEM(key)
	if err != nil {
		return fmt.Errorf("secure: %w", err)
	}
	return WritePrivateFile(path, data, overwrite)
}

// WritePrivateFile writes data to path with mode 0600, synced together
// with its directory: a crash leaves the old file or the new one, never a
// part. It refuses to replace an existing file (the error wraps
// fs.ErrExist) unless overwrite is true.
func WritePrivateFile(path string, data []byte, overwrite bool) error {
	return writeFile(path, data, 0o600, overwrite)
}
