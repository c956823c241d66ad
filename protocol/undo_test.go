package protocol_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// undoRun is one random schedule of a chain of n nodes whose round r1
// fails at node fail: every node runs with Config.Undo. undoFail >= 0
// makes that node's undo fail; restart crashes and restarts (from its
// journal) a node while its undo runs, and re-runs the undo.
type undoRun struct {
	seed          uint64
	n, fail       int
	undoFail      int
	restart, drop bool
	mutate        func(node int, ev protocol.Event, acts []protocol.Action) []protocol.Action
}

func (u undoRun) run() (*sim.Checker, *sim.Network, error) {
	rng := rand.New(rand.NewPCG(u.seed, 7))
	names := make([]string, u.n)
	for i := range names {
		names[i] = string(rune('A' + i))
	}
	net := sim.New(sim.Config{Names: names, Machine: func(i int, c *protocol.Config) {
		c.Extensions, c.Undo, c.Ordered, c.Name, c.Durable = true, true, true, names[i], u.restart
	}})
	ck := sim.NewChecker(net)
	ck.Faults = u.drop || u.restart
	var ferr error
	ck.Attach(func(e error) {
		if ferr == nil {
			ferr = e
		}
	})
	net.Mutate = u.mutate
	for _, i := range rng.Perm(u.n) {
		net.Step(i, protocol.LocalReady("r1"))
	}
	restarted := false
	for step := 0; step < 20000 && ferr == nil; step++ {
		busy := net.Busy()
		k := rng.IntN(len(busy) + len(net.Tasks) + len(net.Undos) + 1)
		switch {
		case k < len(busy):
			if _, _, _, err := net.Deliver(busy[k]); err != nil {
				return ck, net, fmt.Errorf("deliver: %w", err)
			}
		case k < len(busy)+len(net.Tasks):
			t := net.Tasks[k-len(busy)]
			if _, _, err := net.FinishTask(k-len(busy), t.Node == u.fail); err != nil {
				return ck, net, fmt.Errorf("finish task: %w", err)
			}
		case k < len(busy)+len(net.Tasks)+len(net.Undos):
			j := k - len(busy) - len(net.Tasks)
			t := net.Undos[j]
			if u.restart && !restarted {
				// Killed during its undo: the new Machine is in the state
				// its journal says, and the undo runs again.
				restarted = true
				if _, err := net.Restart(t.Node); err != nil {
					return ck, net, err
				}
				if err := ck.Restarted(t.Node, nil); err != nil {
					return ck, net, err
				}
				if ph, _, _ := net.Nodes[t.Node].M.Undo("r1"); ph != protocol.PhaseRunning {
					return ck, net, fmt.Errorf("restarted during its undo: phase %v", ph)
				}
				net.RerunUndo(t.Node, "r1")
				relink(net, t.Node)
				continue
			}
			code := 0
			if t.Node == u.undoFail {
				code = 2
			}
			if _, _, err := net.FinishUndo(j, t.Node == u.undoFail, code); err != nil {
				return ck, net, fmt.Errorf("finish undo: %w", err)
			}
		default:
			if len(busy)+len(net.Tasks)+len(net.Undos) == 0 {
				return ck, net, ferr
			}
			if u.drop && u.n > 1 && rng.IntN(4) == 0 {
				p := rng.IntN(u.n - 1)
				net.SetLink(p, false)
				net.SetLink(p, true)
				net.Step(p, protocol.LinkUp(protocol.Succ))
				net.Step(p+1, protocol.LinkUp(protocol.Pred))
			}
		}
	}
	return ck, net, ferr
}

func relink(net *sim.Network, i int) {
	if i > 0 {
		net.SetLink(i-1, true)
		net.Step(i-1, protocol.LinkUp(protocol.Succ))
		net.Step(i, protocol.LinkUp(protocol.Pred))
	}
	if i+1 < len(net.Nodes) {
		net.SetLink(i, true)
		net.Step(i, protocol.LinkUp(protocol.Succ))
		net.Step(i+1, protocol.LinkUp(protocol.Pred))
	}
}

// TestUndoWaveSimulate runs the undo wave over random schedules, link
// drops and restarts during an undo: the checker (internal/sim,
// check_undo.go) checks every step; at the end every node before the
// failure has undone its part, none at or after it, and every node
// reported the outcome. docs/UNDO.md, "The wave" and "What is checked".
func TestUndoWaveSimulate(t *testing.T) {
	for seed := uint64(1); seed <= 400; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 1 + rng.IntN(7)
		u := undoRun{seed: seed, n: n, fail: rng.IntN(n), undoFail: -1, drop: seed%3 == 0, restart: seed%4 == 1}
		ck, net, err := u.run()
		if err != nil {
			t.Fatalf("seed %d (n=%d, fail at %d): %v", seed, n, u.fail, err)
		}
		if err := ck.CheckUndone("r1", u.fail); err != nil {
			t.Fatalf("seed %d (n=%d, fail at %d): %v", seed, n, u.fail, err)
		}
		for i, nd := range net.Nodes {
			if nd.M.Active() != 0 {
				t.Fatalf("seed %d: node %d has %d rounds unfinished", seed, i, nd.M.Active())
			}
		}
		if !protocol.SharedRoundMoreIsZero() {
			t.Fatalf("seed %d: a round's undo state was written through ext (the shared zero one), not own", seed)
		}
	}
}

