package sim

import (
	"fmt"

	"github.com/chainsync-go/chainsync/protocol"
)

// The undo wave's invariants (docs/UNDO.md, "What is checked"):
//   - a node runs its undo of a round only if its task in that round
//     succeeded, and at most once (a re-run after a restart that
//     interrupted it aside: RerunUndo);
//   - strictly in reverse chain order: when a node's undo starts, every
//     node after it whose task succeeded has undone its part (its undo
//     ended, and succeeded);
//   - never while a task of the same round runs anywhere;
//   - no undo starts after an undo of the round failed;
//   - an outcome that says the wave reached the Head comes only when
//     every node whose task succeeded has undone its part; one that
//     names the node where the undo failed names one whose undo failed.

// UndoRef is what one node's undo did in a round.
type UndoRef struct {
	Started, Ended, Failed bool
	// Outcome: the wave's outcome as this node reported it (ActUndone).
	Outcome *protocol.Wave
}

// UndoOf returns the reference record of round id's undos, by node.
func (c *Checker) UndoOf(id string) []UndoRef {
	if c.undo == nil {
		c.undo = make(map[string][]UndoRef)
	}
	u := c.undo[id]
	if u == nil {
		u = make([]UndoRef, c.n)
		c.undo[id] = u
	}
	return u
}

func (c *Checker) undoAction(i int, a protocol.Action) error {
	r := c.Round(a.Round)
	u := c.UndoOf(a.Round)
	switch a.Kind {
	case protocol.ActRunUndo:
		switch {
		case !r.Nodes[i].Finished:
			return fmt.Errorf("undo of a round whose task did not succeed here")
		case u[i].Started:
			return fmt.Errorf("undo started twice")
		}
		for j := range r.Nodes {
			nd := &r.Nodes[j]
			if nd.Started && !nd.Finished && !nd.Failed {
				return fmt.Errorf("undo started while node %d's task of the round runs", j)
			}
			if u[j].Failed {
				return fmt.Errorf("undo started after node %d's undo failed", j)
			}
			if j > i && nd.Finished && (!u[j].Ended || u[j].Failed) {
				return fmt.Errorf("undo started before node %d (after it, its task succeeded) undid its part", j)
			}
		}
		u[i].Started = true
	case protocol.ActUndone:
		w := a.Wave
		if u[i].Outcome != nil {
			return fmt.Errorf("outcome reported twice")
		}
		u[i].Outcome = &w
		if w.Stop == "" {
			for j := range r.Nodes {
				if r.Nodes[j].Finished && (!u[j].Ended || u[j].Failed) {
					return fmt.Errorf("outcome %q before node %d undid its part", w.Outcome(), j)
				}
			}
		} else if k := c.nodeNamed(w.Stop); k < 0 || !u[k].Failed {
			return fmt.Errorf("outcome %q names a node whose undo did not fail", w.Outcome())
		}
	}
	return nil
}

func (c *Checker) nodeNamed(name string) int {
	for k, nd := range c.net.Nodes {
		if protocol.NoticeName(nd.Name) == name {
			return k
		}
	}
	return -1
}

// undoSend checks an undo line node i sends: UNDO only backward, after
// the round failed at i or i's own undo ended.
func (c *Checker) undoSend(i int, a protocol.Action) error {
	role := c.net.Nodes[i].Role
	if a.To == protocol.Pred && !role.HasPred() || a.To == protocol.Succ && !role.HasSucc() {
		return fmt.Errorf("send to a missing neighbour")
	}
	if a.Msg.Cmd != protocol.UndoLine || a.Resend {
		return nil
	}
	r := c.Round(a.Msg.Round)
	u := c.UndoOf(a.Msg.Round)
	switch {
	case a.To != protocol.Pred:
		return fmt.Errorf("UNDO sent forward")
	case !r.Nodes[i].Failed && !(u[i].Ended && !u[i].Failed):
		return fmt.Errorf("UNDO sent on before the task failed here or this node's undo ended")
	}
	return nil
}

// undoDone checks an accepted UndoDone of node i.
func (c *Checker) undoDone(i int, nd *NodeRef, ev protocol.Event) error {
	u := c.UndoOf(ev.Round)
	if !u[i].Started || u[i].Ended {
		return fmt.Errorf("node %d round %q: UndoDone accepted without a running undo", i, ev.Round)
	}
	u[i].Ended, u[i].Failed = true, ev.Failed
	return nil
}

// CheckUndone checks that round id, failed at node f, was undone by
// every node before f, the last first, and that every node reported the
// outcome.
func (c *Checker) CheckUndone(id string, f int) error {
	u := c.UndoOf(id)
	for i := range u {
		switch {
		case i < f && (!u[i].Ended || u[i].Failed):
			return fmt.Errorf("round %q failed at %d: node %d did not undo: %+v", id, f, i, u[i])
		case i >= f && u[i].Started:
			return fmt.Errorf("round %q failed at %d: node %d ran an undo", id, f, i)
		case u[i].Outcome == nil:
			return fmt.Errorf("round %q: node %d reported no outcome", id, i)
		case u[i].Outcome.UndoneN != f:
			return fmt.Errorf("round %q: node %d: outcome %q, want %d undone", id, i, u[i].Outcome.Outcome(), f)
		}
	}
	return nil
}

// undoKnown reports whether node i knows how round id's undo wave ended,
// or runs its part of it: the wave says what happened after the node, so
// its round ends aborted rather than with no exit wave.
func (c *Checker) undoKnown(id string, i int) bool {
	u := c.UndoOf(id)
	return u[i].Started || u[i].Outcome != nil
}

// undoFailedHalts reports whether ev at node i tells it that an undo
// failed (its own, or an outcome saying so) for the first time under the
// halt policy: a fault everywhere, which ends every unfinished round.
func (c *Checker) undoFailedHalts(i int, ev protocol.Event) bool {
	if c.net.Nodes[i].cfg.Policy != protocol.PolicyHalt {
		return false
	}
	switch {
	case ev.Kind == protocol.EvUndoDone:
		return ev.Failed
	case ev.Kind == protocol.EvRecv && ev.Msg.Cmd == protocol.UndoEnd && ev.Msg.Undo != nil:
		_, known := c.net.Nodes[i].M.State(ev.Msg.Round)
		return known && ev.Msg.Undo.Stop != "" && c.UndoOf(ev.Msg.Round)[i].Outcome == nil
	}
	return false
}
