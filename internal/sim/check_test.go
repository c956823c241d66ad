package sim_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
)

// A seeded bug: a rewrite of a correct Machine's actions (sim.Network's
// Mutate) that makes it misbehave. It reports whether it changed
// anything.
type seededBug struct {
	name string
	// want is part of the Checker's error: the invariant that must catch it.
	want   []string
	mutate func(net *sim.Network, node int, ev protocol.Event, acts []protocol.Action) ([]protocol.Action, bool)
}

func stateChange(round string, from, to protocol.State) protocol.Action {
	return protocol.Action{Kind: protocol.ActState, Round: round, From: from, State: to}
}

func runTask(round string) protocol.Action {
	return protocol.Action{Kind: protocol.ActRunTask, Round: round}
}

func hasState(acts []protocol.Action, to protocol.State) bool {
	return slices.ContainsFunc(acts, func(a protocol.Action) bool { return a.Kind == protocol.ActState && a.State == to })
}

// The seeded bugs of docs/DESIGN.md's guarantees (draft, Introduction: "No
// process starts until the entire chain is ready. Execution order is
// strictly A -> B -> ... -> N."), each the Promela model's bug of the
// same kind (model/chainsync.pml).
var seededBugs = []seededBug{{
	// Runs a task twice: no duplicate suppression, so a re-sent COMPLETE
	// from the predecessor starts the task again (model BUG=4).
	name: "task twice: duplicate COMPLETE from the predecessor runs the task again",
	want: []string{"task started twice"},
	mutate: func(net *sim.Network, i int, ev protocol.Event, acts []protocol.Action) ([]protocol.Action, bool) {
		if ev.Kind != protocol.EvRecv || ev.From != protocol.Pred || ev.Msg.Cmd != protocol.Complete || hasState(acts, protocol.StateStart) {
			return acts, false
		}
		if st, _ := net.Nodes[i].M.State(ev.Msg.Round); st < protocol.StateStart {
			return acts, false
		}
		return append(acts, runTask(ev.Msg.Round)), true
	},
}, {
	// Runs a task twice: the Head runs its task again when a duplicate
	// START arrives.
	name: "task twice: duplicate START at the Head",
	want: []string{"task started twice"},
	mutate: func(net *sim.Network, i int, ev protocol.Event, acts []protocol.Action) ([]protocol.Action, bool) {
		if i != 0 || ev.Kind != protocol.EvRecv || ev.Msg.Cmd != protocol.Start || hasState(acts, protocol.StateStart) {
			return acts, false
		}
		if st, _ := net.Nodes[i].M.State(ev.Msg.Round); st < protocol.StateStart {
			return acts, false
		}
		return append(acts, runTask(ev.Msg.Round)), true
	},
}, {
	// Out of order: an intermediate node starts its task on START from
	// its successor instead of waiting in WATCH for its predecessor's
	// COMPLETE (model BUG=2).
	name: "out of order: intermediate runs its task on START",
	want: []string{"before the predecessor's task finished"},
	mutate: func(net *sim.Network, i int, ev protocol.Event, acts []protocol.Action) ([]protocol.Action, bool) {
		if net.Nodes[i].Role != protocol.Middle || !hasState(acts, protocol.StateWatch) {
			return acts, false
		}
		return append(acts, stateChange(ev.Msg.Round, protocol.StateWatch, protocol.StateStart), runTask(ev.Msg.Round)), true
	},
}, {
	// Out of order: a node's task also starts when its predecessor's
	// task starts (COMPLETE forwarded when the task begins, not ends).
	name: "out of order: COMPLETE sent on when the task starts",
	want: []string{"COMPLETE sent on before the task finished"},
	mutate: func(net *sim.Network, i int, ev protocol.Event, acts []protocol.Action) ([]protocol.Action, bool) {
		if !net.Nodes[i].Role.HasSucc() {
			return acts, false
		}
		k := slices.IndexFunc(acts, func(a protocol.Action) bool { return a.Kind == protocol.ActRunTask })
		if k < 0 {
			return acts, false
		}
		early := protocol.Action{Kind: protocol.ActSend, To: protocol.Succ, Msg: protocol.Message{Cmd: protocol.Complete, Round: acts[k].Round}}
		return append(acts, early), true
	},
}, {
	// Before everyone is ready: the Head runs its task as soon as it is
	// locally ready, without waiting for the START wave.
	name: "before all ready: Head runs its task when locally ready",
	want: []string{"nodes locally ready", "without START from the successor"},
	mutate: func(net *sim.Network, i int, ev protocol.Event, acts []protocol.Action) ([]protocol.Action, bool) {
		if net.Nodes[i].Role != protocol.Head || ev.Kind != protocol.EvLocalReady || !hasState(acts, protocol.StateReady) {
			return acts, false
		}
		return append(acts, stateChange(ev.Round, protocol.StateReady, protocol.StateStart), runTask(ev.Round)), true
	},
}, {
	// Before everyone is ready: an intermediate node forwards READY before
	// it is locally ready (model BUG=1), so the chain may start while it
	// is not ready.
	name: "before all ready: intermediate forwards READY before it is locally ready",
	want: []string{"READY sent before this node was locally ready"},
	mutate: func(net *sim.Network, i int, ev protocol.Event, acts []protocol.Action) ([]protocol.Action, bool) {
		if net.Nodes[i].Role != protocol.Middle || ev.Kind != protocol.EvRecv || ev.Msg.Cmd != protocol.Ready || len(acts) != 0 {
			return acts, false
		}
		if st, _ := net.Nodes[i].M.State(ev.Msg.Round); st != protocol.StateSync {
			return acts, false
		}
		return append(acts, stateChange(ev.Msg.Round, protocol.StateSync, protocol.StateReady),
			protocol.Action{Kind: protocol.ActSend, To: protocol.Succ, Msg: protocol.Message{Cmd: protocol.Ready, Round: ev.Msg.Round}}), true
	},
}, {
	// Forgets a round that is still running (KeepFinished pruning the
	// wrong end of its list): the driver would drop the round's waiters.
	name: "forgets a round while it runs",
	want: []string{"round forgotten while still running"},
	mutate: func(net *sim.Network, i int, ev protocol.Event, acts []protocol.Action) ([]protocol.Action, bool) {
		k := slices.IndexFunc(acts, func(a protocol.Action) bool { return a.Kind == protocol.ActRunTask })
		if k < 0 {
			return acts, false
		}
		return append(acts, protocol.Action{Kind: protocol.ActForget, Round: acts[k].Round}), true
	},
}}

