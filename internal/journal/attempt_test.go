package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
)

// Tests of the attempt records and the two new flags (docs/JOURNAL.md,
// "Retries and cancels"): a round undone, retried, started again and
// cancelled while its task ran keeps all of it across a restart, a torn
// write and a compaction (docs/UNDO.md and docs/STEERING.md, "Features
// together": a retry's outcome is its own and the undo stays on record).

// attemptSteps returns the records a middle node saves for a round id
// that fails further down and is undone here, is retried, runs its task
// again, and is cancelled by the Head while that task runs: every field
// the attempt records hold, set.
func attemptSteps(id string) [][]protocol.Record {
	ready := protocol.Record{Round: id, State: protocol.StateReady, LocalReady: true, PredReady: true,
		LastSucc: protocol.Ready, RecvPred: protocol.Ready, Seq: 4}
	start := ready
	start.State, start.StartRecv, start.CompleteRecv, start.Started = protocol.StateStart, true, true, true
	start.LastPred, start.RecvSucc, start.RecvPred = protocol.Start, protocol.Start, protocol.Complete
	ran := start
	ran.State, ran.Ran, ran.LastSucc = protocol.StateComplete, true, protocol.Complete
	undone := ran
	undone.State = protocol.StateAborted
	undone.Undo = protocol.UndoRecord{Phase: protocol.PhaseDone, Ended: true, Held: 3, SentPred: protocol.UndoLine,
		Wave: protocol.Wave{Failed: "C", Kind: "task-failed", Code: 7, Undone: "B", UndoneN: 1, StopCode: -1, KeptN: -1}}
	retried := protocol.Record{Round: id, State: protocol.StateSync, LocalReady: true, Seq: 4, Retries: 1, Prior: undone.Undo,
		Retry: protocol.Steer{Origin: "A", At: 1_780_000_000_123, What: protocol.SteerRetry, HasRound: true, Round: id,
			By: "ann", Reason: "again, after the fix to C"}}
	again := retried
	again.State, again.PredReady, again.StartRecv, again.CompleteRecv, again.Started = protocol.StateStart, true, true, true, true
	again.LastPred, again.LastSucc, again.RecvPred, again.RecvSucc = protocol.Start, protocol.Ready, protocol.Complete, protocol.Start
	cancelled := again
	cancelled.Cancelled = true
	cancelled.Cancel = protocol.Steer{Origin: "A", At: 1_780_000_000_999, What: protocol.SteerCancel, HasRound: true, Round: id, By: "bob"}
	aborted := cancelled
	aborted.State = protocol.StateAborted
	return [][]protocol.Record{{ready}, {start}, {ran}, {undone}, {retried}, {again}, {cancelled}, {aborted}}
}

// A journal of undone, retried and cancelled rounds, cut at every byte
// offset: each cut opens with exactly the rounds its whole frames make up
// (an attempt record without its round record changes nothing), and a
// reopened node gets back every field it saved.
func TestAttemptsTruncateEveryOffset(t *testing.T) {
	var steps [][]protocol.Record
	for _, id := range []string{"", "u1", strings.Repeat("L", protocol.MaxRoundLen)} {
		steps = append(steps, attemptSteps(id)...)
	}
	data, ops, ends := writeSteps(t, t.TempDir(), steps)
	dir := t.TempDir()
	path := filepath.Join(dir, "journal")
	hdrLen := frameHead + len(headerPayload(testHdr))
	for k := hdrLen; k <= len(data); k++ {
		complete := 0
		for complete < len(ends) && ends[complete] <= k {
			complete++
		}
		want := stateAfter(ops[:complete])
		if err := os.WriteFile(path, data[:k], 0o600); err != nil {
			t.Fatal(err)
		}
		j, st, err := Open(dir, testHdr)
		if err != nil {
			t.Fatalf("cut at %d of %d: %v", k, len(data), err)
		}
		j.Close()
		if !sameState(st, want) {
			t.Fatalf("cut at %d: state\n %+v\nwant the first %d frames\n %+v", k, st, complete, want)
		}
	}
	// The whole journal: the last record of each round, as saved.
	st, err := openFile(t, data)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range st.Rounds {
		want := steps[8*i+7][0]
		if !reflect.DeepEqual(r, want) {
			t.Fatalf("round %d reopened as\n %+v\nwant\n %+v", i, r, want)
		}
	}
}

