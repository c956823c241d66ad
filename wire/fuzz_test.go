package wire_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// refGrammar is docs/DESIGN.md's grammar written as plainly as possible, as
// a reference for the codec (the line without its LF):
//
//	line     = command [ ":" round-id ] [ CR ] LF
//	command  = "READY" / "START" / "COMPLETE"
//	round-id = 1*128 ( ALPHA / DIGIT / "-" / "_" / "." )
//
// plus "COMMAND:" with an empty id, read as the unnamed round.
var refGrammar = regexp.MustCompile(`^(READY|START|COMPLETE)(?::([A-Za-z0-9._-]{0,128}))?\r?$`)

func refParse(line []byte) (protocol.Message, bool) {
	sub := refGrammar.FindSubmatch(line)
	if sub == nil || len(line) > wire.MaxLine {
		return protocol.Message{}, false
	}
	cmd := map[string]protocol.Command{"READY": protocol.Ready, "START": protocol.Start, "COMPLETE": protocol.Complete}[string(sub[1])]
	return protocol.Message{Cmd: cmd, Round: string(sub[2])}, true
}

// checkError checks a codec error's contract: a *ProtocolError with a
// reason, at most 64 bytes of the offending line (a prefix of it) and a
// message that quotes them.
func checkError(t *testing.T, err error, line []byte) *wire.ProtocolError {
	t.Helper()
	var pe *wire.ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("%q: error %v (%T) is not a *ProtocolError", line, err, err)
	}
	if pe.Reason == "" || len(pe.Line) > 64 || pe.Len < len(pe.Line) || !bytes.HasPrefix(line, pe.Line) {
		t.Fatalf("%q: bad ProtocolError %+v", line, pe)
	}
	// The message quotes the kept bytes, as many as fit in 130
	// characters once escaped, and says when it quotes fewer than the
	// line had.
	k := len(pe.Line)
	for len(strconv.Quote(string(pe.Line[:k]))) > 130 {
		k--
	}
	if !strings.Contains(pe.Error(), strconv.Quote(string(pe.Line[:k]))) {
		t.Fatalf("%q: error %q does not quote the bytes", line, pe.Error())
	}
	if k < len(line) && !strings.Contains(pe.Error(), "truncated") {
		t.Fatalf("%q: error %q quotes %d of %d bytes and does not say it is truncated", line, pe.Error(), k, len(line))
	}
	return pe
}

// checkRoundTrip: a parsed message written back (both unnamed-round forms)
// parses to the same message.
func checkRoundTrip(t *testing.T, m protocol.Message) {
	t.Helper()
	if !wire.Valid(m) {
		t.Fatalf("parsed an invalid message %+v", m)
	}
	for _, colon := range []bool{false, true} {
		b := wire.Append(nil, m, colon)
		if b[len(b)-1] != '\n' || bytes.Count(b, []byte("\n")) != 1 {
			t.Fatalf("Append(%+v) = %q", m, b)
		}
		back, err := wire.Parse(b[:len(b)-1])
		if err != nil || back != m {
			t.Fatalf("round trip of %+v via %q: %+v, %v", m, b, back, err)
		}
	}
}

var fuzzSeeds = []string{
	"READY", "START", "COMPLETE", "READY:r7", "START:r7\r", "COMPLETE:",
	"COMPLETE:\r", "READY:" + strings.Repeat("a", 128), "READY:" + strings.Repeat("a", 129),
	"ready", "READY\x00", "READY\r\r", "READY:a b", "", "READY:" + strings.Repeat("a", 251),
}

// FuzzParse: Parse agrees with the reference grammar on every input,
// never panics, round-trips what it accepts, and reports everything else
// as a well-formed *ProtocolError.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := wire.Parse(line)
		want, ok := refParse(line)
		if ok != (err == nil) {
			t.Fatalf("Parse(%q) = %+v, %v; the reference grammar says ok=%v", line, m, err, ok)
		}
		if err != nil {
			pe := checkError(t, err, line)
			if pe.Len != len(line) {
				t.Fatalf("Parse(%q): Len %d", line, pe.Len)
			}
			return
		}
		if m != want {
			t.Fatalf("Parse(%q) = %+v, reference %+v", line, m, want)
		}
		checkRoundTrip(t, m)
		// The canonical forms are written back byte for byte.
		canon := !bytes.HasSuffix(line, []byte("\r")) && !bytes.HasSuffix(line, []byte(":"))
		if b := wire.Append(nil, m, false); canon && !bytes.Equal(b[:len(b)-1], line) {
			t.Fatalf("Parse(%q) written back as %q", line, b)
		}
	})
}

