package protocol_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
)

// Tests of the machine's part in restarts (docs/DESIGN.md, "Restarts and
// durable state"): Config.Durable's ActSave, Restore, and a neighbour that
// restarted without its state (ActPeerRestarted, Violation.Ahead).

// describe formats a Step's outcome completely (records included), so two
// machines can be compared by their reaction to the same event.
func describe(acts []protocol.Action, err error) string {
	var b strings.Builder
	for _, a := range acts {
		fmt.Fprintf(&b, "%s", sim.DescribeAction(a))
		if a.Kind == protocol.ActSave {
			fmt.Fprintf(&b, " %+v", *a.Record)
		}
		b.WriteString("; ")
	}
	if err != nil {
		var v *protocol.Violation
		if errors.As(err, &v) {
			fmt.Fprintf(&b, "violation %+v", *v)
		} else {
			fmt.Fprintf(&b, "error %v", err)
		}
	}
	return b.String()
}

// probes are every event that can concern round id at a node.
func probes(id string) []protocol.Event {
	var evs []protocol.Event
	for _, from := range []protocol.Side{protocol.Pred, protocol.Succ} {
		for _, c := range []protocol.Command{protocol.Ready, protocol.Start, protocol.Complete} {
			evs = append(evs, recv(from, c, id))
		}
		evs = append(evs, protocol.LinkUp(from))
	}
	return append(evs, protocol.LocalReady(id), protocol.TaskDone(id, false), protocol.TaskDone(id, true), protocol.Abort(id))
}

// twin replays what one simulated node lived through since its last
// (re)start: the journal it started from and the events it accepted.
type twin struct {
	cfg    protocol.Config
	base   []protocol.Record
	events []protocol.Event
}

func (tw *twin) machine() *protocol.Machine {
	m := protocol.New(tw.cfg)
	for _, r := range tw.base {
		if err := m.Restore(r); err != nil {
			panic(err)
		}
	}
	for _, ev := range tw.events {
		if _, err := m.Step(ev, nil); err != nil {
			panic(fmt.Sprintf("replaying %s: %v", sim.DescribeEvent(ev), err))
		}
	}
	return m
}

func restored(cfg protocol.Config, journal []protocol.Record) *protocol.Machine {
	m := protocol.New(cfg)
	for _, r := range journal {
		if err := m.Restore(r); err != nil {
			panic(err)
		}
	}
	return m
}

// saveChecker checks every Step of a Durable network: the step's saves
// come first, there is one whenever the round changed, and the record
// describes the round exactly.
type saveChecker struct {
	net   *sim.Network
	twins []twin
	// probe: also check that a machine restored from the journal reacts
	// to every possible next event exactly as the live one (slow).
	probe bool
	// seen collects every record reached, per role.
	seen  map[protocol.Role]map[protocol.Record]bool
	saves int
}

func (sc *saveChecker) setup(net *sim.Network, fail func(error)) {
	sc.net = net
	sc.twins = make([]twin, len(net.Nodes))
	for i, nd := range net.Nodes {
		sc.twins[i].cfg = protocol.Config{Role: nd.Role, Durable: true}
	}
	hook := net.Hook
	net.Hook = func(i int, ev protocol.Event, acts []protocol.Action, err error) {
		hook(i, ev, acts, err)
		if err == nil {
			sc.twins[i].events = append(sc.twins[i].events, ev)
			if e := sc.check(i, ev, acts); e != nil {
				fail(fmt.Errorf("node %d, event %s, actions [%s]: %w", i, sim.DescribeEvent(ev), describe(acts, nil), e))
			}
		}
	}
}

func (sc *saveChecker) restarted(k int) {
	sc.twins[k] = twin{cfg: sc.twins[k].cfg, base: slices.Clone(sc.net.Nodes[k].Journal)}
}

