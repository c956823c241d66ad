//go:build unix

package control

import "syscall"

// umask sets the process's file mode creation mask and returns the old one.
func umask(mask int) int { return syscall.Umask(mask) }
