package journal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Tests of the journal (docs/DESIGN.md, "Restarts and durable state": "A
// torn last record is dropped; any other damage stops the node with a
// clear error, never a guess. One process per state directory (a lock).")

var testHdr = Header{Role: "middle", Name: "b"}

// machineRecords runs rounds through a real Durable machine of an
// intermediate node and returns the records of its ActSave actions, one
// slice per step (what the driver hands to one Save).
func machineRecords(t testing.TB, rounds ...string) [][]protocol.Record {
	t.Helper()
	m := protocol.New(protocol.Config{Role: protocol.Middle, Durable: true})
	var steps [][]protocol.Record
	for _, id := range rounds {
		for _, ev := range []protocol.Event{
			protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Ready, Round: id}),
			protocol.LocalReady(id),
			protocol.Recv(protocol.Succ, protocol.Message{Cmd: protocol.Start, Round: id}),
			protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Complete, Round: id}),
			protocol.TaskDone(id, false),
			protocol.Recv(protocol.Succ, protocol.Message{Cmd: protocol.Complete, Round: id}),
			protocol.Delivered(id), // the final COMPLETE handed to the predecessor
		} {
			acts, err := m.Step(ev, nil)
			if err != nil {
				t.Fatal(err)
			}
			var recs []protocol.Record
			for _, a := range acts {
				if a.Kind == protocol.ActSave {
					recs = append(recs, *a.Record)
				}
			}
			if len(recs) == 0 {
				t.Fatalf("step %+v saved nothing", ev)
			}
			steps = append(steps, recs)
		}
	}
	return steps
}

// op is one thing written to the journal (one frame): a round record
// (without its undo), an attempt record written before it (pre: alone it
// changes nothing), an undo record (undo: rec's Ran and Undo), a delivery
// or a task time record (tt, of round).
type op struct {
	rec       protocol.Record
	pre       bool
	undo      bool
	delivered string
	isDeliv   bool
	round     string
	tt        *TaskTimeEntry
}

// recordOps returns the ops of the frames appendRecordFrame writes for r
// after a record with the receipts prev (Delivered aside) and each one's
// length: its attempt and receipt records, the round
// record, its undo record.
func recordOps(r protocol.Record, prev protocol.ReceiptRecord) (ops []op, lens []int) {
	r.Delivered = false
	for _, p := range framePayloads(appendReceiptFrames(appendAttemptFrames(nil, r), r.Round, r.Receipt, prev)) {
		ops, lens = append(ops, op{pre: true}), append(lens, frameHead+len(p))
	}
	bare := r
	bare.Ran, bare.Undo = false, protocol.UndoRecord{}
	ops, lens = append(ops, op{rec: bare}), append(lens, frameHead+len(EncodeRecord(r)))
	if hasUndo(r) {
		ops, lens = append(ops, op{rec: r, undo: true}), append(lens, frameHead+len(appendUndo(nil, r)))
	}
	return ops, lens
}

// framePayloads splits whole frames into their payloads.
func framePayloads(b []byte) (out [][]byte) {
	for len(b) > 0 {
		n := frameHead + int(beUint32(b))
		out, b = append(out, b[frameHead:n]), b[n:]
	}
	return out
}

// stateAfter is what a journal holding the header and ops must load as.
func stateAfter(ops []op) *State {
	st := &State{TaskTimes: map[string]TaskTimes{}}
	pos := map[string]int{}
	for _, o := range ops {
		if o.tt != nil {
			if _, ok := pos[o.round]; ok {
				st.TaskTimes[o.round] = foldTaskTime(st.TaskTimes[o.round], *o.tt)
			}
			continue
		}
		if o.isDeliv {
			if k, ok := pos[o.delivered]; ok {
				st.Rounds[k].Delivered = true
			}
			continue
		}
		if o.pre {
			continue // its round record carries what it says
		}
		if o.undo {
			if k, ok := pos[o.rec.Round]; ok {
				st.Rounds[k].Ran, st.Rounds[k].Undo = o.rec.Ran, o.rec.Undo
			}
			continue
		}
		if k, ok := pos[o.rec.Round]; ok {
			o.rec.Delivered = o.rec.Delivered || st.Rounds[k].Delivered
			st.Rounds[k] = o.rec
		} else {
			pos[o.rec.Round] = len(st.Rounds)
			st.Rounds = append(st.Rounds, o.rec)
		}
	}
	return st
}