// runBuggy runs one random schedule of seed with bug (nil: the correct
// Machine) and returns whether the bug fired and the Checker's first
// error.
func runBuggy(seed uint64, bug *seededBug) (fired bool, err error) {
	rng := rand.New(rand.NewPCG(seed, 0xb06))
	n := 2 + rng.IntN(5)
	rounds := []string{"", "r1"}[:1+rng.IntN(2)]
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("n", i)
	}
	net := sim.New(sim.Config{Names: names, Machine: func(_ int, pc *protocol.Config) { pc.Durable = rng.IntN(2) == 0 }})
	chk := sim.NewChecker(net)
	chk.Faults = true // duplicates are answered with re-sends
	chk.Attach(func(e error) {
		if err == nil {
			err = e
		}
	})
	if bug != nil {
		net.Mutate = func(i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
			acts, f := bug.mutate(net, i, ev, acts)
			fired = fired || f
			return acts
		}
	}
	type ready struct {
		node  int
		round string
	}
	var pending []ready
	for i := range n {
		for _, r := range rounds {
			pending = append(pending, ready{i, r})
		}
	}
	for step := 0; step < 60*n && err == nil; step++ {
		switch x := rng.IntN(10); {
		case x < 4 && len(net.Busy()) > 0:
			busy := net.Busy()
			_, _, _, e := net.Deliver(busy[rng.IntN(len(busy))])
			if e != nil && err == nil {
				err = fmt.Errorf("deliver: %w", e)
			}
		case x < 6 && len(pending) > 0:
			k := rng.IntN(len(pending))
			p := pending[k]
			pending = slices.Delete(pending, k, k+1)
			_, _ = net.Step(p.node, protocol.LocalReady(p.round))
		case x < 8 && len(net.Tasks) > 0:
			_, _, _ = net.FinishTask(rng.IntN(len(net.Tasks)), false)
		case x == 9:
			net.DupLast(rng.IntN(net.Links()))
		}
	}
	return fired, err
}

// TestCheckerCatchesSeededBugs proves the Checker is not vacuous: for each
// seeded bug, over random schedules, every schedule in which the bug
// fired is rejected, by the invariant the bug breaks; and the correct
// Machine passes the same schedules.
func TestCheckerCatchesSeededBugs(t *testing.T) {
	const seeds = 300
	for seed := uint64(1); seed <= seeds; seed++ {
		if _, err := runBuggy(seed, nil); err != nil {
			t.Fatalf("seed %d: the correct Machine was rejected: %v", seed, err)
		}
	}
	for b := range seededBugs {
		bug := &seededBugs[b]
		t.Run(bug.name, func(t *testing.T) {
			fired := 0
			for seed := uint64(1); seed <= seeds; seed++ {
				f, err := runBuggy(seed, bug)
				if !f {
					continue
				}
				fired++
				switch {
				case err == nil:
					t.Fatalf("seed %d: the bug fired and the Checker did not catch it", seed)
				case !slices.ContainsFunc(bug.want, func(w string) bool { return strings.Contains(err.Error(), w) }):
					t.Fatalf("seed %d: caught, but not by the expected invariant %q: %v", seed, bug.want, err)
				}
			}
			if fired < 10 {
				t.Fatalf("the bug fired in only %d of %d schedules; the test proves too little", fired, seeds)
			}
			t.Logf("fired and caught in %d of %d schedules", fired, seeds)
		})
	}
}

