package sim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
)

// graceScenario: A-B-C with the extension lines; B announces a restart
// grace of 20s before its task, crashes inside it and is away 10s, then
// comes back (its task taken as done): an honest Machine reports nothing.
// mutate plays a buggy one.
func graceScenario(t *testing.T, mutate func(i int, ev protocol.Event, acts []protocol.Action) []protocol.Action) error {
	t.Helper()
	names := []string{"A", "B", "C"}
	net := sim.New(sim.Config{Names: names, Machine: func(i int, pc *protocol.Config) {
		pc.Extensions, pc.Durable, pc.Self = true, true, names[i]
		pc.Silence, pc.ConnectTimeout, pc.PhaseTimeout = 3*time.Second, 5*time.Second, 8*time.Second
		pc.Policy = protocol.PolicyWait
		if i == 1 {
			pc.RestartGrace = 20 * time.Second
		}
	}})
	chk := sim.NewChecker(net)
	chk.Faults = true
	var first error
	chk.Attach(func(err error) {
		if first == nil {
			first = err
		}
	})
	if mutate != nil {
		net.Mutate = mutate
	}
	for i := range net.Nodes {
		net.Step(i, protocol.LocalReady("r"))
	}
	drain := func() {
		for l := net.Oldest(); l >= 0; l = net.Oldest() {
			if _, to := net.Ends(l); net.Hung(to) {
				return
			}
			net.Deliver(l)
		}
	}
	for steps := 0; steps < 20; steps++ {
		drain()
		if len(net.Tasks) == 0 || net.Tasks[0].Node == 1 {
			break
		}
		net.FinishTask(0, false)
	}
	net.Restart(1)
	net.Hang(1, true)
	for range 20 {
		net.Advance(500 * time.Millisecond)
		drain()
	}
	net.Hang(1, false)
	for _, p := range []int{0, 1} {
		net.SetLink(p, true)
		net.Step(p, protocol.LinkUp(protocol.Succ))
		net.Step(p+1, protocol.LinkUp(protocol.Pred))
	}
	net.Step(1, protocol.TaskDone("r", false))
	for steps := 0; steps < 20; steps++ {
		drain()
		if len(net.Tasks) == 0 {
			break
		}
		net.FinishTask(0, false)
	}
	net.Advance(time.Second)
	return first
}

// TestCheckerCatchesGraceBugs: the Checker's restart-grace invariants
// (docs/DESIGN.md, "Liveness: a restart is not a death") pass an honest
// Machine and catch one that reports a neighbour in its grace, lets a
// grace run out early, or announces a grace outside a task.
func TestCheckerCatchesGraceBugs(t *testing.T) {
	if err := graceScenario(t, nil); err != nil {
		t.Fatalf("honest scenario: %v", err)
	}
	onTick := func(node int, add protocol.Action) func(int, protocol.Event, []protocol.Action) []protocol.Action {
		return func(i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
			if ev.Kind == protocol.EvTick && i == node {
				acts = append(acts, add)
			}
			return acts
		}
	}
	early := protocol.GraceNote{HasRound: true, Round: "r", Node: "B", For: 20 * time.Second, Hops: 1}
	bugs := []struct {
		name, want string
		mutate     func(int, protocol.Event, []protocol.Action) []protocol.Action
	}{
		{"silence reported in the grace", "in its restart grace",
			onTick(2, protocol.Action{Kind: protocol.ActTimeout, Timeout: protocol.TimeoutSilence, To: protocol.Pred, After: 3 * time.Second})},
		{"down link reported in the grace", "in its restart grace",
			onTick(0, protocol.Action{Kind: protocol.ActTimeout, Timeout: protocol.TimeoutUnreachable, To: protocol.Succ, After: 5 * time.Second})},
		{"grace runs out early", "grace of B ran out",
			onTick(2, protocol.Action{Kind: protocol.ActTimeout, Timeout: protocol.TimeoutGrace, To: protocol.Pred, After: 20 * time.Second, Msg: protocol.Message{Cmd: protocol.Grace, Grace: &early}})},
		{"grace announced outside a task", "announced outside its round's task",
			func(i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
				if i == 1 && ev.Kind == protocol.EvLocalReady {
					acts = append(acts, protocol.Action{Kind: protocol.ActSend, To: protocol.Succ, Msg: protocol.Message{Cmd: protocol.Grace, Grace: &early}})
				}
				return acts
			}},
	}
	for _, b := range bugs {
		err := graceScenario(t, b.mutate)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("seeded bug %q: checker said %v, want an error with %q", b.name, err, b.want)
		}
	}
}