// TestUndoFailedStopsTheWave: an undo that fails stops the wave there;
// no node before it undoes, and every node's outcome names it.
// docs/UNDO.md, "When an undo fails".
func TestUndoFailedStopsTheWave(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		n := 2 + rng.IntN(6)
		fail := 1 + rng.IntN(n-1)
		uf := rng.IntN(fail)
		ck, net, err := undoRun{seed: seed, n: n, fail: fail, undoFail: uf, drop: seed%2 == 0}.run()
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		u := ck.UndoOf("r1")
		for i := range u {
			switch {
			case i < uf && u[i].Started:
				t.Fatalf("seed %d: node %d before the failed undo at %d ran its undo", seed, i, uf)
			case uf < i && i < fail && (!u[i].Ended || u[i].Failed):
				t.Fatalf("seed %d: node %d did not undo", seed, i)
			case u[i].Outcome == nil || u[i].Outcome.Stop != net.Nodes[uf].Name:
				t.Fatalf("seed %d: node %d outcome %+v, want the undo failed at %s", seed, i, u[i].Outcome, net.Nodes[uf].Name)
			}
		}
		head := u[0].Outcome.Outcome()
		if uf > 0 && !strings.HasSuffix(head, "A not undone") {
			t.Fatalf("seed %d: the Head's outcome %q does not say A is not undone", seed, head)
		}
	}
}

// TestUndoOutcomeWords: the outcome lines the docs quote.
// docs/UNDO.md, "Outcomes".
func TestUndoOutcomeWords(t *testing.T) {
	for _, tc := range []struct {
		n, fail, undoFail int
		head              string
	}{
		{4, 2, -1, "failed at C (task exited 1); undone by B, A"},
		{4, 3, -1, "failed at D (task exited 1); undone by C, B, A"},
		{4, 2, 1, "failed at C; undo failed at B (exit 2); A not undone"},
		{3, 0, -1, "failed at A (task exited 1); nothing to undo"},
	} {
		net := sim.New(sim.Config{Names: []string{"A", "B", "C", "D"}[:tc.n], Machine: func(i int, c *protocol.Config) {
			c.Extensions, c.Undo, c.Ordered, c.Name = true, true, true, string(rune('A'+i))
		}})
		var got []string
		net.Hook = func(node int, ev protocol.Event, acts []protocol.Action, err error) {
			for _, a := range acts {
				if a.Kind == protocol.ActUndone && node == 0 {
					got = append(got, a.Wave.Outcome())
				}
			}
		}
		for i := range tc.n {
			net.Step(i, protocol.LocalReady("r1"))
		}
		for range 1000 {
			switch {
			case len(net.Busy()) > 0:
				net.Deliver(net.Oldest())
			case len(net.Tasks) > 0:
				tk := net.Tasks[0]
				if tk.Node == tc.fail {
					net.Step(tk.Node, protocol.TaskFailedWhy("r1", protocol.Failure{Kind: protocol.KindTaskFailed, Code: 1}))
					net.Tasks = net.Tasks[1:]
				} else {
					net.FinishTask(0, false)
				}
			case len(net.Undos) > 0:
				net.FinishUndo(0, net.Undos[0].Node == tc.undoFail, 2)
			}
		}
		if len(got) != 1 || got[0] != tc.head {
			t.Errorf("chain of %d failing at %d, undo failing at %d: the Head says %q, want %q", tc.n, tc.fail, tc.undoFail, got, tc.head)
		}
	}
}

