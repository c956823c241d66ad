package protocol_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
)

// together is a chain on the simulated network for the tests of features
// together (docs/STEERING.md, "Features together"): what each node did,
// in order, as "run R", "skip R", "undo R", "done R OUTCOME".
type together struct {
	t   *testing.T
	net *sim.Network
	log [][]string
}

func newTogether(t *testing.T, names []string, cfg func(i int, c *protocol.Config)) *together {
	tg := &together{t: t, log: make([][]string, len(names))}
	tg.net = sim.New(sim.Config{Names: names, Machine: func(i int, c *protocol.Config) {
		c.Ordered, c.Extensions, c.Durable, c.Name, c.Self = true, true, true, names[i], names[i]
		if cfg != nil {
			cfg(i, c)
		}
	}})
	tg.net.Hook = func(i int, ev protocol.Event, acts []protocol.Action, err error) {
		for _, a := range acts {
			switch a.Kind {
			case protocol.ActRunTask:
				tg.log[i] = append(tg.log[i], "run "+a.Round)
			case protocol.ActSkip:
				tg.log[i] = append(tg.log[i], "skip "+a.Round)
			case protocol.ActRunUndo:
				tg.log[i] = append(tg.log[i], "undo "+a.Round)
			case protocol.ActDone:
				tg.log[i] = append(tg.log[i], "done "+a.Round+" "+a.Outcome.String())
			}
		}
	}
	return tg
}

// drain delivers every line and finishes every task and undo, oldest
// first; fail says which tasks fail (by node and round).
func (tg *together) drain(fail func(node int, round string) bool) {
	tg.t.Helper()
	net := tg.net
	for range 100000 {
		switch {
		case len(net.Busy()) > 0:
			if _, _, _, err := net.Deliver(net.Oldest()); err != nil {
				tg.t.Fatal(err)
			}
		case len(net.Tasks) > 0:
			task := net.Tasks[0]
			if _, _, err := net.FinishTask(0, fail != nil && fail(task.Node, task.Round)); err != nil {
				tg.t.Fatal(err)
			}
		case len(net.Undos) > 0:
			if _, _, err := net.FinishUndo(0, false, 0); err != nil {
				tg.t.Fatal(err)
			}
		default:
			return
		}
	}
	tg.t.Fatal("the chain did not settle")
}

func (tg *together) steer(i int, s protocol.Steer) {
	tg.t.Helper()
	s.Origin = tg.net.Nodes[i].Name
	if _, err := tg.net.Step(i, protocol.Steering(s)); err != nil {
		tg.t.Fatal(err)
	}
}

func (tg *together) want(want [][]string) {
	tg.t.Helper()
	for i := range want {
		if !slices.Equal(tg.log[i], want[i]) {
			tg.t.Errorf("%s did %q, want %q", tg.net.Nodes[i].Name, tg.log[i], want[i])
		}
	}
}

// record is node i's last saved Record of round.
func (tg *together) record(i int, round string) protocol.Record {
	for _, rec := range tg.net.Nodes[i].Journal {
		if rec.Round == round {
			return rec
		}
	}
	tg.t.Fatalf("%s saved no record of %s", tg.net.Nodes[i].Name, round)
	return protocol.Record{}
}

