package sim

import (
	"fmt"

	"github.com/chainsync-go/chainsync/protocol"
)

// Restart crashes node i and starts it again, as a process killed with
// kill -9 and restarted with the same state directory (docs/DESIGN.md,
// "Restarts and durable state"): its Machine is replaced by a new one
// (the process lost its memory) into which every record of its Journal is
// restored, in the order the rounds were first saved; its running tasks
// vanish from Tasks (a task dies with its node); and the links to its
// neighbours drop, losing what was in flight. The caller brings the links
// up again later with SetLink and reports protocol.LinkUp to both ends.
//
// It returns the rounds whose task was interrupted (state START in the
// journal), for the caller to resolve as a resume policy says: report
// protocol.TaskDone (the restart was the task, or it failed) or run the
// task again with Rerun. A node without a Journal (not Durable) restarts
// with nothing: a restart that lost its state.
func (n *Network) Restart(i int) (interrupted []string, err error) {
	nd := n.Nodes[i]
	m := protocol.New(nd.cfg)
	for _, rec := range nd.Journal {
		if err := m.Restore(rec); err != nil {
			return nil, fmt.Errorf("sim: node %d: restoring %+v: %w", i, rec, err)
		}
		if rec.State == protocol.StateStart {
			interrupted = append(interrupted, rec.Round)
		}
	}
	nd.M = m
	kept := n.Tasks[:0]
	for _, t := range n.Tasks {
		if t.Node != i {
			kept = append(kept, t)
		}
	}
	n.Tasks = kept
	n.dropUndos(i)
	if i > 0 {
		n.SetLink(i-1, false)
	}
	if i+1 < len(n.Nodes) {
		n.SetLink(i, false)
	}
	return interrupted, nil
}

// Rerun runs the task of round at node i again, as a restarted node whose
// resume policy is "rerun" does with a task its restart interrupted. The
// Machine asked for nothing: it is in state START already.
func (n *Network) Rerun(i int, round string) {
	n.Step(i, protocol.Rerun(round)) // its restart grace, if it has one
	n.Tasks = append(n.Tasks, Task{Node: i, Round: round})
}
