package taskrun

// docs/DESIGN.md, "The task dies with its node": on Linux, where the node
// may create cgroups (cgroup v2, its own cgroup delegated to it, or run as
// root), each run of the task starts in a cgroup of its own, a child of
// the node's ("chainsync-KEY/task-TOKEN"). Killing the cgroup
// (cgroup.kill) takes every process the task started, also one that left
// the task's process group (setsid, a daemon that detaches), which a
// process-group kill cannot find. The task's end, the node's stop, the
// reaper at its node's death and a node restarted on the same --state-dir
// (KEY is derived from it) all kill the cgroup. Where cgroups cannot be
// created, tasks run as before, in their process group alone.

import (
	"bufio"
	"bytes"
	"errors"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Cgroups is where a node's tasks get a cgroup each.
type Cgroups struct {
	dir     string // this node's: <the node's own cgroup>/chainsync-KEY
	durable bool   // KEY names the --state-dir: a restart finds dir again
	log     *slog.Logger

	mu   sync.Mutex
	off  bool // a start in a cgroup failed where one without worked
	once sync.Once
}

// OpenCgroups returns where this node's tasks get their cgroups, or
// nil where the node cannot create them; it logs which is used. KEY is
// derived from stateDir, so that a restarted node finds the cgroups its
// earlier process left; without a state directory, from the pid.
func OpenCgroups(stateDir string, log *slog.Logger) *Cgroups {
	if testNoCgroups {
		return nil
	}
	own, err := ownCgroupDir()
	if err != nil {
		log.Info("tasks run without a cgroup of their own, in their process group only: a process that leaves it (setsid) can outlive its node", "why", err.Error())
		return nil
	}
	key, durable := "pid"+strconv.Itoa(os.Getpid()), false
	if stateDir != "" {
		if abs, err := filepath.Abs(stateDir); err == nil {
			h := fnv.New64a()
			h.Write([]byte(abs))
			key, durable = strconv.FormatUint(h.Sum64(), 16), true
		}
	}
	dir := filepath.Join(own, "chainsync-"+key)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		log.Info("tasks run without a cgroup of their own, in their process group only: a process that leaves it (setsid) can outlive its node; this node may not create cgroups in its own (cgroup v2, delegated to its user, is needed)",
			"cgroup", own, "why", err.Error())
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		os.Remove(dir)
		log.Info("tasks run without a cgroup of their own: this kernel's cgroups have no cgroup.kill (Linux 5.14 or later)", "cgroup", own)
		return nil
	}
	log.Info("tasks run each in a cgroup of their own: the task's end, the node's stop and its reaper kill the whole cgroup, children that left the task's process group (setsid) included", "cgroup", dir)
	return &Cgroups{dir: dir, durable: durable, log: log}
}

// testNoCgroups, set by tests, makes OpenCgroups find none.
var testNoCgroups bool

