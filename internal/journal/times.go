package journal

import (
	"fmt"
	"strconv"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// The task time record (docs/JOURNAL.md, "Records"):
//
//	T :ROUND S|E UNIXMILLI
//
// says when this node's task in the round started (S) or ended (E), in
// milliseconds of Unix time, as this node's clock read it. SaveAll writes
// it itself, right after the round record (and its undo record) that
// moves the round into the task's state, protocol.StateStart (S), or out
// of it (E), in the same write: it costs no fsync of its own, and a torn
// one is dropped like any torn frame. Compaction keeps a kept round's
// task time records right after its last record, and drops a dropped
// round's. It is for people (chainsync journal, State.TaskTimes): a
// restarted node does not need it. A journal written before it existed
// has none, and loads as before.

// TaskTimes is when a round's task last started and ended at this node;
// a zero time: not recorded (the task has not ended yet, or the journal
// was written before task times were recorded).
type TaskTimes struct{ Started, Ended time.Time }

// TaskTimeEntry is a decoded task time record.
type TaskTimeEntry struct {
	Start bool      // S: the task started; else E: it ended
	At    time.Time // to the millisecond
}

func parseTaskTime(s string, f []string) (Entry, error) {
	if len(f) != 4 || (f[2] != "S" && f[2] != "E") {
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
	return Entry{Record: protocol.Record{Round: id}, TaskTime: &TaskTimeEntry{Start: f[2] == "S", At: time.UnixMilli(ms)}}, nil
}

func cutRound(field string) (string, bool) {
	if len(field) == 0 || field[0] != ':' || !protocol.ValidRound(field[1:]) {
		return "", false
	}
	return field[1:], true
}

func taskTimePayload(id string, start bool, at time.Time) []byte {
	b := append([]byte("T :"), id...)
	if start {
		b = append(b, " S "...)
	} else {
		b = append(b, " E "...)
	}
	return strconv.AppendInt(b, at.UnixMilli(), 10)
}

// applyTaskTime folds a task time record into times: a start begins the
// round's times afresh (a task run again), an end completes them.
func applyTaskTime(times map[string]TaskTimes, e Entry) {
	t := times[e.Record.Round]
	if e.TaskTime.Start {
		t = TaskTimes{Started: e.TaskTime.At}
	} else {
		t.Ended = e.TaskTime.At
	}
	times[e.Record.Round] = t
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
		j.times[r.Round] = TaskTimes{Started: at}
		return appendFrame(b, taskTimePayload(r.Round, true, at)), 1
	case wasStart && r.State != protocol.StateStart:
		at := now()
		t := j.times[r.Round]
		t.Ended = at
		j.times[r.Round] = t
		return appendFrame(b, taskTimePayload(r.Round, false, at)), 1
	}
	return b, 0
}

// appendTaskTimes appends id's task time records to b (compaction).
func (j *Journal) appendTaskTimes(b []byte, id string) []byte {
	t, ok := j.times[id]
	if !ok {
		return b
	}
	if !t.Started.IsZero() {
		b = appendFrame(b, taskTimePayload(id, true, t.Started))
	}
	if !t.Ended.IsZero() {
		b = appendFrame(b, taskTimePayload(id, false, t.Ended))
	}
	return b
}

// clock returns the journal's clock: time.Now, or a test's.
func (j *Journal) clock() func() time.Time {
	if j.now != nil {
		return j.now
	}
	return time.Now
}
