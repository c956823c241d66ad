//go:build !linux

package cli

import "syscall"

// taskAttr makes a task the leader of a new process group. Without a
// parent-death signal, the reaper alone kills it if the node dies.
func taskAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func lockThread()   {}
func unlockThread() {}

// groupAlive cannot tell a zombie from a live process here: a group is
// alive while kill(-pgid, 0) finds any member.
func groupAlive(int) bool { return true }

// tokenGroups finds nothing here: without /proc, only the groups the
// reaper was told are killed with the node.
func tokenGroups(string) []int { return nil }
