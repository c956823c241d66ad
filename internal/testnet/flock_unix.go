//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package testnet

import (
	"os"
	"syscall"
)

// portLocks: whether FreeAddrs locks the ports it hands out (it does).
const portLocks = true

// flock takes an exclusive flock(2) on f without waiting.
func flock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
