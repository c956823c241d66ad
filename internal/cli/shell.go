package cli

import (
	"context"
	"os"
	"os/exec"
	"syscall"
)

// runShell runs `sh -c cmd` with env added to the environment (childEnv:
// without the node's CHAINSYNC_ settings) and its
// output on stderr, as the leader of a new process group (the hooks and
// checks a node runs: --ready-cmd, --verify-cmd, --on-fault). If ctx ends
// first, the whole group is killed and ctx's error returned: nothing such
// a command started outlives it.
func runShell(ctx context.Context, cmd string, env ...string) error {
	c := exec.Command("sh", "-c", cmd)
	c.Env = childEnv(env...)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	c.SysProcAttr = groupAttr()
	if err := c.Start(); err != nil {
		return err
	}
	holdGroup(c.Process.Pid)
	defer releaseGroup(c.Process.Pid)
	waited := make(chan error, 1)
	goSafe(func() { waited <- c.Wait() })
	select {
	case err := <-waited:
		return err
	case <-ctx.Done():
		_ = killGroup(c.Process.Pid, syscall.SIGKILL)
		<-waited
		return ctx.Err()
	}
}
