//go:build unix

package tracefile

import (
	"os"
	"syscall"
)

// openAppend opens path for appending, created 0600, without following
// a symbolic link at path (O_NOFOLLOW: the open fails with ELOOP).
func openAppend(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
}
