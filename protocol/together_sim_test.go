package protocol_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
)

// tableSim is one seeded schedule that mixes the features on one chain
// (docs/STEERING.md and docs/UNDO.md, "Features together"): rounds
// opened at every node, tasks that fail, the undo wave (a chain setting,
// on or off for the schedule), approvals at some nodes, holds, pauses,
// cancels and retries at the Head, link drops and restarts from the
// journal. A driver's duties are played as package chainsync does them:
// a failed task is reported as a notice, a restarted node takes an
// interrupted task as done (a cancelled one as ended), steps AlreadyDone
// for the rounds whose task it had done before a retry, approves again
// what it had approved, and takes up its own hold and pause again. The
// Table checker (internal/sim, check_together.go) checks every step.
type tableSim struct {
	seed   uint64
	rng    *rand.Rand
	n      int
	names  []string
	net    *sim.Network
	tab    *sim.Table
	rounds []string
	at     []int64 // per node: its last steering line's At
	held   []bool
	paused bool
	gates  map[[2]string]bool // (node, round) waiting for an approval
	err    error
	// focus, if set, leaves people only that to do ("retry": retries;
	// "cancel": cancels), for the seeded bugs of a rule.
	focus string
	// calm: people act seldom and lines and tasks move more, so that
	// tasks run between the people's acts (more combinations with a
	// running task; see TestSimulateFeaturesTogether for what is left).
	calm   bool
	mutate func(tg *tableSim, node int, ev protocol.Event, acts []protocol.Action) []protocol.Action
}

func newTableSim(seed uint64, mutate func(*tableSim, int, protocol.Event, []protocol.Action) []protocol.Action) *tableSim {
	s := &tableSim{seed: seed, rng: rand.New(rand.NewPCG(seed, 33)), mutate: mutate, gates: map[[2]string]bool{}}
	s.n = 3 + s.rng.IntN(3)
	undo := s.rng.IntN(2) == 0
	approve := make([]bool, s.n)
	for i := range s.n {
		s.names = append(s.names, string(rune('A'+i)))
		approve[i] = s.rng.IntN(4) == 0
	}
	s.net = sim.New(sim.Config{Names: s.names, Machine: func(i int, c *protocol.Config) {
		c.Ordered, c.Extensions, c.Durable, c.Policy = true, true, true, protocol.PolicyWait
		c.Name, c.Self, c.Undo, c.Approve = s.names[i], s.names[i], undo, approve[i]
	}})
	s.tab = sim.NewTable(s.n)
	s.at, s.held = make([]int64, s.n), make([]bool, s.n)
	if mutate != nil {
		s.net.Mutate = func(i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
			return mutate(s, i, ev, acts)
		}
	}
	s.net.Hook = func(i int, ev protocol.Event, acts []protocol.Action, err error) {
		if e := s.tab.Observe(i, ev, acts, err); e != nil && s.err == nil {
			s.err = e
		}
		for _, a := range acts {
			if a.Kind == protocol.ActGate {
				s.gates[[2]string{s.names[i], a.Round}] = true
			}
		}
	}
	for k := range 2 + s.rng.IntN(3) {
		s.rounds = append(s.rounds, fmt.Sprintf("t%d", k))
	}
	return s
}

func (s *tableSim) step(i int, ev protocol.Event) {
	if _, err := s.net.Step(i, ev); err != nil && s.err == nil {
		s.err = fmt.Errorf("node %d: %s: %w", i, sim.DescribeEvent(ev), err)
	}
}

// steer steps node i's own steering line.
func (s *tableSim) steer(i int, what protocol.SteerWhat, round string) error {
	s.at[i]++
	st := protocol.Steer{Origin: s.names[i], At: s.at[i], What: what, HasRound: round != "", Round: round}
	_, err := s.net.Step(i, protocol.Steering(st))
	return err
}

// own is node i's own steering state as its people left it.
func (s *tableSim) own(i int) protocol.SteerWhat {
	switch {
	case s.held[i]:
		return protocol.SteerHold
	case i == 0 && s.paused:
		return protocol.SteerPause
	}
	return protocol.SteerNone
}

// finishTask ends task k: failed, it is reported as a task-failed notice.
func (s *tableSim) finishTask(k int, failed bool) {
	task, _, err := s.net.FinishTask(k, failed)
	if err != nil {
		s.err = fmt.Errorf("node %d: task of %s ended: %w", task.Node, task.Round, err)
		return
	}
	if failed {
		name := s.names[task.Node]
		s.step(task.Node, protocol.Report(protocol.Notice{HasRound: true, Round: task.Round, Kind: protocol.KindTaskFailed, Origin: name, Blamed: name}))
	}
}