func (sc *saveChecker) check(i int, ev protocol.Event, acts []protocol.Action) error {
	nd := sc.net.Nodes[i]
	var save *protocol.Record
	needSave := false
	for k := range acts {
		a := &acts[k]
		switch a.Kind {
		case protocol.ActSave:
			if k != 0 || save != nil {
				return fmt.Errorf("ActSave at position %d: a step's one save must come first", k)
			}
			save = a.Record
		case protocol.ActSend:
			needSave = needSave || !a.Resend
		case protocol.ActRunTask, protocol.ActState, protocol.ActDone:
			needSave = true
		}
	}
	if ev.Kind == protocol.EvLinkUp {
		if save != nil {
			return errors.New("a link coming up changed a round")
		}
		return nil
	}
	if needSave && save == nil {
		return errors.New("the step acted without saving first")
	}
	if save == nil {
		return nil
	}
	sc.saves++
	rec := *save
	id, _ := ev.RoundOf()
	if rec.Round != id {
		return fmt.Errorf("saved round %q, the event is for %q", rec.Round, id)
	}
	if st, _ := nd.M.State(id); rec.State != st {
		return fmt.Errorf("saved state %v, machine in %v", rec.State, st)
	}
	// What the step did is in the record it saved first.
	for _, a := range acts {
		switch {
		case a.Kind == protocol.ActSend && !a.Resend && a.To == protocol.Pred && rec.LastPred != a.Msg.Cmd,
			a.Kind == protocol.ActSend && !a.Resend && a.To == protocol.Succ && rec.LastSucc != a.Msg.Cmd:
			return fmt.Errorf("sends %v but saved last sent %v/%v", a.Msg, rec.LastPred, rec.LastSucc)
		case a.Kind == protocol.ActRunTask && rec.State != protocol.StateStart:
			return fmt.Errorf("runs its task but saved state %v", rec.State)
		}
	}
	if ev.Kind == protocol.EvRecv {
		last := rec.RecvPred
		if ev.From == protocol.Succ {
			last = rec.RecvSucc
		}
		if last < ev.Msg.Cmd {
			return fmt.Errorf("accepted %v from %v but saved last received %v", ev.Msg, ev.From, last)
		}
	}
	if sc.seen[nd.Role] == nil {
		sc.seen[nd.Role] = map[protocol.Record]bool{}
	}
	sc.seen[nd.Role][rec] = true
	if !sc.probe {
		return nil
	}
	// Exactly: a node restarted from its journal now is the same machine.
	for _, p := range probes(id) {
		live := sc.twins[i].machine()
		back := restored(sc.twins[i].cfg, nd.Journal)
		got, want := describe(back.Step(p, nil)), describe(live.Step(p, nil))
		if got != want {
			return fmt.Errorf("restored from the journal, the node reacts to %s with\n  %s\nbut the live node with\n  %s", sim.DescribeEvent(p), got, want)
		}
	}
	return nil
}

