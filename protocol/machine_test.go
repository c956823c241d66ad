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

// Draft: Example Message Flow (A-B-C-D). With every node locally ready,
// lockstep (global FIFO) delivery and tasks that finish at once, the
// messages come out exactly in the figure's order.
func TestDraftExampleFlow(t *testing.T) {
	net := sim.New(sim.Config{Names: []string{"A", "B", "C", "D"}})
	chk := sim.NewChecker(net)
	chk.Attach(func(err error) { t.Fatal(err) })
	for i := range net.Nodes {
		if _, err := net.Step(i, protocol.LocalReady("")); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var order []string
	for {
		if len(net.Tasks) > 0 {
			tk, _, err := net.FinishTask(0, false)
			if err != nil {
				t.Fatal(err)
			}
			order = append(order, net.Nodes[tk.Node].Name)
			continue
		}
		l := net.Oldest()
		if l < 0 {
			break
		}
		from, to := net.Ends(l)
		_, msg, _, err := net.Deliver(l)
		if err != nil {
			t.Fatal(err)
		}
		abbr := map[protocol.Command]string{protocol.Ready: "RD", protocol.Start: "ST", protocol.Complete: "CM"}[msg.Cmd]
		got = append(got, fmt.Sprintf("%s %s->%s", abbr, net.Nodes[from].Name, net.Nodes[to].Name))
	}
	want := []string{
		"RD A->B", "RD B->C", "RD C->D", // Phase 1
		"ST D->C", "ST C->B", "ST B->A", // Phase 2
		"CM A->B", "CM B->C", "CM C->D", // Phase 3
		"CM D->C", "CM C->B", "CM B->A", // Phase 4
	}
	if !slices.Equal(got, want) {
		t.Errorf("messages:\n got %v\nwant %v", got, want)
	}
	if want := []string{"A", "B", "C", "D"}; !slices.Equal(order, want) {
		t.Errorf("task order %v, want %v", order, want)
	}
	if err := chk.CheckDone(""); err != nil {
		t.Error(err)
	}
}

// step is a test helper: it steps m and fails on error.
func step(t *testing.T, m *protocol.Machine, ev protocol.Event) []protocol.Action {
	t.Helper()
	acts, err := m.Step(ev, nil)
	if err != nil {
		t.Fatalf("Step(%+v): %v", ev, err)
	}
	return acts
}

func sends(acts []protocol.Action) []string {
	var s []string
	for _, a := range acts {
		if a.Kind == protocol.ActSend {
			x := fmt.Sprintf("%v to %v", a.Msg, a.To)
			if a.Resend {
				x += " (re-send)"
			}
			s = append(s, x)
		}
	}
	return s
}

func hasKind(acts []protocol.Action, k protocol.ActionKind) bool {
	return slices.ContainsFunc(acts, func(a protocol.Action) bool { return a.Kind == k })
}

func recv(from protocol.Side, c protocol.Command, round string) protocol.Event {
	return protocol.Recv(from, protocol.Message{Cmd: c, Round: round})
}

// Draft: Topology and Configuration ("inferable from the presence/absence
// of a predecessor/successor").
func TestRoleOf(t *testing.T) {
	for _, tc := range []struct {
		pred, succ bool
		want       protocol.Role
	}{{false, true, protocol.Head}, {true, true, protocol.Middle}, {true, false, protocol.Tail}, {false, false, protocol.Single}} {
		r := protocol.RoleOf(tc.pred, tc.succ)
		if r != tc.want || r.HasPred() != tc.pred || r.HasSucc() != tc.succ {
			t.Errorf("RoleOf(%v, %v) = %v (pred %v succ %v)", tc.pred, tc.succ, r, r.HasPred(), r.HasSucc())
		}
	}
	// A zero Config is a single node: locally ready, it runs its task at
	// once, with no neighbour to wait for.
	acts, err := protocol.New(protocol.Config{}).Step(protocol.LocalReady(""), nil)
	if err != nil || !slices.ContainsFunc(acts, func(a protocol.Action) bool { return a.Kind == protocol.ActRunTask }) {
		t.Errorf("zero Config, locally ready: %v %v; want the task run at once (role single)", acts, err)
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{protocol.Ready.String(), "READY"},
		{protocol.Start.String(), "START"},
		{protocol.Complete.String(), "COMPLETE"},
		{protocol.Command(0).String(), "Command(?)"},
		{protocol.Heartbeat.String(), "HEARTBEAT"},
		{protocol.FaultNotice.String(), "FAULT"},
		{protocol.Command(6).String(), "Command(?)"},
		{protocol.Message{Cmd: protocol.Ready}.String(), "READY"},
		{protocol.Message{Cmd: protocol.Start, Round: "r7"}.String(), "START r7"},
		{protocol.Pred.String(), "pred"},
		{protocol.Succ.String(), "succ"},
		{protocol.Side(0).String(), "Side(?)"},
		{protocol.StateSync.String(), "SYNC"},
		{protocol.StateWatch.String(), "WATCH"},
		{protocol.StateAborted.String(), "ABORTED"},
		{protocol.State(0).String(), "State(?)"},
		{protocol.State(9).String(), "State(?)"},
		{protocol.Head.String(), "head"},
		{protocol.Middle.String(), "middle"},
		{protocol.Tail.String(), "tail"},
		{protocol.Single.String(), "single"},
		{protocol.Role(0).String(), "Role(?)"},
		{protocol.Done.String(), "done"},
		{protocol.TaskFailed.String(), "task failed"},
		{protocol.Aborted.String(), "aborted"},
		{protocol.Outcome(0).String(), "Outcome(?)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// docs/DESIGN.md "Wire format": round-id = 1*128 ( ALPHA / DIGIT / "-" / "_" / "." ).
func TestValidRound(t *testing.T) {
	ok := []string{"", "r", "R-1_2.3", strings.Repeat("a", 128), "0"}
	bad := []string{strings.Repeat("a", 129), "a b", "a:b", "é", "a\x00", "a/b", "a\n"}
	for _, s := range ok {
		if !protocol.ValidRound(s) || !protocol.ValidRound([]byte(s)) {
			t.Errorf("ValidRound(%q) = false", s)
		}
	}
	for _, s := range bad {
		if protocol.ValidRound(s) || protocol.ValidRound([]byte(s)) {
			t.Errorf("ValidRound(%q) = true", s)
		}
	}
}

// Draft: States; docs/DESIGN.md "State machine". The per-role paths through
// the states, one role at a time, with the messages each step sends.
func TestRolePaths(t *testing.T) {
	type stepWant struct {
		ev     protocol.Event
		states []protocol.State // states entered, in order
		sends  []string
		run    bool
	}
	S := func(s ...protocol.State) []protocol.State { return s }
	R := func(s ...string) []string { return s }
	for _, tc := range []struct {
		role  protocol.Role
		steps []stepWant
	}{
		// Draft: Phase 1 (Head "when locally ready, moves from SYNC to
		// READY"); Phase 2 (Head "upon receiving START ... moves directly
		// to START"); Phase 3; Phase 4 ("Head, upon receiving COMPLETE
		// from its successor MAY terminate").
		{protocol.Head, []stepWant{
			{protocol.LocalReady("x"), S(protocol.StateReady), R("READY x to succ"), false},
			{recv(protocol.Succ, protocol.Start, "x"), S(protocol.StateStart), nil, true},
			{protocol.TaskDone("x", false), S(protocol.StateComplete), R("COMPLETE x to succ"), false},
			{recv(protocol.Succ, protocol.Complete, "x"), S(protocol.StateDone), nil, false},
		}},
		// Draft: Phases 1-4 for an intermediate node.
		{protocol.Middle, []stepWant{
			{recv(protocol.Pred, protocol.Ready, "x"), nil, nil, false},
			{protocol.LocalReady("x"), S(protocol.StateReady), R("READY x to succ"), false},
			{recv(protocol.Succ, protocol.Start, "x"), S(protocol.StateWatch), R("START x to pred"), false},
			{recv(protocol.Pred, protocol.Complete, "x"), S(protocol.StateStart), nil, true},
			{protocol.TaskDone("x", false), S(protocol.StateComplete), R("COMPLETE x to succ"), false},
			{recv(protocol.Succ, protocol.Complete, "x"), S(protocol.StateDone), R("COMPLETE x to pred"), false},
			// Over once that COMPLETE is handed to the predecessor.
			{protocol.Delivered("x"), nil, nil, false},
		}},
		// Draft: Phase 2 ("Tail, upon entering READY, sends START to its
		// predecessor and moves to WATCH"); Phase 4 ("Tail, upon
		// entering COMPLETE ... immediately sends COMPLETE").
		{protocol.Tail, []stepWant{
			{protocol.LocalReady("x"), nil, nil, false},
			{recv(protocol.Pred, protocol.Ready, "x"), S(protocol.StateReady, protocol.StateWatch), R("START x to pred"), false},
			{recv(protocol.Pred, protocol.Complete, "x"), S(protocol.StateStart), nil, true},
			{protocol.TaskDone("x", false), S(protocol.StateComplete, protocol.StateDone), R("COMPLETE x to pred"), false},
			{protocol.Delivered("x"), nil, nil, false},
		}},
		// docs/DESIGN.md: "A one-node chain is both: locally ready -> task
		// runs -> done."
		{protocol.Single, []stepWant{
			{protocol.LocalReady("x"), S(protocol.StateReady, protocol.StateStart), nil, true},
			{protocol.TaskDone("x", false), S(protocol.StateComplete, protocol.StateDone), nil, false},
		}},
	} {
		t.Run(tc.role.String(), func(t *testing.T) {
			m := protocol.New(protocol.Config{Role: tc.role})
			for k, sw := range tc.steps {
				acts := step(t, m, sw.ev)
				var states []protocol.State
				for _, a := range acts {
					if a.Kind == protocol.ActState {
						states = append(states, a.State)
					}
				}
				if !slices.Equal(states, sw.states) || !slices.Equal(sends(acts), sw.sends) || hasKind(acts, protocol.ActRunTask) != sw.run {
					t.Errorf("step %d %+v: states %v sends %v run %v; want %v %v %v",
						k, sw.ev, states, sends(acts), hasKind(acts, protocol.ActRunTask), sw.states, sw.sends, sw.run)
				}
			}
			if st, _ := m.State("x"); st != protocol.StateDone || m.Active() != 0 {
				t.Errorf("end state %v, active %d", st, m.Active())
			}
		})
	}
}

// docs/DESIGN.md "Wire format": messages impossible in the receiver's state
// or from that side are violations; no state changes.
func TestViolations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		role  protocol.Role
		setup []protocol.Event
		ev    protocol.Event
	}{
		{"head: message from a predecessor it lacks", protocol.Head, nil, recv(protocol.Pred, protocol.Ready, "")},
		{"tail: message from a successor it lacks", protocol.Tail, nil, recv(protocol.Succ, protocol.Start, "")},
		{"single: anything", protocol.Single, nil, recv(protocol.Pred, protocol.Ready, "")},
		{"bad command", protocol.Middle, nil, recv(protocol.Pred, 0, "")},
		{"bad command 4", protocol.Middle, nil, recv(protocol.Pred, 4, "")},
		{"bad round id", protocol.Middle, nil, recv(protocol.Pred, protocol.Ready, "a b")},
		// Draft: Phase 2: START travels backward.
		{"START from predecessor", protocol.Middle, nil, recv(protocol.Pred, protocol.Start, "")},
		// Draft: Phase 1: READY travels forward.
		{"READY from successor", protocol.Middle, nil, recv(protocol.Succ, protocol.Ready, "")},
		{"START from successor, unknown round", protocol.Middle, nil, recv(protocol.Succ, protocol.Start, "")},
		{"START from successor before READY sent", protocol.Middle,
			[]protocol.Event{recv(protocol.Pred, protocol.Ready, "")}, recv(protocol.Succ, protocol.Start, "")},
		{"COMPLETE from predecessor, unknown round", protocol.Middle, nil, recv(protocol.Pred, protocol.Complete, "")},
		// Draft: Phase 3: "A node in WATCH that receives COMPLETE".
		{"COMPLETE from predecessor before WATCH", protocol.Middle,
			[]protocol.Event{recv(protocol.Pred, protocol.Ready, ""), protocol.LocalReady("")}, recv(protocol.Pred, protocol.Complete, "")},
		{"COMPLETE from successor, unknown round", protocol.Head, nil, recv(protocol.Succ, protocol.Complete, "")},
		// Draft: Phase 4: "An intermediate node in COMPLETE that receives COMPLETE from its successor".
		{"COMPLETE from successor before COMPLETE", protocol.Head,
			[]protocol.Event{protocol.LocalReady(""), recv(protocol.Succ, protocol.Start, "")}, recv(protocol.Succ, protocol.Complete, "")},
		{"READY for a round not configured", protocol.Tail, nil, recv(protocol.Pred, protocol.Ready, "other")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := protocol.New(protocol.Config{Role: tc.role, AcceptRound: func(id string) bool { return id != "other" }})
			for _, ev := range tc.setup {
				step(t, m, ev)
			}
			round := tc.ev.Msg.Round
			before, known := m.State(round)
			active := m.Active()
			out := make([]protocol.Action, 1, 4)
			got, err := m.Step(tc.ev, out)
			var v *protocol.Violation
			if !errors.As(err, &v) {
				t.Fatalf("err = %v, want a *Violation", err)
			}
			if v.From != tc.ev.From || v.Msg != tc.ev.Msg || v.Reason == "" || !strings.Contains(v.Error(), "protocol violation") {
				t.Errorf("violation %+v: %v", v, v)
			}
			if len(got) != 1 || &got[0] != &out[0] {
				t.Errorf("Step returned %v on error, want the given slice", got)
			}
			if after, known2 := m.State(round); after != before || known2 != known || m.Active() != active {
				t.Errorf("state moved: %v/%v -> %v/%v", before, known, after, known2)
			}
		})
	}
}

// docs/DESIGN.md: "Receivers treat an exact duplicate of a message they
// already acted on as a no-op", and after a reconnect each side re-sends
// the last message it sent on the link for every unfinished round.
func TestDuplicatesAndResends(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Middle})
	step(t, m, protocol.LocalReady("b"))
	step(t, m, protocol.LocalReady("a"))
	step(t, m, recv(protocol.Pred, protocol.Ready, "a"))
	step(t, m, recv(protocol.Pred, protocol.Ready, "b"))
	step(t, m, recv(protocol.Pred, protocol.Ready, "c")) // not locally ready: nothing sent
	if acts := step(t, m, recv(protocol.Pred, protocol.Ready, "a")); len(acts) != 0 {
		t.Errorf("duplicate READY: %v", acts)
	}
	// Re-sends come in round-id order, only for rounds that sent something.
	if got, want := sends(step(t, m, protocol.LinkUp(protocol.Succ))), []string{"READY a to succ (re-send)", "READY b to succ (re-send)"}; !slices.Equal(got, want) {
		t.Errorf("LinkUp(succ) sends %v, want %v", got, want)
	}
	if acts := step(t, m, protocol.LinkUp(protocol.Pred)); len(acts) != 0 {
		t.Errorf("LinkUp(pred) before anything was sent to pred: %v", acts)
	}
	step(t, m, recv(protocol.Succ, protocol.Start, "a"))
	if acts := step(t, m, recv(protocol.Succ, protocol.Start, "a")); len(acts) != 0 {
		t.Errorf("duplicate START: %v", acts)
	}
	if got, want := sends(step(t, m, protocol.LinkUp(protocol.Pred))), []string{"START a to pred (re-send)"}; !slices.Equal(got, want) {
		t.Errorf("LinkUp(pred) sends %v, want %v", got, want)
	}
	if acts := step(t, m, recv(protocol.Pred, protocol.Complete, "a")); !hasKind(acts, protocol.ActRunTask) {
		t.Fatalf("COMPLETE in WATCH did not start the task: %v", acts)
	}
	if acts := step(t, m, recv(protocol.Pred, protocol.Complete, "a")); len(acts) != 0 {
		t.Errorf("duplicate COMPLETE while running: %v", acts)
	}
	step(t, m, protocol.TaskDone("a", false))
	step(t, m, recv(protocol.Succ, protocol.Complete, "a"))
	if acts := step(t, m, recv(protocol.Succ, protocol.Complete, "a")); len(acts) != 0 {
		t.Errorf("duplicate exit COMPLETE: %v", acts)
	}
	// Round a is done: a duplicate COMPLETE from the predecessor (which
	// re-sent it after a reconnect) is answered with the exit COMPLETE.
	if got, want := sends(step(t, m, recv(protocol.Pred, protocol.Complete, "a"))), []string{"COMPLETE a to pred (re-send)"}; !slices.Equal(got, want) {
		t.Errorf("COMPLETE to a done round: %v, want %v", got, want)
	}
	// Until that COMPLETE is handed to a live predecessor connection, a
	// new link to the predecessor re-sends it, and the round is not over.
	if got, want := sends(step(t, m, protocol.LinkUp(protocol.Pred))), []string{"COMPLETE a to pred (re-send)"}; !slices.Equal(got, want) {
		t.Errorf("LinkUp(pred) with round a's exit wave not handed over: %v, want %v", got, want)
	}
	if m.Active() != 3 {
		t.Errorf("Active() = %d, want 3 (a handing over, b, c)", m.Active())
	}
	if acts := step(t, m, protocol.Delivered("a")); len(acts) != 1 || acts[0].Kind != protocol.ActDone || acts[0].Outcome != protocol.Done {
		t.Errorf("Delivered: %v, want round a over, done", acts)
	}
	if acts := step(t, m, protocol.Delivered("a")); len(acts) != 0 {
		t.Errorf("Delivered again: %v", acts)
	}
	if got, want := sends(step(t, m, protocol.LinkUp(protocol.Pred))), []string(nil); !slices.Equal(got, want) {
		t.Errorf("LinkUp(pred) after round a finished: %v, want none (b sent nothing to pred)", got)
	}
	if m.Active() != 2 {
		t.Errorf("Active() = %d, want 2 (b, c)", m.Active())
	}
}