func sameState(got, want *State) bool {
	return len(got.Rounds) == len(want.Rounds) && (len(got.Rounds) == 0 || reflect.DeepEqual(got.Rounds, want.Rounds)) &&
		sameTimes(got.TaskTimes, want.TaskTimes)
}

// sameTimes: the same rounds have the same task times (to the instant).
func sameTimes(got, want map[string]TaskTimes) bool {
	if len(got) != len(want) {
		return false
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok || !g.Started.Equal(w.Started) || !g.Ended.Equal(w.Ended) {
			return false
		}
	}
	return true
}

// testClock is the time of the k-th Save of writeJournal: not on a
// millisecond, so that the records' truncation to milliseconds shows.
func testClock(k int) time.Time {
	return time.UnixMilli(1_780_000_000_000).Add(time.Duration(k)*1500*time.Microsecond + 250*time.Microsecond)
}

// writeJournal writes a journal with Save the way a node does, one Save
// per machine step (the last of a round, Delivered, writes its record and
// a delivery), the k-th Save at testClock(k), and returns its bytes, the
// ops in order (one per frame) and the byte offset at which each op's
// frame ends. A round record that moves its round into StateStart is
// followed by a task time record saying the task started, one that moves
// it out of StateStart by one saying it ended, at the Save's time to the
// millisecond.
func writeJournal(t testing.TB, dir string, rounds ...string) (data []byte, ops []op, ends []int) {
	t.Helper()
	return writeSteps(t, dir, machineRecords(t, rounds...))
}

// writeSteps is writeJournal of the given steps, one Save each.
func writeSteps(t testing.TB, dir string, steps [][]protocol.Record) (data []byte, ops []op, ends []int) {
	t.Helper()
	j, st, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rounds) != 0 {
		t.Fatal("new journal not empty")
	}
	var clock time.Time
	j.now = func() time.Time { return clock }
	hdrLen := frameHead + len(headerPayload(testHdr))
	end := hdrLen
	last := map[string]protocol.Record{} // each round's last record, without Delivered
	for k, recs := range steps {
		clock = testClock(k)
		if err := j.Save(recs); err != nil {
			t.Fatal(err)
		}
		at := time.UnixMilli(clock.UnixMilli())
		for _, r := range recs {
			deliv := r.Delivered
			r.Delivered = false // the round record's frame does not hold it
			if prev, known := last[r.Round]; !known || prev != r {
				rops, lens := recordOps(r, last[r.Round].Receipt)
				for i := range rops {
					ops = append(ops, rops[i])
					end += lens[i]
					ends = append(ends, end)
				}
				wasStart := known && prev.State == protocol.StateStart
				if isStart := r.State == protocol.StateStart; isStart != wasStart {
					ops = append(ops, op{round: r.Round, tt: &TaskTimeEntry{Start: isStart, At: at}})
					end += frameHead + len(taskTimePayload(r.Round, isStart, at))
					ends = append(ends, end)
				}
				last[r.Round] = r
			}
			if deliv {
				ops = append(ops, op{delivered: r.Round, isDeliv: true})
				end += frameHead + len("D :"+r.Round)
				ends = append(ends, end)
			}
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	data, err = os.ReadFile(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != end {
		t.Fatalf("journal is %d bytes, want %d", len(data), end)
	}
	return data, ops, ends
}

func openFile(t *testing.T, data []byte) (*State, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "journal"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	j, st, err := Open(dir, testHdr)
	if err == nil {
		j.Close()
	}
	return st, err
}

// TestTruncateEveryOffset cuts a journal written by Save from a real
// machine's records at every byte offset: Open always resumes (a cut is a
// torn tail), with exactly the records whose frames are complete, drops
// the rest (and says how many bytes), and a second Open finds the same
// state with nothing dropped (Open compacted the file).
func TestTruncateEveryOffset(t *testing.T) {
	data, ops, ends := writeJournal(t, t.TempDir(), "", "r1", "x.y_Z-9")
	hdrLen := frameHead + len(headerPayload(testHdr))
	dir := t.TempDir()
	path := filepath.Join(dir, "journal")
	for k := 0; k <= len(data); k++ {
		complete := 0
		for complete < len(ends) && ends[complete] <= k {
			complete++
		}
		want := stateAfter(ops[:complete])
		good := hdrLen
		if complete > 0 {
			good = ends[complete-1]
		}
		wantDropped := k - good
		if k < hdrLen {
			wantDropped = k // a torn header: a new journal
		}
		if err := os.WriteFile(path, data[:k], 0o600); err != nil {
			t.Fatal(err)
		}
		for pass := range 2 {
			if pass == 1 && k%16 != 0 {
				break // each Open syncs: reopen a sample only
			}
			j, st, err := Open(dir, testHdr)
			if err != nil {
				t.Fatalf("cut at %d of %d, open %d: %v", k, len(data), pass, err)
			}
			j.Close()
			if !sameState(st, want) {
				t.Fatalf("cut at %d, open %d: state\n %+v\nwant the first %d records\n %+v", k, pass, st, complete, want)
			}
			if pass == 1 {
				wantDropped = 0
			}
			if st.Dropped != wantDropped {
				t.Fatalf("cut at %d, open %d: Dropped = %d, want %d", k, pass, st.Dropped, wantDropped)
			}
		}
	}
}

// TestFlipsAreRefused flips each byte of every frame but the last (one
// bit, and all bits): Open refuses with ErrCorrupt and a message that
// says what to do; it never resumes from a guess. A flip in the last
// frame may be taken for a torn write: then only that record is dropped.
func TestFlipsAreRefused(t *testing.T) {
	data, ops, ends := writeJournal(t, t.TempDir(), "", "r1", "x.y_Z-9")
	lastStart := ends[len(ends)-2]
	for k := 0; k < len(data); k++ {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			bad := bytes.Clone(data)
			bad[k] ^= mask
			var st *State
			var err error
			if mask == 0x01 {
				st, err = openFile(t, bad)
			} else {
				// Each Open syncs: the other flips go to Decode, which
				// is what Open refuses by.
				st, err = decodeState(bad)
			}
			if k < lastStart {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("flip %#x at %d of %d (last frame at %d): Open = %v, want ErrCorrupt", mask, k, len(data), lastStart, err)
				}
				if !strings.Contains(err.Error(), "move the directory aside") {
					t.Fatalf("flip at %d: error does not say what to do: %v", k, err)
				}
				continue
			}
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("flip at %d in the last frame: %v", k, err)
				}
				continue
			}
			if want := stateAfter(ops[:len(ops)-1]); !sameState(st, want) {
				t.Fatalf("flip at %d in the last frame: resumed with %+v", k, st)
			}
		}
	}
}