// TestDurableSaves: over random schedules with drops, duplicates and
// crash-restarts, every step of a Durable machine that acts saves first
// (one ActSave, first among the step's actions, before any send or task
// run), the saved record holds what the step did, and a machine restored
// from the journal (the last record of each round) reacts to every
// possible next event exactly as the live machine: the record describes
// the round exactly. Then every record reached is restored on its own
// (Restore round-trips), and the records cover every state of every role.
//
// docs/DESIGN.md, "Restarts and durable state" ("fsync, then act ...
// before the message or task that the step causes").
func TestDurableSaves(t *testing.T) {
	sc := &saveChecker{seen: map[protocol.Role]map[protocol.Record]bool{}}
	schedules, probed := 500, 100
	if testing.Short() {
		schedules, probed = 150, 40
	}
	for seed := uint64(1); seed <= uint64(schedules); seed++ {
		sc.probe = seed <= uint64(probed)
		ext := &schedExt{durable: true, setup: sc.setup, restarted: sc.restarted}
		if res := runScheduleExt(seed, 1+int(seed%5), nil, ext); res.err != nil {
			t.Fatalf("seed %d: %s", seed, res)
		}
	}
	// Restore round-trips every reachable record.
	total := 0
	for role, recs := range sc.seen {
		states := map[protocol.State]bool{}
		for rec := range recs {
			total++
			states[rec.State] = true
			m := protocol.New(protocol.Config{Role: role, Durable: true})
			if err := m.Restore(rec); err != nil {
				t.Fatalf("%v: Restore(%+v): %v", role, rec, err)
			}
			if st, ok := m.State(rec.Round); !ok || st != rec.State {
				t.Fatalf("%v: restored %+v, State = %v %v", role, rec, st, ok)
			}
			// A round done here whose final COMPLETE was not handed over
			// is not over.
			handingOver := rec.State == protocol.StateDone && role.HasPred() && !rec.Delivered
			open := !rec.State.Terminal() || handingOver
			if want := map[bool]int{true: 1, false: 0}[open]; m.Active() != want {
				t.Fatalf("%v: restored %+v, Active = %d, want %d", role, rec, m.Active(), want)
			}
			// The links coming up re-send exactly the recorded last
			// messages of an unfinished round, and save nothing.
			for _, side := range []protocol.Side{protocol.Pred, protocol.Succ} {
				acts := step(t, m, protocol.LinkUp(side))
				last := rec.LastPred
				if side == protocol.Succ {
					last = rec.LastSucc
				}
				var want []string
				if last != 0 && (!rec.State.Terminal() || handingOver && side == protocol.Pred) {
					want = []string{fmt.Sprintf("%v to %v (re-send)", protocol.Message{Cmd: last, Round: rec.Round}, side)}
				}
				if got := sends(acts); !slices.Equal(got, want) || len(acts) != len(want) {
					t.Fatalf("%v: restored %+v, LinkUp(%v) = %v, want %v", role, rec, side, describe(acts, nil), want)
				}
			}
			if err := m.Restore(rec); err == nil {
				t.Fatalf("%v: the same round restored twice without an error", role)
			}
		}
		want := map[protocol.Role][]protocol.State{
			protocol.Single: {protocol.StateStart, protocol.StateDone, protocol.StateFailed},
			protocol.Head:   {protocol.StateReady, protocol.StateStart, protocol.StateComplete, protocol.StateDone, protocol.StateFailed},
			protocol.Middle: {protocol.StateSync, protocol.StateReady, protocol.StateWatch, protocol.StateStart, protocol.StateComplete, protocol.StateDone, protocol.StateFailed},
			protocol.Tail:   {protocol.StateSync, protocol.StateWatch, protocol.StateStart, protocol.StateDone, protocol.StateFailed},
		}[role]
		for _, st := range want {
			if !states[st] {
				t.Errorf("%v: no record in state %v was reached; the schedules are too tame", role, st)
			}
		}
	}
	if len(sc.seen) != 4 {
		t.Errorf("records seen for %d roles, want 4", len(sc.seen))
	}
	t.Logf("%d saves checked; %d distinct records restored", sc.saves, total)
}

// A machine that is not Durable never asks to save.
func TestNotDurableNoSaves(t *testing.T) {
	var acts []protocol.Action
	m := protocol.New(protocol.Config{Role: protocol.Middle})
	for _, ev := range middleTo(protocol.StateDone, "r") {
		acts = append(acts, step(t, m, ev)...)
	}
	if hasKind(acts, protocol.ActSave) {
		t.Fatalf("non-durable machine saved: %s", describe(acts, nil))
	}
}

