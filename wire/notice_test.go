package wire_test

import (
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// docs/PROTOCOL.md, "Fault notices": the origin's words for a fault travel
// as the notice's last field, after " : ", with or without a retry before
// them, and come back from the wire as they went.
func TestNoticeWhyRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		n    protocol.Notice
		want string
	}{
		{protocol.Notice{HasRound: true, Round: "r3", Kind: "task-failed", Origin: "C", Blamed: "C", Why: "disk full"},
			"FAULT :r3 task-failed C C : disk full\n"},
		{protocol.Notice{HasRound: true, Round: "u1", Kind: "task-failed", Origin: "C", Blamed: "C", Attempt: 2, Why: "task exited 7"},
			"FAULT :u1 task-failed C C 2 : task exited 7\n"},
		{protocol.Notice{HasRound: true, Kind: "task-timeout", Origin: ":", Blamed: ":", Why: ": 12 : x"},
			"FAULT : task-timeout : : : : 12 : x\n"},
		{protocol.Notice{Kind: "peer-silent", Origin: "C", Blamed: "B"}, // no words: no field, as before
			"FAULT - peer-silent C B\n"},
	} {
		m := protocol.Message{Cmd: protocol.FaultNotice, Note: &tc.n}
		if !wire.Valid(m) {
			t.Errorf("Valid(%+v) = false", tc.n)
		}
		got := wire.Append(nil, m, false)
		if string(got) != tc.want {
			t.Errorf("Append(%+v) = %q, want %q", tc.n, got, tc.want)
		}
		back, err := wire.ParseExtensions(got[:len(got)-1])
		if err != nil || back.Note == nil || *back.Note != tc.n {
			t.Errorf("round trip of %q: %+v, %v", got, back.Note, err)
		}
	}
}

// docs/PROTOCOL.md, "Fault notices": lines whose words are not the
// grammar's are refused, each with a ProtocolError.
func TestNoticeWhyMalformed(t *testing.T) {
	for _, line := range []string{
		"FAULT :r3 task-failed C C :",            // the marker without words
		"FAULT :r3 task-failed C C : ",           // words of nothing
		"FAULT :r3 task-failed C C :disk full",   // no space after the marker
		"FAULT :r3 task-failed C C :  disk full", // a leading space
		"FAULT :r3 task-failed C C : disk full ", // a trailing space
		"FAULT :r3 task-failed C C disk full",    // no marker
		"FAULT :r3 task-failed C C 2 ",           // a retry, then a space at the end
		"FAULT :r3 task-failed C C 2 3 : x",      // two retries
		"FAULT :r3 task-failed C C 2 x",          // not the marker after the retry
		"FAULT :r3 task-failed C C : caf\xc3\xa9",
		"FAULT :r3 task-failed C C : a\tb",
		"FAULT :r3 task-failed C C : " + strings.Repeat("x", wire.MaxLine), // beyond the line bound
	} {
		if m, err := wire.ParseExtensions([]byte(line)); err == nil {
			t.Errorf("ParseExtensions(%q) = %+v, want an error", line, m.Note)
		}
	}
}

// docs/PROTOCOL.md, "Fault notices": WithWhy makes any text fit to travel:
// printable ASCII, no space at either end, and cut so that the longest
// notice's line stays within MaxLine.
func TestNoticeWithWhy(t *testing.T) {
	base := protocol.Notice{HasRound: true, Round: "r3", Kind: "task-failed", Origin: "C", Blamed: "C"}
	for _, tc := range []struct{ text, want string }{
		{"disk full", "disk full"},
		{"  disk\tfull\r\n", "disk full"},
		{"line one\nline two", "line one line two"},
		{"caf\u00e9 \u2603!", "caf? ?!"},
		{"bell\a esc\x1b[31m", "bell? esc?[31m"},
		{"\xff\xfe", "??"},
		{"", ""},
		{" \n\t ", ""},
	} {
		if got := base.WithWhy(tc.text, wire.MaxLine).Why; got != tc.want {
			t.Errorf("WithWhy(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
	// Long words are cut to the line, ending "...".
	long := base.WithWhy(strings.Repeat("word ", 100), wire.MaxLine)
	if line := wire.Append(nil, protocol.Message{Cmd: protocol.FaultNotice, Note: &long}, false); len(line)-1 > wire.MaxLine || len(line)-1 < wire.MaxLine-1 ||
		!strings.HasSuffix(long.Why, "...") || strings.Contains(long.Why, " ...") {
		t.Errorf("long words: %d bytes, %q", len(line)-1, long.Why)
	}
	// The longest notice has room for four bytes of words: short words
	// go whole, longer ones not at all (a stub says less than nothing).
	big := protocol.Notice{HasRound: true, Round: strings.Repeat("a", 128), Kind: strings.Repeat("k", 24),
		Origin: strings.Repeat("o", 40), Blamed: strings.Repeat("b", 40), Attempt: 999999}
	for _, text := range []string{"x", "disk full", strings.Repeat("y", 1000)} {
		n := big.WithWhy(text, wire.MaxLine)
		m := protocol.Message{Cmd: protocol.FaultNotice, Note: &n}
		line := wire.Append(nil, m, false)
		if !wire.Valid(m) || len(line)-1 > wire.MaxLine {
			t.Fatalf("WithWhy(%q) on the longest notice: %q (%d bytes), valid %v", text, line, len(line)-1, wire.Valid(m))
		}
		back, err := wire.ParseExtensions(line[:len(line)-1])
		if err != nil || *back.Note != n {
			t.Fatalf("round trip of %q: %+v, %v", line, back.Note, err)
		}
	}
	if n := big.WithWhy("x", wire.MaxLine); n.Why != "x" {
		t.Errorf("one byte on the longest notice: %q, want it kept", n.Why)
	}
	if n := big.WithWhy("disk full", wire.MaxLine); n.Why != "" {
		t.Errorf("words beyond the longest notice's room: %q, want none", n.Why)
	}
	// Valid refuses what WithWhy would never write.
	for _, why := range []string{" x", "x ", "a\tb", "caf\u00e9"} {
		n := base
		n.Why = why
		if wire.Valid(protocol.Message{Cmd: protocol.FaultNotice, Note: &n}) {
			t.Errorf("Valid with Why %q = true", why)
		}
	}
}