// decodeState is Open's load without the directory: the state in data, or
// an ErrCorrupt error.
func decodeState(data []byte) (*State, error) {
	entries, _, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v; move the directory aside", ErrCorrupt, err)
	}
	var ops []op
	pending := attempts{}
	for _, e := range entries[1:] {
		if e.Header != nil {
			return nil, fmt.Errorf("%w: a second header", ErrCorrupt)
		}
		if pending.note(e) {
			ops = append(ops, op{pre: true})
			continue
		}
		if e.Delivered != "" || e.DeliveredUnnamed {
			ops = append(ops, op{delivered: e.round(), isDeliv: true})
		} else if e.TaskTime != nil {
			ops = append(ops, op{round: e.Record.Round, tt: e.TaskTime})
		} else if e.Undo != nil {
			ops = append(ops, op{undo: true, rec: protocol.Record{Round: e.Record.Round, Ran: e.Undo.Ran, Undo: e.Undo.Undo}})
		} else {
			ops = append(ops, op{rec: pending.take(e.Record)})
		}
	}
	return stateAfter(ops), nil
}

// TestOpenLock: one process per state directory. A second Open fails with
// ErrLocked and names the holder; after Close the directory is free.
func TestOpenLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	j, _, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state directory mode %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	_, _, err = Open(dir, testHdr)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if want := fmt.Sprintf("pid %d", os.Getpid()); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second Open's error does not name the holder (%s) and the directory: %v", want, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2, _, err := Open(dir, testHdr)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	j2.Close()
	if err := j.Save([]protocol.Record{{Round: "x", State: protocol.StateSync}}); err == nil {
		t.Fatal("Save after Close succeeded")
	}
}