// chunkReader hands out its data in random-sized pieces and counts what
// was taken; with eofWithData it returns io.EOF together with the last
// bytes, as io.Reader allows.
type chunkReader struct {
	data        []byte
	rng         *rand.Rand
	maxChunk    int
	eofWithData bool
	consumed    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.consumed == len(c.data) {
		return 0, io.EOF
	}
	n := min(len(p), 1+c.rng.IntN(c.maxChunk), len(c.data)-c.consumed)
	copy(p, c.data[c.consumed:c.consumed+n])
	c.consumed += n
	if c.eofWithData && c.consumed == len(c.data) {
		return n, io.EOF
	}
	return n, nil
}

// FuzzReader feeds a stream split at random points through a Reader. The
// Reader must return, line by line, what Parse says about each line, stop
// at the first malformed line, end with io.EOF or io.ErrUnexpectedEOF as
// the stream ends between or inside lines, and never hold more than
// MaxLine+1 bytes it has not returned as lines.
func FuzzReader(f *testing.F) {
	f.Add([]byte(strings.Join(fuzzSeeds[:7], "\n")+"\n"), uint64(1))
	f.Add([]byte("READY\r\nSTART:r1\nCOMPLETE:\r\nCOMPLETE:r1\n"), uint64(2))
	f.Add([]byte("READY:"+strings.Repeat("a", 250)+"\nREADY\n"), uint64(3))
	f.Add([]byte("READY:"+strings.Repeat("a", 251)+"\nREADY\n"), uint64(4))
	f.Add([]byte(strings.Repeat("x", 600)), uint64(5))
	f.Add([]byte("START:r1\nSTA"), uint64(6))
	f.Add([]byte("READY\n\x00\n"), uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 0))
		cr := &chunkReader{data: data, rng: rng, maxChunk: 1 + int(seed>>8)%300, eofWithData: seed&1 == 1}
		r := wire.NewReader(cr)
		returned := 0 // bytes handed back as lines, with their LF
		rest := data
		for {
			m, err := r.ReadMessage()
			if held := cr.consumed - returned; held > wire.MaxLine+1 {
				t.Fatalf("Reader holds %d bytes it has not returned, more than MaxLine+1", held)
			}
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				// The stream ends inside a line (or between lines).
				switch {
				case len(rest) == 0:
					if err != io.EOF {
						t.Fatalf("at a clean end: %+v, %v; want io.EOF", m, err)
					}
				case len(rest) > wire.MaxLine+1 || len(rest) == wire.MaxLine+1 && !cr.eofWithData:
					checkError(t, err, rest)
				case len(rest) == wire.MaxLine+1:
					// EOF came with the 257th byte: either answer is right.
					var pe *wire.ProtocolError
					if err != io.ErrUnexpectedEOF && !errors.As(err, &pe) {
						t.Fatalf("257 bytes then EOF: %v", err)
					}
				default:
					if err != io.ErrUnexpectedEOF {
						t.Fatalf("cut line %q: %+v, %v; want io.ErrUnexpectedEOF", rest, m, err)
					}
				}
				return
			}
			line := rest[:i]
			if len(line) > wire.MaxLine {
				pe := checkError(t, err, line)
				if !strings.Contains(pe.Reason, "longer") {
					t.Fatalf("%d-byte line: %v", len(line), err)
				}
				return
			}
			want, wantErr := wire.Parse(line)
			if (err == nil) != (wantErr == nil) || m != want {
				t.Fatalf("line %q: Reader %+v, %v; Parse %+v, %v", line, m, err, want, wantErr)
			}
			if err != nil {
				if pe := checkError(t, err, line); pe.Reason != wantErr.(*wire.ProtocolError).Reason {
					t.Fatalf("line %q: Reader says %q, Parse %q", line, pe.Reason, wantErr)
				}
				return // the stream is unusable after a malformed line
			}
			checkRoundTrip(t, m)
			returned += i + 1
			rest = rest[i+1:]
		}
	})
}

