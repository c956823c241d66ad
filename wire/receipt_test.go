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

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// refReceipt is the receipt lines' grammar (docs/PROTOCOL.md, "Receipt
// lines") as plainly as possible; part <= parts and the length bound are
// checked apart.
var refReceipt = regexp.MustCompile(`^(?:RDIGEST :([A-Za-z0-9._-]{0,128}) ([A-Za-z0-9._:@\[\]-]{1,40}) ([0-9a-f]{64})|RECEIPT :([A-Za-z0-9._-]{0,128}) ([A-Za-z0-9._:@\[\]-]{1,40}) ([1-9][0-9]{0,2})/([1-9][0-9]{0,2}) ([!-~]+))\r?$`)

// refParseReceipt parses a receipt line by refReceipt, or reports false.
func refParseReceipt(line []byte) (wire.ReceiptLine, bool) {
	if len(line) > wire.MaxLine {
		return wire.ReceiptLine{}, false
	}
	s := refReceipt.FindSubmatch(line)
	if s == nil {
		return wire.ReceiptLine{}, false
	}
	if len(s[3]) > 0 {
		if string(s[2]) == "-" {
			return wire.ReceiptLine{}, false
		}
		return wire.ReceiptLine{Digest: &wire.ReceiptDigest{Round: string(s[1]), Node: string(s[2]), Digest: string(s[3])}}, true
	}
	part, _ := strconv.Atoi(string(s[6]))
	parts, _ := strconv.Atoi(string(s[7]))
	if string(s[5]) == "-" || part > parts {
		return wire.ReceiptLine{}, false
	}
	return wire.ReceiptLine{Part: &wire.ReceiptPart{Round: string(s[4]), Node: string(s[5]), Part: part, Parts: parts, Data: s[8]}}, true
}

const digest64 = "3f1c6a9e0b7d25548e2a01f4c3b9d8e7a6f5041322b1c0d9e8f7a6b5c4d3e2f1"

var receiptSeeds = []string{
	"RDIGEST :r1 B " + digest64,
	"RDIGEST : B " + digest64 + "\r",
	"RDIGEST :r1 - " + digest64,      // "-" is no name
	"RDIGEST r1 B " + digest64,       // the round needs its colon
	"RDIGEST :r1 B " + digest64[:63], // short
	"RDIGEST :r1 B " + strings.ToUpper(digest64),
	"RDIGEST :r1 B " + digest64 + " ",
	"RECEIPT :r1 B 1/3 {\"payloadType\":",
	"RECEIPT :r1 B 3/3 }]}",
	"RECEIPT :r1 B 4/3 x",
	"RECEIPT :r1 B 0/3 x",
	"RECEIPT :r1 B 01/3 x",
	"RECEIPT :r1 B 1/1000 x",
	"RECEIPT :r1 B 1/3 two words",
	"RECEIPT :r1 B 1/3 ",
	"RECEIPT :r1 B 1/3",
	"RECEIPT :" + strings.Repeat("r", 128) + " " + strings.Repeat("n", 40) + " 999/999 " + strings.Repeat("x", 69),
	"RECEIPT :" + strings.Repeat("r", 128) + " " + strings.Repeat("n", 40) + " 999/999 " + strings.Repeat("x", 70),
}