// TestOpenMismatch: a journal belongs to one node; another role or name is
// refused with ErrMismatch, naming both, and the journal is left alone.
func TestOpenMismatch(t *testing.T) {
	dir := t.TempDir()
	data, _, _ := writeJournal(t, dir, "r1")
	for _, h := range []Header{{Role: "tail", Name: "b"}, {Role: "middle", Name: "c"}, {Role: "middle"}} {
		_, _, err := Open(dir, h)
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("Open as %+v: %v, want ErrMismatch", h, err)
		}
		if !strings.Contains(err.Error(), `"b" (middle)`) || !strings.Contains(err.Error(), "--state-dir") {
			t.Fatalf("Open as %+v: error does not name the owner and the fix: %v", h, err)
		}
	}
	after, err := os.ReadFile(filepath.Join(dir, "journal"))
	if err != nil || !bytes.Equal(after, data) {
		t.Fatalf("a refused Open changed the journal (%v)", err)
	}
	// Garbage before any header is refused too.
	if _, err := openFile(t, append(appendFrame(nil, EncodeRecord(protocol.Record{Round: "x", State: protocol.StateSync})), data...)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a journal without a header first: %v, want ErrCorrupt", err)
	}
	if _, err := openFile(t, append(bytes.Clone(data), appendFrame(nil, headerPayload(testHdr))...)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a second header: %v, want ErrCorrupt", err)
	}
}