// docs/DESIGN.md "Faults": a failed task halts the chain at that node.
func TestTaskFailedHalts(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Middle})
	step(t, m, protocol.LocalReady(""))
	step(t, m, recv(protocol.Pred, protocol.Ready, ""))
	step(t, m, recv(protocol.Succ, protocol.Start, ""))
	step(t, m, recv(protocol.Pred, protocol.Complete, ""))
	acts := step(t, m, protocol.TaskDone("", true))
	if len(sends(acts)) != 0 || !slices.ContainsFunc(acts, func(a protocol.Action) bool {
		return a.Kind == protocol.ActDone && a.Outcome == protocol.TaskFailed
	}) {
		t.Fatalf("failed task: %v", acts)
	}
	// Late and re-sent messages change nothing; LinkUp re-sends nothing.
	for _, ev := range []protocol.Event{
		recv(protocol.Pred, protocol.Complete, ""), recv(protocol.Succ, protocol.Start, ""),
		recv(protocol.Pred, protocol.Ready, ""), recv(protocol.Succ, protocol.Complete, ""),
		protocol.LinkUp(protocol.Pred), protocol.LinkUp(protocol.Succ), protocol.Abort(""),
	} {
		if acts := step(t, m, ev); len(acts) != 0 {
			t.Errorf("%+v after failure: %v", ev, acts)
		}
	}
	if st, _ := m.State(""); st != protocol.StateFailed || m.Active() != 0 {
		t.Errorf("state %v active %d", st, m.Active())
	}
	if _, err := m.Step(protocol.LocalReady(""), nil); !errors.Is(err, protocol.ErrRoundFinished) {
		t.Errorf("LocalReady after failure: %v", err)
	}
}