// docs/UNDO.md, "Retry after an undo" (draft section "Protocol
// Operation", phase 3, runs each task in chain order): C's task fails in
// u1, B and A undo their work; a retry of u1 runs the task again at
// every node whose work was undone (A and B are not "already done"),
// then at C and D. The round's outcome is the retry's, and the saved
// records keep the undo (Prior) beside the retry's state.
func TestRetryAfterUndoRunsAgain(t *testing.T) {
	tg := newTogether(t, []string{"A", "B", "C", "D"}, func(i int, c *protocol.Config) { c.Undo = true })
	for i := range 4 {
		tg.net.Step(i, protocol.LocalReady("u1"))
	}
	failed := false
	tg.drain(func(node int, round string) bool {
		if node == 2 && !failed {
			failed = true
			return true
		}
		return false
	})
	tg.steer(0, protocol.Steer{At: 1, What: protocol.SteerRetry, HasRound: true, Round: "u1"})
	tg.drain(nil)
	tg.want([][]string{
		{"run u1", "undo u1", "done u1 aborted", "run u1", "done u1 done"},
		{"run u1", "undo u1", "done u1 aborted", "run u1", "done u1 done"},
		{"run u1", "done u1 task failed", "run u1", "done u1 done"},
		{"done u1 aborted", "run u1", "done u1 done"},
	})
	// A and B keep the undo of their work on record; C and D had none.
	for i, phase := range []protocol.UndoPhase{protocol.PhaseDone, protocol.PhaseDone, protocol.PhaseNone, protocol.PhaseNone} {
		rec := tg.record(i, "u1")
		if rec.State != protocol.StateDone || rec.Retries != 1 || rec.Prior.Phase != phase {
			t.Errorf("%s saved %+v: want DONE after 1 retry, prior undo %v", tg.net.Nodes[i].Name, rec, phase)
		}
		if ph, _, _ := tg.net.Nodes[i].M.Undo("u1"); ph != protocol.PhaseNone {
			t.Errorf("%s: the retry's undo phase is %v, want none (its own)", tg.net.Nodes[i].Name, ph)
		}
	}
	if t.Failed() {
		t.Log(fmt.Sprint(tg.log))
	}
}

// runUntil delivers lines and finishes tasks (oldest first) until node i
// runs the task of round; tasks of other nodes succeed.
func (tg *together) runUntil(i int, round string) {
	tg.t.Helper()
	net := tg.net
	for range 100000 {
		for _, task := range net.Tasks {
			if task.Node == i && task.Round == round {
				return
			}
		}
		switch {
		case len(net.Busy()) > 0:
			if _, _, _, err := net.Deliver(net.Oldest()); err != nil {
				tg.t.Fatal(err)
			}
		case len(net.Tasks) > 0:
			if _, _, err := net.FinishTask(0, false); err != nil {
				tg.t.Fatal(err)
			}
		default:
			tg.t.Fatalf("%s never ran the task of %s", net.Nodes[i].Name, round)
		}
	}
}

// deliver delivers every line, finishing no task.
func (tg *together) deliver() {
	tg.t.Helper()
	for len(tg.net.Busy()) > 0 {
		if _, _, _, err := tg.net.Deliver(tg.net.Oldest()); err != nil {
			tg.t.Fatal(err)
		}
	}
}

// docs/STEERING.md, "Features together" (draft section "Protocol
// Operation", phase 3: one task at a time, in order): the Head cancels
// c1 while B's task of it runs. A and C end c1 at once; B ends it when
// its task ends (aborted, whatever the task did, no error), and B's task
// of c2 starts only then.
func TestCancelWhileTaskRuns(t *testing.T) {
	for _, taskFails := range []bool{false, true} {
		t.Run(fmt.Sprint("task fails ", taskFails), func(t *testing.T) {
			tg := newTogether(t, []string{"A", "B", "C"}, nil)
			for _, r := range []string{"c1", "c2"} {
				for i := range 3 {
					tg.net.Step(i, protocol.LocalReady(r))
				}
			}
			tg.runUntil(1, "c1")
			tg.steer(0, protocol.Steer{At: 1, What: protocol.SteerCancel, HasRound: true, Round: "c1"})
			tg.deliver()
			if st, _ := tg.net.Nodes[1].M.State("c1"); st != protocol.StateStart {
				t.Fatalf("B while its task runs: c1 in %v, want START until the task ends", st)
			}
			if rec := tg.record(1, "c1"); !rec.Cancelled {
				t.Errorf("B saved %+v: want Cancelled", rec)
			}
			for _, task := range tg.net.Tasks {
				if task.Node == 1 && task.Round == "c2" {
					t.Fatal("B started c2's task while c1's still ran")
				}
			}
			k := slices.IndexFunc(tg.net.Tasks, func(task sim.Task) bool { return task.Node == 1 })
			if _, _, err := tg.net.FinishTask(k, taskFails); err != nil {
				t.Fatalf("B's task of c1 ended after the cancel: %v", err)
			}
			tg.drain(nil)
			tg.want([][]string{
				{"run c1", "run c2", "done c1 no exit wave", "done c2 done"}, // A had run c2 before the cancel
				{"run c1", "done c1 aborted", "run c2", "done c2 done"},
				{"done c1 aborted", "run c2", "done c2 done"},
			})
		})
	}
}

