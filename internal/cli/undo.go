package cli

import (
	"context"
	"log/slog"

	"github.com/chainsync-go/chainsync/internal/taskrun"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/protocol"
)

// undoFunc is Config.Undo for --undo CMD: sh -c CMD in its own process
// group, like the task (the reaper kills it with the node), with
// CHAINSYNC_ROUND, CHAINSYNC_NODE, CHAINSYNC_ROLE, CHAINSYNC_FAILED_NODE
// and CHAINSYNC_FAULT.
func undoFunc(o *runOpts, rp *taskrun.Reaper, role protocol.Role, log *slog.Logger) func(context.Context, string, chainsync.UndoInfo) error {
	undos := taskrun.New(taskrun.Config{Cmd: []string{"sh", "-c", o.undoCmd},
		Env: []string{"CHAINSYNC_ROLE=" + role.String(), "CHAINSYNC_NODE=" + o.name}, Reaper: rp, Log: log})
	return func(ctx context.Context, round string, u chainsync.UndoInfo) error {
		return undos.Run(ctx, taskrun.Grace, "CHAINSYNC_ROUND="+round, "CHAINSYNC_FAILED_NODE="+u.FailedNode, "CHAINSYNC_FAULT="+u.Fault)
	}
}

// undoText says where a journalled round's undo stood (chainsync journal):
// "" when the round had no undo wave here.
func undoText(u protocol.UndoRecord) string {
	var s string
	switch u.Phase {
	case protocol.PhaseNone:
		return ""
	case protocol.PhaseAwait:
		s = "due, waiting for the nodes after this one"
	case protocol.PhaseRunning:
		s = "started, no end recorded (a restarted node runs it again)"
	case protocol.PhaseDone:
		s = "ran and ended"
	case protocol.PhaseFailed:
		s = "ran and failed"
	case protocol.PhaseNothing:
		s = "nothing to undo here"
	case protocol.PhaseKept:
		s = "not undone (the wave stopped before this node)"
	}
	if u.Ended {
		s += "; " + u.Wave.Outcome()
	}
	return s
}
