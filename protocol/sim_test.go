package protocol_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
)

var (
	seedFlag      = flag.Uint64("seed", 0, "replay the random schedule with this seed (printed on failure), with a trace under -v")
	chainLenFlag  = flag.Int("chainlen", 0, "with -seed: force the chain length (as the long-chain tests do)")
	schedulesFlag = flag.Int("schedules", 10000, "number of random schedules TestSimulate runs")
	seedBaseFlag  = flag.Uint64("seedbase", 1, "first seed of TestSimulate; pass another to explore new schedules")
)

// TestSimulate drives real Machines through the real codec over simulated
// links (internal/sim) in thousands of random schedules: random chain
// lengths (1..12), random local-readiness times, random task durations,
// several concurrent named rounds, link drops and restores with re-sends,
// late duplicates, lines split at random points, an occasional failing
// task. A sim.Checker compares every step with a plain reference of the
// draft's guarantees (see its doc), and at the end every round must have
// finished at every node (liveness). Any Violation in these honest runs is
// a failure. A failure prints its seed; replay it with -seed.
//
// Draft: Introduction (the guarantees); Protocol Operation, Phases 1-4;
// docs/DESIGN.md "Roles and connections" ("Reconnects"), State machine, Faults.
func TestSimulate(t *testing.T) {
	if *seedFlag != 0 {
		replay(t, *seedFlag, *chainLenFlag)
		return
	}
	total := *schedulesFlag
	shards := runtime.GOMAXPROCS(0)
	for s := range shards {
		t.Run(fmt.Sprint("shard", s), func(t *testing.T) {
			t.Parallel()
			for i := s; i < total; i += shards {
				seed := *seedBaseFlag + uint64(i)
				if res := runSchedule(seed, 0, nil); res.err != nil {
					t.Fatalf("seed %d: %s\nreplay: go test ./protocol -run TestSimulate -seed %d -v", seed, res, seed)
				}
			}
		})
	}
}

// TestSimulateCrashRestart runs 10,000 more random schedules like
// TestSimulate's, every one with Durable machines and faults, so that
// (almost) every one crashes and restarts nodes: at random moments and
// inside their tasks, each losing its Machine and keeping its journal, an
// interrupted task resumed as done, re-run, or (the task meant to fail)
// failed. The Checker checks every invariant after every step, and after
// each restart that the node is where its neighbours last saw it; every
// round must still finish everywhere, each task once, in chain order.
//
// docs/DESIGN.md, "Restarts and durable state"; draft, Introduction.
func TestSimulateCrashRestart(t *testing.T) {
	if *seedFlag != 0 {
		seed := *seedFlag
		res := runScheduleExt(seed, 2+int(seed%11), func(s string) { t.Log(s) }, &schedExt{durable: true, faults: true})
		t.Logf("seed %d: %s", seed, res)
		if res.err != nil {
			t.Fatalf("seed %d: %v", seed, res.err)
		}
		return
	}
	total := *schedulesFlag
	shards := runtime.GOMAXPROCS(0)
	var mu sync.Mutex
	var crashed, crashes, interrupted int
	for s := range shards {
		t.Run(fmt.Sprint("shard", s), func(t *testing.T) {
			t.Parallel()
			for i := s; i < total; i += shards {
				seed := *seedBaseFlag + uint64(i)
				ext := &schedExt{durable: true, faults: true}
				res := runScheduleExt(seed, 2+int(seed%11), nil, ext)
				if res.err != nil {
					t.Fatalf("seed %d: %s\nreplay: go test ./protocol -run TestSimulateCrashRestart -seed %d -v", seed, res, seed)
				}
				mu.Lock()
				if res.crashes > 0 {
					crashed++
				}
				crashes += res.crashes
				interrupted += res.reruns + res.resumedDone
				mu.Unlock()
			}
		})
	}
	t.Cleanup(func() {
		if t.Failed() || *seedFlag != 0 {
			return
		}
		t.Logf("%d schedules: %d with crash-restarts, %d crash-restarts, %d interrupted tasks resumed", total, crashed, crashes, interrupted)
		if crashed < total*9/10 {
			t.Errorf("only %d of %d schedules crashed a node", crashed, total)
		}
	})
}