// ownCgroupDir is the directory of this process's cgroup v2, from
// /proc/self/cgroup ("0::PATH") and the cgroup2 mount in
// /proc/self/mountinfo.
func ownCgroupDir() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	path, found := "", false
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			path, found = p, true
		}
	}
	if !found {
		return "", errors.New("this process is in no cgroup v2 hierarchy (cgroup v1 only)")
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" {
			continue
		}
		root, mnt := unescapeMount(fields[3]), unescapeMount(fields[4])
		rel, ok := strings.CutPrefix(path, root)
		if !ok || rel != "" && root != "/" && rel[0] != '/' {
			continue
		}
		return filepath.Join(mnt, rel), nil
	}
	return "", errors.New("no cgroup2 file system is mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// create makes the cgroup of the task start named by token and returns
// its path and an open descriptor of it for the start (CgroupFD); "" and
// -1 without cgroups. The caller closes fd.
func (g *Cgroups) create(token string) (string, int) {
	if g == nil {
		return "", -1
	}
	g.mu.Lock()
	off := g.off
	g.mu.Unlock()
	if off {
		return "", -1
	}
	path := filepath.Join(g.dir, "task-"+token)
	// The node's cgroup may have been removed by an earlier process's
	// reaper, after its node died, since OpenCgroups made it.
	err := os.MkdirAll(g.dir, 0o755)
	if err == nil {
		err = os.Mkdir(path, 0o755)
	}
	if err != nil {
		g.log.Warn("cannot create the task's cgroup; this run of the task is in its process group only", "cgroup", path, "err", err.Error())
		return "", -1
	}
	fd, err := syscall.Open(path, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(path)
		g.log.Warn("cannot open the task's cgroup; this run of the task is in its process group only", "cgroup", path, "err", err.Error())
		return "", -1
	}
	return path, fd
}

// Close removes the node's cgroup, once its tasks are over (a cgroup
// that still has one stays).
func (g *Cgroups) Close() {
	if g != nil {
		_ = os.Remove(g.dir)
	}
}

// disable stops using cgroups: a start in one failed with err where the
// same start without one worked.
func (g *Cgroups) disable(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.off {
		g.off = true
		g.log.Info("tasks run without a cgroup of their own from now on: starting one in its cgroup failed, without it worked; a process that leaves the task's process group (setsid) can outlive its node", "err", err.Error())
	}
}

// ReapEarlier kills, once, what the tasks of an earlier process of this
// node (the same --state-dir) left running in their cgroups: a restarted
// node never runs beside its old task's processes. Call it only while
// holding the state directory's lock.
func (g *Cgroups) ReapEarlier() {
	if g == nil || !g.durable {
		return
	}
	g.once.Do(func() {
		ents, err := os.ReadDir(g.dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "task-") {
				continue
			}
			path := filepath.Join(g.dir, e.Name())
			n := len(cgroupPIDs(path))
			if killCgroup(path, groupGoneWait) {
				if n > 0 {
					g.log.Warn("killed what an earlier run of this node's task left running (its node died and nothing had killed it)", "cgroup", path, "processes", n)
				}
			} else {
				g.log.Error("an earlier run of this node's task left processes that survive SIGKILL in their cgroup", "cgroup", path)
			}
		}
	})
}

// reapCgroup is the reaper's kill of a task's cgroup at path, whose node
// died: it also removes the node's cgroup, if that has no other.
func reapCgroup(path string) {
	_ = killCgroup(path, groupGoneWait)
	_ = os.Remove(filepath.Dir(path))
}

// cgroupAttr puts the process attr starts into the cgroup open as fd.
func cgroupAttr(attr *syscall.SysProcAttr, fd int) {
	if fd >= 0 {
		attr.UseCgroupFD, attr.CgroupFD = true, fd
	}
}

// killCgroup kills every process in the cgroup at path (cgroup.kill),
// waits up to bound until it is empty and removes it; false if processes
// are left. A cgroup that is gone already is true.
func killCgroup(path string, bound time.Duration) bool {
	if err := writeExisting(filepath.Join(path, "cgroup.kill"), "1"); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
				return true
			}
		}
		// No cgroup.kill: kill its processes one by one.
		for _, pid := range cgroupPIDs(path) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(bound)
	for d := 100 * time.Microsecond; ; d = min(2*d, 10*time.Millisecond) {
		if !cgroupPopulated(path) {
			break
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(d)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return !cgroupPopulated(path)
	}
	return true
}

// writeExisting writes s to the file name, which must exist (a cgroup's
// control file: never create one where there is no cgroup).
func writeExisting(name, s string) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// cgroupPopulated reports whether the cgroup at path has a live process
// (cgroup.events "populated 1"); false once it is gone.
func cgroupPopulated(path string) bool {
	b, err := os.ReadFile(filepath.Join(path, "cgroup.events"))
	if err != nil {
		return false
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(l, []byte("populated ")); ok {
			return string(v) != "0"
		}
	}
	return len(cgroupPIDs(path)) > 0
}

// cgroupPIDs lists the processes in the cgroup at path.
func cgroupPIDs(path string) []int {
	b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// closeCgroupFD closes the cgroup descriptor create returned.
func closeCgroupFD(fd int) { _ = syscall.Close(fd) }

// reaperLine is the reaper's line naming the node's cgroup, which it
// removes when its node is gone; "" (nothing to say) without one.
func (g *Cgroups) reaperLine() string {
	if g == nil {
		return ""
	}
	return "p" + g.dir
}
