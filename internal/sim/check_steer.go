package sim

import (
	"fmt"

	"github.com/chainsync-go/chainsync/protocol"
)

// Steering (docs/STEERING.md), as the Checker sees it:
//   - no task starts at a node that is held (its own Steering hold, or a
//     pause: its own at the Head, or the Head's pause line it received),
//     until a later Steering or line says otherwise;
//   - at a node with Config.Approve no task starts before Approve of its
//     round was stepped there, and ActGate comes once per round, only for
//     a round whose turn has come (WATCH with the predecessor's COMPLETE,
//     at the Head READY with the successor's START);
//   - a cancel line (or the Head's own cancel) lets the machine abort its
//     round.
// The checks of order and readiness are the Checker's own: a gate only
// ever holds a task back, so they hold through every hold and approval.

// steerRef is the reference record of steering, per node.
type steerRef struct {
	held     map[int]bool            // node -> held or paused by its own Steering
	paused   map[int]map[string]bool // node -> origins whose pause line it holds
	approved map[int]map[string]bool // node -> rounds approved there
	gated    map[int]map[string]bool // node -> rounds ActGate reported
}

func (s *steerRef) init() {
	if s.held == nil {
		s.held, s.paused = map[int]bool{}, map[int]map[string]bool{}
		s.approved, s.gated = map[int]map[string]bool{}, map[int]map[string]bool{}
	}
}

func setIn(m map[int]map[string]bool, i int, k string, v bool) {
	if m[i] == nil {
		m[i] = map[string]bool{}
	}
	if v {
		m[i][k] = true
	} else {
		delete(m[i], k)
	}
}

// steerEvent records what a successful step of ev at node i changes in
// the steering reference, before its actions are checked.
func (c *Checker) steerEvent(i int, ev protocol.Event) {
	c.steer.init()
	var s *protocol.Steer
	own := false
	switch {
	case ev.Kind == protocol.EvSteer:
		s, own = &ev.Steer, true
	case ev.Kind == protocol.EvRecv && ev.Msg.Cmd == protocol.SteerLine:
		s = ev.Msg.Steer
	case ev.Kind == protocol.EvApprove:
		setIn(c.steer.approved, i, ev.Round, true)
		return
	default:
		return
	}
	if s == nil {
		return
	}
	switch {
	case s.What == protocol.SteerCancel:
		c.abortOK = append(c.abortOK, s.Round)
	case s.What.Event():
	case own:
		c.steer.held[i] = s.What == protocol.SteerHold || s.What == protocol.SteerPause
	default:
		setIn(c.steer.paused, i, s.Origin, s.What == protocol.SteerPause)
	}
}

// steerAction checks ActGate, ActSteer and the STEER lines node i sends.
func (c *Checker) steerAction(i int, a protocol.Action) error {
	c.steer.init()
	role := c.net.Nodes[i].Role
	switch a.Kind {
	case protocol.ActSend:
		if a.To == protocol.Pred && !role.HasPred() || a.To == protocol.Succ && !role.HasSucc() {
			return fmt.Errorf("send to a missing neighbour")
		}
		if a.Msg.Steer == nil || !a.Msg.Steer.Valid() {
			return fmt.Errorf("an invalid STEER line")
		}
	case protocol.ActGate:
		nd := &c.Round(a.Round).Nodes[i]
		turn := nd.State == protocol.StateWatch && nd.got&completeFwd != 0 ||
			!role.HasPred() && nd.State == protocol.StateReady && (nd.got&startBwd != 0 || !role.HasSucc())
		switch {
		case !c.net.Nodes[i].cfg.Approve:
			return fmt.Errorf("an approval gate at a node without Approve")
		case c.steer.gated[i][a.Round]:
			return fmt.Errorf("the approval gate reported twice")
		case !turn:
			return fmt.Errorf("an approval gate before the round's turn came (state %v)", nd.State)
		}
		setIn(c.steer.gated, i, a.Round, true)
	case protocol.ActSteer:
		if a.Msg.Steer == nil {
			return fmt.Errorf("a steering action without a line")
		}
	}
	return nil
}

// steerRunTask checks that node i may start round's task: it is not
// held or paused, and at a node with Approve the round was approved.
func (c *Checker) steerRunTask(i int, round string) error {
	c.steer.init()
	switch {
	case c.steer.held[i]:
		return fmt.Errorf("task started at a held node")
	case len(c.steer.paused[i]) > 0:
		return fmt.Errorf("task started while the chain is paused")
	case c.net.Nodes[i].cfg.Approve && !c.steer.approved[i][round]:
		return fmt.Errorf("task started before its approval")
	}
	return nil
}
