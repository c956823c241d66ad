//go:build !unix

package journal

import "os"

// openIn is never reached here: Open refuses first (see "Other systems"
// in the package doc).
func openIn(d *os.File, name string, flag int, perm uint32) (*os.File, error) {
	return nil, supported()
}

// removeIn is never reached here: Open refuses first.
func removeIn(d *os.File, name string) error { return supported() }

// renameIn is never reached here: Open refuses first.
func renameIn(d *os.File, oldName, newName string) error { return supported() }
