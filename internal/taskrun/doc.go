// Package taskrun runs what a chainsync node starts as processes: its
// task and undo command (Runner, one process group per run, in a cgroup
// of its own where the node may make one: cgroup_linux.go), the reaper
// that kills a dead node's tasks (Reaper, ReaperMain: the hidden
// "chainsync _reaper"), the hook commands --on-fault, --on-recover and
// --on-hold (Hooks), and the shell checks --ready-cmd and --verify-cmd
// (RunShell). It knows nothing of the command's flags: the command gives
// it a Config.
//
// Files: task.go the runner and the reaper; task_unix.go, task_linux.go,
// task_other.go and task_windows.go process groups per system;
// cgroup_linux.go and cgroup_other.go a cgroup per run; hook.go the
// hooks; shell.go sh -c and the environment of every process a node
// starts.
package taskrun