// TestSimulateTimeouts runs 10,000 random schedules like
// TestSimulateCrashRestart's (Durable machines, link drops, duplicates,
// crash-restarts) in logical time: every Machine has a phase timeout, an
// exit-wave timeout, heartbeat silence and a connect timeout (random
// values), the schedule moves the clock by random amounts and stops nodes
// (hung processes: they read, write and tick nothing, and their
// neighbours hear no heartbeat from them), and the network applies the
// halt policy to every timeout. The Checker checks every invariant after
// every step, among them that no timeout blames a healthy node (a
// neighbour found silent is hung, one found unreachable has its link
// down, a phase timeout comes once per state and not early); at the end
// every round is over at every node, each task ran at most once and in
// chain order, and a round every node finished passes the end-of-round
// checks. The schedules together must report every kind of timeout.
//
// docs/DESIGN.md, "Time", "Heartbeats", "Reconnects"; draft, Security
// Considerations (a node that never answers).
func TestSimulateTimeouts(t *testing.T) {
	run := func(seed uint64, trace func(string)) schedResult {
		return runScheduleExt(seed, 2+int(seed%7), trace, &schedExt{durable: true, faults: true, timed: true})
	}
	if *seedFlag != 0 {
		res := run(*seedFlag, func(s string) { t.Log(s) })
		t.Logf("seed %d: %s", *seedFlag, res)
		if res.err != nil {
			t.Fatalf("seed %d: %v", *seedFlag, res.err)
		}
		return
	}
	total := *schedulesFlag
	shards := runtime.GOMAXPROCS(0)
	var mu sync.Mutex
	var sum schedResult
	for s := range shards {
		t.Run(fmt.Sprint("shard", s), func(t *testing.T) {
			t.Parallel()
			for i := s; i < total; i += shards {
				seed := *seedBaseFlag + uint64(i)
				res := run(seed, nil)
				if res.err != nil {
					t.Fatalf("seed %d: %s\nreplay: go test ./protocol -run TestSimulateTimeouts -seed %d -v", seed, res, seed)
				}
				mu.Lock()
				sum.hangs += res.hangs
				sum.crashes += res.crashes
				sum.gaveUp += res.gaveUp
				sum.doneEverywhere += res.doneEverywhere
				sum.rounds = append(sum.rounds, res.rounds...)
				for k, c := range res.timeouts {
					sum.timeouts[k] += c
				}
				mu.Unlock()
			}
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		to := sum.timeouts
		t.Logf("%d schedules: %d hangs, %d crash-restarts; timeouts: %d phase, %d silence, %d unreachable; %d final COMPLETEs given up; %d of %d rounds done everywhere",
			total, sum.hangs, sum.crashes, to[protocol.TimeoutPhase], to[protocol.TimeoutSilence], to[protocol.TimeoutUnreachable], sum.gaveUp,
			sum.doneEverywhere, len(sum.rounds))
		if total >= 1000 && (to[protocol.TimeoutPhase] == 0 || to[protocol.TimeoutSilence] == 0 || to[protocol.TimeoutUnreachable] == 0 ||
			sum.gaveUp == 0 || sum.crashes == 0 || sum.doneEverywhere < len(sum.rounds)/20) {
			t.Errorf("schedules too tame: every kind of timeout, a given-up exit wave, a crash and rounds done everywhere despite them must occur")
		}
	})
}

// TestSimulateLongChains runs a few random schedules on 1,000-node chains.
func TestSimulateLongChains(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		if res := runSchedule(seed, 1000, nil); res.err != nil {
			t.Fatalf("seed %d: %s\nreplay: go test ./protocol -run TestSimulate -seed %d -chainlen 1000 -v", seed, res, seed)
		}
	}
}

