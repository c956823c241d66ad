package taskrun

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

// eachLiveProc calls fn with the pid (as named in /proc) and the process
// group of every process that is not a zombie, from /proc/PID/stat ("PID
// (COMM) STATE PPID PGRP ..."), until fn returns false. It fails only if
// /proc cannot be listed.
func eachLiveProc(fn func(pid string, pgid int) bool) error {
	d, err := os.Open("/proc")
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
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
		if len(f) < 3 || bytes.Equal(f[0], []byte("Z")) {
			continue
		}
		pgid, err := strconv.Atoi(string(f[2]))
		if err != nil {
			continue
		}
		if !fn(name, pgid) {
			break
		}
	}
	return nil
}

// groupAlive reports whether process group pgid has a member that is not
// a zombie.
func groupAlive(pgid int) bool {
	alive := false
	err := eachLiveProc(func(_ string, pg int) bool {
		alive = pg == pgid
		return !alive
	})
	return alive || err != nil // cannot tell: rely on kill(-pgid, 0) alone
}

// tokenGroups returns the process groups of the live processes whose
// environment holds the entry kv ("NAME=VALUE"), from /proc/PID/environ.
func tokenGroups(kv string) []int {
	want := append([]byte(kv), 0)
	var pgids []int
	_ = eachLiveProc(func(pid string, pgid int) bool {
		env, err := os.ReadFile("/proc/" + pid + "/environ")
		if err == nil && pgid > 1 && (bytes.HasPrefix(env, want) || bytes.Contains(env, append([]byte{0}, want...))) {
			pgids = append(pgids, pgid)
		}
		return true
	})
	return pgids
}
