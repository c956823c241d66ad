package dashboard

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/status"
)

// finish marks round id ended at node i of nodes with status st.
func finish(nodes []status.Node, i int, id, st, errText string, at time.Time) {
	d := nodes[i].Doc
	d.Rounds = slices.DeleteFunc(d.Rounds, func(r status.Round) bool { return r.Round == id })
	d.Finished = append(d.Finished, status.Finished{Round: id, Status: st, Opened: at.Add(-time.Second), Ended: at, Error: errText})
}

func ladderText(ms []Msg) string {
	var b []string
	for _, m := range ms {
		b = append(b, fmt.Sprintf("%d:%d>%d:%s", m.Wave, m.From, m.To, m.Cmd))
	}
	return strings.Join(b, " ")
}

// The ladder read from the nodes' states is the draft's "Example Message
// Flow (A-B-C-D)": READY forward, START back, COMPLETE forward as each
// task ends, COMPLETE back as each node exits; 4(n-1) = 12 messages.
func TestLadderIsTheDraftsFigure(t *testing.T) {
	tr := newTracker("", "")
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	steps := [][]string{
		{"READY", "READY", "READY", "SYNC"},     // Phase 1 up to D
		{"START", "WATCH", "WATCH", "WATCH"},    // Phase 2: D entered READY, START back to A
		{"COMPLETE", "START", "WATCH", "WATCH"}, // Phase 3: A done, B runs
		{"COMPLETE", "COMPLETE", "COMPLETE", "START"},
		{"COMPLETE", "COMPLETE", "COMPLETE", "COMPLETE"}, // D done: Phase 4 begins
	}
	var v View
	for k, st := range steps {
		v = tr.update(chainDocs(t0.Add(time.Duration(k)*time.Second), st...), t0.Add(time.Duration(k)*time.Second))
	}
	// The exit wave: D, C, B end the round in turn, then A.
	nodes := chainDocs(t0.Add(6*time.Second), "COMPLETE", "COMPLETE", "COMPLETE", "COMPLETE")
	for i := 3; i >= 0; i-- {
		finish(nodes, i, "r1", "done", "", t0.Add(6*time.Second))
	}
	v = tr.update(nodes, t0.Add(6*time.Second))
	want := "1:0>1:READY 1:1>2:READY 1:2>3:READY 2:3>2:START 2:2>1:START 2:1>0:START " +
		"3:0>1:COMPLETE 3:1>2:COMPLETE 3:2>3:COMPLETE 4:3>2:COMPLETE 4:2>1:COMPLETE 4:1>0:COMPLETE"
	if len(v.Grid.Rows) != 1 {
		t.Fatalf("grid rows %d, want 1", len(v.Grid.Rows))
	}
	row := v.Grid.Rows[0]
	if row.Msgs != 12 {
		t.Fatalf("the row says its ladder has %d messages, want 12", row.Msgs)
	}
	if got := ladderText(tr.ladders["r1"]); got != want {
		t.Fatalf("ladder:\n got %s\nwant %s", got, want)
	}
	if row.Outcome != "done" {
		t.Fatalf("outcome %q", row.Outcome)
	}
	// B's task: seen entering START at 2s and COMPLETE at 3s.
	if c := row.Cells[1]; c.Outcome != "done" || c.Task != "1s" {
		t.Fatalf("B's cell %+v, want done in 1s", c)
	}
}

