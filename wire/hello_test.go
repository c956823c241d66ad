package wire_test

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// docs/PROTOCOL.md, "The identity line": the grammar, its bounds, and the
// names left out when they do not fit.
func TestHelloRoundTrip(t *testing.T) {
	d1, d2 := wire.Digest("A=h:1,B=h:2"), wire.Digest("rounds=3")
	for _, h := range []wire.Hello{
		{Name: "B", Pos: 2, Size: 3, Chain: d1, Rounds: d2, Names: []string{"A", "B", "C"}},
		{Name: "10.0.0.1:7000", Pos: 1, Size: 1, Chain: d1, Rounds: d2},
		{Name: strings.Repeat("n", 40), Pos: 999999, Size: 999999, Chain: d1, Rounds: d2},
		{Name: "B", Pos: 2, Size: 2, Chain: d1, Rounds: d2, Names: []string{"A", "B"}, Heartbeat: 300 * time.Millisecond},
		{Name: "B", Pos: 2, Size: 2, Chain: d1, Rounds: d2, Heartbeat: wire.HeartbeatOff},
		{Name: strings.Repeat("n", 40), Pos: 999999, Size: 999999, Chain: d1, Rounds: d2, Heartbeat: wire.MaxHeartbeat},
	} {
		if !wire.ValidHello(h) {
			t.Fatalf("%+v not valid", h)
		}
		b := wire.AppendHello(nil, h)
		if len(b)-1 > wire.MaxLine {
			t.Fatalf("%q: longer than a line", b)
		}
		back, err := wire.ParseHello(b[:len(b)-1])
		if err != nil || !sameHello(back, h) {
			t.Fatalf("round trip of %+v via %q: %+v, %v", h, b, back, err)
		}
	}
	// Too many names for one line: they are left out, the rest stays.
	names := make([]string, 40)
	for i := range names {
		names[i] = "node-" + strconv.Itoa(i)
	}
	h := wire.Hello{Name: "node-3", Pos: 4, Size: 40, Chain: d1, Rounds: d2, Names: names}
	b := wire.AppendHello(nil, h)
	back, err := wire.ParseHello(b[:len(b)-1])
	if err != nil || back.Names != nil || back.Name != "node-3" || back.Pos != 4 || back.Size != 40 {
		t.Fatalf("%q: %+v, %v; want the names left out", b, back, err)
	}
	// Names that fit only without the heartbeat field are left out: the
	// heartbeat always stays.
	h = wire.Hello{Name: "a", Pos: 1, Chain: d1, Rounds: d2}
	for h.Size = 1; ; h.Size++ {
		h.Names = slices.Repeat([]string{strings.Repeat("a", 40)}, h.Size)
		h.Names[0] = "a"
		if len(wire.AppendHello(nil, h))-1+len(" hb=2000") > wire.MaxLine {
			break
		}
	}
	if b := wire.AppendHello(nil, h); len(b)-1 > wire.MaxLine {
		t.Fatalf("no size found with names that fit only without the heartbeat: %q", b)
	}
	h.Heartbeat = 2 * time.Second
	b = wire.AppendHello(nil, h)
	back, err = wire.ParseHello(b[:len(b)-1])
	if err != nil || len(b)-1 > wire.MaxLine || back.Names != nil || back.Heartbeat != 2*time.Second {
		t.Fatalf("%q: %+v, %v; want the names left out and the heartbeat kept", b, back, err)
	}
}

// docs/PROTOCOL.md, "The identity line": the heartbeat field says an
// interval in whole milliseconds, rounded up, or 0 for none.
func TestHelloHeartbeat(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		0: wire.HeartbeatOff, -time.Second: wire.HeartbeatOff, time.Nanosecond: time.Millisecond,
		300 * time.Millisecond: 300 * time.Millisecond, 1500 * time.Microsecond: 2 * time.Millisecond,
		1000 * time.Hour: wire.MaxHeartbeat,
	} {
		if got := wire.HelloHeartbeat(d); got != want {
			t.Errorf("HelloHeartbeat(%v) = %v, want %v", d, got, want)
		}
	}
	d := wire.Digest("x")
	for line, want := range map[string]time.Duration{
		"HELLO B 2/3 " + d + " " + d:                         0,
		"HELLO B 2/3 " + d + " " + d + " hb=0":               wire.HeartbeatOff,
		"HELLO B 2/3 " + d + " " + d + " hb=3000":            3 * time.Second,
		"HELLO B 2/3 " + d + " " + d + " A,B,C hb=300\r":     300 * time.Millisecond,
		"HELLO B 2/3 " + d + " " + d + " A,B,C hb=999999999": wire.MaxHeartbeat,
	} {
		if h, err := wire.ParseHello([]byte(line)); err != nil || h.Heartbeat != want {
			t.Errorf("ParseHello(%q) = %+v, %v; want heartbeat %v", line, h, err, want)
		}
	}
	if wire.ValidHello(wire.Hello{Name: "B", Pos: 1, Size: 1, Chain: d, Rounds: d, Heartbeat: 1500 * time.Microsecond}) {
		t.Error("ValidHello accepts a heartbeat that is not a whole number of milliseconds")
	}
}