// docs/STEERING.md, "Features together": a retry that reaches B while
// B's task of the cancelled round still runs reopens the round without
// ending it under that task, and B's retry waits for the old task's end:
// if it succeeded, B's work is done and the retry passes the round on; if
// it failed, B runs its task again.
func TestRetryWhileCancelledTaskRuns(t *testing.T) {
	for _, oldFails := range []bool{false, true} {
		t.Run(fmt.Sprint("old task fails ", oldFails), func(t *testing.T) {
			tg := newTogether(t, []string{"A", "B", "C"}, nil)
			for i := range 3 {
				tg.net.Step(i, protocol.LocalReady("c1"))
			}
			tg.runUntil(1, "c1")
			tg.steer(0, protocol.Steer{At: 1, What: protocol.SteerCancel, HasRound: true, Round: "c1"})
			tg.steer(0, protocol.Steer{At: 2, What: protocol.SteerRetry, HasRound: true, Round: "c1"})
			tg.deliver()
			if n := len(tg.net.Tasks); n != 1 {
				t.Fatalf("%d tasks running, want B's old one only: %v", n, tg.net.Tasks)
			}
			if _, _, err := tg.net.FinishTask(0, oldFails); err != nil {
				t.Fatalf("B's old task ended: %v", err)
			}
			tg.drain(nil)
			// B's round does not end under its old task: the retry takes
			// it over, and its end decides.
			b := []string{"run c1", "skip c1", "done c1 done"}
			if oldFails {
				b[1] = "run c1"
			}
			tg.want([][]string{
				{"run c1", "done c1 no exit wave", "skip c1", "done c1 done"},
				b,
				{"done c1 aborted", "run c1", "done c1 done"},
			})
		})
	}
}

