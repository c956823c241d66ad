package sim

import (
	"fmt"
	"slices"

	"github.com/chainsync-go/chainsync/protocol"
)

// Restarted checks node i right after Network.Restart, with the rounds
// Restart reported as interrupted: the restored Machine must be in the
// state the reference last saw for every round (the journal was written
// before every action, so a restart loses nothing a neighbour saw), and
// exactly the rounds whose task was running are interrupted. Resolve each
// interrupted round with a TaskDone step (policy done: the restart was
// the task, which so counts as its one run) or with Rerun.
func (c *Checker) Restarted(i int, interrupted []string) error {
	delete(c.halted, i) // a new process: its machine has not halted
	ids := make([]string, 0, len(c.rounds))
	for id := range c.rounds {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := c.checkState(i, id, "after a restart"); err != nil {
			return err
		}
		nd := &c.rounds[id].Nodes[i]
		// The new Machine counts its timeouts from the restart on.
		nd.Since, nd.TimedOut = c.net.Now, false
		running := nd.State == protocol.StateStart
		if reported := slices.Contains(interrupted, id); running != reported {
			return fmt.Errorf("node %d round %q: restart reports interrupted=%v, reference: task running=%v",
				i, id, reported, running)
		}
		if running {
			nd.Restarts++
		}
	}
	for _, id := range interrupted {
		if c.rounds[id] == nil {
			return fmt.Errorf("node %d round %q: restart reports an interrupted task the reference never saw start", i, id)
		}
	}
	return nil
}

// Rerun records that node i runs the task of round again after a restart
// interrupted it (resume policy rerun). Only a task that started, never
// ended and was interrupted by a restart may run again, and only in state
// START: a finished task never runs twice.
func (c *Checker) Rerun(i int, round string) error {
	r := c.rounds[round]
	if r == nil {
		return fmt.Errorf("node %d round %q: re-run of a task that never started", i, round)
	}
	nd := &r.Nodes[i]
	switch {
	case !nd.Started:
		return fmt.Errorf("node %d round %q: re-run of a task that never started", i, round)
	case nd.Finished || nd.Failed:
		return fmt.Errorf("node %d round %q: re-run of a task that already ended (it would run twice)", i, round)
	case nd.Reruns >= nd.Restarts:
		return fmt.Errorf("node %d round %q: re-run without a restart that interrupted the task", i, round)
	case nd.State != protocol.StateStart:
		return fmt.Errorf("node %d round %q: re-run in state %v", i, round, nd.State)
	}
	nd.Reruns++
	return nil
}