// TestSimulateOrdered runs random schedules, with faults and (in half of
// them) crash-restarts, of Machines with Config.Ordered, and checks after
// every step that each node passes READY on and runs its tasks in the
// order the Head opened the rounds, whatever the order in which nodes
// become locally ready; and that every round still finishes everywhere.
//
// The project's reading of long-lived chains: with one task at a time a
// node runs its tasks in the order the rounds were opened at the Head, and
// the READY wave carries that order. Draft: Message Types (ROUND-ID),
// Protocol Operation, Phases 1-4.
func TestSimulateOrdered(t *testing.T) {
	total := *schedulesFlag / 2
	if *seedFlag != 0 {
		total = 1
	}
	for i := range total {
		seed := *seedBaseFlag + uint64(i)
		if *seedFlag != 0 {
			seed = *seedFlag
		}
		ext := &schedExt{ordered: true, durable: seed%2 == 0, faults: true, setup: checkOrder}
		var trace func(string)
		if *seedFlag != 0 {
			trace = func(s string) { t.Log(s) }
		}
		if res := runScheduleExt(seed, 1+int(seed%9), trace, ext); res.err != nil {
			t.Fatalf("seed %d: %s\nreplay: go test ./protocol -run TestSimulateOrdered -seed %d -v", seed, res, seed)
		}
	}
}

// checkOrder fails a schedule in which a node sends READY on, or starts a
// task, for a round the Head opened after one it has not yet done so for.
func checkOrder(net *sim.Network, fail func(error)) {
	opened := map[string]int{} // round -> when the Head opened it
	type progress struct{ ready, task int }
	last := make([]progress, len(net.Nodes))
	for i := range last {
		last[i] = progress{-1, -1}
	}
	seen := map[string]bool{}
	hook := net.Hook
	net.Hook = func(node int, ev protocol.Event, acts []protocol.Action, err error) {
		for _, a := range acts {
			if a.Kind == protocol.ActState && a.From == protocol.StateSync && node == 0 {
				if _, ok := opened[a.Round]; !ok {
					opened[a.Round] = len(opened)
				}
			}
			var at *int
			var what string
			switch {
			case a.Kind == protocol.ActState && a.From == protocol.StateSync && a.State == protocol.StateReady:
				at, what = &last[node].ready, "left SYNC"
			case a.Kind == protocol.ActRunTask:
				at, what = &last[node].task, "ran its task"
			default:
				continue
			}
			key := fmt.Sprint(node, what, a.Round)
			if seen[key] {
				continue // a task run again after a restart
			}
			seen[key] = true
			k, ok := opened[a.Round]
			if !ok {
				fail(fmt.Errorf("node %d %s for round %q before the Head opened it", node, what, a.Round))
				continue
			}
			if k < *at {
				fail(fmt.Errorf("node %d %s for round %q (opened %d at the Head) after a round opened later (%d)", node, what, a.Round, k, *at))
			}
			*at = max(*at, k)
		}
		hook(node, ev, acts, err)
	}
}

func replay(t *testing.T, seed uint64, n int) {
	res := runSchedule(seed, n, func(s string) { t.Log(s) })
	t.Logf("seed %d: %s", seed, res)
	if res.err != nil {
		t.Fatalf("seed %d: %v", seed, res.err)
	}
}