// A journal that misses a step (as when it is written after the send and
// the node dies in between) is caught at the restart: the restored
// Machine is behind what its neighbours saw. And a finished task may not
// run again. docs/DESIGN.md, "Restarts and durable state".
func TestCheckerCatchesLostJournalRecords(t *testing.T) {
	caught := 0
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x1057))
		n := 2 + rng.IntN(4)
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprint("n", i)
		}
		net := sim.New(sim.Config{Names: names, Machine: func(_ int, pc *protocol.Config) { pc.Durable = true }})
		chk := sim.NewChecker(net)
		chk.Faults = true
		chk.Attach(func(e error) { t.Fatalf("seed %d: %v", seed, e) })
		victim, skipped := rng.IntN(n), false
		// The bug: the victim's save of its first step that sends is
		// dropped (written "after the send", and the node died first).
		net.Mutate = func(i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
			if i != victim || skipped || !slices.ContainsFunc(acts, func(a protocol.Action) bool { return a.Kind == protocol.ActSend }) {
				return acts
			}
			skipped = true
			return slices.DeleteFunc(acts, func(a protocol.Action) bool { return a.Kind == protocol.ActSave })
		}
		for i := range n {
			if _, err := net.Step(i, protocol.LocalReady("r")); err != nil {
				t.Fatal(err)
			}
		}
		for !skipped && len(net.Busy()) > 0 {
			if _, _, _, err := net.Deliver(net.Busy()[0]); err != nil {
				t.Fatal(err)
			}
		}
		if !skipped {
			t.Fatalf("seed %d: the victim never sent", seed)
		}
		interrupted, err := net.Restart(victim)
		if err != nil {
			t.Fatal(err)
		}
		if err := chk.Restarted(victim, interrupted); err == nil {
			t.Fatalf("seed %d: a restart from a journal missing a step was not caught", seed)
		}
		caught++
	}
	if caught != 200 {
		t.Fatalf("caught %d of 200", caught)
	}
}

func TestCheckerRerunOnlyInterrupted(t *testing.T) {
	net := sim.New(sim.Config{Names: []string{"a"}, Machine: func(_ int, pc *protocol.Config) { pc.Durable = true }})
	chk := sim.NewChecker(net)
	chk.Attach(func(e error) { t.Fatal(e) })
	if err := chk.Rerun(0, "r"); err == nil {
		t.Fatal("re-run of a task that never started accepted")
	}
	if _, err := net.Step(0, protocol.LocalReady("r")); err != nil {
		t.Fatal(err)
	}
	if err := chk.Rerun(0, "r"); err == nil {
		t.Fatal("re-run of a running task without a restart accepted")
	}
	interrupted, err := net.Restart(0)
	if err != nil || !slices.Equal(interrupted, []string{"r"}) {
		t.Fatalf("Restart: %q, %v", interrupted, err)
	}
	if err := chk.Restarted(0, interrupted); err != nil {
		t.Fatal(err)
	}
	if err := chk.Rerun(0, "r"); err != nil {
		t.Fatal(err)
	}
	net.Rerun(0, "r")
	if err := chk.Rerun(0, "r"); err == nil {
		t.Fatal("second re-run after one restart accepted")
	}
	if _, _, err := net.FinishTask(0, false); err != nil {
		t.Fatal(err)
	}
	if err := chk.Rerun(0, "r"); err == nil {
		t.Fatal("re-run of a finished task accepted")
	}
	if err := chk.CheckDone("r"); err != nil {
		t.Fatal(err)
	}
}