// refNotice is the fault notice's grammar (docs/PROTOCOL.md, "Fault
// notices") written as plainly as possible, with HEARTBEAT, the other
// extension line.
var refNotice = regexp.MustCompile(`^FAULT (-|:[A-Za-z0-9._-]{0,128}) ([a-z0-9-]{1,24}) ([A-Za-z0-9._:@\[\]-]{1,40}) ([A-Za-z0-9._:@\[\]-]{1,40})( [1-9][0-9]{0,5})?( : [!-~](?:[ -~]*[!-~])?)?\r?$`)

func refParseExt(line []byte) (protocol.Message, bool) {
	if len(line) > wire.MaxLine {
		return protocol.Message{}, false
	}
	if m, ok := refParse(line); ok {
		return m, true
	}
	if string(bytes.TrimSuffix(line, []byte("\r"))) == "HEARTBEAT" {
		return protocol.Message{Cmd: protocol.Heartbeat}, true
	}
	if s, ok := refParseSteer(line); ok {
		return s, true // steer_test.go
	}
	if g, ok := refParseGrace(line); ok {
		return g, true
	}
	if u, ok := refParseUndo(line); ok {
		return u, true // undo_fuzz_test.go
	}
	sub := refNotice.FindSubmatch(line)
	if sub == nil || string(sub[3]) == "-" {
		return protocol.Message{}, false
	}
	n := protocol.Notice{Kind: string(sub[2]), Origin: string(sub[3])}
	if r := string(sub[1]); r != "-" {
		n.HasRound, n.Round = true, r[1:]
	}
	if b := string(sub[4]); b != "-" {
		n.Blamed = b
	}
	if a := string(sub[5]); a != "" {
		if !n.HasRound {
			return protocol.Message{}, false // a retry is of a round's attempt
		}
		n.Attempt, _ = strconv.Atoi(a[1:])
	}
	if w := string(sub[6]); w != "" {
		n.Why = w[3:]
	}
	return protocol.Message{Cmd: protocol.FaultNotice, Note: &n}, true
}

// refGrace is the GRACE line's grammar (docs/PROTOCOL.md, "Restart
// graces"), as plainly as possible; the numbers' bounds are checked apart.
var refGrace = regexp.MustCompile(`^GRACE (-|:[A-Za-z0-9._-]{0,128}) ([A-Za-z0-9._:@\[\]-]{1,40}) ([0-9]{1,10}) ([0-9]{1,5})\r?$`)

func refParseGrace(line []byte) (protocol.Message, bool) {
	sub := refGrace.FindSubmatch(line)
	if sub == nil || string(sub[2]) == "-" {
		return protocol.Message{}, false
	}
	ms, _ := strconv.ParseInt(string(sub[3]), 10, 64)
	hops, _ := strconv.Atoi(string(sub[4]))
	if ms > int64(protocol.MaxGrace/time.Millisecond) || hops < 1 || hops > protocol.MaxGraceHops {
		return protocol.Message{}, false
	}
	g := protocol.GraceNote{Node: string(sub[2]), For: time.Duration(ms) * time.Millisecond, Hops: hops}
	if r := string(sub[1]); r != "-" {
		g.HasRound, g.Round = true, r[1:]
	}
	return protocol.Message{Cmd: protocol.Grace, Grace: &g}, true
}

func sameMessage(a, b protocol.Message) bool {
	if (a.Steer == nil) != (b.Steer == nil) || a.Steer != nil && *a.Steer != *b.Steer {
		return false // steer_test.go
	}
	if a.Cmd != b.Cmd || a.Round != b.Round || (a.Note == nil) != (b.Note == nil) || (a.Grace == nil) != (b.Grace == nil) {
		return false
	}
	return (a.Note == nil || *a.Note == *b.Note) && (a.Grace == nil || *a.Grace == *b.Grace)
}

