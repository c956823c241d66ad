package cli

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"syscall"
)

// taskAttr makes a task the leader of a new process group, killed if the
// node dies (Linux's parent-death signal).
func taskAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }

// groupAlive reports whether process group pgid has a member that is not
// a zombie, from /proc/PID/stat ("PID (COMM) STATE PPID PGRP ...").
func groupAlive(pgid int) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return true // cannot tell: rely on kill(-pgid, 0) alone
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return true
	}
	want := []byte(strconv.Itoa(pgid))
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) >= 3 && !bytes.Equal(f[0], []byte("Z")) && bytes.Equal(f[2], want) {
			return true
		}
	}
	return false
}

// gateExe is the binary that holds a starting task at its gate:
// /proc/self/exe, the node's own image even if an upgrade replaced the
// file it was started from, else self.
func gateExe(self string) string {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe"
	}
	return self
}

// execTask replaces the held process with the task. The parent-death
// signal belongs to a thread and exec keeps only the exec'ing thread's,
// which the runtime's threads other than the first lack: set it on this
// one. (The first thread still has it until the exec, so the node's death
// in between kills the process.)
func execTask(path string, argv, env []string) error {
	runtime.LockOSThread()
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); e != 0 {
		return e
	}
	return syscall.Exec(path, argv, env)
}
