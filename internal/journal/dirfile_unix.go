//go:build unix && !linux

package journal

import (
	"os"
	"path/filepath"
	"syscall"
)

// openIn opens name in the directory d without following a symbolic link
// (O_NOFOLLOW on the last component; this system's syscall package has
// no openat, so the path is joined).
func openIn(d *os.File, name string, flag int, perm uint32) (*os.File, error) {
	return os.OpenFile(filepath.Join(d.Name(), name), flag|syscall.O_NOFOLLOW, os.FileMode(perm))
}

// removeIn removes name (a file, or a symbolic link itself, never its
// target) from the directory d.
func removeIn(d *os.File, name string) error {
	return os.Remove(filepath.Join(d.Name(), name))
}

// renameIn renames oldName to newName within the directory d. A symbolic
// link at newName is replaced, not followed.
func renameIn(d *os.File, oldName, newName string) error {
	return os.Rename(filepath.Join(d.Name(), oldName), filepath.Join(d.Name(), newName))
}