func TestAbort(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Head})
	if _, err := m.Step(protocol.Abort("x"), nil); !errors.Is(err, protocol.ErrBadRound) {
		t.Errorf("abort of an unknown round: %v", err)
	}
	step(t, m, protocol.LocalReady("x"))
	acts := step(t, m, protocol.Abort("x"))
	if len(acts) != 2 || acts[0].State != protocol.StateAborted || acts[1].Outcome != protocol.Aborted {
		t.Errorf("abort: %v", acts)
	}
	if acts := step(t, m, protocol.Abort("x")); len(acts) != 0 {
		t.Errorf("second abort: %v", acts)
	}
	if acts := step(t, m, recv(protocol.Succ, protocol.Start, "x")); len(acts) != 0 {
		t.Errorf("START after abort: %v", acts)
	}
	if m.Active() != 0 {
		t.Errorf("Active() = %d", m.Active())
	}
}

// Misuse by the caller is an error that is not a Violation and changes
// nothing.
func TestLocalErrors(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Single, MaxRounds: 2})
	for _, tc := range []struct {
		ev   protocol.Event
		want error
	}{
		{protocol.LocalReady("bad id"), protocol.ErrBadRound},
		{protocol.LocalReady(strings.Repeat("x", 129)), protocol.ErrBadRound},
		{protocol.TaskDone("x", false), protocol.ErrNotRunning},
		{protocol.Event{Kind: 0}, nil},
		{protocol.Event{Kind: 99}, nil},
	} {
		out := make([]protocol.Action, 2)
		got, err := m.Step(tc.ev, out)
		var v *protocol.Violation
		if err == nil || errors.As(err, &v) || tc.want != nil && !errors.Is(err, tc.want) || len(got) != 2 {
			t.Errorf("Step(%+v) = %v, %v; want error %v", tc.ev, got, err, tc.want)
		}
	}
	m = protocol.New(protocol.Config{Role: protocol.Head, MaxRounds: 2})
	step(t, m, protocol.LocalReady("a"))
	step(t, m, protocol.LocalReady("b"))
	if _, err := m.Step(protocol.LocalReady("c"), nil); !errors.Is(err, protocol.ErrTooManyRounds) {
		t.Errorf("third round: %v", err)
	}
	if acts := step(t, m, protocol.LocalReady("a")); len(acts) != 0 {
		t.Errorf("LocalReady twice: %v", acts)
	}
	if _, err := m.Step(protocol.TaskDone("a", false), nil); !errors.Is(err, protocol.ErrNotRunning) {
		t.Errorf("TaskDone before START: %v", err)
	}
}

