package wire_test

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

var (
	ready    = protocol.Ready
	start    = protocol.Start
	complete = protocol.Complete
)

func msg(c protocol.Command, round string) protocol.Message {
	return protocol.Message{Cmd: c, Round: round}
}

// Reasons, as the codec words them; tests match on a distinctive word.
const (
	tooLong  = "longer than 256"
	control  = "control byte"
	unknown  = "unknown command"
	badRound = "invalid round id"
)

type parseCase struct {
	name string
	line string // without LF
	want protocol.Message
	err  string // a word of the ProtocolError's Reason; "" if the line is fine
}

var parseCases = []parseCase{
	// docs/DESIGN.md "Wire format": command [ ":" round-id ] [ CR ] LF.
	{"bare READY", "READY", msg(ready, ""), ""},
	{"bare START", "START", msg(start, ""), ""},
	{"bare COMPLETE", "COMPLETE", msg(complete, ""), ""},
	{"named", "READY:r7", msg(ready, "r7"), ""},
	{"all round-id characters", "START:AZaz09-_.", msg(start, "AZaz09-_."), ""},
	// "On receive, tolerate one CR before LF."
	{"CR tolerated", "COMPLETE\r", msg(complete, ""), ""},
	{"CR tolerated, named", "READY:r7\r", msg(ready, "r7"), ""},
	{"two CRs", "READY\r\r", protocol.Message{}, control},
	{"CR first", "\rREADY", protocol.Message{}, control},
	{"CR inside", "READY\r:r7", protocol.Message{}, control},
	// "Receive COMMAND: (colon, empty id) as the unnamed round."
	{"colon is the unnamed round", "READY:", msg(ready, ""), ""},
	{"colon and CR", "START:\r", msg(start, ""), ""},
	// round-id = 1*128 ( ALPHA / DIGIT / "-" / "_" / "." )
	{"round id 128", "READY:" + strings.Repeat("a", 128), msg(ready, strings.Repeat("a", 128)), ""},
	{"round id 129", "READY:" + strings.Repeat("a", 129), protocol.Message{}, badRound},
	{"round id with space", "READY:a b", protocol.Message{}, badRound},
	{"round id with colon", "READY:a:b", protocol.Message{}, badRound},
	{"two colons", "READY::a", protocol.Message{}, badRound},
	{"round id UTF-8", "READY:é", protocol.Message{}, badRound},
	{"round id slash", "READY:a/b", protocol.Message{}, badRound},
	// command = "READY" / "START" / "COMPLETE" ; upper case, exact
	{"lower case", "ready", protocol.Message{}, unknown},
	{"mixed case", "Ready", protocol.Message{}, unknown},
	{"trailing space", "READY ", protocol.Message{}, unknown},
	{"leading space", " READY", protocol.Message{}, unknown},
	{"unknown", "NOOP", protocol.Message{}, unknown},
	{"prefix", "READ", protocol.Message{}, unknown},
	{"longer command", "READYY", protocol.Message{}, unknown},
	{"empty line", "", protocol.Message{}, unknown},
	{"only CR", "\r", protocol.Message{}, unknown},
	{"only colon", ":r7", protocol.Message{}, unknown},
	// "a NUL/control byte is a protocol violation"
	{"NUL", "READY\x00", protocol.Message{}, control},
	{"NUL in round", "READY:a\x00b", protocol.Message{}, control},
	{"NUL alone", "\x00", protocol.Message{}, control},
	{"tab", "READY\t", protocol.Message{}, control},
	{"escape sequence", "\x1b[31mREADY", protocol.Message{}, control},
	{"DEL", "READY:\x7f", protocol.Message{}, control},
	{"form feed", "\fSTART", protocol.Message{}, control},
	// "A line longer than 256 bytes ... is a protocol violation."
	{"256 bytes: not too long, but a bad round id", "READY:" + strings.Repeat("a", 250), protocol.Message{}, badRound},
	{"256 bytes with CR", "READY:" + strings.Repeat("a", 249) + "\r", protocol.Message{}, badRound},
	{"257 bytes", "READY:" + strings.Repeat("a", 251), protocol.Message{}, tooLong},
	{"257 bytes ending in CR", "READY:" + strings.Repeat("a", 250) + "\r", protocol.Message{}, tooLong},
}

