package sim

import "github.com/chainsync-go/chainsync/protocol"

// FinishUndo reports Undos[k] ended (failed or not, with exit status
// code) to its node.
func (n *Network) FinishUndo(k int, failed bool, code int) (Task, []protocol.Action, error) {
	t := n.Undos[k]
	n.Undos = append(n.Undos[:k], n.Undos[k+1:]...)
	acts, err := n.Step(t.Node, protocol.UndoDone(t.Round, failed, code))
	return t, acts, err
}

// RerunUndo runs the undo of round at node i again, as a restarted node
// does with an undo its restart interrupted (the Machine asked for
// nothing: the round's undo is running already).
func (n *Network) RerunUndo(i int, round string) {
	n.Undos = append(n.Undos, Task{Node: i, Round: round})
}

// dropUndos forgets node i's running undos (its restart killed them).
func (n *Network) dropUndos(i int) {
	kept := n.Undos[:0]
	for _, t := range n.Undos {
		if t.Node != i {
			kept = append(kept, t)
		}
	}
	n.Undos = kept
}
