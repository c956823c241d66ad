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

// tokenGroups returns the process groups of the live processes whose
// environment holds the entry kv ("NAME=VALUE"), from /proc/PID/environ
// and /proc/PID/stat.
func tokenGroups(kv string) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil
	}
	want := append([]byte(kv), 0)
	var pgids []int
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		env, err := os.ReadFile("/proc/" + name + "/environ")
		if err != nil || !bytes.HasPrefix(env, want) && !bytes.Contains(env, append([]byte{0}, want...)) {
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
		if pgid, err := strconv.Atoi(string(f[2])); err == nil && pgid > 1 {
			pgids = append(pgids, pgid)
		}
	}
	return pgids
}