func checkParse(t *testing.T, via string, tc parseCase, got protocol.Message, err error) {
	t.Helper()
	if tc.err == "" {
		if err != nil || got != tc.want {
			t.Errorf("%s %q: got %+v, %v; want %+v", via, tc.line, got, err, tc.want)
		}
		return
	}
	var pe *wire.ProtocolError
	if !errors.As(err, &pe) {
		t.Errorf("%s %q: err = %v (%T), want a *ProtocolError", via, tc.line, err, err)
		return
	}
	if !strings.Contains(pe.Reason, tc.err) {
		t.Errorf("%s %q: reason %q, want one about %q", via, tc.line, pe.Reason, tc.err)
	}
	if got != (protocol.Message{}) {
		t.Errorf("%s %q: error with a message %+v", via, tc.line, got)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := wire.Parse([]byte(tc.line))
			checkParse(t, "Parse", tc, got, err)
		})
	}
}

// The Reader applies the same grammar as Parse, line by line.
func TestReaderGrammar(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			r := wire.NewReader(strings.NewReader(tc.line + "\nREADY\n"))
			got, err := r.ReadMessage()
			checkParse(t, "ReadMessage", tc, got, err)
			if tc.err == "" {
				// and the stream goes on
				if got, err := r.ReadMessage(); err != nil || got != msg(ready, "") {
					t.Errorf("next line: %+v, %v", got, err)
				}
				if _, err := r.ReadMessage(); err != io.EOF {
					t.Errorf("at end: %v, want io.EOF", err)
				}
			}
		})
	}
}

// The offending bytes are in the error, escaped and truncated (docs/DESIGN.md:
// "the offending bytes escaped and truncated").
func TestProtocolErrorMessage(t *testing.T) {
	line := "READY:\x00\x1b[2J" + strings.Repeat("A", 300)
	_, err := wire.Parse([]byte(line))
	var pe *wire.ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v", err)
	}
	if len(pe.Line) != 64 || pe.Len != len(line) || !bytes.Equal(pe.Line, []byte(line[:64])) {
		t.Errorf("Line %q (len %d), Len %d", pe.Line, len(pe.Line), pe.Len)
	}
	s := err.Error()
	for _, want := range []string{`READY:\x00\x1b[2J`, "(311 bytes, truncated)", "line longer than 256 bytes", "chainsync: "} {
		if !strings.Contains(s, want) {
			t.Errorf("error %q lacks %q", s, want)
		}
	}
	if strings.ContainsAny(s, "\x00\x1b") || strings.Count(s, "A") > 64 {
		t.Errorf("error %q has raw control bytes or is not truncated", s)
	}
	// Bytes that are not printable take four characters each once
	// escaped: the message still stays short (64 of them took 258).
	_, err = wire.Parse(bytes.Repeat([]byte{0xff}, 70))
	if s := err.Error(); len(s) > 200 || !strings.Contains(s, `\xff\xff`) || !strings.Contains(s, "(70 bytes, truncated)") {
		t.Errorf("error of %d bytes for 70 unprintable bytes: %q", len(s), s)
	}
	// A short line is quoted whole, without the truncation note.
	_, err = wire.Parse([]byte("READY\x00"))
	if s := err.Error(); !strings.Contains(s, `"READY\x00"`) || strings.Contains(s, "truncated") {
		t.Errorf("short line error: %q", s)
	}
	// The error keeps its own copy of the bytes.
	buf := []byte("ready")
	_, err = wire.Parse(buf)
	buf[0] = 'X'
	if !errors.As(err, &pe) || string(pe.Line) != "ready" {
		t.Errorf("error aliases the input: %q", pe.Line)
	}
}

// countingReader counts the bytes its consumer has taken.
type countingReader struct {
	r        io.Reader
	consumed int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.consumed += n
	return n, err
}