// restart crashes node i and starts it again from its journal, doing
// what a driver does after a restart, and brings its links up.
func (s *tableSim) restart(i int) {
	old := s.net.Nodes[i].M
	var taskOK, approved []string
	for _, r := range s.rounds {
		if old.TaskOK(r) {
			taskOK = append(taskOK, r)
		}
		if old.Approved(r) {
			approved = append(approved, r)
		}
	}
	interrupted, err := s.net.Restart(i)
	if err != nil {
		s.err = err
		return
	}
	s.tab.Restarted(i)
	for _, r := range interrupted {
		s.step(i, protocol.TaskDone(r, false)) // --resume-task done (a cancelled task: its end)
	}
	for _, r := range taskOK {
		s.step(i, protocol.AlreadyDone(r))
	}
	for _, r := range approved {
		if st, _ := s.net.Nodes[i].M.State(r); st < protocol.StateStart {
			s.step(i, protocol.Approve(r))
		}
	}
	for _, r := range s.rounds {
		if ph, _, _ := s.net.Nodes[i].M.Undo(r); ph == protocol.PhaseRunning {
			s.net.RerunUndo(i, r)
		}
	}
	s.must(s.steer(i, s.own(i), "")) // its own state, none included, as a driver announces it
	relink(s.net, i)
}

// move makes one random move; false if none is left. In the final phase
// nothing fails, nobody steers, nothing restarts.
func (s *tableSim) move(final bool) bool {
	var cs []func()
	if busy := s.net.Busy(); len(busy) > 0 {
		cs = append(cs, func() {
			if _, _, _, err := s.net.Deliver(busy[s.rng.IntN(len(busy))]); err != nil && s.err == nil {
				s.err = err
			}
		})
	}
	if len(s.net.Tasks) > 0 {
		cs = append(cs, func() { s.finishTask(s.rng.IntN(len(s.net.Tasks)), !final && s.rng.IntN(4) == 0) })
	}
	if len(s.net.Undos) > 0 {
		cs = append(cs, func() {
			fail := !final && s.rng.IntN(8) == 0
			code := 0
			if fail {
				code = 3
			}
			if _, _, err := s.net.FinishUndo(s.rng.IntN(len(s.net.Undos)), fail, code); err != nil && s.err == nil {
				s.err = err
			}
		})
	}
	gates := make([][2]string, 0, len(s.gates))
	for g := range s.gates {
		gates = append(gates, g)
	}
	slices.SortFunc(gates, func(a, b [2]string) int { return cmpPair(a, b) })
	if len(gates) > 0 {
		g := gates[s.rng.IntN(len(gates))]
		i := int(g[0][0] - 'A')
		cs = append(cs, func() {
			delete(s.gates, g)
			ev := protocol.Approve(g[1])
			if !final && s.rng.IntN(4) == 0 {
				ev = protocol.Deny(g[1])
			}
			if _, err := s.net.Step(i, ev); err != nil && s.err == nil && !errorsIsAny(err, protocol.ErrTaskStarted, protocol.ErrUnknownRound) {
				s.err = err
			}
		})
	}
	if !final {
		// People act now and then: a hold or a pause is let go soon
		// after, so that tasks run between them.
		i := s.rng.IntN(s.n)
		if s.focus == "" && (!s.calm || s.held[i] || s.rng.IntN(6) == 0) {
			cs = append(cs, func() { s.held[i] = !s.held[i]; s.must(s.steer(i, s.own(i), "")) })
		}
		if s.focus == "" && (!s.calm || s.paused || s.rng.IntN(10) == 0) {
			cs = append(cs, func() { s.paused = !s.paused; s.must(s.steer(0, s.own(0), "")) })
		}
		r := s.rounds[s.rng.IntN(len(s.rounds))]
		switch st, ok := s.net.Nodes[0].M.State(r); {
		case ok && !st.Terminal() && s.focus != "retry" && (s.focus == "cancel" || !s.calm || s.rng.IntN(4) == 0):
			cs = append(cs, func() { s.must(s.steer(0, protocol.SteerCancel, r)) })
		case ok && st.Terminal() && st != protocol.StateDone && s.focus != "cancel":
			cs = append(cs, func() {
				if err := s.steer(0, protocol.SteerRetry, r); !errorsIsAny(err, protocol.ErrUndoUnderWay, protocol.ErrRoundsInFlight) {
					s.must(err)
				}
			})
		}
		if s.rng.IntN(8) == 0 {
			p := s.rng.IntN(s.n - 1)
			cs = append(cs, func() {
				s.net.SetLink(p, false)
				s.net.SetLink(p, true)
				s.net.Step(p, protocol.LinkUp(protocol.Succ))
				s.net.Step(p+1, protocol.LinkUp(protocol.Pred))
			})
		}
		if s.rng.IntN(16) == 0 {
			cs = append(cs, func() { s.restart(s.rng.IntN(s.n)) })
		}
	}
	if len(cs) == 0 {
		return false
	}
	if progress := min(len(cs), 3); s.calm && !final && s.rng.IntN(2) == 0 {
		cs = cs[:progress] // lines, tasks and undos move more often than people act
	}
	cs[s.rng.IntN(len(cs))]()
	return true
}