// docs/STEERING.md, "Features together": B's task of c1 succeeds after
// the Head cancelled c1; a later retry passes c1 on at B (its work is
// done), as it does at A. A restarted B whose journal says its task was
// cancelled while it ran does not run it again (ErrCancelled on Rerun);
// its end ends the round.
func TestCancelledTaskIsDoneForARetry(t *testing.T) {
	tg := newTogether(t, []string{"A", "B", "C"}, nil)
	for i := range 3 {
		tg.net.Step(i, protocol.LocalReady("c1"))
	}
	tg.runUntil(1, "c1")
	tg.steer(0, protocol.Steer{At: 1, What: protocol.SteerCancel, HasRound: true, Round: "c1"})
	tg.deliver()
	rec := tg.record(1, "c1")
	m := protocol.New(protocol.Config{Role: protocol.Middle, Durable: true, Extensions: true, Ordered: true})
	if err := m.Restore(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Step(protocol.Rerun("c1"), nil); !errors.Is(err, protocol.ErrCancelled) {
		t.Errorf("Rerun of a task cancelled while it ran: %v, want ErrCancelled", err)
	}
	if acts, err := m.Step(protocol.TaskDone("c1", false), nil); err != nil || !hasDone(acts, protocol.Aborted) {
		t.Errorf("its end after the restart: %v %v, want the round aborted", acts, err)
	}
	if _, _, err := tg.net.FinishTask(0, false); err != nil {
		t.Fatal(err)
	}
	tg.drain(nil)
	tg.steer(0, protocol.Steer{At: 2, What: protocol.SteerRetry, HasRound: true, Round: "c1"})
	tg.drain(nil)
	tg.want([][]string{
		{"run c1", "done c1 no exit wave", "skip c1", "done c1 done"},
		{"run c1", "done c1 aborted", "skip c1", "done c1 done"},
		{"done c1 aborted", "run c1", "done c1 done"},
	})
}

func hasDone(acts []protocol.Action, o protocol.Outcome) bool {
	return slices.ContainsFunc(acts, func(a protocol.Action) bool { return a.Kind == protocol.ActDone && a.Outcome == o })
}

// docs/UNDO.md, "Features together": the Head cannot retry a round
// whose undo wave has not ended there (ErrUndoUnderWay, nothing sent);
// once the wave's outcome is known it can.
func TestRetryWaitsForTheUndoWave(t *testing.T) {
	tg := newTogether(t, []string{"A", "B", "C"}, func(i int, c *protocol.Config) { c.Undo = true })
	for i := range 3 {
		tg.net.Step(i, protocol.LocalReady("u1"))
	}
	tg.drain(func(node int, round string) bool { return node == 2 })
	tg.log = make([][]string, 3)
	// A retry; C fails again and a new wave starts: stop at the Head's undo.
	tg.steer(0, protocol.Steer{At: 1, What: protocol.SteerRetry, HasRound: true, Round: "u1"})
	for len(tg.net.Undos) == 0 || tg.net.Undos[0].Node != 0 {
		switch {
		case len(tg.net.Busy()) > 0:
			tg.net.Deliver(tg.net.Oldest())
		case len(tg.net.Tasks) > 0:
			tg.net.FinishTask(0, tg.net.Tasks[0].Node == 2)
		case len(tg.net.Undos) > 0:
			tg.net.FinishUndo(0, false, 0)
		default:
			t.Fatal("the Head's undo never started")
		}
	}
	retry := protocol.Steering(protocol.Steer{Origin: "A", At: 2, What: protocol.SteerRetry, HasRound: true, Round: "u1"})
	if acts, err := tg.net.Step(0, retry); !errors.Is(err, protocol.ErrUndoUnderWay) || len(acts) != 0 {
		t.Fatalf("retry during the wave: %v %v, want ErrUndoUnderWay and nothing", acts, err)
	}
	tg.drain(nil)
	if _, err := tg.net.Step(0, retry); err != nil {
		t.Fatalf("retry once the wave ended: %v", err)
	}
	tg.drain(nil)
	if st, _ := tg.net.Nodes[0].M.State("u1"); st != protocol.StateDone {
		t.Fatalf("u1 at the Head: %v, want DONE", st)
	}
}

// docs/STEERING.md, "Features together": C's link is down when the
// Head's cancel of c1 passes B; when it comes back B sends the cancel
// again and C ends c1 too (it would otherwise wait for ever).
func TestCancelReachesALinkThatWasDown(t *testing.T) {
	tg := newTogether(t, []string{"A", "B", "C"}, nil)
	for i := range 3 {
		tg.net.Step(i, protocol.LocalReady("c1"))
	}
	tg.deliver()
	tg.net.SetLink(1, false)
	tg.steer(0, protocol.Steer{At: 1, What: protocol.SteerCancel, HasRound: true, Round: "c1"})
	tg.deliver()
	if st, _ := tg.net.Nodes[2].M.State("c1"); st.Terminal() {
		t.Fatalf("C with its link down: c1 %v", st)
	}
	tg.net.SetLink(1, true)
	tg.net.Step(1, protocol.LinkUp(protocol.Succ))
	tg.net.Step(2, protocol.LinkUp(protocol.Pred))
	tg.deliver()
	if st, _ := tg.net.Nodes[2].M.State("c1"); st != protocol.StateAborted {
		t.Fatalf("C after its link came back: c1 %v, want ABORTED", st)
	}
}

// docs/FAULTS.md, under halt (draft section "Protocol Operation": a
// node's task runs once, in order): C's task fails and its notice halts
// A and B, whose tasks had run already; D's never started. The notice's
// action says so at each node, so the driver's words can be true.
func TestNoticeSaysWhetherTheTaskRan(t *testing.T) {
	tg := newTogether(t, []string{"A", "B", "C", "D"}, nil)
	type seen struct {
		from    protocol.State
		started bool
	}
	got := map[int]seen{}
	hook := tg.net.Hook
	tg.net.Hook = func(i int, ev protocol.Event, acts []protocol.Action, err error) {
		hook(i, ev, acts, err)
		for _, a := range acts {
			if a.Kind == protocol.ActNotice && a.Round == "h1" {
				got[i] = seen{a.From, a.Started}
			}
		}
	}
	for i := range 4 {
		tg.net.Step(i, protocol.LocalReady("h1"))
	}
	tg.runUntil(2, "h1")
	k := slices.IndexFunc(tg.net.Tasks, func(task sim.Task) bool { return task.Node == 2 })
	if _, _, err := tg.net.FinishTask(k, true); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.net.Step(2, protocol.Report(protocol.Notice{HasRound: true, Round: "h1", Kind: protocol.KindTaskFailed, Origin: "C", Blamed: "C"})); err != nil {
		t.Fatal(err)
	}
	tg.drain(nil)
	want := map[int]seen{0: {protocol.StateComplete, true}, 1: {protocol.StateComplete, true}, 3: {protocol.StateWatch, false}}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("%s's notice action: %+v, want %+v", tg.net.Nodes[i].Name, got[i], w)
		}
	}
}