// TestSimulateStats makes sure the schedules exercise what they claim to:
// some drop links, some duplicate, some fail a task, some run several
// rounds, some use every chain length.
func TestSimulateStats(t *testing.T) {
	var drops, dups, fails, multi, colon, chunked, steps, sent, lost, crashes, reruns, resumedDone, durable int
	lengths := map[int]bool{}
	for seed := uint64(1); seed <= 500; seed++ {
		res := runSchedule(seed, 0, nil)
		if res.err != nil {
			t.Fatalf("seed %d: %s", seed, res)
		}
		drops += res.drops
		dups += res.dups
		if res.failNode >= 0 {
			fails++
		}
		if len(res.rounds) > 1 {
			multi++
		}
		if res.colon {
			colon++
		}
		if res.chunked {
			chunked++
		}
		lengths[res.n] = true
		crashes += res.crashes
		reruns += res.reruns
		resumedDone += res.resumedDone
		if res.durable {
			durable++
		}
		steps += res.steps
		sent += res.sent
		lost += res.lost
	}
	t.Logf("500 schedules: %d steps, %d messages sent, %d lost on down links, %d drops, %d duplicates, %d failed tasks, %d multi-round, %d durable, %d crash-restarts, %d interrupted tasks re-run, %d taken as done",
		steps, sent, lost, drops, dups, fails, multi, durable, crashes, reruns, resumedDone)
	if drops == 0 || dups == 0 || fails == 0 || multi == 0 || colon == 0 || chunked == 0 || len(lengths) != 12 ||
		durable == 0 || crashes == 0 || reruns == 0 || resumedDone == 0 {
		t.Errorf("schedules too tame: drops %d dups %d fails %d multi-round %d colon %d chunked %d lengths %d durable %d crashes %d reruns %d resumed-done %d",
			drops, dups, fails, multi, colon, chunked, len(lengths), durable, crashes, reruns, resumedDone)
	}
}

type schedResult struct {
	seed          uint64
	n             int
	rounds        []string
	faults, colon bool
	chunked       bool
	failNode      int
	failRound     string
	durable       bool // Machines emit ActSave; the sim keeps each node's journal
	crashes       int  // crash-restarts (durable schedules only)
	reruns        int  // interrupted tasks run again after a restart
	resumedDone   int  // interrupted tasks taken as done (the restart was the task)
	steps         int
	drops, dups   int
	sent, lost    int
	// Timed schedules: hangs, clock advances, and the timeouts reported
	// (by TimeoutKind) and final COMPLETEs given up.
	hangs, advances int
	timeouts        [4]int
	gaveUp          int
	doneEverywhere  int // rounds every node finished normally
	err             error
}

func (r schedResult) String() string {
	s := fmt.Sprintf("n=%d rounds=%q faults=%v colon=%v chunked=%v fail=%d/%q durable=%v crashes=%d reruns=%d steps=%d drops=%d dups=%d sent=%d lost=%d",
		r.n, r.rounds, r.faults, r.colon, r.chunked, r.failNode, r.failRound, r.durable, r.crashes, r.reruns, r.steps, r.drops, r.dups, r.sent, r.lost)
	if r.err != nil {
		s += ": " + r.err.Error()
	}
	return s
}

var roundPool = []string{"", "r1", "round-2.b_C", strings.Repeat("L", protocol.MaxRoundLen), "5"}

type readyEv struct {
	node  int
	round string
}

// runSchedule runs the random schedule of seed on a chain of n nodes (n=0:
// chosen by the seed). trace, if set, gets a line per step.
func runSchedule(seed uint64, n int, trace func(string)) (res schedResult) {
	return runScheduleExt(seed, n, trace, nil)
}

// schedExt lets a test add its own checks to runSchedule's schedules.
type schedExt struct {
	durable bool // force Durable Machines
	ordered bool // Config.Ordered Machines, and no failing task
	faults  bool // force faults (drops, duplicates and, if durable, crash-restarts)
	// setup is called once the Checker is attached; it may wrap net.Hook.
	setup func(net *sim.Network, fail func(error))
	// restarted is called right after node k crashed and restarted, before
	// its interrupted tasks are resolved.
	restarted func(k int)
	// timed: the Machines have every timeout (phase, exit wave, silence,
	// connect), the network applies the halt policy to them, and the
	// schedule advances the clock and hangs nodes (a stopped process).
	timed bool
}