// Config.MaxRounds bounds the rounds a predecessor can open.
func TestMaxRoundsFromPeer(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Tail, MaxRounds: 2})
	step(t, m, recv(protocol.Pred, protocol.Ready, "a"))
	step(t, m, recv(protocol.Pred, protocol.Ready, "b"))
	var v *protocol.Violation
	if _, err := m.Step(recv(protocol.Pred, protocol.Ready, "c"), nil); !errors.As(err, &v) {
		t.Fatalf("third round from peer: %v", err)
	}
	if _, ok := m.State("c"); ok {
		t.Error("rejected round was opened")
	}
	// A known round is not a new one.
	step(t, m, recv(protocol.Pred, protocol.Ready, "a"))
	// Finishing a round makes room.
	step(t, m, protocol.LocalReady("a"))
	step(t, m, recv(protocol.Pred, protocol.Complete, "a"))
	step(t, m, protocol.TaskDone("a", false))
	step(t, m, protocol.Delivered("a"))
	step(t, m, recv(protocol.Pred, protocol.Ready, "c"))
	if m.Active() != 2 {
		t.Errorf("Active() = %d, want 2", m.Active())
	}
}

// Config.KeepFinished bounds the memory of finished rounds; within it,
// duplicates of their messages stay no-ops. Each round pushed out is
// named by an ActForget after the ActDone that pushed it out, so the
// driver forgets what the machine forgets.
func TestKeepFinished(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Single, KeepFinished: 3})
	var forgot []string
	for i := range 5 {
		id := fmt.Sprint("r", i)
		step(t, m, protocol.LocalReady(id))
		acts := step(t, m, protocol.TaskDone(id, false))
		done := slices.IndexFunc(acts, func(a protocol.Action) bool { return a.Kind == protocol.ActDone })
		for j, a := range acts {
			if a.Kind == protocol.ActForget {
				if j < done {
					t.Errorf("%s: ActForget %s before the ActDone", id, a.Round)
				}
				forgot = append(forgot, a.Round)
			}
		}
	}
	if want := []string{"r0", "r1"}; !slices.Equal(forgot, want) {
		t.Errorf("forgotten %v, want %v", forgot, want)
	}
	for i := range 5 {
		_, ok := m.State(fmt.Sprint("r", i))
		if want := i >= 2; ok != want {
			t.Errorf("round r%d remembered = %v, want %v", i, ok, want)
		}
	}
}

