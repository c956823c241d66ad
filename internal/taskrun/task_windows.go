package taskrun

import (
	"os"
	"sync"
	"syscall"
)

// Windows has no process groups to signal, no parent-death signal and no
// /proc: a task is the one process the node started (with its own console
// process group, so a Ctrl-C for the node does not reach it), and only
// that process is killed (TerminateProcess), at once, whatever the stop
// signal. What it started is neither found nor killed, by the node or by
// the reaper (docs/OPERATIONS.md, "Other systems").

// taskAttr starts a task in a new console process group.
func taskAttr() *syscall.SysProcAttr { return groupAttr() }

func lockThread()   {}
func unlockThread() {}

// groupAlive: the task's process was waited for, so it is gone.
func groupAlive(int) bool { return false }

// tokenGroups finds nothing here: no /proc to read environments from.
func tokenGroups(string) []int { return nil }

// groupAttr starts a child in a new console process group.
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

// held are the processes holdGroup opened, by pid: a pid is never reused
// while a handle to its process is open, so a kill through the handle
// never reaches another process.
var held sync.Map // int -> *os.Process

// holdGroup opens the process pid, so killGroup can kill it.
func holdGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		held.Store(pid, p)
	}
}

// releaseGroup closes what holdGroup opened.
func releaseGroup(pid int) {
	if p, ok := held.LoadAndDelete(pid); ok {
		_ = p.(*os.Process).Release()
	}
}

// killGroup kills the process pgid (the group's leader; no signal but a
// kill exists here), whatever sig is, if holdGroup opened it; else it
// does nothing (ESRCH). Sig 0 only looks.
func killGroup(pgid int, sig syscall.Signal) error {
	p, ok := held.Load(pgid)
	if !ok {
		return syscall.ESRCH
	}
	if sig == 0 {
		return nil
	}
	return p.(*os.Process).Kill()
}

// spareGroups: no group is ever found by token here, so none need sparing.
func spareGroups() map[int]bool { return map[int]bool{} }