// docs/STEERING.md, "Features together", and docs/PROTOCOL.md, "Fault
// notices": a fault notice says the attempt it is of. C's task fails in
// u1, and the Head cancels and retries u1 before C's notice reaches it: the notice,
// of the attempt before, ends nothing at A when it comes, and the retry
// runs to the end. C's task fails again in a retry of u2: that notice
// carries the retry (1), and ends the round everywhere.
func TestLateNoticeOfTheAttemptBefore(t *testing.T) {
	tg := newTogether(t, []string{"A", "B", "C"}, func(i int, c *protocol.Config) { c.Policy = protocol.PolicyWait })
	var sent []protocol.Notice // the notices C sent
	hook := tg.net.Hook
	tg.net.Hook = func(i int, ev protocol.Event, acts []protocol.Action, err error) {
		hook(i, ev, acts, err)
		for _, a := range acts {
			if i == 2 && a.Kind == protocol.ActSend && a.Msg.Cmd == protocol.FaultNotice {
				sent = append(sent, *a.Msg.Note)
			}
		}
	}
	failC := func(round string) {
		t.Helper()
		tg.runUntil(2, round)
		k := slices.IndexFunc(tg.net.Tasks, func(task sim.Task) bool { return task.Node == 2 })
		if _, _, err := tg.net.FinishTask(k, true); err != nil {
			t.Fatal(err)
		}
		if _, err := tg.net.Step(2, protocol.Report(protocol.Notice{HasRound: true, Round: round, Kind: protocol.KindTaskFailed, Origin: "C", Blamed: "C"})); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		tg.net.Step(i, protocol.LocalReady("u1"))
	}
	failC("u1")
	if len(sent) == 0 || sent[0].Attempt != 0 {
		t.Fatalf("C's notices in the first attempt: %+v, want attempt 0", sent)
	}
	// People at A cancel u1 and retry it while C's notice is on its way.
	tg.steer(0, protocol.Steer{At: 1, What: protocol.SteerCancel, HasRound: true, Round: "u1"})
	tg.steer(0, protocol.Steer{At: 2, What: protocol.SteerRetry, HasRound: true, Round: "u1"})
	tg.drain(nil)
	for i := range 3 {
		if st, _ := tg.net.Nodes[i].M.State("u1"); st != protocol.StateDone {
			t.Errorf("%s: u1 %v after its retry ran everywhere, want DONE (a notice of the attempt before ended it?)", tg.net.Nodes[i].Name, st)
		}
	}

	for i := range 3 {
		tg.net.Step(i, protocol.LocalReady("u2"))
	}
	failC("u2")
	tg.drain(nil)
	tg.steer(0, protocol.Steer{At: 3, What: protocol.SteerRetry, HasRound: true, Round: "u2"})
	sent = nil
	failC("u2")
	if len(sent) == 0 || sent[0].Attempt != 1 {
		t.Fatalf("C's notices in the retry: %+v, want attempt 1", sent)
	}
	tg.drain(nil)
	for i := range 3 {
		if st, _ := tg.net.Nodes[i].M.State("u2"); !st.Terminal() || st == protocol.StateDone {
			t.Errorf("%s: u2 %v after C's task failed in the retry, want it ended, not done", tg.net.Nodes[i].Name, st)
		}
	}
	if t.Failed() {
		t.Log(fmt.Sprint(tg.log))
	}
}