// TestCompaction writes 50,000 rounds (20,000 under -race), each round's
// six records, its delivery and its two task time records, and measures
// the file: compaction keeps it within a bound set by the rounds it keeps
// plus what may be appended between two compactions, whatever the number
// of rounds. A reopened journal holds the last record of every kept
// round, the newest KeepFinished finished rounds, and an unfinished round
// however old; the task times of the kept rounds, and none of the others.
func TestCompaction(t *testing.T) {
	rounds, batch := 50000, 250 // rounds per Save: one fsync each
	if raceOn {
		rounds = 20000
	}
	dir := t.TempDir()
	j, _, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	clock := testClock(0)
	j.now = func() time.Time { return clock }
	at := time.UnixMilli(clock.UnixMilli())
	// An unfinished round first: compaction must never drop it.
	old := protocol.Record{Round: "old", State: protocol.StateWatch, LocalReady: true, PredReady: true, StartRecv: true,
		LastPred: protocol.Start, LastSucc: protocol.Ready, RecvPred: protocol.Ready, RecvSucc: protocol.Start}
	if err := j.Save([]protocol.Record{old}); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, rounds)
	for i := range ids {
		ids[i] = fmt.Sprintf("round-%05d", i)
	}
	// One round's records from a real machine, the same for every round.
	template := machineRecords(t, "template")
	perRound := len(template)
	roundRecords := func(id string) (recs []protocol.Record) {
		for _, s := range template {
			for _, r := range s {
				r.Round = id
				recs = append(recs, r)
			}
		}
		return recs
	}
	last := map[string]protocol.Record{}
	var written, maxSize int64
	for b := 0; b < rounds; b += batch {
		var recs []protocol.Record
		for _, id := range ids[b : b+batch] {
			recs = append(recs, roundRecords(id)...)
		}
		for _, r := range recs {
			if r.Delivered {
				written += int64(frameHead + len("D :"+r.Round)) // only the delivery is new
			} else {
				_, lens := recordOps(r, protocol.ReceiptRecord{})
				for _, n := range lens {
					written += int64(n)
				}
			}
			if prev, ok := last[r.Round]; (r.State == protocol.StateStart) != (ok && prev.State == protocol.StateStart) {
				written += int64(frameHead + len(taskTimePayload(r.Round, r.State == protocol.StateStart, at)))
			}
			last[r.Round] = r
		}
		if err := j.Save(recs); err != nil {
			t.Fatal(err)
		}
		maxSize = max(maxSize, j.Size())
	}
	// The bound, from the compaction policy and independent of the number
	// of rounds: the kept rounds (each its last record and delivery), plus
	// what is appended before the next compaction. That happens once the
	// records appended reach compactEvery and one per round in the
	// journal; each new round here appends per = perRound+2 frames (six
	// records, a delivery and two task times) and adds one round, so at
	// most (K+1)per/(per-1) records are appended (one Save may
	// overshoot), none larger than a round record or a task time record.
	frame := func(p int) int64 { return int64(frameHead + p) }
	recFrame := frame(len(EncodeRecord(last[ids[0]])))
	timeFrame := frame(len(taskTimePayload(ids[0], true, at)))
	keptRound := recFrame + frame(len("D :"+ids[0])) + 2*timeFrame
	per := int64(perRound + 2) // frames per round: six records, a delivery, two task times
	appended := max(compactEvery, (KeepFinished+1)*per/(per-1)+1) + int64(batch)*per
	bound := frame(len(headerPayload(testHdr))) + frame(len(EncodeRecord(old))) +
		KeepFinished*keptRound + appended*max(recFrame, timeFrame)
	t.Logf("%d rounds: %d bytes written, largest file %d bytes (bound %d), final %d bytes",
		rounds, written, maxSize, bound, j.Size())
	if maxSize > bound {
		t.Fatalf("journal grew to %d bytes (bound %d, written %d)", maxSize, bound, written)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// The first Open loads every round in the file (the last record of
	// each), then compacts; the next one finds the compacted set.
	j, st, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rounds[0] != old {
		t.Fatalf("reopened: first round %+v, want the unfinished %+v", st.Rounds[0], old)
	}
	for _, r := range st.Rounds[1:] {
		if r != last[r.Round] || !r.Delivered {
			t.Fatalf("reopened: %+v, want the last record %+v, delivered", r, last[r.Round])
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, st, err = Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if size := j.Size(); size > frame(len(headerPayload(testHdr)))+frame(len(EncodeRecord(old)))+KeepFinished*keptRound {
		t.Fatalf("reopened (compacted) journal is %d bytes", size)
	}
	if len(st.Rounds) != KeepFinished+1 || st.Rounds[0] != old {
		t.Fatalf("reopened: %d rounds, first %+v; want the unfinished round and %d finished", len(st.Rounds), st.Rounds[0], KeepFinished)
	}
	for k, r := range st.Rounds[1:] {
		id := ids[rounds-KeepFinished+k]
		if r != last[id] || !r.Delivered {
			t.Fatalf("kept round %d: %+v, want the last record %+v, delivered", k, r, last[id])
		}
		if tt := st.TaskTimes[id]; !tt.Started.Equal(at) || !tt.Ended.Equal(at) {
			t.Fatalf("kept round %d: task times %+v, want started and ended at %v", k, tt, at)
		}
	}
	if len(st.TaskTimes) != KeepFinished {
		t.Fatalf("reopened: task times of %d rounds, want the %d kept finished ones (none for %q, whose task never started)", len(st.TaskTimes), KeepFinished, old.Round)
	}
}

// FuzzDecode: Decode never panics; what it accepts re-encodes to frames
// that decode to the same entries; a torn tail is only ever at the end,
// and the entries are what the data without it decodes to.
func FuzzDecode(f *testing.F) {
	data, _, ends := writeJournal(f, f.TempDir(), "", "r1", strings.Repeat("L", protocol.MaxRoundLen))
	f.Add(data)
	f.Add(data[:ends[3]])
	f.Add(data[:ends[3]+5])
	f.Add(append(bytes.Clone(data), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
	f.Add(appendFrame(nil, headerPayload(Header{Role: "head"})))
	f.Add(appendFrame(appendFrame(nil, headerPayload(testHdr)), []byte("D :")))
	f.Add(appendFrame(appendFrame(nil, headerPayload(testHdr)), []byte("R :x 9 00000 0 0 0 0")))
	f.Add(appendFrame(appendFrame(nil, headerPayload(testHdr)), []byte("R :x +1 01010 01 3 0 0")))
	f.Add(appendFrame(appendFrame(appendFrame(nil, headerPayload(testHdr)), []byte("T :x S 1780000000123")), []byte("T : E 1")))
	f.Add(appendFrame(appendFrame(nil, headerPayload(testHdr)), []byte("T :x S +0017")))
	f.Add(appendFrame(appendFrame(appendFrame(nil, headerPayload(testHdr)), []byte("F :x task-failed")), []byte("E 1780000000")))
	attempts, _, _ := writeSteps(f, f.TempDir(), attemptSteps("u1"))
	f.Add(attempts)
	f.Add(appendFrame(appendFrame(nil, headerPayload(testHdr)), []byte("S :x STEER A 17 cancel :x - why not")))
	f.Add(appendFrame(appendFrame(nil, headerPayload(testHdr)), []byte("R :x 4 1111110 2 1 3 2 7")))
	f.Add([]byte{})
	f.Add([]byte{0, 0, 2, 1, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, torn, err := Decode(data)
		if err != nil {
			if entries != nil || torn != 0 {
				t.Fatalf("error with entries or torn: %v", err)
			}
			return
		}
		if torn < 0 || torn > len(data) {
			t.Fatalf("torn = %d of %d", torn, len(data))
		}
		var again []byte
		for _, e := range entries {
			switch {
			case e.Header != nil:
				again = appendFrame(again, headerPayload(*e.Header))
			case e.Delivered != "" || e.DeliveredUnnamed:
				again = appendFrame(again, []byte("D :"+e.round()))
			case e.TaskTime != nil:
				if !protocol.ValidRound(e.Record.Round) || e.TaskTime.At.UnixMilli() <= 0 {
					t.Fatalf("accepted an impossible task time record %+v %+v", e.Record.Round, *e.TaskTime)
				}
				again = appendFrame(again, taskTimePayload(e.Record.Round, e.TaskTime.Start, e.TaskTime.At))
			case e.Undo != nil:
				again = appendFrame(again, appendUndo(nil, protocol.Record{Round: e.Record.Round, Ran: e.Undo.Ran, Undo: e.Undo.Undo}))
			case e.Attempt != nil:
				again = appendFrame(again, appendAttempt(nil, e.Record.Round, e.Attempt.Retries, e.Attempt.Prior))
			case e.Steer != nil:
				again = appendFrame(again, steerPayload(e.Record.Round, *e.Steer))
			case e.Ended != 0:
				again = appendFrame(again, []byte("E "+strconv.FormatInt(e.Ended, 10)))
			case e.FaultKind != "":
				again = appendFrame(again, []byte("F :"+e.Record.Round+" "+e.FaultKind))
			default:
				if !protocol.ValidRound(e.Record.Round) || e.Record.State < protocol.StateSync || e.Record.State > protocol.StateAborted {
					t.Fatalf("accepted an impossible record %+v", e.Record)
				}
				again = appendFrame(again, EncodeRecord(e.Record))
			}
		}
		back, torn2, err := Decode(again)
		if err != nil || torn2 != 0 || !reflect.DeepEqual(back, entries) {
			t.Fatalf("re-encoded entries decode as %+v, %d, %v; want %+v", back, torn2, err, entries)
		}
		// A torn tail is the end of the data; the entries come from the rest.
		rest, _, err := Decode(data[:len(data)-torn])
		if err != nil || !reflect.DeepEqual(rest, entries) {
			t.Fatalf("without its torn tail: %+v, %v", rest, err)
		}
	})
}

// Every record the protocol package can express (every state, every
// combination of the seven facts, every last command sent and received,
// for the unnamed, a short and a longest round id) survives the journal's
// encoding exactly: what Restore gets back is what the machine saved.
func TestRecordEncodingExhaustive(t *testing.T) {
	n := 0
	for _, id := range []string{"", "r1", strings.Repeat("L", protocol.MaxRoundLen)} {
		for st := protocol.StateSync; st <= protocol.StateAborted; st++ {
			for flags := range 128 {
				for cmds := range 256 {
					c := func(k int) protocol.Command { return protocol.Command(cmds >> (2 * k) & 3) }
					r := protocol.Record{Round: id, State: st,
						LocalReady: flags&1 != 0, PredReady: flags&2 != 0, StartRecv: flags&4 != 0,
						CompleteRecv: flags&8 != 0, ExitRecv: flags&16 != 0, Started: flags&32 != 0, Cancelled: flags&64 != 0,
						LastPred: c(0), LastSucc: c(1), RecvPred: c(2), RecvSucc: c(3)}
					p := EncodeRecord(r)
					if len(p) > maxPayload {
						t.Fatalf("%+v encodes to %d bytes, over the frame limit %d", r, len(p), maxPayload)
					}
					e, err := parsePayload(p)
					if err != nil || e.Header != nil || e.Delivered != "" || e.DeliveredUnnamed || e.Record != r {
						t.Fatalf("%+v: encoded %q, decoded %+v, %v", r, p, e, err)
					}
					n++
				}
			}
		}
	}
	t.Logf("%d records round-tripped", n)
}

// Open never follows a link in the state directory and refuses a
// directory others can write (issue: a planted lock -> victim was
// truncated, journal.tmp -> victim overwritten). docs/DESIGN.md,
// "Restarts and durable state".
func TestOpenRefusesLinksAndOpenDirs(t *testing.T) {
	hdr := Header{Role: "single", Name: "S"}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lock", "journal"} {
		dir := t.TempDir()
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Open(dir, hdr); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("%s link: Open = %v, want ErrUnsafe naming the link", name, err)
		}
	}
	dir := t.TempDir()
	if err := os.Symlink(victim, filepath.Join(dir, "journal.tmp")); err != nil {
		t.Fatal(err)
	}
	j, _, err := Open(dir, hdr)
	if err != nil {
		t.Fatalf("journal.tmp link: %v", err)
	}
	j.Close()
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("victim now holds %q", b)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o757); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(open, hdr); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "mode 0757") {
		t.Errorf("mode 0757: Open = %v, want ErrUnsafe naming the mode", err)
	}
	if err := CheckDir(open); err == nil {
		t.Error("CheckDir passed a directory others can write")
	}
}

