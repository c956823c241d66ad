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

// Tests of the receipt records (docs/JOURNAL.md, "Receipts"; the draft's
// section 7, security considerations, as docs/RECEIPTS.md extends it): a
// node's receipts, its own and those of the nodes after it, are kept with
// the round, survive a torn write, damage and compaction, and a journal
// without them reads as before.

// envelope returns a printable stand-in for a DSSE envelope of n bytes.
func envelope(tag byte, n int) string {
	return `{"payloadType":"` + strings.Repeat(string(tag), n) + `"}`
}

// receiptSteps returns the records a middle node B of the chain A,B,C,D
// saves for round id as its receipts come: the predecessor's digest, its
// task's outcome, its own receipt signed, C's and D's receipts from the
// exit wave, each handed back to A. big makes B's envelope longer than an
// old frame could hold.
func receiptSteps(id string, big bool) [][]protocol.Record {
	n := 40
	if big {
		n = 3000
	}
	base := protocol.Record{Round: id, State: protocol.StateStart, LocalReady: true, PredReady: true, StartRecv: true,
		CompleteRecv: true, LastPred: protocol.Start, LastSucc: protocol.Ready, RecvPred: protocol.Complete,
		RecvSucc: protocol.Start, Seq: 3, Started: true}
	pred := base
	pred.Receipt = protocol.ReceiptRecord{Status: 0, Pred: strings.Repeat("a", 64)}
	ran := pred
	ran.State, ran.LastSucc = protocol.StateComplete, protocol.Complete
	ran.Receipt.Outcome, ran.Receipt.Status = protocol.ReceiptRanOK, -1
	signed := ran
	signed.Receipt.Digest, signed.Receipt.Envelope = strings.Repeat("b", 64), envelope('B', n)
	c := signed
	c.Receipt.After = "C " + strings.Repeat("c", 64) + " " + envelope('C', 40) + "\n"
	d := c
	d.State, d.ExitRecv, d.RecvSucc = protocol.StateDone, true, protocol.Complete
	d.Receipt.After += "D " + strings.Repeat("d", 64) + " " + envelope('D', 40) + "\n"
	handed := d
	handed.Receipt.Handed = 3
	return [][]protocol.Record{{base}, {pred}, {ran}, {signed}, {c}, {d}, {handed}}
}

// A journal of rounds with receipts, cut at every byte offset: each cut
// opens with exactly the rounds its whole frames make up (receipt records
// without their round record change nothing), and a reopened node gets
// back every receipt it saved.
func TestReceiptsTruncateEveryOffset(t *testing.T) {
	var steps [][]protocol.Record
	for _, id := range []string{"", "q1"} {
		steps = append(steps, receiptSteps(id, id == "")...)
	}
	data, ops, ends := writeSteps(t, t.TempDir(), steps)
	if !bytes.Contains(data, []byte("K :q1 ran-ok -1 "+strings.Repeat("a", 64)+" 0 0")) ||
		!bytes.Contains(data, []byte("A :q1 D "+strings.Repeat("d", 64)+" ")) {
		t.Fatalf("journal lacks the documented receipt records:\n%q", data)
	}
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
	st, err := openFile(t, data)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range st.Rounds {
		if want := steps[7*i+6][0]; !reflect.DeepEqual(r, want) {
			t.Fatalf("round %d reopened as\n %+v\nwant\n %+v", i, r, want)
		}
	}
}

// A byte flipped anywhere before the last frame of a journal with
// receipts is damage: Open refuses it and never resumes from a guess.
func TestReceiptFlipsAreRefused(t *testing.T) {
	data, _, ends := writeSteps(t, t.TempDir(), receiptSteps("q1", false))
	lastStart := ends[len(ends)-2]
	for k := frameHead + len(headerPayload(testHdr)); k < lastStart; k++ {
		bad := bytes.Clone(data)
		bad[k] ^= 0x01
		if _, err := decodeState(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at %d of %d: %v, want ErrCorrupt", k, len(data), err)
		}
	}
}

// Compaction keeps the receipts of the rounds it keeps, whole.
func TestReceiptsSurviveCompaction(t *testing.T) {
	dir := t.TempDir()
	j, _, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	j.SetKeepFinished(2)
	var want []protocol.Record
	for _, id := range []string{"q1", "q2", "q3"} {
		for _, s := range receiptSteps(id, id == "q3") {
			if err := j.Save(s); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, receiptSteps(id, id == "q3")[6][0])
	}
	if err := j.compact(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	data, err := os.ReadFile(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("O :q3 "+strings.Repeat("b", 64)+" ")) || bytes.Contains(data, []byte(":q1")) {
		t.Fatalf("compacted journal lacks q3's receipt or kept q1:\n%q", data)
	}
	for pass := range 2 {
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

// A record whose receipts shrink (After cut back, the own receipt gone)
// is written as such, not merged with what came before.
func TestReceiptsShrink(t *testing.T) {
	steps := receiptSteps("q1", false)
	back := steps[6][0]
	back.Receipt.After = back.Receipt.After[:strings.Index(back.Receipt.After, "\n")+1]
	back.Receipt.Digest, back.Receipt.Envelope, back.Receipt.Outcome = "", "", ""
	steps = append(steps, []protocol.Record{back})
	data, _, _ := writeSteps(t, t.TempDir(), steps)
	st, err := openFile(t, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rounds) != 1 || !reflect.DeepEqual(st.Rounds[0], back) {
		t.Fatalf("reopened as %+v, want %+v", st.Rounds, back)
	}
}

// Bad receipt records are damage, never guessed at.
func TestReceiptRecordsRefused(t *testing.T) {
	h := strings.Repeat("e", 64)
	for _, p := range []string{
		"K :r1 ran-ok -1 - 0",                 // no KEEP
		"K :r1 ran-well -1 - 0 0",             // no such outcome
		"K :r1 ran-ok -2 - 0 0",               // status below -1
		"K :r1 ran-ok -1 abc 0 0",             // not a digest
		"K :r1 ran-ok -1 - 01 0",              // not canonical
		"K :r1 ran-ok -1 - 0 1",               // keeps a receipt there is not
		"O :r1 " + h,                          // no envelope
		"O :r1 " + strings.ToUpper(h) + " {}", // upper-case digest
		"A :r1 - " + h + " {}",                // no node name
		"A :r1 C " + h,                        // no envelope
		"A r1 C " + h + " {}",                 // round without its colon
		"O :r1 " + h + " " + strings.Repeat("x", protocol.MaxReceiptEnvelope+1),
	} {
		data := appendFrame(appendFrame(nil, headerPayload(testHdr)), []byte(p))
		data = appendFrame(data, []byte("R :r1 1 10000 0 0 0 0"))
		if _, err := openFile(t, data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%q: Open = %v, want ErrCorrupt", p, err)
		}
	}
}