// A round whose task failed at C (the draft's switch stack, switch 3
// fails): A and B ran theirs (tasks run in chain order), C failed, D was
// not reached; the row says where and why, and its undo outcome.
func TestGridFailedRound(t *testing.T) {
	tr := newTracker("A", "ann")
	t0 := time.Now()
	tr.update(chainDocs(t0, "WATCH", "WATCH", "WATCH", "WATCH"), t0)
	nodes := chainDocs(t0.Add(time.Second))
	undo := "failed at C (task exited 1); undone by B, A"
	for i, st := range []string{"task failed", "task failed", "task failed", "fault"} {
		finish(nodes, i, "r1", st, "C's task failed", t0.Add(time.Second))
		nodes[i].Doc.Finished[0].Undo = undo
	}
	nodes[2].Doc.Faults = []status.Fault{{Kind: "task-failed", Round: "r1", Time: t0, Error: "task exited 1"}}
	nodes[3].Doc.Faults = []status.Fault{{Kind: "chain-fault", Round: "r1", Time: t0, Error: "C reported task-failed"}}
	v := tr.update(nodes, t0.Add(time.Second))
	row := v.Grid.Rows[0]
	var got []string
	for _, c := range row.Cells {
		got = append(got, c.Outcome)
	}
	if want := []string{"undone", "undone", "failed", "not-reached"}; !slices.Equal(got, want) {
		t.Fatalf("cells %v, want %v", got, want)
	}
	if p := v.Steer; p == nil || !p.Head || p.Node != "A" || !slices.Equal(p.Ops, []string{"hold", "release", "approve", "deny", "pause", "resume", "cancel", "open", "retry"}) {
		t.Fatalf("the Head's panel: %+v", p)
	}
	if row.Outcome != "undone" || !row.Retry {
		t.Fatalf("row %q retry %t, want undone and a retry button at the Head", row.Outcome, row.Retry)
	}
	if !slices.ContainsFunc(row.Text, func(s string) bool { return strings.HasPrefix(s, "failed at C (task-failed)") }) ||
		!slices.Contains(row.Text, undo) {
		t.Fatalf("row text %q", row.Text)
	}
}

// Who approved a round is in its cell at the node that approved it, with
// the reason, as the node's status tells it (the draft's Error Handling:
// organisations that handle faults by people).
func TestGridShowsWhoApproved(t *testing.T) {
	tr := newTracker("", "")
	t0 := time.Now()
	nodes := chainDocs(t0, "COMPLETE", "COMPLETE", "START", "WATCH")
	id := "r1"
	nodes[2].Doc.Steering = []status.Steer{{Node: "C", Here: true, What: "approved", Round: &id, Since: t0, By: "ann",
		Reason: "<b>ok</b>", Text: "approved at C (round r1) at 10:00 (<b>ok</b>), by ann"}}
	v := tr.update(nodes, t0)
	if c := v.Grid.Rows[0].Cells[2]; c.Note != "approved at C by ann (<b>ok</b>)" {
		t.Fatalf("C's cell note %q", c.Note)
	}
	if !slices.Contains(v.Events, "approved at C (round r1) at 10:00 (<b>ok</b>), by ann") {
		t.Fatalf("events %q", v.Events)
	}
}

// A node that does not answer keeps its box, says so and since when, and
// is named after what its neighbours call it; when it answers again the
// box is back. A silence fault that is gone from a node's list is shown
// as cleared. (The draft's Error Handling: a switch that never comes
// back; a hung node's silence.)
func TestNodeNotAnsweringAndFaultCleared(t *testing.T) {
	tr := newTracker("", "")
	t0 := time.Now()
	nodes := chainDocs(t0)
	nodes[1].Doc, nodes[1].Err = nil, errors.New("connection refused")
	nodes[0].Doc.Faults = []status.Fault{{Kind: "peer-silent", Peer: "B", Side: "succ", Round: "r1", Time: t0, Error: "B sent nothing"}}
	v := tr.update(nodes, t0)
	b := v.Nodes[1]
	if b.Answers || b.Label != "B" || b.Error != "connection refused" || !b.Since.Equal(t0) {
		t.Fatalf("B's box %+v", b)
	}
	if f := v.Nodes[0].Faults; len(f) != 1 || f[0].Blames != "B" || !f[0].Cleared.IsZero() {
		t.Fatalf("A's faults %+v", f)
	}
	nodes = chainDocs(t0.Add(time.Second))
	v = tr.update(nodes, t0.Add(time.Second))
	if !v.Nodes[1].Answers {
		t.Fatal("B still shown as not answering")
	}
	if f := v.Nodes[0].Faults; len(f) != 1 || !f[0].Cleared.Equal(t0.Add(time.Second)) {
		t.Fatalf("A's fault not shown cleared: %+v", f)
	}
}