// Step appends to out and keeps what was there.
func TestStepAppends(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Head})
	out := []protocol.Action{{Kind: protocol.ActRunTask, Round: "keep"}}
	out, err := m.Step(protocol.LocalReady(""), out)
	if err != nil || len(out) != 4 || out[0].Round != "keep" || out[1].Kind != protocol.ActOpened || out[1].To != 0 ||
		out[2].Kind != protocol.ActState || out[3].Kind != protocol.ActSend {
		t.Errorf("Step = %v, %v", out, err)
	}
}

// Regression (found by FuzzMachine): a round that is halted (task failed or
// aborted) ignores late messages, but START from the predecessor and READY
// from the successor are violations in every state (docs/DESIGN.md, Wire
// format: "READY arriving from the successor's side").
func TestWrongWayInHaltedRound(t *testing.T) {
	for _, halt := range []protocol.Event{protocol.Abort(""), protocol.TaskDone("", true)} {
		m := protocol.New(protocol.Config{Role: protocol.Middle})
		step(t, m, protocol.LocalReady(""))
		step(t, m, recv(protocol.Pred, protocol.Ready, ""))
		step(t, m, recv(protocol.Succ, protocol.Start, ""))
		step(t, m, recv(protocol.Pred, protocol.Complete, ""))
		step(t, m, halt)
		for _, ev := range []protocol.Event{recv(protocol.Pred, protocol.Start, ""), recv(protocol.Succ, protocol.Ready, "")} {
			var v *protocol.Violation
			if _, err := m.Step(ev, nil); !errors.As(err, &v) {
				t.Errorf("after %+v: %+v: err = %v, want a *Violation", halt, ev, err)
			}
		}
		// Late messages that travel the right way stay no-ops.
		for _, ev := range []protocol.Event{recv(protocol.Pred, protocol.Complete, ""), recv(protocol.Succ, protocol.Complete, "")} {
			if acts := step(t, m, ev); len(acts) != 0 {
				t.Errorf("after %+v: %+v: %v", halt, ev, acts)
			}
		}
	}
}