// A 64 KiB line, with or without LF, is rejected after at most MaxLine+1
// bytes were read (textproto's warning about unbounded reads).
func TestHugeLine(t *testing.T) {
	huge := "READY:" + strings.Repeat("x", 64<<10)
	for _, tc := range []struct{ name, data string }{
		{"with LF", huge + "\nREADY\n"},
		{"without LF", huge},
		{"garbage without LF", strings.Repeat("\x00", 64<<10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr := &countingReader{r: strings.NewReader(tc.data)}
			_, err := wire.NewReader(cr).ReadMessage()
			var pe *wire.ProtocolError
			if !errors.As(err, &pe) || !strings.Contains(pe.Reason, tooLong) {
				t.Fatalf("err = %v, want a too-long ProtocolError", err)
			}
			if cr.consumed > wire.MaxLine+1 {
				t.Errorf("read %d bytes before rejecting, want at most %d", cr.consumed, wire.MaxLine+1)
			}
			if pe.Len < wire.MaxLine+1 || len(pe.Line) > 64 {
				t.Errorf("Len %d, len(Line) %d", pe.Len, len(pe.Line))
			}
			if !strings.Contains(err.Error(), "truncated") {
				t.Errorf("error %q", err)
			}
		})
	}
}

// The boundary through the Reader: 256 bytes before LF are read as a line,
// 257 are too long.
func TestReaderLineLimit(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{256, badRound}, {257, tooLong}, {258, tooLong}} {
		line := "READY:" + strings.Repeat("a", tc.n-6)
		_, err := wire.NewReader(iotest.OneByteReader(strings.NewReader(line + "\n"))).ReadMessage()
		var pe *wire.ProtocolError
		if !errors.As(err, &pe) || !strings.Contains(pe.Reason, tc.want) {
			t.Errorf("%d-byte line: %v, want %q", tc.n, err, tc.want)
		}
	}
	// The longest legal line is far below the limit.
	longest := "COMPLETE:" + strings.Repeat("z", 128) + "\r\n"
	if got, err := wire.NewReader(strings.NewReader(longest)).ReadMessage(); err != nil || got.Round != strings.Repeat("z", 128) {
		t.Errorf("longest legal line: %+v, %v", got, err)
	}
}

// End of stream: io.EOF between lines, io.ErrUnexpectedEOF inside one, and
// the underlying error otherwise.
func TestReaderEnd(t *testing.T) {
	r := wire.NewReader(strings.NewReader(""))
	if _, err := r.ReadMessage(); err != io.EOF {
		t.Errorf("empty stream: %v", err)
	}
	r = wire.NewReader(strings.NewReader("READY\nSTA"))
	if m, err := r.ReadMessage(); err != nil || m != msg(ready, "") {
		t.Errorf("first line: %v %v", m, err)
	}
	if _, err := r.ReadMessage(); err != io.ErrUnexpectedEOF {
		t.Errorf("cut line: %v, want io.ErrUnexpectedEOF", err)
	}
	// A reader that returns data and EOF together.
	r = wire.NewReader(iotest.DataErrReader(strings.NewReader("START:x\nCOMPLETE")))
	if m, err := r.ReadMessage(); err != nil || m != msg(start, "x") {
		t.Errorf("DataErrReader first line: %v %v", m, err)
	}
	if _, err := r.ReadMessage(); err != io.ErrUnexpectedEOF {
		t.Errorf("DataErrReader cut line: %v", err)
	}
	boom := errors.New("boom")
	r = wire.NewReader(io.MultiReader(strings.NewReader("READY\nCOMP"), iotest.ErrReader(boom)))
	r.ReadMessage()
	if _, err := r.ReadMessage(); !errors.Is(err, boom) {
		t.Errorf("underlying error: %v", err)
	}
	var pe *wire.ProtocolError
	if _, err := wire.NewReader(iotest.ErrReader(boom)).ReadMessage(); !errors.Is(err, boom) || errors.As(err, &pe) {
		t.Errorf("underlying error at start: %v", err)
	}
}