// docs/PROTOCOL.md, "The identity line": what is not one.
func TestHelloRefused(t *testing.T) {
	d := wire.Digest("x")
	for _, s := range []string{
		"HELLO", "HELLO ", "HELLO B 2/3 " + d, "HELLO B 2/3 " + d + " " + d + " A,B,C extra",
		"HELLO B 4/3 " + d + " " + d, "HELLO B 0/3 " + d + " " + d, "HELLO B 02/3 " + d + " " + d,
		"HELLO B 2/3 " + strings.ToUpper(d) + " " + d, "HELLO B 2/3 " + d[:15] + " " + d,
		"HELLO B 2/3 " + d + " " + d + " A,B", "HELLO B 2/3 " + d + " " + d + " A,,C",
		"HELLO - 2/3 " + d + " " + d, "HELLO B\x00 2/3 " + d + " " + d, "HELLO  B 2/3 " + d + " " + d,
		"HELLO B 2/3 " + d + " " + d + " A,B,C " + strings.Repeat("x", 200),
		"HELLO B 1234567/1234567 " + d + " " + d,
		"HELLO B 2/3 " + d + " " + d + " hb=", "HELLO B 2/3 " + d + " " + d + " hb=01",
		"HELLO B 2/3 " + d + " " + d + " hb=1000000000", "HELLO B 2/3 " + d + " " + d + " hb=-1",
		"HELLO B 2/3 " + d + " " + d + " hb=1 hb=1", "HELLO B 2/3 " + d + " " + d + " hb=1 A,B,C",
		"HELLO B 2/3 " + d + " " + d + " hb=1s", "HELLO B 2/3 " + d + " hb=1",
	} {
		if h, err := wire.ParseHello([]byte(s)); err == nil {
			t.Errorf("ParseHello(%q) = %+v, want an error", s, h)
		} else {
			var pe *wire.ProtocolError
			if !errors.As(err, &pe) {
				t.Errorf("ParseHello(%q): %v is not a *ProtocolError", s, err)
			}
		}
	}
}

// docs/PROTOCOL.md, "The identity line": only a node with extensions
// reads it; to one without, it is an extension line (a configuration
// mismatch), and the draft's lines read as before.
func TestHelloAtReader(t *testing.T) {
	h := wire.Hello{Name: "A", Pos: 1, Size: 2, Chain: wire.Digest("c"), Rounds: wire.Digest("r"), Names: []string{"A", "B"}}
	stream := string(wire.AppendHello(nil, h)) + "READY\n"
	r := wire.NewReader(strings.NewReader(stream))
	r.Heartbeats = true
	m, err := r.ReadMessage()
	got, ok := r.Hello()
	if err != nil || m.Cmd != protocol.Heartbeat || !ok || !sameHello(got, h) {
		t.Fatalf("first line: %+v, %v; hello %+v %v", m, err, got, ok)
	}
	if _, again := r.Hello(); again {
		t.Fatal("Hello returned the line twice")
	}
	if m, err := r.ReadMessage(); err != nil || m.Cmd != protocol.Ready {
		t.Fatalf("second line: %+v, %v", m, err)
	}
	if _, ok := r.Hello(); ok {
		t.Fatal("READY taken for an identity line")
	}
	if _, err := r.ReadMessage(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}

	plain := wire.NewReader(strings.NewReader(stream))
	_, err = plain.ReadMessage()
	var pe *wire.ProtocolError
	if !errors.As(err, &pe) || !pe.Extension {
		t.Fatalf("without extensions: %v, want an extension line refused", err)
	}
}

func sameHello(a, b wire.Hello) bool {
	return a.Name == b.Name && a.Pos == b.Pos && a.Size == b.Size && a.Chain == b.Chain && a.Rounds == b.Rounds &&
		slices.Equal(a.Names, b.Names) && a.Heartbeat == b.Heartbeat
}

// refHello is the identity line's grammar (docs/PROTOCOL.md, "The
// identity line") written as plainly as possible.
var refHello = regexp.MustCompile(`^HELLO ([A-Za-z0-9._:@\[\]-]{1,40}) ([1-9][0-9]{0,5})/([1-9][0-9]{0,5}) ([0-9a-f]{16}) ([0-9a-f]{16})( [A-Za-z0-9._:@\[\]-]{1,40}(,[A-Za-z0-9._:@\[\]-]{1,40})*)?( hb=(0|[1-9][0-9]{0,8}))?\r?$`)