// A Recv from a side that is neither neighbour is the caller's mistake, not
// a peer's violation, and changes nothing.
func TestRecvUnknownSide(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Middle})
	_, err := m.Step(protocol.Recv(0, protocol.Message{Cmd: protocol.Ready}), nil)
	var v *protocol.Violation
	if err == nil || errors.As(err, &v) {
		t.Fatalf("err = %v, want a local (non-Violation) error", err)
	}
	if _, known := m.State(""); known {
		t.Fatal("a round was opened")
	}
}

// A round is opened once, in SYNC (draft "States": every round starts in
// SYNC), and the machine says by whom: ActOpened, To Pred for the
// predecessor's READY, 0 for local readiness; never again after.
func TestOpenedOnce(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Middle})
	opened := func(acts []protocol.Action) (n int, by protocol.Side) {
		for _, a := range acts {
			if a.Kind == protocol.ActOpened {
				n, by = n+1, a.To
			}
		}
		return n, by
	}
	if n, by := opened(step(t, m, recv(protocol.Pred, protocol.Ready, "a"))); n != 1 || by != protocol.Pred {
		t.Errorf("READY a: opened %d times, by %v; want once, by pred", n, by)
	}
	if n, _ := opened(step(t, m, protocol.LocalReady("a"))); n != 0 {
		t.Errorf("LocalReady a after READY: opened %d times", n)
	}
	if n, by := opened(step(t, m, protocol.LocalReady("b"))); n != 1 || by != 0 {
		t.Errorf("LocalReady b: opened %d times, by %v; want once, by this node", n, by)
	}
	if n, _ := opened(step(t, m, recv(protocol.Pred, protocol.Ready, "b"))); n != 0 {
		t.Errorf("READY b after LocalReady: opened %d times", n)
	}
}