// A delivery is the journal's form of Record.Delivered: a journal whose
// round record is followed by a delivery loads the round delivered, and
// it stays so whatever round record of that round follows (a journal
// written before the machine kept the fact reads the same way).
func TestDeliveryStaysSet(t *testing.T) {
	done := protocol.Record{Round: "r1", State: protocol.StateDone, LocalReady: true, PredReady: true, StartRecv: true,
		CompleteRecv: true, ExitRecv: true, LastPred: protocol.Complete, LastSucc: protocol.Complete,
		RecvPred: protocol.Complete, RecvSucc: protocol.Complete}
	data := appendFrame(nil, headerPayload(testHdr))
	data = appendFrame(data, EncodeRecord(done))
	data = appendFrame(data, []byte("D :r1"))
	data = appendFrame(data, EncodeRecord(done))
	st, err := openFile(t, data)
	if err != nil {
		t.Fatal(err)
	}
	want := done
	want.Delivered = true
	if len(st.Rounds) != 1 || st.Rounds[0] != want {
		t.Fatalf("loaded %+v, want %+v", st.Rounds, want)
	}
}

// The record encoding is the documented line format, byte for byte: a
// journal written by an earlier version reads back, and one written now
// reads in it. fmt is the reference here; the encoder avoids it.
func TestEncodeRecordFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	bit := func() bool { return rng.IntN(2) == 0 }
	for range 1000 {
		r := protocol.Record{Round: fmt.Sprint("r", rng.IntN(100)), State: protocol.State(1 + rng.IntN(8)),
			LocalReady: bit(), PredReady: bit(), StartRecv: bit(), CompleteRecv: bit(), ExitRecv: bit(),
			LastPred: protocol.Command(rng.IntN(4)), LastSucc: protocol.Command(rng.IntN(4)),
			RecvPred: protocol.Command(rng.IntN(4)), RecvSucc: protocol.Command(rng.IntN(4)),
			Started: rng.IntN(4) == 0, Cancelled: rng.IntN(4) == 0}
		if bit() {
			r.Seq = rng.Uint64()
		}
		flags := ""
		for _, f := range []bool{r.LocalReady, r.PredReady, r.StartRecv, r.CompleteRecv, r.ExitRecv} {
			flags += map[bool]string{false: "0", true: "1"}[f]
		}
		if r.Started || r.Cancelled { // two more digits, only then
			flags += map[bool]string{false: "0", true: "1"}[r.Started] + map[bool]string{false: "0", true: "1"}[r.Cancelled]
		}
		want := fmt.Sprintf("R :%s %d %s %d %d %d %d", r.Round, r.State, flags, r.LastPred, r.LastSucc, r.RecvPred, r.RecvSucc)
		if r.Seq != 0 {
			want += fmt.Sprintf(" %d", r.Seq)
		}
		if got := string(EncodeRecord(r)); got != want {
			t.Fatalf("EncodeRecord(%+v) = %q, want %q", r, got, want)
		}
		if got, want := appendRecordFrame([]byte("x"), r, protocol.ReceiptRecord{}), appendFrame([]byte("x"), []byte(want)); !bytes.Equal(got, want) {
			t.Fatalf("appendRecordFrame(%+v) = %q, want %q", r, got, want)
		}
	}
}
