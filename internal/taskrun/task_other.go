//go:build unix && !linux

package taskrun

import (
	"errors"
	"syscall"
)

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

// eachLiveProc cannot list processes here (no /proc).
func eachLiveProc(func(pid string, pgid int) bool) error {
	return errors.New("no /proc to list processes")
}
