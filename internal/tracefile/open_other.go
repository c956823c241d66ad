//go:build !unix

package tracefile

import (
	"os"
	"syscall"
)

// openAppend opens path for appending, created 0600, refusing a symbolic
// link at path. This system has no O_NOFOLLOW, so the link is looked for
// just before the open: one planted between the look and the open is
// followed.
func openAppend(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.ELOOP}
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
}
