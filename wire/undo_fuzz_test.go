package wire_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// refUndo is the undo lines' grammar (docs/PROTOCOL.md, "The undo
// wave"), as plainly as possible; counts and codes are checked apart.
var refUndo = regexp.MustCompile(`^(?:UNDO ON|UNDO :([A-Za-z0-9._-]{0,128}) ([A-Za-z0-9._:@\[\]-]{1,40}) ([a-z0-9-]{1,24}) (-|T|[0-9]{1,3}) ([0-9]{1,5}(?:,[A-Za-z0-9._:@\[\]-]{1,40})*)|UNDONE :([A-Za-z0-9._-]{0,128}) ([A-Za-z0-9._:@\[\]-]{1,40}) ([a-z0-9-]{1,24}) (-|T|[0-9]{1,3}) ([0-9]{1,5}(?:,[A-Za-z0-9._:@\[\]-]{1,40})*) ([A-Za-z0-9._:@\[\]-]{1,40}) (-|T|[0-9]{1,3}) (-|[0-9]{1,5}(?:,[A-Za-z0-9._:@\[\]-]{1,40})*))\r?$`)

// refParseUndo parses an undo line by refUndo, or reports false.
func refParseUndo(line []byte) (protocol.Message, bool) {
	if len(line) > wire.MaxLine {
		return protocol.Message{}, false
	}
	sub := refUndo.FindSubmatch(line)
	if sub == nil {
		return protocol.Message{}, false
	}
	s := make([]string, len(sub))
	for i, b := range sub {
		s[i] = string(b)
	}
	if strings.HasPrefix(s[0], "UNDO ON") {
		return protocol.Message{Cmd: protocol.UndoOn}, true
	}
	code := func(c string) (int, bool) {
		switch c {
		case "-":
			return -1, true
		case "T":
			return protocol.CodeTimeout, true
		}
		v, _ := strconv.Atoi(c)
		return v, v <= 255
	}
	list := func(l string) (string, int, bool) {
		if l == "-" {
			return "", -1, true
		}
		n, rest, _ := strings.Cut(l, ",")
		v, _ := strconv.Atoi(n)
		var ns []string
		if rest != "" {
			ns = strings.Split(rest, ",")
		}
		for _, x := range ns {
			if x == "-" {
				return "", 0, false // "-" is no name
			}
		}
		return rest, v, v >= len(ns)
	}
	cmd, f := protocol.UndoLine, s[1:6]
	if strings.HasPrefix(s[0], "UNDONE") {
		cmd, f = protocol.UndoEnd, s[6:14]
	}
	w := protocol.Wave{Failed: f[1], Kind: f[2], StopCode: -1}
	var ok1, ok2, ok3, ok4 bool
	w.Code, ok1 = code(f[3])
	w.Undone, w.UndoneN, ok2 = list(f[4])
	ok3, ok4 = true, true
	if cmd == protocol.UndoEnd {
		if f[5] != "-" {
			w.Stop = f[5]
		}
		w.StopCode, ok3 = code(f[6])
		w.Kept, w.KeptN, ok4 = list(f[7])
		if w.Stop == "" && w.StopCode != -1 {
			ok3 = false
		}
	}
	if !ok1 || !ok2 || !ok3 || !ok4 || w.Failed == "-" || w.Stop == "-" || w.UndoneN < 0 {
		return protocol.Message{}, false
	}
	return protocol.Message{Cmd: cmd, Round: f[0], Undo: &w}, true
}

// FuzzUndoLines: the codec reads the undo lines exactly as their grammar
// says, writes back what it read, and refuses them without extensions as
// extension lines. docs/PROTOCOL.md, "The undo wave".
func FuzzUndoLines(f *testing.F) {
	for _, s := range []string{"UNDO ON", "UNDO ON\r", "UNDO ON ", "UNDO OFF", "UNDO :r1 C task-failed 1 0", "UNDO :r1 C task-failed 1 1,B",
		"UNDO : C task-timeout T 2,B,A", "UNDO :r1 C task-failed 1 1,B,A", "UNDO :r1 C Task-failed 1 0", "UNDO :r1 C task-failed 256 0",
		"UNDO :r1 - task-failed 1 0", "UNDO :r1 C task-failed 1", "UNDO r1 C task-failed 1 0", "UNDO :r1 C task-failed 1 0,",
		"UNDONE :r1 C task-failed 1 2,B,A - - -", "UNDONE :r1 C task-failed 1 2,B,A - - 0", "UNDONE :r1 C task-failed - 0 B 2 1,A",
		"UNDONE :r1 C task-failed - 0 B T -", "UNDONE :r1 C task-failed - 0 - 2 -", "UNDONE :r1 C task-failed 1 0 B 2",
		"UNDONE :" + strings.Repeat("r", 128) + " " + strings.Repeat("n", 40) + " task-failed 255 99999," + strings.Repeat("m", 40) + " " + strings.Repeat("s", 40) + " T 5",
		"UNDONE :r1 C denied - 3,D,C,B - - 0\r",
		"UNDONE : 0 0 0 0  - 0",    // a fuzz crasher: an empty stop field was read as none
		"UNDONE : 0 0 0 1,- 0 0 0", // a fuzz find: "-" is no name in a list
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if !strings.HasPrefix(string(line), "UNDO ") && !strings.HasPrefix(string(line), "UNDONE ") {
			return // the other lines: FuzzParseExtensions
		}
		m, err := wire.ParseExtensions(line)
		want, ok := refParseUndo(line)
		if ok != (err == nil) {
			t.Fatalf("ParseExtensions(%q) = %+v, %v; the reference grammar says ok=%v", line, m, err, ok)
		}
		if err != nil {
			checkError(t, err, line)
			return
		}
		if m.Cmd != want.Cmd || m.Round != want.Round || (m.Undo == nil) != (want.Undo == nil) || m.Undo != nil && *m.Undo != *want.Undo {
			t.Fatalf("ParseExtensions(%q) = %+v %+v, reference %+v %+v", line, m, m.Undo, want, want.Undo)
		}
		b := wire.Append(nil, m, false)
		back, err := wire.ParseExtensions(b[:len(b)-1])
		if err != nil || back.Cmd != m.Cmd || back.Round != m.Round || m.Undo != nil && *back.Undo != *m.Undo {
			t.Fatalf("round trip of %q via %q: %+v, %v", line, b, back, err)
		}
		if _, err := wire.Parse(line); err == nil {
			t.Fatalf("Parse(%q) without extensions accepted an undo line", line)
		} else if pe := checkError(t, err, line); !pe.Extension {
			t.Fatalf("Parse(%q) without extensions: %v, want Extension set", line, err)
		}
	})
}
