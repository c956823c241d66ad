package secure

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// minDistinct is the fewest different byte values accepted in a key of
// MinPSKBytes or more. 32 random bytes have about 30; fewer than 16 happens
// by chance about once in 10^9 keys, but is what a repeated word or a
// pattern gives.
const minDistinct = 16

// NewPSK returns a new random key of MinPSKBytes bytes in the form a PSK
// file holds: base64 and a newline.
func NewPSK() []byte {
	key := make([]byte, MinPSKBytes)
	_, _ = rand.Read(key) // crypto/rand.Read never fails (Go 1.24+)
	return []byte(base64.StdEncoding.EncodeToString(key) + "\n")
}

// WritePSKFile writes a new key ([NewPSK]) to path with mode 0600, synced
// together with its directory. It refuses to replace an existing file (the
// error wraps fs.ErrExist) unless overwrite is true.
func WritePSKFile(path string, overwrite bool) error {
	return writeFile(path, NewPSK(), 0o600, overwrite)
}

// ParsePSK returns the key material of a PSK file's contents: one word of
// base64 (standard or URL alphabet, padded or not; line breaks inside are
// ignored) or hex, surrounded by white space at most, that decodes to at least [MinPSKBytes] bytes and
// looks random. Passphrases, short keys and patterns are refused: an
// attacker who sees one proof can test guesses offline, so the key must
// be too random to guess.
func ParsePSK(data []byte) ([]byte, error) {
	text := bytes.TrimSpace(data)
	if len(text) == 0 {
		return nil, errors.New("file is empty")
	}
	if bytes.ContainsAny(text, " \t") {
		return nil, errors.New("holds several words, which looks like a passphrase: a key is one word of base64 or hex encoding random bytes")
	}
	// Long base64 is often wrapped (openssl rand -base64 64).
	text = bytes.ReplaceAll(bytes.ReplaceAll(text, []byte("\r"), nil), []byte("\n"), nil)
	var key []byte
	var form string
	if k, err := hex.DecodeString(string(text)); err == nil {
		key, form = k, "hex"
	} else {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if k, err := enc.DecodeString(string(text)); err == nil {
				key, form = k, "base64"
				break
			}
		}
		if key == nil {
			return nil, errors.New("is neither base64 nor hex, which looks like a passphrase: a key is random bytes written as base64 or hex")
		}
	}
	if len(key) < MinPSKBytes {
		return nil, fmt.Errorf("holds %d bytes of key material (read as %s), need at least %d random bytes: a passphrase or a short key can be guessed", len(key), form, MinPSKBytes)
	}
	// Random text has every kind of character its alphabet offers; typed
	// words do not. (The odds that a random key fails are below 10^-9.)
	switch {
	case form == "hex" && (!bytes.ContainsAny(text, "0123456789") || !bytes.ContainsAny(text, "abcdefABCDEF")):
		return nil, errors.New("does not look random (hex of random bytes has both digits and letters)")
	case form == "base64" && (!bytes.ContainsAny(text, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") || !bytes.ContainsAny(text, "abcdefghijklmnopqrstuvwxyz")):
		return nil, errors.New("does not look random (base64 of random bytes has both upper and lower case letters): a passphrase?")
	}
	var seen [256]bool
	distinct := 0
	for _, b := range key {
		if !seen[b] {
			seen[b] = true
			distinct++
		}
	}
	if distinct < minDistinct {
		return nil, fmt.Errorf("does not look random: its %d bytes take only %d different values (a repeated word or a pattern?)", len(key), distinct)
	}
	return key, nil
}