// FuzzReceiptLines: the codec reads the receipt lines exactly as their
// grammar says, writes back what it read, and without receipts refuses
// them as extension lines (a configuration mismatch). docs/PROTOCOL.md,
// "Receipt lines".
func FuzzReceiptLines(f *testing.F) {
	for _, s := range receiptSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if !wire.IsReceiptLine(line) {
			return // the other lines: FuzzParseExtensions
		}
		got, err := wire.ParseReceiptLine(line)
		want, ok := refParseReceipt(line)
		if ok != (err == nil) {
			t.Fatalf("ParseReceiptLine(%q) = %+v, %v; the grammar says ok=%v", line, got, err, ok)
		}
		if err != nil {
			checkError(t, err, line)
		} else {
			var back []byte
			switch {
			case got.Digest != nil:
				if *got.Digest != *want.Digest || !wire.ValidReceiptDigest(*got.Digest) {
					t.Fatalf("ParseReceiptLine(%q) = %+v, want %+v", line, got.Digest, want.Digest)
				}
				back = wire.AppendReceiptDigest(nil, *got.Digest)
			default:
				p, w := got.Part, want.Part
				if p.Round != w.Round || p.Node != w.Node || p.Part != w.Part || p.Parts != w.Parts || !bytes.Equal(p.Data, w.Data) {
					t.Fatalf("ParseReceiptLine(%q) = %+v, want %+v", line, p, w)
				}
				back = []byte(strings.TrimSuffix(string(line), "\r") + "\n")
			}
			if string(back) != strings.TrimSuffix(string(line), "\r")+"\n" {
				t.Fatalf("round trip of %q: %q", line, back)
			}
		}
		// Without receipts on, every receipt line is an extension line
		// this node does not speak, with or without the others.
		for _, parse := range []func([]byte) (protocol.Message, error){wire.Parse, wire.ParseExtensions} {
			if _, err := parse(line); err == nil {
				t.Fatalf("parsed %q as a message", line)
			} else if pe := checkError(t, err, line); !pe.Extension && len(line) <= wire.MaxLine && !hasControl(line) {
				t.Fatalf("%q: %v, want Extension set", line, err)
			}
		}
	})
}

// An envelope of any length up to MaxReceipt, after the longest round
// and name, is cut into lines of at most MaxLine bytes, which a Reader
// with Receipts on reads back, among other lines, into the same bytes.
func TestReceiptLinesCarryEnvelopes(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	})
	for _, tc := range []struct{ round, node string }{{"", "B"}, {"r1", "C"}, {strings.Repeat("r", 128), strings.Repeat("n", 40)}} {
		for _, size := range []int{1, 69, 70, 255, 1000, wire.MaxReceipt - 1, wire.MaxReceipt, 100 + rng.IntN(wire.MaxReceipt-100)} {
			env := make([]byte, size)
			for i := range env {
				env[i] = byte(0x21 + rng.IntN(0x7e-0x21+1))
			}
			lines, err := wire.AppendReceipt(nil, tc.round, tc.node, env)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for l := range bytes.Lines(lines) {
				if len(l)-1 > wire.MaxLine {
					t.Fatalf("a line of %d bytes", len(l)-1)
				}
				n++
			}
			if n > 238 {
				t.Fatalf("%d bytes in %d lines", size, n)
			}
			var stream bytes.Buffer
			stream.WriteString("READY:r1\n")
			stream.Write(wire.AppendReceiptDigest(nil, wire.ReceiptDigest{Round: tc.round, Node: tc.node, Digest: digest64}))
			stream.Write(lines)
			stream.WriteString("COMPLETE:r1\n")
			r := wire.NewReader(&stream)
			r.Heartbeats, r.Receipts = true, true
			var asm wire.ReceiptAssembler
			var got []byte
			var msgs []string
			for {
				m, err := r.ReadMessage()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				l, ok := r.Receipt()
				switch {
				case !ok:
					msgs = append(msgs, m.String())
				case l.Digest != nil:
					if l.Digest.Digest != digest64 || l.Digest.Node != tc.node {
						t.Fatalf("digest %+v", l.Digest)
					}
				default:
					env, done, err := asm.Add(*l.Part)
					if err != nil {
						t.Fatal(err)
					}
					if done {
						got = env
					}
				}
			}
			if !bytes.Equal(got, env) || asm.Pending() || strings.Join(msgs, ",") != "READY r1,COMPLETE r1" {
				t.Fatalf("size %d: got %d bytes back, pending %v, messages %v", size, len(got), asm.Pending(), msgs)
			}
		}
	}
	for _, bad := range [][]byte{nil, make([]byte, wire.MaxReceipt+1), []byte("a b"), []byte("é")} {
		if _, err := wire.AppendReceipt(nil, "r1", "B", bad); err == nil {
			t.Errorf("AppendReceipt took %q", bad[:min(len(bad), 8)])
		}
	}
	if _, err := wire.AppendReceipt(nil, "bad id", "B", []byte("x")); err == nil {
		t.Error("AppendReceipt took a bad round")
	}
}

