package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/chainsync-go/chainsync"
)

// stopSignals stop a running node: it logs the signal, passes it to its
// running task's process group, and exits 130.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// hookRunner runs --on-fault, the draft's "SNMP trap" or "phone call",
// once per failed or faulted round, with the fault described in its
// environment. A hook runs in its own process group and is killed with it
// after its timeout, or when the node is stopped: it never holds up the
// node's exit.
type hookRunner struct {
	cmd     string
	timeout time.Duration
	node    string
	log     *slog.Logger

	wg   sync.WaitGroup
	once sync.Once
	ctx  context.Context
	kill context.CancelFunc
}

// faultEnv describes the fault that ended res, as the hook's environment.
func faultEnv(res chainsync.Result, node string) []string {
	kind, peer, side := string(chainsync.FaultTaskFailed), "", ""
	var fe *chainsync.FaultError
	var te *chainsync.TaskError
	switch {
	case errors.As(res.Err, &fe):
		if fe.Kind != "" {
			kind = string(fe.Kind)
		}
		peer = fe.Peer
		if fe.Side != 0 {
			side = fe.Side.String()
		}
	case errors.As(res.Err, &te):
		if te.Timeout {
			kind = string(chainsync.FaultTaskTimeout)
		}
	case res.Status == chainsync.StatusStopped:
		kind = "stopped"
	}
	msg := ""
	if res.Err != nil {
		msg = res.Err.Error()
	}
	return []string{"CHAINSYNC_FAULT=" + kind, "CHAINSYNC_PEER=" + peer, "CHAINSYNC_SIDE=" + side,
		"CHAINSYNC_ROUND=" + res.Round, "CHAINSYNC_NODE=" + node, "CHAINSYNC_ERROR=" + msg}
}

// start runs the hook for res in the background.
func (h *hookRunner) start(res chainsync.Result) {
	if h.cmd == "" {
		return
	}
	h.once.Do(func() { h.ctx, h.kill = context.WithCancel(context.Background()) })
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		timeout := h.timeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		ctx, cancel := context.WithTimeout(h.ctx, timeout)
		defer cancel()
		c := exec.Command("sh", "-c", h.cmd)
		c.Env = append(os.Environ(), faultEnv(res, h.node)...)
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			h.log.Error("--on-fault command could not start", "err", err.Error())
			return
		}
		waited := make(chan error, 1)
		go func() { waited <- c.Wait() }()
		var err error
		select {
		case err = <-waited:
		case <-ctx.Done():
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-waited
			if h.ctx.Err() != nil {
				h.log.Warn("--on-fault command killed: the node is stopping")
			} else {
				h.log.Error("--on-fault command killed after --on-fault-timeout", "timeout", h.timeout)
			}
			return
		}
		if err != nil {
			h.log.Error("--on-fault command failed", "err", err.Error())
		}
	}()
}

// stop kills running hooks.
func (h *hookRunner) stop() {
	if h.kill != nil {
		h.kill()
	}
}

// wait waits for running hooks (each bounded by its timeout).
func (h *hookRunner) wait() { h.wg.Wait() }
