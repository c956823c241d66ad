package journal

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// The task time record (docs/JOURNAL.md, "Records"):
//
//	T :ROUND S|E|I UNIXMILLI
//
// says when this node's task in the round started (S) or ended (E), in
// milliseconds of Unix time, as this node's clock read it; or (I) that
// the process running it was gone: Open writes it, at the time it found
// the round in StateStart with no end recorded, for the run the node's
// death interrupted. SaveAll writes
// it itself, right after the round record (and its undo record) that
// moves the round into the task's state, protocol.StateStart (S), or out
// of it (E), in the same write: it costs no fsync of its own, and a torn
// one is dropped like any torn frame. Compaction keeps a kept round's
// task time records right after its last record, and drops a dropped
// round's. It is for people (chainsync journal, State.TaskTimes): a
// restarted node does not need it. A journal written before it existed
// has none, and loads as before.

// TaskRun is one run of a round's task at this node; a zero time: not
// recorded (the task has not ended yet, or the journal was written
// before task times were recorded).
type TaskRun struct {
	Started, Ended time.Time
	// Interrupted: when a restarted node found this run cut short by the
	// death of the process running it (Open); zero if it was not.
	Interrupted time.Time
}

// TaskTimes is when a round's task last started and ended at this node,
// and the runs before that one: a task run again (after a restart, or a
// retry) has more than one.
type TaskTimes struct {
	TaskRun
	// Earlier are the runs before the last, oldest first (at most
	// keepRuns: the oldest are dropped).
	Earlier []TaskRun
}

// keepRuns bounds TaskTimes.Earlier.
const keepRuns = 8

// TaskTimeEntry is a decoded task time record.
type TaskTimeEntry struct {
	Start bool      // S: the task started
	Gone  bool      // I: the run was interrupted by the node's death; else (neither) E: it ended
	At    time.Time // to the millisecond
}

func parseTaskTime(s string, f []string) (Entry, error) {
	if len(f) != 4 || (f[2] != "S" && f[2] != "E" && f[2] != "I") {
		return Entry{}, fmt.Errorf("bad task time record %q", s)
	}
	id, ok := cutRound(f[1])
	if !ok {
		return Entry{}, fmt.Errorf("bad round field %q", f[1])
	}
	ms, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || ms <= 0 || strconv.FormatInt(ms, 10) != f[3] {
		return Entry{}, fmt.Errorf("bad time in %q", s)
	}
	return Entry{Record: protocol.Record{Round: id}, TaskTime: &TaskTimeEntry{Start: f[2] == "S", Gone: f[2] == "I", At: time.UnixMilli(ms)}}, nil
}

func cutRound(field string) (string, bool) {
	if len(field) == 0 || field[0] != ':' || !protocol.ValidRound(field[1:]) {
		return "", false
	}
	return field[1:], true
}

func taskTimePayload(id string, start bool, at time.Time) []byte {
	mark := byte('E')
	if start {
		mark = 'S'
	}
	return markPayload(id, mark, at)
}

// markPayload is the task time record of id with mark S, E or I.
func markPayload(id string, mark byte, at time.Time) []byte {
	b := append([]byte("T :"), id...)
	b = append(b, ' ', mark, ' ')
	return strconv.AppendInt(b, at.UnixMilli(), 10)
}

// applyTaskTime folds a task time record into times.
func applyTaskTime(times map[string]TaskTimes, e Entry) {
	times[e.Record.Round] = foldTaskTime(times[e.Record.Round], *e.TaskTime)
}

// foldTaskTime is t after the task time record e: a start begins a new
// run (the one before it, if any, joins Earlier), an end or an
// interruption completes the current run.
func foldTaskTime(t TaskTimes, e TaskTimeEntry) TaskTimes {
	switch {
	case e.Start:
		if t.TaskRun != (TaskRun{}) {
			t.Earlier = append(t.Earlier, t.TaskRun)
			if len(t.Earlier) > keepRuns {
				t.Earlier = slices.Delete(t.Earlier, 0, len(t.Earlier)-keepRuns)
			}
		}
		t.TaskRun = TaskRun{Started: e.At}
	case e.Gone:
		t.Interrupted = e.At
	default:
		t.Ended = e.At
	}
	return t
}

// millis is t to the millisecond, without its monotonic reading: what a
// task time record holds, so that what a node keeps is what it reloads.
func millis(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

// noteTaskTime appends to b the task time record that writing r after
// prev (known: the round had a record) implies: the task starts as the
// round enters StateStart and ends as it leaves it. now gives the time,
// read once per SaveAll; it returns how many frames it appended.
func (j *Journal) noteTaskTime(b []byte, r, prev protocol.Record, known bool, now func() time.Time) ([]byte, int) {
	wasStart := known && prev.State == protocol.StateStart
	switch {
	case r.State == protocol.StateStart && !wasStart:
		at := now()
		j.times[r.Round] = foldTaskTime(j.times[r.Round], TaskTimeEntry{Start: true, At: at})
		return appendFrame(b, taskTimePayload(r.Round, true, at)), 1
	case wasStart && r.State != protocol.StateStart:
		at := now()
		j.times[r.Round] = foldTaskTime(j.times[r.Round], TaskTimeEntry{At: at})
		return appendFrame(b, taskTimePayload(r.Round, false, at)), 1
	}
	return b, 0
}

// appendTaskTimes appends id's task time records to b (compaction): each
// run's start, interruption and end, oldest first.
func (j *Journal) appendTaskTimes(b []byte, id string) []byte {
	t, ok := j.times[id]
	if !ok {
		return b
	}
	for _, run := range append(slices.Clone(t.Earlier), t.TaskRun) {
		for _, m := range []struct {
			mark byte
			at   time.Time
		}{{'S', run.Started}, {'I', run.Interrupted}, {'E', run.Ended}} {
			if !m.at.IsZero() {
				b = appendFrame(b, markPayload(id, m.mark, m.at))
			}
		}
	}
	return b
}

// markInterrupted notes, for every round whose task was running (the
// round in StateStart, its start recorded and no end) when the process
// that wrote the journal died, that this run was interrupted, at the
// time read now (Open: the compaction that follows writes it).
func (j *Journal) markInterrupted() {
	var at time.Time
	for id, r := range j.last {
		t, ok := j.times[id]
		if r.State != protocol.StateStart || !ok || t.Started.IsZero() || !t.Ended.IsZero() || !t.Interrupted.IsZero() {
			continue
		}
		if at.IsZero() {
			at = millis(j.clock()())
		}
		t.Interrupted = at
		j.times[id] = t
	}
}

// SaveTaskStart records, and fsyncs, that the task of round starts again
// now without its round record changing: a node restarted in the
// round's task that runs it again (--resume-task rerun) says so, so that
// the journal shows two runs, not one across the restart.
func (j *Journal) SaveTaskStart(round string) error {
	if j.closed {
		return errors.New("chainsync: journal closed")
	}
	if _, ok := j.last[round]; !ok {
		return fmt.Errorf("chainsync: no round %q in the journal", round)
	}
	at := millis(j.clock()())
	j.times[round] = foldTaskTime(j.times[round], TaskTimeEntry{Start: true, At: at})
	return j.appendSynced(taskTimePayload(round, true, at))
}

// clock returns the journal's clock: time.Now, or a test's.
func (j *Journal) clock() func() time.Time {
	if j.now != nil {
		return j.now
	}
	return time.Now
}