// Parts out of order, a receipt interrupted by another, or one longer
// than MaxReceipt are bad input; the assembler then starts afresh.
func TestReceiptAssemblerRefuses(t *testing.T) {
	part := func(node string, i, n int, data string) wire.ReceiptPart {
		return wire.ReceiptPart{Round: "r1", Node: node, Part: i, Parts: n, Data: []byte(data)}
	}
	for name, seq := range map[string][]wire.ReceiptPart{
		"part 2 first":  {part("B", 2, 3, "x")},
		"a part missed": {part("B", 1, 3, "x"), part("B", 3, 3, "x")},
		"interrupted":   {part("B", 1, 3, "x"), part("C", 1, 2, "x")},
		"parts changed": {part("B", 1, 3, "x"), part("B", 2, 4, "x")},
		"too long":      {part("B", 1, 999, strings.Repeat("x", wire.MaxReceipt)), part("B", 2, 999, "x")},
	} {
		var a wire.ReceiptAssembler
		var err error
		for _, p := range seq {
			if _, _, err = a.Add(p); err != nil {
				break
			}
		}
		var pe *wire.ProtocolError
		if !errors.As(err, &pe) || a.Pending() {
			t.Errorf("%s: %v, pending %v", name, err, a.Pending())
		}
		if env, done, err := a.Add(part("D", 1, 1, "ok")); err != nil || !done || string(env) != "ok" {
			t.Errorf("%s: then %q %v %v", name, env, done, err)
		}
	}
}

// docs/PROTOCOL.md, "Receipt lines": the machine's receipt messages are
// written as RDIGEST and RECEIPT lines, and read back (an RDIGEST line as
// the machine's message, the RECEIPT lines put together) unchanged.
func TestReceiptMessageRoundTrip(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	env := `{"payloadType":"application/vnd.in-toto+json","payload":"` + strings.Repeat("eyJf", 200) + `","signatures":[]}`
	rd := protocol.Message{Cmd: protocol.RDigestLine, Round: "r7", Receipt: &protocol.ReceiptNote{Node: "B", Digest: digest}}
	rc := protocol.Message{Cmd: protocol.ReceiptLine, Round: "r7", Receipt: &protocol.ReceiptNote{Node: "B", Digest: digest, Envelope: env}}
	for _, m := range []protocol.Message{rd, rc} {
		if !wire.Valid(m) {
			t.Fatalf("%v is not valid", m)
		}
	}
	if bad := (protocol.Message{Cmd: protocol.ReceiptLine, Round: "r7", Receipt: &protocol.ReceiptNote{Node: "B", Digest: digest, Envelope: "a b"}}); wire.Valid(bad) {
		t.Error("an envelope with a space is valid")
	}
	r := wire.NewReader(bytes.NewReader(wire.Append(wire.Append(nil, rd, false), rc, false)))
	r.Heartbeats, r.Receipts = true, true
	var asm wire.ReceiptAssembler
	var gotDigest protocol.Message
	var gotEnv []byte
	for {
		if _, err := r.ReadMessage(); err != nil {
			break
		}
		l, _ := r.Receipt()
		switch {
		case l.Digest != nil:
			gotDigest = l.Digest.Message()
		case l.Part != nil:
			if e, done, err := asm.Add(*l.Part); err != nil {
				t.Fatal(err)
			} else if done {
				gotEnv = e
			}
		}
	}
	if gotDigest.Cmd != protocol.RDigestLine || *gotDigest.Receipt != *rd.Receipt || gotDigest.Round != "r7" {
		t.Errorf("RDIGEST read back as %v", gotDigest)
	}
	if string(gotEnv) != env {
		t.Errorf("the envelope read back is %d bytes, want %d", len(gotEnv), len(env))
	}
}