// docs/DESIGN.md, "Restarts and durable state": what Restore refuses.
func TestRestoreRejects(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Middle, Durable: true})
	for _, rec := range []protocol.Record{
		{Round: "bad id", State: protocol.StateSync},
		{Round: strings.Repeat("x", protocol.MaxRoundLen+1), State: protocol.StateSync},
		{Round: "r", State: 0},
		{Round: "r", State: protocol.StateAborted + 1},
	} {
		if err := m.Restore(rec); err == nil {
			t.Errorf("Restore(%+v) accepted", rec)
		}
	}
	if m.Active() != 0 {
		t.Fatalf("rejected records left %d active rounds", m.Active())
	}
	if err := m.Restore(protocol.Record{Round: "", State: protocol.StateDone, LocalReady: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Step(protocol.LocalReady(""), nil); !errors.Is(err, protocol.ErrRoundFinished) {
		t.Fatalf("LocalReady on a restored finished round: %v, want ErrRoundFinished", err)
	}
	// A restored round in START is an interrupted task: TaskDone resolves it.
	rec := protocol.Record{Round: "t", State: protocol.StateStart, LocalReady: true, PredReady: true, StartRecv: true,
		CompleteRecv: true, LastPred: protocol.Start, LastSucc: protocol.Ready, RecvPred: protocol.Complete, RecvSucc: protocol.Start}
	if err := m.Restore(rec); err != nil {
		t.Fatal(err)
	}
	acts := step(t, m, protocol.TaskDone("t", false))
	if got, want := sends(acts), []string{"COMPLETE t to succ"}; !slices.Equal(got, want) || acts[0].Kind != protocol.ActSave {
		t.Fatalf("TaskDone on a restored START round: %s", describe(acts, nil))
	}
}

// middleTo returns the events that take an intermediate node's round id
// to state st along the draft's path.
func middleTo(st protocol.State, id string) []protocol.Event {
	path := []protocol.Event{
		recv(protocol.Pred, protocol.Ready, id), // SYNC (not locally ready)
		protocol.LocalReady(id),                 // READY
		recv(protocol.Succ, protocol.Start, id), // WATCH
		recv(protocol.Pred, protocol.Complete, id),
		protocol.TaskDone(id, false),               // COMPLETE
		recv(protocol.Succ, protocol.Complete, id), // DONE
	}
	k := map[protocol.State]int{protocol.StateSync: 1, protocol.StateReady: 2, protocol.StateWatch: 3,
		protocol.StateStart: 4, protocol.StateComplete: 5, protocol.StateDone: 6}[st]
	return path[:k]
}

func headTo(st protocol.State, id string) []protocol.Event {
	path := []protocol.Event{
		protocol.LocalReady(id),                 // READY
		recv(protocol.Succ, protocol.Start, id), // START
		protocol.TaskDone(id, false),            // COMPLETE
		recv(protocol.Succ, protocol.Complete, id),
	}
	k := map[protocol.State]int{protocol.StateReady: 1, protocol.StateStart: 2, protocol.StateComplete: 3, protocol.StateDone: 4}[st]
	return path[:k]
}

func tailTo(st protocol.State, id string) []protocol.Event {
	path := []protocol.Event{
		recv(protocol.Pred, protocol.Ready, id), // SYNC
		protocol.LocalReady(id),                 // WATCH
		recv(protocol.Pred, protocol.Complete, id),
		protocol.TaskDone(id, false), // DONE
	}
	k := map[protocol.State]int{protocol.StateSync: 1, protocol.StateWatch: 2, protocol.StateStart: 3, protocol.StateDone: 4}[st]
	return path[:k]
}

func machineAt(t *testing.T, role protocol.Role, durable bool, st protocol.State, ids ...string) *protocol.Machine {
	t.Helper()
	m := protocol.New(protocol.Config{Role: role, Durable: durable})
	for _, id := range ids {
		var evs []protocol.Event
		switch role {
		case protocol.Head:
			evs = headTo(st, id)
		case protocol.Middle:
			evs = middleTo(st, id)
		case protocol.Tail:
			evs = tailTo(st, id)
		}
		for _, ev := range evs {
			step(t, m, ev)
		}
		if got, _ := m.State(id); got != st {
			t.Fatalf("%v round %q: reached %v, want %v", role, id, got, st)
		}
	}
	return m
}

// docs/DESIGN.md, "Restarts and durable state": "A neighbour that sends a
// message older than the last one it sent on that link for that round
// (READY after COMPLETE) has restarted and lost its state. That is
// reported as such ... and never answered". From the predecessor: READY
// after its COMPLETE; from the successor: START after its exit-wave
// COMPLETE. Re-sends to that side for that round stop; other rounds and
// the other side are unaffected.
func TestPeerRestarted(t *testing.T) {
	type tc struct {
		role protocol.Role
		st   protocol.State
		from protocol.Side
		msg  protocol.Command
	}
	var cases []tc
	for _, st := range []protocol.State{protocol.StateStart, protocol.StateComplete, protocol.StateDone} {
		cases = append(cases, tc{protocol.Middle, st, protocol.Pred, protocol.Ready})
	}
	for _, st := range []protocol.State{protocol.StateStart, protocol.StateDone} {
		cases = append(cases, tc{protocol.Tail, st, protocol.Pred, protocol.Ready})
	}
	cases = append(cases, tc{protocol.Middle, protocol.StateDone, protocol.Succ, protocol.Start},
		tc{protocol.Head, protocol.StateDone, protocol.Succ, protocol.Start})
	for _, c := range cases {
		for _, durable := range []bool{false, true} {
			name := fmt.Sprintf("%v/%v/%v-from-%v/durable=%v", c.role, c.st, c.msg, c.from, durable)
			t.Run(name, func(t *testing.T) {
				// Round "x" is the one whose neighbour restarted; round "y"
				// waits in a state that re-sends to both sides.
				m := machineAt(t, c.role, durable, c.st, "x")
				if c.role == protocol.Middle {
					for _, ev := range middleTo(protocol.StateWatch, "y") {
						step(t, m, ev)
					}
				}
				stale := protocol.Message{Cmd: c.msg, Round: "x"}
				for range 2 { // reported each time, answered never
					acts := step(t, m, protocol.Recv(c.from, stale))
					want := protocol.Action{Kind: protocol.ActPeerRestarted, To: c.from, Msg: stale, Round: "x"}
					if len(acts) != 1 || acts[0] != want {
						t.Fatalf("stale %v from %v: %s, want only %s", stale, c.from, describe(acts, nil), sim.DescribeAction(want))
					}
					if st, _ := m.State("x"); st != c.st {
						t.Fatalf("state moved to %v", st)
					}
				}
				// No re-send to that side for that round on reconnect.
				for _, side := range []protocol.Side{protocol.Pred, protocol.Succ} {
					if side == protocol.Pred && !c.role.HasPred() || side == protocol.Succ && !c.role.HasSucc() {
						continue
					}
					for _, s := range sends(step(t, m, protocol.LinkUp(side))) {
						if strings.Contains(s, " x to ") && side == c.from {
							t.Fatalf("re-sent %s to the restarted %v", s, side)
						}
					}
				}
				if c.role == protocol.Middle {
					got := sends(step(t, m, protocol.LinkUp(protocol.Pred)))
					if !slices.Contains(got, "START y to pred (re-send)") {
						t.Fatalf("other round not re-sent: %v", got)
					}
				}
				if c.role == protocol.Middle && c.st == protocol.StateStart && c.from == protocol.Pred {
					// The other side still gets its re-send of "x".
					step(t, m, protocol.TaskDone("x", false))
					got := sends(step(t, m, protocol.LinkUp(protocol.Succ)))
					if !slices.Contains(got, "COMPLETE x to succ (re-send)") {
						t.Fatalf("successor's re-send of x stopped too: %v", got)
					}
				}
			})
		}
	}
}

// Exact duplicates of a neighbour's latest message are not restarts:
// they are no-ops (or, for a DONE node, answered with the final COMPLETE).
func TestPeerRestartedNotForDuplicates(t *testing.T) {
	for _, c := range []struct {
		role protocol.Role
		st   protocol.State
		ev   protocol.Event
	}{
		{protocol.Middle, protocol.StateWatch, recv(protocol.Pred, protocol.Ready, "x")},
		{protocol.Middle, protocol.StateWatch, recv(protocol.Succ, protocol.Start, "x")},
		{protocol.Middle, protocol.StateComplete, recv(protocol.Succ, protocol.Start, "x")},
		{protocol.Middle, protocol.StateDone, recv(protocol.Pred, protocol.Complete, "x")},
		{protocol.Middle, protocol.StateDone, recv(protocol.Succ, protocol.Complete, "x")},
		{protocol.Head, protocol.StateComplete, recv(protocol.Succ, protocol.Start, "x")},
		{protocol.Tail, protocol.StateDone, recv(protocol.Pred, protocol.Complete, "x")},
	} {
		m := machineAt(t, c.role, true, c.st, "x")
		acts := step(t, m, c.ev)
		if hasKind(acts, protocol.ActPeerRestarted) || hasKind(acts, protocol.ActSave) || hasKind(acts, protocol.ActRunTask) {
			t.Errorf("%v in %v, %s: %s", c.role, c.st, sim.DescribeEvent(c.ev), describe(acts, nil))
		}
	}
	// A halted round (task failed) ignores late messages silently.
	m := machineAt(t, protocol.Middle, true, protocol.StateStart, "x")
	step(t, m, protocol.TaskDone("x", true))
	if acts := step(t, m, recv(protocol.Pred, protocol.Ready, "x")); len(acts) != 0 {
		t.Errorf("failed round answered a stale READY: %s", describe(acts, nil))
	}
}

// Violation.Ahead marks a peer that is further along in the round than
// this node, which an honest peer only is if this node lost its state (it
// restarted without a journal); the driver then says this node may have
// restarted without --state-dir. Wrong-way messages are not "ahead".
func TestAheadViolations(t *testing.T) {
	const unknown = protocol.State(0)
	for _, c := range []struct {
		role  protocol.Role
		st    protocol.State // unknown: the round was never seen
		ev    protocol.Event
		ahead bool
	}{
		// The predecessor is further along: its COMPLETE before this node
		// reached WATCH.
		{protocol.Middle, unknown, recv(protocol.Pred, protocol.Complete, "x"), true},
		{protocol.Middle, protocol.StateSync, recv(protocol.Pred, protocol.Complete, "x"), true},
		{protocol.Middle, protocol.StateReady, recv(protocol.Pred, protocol.Complete, "x"), true},
		{protocol.Tail, unknown, recv(protocol.Pred, protocol.Complete, "x"), true},
		{protocol.Tail, protocol.StateSync, recv(protocol.Pred, protocol.Complete, "x"), true},
		// The successor is further along: START before this node sent
		// READY, or the exit wave before this node completed.
		{protocol.Middle, unknown, recv(protocol.Succ, protocol.Start, "x"), true},
		{protocol.Middle, protocol.StateSync, recv(protocol.Succ, protocol.Start, "x"), true},
		{protocol.Head, unknown, recv(protocol.Succ, protocol.Start, "x"), true},
		{protocol.Middle, unknown, recv(protocol.Succ, protocol.Complete, "x"), true},
		{protocol.Middle, protocol.StateSync, recv(protocol.Succ, protocol.Complete, "x"), true},
		{protocol.Middle, protocol.StateReady, recv(protocol.Succ, protocol.Complete, "x"), true},
		{protocol.Middle, protocol.StateWatch, recv(protocol.Succ, protocol.Complete, "x"), true},
		{protocol.Middle, protocol.StateStart, recv(protocol.Succ, protocol.Complete, "x"), true},
		{protocol.Head, unknown, recv(protocol.Succ, protocol.Complete, "x"), true},
		{protocol.Head, protocol.StateReady, recv(protocol.Succ, protocol.Complete, "x"), true},
		{protocol.Head, protocol.StateStart, recv(protocol.Succ, protocol.Complete, "x"), true},
		// Wrong-way messages are plain violations.
		{protocol.Middle, unknown, recv(protocol.Pred, protocol.Start, "x"), false},
		{protocol.Middle, protocol.StateWatch, recv(protocol.Pred, protocol.Start, "x"), false},
		{protocol.Middle, unknown, recv(protocol.Succ, protocol.Ready, "x"), false},
		{protocol.Middle, protocol.StateDone, recv(protocol.Succ, protocol.Ready, "x"), false},
		{protocol.Tail, protocol.StateWatch, recv(protocol.Pred, protocol.Start, "x"), false},
	} {
		name := fmt.Sprintf("%v/%v/%s", c.role, c.st, sim.DescribeEvent(c.ev))
		for _, durable := range []bool{false, true} {
			m := protocol.New(protocol.Config{Role: c.role, Durable: durable})
			if c.st != unknown {
				m = machineAt(t, c.role, durable, c.st, "x")
			}
			acts, err := m.Step(c.ev, nil)
			var v *protocol.Violation
			if !errors.As(err, &v) {
				t.Errorf("%s: %s, want a violation", name, describe(acts, err))
				continue
			}
			if v.Ahead != c.ahead {
				t.Errorf("%s: Ahead = %v, want %v (%v)", name, v.Ahead, c.ahead, err)
			}
			if len(acts) != 0 {
				t.Errorf("%s: a violation with actions %s", name, describe(acts, nil))
			}
			if st, _ := m.State("x"); st != c.st {
				t.Errorf("%s: state moved to %v", name, st)
			}
		}
	}
}
