package protocol

import "strconv"

// Command is one of the draft's three message commands.
type Command uint8

// The commands defined by the draft (section "Message Types").
const (
	Ready    Command = iota + 1 // READY: the chain to the left is ready (forward wave)
	Start                       // START: the whole chain is ready (backward wave)
	Complete                    // COMPLETE: execution trigger (forward) and exit wave (backward)
	// Heartbeat is the project's extension (docs/DESIGN.md, "Heartbeats"):
	// a line on an idle link that belongs to no round and changes no
	// state. It is never a round's message: Valid reports false for it.
	Heartbeat
	// FaultNotice is the project's second extension line: a fault one
	// node reported, travelling along the chain (Message.Note says
	// which). Like Heartbeat it is spoken only by nodes with extensions
	// on, and Valid reports false for it.
	FaultNotice
)

var commandNames = [...]string{Ready: "READY", Start: "START", Complete: "COMPLETE", Heartbeat: "HEARTBEAT", FaultNotice: "FAULT"}

// String returns the command's wire spelling, e.g. "READY".
func (c Command) String() string {
	if c >= Ready && c <= FaultNotice {
		return commandNames[c]
	}
	if c == SteerLine {
		return "STEER"
	}
	if c == Grace {
		return "GRACE"
	}
	if s, ok := undoName(c); ok {
		return s
	}
	switch c {
	case RDigestLine:
		return "RDIGEST"
	case ReceiptLine:
		return "RECEIPT"
	}
	return "Command(?)"
}

// Valid reports whether c is one of the defined commands.
func (c Command) Valid() bool { return c >= Ready && c <= Complete }

// Message is one protocol line: a command and the round it belongs to.
// The empty Round is the unnamed round. A FaultNotice carries its fields
// in Note (and leaves Round empty).
type Message struct {
	Cmd   Command
	Round string
	Note  *Notice    // FaultNotice only
	Steer *Steer     // SteerLine only
	Grace *GraceNote // Grace only
	Undo  *Wave      // UndoLine and UndoEnd only (undo.go)
	// Receipt: RDigestLine and ReceiptLine only (receipt.go).
	Receipt *ReceiptNote
}

// String formats m as "READY r7" (or "READY" for the unnamed round), the
// form used by logs and golden traces.
func (m Message) String() string {
	if m.Cmd == FaultNotice && m.Note != nil {
		return "FAULT " + m.Note.String()
	}
	if m.Cmd == Grace && m.Grace != nil {
		return "GRACE " + m.Grace.String()
	}
	if m.Cmd == SteerLine && m.Steer != nil {
		return "STEER " + m.Steer.String()
	}
	if (m.Cmd == RDigestLine || m.Cmd == ReceiptLine) && m.Receipt != nil {
		return m.Cmd.String() + " " + roundText(m.Round) + ": " + m.Receipt.String()
	}
	if m.Cmd.IsUndo() && m.Undo != nil {
		return m.Cmd.String() + " " + roundText(m.Round) + ": " + m.Undo.String()
	}
	if m.Round == "" {
		return m.Cmd.String()
	}
	return m.Cmd.String() + " " + m.Round
}

// MaxRoundLen is the longest round id docs/DESIGN.md allows.
const MaxRoundLen = 128

// ValidRound reports whether id is a legal round id: empty (the unnamed
// round) or 1..128 characters of ALPHA, DIGIT, "-", "_" or ".".
func ValidRound[T ~string | ~[]byte](id T) bool {
	if len(id) > MaxRoundLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !roundByte(id[i]) {
			return false
		}
	}
	return true
}

func roundByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.'
}

// Side names one of a node's two neighbours.
type Side uint8

// The two neighbours of a node.
const (
	Pred Side = iota + 1 // the predecessor (towards the Head)
	Succ                 // the successor (towards the Tail)
)

// String returns "pred" or "succ".
func (s Side) String() string {
	switch s {
	case Pred:
		return "pred"
	case Succ:
		return "succ"
	}
	return "Side(?)"
}

// Notice is a fault notice (docs/DESIGN.md, "Extension lines"): the node
// Origin reported a fault of Kind in a round (or in none), blaming the
// node Blamed (or none). Every node passes a notice on away from the side
// it came from, once; what a notice does at a node is the driver's fault
// policy, not the machine's.
type Notice struct {
	HasRound bool   // false: the fault is about no round in particular
	Round    string // the round, if HasRound ("" is the unnamed round)
	Kind     string // the fault kind, e.g. "peer-silent" (1..MaxNoticeKind of a-z 0-9 -)
	Origin   string // the node that reported the fault (a NoticeName)
	Blamed   string // the node it blames, "" for none (a NoticeName)
	// Attempt is the round's attempt the fault is of, as the retries
	// that had reopened the round at Origin when it was reported (0: the
	// first attempt, or a node that does not say; only with HasRound): a
	// node where more retries reopened the round takes it as of an
	// attempt before, which ends nothing there.
	Attempt int
	// Why is the origin's words for the fault, e.g. its failed task's
	// error ("disk full"); "" says nothing. Printable ASCII, no leading or
	// trailing space (WithWhy makes it so); every node passes it on as it
	// came.
	Why string
}

