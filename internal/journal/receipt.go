package journal

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/chainsync-go/chainsync/protocol"
)

// The receipt records (docs/JOURNAL.md, "Receipts"): the protocol
// package's Record.Receipt, in frames written right BEFORE the round
// record they belong to, in the same write, and only when it changed
// since the round's previous round record:
//
//	K :ROUND OUTCOME STATUS PRED HANDED KEEP
//	O :ROUND DIGEST ENVELOPE
//	O :ROUND -
//	A :ROUND NODE DIGEST ENVELOPE
//
// K gives Outcome ("-" for none), Status, Pred ("-" for none) and Handed,
// and keeps the first KEEP receipts of After; O gives this node's own
// receipt (or none); each A appends one receipt to After. Unlike the
// attempt records, receipts carry over: a round record with no receipt
// records before it has the receipts of the round's previous round
// record, so a round record written as its round's receipts stand still
// costs nothing more. A write torn before its round record leaves
// receipt records that no round record took: they are ignored.

// ReceiptEntry is a decoded K, O or A record.
type ReceiptEntry struct {
	Kind             byte // 'K', 'O' or 'A'
	Outcome          protocol.ReceiptOutcome
	Status, Handed   int
	Keep             int
	Pred             string
	Node             string
	Digest, Envelope string
}

// maxCount bounds STATUS, HANDED and KEEP.
const maxCount = 1 << 30

// appendReceiptFrames appends the receipt records that turn prev into
// r.Receipt (nothing when they are the same) to b.
func appendReceiptFrames(b []byte, round string, rc, prev protocol.ReceiptRecord) []byte {
	if rc == prev {
		return b
	}
	was, now := afterLines(prev.After), afterLines(rc.After)
	keep := 0
	for keep < len(was) && keep < len(now) && was[keep] == now[keep] {
		keep++
	}
	b = appendFrame(b, []byte("K :"+round+" "+orDash(string(rc.Outcome))+" "+strconv.Itoa(rc.Status)+" "+
		orDash(rc.Pred)+" "+strconv.Itoa(rc.Handed)+" "+strconv.Itoa(keep)))
	if rc.Digest != prev.Digest || rc.Envelope != prev.Envelope {
		if rc.Digest == "" {
			b = appendFrame(b, []byte("O :"+round+" -"))
		} else {
			b = appendFrame(b, []byte("O :"+round+" "+rc.Digest+" "+rc.Envelope))
		}
	}
	for _, l := range now[keep:] {
		b = appendFrame(b, []byte("A :"+round+" "+l))
	}
	return b
}

// afterLines splits a ReceiptRecord.After into its lines, without LFs.
func afterLines(after string) []string {
	var ls []string
	for l := range strings.Lines(after) {
		ls = append(ls, strings.TrimSuffix(l, "\n"))
	}
	return ls
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func parseReceipt(s string, f []string) (Entry, error) {
	bad := func() (Entry, error) { return Entry{}, fmt.Errorf("bad receipt record %q", s) }
	if len(f) < 3 {
		return bad()
	}
	id, ok := strings.CutPrefix(f[1], ":")
	if !ok || !protocol.ValidRound(id) {
		return Entry{}, fmt.Errorf("bad round field %q", f[1])
	}
	e := ReceiptEntry{Kind: f[0][0]}
	num := func(field string, lo int) (int, bool) {
		v, err := strconv.Atoi(field)
		return v, err == nil && v >= lo && v <= maxCount && strconv.Itoa(v) == field
	}
	switch {
	case f[0] == "K" && len(f) == 7:
		var ok1, ok2, ok3 bool
		e.Status, ok1 = num(f[3], -1)
		e.Handed, ok2 = num(f[5], 0)
		e.Keep, ok3 = num(f[6], 0)
		if f[2] != "-" {
			e.Outcome = protocol.ReceiptOutcome(f[2])
		}
		if f[4] != "-" {
			e.Pred = f[4]
		}
		if !ok1 || !ok2 || !ok3 || !validOutcome(e.Outcome) || e.Pred != "" && !hex64(e.Pred) {
			return bad()
		}
	case f[0] == "O" && len(f) == 3 && f[2] == "-":
	case f[0] == "O" && len(f) == 4:
		e.Digest, e.Envelope = f[2], f[3]
		if !hex64(e.Digest) || !printableEnvelope(e.Envelope) {
			return bad()
		}
	case f[0] == "A" && len(f) == 5:
		e.Node, e.Digest, e.Envelope = f[2], f[3], f[4]
		if e.Node == "" || e.Node == "-" || protocol.NoticeName(e.Node) != e.Node || !hex64(e.Digest) || !printableEnvelope(e.Envelope) {
			return bad()
		}
	default:
		return bad()
	}
	return Entry{Record: protocol.Record{Round: id}, Receipt: &e}, nil
}

func validOutcome(o protocol.ReceiptOutcome) bool {
	switch o {
	case "", protocol.ReceiptRanOK, protocol.ReceiptFailed, protocol.ReceiptTimedOut, protocol.ReceiptDenied,
		protocol.ReceiptSkipped, protocol.ReceiptUndone, protocol.ReceiptUndoFailed, protocol.ReceiptNotReached:
		return true
	}
	return false
}

func hex64(d string) bool {
	if len(d) != 64 {
		return false
	}
	return strings.Trim(d, "0123456789abcdef") == ""
}

func printableEnvelope(e string) bool {
	if len(e) == 0 || len(e) > protocol.MaxReceiptEnvelope {
		return false
	}
	for i := 0; i < len(e); i++ {
		if c := e[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// receiptChanges holds, per round, the receipt records read since its
// last round record.
type receiptChanges map[string][]ReceiptEntry

// note keeps e if it is a receipt record, and says whether it was.
func (c receiptChanges) note(e Entry) bool {
	if e.Receipt == nil {
		return false
	}
	c[e.Record.Round] = append(c[e.Record.Round], *e.Receipt)
	return true
}

// take gives r, a round record just read, its receipts: prev (those of
// the round's previous round record) changed by the receipt records
// written before it. A K record keeping more of After than there is is
// damage.
func (c receiptChanges) take(r protocol.Record, prev protocol.ReceiptRecord) (protocol.Record, error) {
	r.Receipt = prev
	es, ok := c[r.Round]
	if !ok {
		return r, nil
	}
	delete(c, r.Round)
	rc := &r.Receipt
	for _, e := range es {
		switch e.Kind {
		case 'K':
			ls := afterLines(rc.After)
			if e.Keep > len(ls) {
				return r, fmt.Errorf("a receipt record of round %q keeps %d receipts of %d", r.Round, e.Keep, len(ls))
			}
			rc.Outcome, rc.Status, rc.Pred, rc.Handed = e.Outcome, e.Status, e.Pred, e.Handed
			rc.After = ""
			for _, l := range ls[:e.Keep] {
				rc.After += l + "\n"
			}
		case 'O':
			rc.Digest, rc.Envelope = e.Digest, e.Envelope
		case 'A':
			rc.After += e.Node + " " + e.Digest + " " + e.Envelope + "\n"
		}
	}
	return r, nil
}