// TestUndoSeededBugs: the checker catches a machine that undoes out of
// order, twice, at a node whose task did not succeed, or while a task of
// the round runs. docs/UNDO.md, "What is checked".
func TestUndoSeededBugs(t *testing.T) {
	bugs := map[string]func(node int, ev protocol.Event, acts []protocol.Action) []protocol.Action{
		// UNDO goes on to the predecessor as soon as this node's undo
		// starts, not when it has ended.
		"early forward": func(node int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
			for _, a := range acts {
				if a.Kind == protocol.ActRunUndo && node > 0 {
					w := a.Wave
					w.Undone, w.UndoneN = "X", w.UndoneN+1
					acts = append(acts, protocol.Action{Kind: protocol.ActSend, To: protocol.Pred, Msg: protocol.Message{Cmd: protocol.UndoLine, Round: a.Round, Undo: &w}})
				}
			}
			return acts
		},
		// The failed node runs an undo of its own.
		"undo at the failed node": func(node int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
			if ev.Kind == protocol.EvTaskDone && ev.Failed {
				acts = append(acts, protocol.Action{Kind: protocol.ActRunUndo, Round: ev.Round})
			}
			return acts
		},
		// A re-sent UNDO starts the undo again.
		"twice": func(node int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
			for _, a := range acts {
				if a.Kind == protocol.ActRunUndo {
					return append(acts, a)
				}
			}
			return acts
		},
		// The wave starts when a task starts, while it runs.
		"while a task runs": func(node int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
			for _, a := range acts {
				if a.Kind == protocol.ActRunTask && node > 0 {
					w := protocol.Wave{Failed: "X", Kind: "task-failed", Code: 1, StopCode: -1}
					return append(acts, protocol.Action{Kind: protocol.ActSend, To: protocol.Pred, Msg: protocol.Message{Cmd: protocol.UndoLine, Round: a.Round, Undo: &w}})
				}
			}
			return acts
		},
	}
	for name, bug := range bugs {
		caught := false
		for seed := uint64(1); seed <= 50 && !caught; seed++ {
			_, _, err := undoRun{seed: seed, n: 4, fail: 3, undoFail: -1, mutate: bug}.run()
			caught = err != nil
		}
		if !caught {
			t.Errorf("seeded bug %q not caught", name)
		}
	}
}

// TestUndoMismatch: undo is a chain setting. A node with Config.Undo
// refuses a round's message on a connection that did not begin with UNDO
// ON, and a node without it refuses UNDO ON, both as a Mismatch of the
// setting "undo". docs/UNDO.md, "A chain setting".
func TestUndoMismatch(t *testing.T) {
	with := protocol.New(protocol.Config{Role: protocol.Tail, Extensions: true, Undo: true})
	acts, err := with.Step(protocol.Promote(protocol.Pred, protocol.Message{Cmd: protocol.Ready, Round: "r1"}), nil)
	var v *protocol.Violation
	if !errors.As(err, &v) || !v.Mismatch || v.Setting != "undo" {
		t.Fatalf("READY first at a node with undo: %v %v", acts, err)
	}
	acts, err = with.Step(protocol.Promote(protocol.Pred, protocol.Message{Cmd: protocol.UndoOn}), nil)
	if err != nil || len(acts) == 0 || acts[0].Msg.Cmd != protocol.UndoOn {
		t.Fatalf("UNDO ON first: %v %v (want UNDO ON sent back first)", acts, err)
	}
	if _, err := with.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Ready, Round: "r1"}), nil); err != nil {
		t.Fatalf("READY after UNDO ON: %v", err)
	}
	without := protocol.New(protocol.Config{Role: protocol.Tail, Extensions: true})
	if _, err := without.Step(protocol.Promote(protocol.Pred, protocol.Message{Cmd: protocol.UndoOn}), nil); !errors.As(err, &v) || !v.Mismatch || v.Setting != "undo" {
		t.Fatalf("UNDO ON at a node without undo: %v", err)
	}
}

// TestUndoLaterRoundWaits: with one task at a time, a later round's task
// does not run at a node before that node's undo of an earlier failed
// round has ended. docs/UNDO.md, "Order with other rounds".
func TestUndoLaterRoundWaits(t *testing.T) {
	names := []string{"A", "B", "C"}
	net := sim.New(sim.Config{Names: names, Machine: func(i int, c *protocol.Config) {
		c.Extensions, c.Undo, c.Ordered, c.Name = true, true, true, names[i]
	}})
	undoEnded := map[int]bool{}
	net.Hook = func(node int, ev protocol.Event, acts []protocol.Action, err error) {
		if ev.Kind == protocol.EvUndoDone {
			undoEnded[node] = true
		}
		for _, a := range acts {
			if a.Kind == protocol.ActRunTask && a.Round == "r2" && node < 2 && !undoEnded[node] {
				t.Errorf("node %d runs r2's task before its undo of r1 ended", node)
			}
		}
	}
	for _, r := range []string{"r1", "r2"} {
		for i := range names {
			net.Step(i, protocol.LocalReady(r))
		}
	}
	for range 2000 {
		switch {
		case len(net.Busy()) > 0:
			net.Deliver(net.Oldest())
		case len(net.Tasks) > 0:
			tk := net.Tasks[0]
			net.FinishTask(0, tk.Node == 2 && tk.Round == "r1")
		case len(net.Undos) > 0:
			net.FinishUndo(0, false, 0)
		}
	}
	for i, nd := range net.Nodes {
		if st, _ := nd.M.State("r2"); st != protocol.StateDone {
			t.Errorf("node %d: r2 in %v, want it done after r1's undo", i, st)
		}
	}
}