// Bounds of a notice's fields, so that the whole line stays within the
// wire's 256 bytes.
const (
	MaxNoticeKind    = 24
	MaxNoticeName    = 40
	MaxNoticeAttempt = 999999
)

// String formats n as "peer-silent by C blames B round r7", for logs and
// golden traces.
func (n Notice) String() string {
	s := n.Kind + " by " + n.Origin
	if n.Blamed != "" {
		s += " blames " + n.Blamed
	}
	if n.HasRound {
		if n.Round == "" {
			s += " round (unnamed)"
		} else {
			s += " round " + n.Round
		}
	}
	if n.Attempt > 0 {
		s += " retry " + strconv.Itoa(n.Attempt)
	}
	if n.Why != "" {
		s += ": " + n.Why
	}
	return s
}

// Valid reports whether n can travel on the wire: a legal round, a kind of
// lower-case letters, digits and dashes, an origin and an optional blamed
// node that are NoticeNames.
func (n Notice) Valid() bool {
	if !ValidRound(n.Round) || !n.HasRound && n.Round != "" {
		return false
	}
	if n.Attempt < 0 || n.Attempt > MaxNoticeAttempt || n.Attempt > 0 && !n.HasRound {
		return false
	}
	if len(n.Kind) == 0 || len(n.Kind) > MaxNoticeKind {
		return false
	}
	for i := 0; i < len(n.Kind); i++ {
		if c := n.Kind[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return n.Origin != "" && NoticeName(n.Origin) == n.Origin && NoticeName(n.Blamed) == n.Blamed && validWhy(n.Why)
}

// minWhyCut is the fewest bytes of words WithWhy keeps when it cuts them.
const minWhyCut = 8

// trimSpace drops b's trailing spaces (WithWhy writes no leading one).
func trimSpace(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

// validWhy reports whether s can be a notice's Why: "", or printable
// ASCII that neither starts nor ends with a space.
func validWhy(s string) bool {
	if s == "" {
		return true
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Len is the length of n's line on the wire, without its LF.
func (n Notice) Len() int {
	k := len("FAULT ") + 1 + len(n.Round) + 1 + len(n.Kind) + 1 + len(n.Origin) + 1 + max(len(n.Blamed), 1)
	if n.Attempt > 0 {
		k += 1 + len(strconv.Itoa(n.Attempt))
	}
	if n.Why != "" {
		k += len(" : ") + len(n.Why)
	}
	return k
}

// WithWhy returns n with text as its Why, made fit to travel: every
// control byte and every byte beyond ASCII replaced ("?", a run of
// spaces, tabs and line ends one space), no space at either end, and cut
// (ending "...") so that the whole line is at most limit bytes; no Why
// if it would have to be cut to fewer than minWhyCut bytes.
func (n Notice) WithWhy(text string, limit int) Notice {
	b := make([]byte, 0, min(len(text), limit))
	for i := 0; i < len(text) && len(b) <= limit; i++ {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
			if len(b) > 0 && b[len(b)-1] != ' ' {
				b = append(b, ' ')
			}
		case c < 0x20 || c == 0x7f:
			b = append(b, '?')
		case c >= 0x80:
			// One "?" per character: skip its continuation bytes.
			for i+1 < len(text) && text[i+1]&0xc0 == 0x80 {
				i++
			}
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	n.Why = ""
	room := limit - n.Len() - len(" : ")
	b = trimSpace(b)
	if len(b) > room {
		if room < len("...")+minWhyCut {
			return n // a stub of words says less than none
		}
		b = append(trimSpace(b[:room-3]), "..."...)
	}
	n.Why = string(b)
	return n
}

// NoticeName returns s as a notice may carry it: at most MaxNoticeName
// bytes of A-Z a-z 0-9 - _ . : @ [ ], every other byte replaced by "_".
// A node's name in a notice is a label for people; the notice's identity
// does not depend on it being unique.
func NoticeName(s string) string {
	ok := len(s) <= MaxNoticeName
	for i := 0; ok && i < len(s); i++ {
		ok = noticeNameByte(s[i])
	}
	if ok {
		return s
	}
	b := []byte(s[:min(len(s), MaxNoticeName)])
	for i, c := range b {
		if !noticeNameByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

func noticeNameByte(c byte) bool {
	return roundByte(c) || c == ':' || c == '@' || c == '[' || c == ']'
}