// Compaction (at Open, and after many records) keeps the attempt records
// of the rounds it keeps, and the flags.
func TestAttemptsSurviveCompaction(t *testing.T) {
	dir := t.TempDir()
	j, _, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	j.SetKeepFinished(2)
	var want []protocol.Record
	for _, id := range []string{"u1", "u2", "u3"} {
		for _, s := range attemptSteps(id) {
			if err := j.Save(s); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, attemptSteps(id)[7][0])
	}
	if err := j.compact(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	data, err := os.ReadFile(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("S :u3 STEER A 1780000000123 retry :u3 ann again, after the fix to C")) ||
		!bytes.Contains(data, []byte("P :u3 1 3 1 3 ")) || bytes.Contains(data, []byte(":u1")) {
		t.Fatalf("compacted journal lacks u3's attempt records or kept u1:\n%q", data)
	}
	for pass := range 2 { // Open compacts again: the second reads that
		j, st, err := Open(dir, testHdr)
		if err != nil {
			t.Fatal(err)
		}
		j.Close()
		if !reflect.DeepEqual(st.Rounds, want[1:]) {
			t.Fatalf("open %d after compaction:\n %+v\nwant\n %+v", pass, st.Rounds, want[1:])
		}
	}
}

// A journal written before these records existed (five flags, no
// attempt records) opens as it did: its rounds have none of the facts.
func TestJournalWithoutAttemptsOpens(t *testing.T) {
	data := appendFrame(nil, headerPayload(testHdr))
	for _, p := range []string{"R :r1 6 11111 3 3 3 3 1", "D :r1", "R :r2 4 11110 2 1 3 2 2",
		"U :r2 1 0 0 0 0 0 - - -1 - - -1 -"} {
		data = appendFrame(data, []byte(p))
	}
	st, err := openFile(t, data)
	if err != nil {
		t.Fatal(err)
	}
	r1 := protocol.Record{Round: "r1", State: protocol.StateDone, LocalReady: true, PredReady: true, StartRecv: true,
		CompleteRecv: true, ExitRecv: true, LastPred: protocol.Complete, LastSucc: protocol.Complete,
		RecvPred: protocol.Complete, RecvSucc: protocol.Complete, Seq: 1, Delivered: true}
	r2 := protocol.Record{Round: "r2", State: protocol.StateStart, LocalReady: true, PredReady: true, StartRecv: true,
		CompleteRecv: true, LastPred: protocol.Start, LastSucc: protocol.Ready, RecvPred: protocol.Complete,
		RecvSucc: protocol.Start, Seq: 2, Ran: true, Undo: protocol.UndoRecord{Wave: protocol.Wave{Code: -1, UndoneN: -1, StopCode: -1, KeptN: -1}}}
	if !reflect.DeepEqual(st.Rounds, []protocol.Record{r1, r2}) {
		t.Fatalf("old journal loaded as\n %+v\nwant\n %+v", st.Rounds, []protocol.Record{r1, r2})
	}
}

// Bad attempt records and flags are damage, never guessed at.
func TestAttemptRecordsRefused(t *testing.T) {
	for _, p := range []string{
		"R :r1 6 1111100 3 3 3 3", // seven flags, the last two 0: written as five
		"R :r1 6 111110 3 3 3 3",  // six flags
		"R :r1 6 1111102 3 3 3 3", // not a digit 0/1
		"P :r1 -1 3 1 3 49 0 C task-failed 1 1,B - -1 0",
		"P :r1 01 3 1 3 49 0 C task-failed 1 1,B - -1 0",
		"P :r1 1 3 1 3 49 0 C task-failed 1 1,B - -1",
		"S :r1 STEER A 1780000000123 hold - -", // neither retry nor cancel
		"S :r1 STEER A 0 retry :r1 -",          // a line the wire refuses
		"S :r1 STEER A 1780000000123 retry :r1 - \r",
		"S :r1",
		"S",
		"S r1 STEER A 1780000000123 retry :r1 -",
	} {
		data := appendFrame(appendFrame(nil, headerPayload(testHdr)), []byte(p))
		data = appendFrame(data, []byte("R :r1 1 10000 0 0 0 0"))
		if _, err := openFile(t, data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%q: Open = %v, want ErrCorrupt", p, err)
		}
	}
}