// timeoutScenario runs three nodes with every timeout at 10 s under the
// wait policy: A, B and C become ready, every task but C's runs, the link
// A-B goes down, C's task finishes, so B is done but cannot hand its
// final COMPLETE over; then the clock moves 1 s three times and 11 s
// once. mutate, if set, rewrites the Machines' actions. It returns the
// timeouts reported and the Checker's first error.
func timeoutScenario(t *testing.T, mutate func(net *sim.Network, i int, ev protocol.Event, acts []protocol.Action) []protocol.Action) ([]protocol.Action, error) {
	t.Helper()
	net := sim.New(sim.Config{Names: []string{"A", "B", "C"}, Machine: func(_ int, pc *protocol.Config) {
		pc.PhaseTimeout, pc.ExitWaveTimeout, pc.Silence, pc.ConnectTimeout = 10*time.Second, 10*time.Second, 10*time.Second, 10*time.Second
		pc.Policy = protocol.PolicyWait // every timeout is reported; none ends the rounds
	}})
	chk := sim.NewChecker(net)
	chk.Faults = true
	var first error
	chk.Attach(func(err error) {
		if first == nil {
			first = err
		}
	})
	var seen []protocol.Action
	net.Mutate = func(i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
		if mutate != nil {
			acts = mutate(net, i, ev, acts)
		}
		for _, a := range acts {
			if a.Kind == protocol.ActTimeout || a.Kind == protocol.ActDone && a.Outcome == protocol.NotDelivered {
				seen = append(seen, a)
			}
		}
		return acts
	}
	for i := range net.Nodes {
		net.Step(i, protocol.LocalReady("r"))
	}
	for steps := 0; steps < 100; steps++ {
		if k := slices.IndexFunc(net.Tasks, func(tk sim.Task) bool { return tk.Node != 2 }); k >= 0 {
			net.FinishTask(k, false)
			continue
		}
		l := net.Oldest()
		if l < 0 {
			break
		}
		net.Deliver(l)
	}
	net.SetLink(0, false)
	net.FinishTask(0, false)
	net.Deliver(sim.Bwd(1)) // C->B COMPLETE: B's own, to A, is lost
	for _, d := range []time.Duration{time.Second, time.Second, time.Second, 11 * time.Second} {
		net.Advance(d)
	}
	return seen, first
}

// TestCheckerCatchesTimeoutBugs: the Checker's "no timeout blames a
// healthy node" (docs/DESIGN.md, "Time") catches a Machine that blames a
// live neighbour for silence, calls a neighbour on an up link
// unreachable, times a phase out early or twice, or gives up an exit
// wave early; the scenario itself passes and reports the timeouts it
// must.
func TestCheckerCatchesTimeoutBugs(t *testing.T) {
	seen, err := timeoutScenario(t, nil)
	if err != nil {
		t.Fatalf("honest scenario: %v", err)
	}
	var got []string
	for _, a := range seen {
		got = append(got, sim.DescribeAction(a))
	}
	// A waits for the exit wave from B (phase), B's final COMPLETE cannot
	// reach A (given up), and both ends of the A-B link find it down.
	for _, want := range []string{`"r" timeout: COMPLETE waiting for COMPLETE`, `"r" over: not delivered`, "timeout: succ unreachable after 14s", "timeout: pred unreachable after 14s"} {
		if !slices.Contains(got, want) {
			t.Errorf("honest scenario reported %q, missing %q", got, want)
		}
	}
	onTick := func(node int, add protocol.Action) func(*sim.Network, int, protocol.Event, []protocol.Action) []protocol.Action {
		return func(_ *sim.Network, i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
			if ev.Kind == protocol.EvTick && i == node {
				acts = append(acts, add)
			}
			return acts
		}
	}
	bugs := []struct {
		name, want string
		mutate     func(*sim.Network, int, protocol.Event, []protocol.Action) []protocol.Action
	}{
		{"silence blamed on a live neighbour", "a live neighbour blamed for silence",
			onTick(2, protocol.Action{Kind: protocol.ActTimeout, Timeout: protocol.TimeoutSilence, To: protocol.Pred, After: 10 * time.Second})},
		{"unreachable on an up link", "on an up link blamed as unreachable",
			onTick(2, protocol.Action{Kind: protocol.ActTimeout, Timeout: protocol.TimeoutUnreachable, To: protocol.Pred, After: 10 * time.Second})},
		{"phase timeout early", "phase timeout 1s after the round entered COMPLETE",
			onTick(0, protocol.Action{Kind: protocol.ActTimeout, Timeout: protocol.TimeoutPhase, Round: "r", From: protocol.StateComplete, Wait: protocol.WaitExit, To: protocol.Succ})},
		{"exit wave given up early", "final COMPLETE given up 1s after",
			onTick(1, protocol.Action{Kind: protocol.ActDone, Round: "r", Outcome: protocol.NotDelivered})},
		{"phase timeout twice", "phase timeout twice in one state",
			func(_ *sim.Network, _ int, _ protocol.Event, acts []protocol.Action) []protocol.Action {
				for _, a := range acts {
					if a.Kind == protocol.ActTimeout && a.Timeout == protocol.TimeoutPhase {
						return append(acts, a)
					}
				}
				return acts
			}},
	}
	for _, b := range bugs {
		_, err := timeoutScenario(t, b.mutate)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("seeded bug %q: checker said %v, want an error with %q", b.name, err, b.want)
		}
	}
}
