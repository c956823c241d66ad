package journal

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/chainsync-go/chainsync/protocol"
)

// The undo record (docs/UNDO.md, "Durable"): written right after a round
// record whose round's task succeeded here or whose undo wave is under
// way, it holds the protocol package's Record.Ran and Record.Undo:
//
//	U :ROUND RAN PHASE ENDED HELD SENTPRED SENTSUCC FAILED KIND CODE UNDONE STOP SCODE KEPT
//
// RAN and ENDED are 0 or 1; PHASE, HELD and the two commands decimal
// numbers of the protocol package's UndoPhase, Outcome and Command; the
// rest the fields of the undo wave as its lines spell them
// (docs/PROTOCOL.md, "The undo wave"), FAILED and KIND "-" when the round
// has not failed. It belongs to the round record before it.

// UndoEntry is a decoded undo record.
type UndoEntry struct {
	Ran  bool
	Undo protocol.UndoRecord
}

func hasUndo(r protocol.Record) bool { return r.Ran || r.Undo != (protocol.UndoRecord{}) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func undash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

func appendUndo(b []byte, r protocol.Record) []byte {
	return appendUndoFields(b, "U", r.Round, bit(r.Ran), r.Undo)
}

func bit(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

// appendUndoFields appends "TAG :ROUND FIRST" and u's fields as the undo
// record spells them (the attempt record uses them too: attempt.go).
func appendUndoFields(b []byte, tag, round, first string, u protocol.UndoRecord) []byte {
	w := u.Wave
	list := func(s string, n int) string {
		if n < 0 {
			return "-"
		}
		if s == "" {
			return strconv.Itoa(n)
		}
		return strconv.Itoa(n) + "," + s
	}
	f := []string{tag, ":" + round, first, strconv.Itoa(int(u.Phase)), bit(u.Ended), strconv.Itoa(int(u.Held)),
		strconv.Itoa(int(u.SentPred)), strconv.Itoa(int(u.SentSucc)), dash(w.Failed), dash(w.Kind), strconv.Itoa(w.Code),
		list(w.Undone, w.UndoneN), dash(w.Stop), strconv.Itoa(w.StopCode), list(w.Kept, w.KeptN)}
	return append(b, strings.Join(f, " ")...)
}

// appendUndoFrame appends r's undo record, if it needs one, to b.
func appendUndoFrame(b []byte, r protocol.Record) []byte {
	if !hasUndo(r) {
		return b
	}
	return appendFrame(b, appendUndo(nil, r))
}

func parseUndo(s string, f []string) (Entry, error) {
	if len(f) != 15 {
		return Entry{}, fmt.Errorf("bad undo record %q", s)
	}
	id, ran, u, err := parseUndoFields(s, f)
	if err != nil {
		return Entry{}, err
	}
	return Entry{Record: protocol.Record{Round: id}, Undo: &UndoEntry{Ran: ran == "1", Undo: u}}, nil
}

// parseUndoFields parses the 15 fields of an undo (or attempt) record:
// the round, the third field as it is, and the undo.
func parseUndoFields(s string, f []string) (id, first string, u protocol.UndoRecord, err error) {
	id, ok := strings.CutPrefix(f[1], ":")
	if !ok || !protocol.ValidRound(id) {
		return "", "", u, fmt.Errorf("bad round field %q", f[1])
	}
	var bad error
	num := func(field string, lo, hi int) int {
		v, err := strconv.Atoi(field)
		if err != nil || v < lo || v > hi {
			bad = fmt.Errorf("bad number %q in %q", field, s)
		}
		return v
	}
	list := func(field string) (string, int) {
		if field == "-" {
			return "", -1
		}
		n, rest, _ := strings.Cut(field, ",")
		return rest, num(n, 0, protocol.MaxUndoCount)
	}
	u.Phase = protocol.UndoPhase(num(f[3], 0, int(protocol.PhaseKept)))
	u.Ended = f[4] == "1"
	u.Held = protocol.Outcome(num(f[5], 0, 255))
	u.SentPred = protocol.Command(num(f[6], 0, 255))
	u.SentSucc = protocol.Command(num(f[7], 0, 255))
	w := &u.Wave
	w.Failed, w.Kind = undash(f[8]), undash(f[9])
	w.Code = num(f[10], protocol.CodeTimeout, protocol.MaxUndoCode)
	w.Undone, w.UndoneN = list(f[11])
	w.Stop = undash(f[12])
	w.StopCode = num(f[13], protocol.CodeTimeout, protocol.MaxUndoCode)
	w.Kept, w.KeptN = list(f[14])
	if bad != nil {
		return "", "", protocol.UndoRecord{}, bad
	}
	return id, f[2], u, nil
}

// mergeUndo puts an undo record's fields into the round's last record.
func mergeUndo(last map[string]protocol.Record, e Entry) {
	if r, ok := last[e.Record.Round]; ok {
		r.Ran, r.Undo = e.Undo.Ran, e.Undo.Undo
		last[r.Round] = r
	}
}