func (s *tableSim) must(err error) {
	if err != nil && s.err == nil {
		s.err = err
	}
}

func (s *tableSim) run() error {
	for k, r := range s.rounds {
		for i := range s.n {
			s.step(i, protocol.LocalReady(r))
		}
		for j := 0; j < 20*(k+1) && s.err == nil; j++ {
			s.move(false)
		}
	}
	for k := 0; k < 300 && s.err == nil; k++ {
		s.move(false)
	}
	// The people let the chain go: holds released, the pause ended.
	for i := range s.n {
		if s.own(i) != protocol.SteerNone {
			s.held[i], s.paused = false, s.paused && i != 0
			s.must(s.steer(i, protocol.SteerNone, ""))
		}
	}
	for k := 0; k < 100000 && s.err == nil && s.move(true); k++ {
	}
	if s.err != nil {
		return s.err
	}
	return s.tab.Final(s.net)
}

func cmpPair(a, b [2]string) int {
	if a[0] != b[0] {
		return cmpString(a[0], b[0])
	}
	return cmpString(a[1], b[1])
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// docs/STEERING.md and docs/UNDO.md, "Features together": over seeded
// schedules that mix failed tasks, the undo wave, approvals and
// denials, holds, pauses, cancels and retries at the Head, link drops
// and restarts, every step keeps the table (one task at a time per
// node, no task of a cancelled round, no round ending under a running
// task, undone work run again on a retry and work that stands passed
// on, no record of a started task while a person is waited for), and
// in the end every round is over everywhere, a retried round that
// failed nowhere since done.
//
// Each seed runs twice: with people acting often (holds, pauses,
// cancels and retries between most steps), and calm, where more tasks
// run between their acts. The calm schedules found a fault notice of the
// attempt before a retry ending the retry's round at a node (calm seed
// 102: B's task failed in the first retry, and its notice reached the
// Head after the second); notices now say their attempt
// (docs/PROTOCOL.md, "Fault notices"). Calm seeds beyond 600 found
// three more, fixed and kept below (TestSimulateFeaturesTogetherFound):
// a retry line that ended a round while the task of the attempt before
// still ran (calm seeds 1145, 1230); a successor's START dropped as
// maybe of the attempt before and not sent again when a restarted node
// was asked for the retry line again (734, 869, 929); and a message so
// dropped still noted as received, so that the retry's own START looked
// older, as from a successor that restarted (747, 2072, 2611). Left:
// calm seeds 2019 and 2877, where the Head issued retries that a node
// never saw (a later line of the Head's replaced them while a link was
// down), so that node counts fewer attempts, and its task-failed notice
// reaches the Head as of an attempt before and ends nothing there.
func TestSimulateFeaturesTogether(t *testing.T) {
	runs := uint64(600)
	if testing.Short() {
		runs = 100
	}
	for seed := range runs {
		for _, calm := range []bool{false, true} {
			s := newTableSim(seed, nil)
			s.calm = calm
			if err := s.run(); err != nil {
				t.Fatalf("seed %d (n=%d, calm %v): %v", seed, s.n, calm, err)
			}
		}
	}
	// Retries, cancels and undo waves on every seed: none wrote through
	// a round's read-only view of them.
	if !protocol.SharedRoundMoreIsZero() {
		t.Fatal("a round's retry, cancel or undo state was written through ext (the shared zero one), not own")
	}
}

// TestSimulateFeaturesTogetherFound runs the calm seeds beyond the
// first 600 that found the defects TestSimulateFeaturesTogether names.
func TestSimulateFeaturesTogetherFound(t *testing.T) {
	for _, seed := range []uint64{734, 747, 869, 929, 1145, 1230, 2072, 2611} {
		s := newTableSim(seed, nil)
		s.calm = true
		if err := s.run(); err != nil {
			t.Errorf("calm seed %d (n=%d): %v", seed, s.n, err)
		}
	}
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// runningAt reports whether node i runs the task of round in the
// simulation.
func (s *tableSim) runningAt(i int, round string) bool {
	return slices.ContainsFunc(s.net.Tasks, func(t sim.Task) bool { return t.Node == i && t.Round == round })
}

// cancelArrived returns the round a cancel line that node i took in acts
// is about, "" if none.
func cancelArrived(acts []protocol.Action) string {
	for _, a := range acts {
		if a.Kind == protocol.ActSteer && a.Msg.Steer != nil && a.Msg.Steer.What == protocol.SteerCancel {
			return a.Msg.Steer.Round
		}
	}
	return ""
}

// docs/STEERING.md and docs/UNDO.md, "Features together": a Machine
// broken in the way of each rule of the table is caught by the Table
// checker on some schedule.
func TestSimulateFeaturesTogetherSeededBugs(t *testing.T) {
	bugs := []struct {
		name, want string
		focus      string
		mutate     func(s *tableSim, i int, ev protocol.Event, acts []protocol.Action) []protocol.Action
	}{
		{"a cancel ends the round under its running task", "while this node's task of it runs", "cancel",
			func(s *tableSim, i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
				if r := cancelArrived(acts); r != "" && s.runningAt(i, r) {
					acts = append(acts, protocol.Action{Kind: protocol.ActDone, Round: r, Outcome: protocol.Aborted})
				}
				return acts
			}},
		{"the next task starts beside a cancelled one", "while another task of this node runs", "cancel",
			func(s *tableSim, i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
				if r := cancelArrived(acts); r != "" && s.runningAt(i, r) {
					for _, o := range s.rounds {
						if st, ok := s.net.Nodes[i].M.State(o); o != r && ok && !st.Terminal() {
							return append(acts, protocol.Action{Kind: protocol.ActRunTask, Round: o})
						}
					}
				}
				return acts
			}},
		{"a task of a cancelled round starts", "a task of a cancelled round started", "",
			func(s *tableSim, i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
				if r := cancelArrived(acts); r != "" && len(s.net.Tasks) == 0 {
					return append(acts, protocol.Action{Kind: protocol.ActRunTask, Round: r})
				}
				return acts
			}},
		{"undone work passed on as already done", "the undo wave undid its work", "retry",
			func(s *tableSim, i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
				for k, a := range acts {
					if a.Kind == protocol.ActRunTask && s.record(i, a.Round).Prior.Phase == protocol.PhaseDone {
						acts[k] = protocol.Action{Kind: protocol.ActSkip, Round: a.Round}
					}
				}
				return acts
			}},
		{"work that stands run again", "its work stands here", "retry",
			func(s *tableSim, i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
				for k, a := range acts {
					if a.Kind == protocol.ActSkip {
						acts[k] = protocol.Action{Kind: protocol.ActRunTask, Round: a.Round}
					}
				}
				return acts
			}},
		{"a gate recorded as a started task", "saved round", "",
			func(s *tableSim, i int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
				for k, a := range acts {
					if a.Kind == protocol.ActSave && a.Record.State == protocol.StateWatch && s.net.Nodes[i].M.Gate(a.Round) != protocol.WaitNothing {
						acts[k].Record.Started = true
					}
				}
				return acts
			}},
	}
	for _, bug := range bugs {
		t.Run(bug.name, func(t *testing.T) {
			for seed := range uint64(600) {
				// A calm or focused schedule must keep the table
				// unmutated first (see TestSimulateFeaturesTogether).
				clean := newTableSim(seed, nil)
				clean.focus, clean.calm = bug.focus, true
				if clean.run() != nil {
					continue
				}
				s := newTableSim(seed, bug.mutate)
				s.focus, s.calm = bug.focus, true
				err := s.run()
				if err == nil {
					continue
				}
				if !strings.Contains(err.Error(), bug.want) {
					t.Fatalf("seed %d: caught as %v, want %q", seed, err, bug.want)
				}
				t.Logf("caught at seed %d: %v", seed, err)
				return
			}
			t.Fatalf("not caught in 600 schedules")
		})
	}
}

// record is node i's last saved Record of round (zero if none).
func (s *tableSim) record(i int, round string) protocol.Record {
	for _, rec := range s.net.Nodes[i].Journal {
		if rec.Round == round {
			return rec
		}
	}
	return protocol.Record{}
}
