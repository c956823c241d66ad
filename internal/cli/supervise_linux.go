package cli

import (
	"runtime"
	"syscall"
)

// nodeAttr starts a supervised node in a process group of its own, sent
// SIGTERM if supervise dies.
func nodeAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

func lockNodeThread()   { runtime.LockOSThread() }
func unlockNodeThread() { runtime.UnlockOSThread() }
