package wire_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// refSteer is the steering line's grammar (docs/PROTOCOL.md, "Steering
// lines") written as plainly as possible; its length bound and the
// kinds' round rule are checked apart.
var refSteer = regexp.MustCompile(`^STEER ([A-Za-z0-9._:@\[\]-]{1,40}) ([1-9][0-9]{0,17}) (none|hold|approval|pause|denied|cancel|retry) (-|:[A-Za-z0-9._-]{0,128}) ([A-Za-z0-9._:@\[\]-]{1,40})( [!-~]([ -~]*[!-~])?)?\r?$`)

func refParseSteer(line []byte) (protocol.Message, bool) {
	if len(line) > wire.MaxLine {
		return protocol.Message{}, false
	}
	sub := refSteer.FindSubmatch(line)
	if sub == nil || string(sub[1]) == "-" {
		return protocol.Message{}, false
	}
	at, _ := strconv.ParseInt(string(sub[2]), 10, 64)
	s := protocol.Steer{Origin: string(sub[1]), At: at, What: protocol.ParseSteerWhat(string(sub[3]))}
	if r := string(sub[4]); r != "-" {
		s.HasRound, s.Round = true, r[1:]
	}
	if b := string(sub[5]); b != "-" {
		s.By = b
	}
	if len(sub[6]) > 0 {
		s.Reason = string(sub[6][1:])
	}
	if len(s.Reason) > protocol.MaxSteerReason || len(strings.TrimSuffix(string(line), "\r")) > protocol.MaxSteerLine {
		return protocol.Message{}, false
	}
	switch s.What {
	case protocol.SteerApproval, protocol.SteerDenied, protocol.SteerCancel, protocol.SteerRetry:
		if !s.HasRound {
			return protocol.Message{}, false
		}
	}
	return protocol.Message{Cmd: protocol.SteerLine, Steer: &s}, true
}

var steerSeeds = []string{
	"STEER C 1764669720000 hold - ann change window at 10:00",
	"STEER C 1764669720000 hold - -",
	"STEER C 1764669720001 none - ann\r",
	"STEER C 1764669720002 approval :batch-7 -",
	"STEER C 1764669720003 denied :batch-7 ann smoke test failed",
	"STEER A 5 pause - ops",
	"STEER A 6 cancel : ops stale data",
	"STEER A 7 retry :batch-7 ops",
	"STEER A 8 retry - ops",       // retry without a round
	"STEER C 1 approval - -",      // approval without a round
	"STEER C 0 hold - -",          // At must be positive
	"STEER C 01 hold - -",         // no leading zero
	"STEER C 1 hold - - ",         // a trailing space
	"STEER C 1 hold - -  x",       // a reason that starts with a space
	"STEER C 1 held - -",          // an unknown kind
	"STEER - 1 hold - -",          // no origin
	"STEER C 1 hold -",            // too few fields
	"STEER C 1 hold x ann",        // a bad round field
	"STEER C 1 hold - ann tab\tx", // a control byte
	"STEER " + strings.Repeat("o", 40) + " 1764669720000 denied :" + strings.Repeat("r", 128) + " " + strings.Repeat("b", 40) + " " + strings.Repeat("x", 40),
}

// docs/PROTOCOL.md, "Steering lines": the parser agrees with the
// grammar, round-trips what it accepts, refuses the rest with a
// well-formed *ProtocolError, and without extensions refuses every
// STEER line with Extension set (a configuration mismatch).
func FuzzSteer(f *testing.F) {
	for _, s := range steerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if !strings.HasPrefix(string(line), "STEER ") {
			return // the other lines are FuzzParseExtensions'
		}
		m, err := wire.ParseExtensions(line)
		want, ok := refParseSteer(line)
		if ok != (err == nil) {
			t.Fatalf("ParseExtensions(%q) = %+v, %v; the grammar says ok=%v", line, m, err, ok)
		}
		if err != nil {
			checkError(t, err, line)
		} else {
			if m.Cmd != protocol.SteerLine || *m.Steer != *want.Steer {
				t.Fatalf("ParseExtensions(%q) = %+v, want %+v", line, m.Steer, want.Steer)
			}
			if got := string(wire.Append(nil, m, false)); got != strings.TrimSuffix(string(line), "\r")+"\n" {
				t.Fatalf("round trip of %q: %q", line, got)
			}
		}
		if _, err := wire.Parse(line); err == nil {
			t.Fatalf("Parse (no extensions) accepted %q", line)
		} else if pe, ok := err.(*wire.ProtocolError); !ok || !pe.Extension && len(line) <= wire.MaxLine && !hasControl(line) {
			t.Fatalf("Parse (no extensions) of %q: %v, want an extension mismatch", line, err)
		}
	})
}

// Every steering line the machine may send fits the wire (FitReason)
// and reads back as itself.
func TestSteerRoundTrip(t *testing.T) {
	s := protocol.Steer{Origin: strings.Repeat("o", 40), At: 1764669720000, What: protocol.SteerDenied, HasRound: true,
		Round: strings.Repeat("r", 128), By: strings.Repeat("b", 40), Reason: strings.Repeat("why ", 60) + "\x01é"}
	s = s.FitReason()
	if !s.Valid() {
		t.Fatalf("FitReason left an invalid line: %+v", s)
	}
	line := wire.Append(nil, protocol.Message{Cmd: protocol.SteerLine, Steer: &s}, false)
	if len(line)-1 > wire.MaxLine {
		t.Fatalf("%d bytes", len(line)-1)
	}
	m, err := wire.ParseExtensions(line[:len(line)-1])
	if err != nil || *m.Steer != s {
		t.Fatalf("read back %+v, %v", m.Steer, err)
	}
}

// hasControl reports whether line holds a control byte (a trailing CR
// aside), which the parser refuses before it looks at the command.
func hasControl(line []byte) bool {
	line = []byte(strings.TrimSuffix(string(line), "\r"))
	for _, c := range line {
		if c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}
