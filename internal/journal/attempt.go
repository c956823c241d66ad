package journal

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// The attempt records (docs/JOURNAL.md, "Retries and cancels"): what a
// round record's line cannot hold of the protocol package's Record, its
// retries and steering lines, in frames written right BEFORE the round
// record they belong to, in the same write:
//
//	P :ROUND RETRIES PHASE ENDED HELD SENTPRED SENTSUCC FAILED KIND CODE UNDONE STOP SCODE KEPT
//	S :ROUND STEER ORIGIN AT WHAT ROUND BY[ REASON]
//
// P holds Record.Retries and Record.Prior (the undo of the attempt
// before the latest retry, spelt as the undo record spells an undo); S
// holds Record.Retry (WHAT retry) or Record.Cancel (WHAT cancel) as the
// steering line travels on the wire, without its LF. A round record takes
// the attempt records written since the round's previous round record;
// one with none has none of these facts (as every record of a journal
// written before they existed). Since they come first, a write torn
// before its round record leaves attempt records that no round record
// took: they are ignored, and the round stands as its last whole round
// record left it.
//
// Record.Started and Record.Cancelled are two more digits of the round
// record's FLAGS (journal.go).

// AttemptEntry is a decoded P record.
type AttemptEntry struct {
	Retries int
	Prior   protocol.UndoRecord
}

// maxRetries bounds RETRIES in a P record.
const maxRetries = 1 << 30

func hasAttempt(r protocol.Record) bool { return r.Retries != 0 || r.Prior != (protocol.UndoRecord{}) }

// appendAttemptFrames appends r's attempt records, those it needs, to b.
func appendAttemptFrames(b []byte, r protocol.Record) []byte {
	if hasAttempt(r) {
		b = appendFrame(b, appendAttempt(nil, r.Round, r.Retries, r.Prior))
	}
	for _, s := range [...]protocol.Steer{r.Retry, r.Cancel} {
		if s.What != 0 { // What 0: no line
			b = appendFrame(b, steerPayload(r.Round, s))
		}
	}
	return b
}

func appendAttempt(b []byte, round string, retries int, prior protocol.UndoRecord) []byte {
	return appendUndoFields(b, "P", round, strconv.Itoa(retries), prior)
}

func steerPayload(round string, s protocol.Steer) []byte {
	b := append([]byte("S :"+round+" "), wire.Append(nil, protocol.Message{Cmd: protocol.SteerLine, Steer: &s}, true)...)
	return b[:len(b)-1] // without its LF
}

func parseAttempt(s string, f []string) (Entry, error) {
	if len(f) != 15 {
		return Entry{}, fmt.Errorf("bad attempt record %q", s)
	}
	id, retries, u, err := parseUndoFields(s, f)
	if err != nil {
		return Entry{}, err
	}
	n, err := strconv.Atoi(retries)
	if err != nil || n < 0 || n > maxRetries || strconv.Itoa(n) != retries {
		return Entry{}, fmt.Errorf("bad retry count %q in %q", retries, s)
	}
	return Entry{Record: protocol.Record{Round: id}, Attempt: &AttemptEntry{Retries: n, Prior: u}}, nil
}

func parseSteerRecord(s string, f []string) (Entry, error) {
	if len(f) < 3 {
		return Entry{}, fmt.Errorf("bad steering record %q", s)
	}
	id, ok := strings.CutPrefix(f[1], ":")
	if !ok || !protocol.ValidRound(id) {
		return Entry{}, fmt.Errorf("bad round field %q", f[1])
	}
	line := s[len("S :")+len(id)+1:]
	if strings.HasSuffix(line, "\r") {
		return Entry{}, fmt.Errorf("bad steering line in %q", s)
	}
	m, err := wire.ParseExtensions([]byte(line))
	if err != nil || m.Cmd != protocol.SteerLine || m.Steer == nil {
		return Entry{}, fmt.Errorf("bad steering line in %q", s)
	}
	if w := m.Steer.What; w != protocol.SteerRetry && w != protocol.SteerCancel {
		return Entry{}, fmt.Errorf("steering record %q is neither a retry nor a cancel", s)
	}
	return Entry{Record: protocol.Record{Round: id}, Steer: m.Steer}, nil
}

// attempts holds, per round, the attempt records read since its last
// round record: the next round record of the round takes them.
type attempts map[string]protocol.Record

// note keeps e if it is an attempt record, and says whether it was.
func (a attempts) note(e Entry) bool {
	if e.Attempt == nil && e.Steer == nil {
		return false
	}
	p := a[e.Record.Round]
	switch {
	case e.Attempt != nil:
		p.Retries, p.Prior = e.Attempt.Retries, e.Attempt.Prior
	case e.Steer.What == protocol.SteerRetry:
		p.Retry = *e.Steer
	default:
		p.Cancel = *e.Steer
	}
	a[e.Record.Round] = p
	return true
}

// take gives r, a round record just read, the attempt records written
// before it.
func (a attempts) take(r protocol.Record) protocol.Record {
	p, ok := a[r.Round]
	if ok {
		r.Retries, r.Prior, r.Retry, r.Cancel = p.Retries, p.Prior, p.Retry, p.Cancel
		delete(a, r.Round)
	}
	return r
}
