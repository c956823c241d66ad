//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package journal

import (
	"os"
	"syscall"
)

// supported: this system keeps state directories (it has flock(2)).
func supported() error { return nil }

// flock takes an exclusive flock(2) on f without waiting; it fails if
// another open file description holds one.
func flock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
