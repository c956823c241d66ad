//go:build unix

package taskrun

import (
	"os"
	"syscall"
)

// groupAttr makes a child (the reaper, a shell hook) the leader of a new
// process group.
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup sends sig to every process in process group pgid (sig 0:
// only looks; ESRCH when the group is empty).
func killGroup(pgid int, sig syscall.Signal) error { return syscall.Kill(-pgid, sig) }

// holdGroup and releaseGroup do nothing here: a group is signalled by
// its id (see task_windows.go).
func holdGroup(int)    {}
func releaseGroup(int) {}

// spareGroups returns the reaper's own process group and its node's: never
// a task's, whatever a process carrying a token did.
func spareGroups() map[int]bool {
	spare := map[int]bool{syscall.Getpgrp(): true}
	if pg, err := syscall.Getpgid(os.Getppid()); err == nil {
		spare[pg] = true
	}
	return spare
}