func runScheduleExt(seed uint64, n int, trace func(string), ext *schedExt) (res schedResult) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	res = schedResult{seed: seed, failNode: -1}
	if n == 0 {
		n = 1 + rng.IntN(12)
	}
	res.n = n
	k := 1
	if rng.IntN(3) == 0 {
		k = 2 + rng.IntN(len(roundPool)-1)
	}
	perm := rng.Perm(len(roundPool))
	for _, p := range perm[:k] {
		res.rounds = append(res.rounds, roundPool[p])
	}
	res.faults = n > 1 && (rng.IntN(2) == 0 || ext != nil && ext.faults)
	if rng.IntN(8) == 0 && (ext == nil || !ext.ordered) {
		res.failNode, res.failRound = rng.IntN(n), res.rounds[rng.IntN(k)]
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("n", i)
	}
	res.durable = rng.IntN(2) == 0 || ext != nil && ext.durable
	timed := ext != nil && ext.timed
	var tc protocol.Config // the timeouts of a timed schedule
	if timed {
		tc.PhaseTimeout = time.Duration(10+rng.IntN(50)) * time.Second
		tc.ExitWaveTimeout = time.Duration(5+rng.IntN(30)) * time.Second
		tc.Silence = time.Duration(1+rng.IntN(5)) * 3 * time.Second
		tc.ConnectTimeout = time.Duration(10+rng.IntN(50)) * time.Second
	}
	net := sim.New(sim.Config{Names: names, Machine: func(_ int, pc *protocol.Config) {
		pc.Durable = res.durable
		pc.Ordered = ext != nil && ext.ordered
		pc.PhaseTimeout, pc.ExitWaveTimeout, pc.Silence, pc.ConnectTimeout = tc.PhaseTimeout, tc.ExitWaveTimeout, tc.Silence, tc.ConnectTimeout
	}})
	res.colon = rng.IntN(4) == 0
	net.Colon = res.colon
	if rng.IntN(2) == 0 {
		res.chunked = true
		maxChunk := 1 + rng.IntN(12)
		net.ReadChunk = func() int { return 1 + rng.IntN(maxChunk) }
	}
	chk := sim.NewChecker(net)
	chk.Faults = res.faults
	fail := func(err error) {
		if res.err == nil {
			res.err = err
		}
	}
	chk.Attach(fail)
	var killInTask []int           // nodes to crash while their task runs
	crashesLeft, killsLeft := 0, 0 // crash-restarts at random / inside a task
	{
		// No honest schedule, crash-restarts included (each node keeps
		// its journal), ever shows a neighbour an older message.
		hook := net.Hook
		net.Hook = func(node int, ev protocol.Event, acts []protocol.Action, err error) {
			for _, a := range acts {
				switch {
				case a.Kind == protocol.ActPeerRestarted:
					fail(fmt.Errorf("node %d, event %s: %s in a run where no node lost its state", node, sim.DescribeEvent(ev), sim.DescribeAction(a)))
				case a.Kind == protocol.ActRunTask && killsLeft > len(killInTask) && rng.IntN(2) == 0:
					killInTask = append(killInTask, node)
				}
			}
			hook(node, ev, acts, err)
		}
	}
	if ext != nil && ext.setup != nil {
		ext.setup(net, fail)
	}
	if trace != nil {
		hook := net.Hook
		net.Hook = func(node int, ev protocol.Event, acts []protocol.Action, err error) {
			var as []string
			for _, a := range acts {
				as = append(as, sim.DescribeAction(a))
			}
			trace(fmt.Sprintf("n%d: %s -> [%s] err=%v", node, sim.DescribeEvent(ev), strings.Join(as, "; "), err))
			hook(node, ev, acts, err)
		}
	}
	if timed {
		hook := net.Hook
		net.Hook = func(node int, ev protocol.Event, acts []protocol.Action, err error) {
			for _, a := range acts {
				switch {
				case a.Kind == protocol.ActTimeout:
					res.timeouts[a.Timeout]++
				case a.Kind == protocol.ActDone && a.Outcome == protocol.NotDelivered:
					res.gaveUp++
				}
			}
			hook(node, ev, acts, err)
		}
	}
	check := func(what string, err error) {
		// With timeouts a round may be aborted at a node before it is
		// ready there, or while its task runs: the driver ignores both.
		if err != nil && !(timed && (errors.Is(err, protocol.ErrRoundFinished) || errors.Is(err, protocol.ErrNotRunning))) {
			fail(fmt.Errorf("%s: error in an honest run: %w", what, err))
		}
	}
	hung := func(i int) bool { return timed && net.Hung(i) }

	var pendingReady []readyEv
	for i := range n {
		for _, r := range res.rounds {
			pendingReady = append(pendingReady, readyEv{i, r})
		}
	}
	wDeliver, wReady, wTask := 1+rng.IntN(8), 1+rng.IntN(8), 1+rng.IntN(8)
	wFault := 0
	dropsLeft, dupsLeft := 0, 0
	if res.faults {
		wFault = 1 + rng.IntN(2)
		dropsLeft, dupsLeft = 1+rng.IntN(2*n), 1+rng.IntN(4*n)
		if res.durable {
			crashesLeft, killsLeft = 1+rng.IntN(n), 1+rng.IntN(2)
		}
	}
	var down []int

	restore := func(j int) {
		p := down[j]
		down[j] = down[len(down)-1]
		down = down[:len(down)-1]
		net.SetLink(p, true)
		if trace != nil {
			trace(fmt.Sprintf("link n%d-n%d up", p, p+1))
		}
		first, second := protocol.Event(protocol.LinkUp(protocol.Succ)), protocol.LinkUp(protocol.Pred)
		a, b := p, p+1
		if rng.IntN(2) == 0 {
			a, b, first, second = b, a, second, first
		}
		_, err := net.Step(a, first)
		check("link up", err)
		_, err = net.Step(b, second)
		check("link up", err)
	}

	// crash kills node k (it loses its Machine, keeps its journal) and
	// restarts it at once; its links come up later like dropped ones.
	// docs/DESIGN.md, "Restarts and durable state": a task the restart
	// interrupted is resolved by a resume policy, chosen at random per
	// task: done (the restart was the task: it counts as its one run) or
	// rerun; the task that is meant to fail fails (policy fail).
	crash := func(k int) {
		if hung(k) {
			return
		}
		res.crashes++
		interrupted, err := net.Restart(k)
		check("restart", err)
		if ext != nil && ext.restarted != nil {
			ext.restarted(k)
		}
		if trace != nil {
			trace(fmt.Sprintf("n%d crashed and restarted from its journal; interrupted tasks %q", k, interrupted))
		}
		if err == nil {
			if err := chk.Restarted(k, interrupted); err != nil {
				fail(err)
			}
		}
		for _, p := range []int{k - 1, k} {
			if p >= 0 && p+1 < n && !slices.Contains(down, p) {
				down = append(down, p)
			}
		}
		for _, id := range interrupted {
			switch {
			case k == res.failNode && id == res.failRound:
				_, err := net.Step(k, protocol.TaskDone(id, true))
				check("resume fail", err)
			case rng.IntN(2) == 0:
				_, err := net.Step(k, protocol.TaskDone(id, false))
				check("resume done", err)
				res.resumedDone++
			default:
				if err := chk.Rerun(k, id); err != nil {
					fail(err)
				}
				net.Rerun(k, id)
				res.reruns++
			}
		}
	}

	// What a step may act on (timed schedules): a hung node receives
	// nothing, finishes no task and becomes ready for nothing.
	var links, tasks, readies []int
	candidates := func() {
		links, tasks, readies = links[:0], tasks[:0], readies[:0]
		if !timed {
			return
		}
		for _, l := range net.Busy() {
			if _, to := net.Ends(l); !hung(to) {
				links = append(links, l)
			}
		}
		for k, tk := range net.Tasks {
			if !hung(tk.Node) {
				tasks = append(tasks, k)
			}
		}
		for k, r := range pendingReady {
			if !hung(r.node) {
				readies = append(readies, k)
			}
		}
	}
	hangsLeft, wTime := 0, 0
	if timed {
		hangsLeft, wTime = rng.IntN(3), 1+rng.IntN(2)
	}
	// advance moves the clock by a draw from short to long (past every
	// timeout).
	advance := func() {
		res.advances++
		// Mostly short moves, now and then one past the timeouts.
		d := 100 * time.Millisecond
		switch x := rng.IntN(32); {
		case x == 0:
			d = 40 * time.Second
		case x < 3:
			d = 10 * time.Second
		case x < 12:
			d = time.Second
		}
		net.Advance(d)
		if trace != nil {
			trace(fmt.Sprintf("clock +%v = %v", d, net.Now))
		}
	}

	// honest picks one non-fault step; it reports false at quiescence.
	honest := func(faultsToo bool) bool {
		candidates()
		nl, nr, nt := len(net.Busy()), len(pendingReady), len(net.Tasks)
		if timed {
			nl, nr, nt = len(links), len(readies), len(tasks)
		}
		// pick returns the k-th candidate: from the filtered list in a
		// timed schedule, else k itself.
		pick := func(list []int, k int) int {
			if timed {
				return list[k]
			}
			return k
		}
		wd, wr, wt, wf, wc := 0, 0, 0, 0, 0
		if nl > 0 {
			wd = wDeliver
		}
		if nr > 0 {
			wr = wReady
		}
		if nt > 0 {
			wt = wTask
		}
		if faultsToo && (dropsLeft > 0 || dupsLeft > 0 || crashesLeft > 0 || hangsLeft > 0 || len(down) > 0) {
			wf = wFault
		}
		if faultsToo {
			wc = wTime
		}
		if wd+wr+wt == 0 && (wf == 0 || len(down) == 0) && wc == 0 {
			return false
		}
		res.steps++
		if faultsToo && len(killInTask) > 0 && rng.IntN(2) == 0 {
			// Kill a node inside its task (if it is still running).
			k := killInTask[0]
			killInTask = killInTask[1:]
			if killsLeft > 0 && slices.ContainsFunc(net.Tasks, func(t sim.Task) bool { return t.Node == k }) {
				killsLeft--
				crash(k)
				return true
			}
		}
		switch x := rng.IntN(wd + wr + wt + wf + wc); {
		case x < wd:
			l := pick(links, rng.IntN(nl))
			if !timed {
				l = net.Busy()[l]
			}
			_, _, _, err := net.Deliver(l)
			check("deliver", err)
		case x < wd+wr:
			j := pick(readies, rng.IntN(nr))
			ev := pendingReady[j]
			pendingReady[j] = pendingReady[len(pendingReady)-1]
			pendingReady = pendingReady[:len(pendingReady)-1]
			_, err := net.Step(ev.node, protocol.LocalReady(ev.round))
			check("local ready", err)
		case x < wd+wr+wt:
			j := pick(tasks, rng.IntN(nt))
			tk := net.Tasks[j]
			failed := tk.Node == res.failNode && tk.Round == res.failRound
			_, _, err := net.FinishTask(j, failed)
			check("task done", err)
		case x >= wd+wr+wt+wf:
			advance()
		default:
			switch c := rng.IntN(5); {
			case c == 4 && hangsLeft > 0:
				// Stop a node, or let a stopped one go on.
				k := rng.IntN(n)
				if !net.Hung(k) {
					hangsLeft--
					res.hangs++
				}
				net.Hang(k, !net.Hung(k))
				if trace != nil {
					trace(fmt.Sprintf("n%d hung=%v", k, net.Hung(k)))
				}
			case c == 0 && len(down) > 0:
				j := rng.IntN(len(down))
				if p := down[j]; !hung(p) && !hung(p+1) {
					restore(j)
				}
			case c == 1 && dropsLeft > 0:
				p := rng.IntN(n - 1)
				if net.Up(p) {
					dropsLeft--
					res.drops++
					net.SetLink(p, false)
					down = append(down, p)
					if trace != nil {
						trace(fmt.Sprintf("link n%d-n%d down", p, p+1))
					}
				}
			case c == 2 && dupsLeft > 0:
				l := rng.IntN(net.Links())
				var ok bool
				if d := net.Delivered(l); d > 0 && rng.IntN(4) > 0 {
					ok = net.Replay(l, rng.IntN(d))
				} else {
					ok = net.DupLast(l)
				}
				if ok {
					dupsLeft--
					res.dups++
					if trace != nil {
						from, to := net.Ends(l)
						trace(fmt.Sprintf("duplicate queued on n%d->n%d", from, to))
					}
				}
			case c == 3 && crashesLeft > 0:
				crashesLeft--
				k := rng.IntN(n)
				if nt > 0 && rng.IntN(2) == 0 {
					k = net.Tasks[pick(tasks, rng.IntN(nt))].Node // kill it inside its task
				}
				crash(k)
			}
		}
		return true
	}

	budget := 40*n*k + 200
	for res.err == nil && res.steps < budget && honest(true) {
	}
	// Liveness: every stopped node goes on, every link heals, then run to
	// quiescence without faults; with timeouts, the clock moves on until
	// every round is over everywhere (done, or ended by a timeout).
	for i := range n {
		if hung(i) {
			net.Hang(i, false)
		}
	}
	for res.err == nil && len(down) > 0 {
		restore(0)
	}
	for limit, waits := res.steps+40*n*k+10000, 0; res.err == nil; {
		for res.err == nil && honest(false) {
			if res.steps > limit {
				fail(errors.New("no quiescence after healing (livelock)"))
			}
		}
		if !timed || res.err != nil || !slices.ContainsFunc(net.Nodes, func(nd *sim.Node) bool { return nd.M.Active() > 0 }) {
			break
		}
		if waits++; waits > 20 {
			fail(errors.New("rounds still open after every timeout ran out"))
			break
		}
		net.Advance(tc.PhaseTimeout + tc.ExitWaveTimeout)
	}
	res.sent, res.lost = net.Sent, net.Lost
	if res.err != nil {
		return res
	}
	if net.InFlight() != 0 || len(net.Tasks) != 0 || len(pendingReady) != 0 {
		fail(fmt.Errorf("not quiescent: %d in flight, %d tasks", net.InFlight(), len(net.Tasks)))
		return res
	}
	if timed {
		// Every round is over everywhere; one that every node finished
		// normally passes the end-of-round checks.
		for i, nd := range net.Nodes {
			if got := nd.M.Active(); got != 0 {
				fail(fmt.Errorf("node %d: Active() = %d, want 0", i, got))
			}
		}
		for _, r := range res.rounds {
			if !slices.ContainsFunc(chk.Round(r).Nodes, func(nd sim.NodeRef) bool { return !nd.Done }) {
				res.doneEverywhere++
				fail(chk.CheckDone(r))
			}
		}
		return res
	}
	for _, r := range res.rounds {
		if r == res.failRound && res.failNode >= 0 {
			fail(chk.CheckFailed(r, res.failNode))
		} else {
			fail(chk.CheckDone(r))
		}
	}
	for i, nd := range net.Nodes {
		want := 0
		if res.failNode >= 0 && i != res.failNode {
			want = 1 // the halted round
		}
		if got := nd.M.Active(); got != want {
			fail(fmt.Errorf("node %d: Active() = %d, want %d", i, got, want))
		}
	}
	if !res.faults && net.Sent != 4*(n-1)*k {
		if res.failNode < 0 {
			fail(fmt.Errorf("fault-free run sent %d messages, want 4(n-1) per round = %d", net.Sent, 4*(n-1)*k))
		}
	}
	return res
}
