package protocol

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
)

var commandNames = [...]string{Ready: "READY", Start: "START", Complete: "COMPLETE", Heartbeat: "HEARTBEAT"}

// String returns the command's wire spelling, e.g. "READY".
func (c Command) String() string {
	if c >= Ready && c <= Heartbeat {
		return commandNames[c]
	}
	return "Command(?)"
}

// Valid reports whether c is one of the defined commands.
func (c Command) Valid() bool { return c >= Ready && c <= Complete }

// Message is one protocol line: a command and the round it belongs to.
// The empty Round is the unnamed round.
type Message struct {
	Cmd   Command
	Round string
}

// String formats m as "READY r7" (or "READY" for the unnamed round), the
// form used by logs and golden traces.
func (m Message) String() string {
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
