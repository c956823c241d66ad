package sim

import (
	"fmt"
	"slices"

	"github.com/chainsync-go/chainsync/protocol"
)

// Table checks the combinations of features against the table of
// docs/STEERING.md and docs/UNDO.md, "Features together", over schedules
// that mix failures, the undo wave, retries, cancels, holds, pauses,
// approvals and restarts. The Checker follows one attempt of each round;
// Table follows a round across its retries, and holds that:
//   - one task at a time: a node (Config.Ordered) starts no task while
//     another task of its own runs, a task whose round a cancel ended or a
//     retry reopened included, until that task's end was stepped;
//   - a cancel stops tasks: no task of a round starts at a node after the
//     cancel reached it, until a retry reopens the round there;
//   - a round does not end at a node while that node's task of it runs
//     (a cancel ends it when the task ends);
//   - undone work is not done: a node whose work of a round the undo
//     wave undid (or whose undo failed) runs its task again on a retry,
//     never passes it on as already done (ActSkip);
//   - work that stands is not run again: a node whose task of a round
//     succeeded, and was not undone, passes a retry on (ActSkip), and
//     does not run the task again;
//   - a wait for a person is never a started task: a saved Record says
//     Started only after this node's task of the round started in the
//     round's latest attempt;
//   - at the end (Final) every round is over at every node, and a round
//     retried after its last cancel that every node finished is done.
//
// Hook it up with Observe from a Network's Hook, and tell it of restarts
// (Restarted) and re-runs (Rerun).
type Table struct {
	n       int
	running []map[string]bool // per node: tasks started and not yet ended
	ranOK   []map[string]bool // per node: rounds whose task succeeded, not since undone
	undone  []map[string]bool // per node: rounds whose work the wave undid (or tried to)
	cancel  []map[string]bool // per node: rounds a cancel reached, not reopened since
	started []map[string]bool // per node: rounds whose task started in the latest attempt
	retried map[string]bool   // rounds reopened by a retry after their last cancel
	failed  map[string]bool   // rounds a task failed (or was denied) in, since their last retry
	rounds  []string          // every round seen, in the order first seen
}

// NewTable returns a Table for a chain of n nodes.
func NewTable(n int) *Table {
	t := &Table{n: n, retried: map[string]bool{}, failed: map[string]bool{}}
	for _, m := range []*[]map[string]bool{&t.running, &t.ranOK, &t.undone, &t.cancel, &t.started} {
		*m = make([]map[string]bool, n)
		for i := range *m {
			(*m)[i] = map[string]bool{}
		}
	}
	return t
}

func (t *Table) see(round string) {
	if !slices.Contains(t.rounds, round) {
		t.rounds = append(t.rounds, round)
	}
}

// Observe checks one step of node i (as a Network's Hook sees it).
func (t *Table) Observe(i int, ev protocol.Event, acts []protocol.Action, err error) error {
	if err != nil {
		if ev.Kind == protocol.EvTaskDone || ev.Kind == protocol.EvUndoDone {
			return fmt.Errorf("node %d: %s refused: %w", i, DescribeEvent(ev), err)
		}
		return nil
	}
	switch ev.Kind {
	case protocol.EvTaskDone:
		delete(t.running[i], ev.Round)
		if !ev.Failed {
			t.ranOK[i][ev.Round] = true
		} else {
			t.failed[ev.Round] = true
		}
	case protocol.EvDeny:
		t.failed[ev.Round] = true
	case protocol.EvUndoDone:
		t.undone[i][ev.Round], t.ranOK[i][ev.Round] = true, false
	case protocol.EvSteer:
		t.steer(i, ev.Steer, true)
	}
	var saves []protocol.Record
	for _, a := range acts {
		if e := t.action(i, a, &saves); e != nil {
			return fmt.Errorf("node %d, event %s, action %s: %w", i, DescribeEvent(ev), DescribeAction(a), e)
		}
	}
	for _, rec := range saves {
		if rec.Started && !t.started[i][rec.Round] {
			return fmt.Errorf("node %d, event %s: saved round %s as started, but its task did not start in this attempt", i, DescribeEvent(ev), rec.Round)
		}
	}
	return nil
}

// steer notes a steering line at node i (own: its own, else one it
// took from a neighbour).
func (t *Table) steer(i int, s protocol.Steer, own bool) {
	switch {
	case s.What == protocol.SteerCancel:
		t.cancel[i][s.Round] = true
		if own {
			t.retried[s.Round] = false
		}
	case s.What == protocol.SteerRetry && own:
		t.retried[s.Round], t.failed[s.Round] = true, false
	}
}

func (t *Table) action(i int, a protocol.Action, saves *[]protocol.Record) error {
	switch a.Kind {
	case protocol.ActSteer:
		if a.Msg.Steer != nil {
			t.steer(i, *a.Msg.Steer, false)
		}
	case protocol.ActOpened:
		t.see(a.Round)
		delete(t.cancel[i], a.Round)
		delete(t.started[i], a.Round)
	case protocol.ActRunTask:
		r := a.Round
		switch {
		case len(t.running[i]) > 0:
			return fmt.Errorf("a task started while another task of this node runs (%v)", keys(t.running[i]))
		case t.cancel[i][r]:
			return fmt.Errorf("a task of a cancelled round started")
		case t.ranOK[i][r]:
			return fmt.Errorf("the task ran again, though its work stands here")
		}
		t.running[i][r], t.started[i][r] = true, true
		delete(t.undone[i], r)
	case protocol.ActSkip:
		switch {
		case t.undone[i][a.Round]:
			return fmt.Errorf("passed on as already done, though the undo wave undid its work here")
		case !t.ranOK[i][a.Round]:
			return fmt.Errorf("passed on as already done, though its task never succeeded here")
		}
	case protocol.ActDone:
		if t.running[i][a.Round] {
			return fmt.Errorf("the round ended here while this node's task of it runs")
		}
	case protocol.ActSave:
		*saves = append(*saves, *a.Record)
	}
	return nil
}

func keys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Restarted notes that node i restarted: its running tasks died.
func (t *Table) Restarted(i int) { clear(t.running[i]) }

// Rerun notes that node i runs the task of round again after its restart
// (Network.Rerun).
func (t *Table) Rerun(i int, round string) { t.running[i][round] = true }

// Final checks the end of a schedule in which everything was delivered
// and every task and undo ended: every round is over at every node, and
// a round retried after its last cancel, in whose latest attempt no task
// failed, is done everywhere: its outcome is the retry's own.
func (t *Table) Final(net *Network) error {
	for _, r := range t.rounds {
		for i, nd := range net.Nodes {
			st, ok := nd.M.State(r)
			if ok && !st.Terminal() {
				return fmt.Errorf("round %s is unfinished at node %d (%v) at the end", r, i, st)
			}
			if t.retried[r] && !t.failed[r] && st != protocol.StateDone {
				return fmt.Errorf("round %s, retried and failed nowhere since, ended %v at node %d", r, st, i)
			}
		}
	}
	return nil
}
