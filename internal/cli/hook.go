package cli

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/chainsync-go/chainsync"
)

// stopSignals stop a running node: it logs the signal, passes it to its
// running task's process group, and exits 130.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// hookRunner runs --on-fault, the draft's "SNMP trap" or "phone call",
// once per fault the node reports (with --fault-policy wait, also for
// faults that end no round), with the fault described in its
// environment. A hook runs in its own process group and is killed with it
// after its timeout, or when the node is stopped: it never holds up the
// node's exit.
type hookRunner struct {
	cmd     string
	recover string // --on-recover (liveness.go)
	timeout time.Duration
	node    string
	log     *slog.Logger

	wg      sync.WaitGroup
	ctx     context.Context // cancelled by stop
	kill    context.CancelFunc
	mu      sync.Mutex
	stopped bool
}

func newHookRunner(cmd string, timeout time.Duration, node string, log *slog.Logger) *hookRunner {
	h := &hookRunner{cmd: cmd, timeout: timeout, node: node, log: log}
	h.ctx, h.kill = context.WithCancel(context.Background())
	return h
}

// faultEnv describes a fault the node reported, as the hook's environment.
func faultEnv(ev chainsync.TraceEvent, node string) []string {
	side := ""
	if ev.Side != 0 {
		side = ev.Side.String()
	}
	msg := ""
	if ev.Err != nil {
		msg = ev.Err.Error()
	}
	origin := ev.Origin
	if origin == "" {
		origin = node // a fault this node found itself
	}
	return []string{"CHAINSYNC_FAULT=" + string(ev.Fault), "CHAINSYNC_PEER=" + ev.Peer, "CHAINSYNC_SIDE=" + side,
		"CHAINSYNC_ROUND=" + ev.Round, "CHAINSYNC_NODE=" + node, "CHAINSYNC_ERROR=" + msg, "CHAINSYNC_ORIGIN=" + origin}
}

// observe is a Config.Trace hook: it starts the hook for every fault.
func (h *hookRunner) observe(ev chainsync.TraceEvent) {
	switch {
	case ev.Kind == chainsync.TraceFault && !ev.Again:
		// A further report of a node's fault in force pages nobody: one
		// page per blamed node until its fault clears.
		h.start(ev)
	case ev.Kind == chainsync.TraceFaultCleared && h.recover != "":
		h.run(h.recover, "--on-recover", recoverEnv(ev, h.node))
	}
}

// start runs the hook for the fault ev in the background. It must not
// block: it runs on the goroutine that carries out the node's steps.
func (h *hookRunner) start(ev chainsync.TraceEvent) {
	if h.cmd == "" {
		return
	}
	h.run(h.cmd, "--on-fault", faultEnv(ev, h.node))
}

// run runs cmd, the hook of flag, with env in the background.
func (h *hookRunner) run(cmd, flag string, env []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	h.wg.Add(1)
	goSafe(func() {
		defer h.wg.Done()
		timeout := h.timeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		ctx, cancel := context.WithTimeout(h.ctx, timeout)
		defer cancel()
		err := runShell(ctx, cmd, env...)
		switch {
		case err == nil:
		case h.ctx.Err() != nil:
			h.log.Warn(flag + " command killed: the node is stopping")
		case ctx.Err() != nil:
			h.log.Error(flag+" command killed after --on-fault-timeout", "timeout", timeout)
		default:
			h.log.Error(flag+" command failed", "err", err.Error())
		}
	})
}

// stop kills running hooks and starts no more.
func (h *hookRunner) stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.kill()
}

// wait waits for running hooks (each bounded by its timeout).
func (h *hookRunner) wait() { h.wg.Wait() }
