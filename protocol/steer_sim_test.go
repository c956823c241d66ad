package protocol_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
)

// steerSim is one seeded schedule of a chain whose people hold nodes,
// pause it at the Head and approve tasks at nodes with Config.Approve
// (docs/STEERING.md), checked by sim.Checker: no task runs early, out of
// order or at a gated node, and no timeout fires because of a gate. The
// clock moves (by twice the phase timeout at a time) only while some node
// is gated and no line is in flight, when every node knows of the gate;
// otherwise nothing is slow, so any timeout is the gate's fault.
type steerSim struct {
	t       *testing.T
	rng     *rand.Rand
	net     *sim.Network
	chk     *sim.Checker
	n       int
	rounds  []string
	ready   [][]bool
	held    []bool
	paused  bool
	at      []int64
	pending map[[2]int]string // (node, serial) -> round waiting for its approval
	serial  int
	err     error
}

const steerPhase = 5 * time.Second

func newSteerSim(t *testing.T, seed uint64, mutate func(node int, ev protocol.Event, acts []protocol.Action) []protocol.Action) *steerSim {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	n := 2 + rng.IntN(4)
	s := &steerSim{t: t, rng: rng, n: n, held: make([]bool, n), at: make([]int64, n), pending: map[[2]int]string{}}
	for k := range 1 + rng.IntN(3) {
		s.rounds = append(s.rounds, fmt.Sprintf("r%d", k))
	}
	approve := make([]bool, n)
	for i := range approve {
		approve[i] = rng.IntN(3) == 0
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("N%d", i)
	}
	s.net = sim.New(sim.Config{Names: names, Machine: func(i int, c *protocol.Config) {
		c.Ordered, c.Extensions, c.Approve = true, true, approve[i]
		c.PhaseTimeout, c.Silence = steerPhase, 3*time.Second
	}})
	s.net.Mutate = mutate
	s.chk = sim.NewChecker(s.net)
	s.net.Hook = func(i int, ev protocol.Event, acts []protocol.Action, err error) {
		if e := s.chk.Observe(i, ev, acts, err); e != nil && s.err == nil {
			s.err = e
		}
		for _, a := range acts {
			switch a.Kind {
			case protocol.ActTimeout:
				if s.err == nil {
					s.err = fmt.Errorf("node %d: %v timeout while people steer the chain: %s", i, a.Timeout, sim.DescribeAction(a))
				}
			case protocol.ActGate:
				s.serial++
				s.pending[[2]int{i, s.serial}] = a.Round
			}
		}
	}
	s.ready = make([][]bool, n)
	for i := range s.ready {
		s.ready[i] = make([]bool, len(s.rounds))
	}
	return s
}

// gated reports whether some node is held, the chain paused, or a task
// waits for its approval.
func (s *steerSim) gated() bool {
	return s.paused || slices.Contains(s.held, true) || len(s.pending) > 0
}

// own is node i's steering state: the Head's pause says more than its
// hold.
func (s *steerSim) own(i int) protocol.SteerWhat {
	switch {
	case i == 0 && s.paused:
		return protocol.SteerPause
	case s.held[i]:
		return protocol.SteerHold
	}
	return protocol.SteerNone
}

func (s *steerSim) steer(i int, what protocol.SteerWhat) {
	s.at[i]++
	s.step(i, protocol.Steering(protocol.Steer{Origin: fmt.Sprintf("N%d", i), At: s.at[i], What: what}))
}

func (s *steerSim) step(i int, ev protocol.Event) {
	if _, err := s.net.Step(i, ev); err != nil && s.err == nil {
		s.err = fmt.Errorf("node %d: %s: %v", i, sim.DescribeEvent(ev), err)
	}
}

// approveOne approves a task waiting for its approval (a random one).
func (s *steerSim) approveOne() {
	keys := make([][2]int, 0, len(s.pending))
	for k := range s.pending {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]int) int { return a[1] - b[1] })
	k := keys[s.rng.IntN(len(keys))]
	round := s.pending[k]
	delete(s.pending, k)
	s.step(k[0], protocol.Approve(round))
}

