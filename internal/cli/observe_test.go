package cli

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync"
)

// countMsgs counts the class="msg" elements of a well-formed SVG.
func countMsgs(t *testing.T, svg []byte) int {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	dec.Strict = true
	n := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("not well-formed SVG: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			for _, a := range se.Attr {
				if a.Name.Local == "class" && a.Value == "msg" {
					n++
				}
			}
		}
	}
}

// Draft section "Protocol Flow": chainsync demo --svg draws the demo's run
// with 4(n-1) messages per round.
func TestDemoSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.svg")
	var out, errb bytes.Buffer
	if code := Main([]string{"demo", "-n", "3", "--rounds", "2", "--seed", "5", "--svg", path}, &out, &errb); code != ExitOK {
		t.Fatalf("demo: exit %d\n%s%s", code, out.String(), errb.String())
	}
	svg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := countMsgs(t, svg); n != 2*4*(3-1) {
		t.Errorf("%d msg elements, want 2 rounds x 4(n-1) = 16", n)
	}
	if !strings.Contains(out.String(), "picture:") {
		t.Errorf("demo does not say where the picture is:\n%s", out.String())
	}
	// A path that cannot be written is refused before the demo runs.
	out.Reset()
	code := Main([]string{"demo", "--svg", filepath.Join(t.TempDir(), "no", "such", "dir", "x.svg")}, &out, &errb)
	if code != ExitUsage || strings.Contains(out.String(), "ChainSync demo") {
		t.Errorf("unwritable --svg: exit %d, ran: %v", code, strings.Contains(out.String(), "ChainSync demo"))
	}
}

func TestFanout(t *testing.T) {
	if (fanout{}).hook() != nil {
		t.Error("no listeners: want a nil hook")
	}
	var a, b int
	h := fanout{func(chainsync.TraceEvent) { a++ }, func(chainsync.TraceEvent) { b++ }}.hook()
	h(chainsync.TraceEvent{})
	h(chainsync.TraceEvent{})
	if a != 2 || b != 2 {
		t.Errorf("listeners saw %d and %d events, want 2 each", a, b)
	}
}

// chainsync trace render and chainsync status refuse bad command lines
// with exit 2 and name what is wrong; unreadable files are exit 1; nothing
// is written.
func TestTraceAndStatusUsage(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "A.jsonl")
	os.WriteFile(good, []byte(`{"time":"2026-11-30T12:00:00.000000001Z","node":"A","kind":"node","round":"","role":"head"}`+"\n"+
		`{"time":"2026-11-30T12:00:00.000000002Z","node":"A","kind":"sent","round":"","command":"READY","side":"succ"}`+"\n"), 0o644)
	out := filepath.Join(dir, "out.svg")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"trace"}, ExitUsage, "render"},
		{[]string{"trace", "render", good}, ExitUsage, "-o"},
		{[]string{"trace", "render", "-o", out}, ExitUsage, "trace files"},
		{[]string{"trace", "render", filepath.Join(dir, "missing.jsonl"), "-o", out}, ExitError, "missing.jsonl"},
		{[]string{"trace", "render", good, "-o", out, "--order", "X,Y"}, ExitUsage, "does not name node(s) A"},
		{[]string{"status"}, ExitUsage, "status-addr"},
		{[]string{"status", "host-without-port"}, ExitUsage, "HOST:PORT"},
		{[]string{"status", "--timeout", "0", "127.0.0.1:1"}, ExitUsage, "--timeout"},
	} {
		var o, e bytes.Buffer
		code := Main(tc.args, &o, &e)
		if code != tc.code || !strings.Contains(e.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, e.String(), tc.code, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v wrote %s", tc.args, out)
		}
	}
	// Flags after the files work too.
	var o, e bytes.Buffer
	if code := Main([]string{"trace", "render", good, "-o", out, "--title", "t"}, &o, &e); code != ExitOK {
		t.Fatalf("render: exit %d: %s", code, e.String())
	}
	svg, _ := os.ReadFile(out)
	if n := countMsgs(t, svg); n != 1 {
		t.Errorf("%d msg elements, want 1 (a READY whose receiver is not drawn)", n)
	}
}
