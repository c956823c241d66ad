package journal

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Tests of the task time record (docs/JOURNAL.md, "Records": "T :ROUND
// S|E UNIXMILLI").

// saveSteps saves each step's records at the clock's next reading and
// returns the times, to the millisecond, of the Saves whose records moved
// a round into StateStart (started) and out of it (ended).
func saveSteps(t *testing.T, j *Journal, clock *time.Time, steps [][]protocol.Record) (started, ended map[string]time.Time) {
	t.Helper()
	started, ended = map[string]time.Time{}, map[string]time.Time{}
	state := map[string]protocol.State{}
	for _, recs := range steps {
		*clock = clock.Add(1234567 * time.Microsecond)
		at := time.UnixMilli(clock.UnixMilli())
		if err := j.Save(recs); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			switch prev := state[r.Round]; {
			case r.State == protocol.StateStart && prev != protocol.StateStart:
				started[r.Round] = at
			case prev == protocol.StateStart && r.State != protocol.StateStart:
				ended[r.Round] = at
			}
			state[r.Round] = r.State
		}
	}
	return started, ended
}

// TestTaskTimesRecorded: the journal records when each round's task
// started and ended, to the millisecond, in the Save that moved the round
// into and out of StateStart and with no fsync of its own; Open and Read
// give them back, after a reopen (Open compacts) too; a compaction that
// drops a finished round drops its times and keeps the others'.
func TestTaskTimesRecorded(t *testing.T) {
	dir := t.TempDir()
	j, _, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.UnixMilli(1_780_000_000_000).Add(700 * time.Microsecond)
	j.now = func() time.Time { return clock }
	steps := machineRecords(t, "r1", "r2")
	before := j.Syncs()
	started, ended := saveSteps(t, j, &clock, steps)
	if got := j.Syncs() - before; got != uint64(len(steps)) {
		t.Errorf("%d Saves made %d fsyncs, want one each", len(steps), got)
	}
	check := func(what string, times map[string]TaskTimes, ids ...string) {
		t.Helper()
		if len(times) != len(ids) {
			t.Errorf("%s: task times %v, want those of %v", what, times, ids)
		}
		for _, id := range ids {
			tt := times[id]
			if !tt.Started.Equal(started[id]) || !tt.Ended.Equal(ended[id]) || !tt.Started.Before(tt.Ended) {
				t.Errorf("%s: round %s: %+v, want started %v, ended %v", what, id, tt, started[id], ended[id])
			}
		}
	}
	if len(started) != 2 || len(ended) != 2 {
		t.Fatalf("the machine's records started %v, ended %v: want both rounds' tasks", started, ended)
	}
	check("the journal's own", j.times, "r1", "r2")
	j.Close()
	for pass := range 2 {
		snap, err := Read(dir)
		if err != nil || snap.Damage != nil {
			t.Fatalf("Read: %v, %v", err, snap.Damage)
		}
		check("Read", snap.State.TaskTimes, "r1", "r2")
		j, st, err := Open(dir, testHdr) // compacts
		if err != nil {
			t.Fatal(err)
		}
		check("Open "+string(rune('1'+pass)), st.TaskTimes, "r1", "r2")
		j.Close()
	}
	j, _, err = Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	j.SetKeepFinished(1)
	if err := j.compact(); err != nil {
		t.Fatal(err)
	}
	check("the journal's own after r1 was compacted away", j.times, "r2") // nothing kept of a dropped round
	j.Close()
	j, st, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if len(st.Rounds) != 1 || st.Rounds[0].Round != "r2" {
		t.Fatalf("compaction keeping 1 finished round kept %+v", st.Rounds)
	}
	check("after r1 was compacted away", st.TaskTimes, "r2")
	snap, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	check("Read after r1 was compacted away", snap.State.TaskTimes, "r2")
}

// TestTaskTimesCut: a journal cut inside a task time record is a torn
// tail like any other (the round's record before it stands, without the
// time); a node restarted on a round whose task started before the
// restart keeps the start and records the end; a journal written before
// task times existed loads with none, and one whose task ended after an
// upgrade has only the end.
func TestTaskTimesCut(t *testing.T) {
	data, ops, ends := writeJournal(t, t.TempDir(), "r1")
	k := 0
	for ops[k].tt == nil || !ops[k].tt.Start {
		k++
	}
	cut := ends[k] - 3 // inside the task's start record
	st, err := openFile(t, data[:cut])
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rounds) != 1 || st.Rounds[0].State != protocol.StateStart || len(st.TaskTimes) != 0 || st.Dropped != ends[k]-3-ends[k-1] {
		t.Fatalf("cut inside the start record: %+v; want r1 in START, no task times, the partial record dropped", st)
	}

	// Restarted with the task started: its end is recorded beside the start.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "journal"), data[:ends[k]], 0o600); err != nil {
		t.Fatal(err)
	}
	j, st, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	startedAt := ops[k].tt.At
	if tt := st.TaskTimes["r1"]; !tt.Started.Equal(startedAt) || !tt.Ended.IsZero() {
		t.Fatalf("restarted in START: task times %+v, want started %v, no end", tt, startedAt)
	}
	endAt := startedAt.Add(time.Hour)
	j.now = func() time.Time { return endAt }
	done := st.Rounds[0]
	done.State = protocol.StateComplete
	if err := j.Save([]protocol.Record{done}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	snap, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tt := snap.State.TaskTimes["r1"]; !tt.Started.Equal(startedAt) || !tt.Ended.Equal(endAt) {
		t.Fatalf("after the restart's end: %+v, want started %v, ended %v", tt, startedAt, endAt)
	}

	// An older journal: round records only.
	start := protocol.Record{Round: "r1", State: protocol.StateStart, LocalReady: true, PredReady: true, StartRecv: true, CompleteRecv: true,
		LastPred: protocol.Start, LastSucc: protocol.Ready, RecvPred: protocol.Complete, RecvSucc: protocol.Start}
	old := appendFrame(nil, headerPayload(testHdr))
	old = appendFrame(old, EncodeRecord(start))
	st, err = openFile(t, old)
	if err != nil || len(st.Rounds) != 1 || st.Rounds[0] != start || len(st.TaskTimes) != 0 {
		t.Fatalf("a journal without task times: %+v, %v", st, err)
	}
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "journal"), old, 0o600); err != nil {
		t.Fatal(err)
	}
	j, _, err = Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	j.now = func() time.Time { return endAt }
	done = start
	done.State = protocol.StateComplete
	if err := j.Save([]protocol.Record{done}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if snap, err := Read(dir); err != nil || !snap.State.TaskTimes["r1"].Started.IsZero() || !snap.State.TaskTimes["r1"].Ended.Equal(endAt) {
		t.Fatalf("an older journal's task ended: %+v, %v; want only the end, at %v", snap.State.TaskTimes, err, endAt)
	}
}