// TestUndoLineRoundTrip: every undo line the machine writes parses back
// to itself, the longest ones included. docs/PROTOCOL.md, "The undo wave".
func TestUndoLineRoundTrip(t *testing.T) {
	long := strings.Repeat("r", protocol.MaxRoundLen)
	name := strings.Repeat("n", protocol.MaxNoticeName)
	for _, m := range []protocol.Message{
		{Cmd: protocol.UndoOn},
		{Cmd: protocol.UndoLine, Round: "r1", Undo: &protocol.Wave{Failed: "C", Kind: "task-failed", Code: 1, Undone: "B", UndoneN: 1, StopCode: -1}},
		{Cmd: protocol.UndoEnd, Round: "", Undo: &protocol.Wave{Failed: "C", Kind: "task-timeout", Code: protocol.CodeTimeout, Undone: "", UndoneN: 0, Stop: "B", StopCode: 2, KeptN: -1}},
		{Cmd: protocol.UndoEnd, Round: long, Undo: &protocol.Wave{Failed: name, Kind: "task-failed", Code: 255, Undone: name, UndoneN: 77, Stop: name, StopCode: protocol.CodeTimeout, Kept: name, KeptN: 99999}},
	} {
		if m.Undo != nil {
			m.Undo.Fit(m.Cmd, m.Round)
		}
		line := wire.Append(nil, m, false)
		if len(line)-1 > wire.MaxLine || !wire.Valid(m) {
			t.Errorf("%v: %d bytes, valid %v", m, len(line)-1, wire.Valid(m))
			continue
		}
		got, err := wire.ParseExtensions(line[:len(line)-1])
		if err != nil || got.Cmd != m.Cmd || got.Round != m.Round || (m.Undo != nil) != (got.Undo != nil) || m.Undo != nil && *m.Undo != *got.Undo {
			t.Errorf("%q: parsed %v, %v", line, got, err)
		}
	}
	if _, err := wire.Parse([]byte("UNDO ON")); err == nil {
		t.Error("UNDO ON parsed without extensions")
	}
}

// TestUndoFailedHaltsOtherRounds: an undo that fails is a fault
// everywhere: under halt it ends the other rounds in flight (none of
// whose tasks runs); under wait they go on, in order, once the failed
// round has settled at each node. docs/UNDO.md, "When an undo fails".
func TestUndoFailedHaltsOtherRounds(t *testing.T) {
	for _, policy := range []protocol.Policy{protocol.PolicyHalt, protocol.PolicyWait} {
		names := []string{"A", "B", "C"}
		net := sim.New(sim.Config{Names: names, Machine: func(i int, c *protocol.Config) {
			c.Extensions, c.Undo, c.Ordered, c.Name, c.Policy = true, true, true, names[i], policy
		}})
		ck := sim.NewChecker(net)
		var ferr error
		ck.Attach(func(e error) {
			if ferr == nil {
				ferr = e
			}
		})
		r2Tasks := 0
		hook := net.Hook
		net.Hook = func(node int, ev protocol.Event, acts []protocol.Action, err error) {
			hook(node, ev, acts, err)
			for _, a := range acts {
				if a.Kind == protocol.ActRunTask && a.Round == "r2" {
					r2Tasks++
				}
			}
		}
		for _, r := range []string{"r1", "r2"} {
			for i := range names {
				net.Step(i, protocol.LocalReady(r))
			}
		}
		for range 2000 {
			switch {
			case len(net.Busy()) > 0:
				net.Deliver(net.Oldest())
			case len(net.Tasks) > 0:
				tk := net.Tasks[0]
				net.FinishTask(0, tk.Node == 2 && tk.Round == "r1")
			case len(net.Undos) > 0:
				net.FinishUndo(0, net.Undos[0].Node == 1, 2)
			}
		}
		if ferr != nil {
			t.Fatalf("policy %v: %v", policy, ferr)
		}
		for i, nd := range net.Nodes {
			st, _ := nd.M.State("r2")
			switch {
			case policy == protocol.PolicyHalt && (st != protocol.StateAborted || r2Tasks != 0):
				t.Errorf("halt: node %d: r2 in %v, %d of its tasks ran; want it aborted, none run", i, st, r2Tasks)
			case policy == protocol.PolicyWait && st != protocol.StateDone:
				t.Errorf("wait: node %d: r2 in %v, want done", i, st)
			}
		}
	}
}
