package taskrun

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/bug"
)

// HookConfig is what Hooks need: the commands, their bound and the node
// that runs them.
type HookConfig struct {
	OnFault   string        // --on-fault: run for each fault the node reports
	OnRecover string        // --on-recover: run when a fault clears
	OnHold    string        // --on-hold: run when a hold or an approval wait begins
	Timeout   time.Duration // each run's bound (--on-fault-timeout); 0: 30s
	Node      string        // CHAINSYNC_NODE
	Log       *slog.Logger
}

// Hooks runs the node's hook commands: --on-fault, the draft's "SNMP
// trap" or "phone call", once per fault the node reports (with
// --fault-policy wait, also for faults that end no round), with the
// fault described in its environment; --on-recover when a fault clears;
// --on-hold when a hold or an approval wait begins. A hook runs in its
// own process group, on a goroutine under the panic handler, and is
// killed with its group after its timeout, or when the node is stopped:
// it never holds up the node's exit.
type Hooks struct {
	cfg HookConfig

	wg      sync.WaitGroup
	ctx     context.Context // cancelled by stop
	kill    context.CancelFunc
	mu      sync.Mutex
	stopped bool
}

// NewHooks returns the hooks of c.
func NewHooks(c HookConfig) *Hooks {
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	h := &Hooks{cfg: c}
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

// recoverEnv describes a fault that cleared, as --on-recover's
// environment.
func recoverEnv(ev chainsync.TraceEvent, node string) []string {
	return []string{"CHAINSYNC_FAULT=" + string(ev.Fault), "CHAINSYNC_PEER=" + ev.Peer, "CHAINSYNC_ROUND=" + ev.Round, "CHAINSYNC_NODE=" + node}
}

// Observe is a Config.Trace hook: it runs --on-fault for every fault
// and --on-recover for every fault that clears. It must not block: it
// runs on the goroutine that carries out the node's steps.
func (h *Hooks) Observe(ev chainsync.TraceEvent) {
	switch {
	case ev.Kind == chainsync.TraceFault && !ev.Again && h.cfg.OnFault != "":
		// A further report of a node's fault in force pages nobody: one
		// page per blamed node until its fault clears.
		h.run(h.cfg.OnFault, "--on-fault", faultEnv(ev, h.cfg.Node))
	case ev.Kind == chainsync.TraceFaultCleared && h.cfg.OnRecover != "":
		h.run(h.cfg.OnRecover, "--on-recover", recoverEnv(ev, h.cfg.Node))
	}
}

// Hold is a Config.OnHold hook: it runs --on-hold when a hold or an
// approval wait begins at this node, with CHAINSYNC_HOLD (hold or
// approval), CHAINSYNC_ROUND, CHAINSYNC_NODE and CHAINSYNC_REASON in its
// environment, bounded like --on-fault.
func (h *Hooks) Hold(ev chainsync.HoldEvent) {
	if h.cfg.OnHold == "" {
		return
	}
	h.run(h.cfg.OnHold, "--on-hold", []string{"CHAINSYNC_HOLD=" + ev.Kind, "CHAINSYNC_ROUND=" + ev.Round,
		"CHAINSYNC_NODE=" + h.cfg.Node, "CHAINSYNC_REASON=" + ev.Reason})
}

// run runs cmd, the hook of flag, with env in the background.
func (h *Hooks) run(cmd, flag string, env []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	h.wg.Add(1)
	bug.Go(func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(h.ctx, h.cfg.Timeout)
		defer cancel()
		err := RunShell(ctx, cmd, env...)
		switch {
		case err == nil:
		case h.ctx.Err() != nil:
			h.cfg.Log.Warn(flag + " command killed: the node is stopping")
		case ctx.Err() != nil:
			h.cfg.Log.Error(flag+" command killed after --on-fault-timeout", "timeout", h.cfg.Timeout)
		default:
			h.cfg.Log.Error(flag+" command failed", "err", err.Error())
		}
	})
}

// Stop kills running hooks and starts no more.
func (h *Hooks) Stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.kill()
}

// Wait waits for running hooks (each bounded by its timeout).
func (h *Hooks) Wait() { h.wg.Wait() }