func refParseHello(line []byte) (wire.Hello, bool) {
	if len(line) > wire.MaxLine {
		return wire.Hello{}, false
	}
	sub := refHello.FindSubmatch(line)
	if sub == nil {
		return wire.Hello{}, false
	}
	h := wire.Hello{Name: string(sub[1]), Chain: string(sub[4]), Rounds: string(sub[5])}
	h.Pos, _ = strconv.Atoi(string(sub[2]))
	h.Size, _ = strconv.Atoi(string(sub[3]))
	if h.Name == "-" || h.Pos > h.Size {
		return wire.Hello{}, false
	}
	if len(sub[6]) > 0 {
		h.Names = strings.Split(string(sub[6][1:]), ",")
		if len(h.Names) != h.Size || slices.Contains(h.Names, "-") {
			return wire.Hello{}, false
		}
	}
	if len(sub[8]) > 0 {
		ms, _ := strconv.Atoi(string(sub[9]))
		h.Heartbeat = time.Duration(ms) * time.Millisecond
		if ms == 0 {
			h.Heartbeat = wire.HeartbeatOff
		}
	}
	return h, true
}

// FuzzHello: ParseHello agrees with the identity line's grammar on every
// input, round-trips what it accepts, and reports everything else as a
// well-formed *ProtocolError; without extensions a Reader refuses a
// HELLO line as an extension line, and with them it never takes one for a
// protocol message.
func FuzzHello(f *testing.F) {
	d := wire.Digest("x")
	for _, s := range []string{
		"HELLO B 2/3 " + d + " " + d, "HELLO B 2/3 " + d + " " + d + " A,B,C", "HELLO B 2/3 " + d + " " + d + " A,B,C\r",
		"HELLO [::1]:7000 1/1 " + d + " " + d, "HELLO B 2/3 " + d + " " + d + " A,B", "HELLO B 3/2 " + d + " " + d,
		"HELLO - 1/1 " + d + " " + d, "HELLO B 1/1 " + d + " " + d + " -", "HELLO B 1/1 " + d + " " + d + " ",
		"HELLO B 2/3 " + d + " " + d + " hb=300", "HELLO B 2/3 " + d + " " + d + " A,B,C hb=0\r",
		"HELLO B 2/3 " + d + " " + d + " A,B,C hb=999999999", "HELLO B 2/3 " + d + " " + d + " hb=01",
		"HELLO B 2/3 " + d + " " + d + " hb=3000 hb=3000", "HELLO B 1/1 " + d + " " + d + " hb=",
		"READY", "HEARTBEAT", "HELLO",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		h, err := wire.ParseHello(line)
		want, ok := refParseHello(line)
		if ok != (err == nil) {
			t.Fatalf("ParseHello(%q) = %+v, %v; the reference grammar says ok=%v", line, h, err, ok)
		}
		if err != nil {
			checkError(t, err, line)
		} else {
			if !sameHello(h, want) {
				t.Fatalf("ParseHello(%q) = %+v, reference %+v", line, h, want)
			}
			if !wire.ValidHello(h) {
				t.Fatalf("ParseHello(%q) accepted %+v, which ValidHello refuses", line, h)
			}
			b := wire.AppendHello(nil, h)
			back, err := wire.ParseHello(b[:len(b)-1])
			if err != nil || !sameHello(back, h) {
				t.Fatalf("round trip of %q via %q: %+v, %v", line, b, back, err)
			}
			if _, err := wire.Parse(line); err == nil {
				t.Fatalf("Parse(%q) without extensions accepted an identity line", line)
			} else if pe := checkError(t, err, line); !pe.Extension {
				t.Fatalf("Parse(%q) without extensions: %v, want Extension set", line, err)
			}
		}
		if bytes.IndexByte(line, '\n') >= 0 {
			return
		}
		r := wire.NewReader(bytes.NewReader(append(slices.Clip(line), '\n')))
		r.Heartbeats = true
		m, rerr := r.ReadMessage()
		got, isHello := r.Hello()
		switch {
		case err == nil && (rerr != nil || m.Cmd != protocol.Heartbeat || !isHello || !sameHello(got, h)):
			t.Fatalf("Reader on %q: %+v, %v, hello %+v %v; want the identity line", line, m, rerr, got, isHello)
		case err != nil && isHello:
			t.Fatalf("Reader on %q took a malformed line for an identity line", line)
		case err != nil && wire.IsHello(line) && rerr == nil:
			t.Fatalf("Reader on %q accepted a malformed identity line as %+v", line, m)
		}
	})
}