// FuzzParseExtensions: with extensions on, the parser agrees with the
// draft's grammar plus the extension lines' on every input, round-trips
// what it accepts, and reports everything else as a well-formed
// *ProtocolError. Without extensions the extension lines are refused with
// Extension set (a configuration mismatch, not garbage).
func FuzzParseExtensions(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{"HEARTBEAT", "HEARTBEAT\r", "HEARTBEAT:", "FAULT :r7 peer-silent C B", "FAULT - config-mismatch B -",
		"FAULT : task-failed B B\r", "FAULT :r7 peer-silent - B", "FAULT :r7 Peer-silent C B", "FAULT :r7 peer-silent C",
		"FAULT :r7 peer-silent C B extra", "FAULT -  x C B", "FAULT :" + strings.Repeat("a", 128) + " exit-wave-undelivered " +
			strings.Repeat("n", 40) + " " + strings.Repeat("m", 40), "FAULT :r7 peer-silent 10.0.0.1:7000 [::1]:7001",
		"FAULT : 0 0 ", // a fuzz crasher: an empty blamed field was read as none
		// The retry a notice is of (docs/PROTOCOL.md, "Fault notices").
		"FAULT :r7 task-failed C C 1", "FAULT :r7 task-failed C C 999999\r", "FAULT :r7 task-failed C C 1000000",
		"FAULT :r7 task-failed C C 0", "FAULT :r7 task-failed C C 01", "FAULT - peer-silent C B 2", "FAULT :r7 task-failed C C 2 3",
		"FAULT :r7 task-failed C C +2", "FAULT :r7 task-failed C C ",
		// The origin's words (docs/PROTOCOL.md, "Fault notices").
		"FAULT :r3 task-failed C C : disk full", "FAULT :r3 task-failed C C 2 : task exited 7\r", "FAULT : task-failed : : : : : :",
		"FAULT :r3 task-failed C C :", "FAULT :r3 task-failed C C : ", "FAULT :r3 task-failed C C :  x", "FAULT :r3 task-failed C C : x ",
		"FAULT : 0 0 0  ", // a fuzz crasher: an empty field after BLAMED was indexed
		"FAULT :r3 task-failed C C :x", "FAULT :r3 task-failed C C 2 :", "FAULT :r3 task-failed C C 2 ", "FAULT :r3 task-failed C C : 2 3",
		"FAULT :r3 task-failed C C 2 3 : x", "FAULT :r3 task-failed C C : caf\xc3\xa9", "FAULT :r3 task-failed C C : a\tb",
		"FAULT :" + strings.Repeat("a", 128) + " exit-wave-undelivered " + strings.Repeat("n", 40) + " " + strings.Repeat("m", 40) + " 999999 : abc",
		"GRACE :r7 B 600000 1", "GRACE - B 0 2", "GRACE : [::1]:7001 604800000 65535\r", "GRACE :r7 B 604800001 1",
		"GRACE :r7 B 1000 0", "GRACE :r7 B 1000 65536", "GRACE :r7 - 1000 1", "GRACE :r7 B 1000", "GRACE :r7 B -1 1",
		"GRACE :r7 B 1000 1 x", "GRACE :r7 B 01000 001", "GRACE  B 1000 1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := wire.ParseExtensions(line)
		want, ok := refParseExt(line)
		if ok != (err == nil) {
			t.Fatalf("ParseExtensions(%q) = %+v, %v; the reference grammar says ok=%v", line, m, err, ok)
		}
		if err != nil {
			checkError(t, err, line)
			return
		}
		if !sameMessage(m, want) {
			t.Fatalf("ParseExtensions(%q) = %+v, reference %+v", line, m, want)
		}
		if m.Cmd == protocol.FaultNotice || m.Cmd == protocol.Heartbeat || m.Cmd == protocol.Grace {
			b := wire.Append(nil, m, false)
			back, err := wire.ParseExtensions(b[:len(b)-1])
			if err != nil || !sameMessage(back, m) {
				t.Fatalf("round trip of %q via %q: %+v, %v", line, b, back, err)
			}
			if _, err := wire.Parse(line); err == nil {
				t.Fatalf("Parse(%q) without extensions accepted an extension line", line)
			} else if pe := checkError(t, err, line); !pe.Extension {
				t.Fatalf("Parse(%q) without extensions: %v, want Extension set", line, err)
			}
		}
	})
}
