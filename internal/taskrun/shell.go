package taskrun

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/chainsync-go/chainsync/internal/bug"
)

// RunShell runs `sh -c cmd` with env added to the environment (ChildEnv:
// without the node's CHAINSYNC_ settings) and its
// output on stderr, as the leader of a new process group (the hooks and
// checks a node runs: --ready-cmd, --verify-cmd, --on-fault). If ctx ends
// first, the whole group is killed and ctx's error returned: nothing such
// a command started outlives it.
func RunShell(ctx context.Context, cmd string, env ...string) error {
	c := exec.Command("sh", "-c", cmd)
	c.Env = ChildEnv(env...)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	c.SysProcAttr = groupAttr()
	if err := c.Start(); err != nil {
		return err
	}
	holdGroup(c.Process.Pid)
	defer releaseGroup(c.Process.Pid)
	waited := make(chan error, 1)
	bug.Go(func() { waited <- c.Wait() })
	select {
	case err := <-waited:
		return err
	case <-ctx.Done():
		_ = killGroup(c.Process.Pid, syscall.SIGKILL)
		<-waited
		return ctx.Err()
	}
}

// ChildEnv is the environment of a process the node starts (its task,
// --ready-cmd, --verify-cmd, --on-fault): the node's own environment
// without any CHAINSYNC_ variable, then vars, the variables the node sets
// for that process. The node's settings (CHAINSYNC_PSK_FILE,
// CHAINSYNC_CHAIN, ...) are the node's: a chainsync the task starts must
// not be configured by them, nor should a task read the node's secrets'
// paths. A CHAINSYNC_ROUND inherited from a node further up is dropped
// too, so the process sees only what its own node tells it.
func ChildEnv(vars ...string) []string {
	env := make([]string, 0, len(vars)+32)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHAINSYNC_") {
			env = append(env, kv)
		}
	}
	return append(env, vars...)
}
