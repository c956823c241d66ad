package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
)

// Tests that chainsync journal reads what happened, on journals written
// the way a node writes them (docs/JOURNAL.md; docs/OPERATIONS.md,
// "Reading a state directory: `chainsync journal`"): a cancel, an undo
// wave, a wait for a person, a task failure, a fault exit, a task run
// again after a restart.

// writeJournal opens a state directory for a node of role and name,
// saves each step's records (and fault records), records an end if end,
// and returns what chainsync journal makes of it, in JSON's terms and as
// the table prints it.
func writeJournal(t *testing.T, role, name string, steps [][]protocol.Record, faults []journal.Fault, end bool) (journalDoc, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	j, _, err := journal.Open(dir, journal.Header{Role: role, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	for i, recs := range steps {
		var fs []journal.Fault
		if i == len(steps)-1 {
			fs = faults // written with the records that end the round, as the driver does
		}
		if err := j.SaveAll(fs, recs); err != nil {
			t.Fatal(err)
		}
	}
	if end {
		if err := j.SaveEnd(1_796_537_457); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	return readJournal(t, dir)
}

func readJournal(t *testing.T, dir string) (journalDoc, string) {
	t.Helper()
	snap, err := journal.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	doc := describeJournal(dir, snap)
	var out bytes.Buffer
	printJournal(&out, doc, snap)
	return doc, out.String()
}

// headRecords are the Head's records of a round whose task succeeded and
// whose COMPLETE went on, then last (the round's end).
func headRecords(id string, last protocol.Record) [][]protocol.Record {
	r := protocol.Record{Round: id, State: protocol.StateReady, LocalReady: true, LastSucc: protocol.Ready, Seq: 1}
	steps := [][]protocol.Record{{r}}
	r.State, r.StartRecv, r.RecvSucc = protocol.StateStart, true, protocol.Start
	steps = append(steps, []protocol.Record{r})
	r.State, r.LastSucc = protocol.StateComplete, protocol.Complete
	steps = append(steps, []protocol.Record{r})
	last.Round, last.LocalReady, last.StartRecv, last.RecvSucc, last.LastSucc, last.Seq = id, true, true, protocol.Start, protocol.Complete, 1
	return append(steps, []protocol.Record{last})
}

// TestJournalCancelledAtHead: a round cancelled at the Head after the
// Head's task ran reads "cancelled at the Head", not undelivered, and no
// fault. docs/STEERING.md, "Cancel".
func TestJournalCancelledAtHead(t *testing.T) {
	doc, out := writeJournal(t, "head", "A", headRecords("c1", protocol.Record{State: protocol.StateAborted}),
		[]journal.Fault{{Round: "c1", Kind: "cancelled"}}, false)
	r := doc.Rounds[0]
	if r.Outcome != "cancelled at the Head" || r.Fault != "" || r.Task != "succeeded" {
		t.Errorf("cancelled round: outcome %q, fault %q, task %q; want cancelled at the Head, no fault, succeeded", r.Outcome, r.Fault, r.Task)
	}
	if strings.Contains(out, "undelivered") {
		t.Errorf("the table calls a cancelled round undelivered:\n%s", out)
	}
}

// TestJournalUndoneRound: a round that failed at C and was undone reads,
// at the Head whose task succeeded, as failed at C and undone, with its
// own undo's end, and not as undelivered; at C, whose task failed, the
// FAULT column says task-failed. docs/UNDO.md.
func TestJournalUndoneRound(t *testing.T) {
	wave := protocol.Wave{Failed: "C", Kind: "task-failed", Code: 7, Undone: "B,A", UndoneN: 2, KeptN: -1}
	last := protocol.Record{State: protocol.StateAborted, Undo: protocol.UndoRecord{Phase: protocol.PhaseDone, Wave: wave, Ended: true, SentSucc: protocol.UndoEnd}}
	doc, out := writeJournal(t, "head", "A", headRecords("u1", last), nil, true)
	r := doc.Rounds[0]
	if want := "failed at C (task exited 7); undone by B, A; undo: ran and ended"; r.Outcome != want {
		t.Errorf("undone round at the Head: outcome %q, want %q", r.Outcome, want)
	}
	if strings.Contains(out, "undelivered") {
		t.Errorf("the table calls an undone round undelivered:\n%s", out)
	}

	c := protocol.Record{Round: "u1", State: protocol.StateWatch, LocalReady: true, PredReady: true, StartRecv: true, LastPred: protocol.Start, RecvPred: protocol.Ready, Seq: 1}
	steps := [][]protocol.Record{{c}}
	c.State, c.CompleteRecv, c.RecvPred = protocol.StateStart, true, protocol.Complete
	steps = append(steps, []protocol.Record{c})
	c.State, c.Undo = protocol.StateFailed, protocol.UndoRecord{Phase: protocol.PhaseNothing, Wave: wave, Ended: true, SentPred: protocol.UndoLine}
	steps = append(steps, []protocol.Record{c})
	doc, out = writeJournal(t, "tail", "C", steps, nil, true)
	r = doc.Rounds[0]
	if r.Fault != "task-failed" || r.Task != "failed" || !strings.HasPrefix(r.Outcome, "failed at C (task exited 7); undone by B, A") {
		t.Errorf("at C, whose task failed: fault %q, task %q, outcome %q", r.Fault, r.Task, r.Outcome)
	}
	if !strings.Contains(out, " task-failed ") {
		t.Errorf("the table's FAULT column at C does not say task-failed:\n%s", out)
	}
	if doc.ExitStatus == nil || *doc.ExitStatus != ExitTaskFailed || strings.Contains(doc.Node, "normally") {
		t.Errorf("C ended with its task failed: node %q, exit status %v; want not normally, 3", doc.Node, doc.ExitStatus)
	}
}

// TestJournalWaitIsNotAStart: a round whose turn came at a node gated
// by an approval (the predecessor's COMPLETE arrived; no task started),
// then cancelled, reads "not started"; so does the Head's, waiting on a
// pause with the successor's START in. docs/STEERING.md: a wait for a
// person is never a started task.
func TestJournalWaitIsNotAStart(t *testing.T) {
	c := protocol.Record{Round: "r1", State: protocol.StateWatch, LocalReady: true, PredReady: true, StartRecv: true, LastPred: protocol.Start, RecvPred: protocol.Ready, Seq: 1}
	steps := [][]protocol.Record{{c}}
	c.CompleteRecv, c.RecvPred = true, protocol.Complete // its turn: waiting for the approval
	steps = append(steps, []protocol.Record{c})
	c.State = protocol.StateAborted
	steps = append(steps, []protocol.Record{c})
	doc, _ := writeJournal(t, "middle", "C", steps, []journal.Fault{{Round: "r1", Kind: "cancelled"}}, false)
	if r := doc.Rounds[0]; r.Task != "not-started" || r.TaskStarted != "" || r.Outcome != "cancelled at the Head" {
		t.Errorf("a round cancelled while it waited for an approval: task %q (%q), started %q, outcome %q; want not started, cancelled",
			r.Task, r.TaskText, r.TaskStarted, r.Outcome)
	}

	a := protocol.Record{Round: "p1", State: protocol.StateReady, LocalReady: true, StartRecv: true, LastSucc: protocol.Ready, RecvSucc: protocol.Start, Seq: 1}
	doc, _ = writeJournal(t, "head", "A", [][]protocol.Record{{a}, {func() protocol.Record { a.State = protocol.StateAborted; return a }()}},
		[]journal.Fault{{Round: "p1", Kind: "peer-silent"}}, false)
	if r := doc.Rounds[0]; r.Task != "not-started" {
		t.Errorf("a Head round aborted while paused: task %q (%q), want not started", r.Task, r.TaskText)
	}
}

// TestJournalFaultEnd: a node whose rounds ended by a fault and that
// recorded its end (every round over) does not read "ended normally":
// its exit status (4) and the round are named. docs/OPERATIONS.md, exit
// statuses.
func TestJournalFaultEnd(t *testing.T) {
	b := protocol.Record{Round: "r1", State: protocol.StateSync, LocalReady: true, Seq: 1}
	steps := [][]protocol.Record{{b}, {func() protocol.Record { b.State = protocol.StateAborted; return b }()}}
	doc, out := writeJournal(t, "middle", "B", steps, []journal.Fault{{Round: "r1", Kind: "peer-silent"}}, true)
	if doc.ExitStatus == nil || *doc.ExitStatus != ExitFault || strings.Contains(doc.Node, "normally") ||
		!strings.Contains(doc.Node, "exit status 4") || !strings.Contains(doc.Node, "peer-silent") {
		t.Errorf("a node that ended by a fault: node %q, exit status %v", doc.Node, doc.ExitStatus)
	}
	if !strings.Contains(out, "node: ended at ") {
		t.Errorf("the text does not say how the node ended:\n%s", out)
	}
	doc, _ = writeJournal(t, "head", "A", headRecords("r1", protocol.Record{State: protocol.StateDone, ExitRecv: true}), nil, true)
	if doc.ExitStatus == nil || *doc.ExitStatus != ExitOK || !strings.HasPrefix(doc.Node, "ended normally at ") {
		t.Errorf("a node whose rounds are done: node %q, exit status %v", doc.Node, doc.ExitStatus)
	}
}

// TestJournalTaskRerun: a task running when its node was killed, run
// again by the restarted node, reads as two runs: the first cut short by
// the node's death, the second with its own start and end. docs/DESIGN.md,
// "Restarts and durable state".
func TestJournalTaskRerun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "B")
	hdr := journal.Header{Role: "single", Name: "B"}
	j, _, err := journal.Open(dir, hdr)
	if err != nil {
		t.Fatal(err)
	}
	r := protocol.Record{Round: "r1", State: protocol.StateStart, LocalReady: true, Seq: 1}
	if err := j.Save([]protocol.Record{r}); err != nil {
		t.Fatal(err)
	}
	j.Close() // killed with its task running
	j, _, err = journal.Open(dir, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if doc, _ := readJournal(t, dir); doc.Rounds[0].Task != "running-or-interrupted" || !strings.Contains(doc.Rounds[0].TaskText, "died while it ran") {
		t.Errorf("after the restart, before the rerun: %+v", doc.Rounds[0])
	}
	if err := j.SaveTaskStart("r1"); err != nil {
		t.Fatal(err)
	}
	r.State = protocol.StateDone
	if err := j.Save([]protocol.Record{r}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	doc, _ := readJournal(t, dir)
	got := doc.Rounds[0]
	if len(got.TaskRuns) != 2 || got.TaskRuns[0].Interrupted == "" || got.TaskRuns[0].Ended != "" ||
		got.TaskRuns[1].Started == "" || got.TaskRuns[1].Ended == "" || got.TaskRuns[1].Interrupted != "" ||
		got.TaskStarted != got.TaskRuns[1].Started || !strings.Contains(got.TaskText, "run 2 times here: the first run was cut short by the node's death") {
		t.Errorf("a task run again after a restart: %q, runs %+v, started %q", got.TaskText, got.TaskRuns, got.TaskStarted)
	}
}

// TestJournalRetryAfterUndo: at the Head A of a chain whose round u1
// failed at C and was undone by B and A, then retried and run again to
// the end, chainsync journal shows both: the rerun (done, the task run
// twice) and the undo of the attempt before, in the text and in --json.
// docs/UNDO.md, "Features together": a retry's outcome is its own, and
// the journal keeps both the undo and the retry.
func TestJournalRetryAfterUndo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "A")
	j, _, err := journal.Open(dir, journal.Header{Role: "head", Name: "A"})
	if err != nil {
		t.Fatal(err)
	}
	wave := protocol.Wave{Failed: "C", Kind: "task-failed", Code: 7, Undone: "B,A", UndoneN: 2, StopCode: -1, KeptN: -1}
	undone := protocol.UndoRecord{Phase: protocol.PhaseDone, Wave: wave, Ended: true, SentSucc: protocol.UndoEnd}
	first := headRecords("u1", protocol.Record{State: protocol.StateAborted, Ran: true, Undo: undone})
	for k := range first[1:] {
		first[1+k][0].Started = true // the task started, then ran
	}
	retry := protocol.Steer{Origin: "A", At: 1_796_537_000_000, What: protocol.SteerRetry, HasRound: true, Round: "u1", By: "ann"}
	second := headRecords("u1", protocol.Record{State: protocol.StateDone, ExitRecv: true, Ran: true})
	second = append([][]protocol.Record{{{Round: "u1", State: protocol.StateSync, LocalReady: true, Seq: 1}}}, second...)
	for k := range second {
		second[k][0].Retries, second[k][0].Prior, second[k][0].Retry = 1, undone, retry
		second[k][0].Started = second[k][0].State >= protocol.StateStart
	}
	for _, s := range append(first, second...) {
		if err := j.Save(s); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	doc, out := readJournal(t, dir)
	r := doc.Rounds[0]
	wantOutcome := "done; retried by ann at A; before the retry: failed at C (task exited 7); undone by B, A; undo here: ran and ended"
	if r.Outcome != wantOutcome || r.Task != "succeeded" || !strings.Contains(r.TaskText, "run 2 times here") {
		t.Errorf("retried round at A: outcome %q, task %q (%q); want %q, the task succeeded, run twice", r.Outcome, r.Task, r.TaskText, wantOutcome)
	}
	if r.Retries != 1 || r.RetryBy != "ann at A" || r.PriorUndo != "ran and ended; failed at C (task exited 7); undone by B, A" || r.Undo != "" {
		t.Errorf("retried round at A, --json: retries %d, retry_by %q, prior_undo %q, undo %q", r.Retries, r.RetryBy, r.PriorUndo, r.Undo)
	}
	if !strings.Contains(out, wantOutcome) {
		t.Errorf("the table does not show the rerun and the undo:\n%s", out)
	}
	var js bytes.Buffer
	if err := json.NewEncoder(&js).Encode(doc); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"retries":1`, `"retry_by":"ann at A"`, `"prior_undo":"ran and ended; failed at C (task exited 7); undone by B, A"`, `"outcome":"done; retried`} {
		if !strings.Contains(js.String(), want) {
			t.Errorf("--json lacks %s:\n%s", want, js.String())
		}
	}
	// A node restarted now reads the same: the journal kept it all.
	if doc2, _ := readJournal(t, dir); doc2.Rounds[0].Outcome != r.Outcome {
		t.Errorf("read again: %q", doc2.Rounds[0].Outcome)
	}
}

// TestJournalStartedIsTheRecords: a retried round waiting at an approval
// in its second attempt reads "not started" though the first attempt's
// task ran (the task time records say it started once); a round the
// Head cancelled while this node's task ran says so. docs/STEERING.md,
// "Features together".
func TestJournalStartedIsTheRecords(t *testing.T) {
	b := protocol.Record{Round: "r1", State: protocol.StateWatch, LocalReady: true, PredReady: true, StartRecv: true, LastPred: protocol.Start, RecvPred: protocol.Ready, Seq: 1}
	steps := [][]protocol.Record{{b}}
	b.State, b.CompleteRecv, b.RecvPred, b.Started = protocol.StateStart, true, protocol.Complete, true
	steps = append(steps, []protocol.Record{b})
	b.State = protocol.StateAborted
	steps = append(steps, []protocol.Record{b})
	// The retry: the round's turn came again, and it waits for an approval.
	b = protocol.Record{Round: "r1", State: protocol.StateWatch, LocalReady: true, PredReady: true, StartRecv: true, CompleteRecv: true,
		LastPred: protocol.Start, RecvPred: protocol.Complete, Seq: 1, Retries: 1,
		Retry: protocol.Steer{Origin: "A", At: 1_796_537_000_000, What: protocol.SteerRetry, HasRound: true, Round: "r1"}}
	steps = append(steps, []protocol.Record{b})
	doc, _ := writeJournal(t, "middle", "B", steps, nil, false)
	if r := doc.Rounds[0]; r.Task != "not-started" || r.Retries != 1 || r.RetryBy != "A" ||
		!strings.HasSuffix(r.Outcome, "; retried by A; nothing was undone here before the retry") {
		t.Errorf("a retried round waiting for approval: task %q (%q), retries %d by %q, outcome %q", r.Task, r.TaskText, r.Retries, r.RetryBy, r.Outcome)
	}

	c := protocol.Record{Round: "c1", State: protocol.StateStart, LocalReady: true, PredReady: true, StartRecv: true, CompleteRecv: true,
		LastPred: protocol.Start, RecvPred: protocol.Complete, Seq: 1, Started: true}
	cancel := c
	cancel.Cancelled, cancel.Cancel = true, protocol.Steer{Origin: "A", At: 1_796_537_000_000, What: protocol.SteerCancel, HasRound: true, Round: "c1"}
	over := cancel
	over.State = protocol.StateAborted
	doc, _ = writeJournal(t, "middle", "B", [][]protocol.Record{{c}, {cancel}, {over}}, []journal.Fault{{Round: "c1", Kind: "cancelled"}}, false)
	if r := doc.Rounds[0]; r.Task != "stopped" || !r.Cancelled || r.Outcome != "cancelled at the Head" ||
		!strings.Contains(r.TaskText, "cancelled the round while it ran") {
		t.Errorf("a round cancelled while the task ran: task %q (%q), cancelled %v, outcome %q", r.Task, r.TaskText, r.Cancelled, r.Outcome)
	}
}