// move makes one random move; false if none is left.
func (s *steerSim) move(final bool) bool {
	type choice func()
	var cs []choice
	if busy := s.net.Busy(); len(busy) > 0 {
		cs = append(cs, func() {
			l := busy[s.rng.IntN(len(busy))]
			if _, _, _, err := s.net.Deliver(l); err != nil && s.err == nil {
				s.err = err
			}
		})
	}
	if len(s.net.Tasks) > 0 {
		cs = append(cs, func() {
			if _, _, err := s.net.FinishTask(s.rng.IntN(len(s.net.Tasks)), false); err != nil && s.err == nil {
				s.err = err
			}
		})
	}
	for i := range s.n {
		for k, r := range s.rounds {
			if !s.ready[i][k] && (i > 0 || k == 0 || s.ready[0][k-1]) {
				cs = append(cs, func() { s.ready[i][k] = true; s.step(i, protocol.LocalReady(r)) })
			}
		}
	}
	if len(s.pending) > 0 {
		cs = append(cs, s.approveOne)
	}
	if !final {
		i := s.rng.IntN(s.n)
		cs = append(cs, func() { s.held[i] = !s.held[i]; s.steer(i, s.own(i)) })
		cs = append(cs, func() { s.paused = !s.paused; s.steer(0, s.own(0)) })
		if s.gated() && len(s.net.Busy()) == 0 {
			cs = append(cs, func() { s.net.Advance(2 * steerPhase) })
		}
	}
	if len(cs) == 0 {
		return false
	}
	cs[s.rng.IntN(len(cs))]()
	return true
}

func (s *steerSim) run() error {
	for k := 0; k < 400 && s.err == nil; k++ {
		s.move(false)
	}
	// The people let the chain go: every hold released, the pause ended,
	// every approval given as it is asked for.
	for i := range s.n {
		if s.own(i) != protocol.SteerNone {
			s.held[i], s.paused = false, s.paused && i != 0
			s.steer(i, protocol.SteerNone)
		}
	}
	for k := 0; k < 100000 && s.err == nil && s.move(true); k++ {
	}
	if s.err != nil {
		return s.err
	}
	for _, r := range s.rounds {
		if err := s.chk.CheckDone(r); err != nil {
			return err
		}
	}
	return nil
}

// docs/STEERING.md, "What a hold or an approval wait does": over seeded
// schedules of holds, pauses and approvals, no task runs early, out of
// order or at a gated node, no timeout fires anywhere while a person is
// waited for, and once released every round completes.
func TestSimulateSteering(t *testing.T) {
	runs := 400
	if testing.Short() {
		runs = 100
	}
	for seed := range uint64(runs) {
		if err := newSteerSim(t, seed, nil).run(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// The checks above catch seeded bugs: a driver that loses the steering
// lines (the other nodes' phase timeouts then fire during a hold), and a
// machine that starts a task at its gate (at a held node, or before the
// approval).
func TestSimulateSteeringSeededBugs(t *testing.T) {
	bugs := map[string]func(node int, ev protocol.Event, acts []protocol.Action) []protocol.Action{
		"steering lines lost": func(_ int, _ protocol.Event, acts []protocol.Action) []protocol.Action {
			return slices.DeleteFunc(acts, func(a protocol.Action) bool {
				return a.Kind == protocol.ActSend && a.Msg.Cmd == protocol.SteerLine
			})
		},
		"task started at the gate": func(_ int, _ protocol.Event, acts []protocol.Action) []protocol.Action {
			for _, a := range acts {
				if a.Kind == protocol.ActGate {
					return append(acts, protocol.Action{Kind: protocol.ActRunTask, Round: a.Round})
				}
			}
			return acts
		},
		"task started at a held node": func(node int, ev protocol.Event, acts []protocol.Action) []protocol.Action {
			if ev.Kind == protocol.EvRecv && ev.Msg.Cmd == protocol.Complete && ev.From == protocol.Pred && !hasKind(acts, protocol.ActRunTask) &&
				!slices.ContainsFunc(acts, func(a protocol.Action) bool { return a.Kind == protocol.ActGate }) {
				return append(acts, protocol.Action{Kind: protocol.ActRunTask, Round: ev.Msg.Round})
			}
			return acts
		},
	}
	for name, bug := range bugs {
		caught := 0
		for seed := range uint64(200) {
			if newSteerSim(t, seed, bug).run() != nil {
				caught++
			}
		}
		if caught == 0 {
			t.Errorf("seeded bug %q: no schedule of 200 caught it", name)
		}
		t.Logf("seeded bug %q: caught by %d of 200 schedules", name, caught)
	}
}
