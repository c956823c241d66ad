package protocol

// Wait is what a round waits for at one node: a message from a neighbour,
// or this node itself. The machine reports it with every state change
// (Action.Wait on ActState); status reports show it.
type Wait uint8

// What a round can wait for.
const (
	WaitNothing  Wait = iota // the round is over at this node (or passing through a state)
	WaitLocal                // this node to become locally ready (EvLocalReady)
	WaitTask                 // this node's task to finish (EvTaskDone)
	WaitReady                // READY from the predecessor
	WaitStart                // START from the successor
	WaitComplete             // COMPLETE from the predecessor: the tasks before this node's
	WaitExit                 // the exit-wave COMPLETE from the successor
	// WaitHandOver: done here; the final COMPLETE is to be handed to a
	// live connection to the predecessor (EvDelivered).
	WaitHandOver
	// WaitApproval: the round's turn has come here, and its task waits
	// for an approval (Config.Approve; Machine.Gate).
	WaitApproval
	// WaitHold: the round's turn has come here, and this node is held or
	// the chain paused (Machine.Gate).
	WaitHold
)

// WaitIn returns what a round in state st waits for at a node in role,
// locally ready or not. The machine takes every transition its facts
// allow at once, so the state and local readiness say it exactly.
func WaitIn(role Role, st State, localReady bool) Wait {
	switch st {
	case StateSync:
		switch {
		case !localReady:
			return WaitLocal
		case role.HasPred():
			return WaitReady
		}
	case StateReady:
		if role.HasSucc() {
			return WaitStart
		}
	case StateWatch:
		return WaitComplete
	case StateStart:
		return WaitTask
	case StateComplete:
		if role.HasSucc() {
			return WaitExit
		}
	case StateDone:
		if role.HasPred() {
			return WaitHandOver // until it is over (EvDelivered)
		}
	}
	return WaitNothing
}

// Msg returns the message w waits for and the side it must come from; 0
// and 0 when w waits for this node itself or for nothing.
func (w Wait) Msg() (Command, Side) {
	switch w {
	case WaitReady:
		return Ready, Pred
	case WaitStart:
		return Start, Succ
	case WaitComplete:
		return Complete, Pred
	case WaitExit:
		return Complete, Succ
	}
	return 0, 0
}

// Self reports whether w waits for this node itself (WaitLocal, WaitTask,
// WaitApproval, WaitHold).
func (w Wait) Self() bool {
	return w == WaitLocal || w == WaitTask || w == WaitApproval || w == WaitHold
}

// String returns the message's name ("READY", "START", "COMPLETE") for a
// wait on a neighbour, "local-readiness" or "task" for a wait on this
// node, "hand-over" for WaitHandOver and "" for WaitNothing: the words of
// the status endpoint.
func (w Wait) String() string {
	switch w {
	case WaitLocal:
		return "local-readiness"
	case WaitTask:
		return "task"
	case WaitHandOver:
		return "hand-over"
	case WaitApproval:
		return "approval"
	case WaitHold:
		return "hold"
	case WaitNothing:
		return ""
	}
	c, _ := w.Msg()
	return c.String()
}

// ParseWait reads a wait back from its String and the side it comes from
// ("pred", "succ", or anything else for this node), as the status
// endpoint writes them; WaitNothing if they name no wait.
func ParseWait(what, from string) Wait {
	for w := WaitLocal; w <= WaitHold; w++ {
		if w.String() != what {
			continue
		}
		if _, side := w.Msg(); side == 0 || side.String() == from {
			return w
		}
	}
	return WaitNothing
}