// With 1,000 rounds the view carries the newest GridRows, newest first,
// and says how many are hidden; the tracker forgets beyond keepRounds.
// (The draft's ROUND-ID: many rounds on the same chain.)
func TestGridKeepsNewestRows(t *testing.T) {
	tr := newTracker("", "")
	t0 := time.Now()
	nodes := chainDocs(t0)
	for k := range 1000 {
		for i := range nodes {
			nodes[i].Doc.Finished = []status.Finished{{Round: fmt.Sprintf("r%04d", k), Status: "done", Ended: t0}}
		}
		tr.update(nodes, t0.Add(time.Duration(k)*time.Millisecond))
	}
	v := tr.update(nodes, t0.Add(time.Second))
	if len(v.Grid.Rows) != GridRows || v.Grid.Hidden != 1000-GridRows {
		t.Fatalf("%d rows, %d hidden; want %d and %d", len(v.Grid.Rows), v.Grid.Hidden, GridRows, 1000-GridRows)
	}
	if v.Grid.Rows[0].Round != "r0999" || v.Grid.Rows[GridRows-1].Round != fmt.Sprintf("r%04d", 1000-GridRows) {
		t.Fatalf("rows from %s to %s, want newest first", v.Grid.Rows[0].Round, v.Grid.Rows[GridRows-1].Round)
	}
	for k := 1000; k < keepRounds+500; k++ {
		tr.round(fmt.Sprintf("r%04d", k), t0)
	}
	if len(tr.rounds) != keepRounds || tr.dropped != 500 {
		t.Fatalf("tracker keeps %d rounds, dropped %d", len(tr.rounds), tr.dropped)
	}
}

// The undo wave's outcome names the nodes that undid their task (the
// draft's Error Handling: preserving or resetting progress).
func TestUndoneBy(t *testing.T) {
	u := "failed at C (task exited 1); undone by B, A"
	if !undoneBy(u, "A") || !undoneBy(u, "B") || undoneBy(u, "C") || undoneBy("", "A") {
		t.Fatal("undoneBy misreads the undo outcome")
	}
}

// A retried round (chainsync open --retry) runs again under its own id:
// once its nodes show it in flight again, its row follows the new run,
// and the old run's failure is gone from it when the retry is done.
// (The draft's Error Handling: only the faulty node reset, progress kept.)
func TestGridFollowsARetry(t *testing.T) {
	tr := newTracker("", "")
	t0 := time.Now()
	nodes := chainDocs(t0)
	for i, st := range []string{"task failed", "task failed", "task failed", "fault"} {
		finish(nodes, i, "r1", st, "C's task failed", t0)
	}
	nodes[2].Doc.Faults = []status.Fault{{Kind: "task-failed", Round: "r1", Time: t0, Error: "task exited 1"}}
	if v := tr.update(nodes, t0); v.Grid.Rows[0].Outcome != "failed" {
		t.Fatalf("before the retry: %q", v.Grid.Rows[0].Outcome)
	}
	t1 := t0.Add(time.Second)
	retry := chainDocs(t1, "COMPLETE", "COMPLETE", "START", "WATCH")
	for i := range retry {
		retry[i].Doc.Finished, retry[i].Doc.Faults = nodes[i].Doc.Finished, nodes[i].Doc.Faults
	}
	if v := tr.update(retry, t1); v.Grid.Rows[0].Outcome != "in flight" {
		t.Fatalf("during the retry: %q", v.Grid.Rows[0].Outcome)
	}
	t2 := t1.Add(time.Second)
	done := chainDocs(t2)
	for i := range done {
		done[i].Doc.Finished, done[i].Doc.Faults = slices.Clone(nodes[i].Doc.Finished), nodes[i].Doc.Faults
		finish(done, i, "r1", "done", "", t2)
	}
	v := tr.update(done, t2)
	row := v.Grid.Rows[0]
	if row.Outcome != "done" || len(v.Grid.Rows) != 1 || len(row.Text) != 0 {
		t.Fatalf("after the retry: %q, %d rows, text %q", row.Outcome, len(v.Grid.Rows), row.Text)
	}
	if c := row.Cells[2]; c.Outcome != "done" || c.Task != "≤ 1s" {
		t.Fatalf("C's cell after the retry: %+v", c)
	}
}

// A link box says up, down, silent, or waiting: a predecessor connected
// and alive that has opened no round yet is not shown as down
// (docs/OPERATIONS.md, "/status": waiting).
func TestLinkBoxStates(t *testing.T) {
	for _, tc := range []struct {
		l    status.Link
		want string
	}{
		{status.Link{Exists: true, Up: true}, "up"},
		{status.Link{Exists: true}, "down"},
		{status.Link{Exists: true, Up: true, Silent: true}, "silent"},
		{status.Link{Exists: true, Waiting: "127.0.0.1:50527"}, "waiting"},
	} {
		if got := linkBox(tc.l).State; got != tc.want {
			t.Errorf("linkBox(%+v).State = %q, want %q", tc.l, got, tc.want)
		}
	}
}
