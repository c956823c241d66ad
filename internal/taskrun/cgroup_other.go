//go:build !linux

package taskrun

import (
	"log/slog"
	"syscall"
	"time"
)

// Cgroups is where a node's tasks get a cgroup each: only Linux has
// cgroups; elsewhere a task is killed by its process group alone
// (docs/DESIGN.md, "The task dies with its node").
type Cgroups struct{}

// OpenCgroups finds no cgroups here, and says so at DEBUG.
func OpenCgroups(_ string, log *slog.Logger) *Cgroups {
	log.Debug("tasks run in their process group only (no cgroups on this system): a process that leaves it can outlive its node")
	return nil
}

func (*Cgroups) create(string) (string, int) { return "", -1 }
func (*Cgroups) disable(error)               {}

// ReapEarlier has no earlier cgroup to kill here.
func (*Cgroups) ReapEarlier() {}

// Close has no cgroup to remove here.
func (*Cgroups) Close() {}

func cgroupAttr(*syscall.SysProcAttr, int) {}

func reapCgroup(string) {}

func killCgroup(string, time.Duration) bool { return true }

func closeCgroupFD(int) {}

func (*Cgroups) reaperLine() string { return "" }