// TestTaskTimeRecordFormat: the record is the documented line, and what
// is not is refused as corrupt, never guessed at.
func TestTaskTimeRecordFormat(t *testing.T) {
	at := time.UnixMilli(1_780_000_000_123)
	if got := string(taskTimePayload("r1", true, at)); got != "T :r1 S 1780000000123" {
		t.Errorf("start record %q", got)
	}
	if got := string(taskTimePayload("", false, at.Add(999*time.Microsecond))); got != "T : E 1780000000123" {
		t.Errorf("end record of the unnamed round %q", got)
	}
	e, err := parsePayload([]byte("T :r1 E 1780000000123"))
	if err != nil || e.TaskTime == nil || e.TaskTime.Start || !e.TaskTime.At.Equal(at) || e.Record.Round != "r1" {
		t.Errorf("parsed %+v, %v", e, err)
	}
	for _, bad := range []string{"T :r1 S", "T :r1 X 1", "T r1 S 1", "T :r1 S 0", "T :r1 S -5", "T :r1 S +5", "T :r1 S 05", "T :r1 S 1 2", "T :a/b S 1"} {
		if _, err := parsePayload([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestTaskRunInterrupted: a task running when its node died, run again
// by the restarted node, reads as two runs: the first started and was
// interrupted (Open writes when it found it so), the second started
// (SaveTaskStart) and ended; after another reopen (a compaction) too. A
// round whose task ended is not marked, and SaveTaskStart of a round the
// journal does not hold is refused. docs/DESIGN.md, "Restarts and
// durable state" (a task interrupted by the restart).
func TestTaskRunInterrupted(t *testing.T) {
	dir := t.TempDir()
	clock := time.UnixMilli(1_780_000_000_000)
	tick := func() time.Time { clock = clock.Add(1500 * time.Millisecond); return clock }
	open := func() (*Journal, *State) {
		t.Helper()
		j, st, err := openWith(dir, testHdr, func() time.Time { return clock })
		if err != nil {
			t.Fatal(err)
		}
		return j, st
	}
	j, _ := open()
	start1 := tick()
	save := func(j *Journal, recs ...protocol.Record) {
		t.Helper()
		if err := j.Save(recs); err != nil {
			t.Fatal(err)
		}
	}
	save(j, protocol.Record{Round: "r1", State: protocol.StateStart}, protocol.Record{Round: "r2", State: protocol.StateStart})
	tick()
	save(j, protocol.Record{Round: "r2", State: protocol.StateDone})
	j.Close() // the process dies with r1's task running
	gone := tick()
	j, st := open()
	want1 := TaskRun{Started: start1, Interrupted: gone}
	if got := st.TaskTimes["r1"]; got.TaskRun != want1 || len(got.Earlier) != 0 {
		t.Fatalf("after the restart, r1's task: %+v, want %+v", got, want1)
	}
	if got := st.TaskTimes["r2"]; !got.Interrupted.IsZero() {
		t.Errorf("r2's task, which ended, is marked interrupted: %+v", got)
	}
	start2 := tick()
	if err := j.SaveTaskStart("r1"); err != nil {
		t.Fatal(err)
	}
	if err := j.SaveTaskStart("nope"); err == nil {
		t.Error("SaveTaskStart of a round the journal does not hold: accepted")
	}
	end2 := tick()
	save(j, protocol.Record{Round: "r1", State: protocol.StateDone})
	want := TaskTimes{TaskRun: TaskRun{Started: start2, Ended: end2}, Earlier: []TaskRun{want1}}
	check := func(what string, got TaskTimes) {
		t.Helper()
		if got.TaskRun != want.TaskRun || len(got.Earlier) != 1 || got.Earlier[0] != want1 {
			t.Errorf("%s: r1's task runs %+v, want %+v", what, got, want)
		}
	}
	snap, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	check("Read", snap.State.TaskTimes["r1"])
	j.Close()
	tick()
	j, st = open()
	defer j.Close()
	check("reopened", st.TaskTimes["r1"])
}