// Lines split at every point, several lines per read, CRLF and bare LF
// mixed: the Reader sees the same messages.
func TestReaderSplits(t *testing.T) {
	stream := "READY\r\nSTART:r1\nCOMPLETE:\r\nREADY:" + strings.Repeat("q", 128) + "\nCOMPLETE:r1\n"
	want := []protocol.Message{msg(ready, ""), msg(start, "r1"), msg(complete, ""), msg(ready, strings.Repeat("q", 128)), msg(complete, "r1")}
	for _, mk := range []func(io.Reader) io.Reader{
		func(r io.Reader) io.Reader { return r },
		iotest.OneByteReader,
		iotest.HalfReader,
		iotest.DataErrReader,
	} {
		r := wire.NewReader(mk(strings.NewReader(stream)))
		for i, w := range want {
			if got, err := r.ReadMessage(); err != nil || got != w {
				t.Fatalf("message %d: %+v, %v; want %+v", i, got, err, w)
			}
		}
		if _, err := r.ReadMessage(); err != io.EOF {
			t.Errorf("end: %v", err)
		}
	}
}

// docs/DESIGN.md "Wire format": "Send exactly COMMAND[:ROUND-ID]\n"; the colon
// option writes "COMMAND:" for the unnamed round.
func TestAppend(t *testing.T) {
	for _, tc := range []struct {
		m     protocol.Message
		colon bool
		want  string
	}{
		{msg(ready, ""), false, "READY\n"},
		{msg(ready, ""), true, "READY:\n"},
		{msg(start, "r7"), false, "START:r7\n"},
		{msg(start, "r7"), true, "START:r7\n"},
		{msg(complete, ""), false, "COMPLETE\n"},
	} {
		got := wire.Append([]byte("x"), tc.m, tc.colon)
		if string(got) != "x"+tc.want {
			t.Errorf("Append(%+v, %v) = %q, want %q", tc.m, tc.colon, got, tc.want)
		}
		back, err := wire.Parse(got[1 : len(got)-1])
		if err != nil || back != tc.m {
			t.Errorf("round trip of %q: %+v, %v", tc.want, back, err)
		}
	}
	// Append does not validate, so tests can play a broken peer; Valid
	// tells the caller what may be written.
	if got := string(wire.Append(nil, msg(ready, "bad id"), false)); got != "READY:bad id\n" {
		t.Errorf("Append of an invalid round: %q", got)
	}
	for _, tc := range []struct {
		m    protocol.Message
		want bool
	}{
		{msg(ready, ""), true}, {msg(complete, strings.Repeat("a", 128)), true},
		{msg(0, ""), false}, {msg(4, "x"), false}, {msg(start, "a b"), false},
		{msg(start, strings.Repeat("a", 129)), false},
	} {
		if got := wire.Valid(tc.m); got != tc.want {
			t.Errorf("Valid(%+v) = %v", tc.m, got)
		}
	}
}

// The Reader interns round ids: a round read twice is the same string, and
// many distinct rounds are all read correctly (the table is bounded).
func TestReaderInterning(t *testing.T) {
	var stream []byte
	const distinct = 3000
	for i := range distinct {
		stream = wire.Append(stream, msg(ready, "round-"+strconv.Itoa(i)), false)
		stream = wire.Append(stream, msg(start, "round-"+strconv.Itoa(i)), false)
	}
	r := wire.NewReader(bytes.NewReader(stream))
	for i := range distinct {
		a, err1 := r.ReadMessage()
		b, err2 := r.ReadMessage()
		want := "round-" + strconv.Itoa(i)
		if err1 != nil || err2 != nil || a.Round != want || b.Round != want || a.Cmd != ready || b.Cmd != start {
			t.Fatalf("round %d: %+v %v, %+v %v", i, a, err1, b, err2)
		}
		if unsafe.StringData(a.Round) != unsafe.StringData(b.Round) {
			t.Fatalf("round %d: read twice, not interned", i)
		}
	}
}

// HasLine tells whether ReadMessage returns without reading from the
// stream: a whole line is buffered, not a partial one.
func TestReaderBufferedLines(t *testing.T) {
	r := wire.NewReader(strings.NewReader("READY:a\nSTART:a\nCOMPLETE:a\nREA"))
	if r.HasLine() {
		t.Fatal("before any read: HasLine true, want false")
	}
	if _, err := r.ReadMessage(); err != nil {
		t.Fatal(err)
	}
	if !r.HasLine() {
		t.Fatal("after the first line: HasLine false, want true")
	}
	for range 2 {
		if _, err := r.ReadMessage(); err != nil {
			t.Fatal(err)
		}
	}
	if r.HasLine() {
		t.Fatal("with a partial line left: HasLine true, want false")
	}
}
