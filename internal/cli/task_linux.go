package cli

import (
	"runtime"
	"syscall"
)

// taskAttr makes a task the leader of a new process group, killed if the
// node dies (Linux's parent-death signal).
func taskAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }
