//go:build !linux

package cli

import (
	"log/slog"
	"syscall"
	"time"
)

// taskCgroups: only Linux has cgroups; elsewhere a task is killed by its
// process group alone (docs/DESIGN.md, "The task dies with its node").
type taskCgroups struct{}

// openTaskCgroups finds no cgroups here, and says so at DEBUG.
func openTaskCgroups(_ string, log *slog.Logger) *taskCgroups {
	log.Debug("tasks run in their process group only (no cgroups on this system): a process that leaves it can outlive its node")
	return nil
}

func (*taskCgroups) create(string) (string, int) { return "", -1 }
func (*taskCgroups) disable(error)               {}
func (*taskCgroups) reapEarlier()                {}
func (*taskCgroups) close()                      {}

func cgroupAttr(*syscall.SysProcAttr, int) {}

func reapCgroup(string) {}

func killCgroup(string, time.Duration) bool { return true }

func closeCgroupFD(int) {}

func (*taskCgroups) reaperLine() string { return "" }
