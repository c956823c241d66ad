package sim

import (
	"fmt"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Restart graces (docs/DESIGN.md, "Liveness: a restart is not a death"),
// as the Checker sees them:
//   - a node announces its grace only with the round's task about to
//     run (in the step that runs it) and ends it only with its task's end;
//   - no node reports a neighbour silent or unreachable while it holds
//     that neighbour's grace;
//   - a grace runs out (TimeoutGrace) at a node no sooner than the grace
//     after the node announced it, and names a node that announced one;
//   - a node hears of a grace only from the side the graced node lies on.

// graceRef is the reference record of the graces announced.
type graceRef struct {
	// at: when each node last announced a grace (by name), and for how
	// long.
	at  map[string]time.Duration
	dur map[string]time.Duration
}

// graceSend checks a GRACE line or a notice node i sends.
func (c *Checker) graceSend(i int, a protocol.Action) error {
	role := c.net.Nodes[i].Role
	if a.To == protocol.Pred && !role.HasPred() || a.To == protocol.Succ && !role.HasSucc() {
		return fmt.Errorf("send to a missing neighbour")
	}
	g := a.Msg.Grace
	if a.Msg.Cmd != protocol.Grace || g == nil {
		return nil
	}
	if !g.Valid() {
		return fmt.Errorf("an invalid GRACE line")
	}
	own := g.Hops == 1 && g.Node == protocol.NoticeName(c.net.Nodes[i].Name)
	if !own || g.For == 0 {
		return nil
	}
	if r := c.rounds[g.Round]; !a.Resend && (r == nil || r.Nodes[i].State != protocol.StateStart || r.Nodes[i].Finished) {
		return fmt.Errorf("a restart grace announced outside its round's task")
	}
	if c.grace.at == nil {
		c.grace.at, c.grace.dur = make(map[string]time.Duration), make(map[string]time.Duration)
	}
	if !a.Resend {
		c.grace.at[g.Node], c.grace.dur[g.Node] = c.net.Now, g.For
	}
	return nil
}

// graceAction checks ActGrace and ActBack at node i.
func (c *Checker) graceAction(i int, a protocol.Action) error {
	if a.Kind == protocol.ActBack {
		if a.To != protocol.Pred && a.To != protocol.Succ {
			return fmt.Errorf("a neighbour back on no side")
		}
		return nil
	}
	g := a.Msg.Grace
	if g == nil {
		return fmt.Errorf("ActGrace without a grace")
	}
	for j, nd := range c.net.Nodes {
		if protocol.NoticeName(nd.Name) == g.Node && (j < i) != (a.To == protocol.Pred) {
			return fmt.Errorf("grace of node %d heard of from the %v", j, a.To)
		}
	}
	return nil
}

// notInGrace checks that node i's silence or unreachability timeout does
// not blame a neighbour whose grace it holds.
func (c *Checker) notInGrace(i int, a protocol.Action) error {
	for _, g := range c.net.Nodes[i].M.Graces() {
		if g.Neighbor && g.Side == a.To {
			return fmt.Errorf("%v %v reported of %s in its restart grace", a.To, a.Timeout, g.Node)
		}
	}
	return nil
}

// graceTimeout checks a TimeoutGrace at node i.
func (c *Checker) graceTimeout(i int, a protocol.Action) error {
	g := a.Msg.Grace
	if g == nil {
		return fmt.Errorf("a grace timeout that names no node")
	}
	at, ok := c.grace.at[g.Node]
	switch {
	case !ok:
		return fmt.Errorf("grace of %s ran out, but it announced none", g.Node)
	case c.net.Now-at < c.grace.dur[g.Node] || a.After < c.grace.dur[g.Node]:
		return fmt.Errorf("grace of %s ran out %v after it was announced, grace %v", g.Node, c.net.Now-at, c.grace.dur[g.Node])
	}
	return nil
}
