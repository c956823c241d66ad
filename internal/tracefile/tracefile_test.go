package tracefile_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/chaintest"
	"github.com/chainsync-go/chainsync/internal/tracefile"
	"github.com/chainsync-go/chainsync/protocol"
)

// runTraced runs rounds on a real n-node chain over loopback TCP, each node
// writing its trace file into dir (with a node record when hdr), and
// returns the files in chain order.
func runTraced(t *testing.T, rng *rand.Rand, dir string, n int, ids []string, hdr bool) []string {
	t.Helper()
	names := chaintest.Names(n)
	files := make([]string, n)
	writers := make([]*tracefile.Writer, n)
	nodes := chaintest.Start(t, n, func(i int, cfg *chainsync.Config) {
		files[i] = filepath.Join(dir, names[i]+".jsonl")
		h := tracefile.Record{Node: names[i]}
		if hdr {
			h.Role = protocol.RoleOf(i > 0, i < n-1).String()
			h.Next, h.Listen = cfg.Next, cfg.Listen
		}
		w, err := tracefile.Append(files[i], h)
		if err != nil {
			t.Fatal(err)
		}
		writers[i] = w
		cfg.Trace = w.Observe
		cfg.Rounds, cfg.MaxRounds = ids, len(ids)
		// Tasks of random length, to vary how the nodes' events
		// interleave, measured in yields, not in time: nothing here
		// reads the task's duration, and the chain runs on real
		// sockets, so a synctest bubble could not advance its clock.
		yields := rng.IntN(50)
		cfg.Task = func(ctx context.Context, _ string) error {
			for range yields {
				runtime.Gosched()
			}
			return nil
		}
	})
	type rdy struct {
		node  int
		round string
	}
	var plan []rdy
	for i := range nodes {
		for _, r := range ids {
			plan = append(plan, rdy{i, r})
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	for _, p := range plan {
		if err := nodes[p.node].Ready(p.round); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, nd := range nodes {
		for _, r := range ids {
			res, err := nd.Wait(ctx, r)
			if err != nil || res.Status != chainsync.StatusDone {
				t.Fatalf("%s round %q: %v %v", names[i], r, res.Status, err)
			}
		}
	}
	for i, nd := range nodes {
		nd.Close()
		if err := writers[i].Close(); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// ladder is what a test reads back from a rendered SVG.
type ladder struct {
	lanes []string
	msgs  map[string]int // per data-round
	cmds  map[string]int // per data-command
	tasks int
}

// parseSVG checks that b is well-formed XML with an svg root in the SVG
// namespace and collects the lanes (in document order) and the msg
// elements.
func parseSVG(t *testing.T, b []byte) ladder {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	l := ladder{msgs: map[string]int{}, cmds: map[string]int{}}
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if depth == 0 && (se.Name.Local != "svg" || se.Name.Space != "http://www.w3.org/2000/svg") {
			t.Fatalf("root element %v, want svg in the SVG namespace", se.Name)
		}
		depth++
		attr := map[string]string{}
		for _, a := range se.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch attr["class"] {
		case "lane":
			l.lanes = append(l.lanes, attr["data-node"])
		case "msg":
			l.msgs[attr["data-round"]]++
			l.cmds[attr["data-command"]]++
		case "task":
			l.tasks++
		}
	}
	return l
}

var nanoTime = regexp.MustCompile(`^\{"time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}(Z|[+-]\d\d:\d\d)",`)

func seeded(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	})
	return rand.New(rand.NewPCG(seed, 1))
}

// Draft section "Protocol Flow" (its A-B-C-D figure): the traces of a real
// chain, merged in any file order, draw one lane per node in chain order
// and exactly 4(n-1) messages per round: n-1 each of READY and START, and
// 2(n-1) COMPLETE.
func TestRenderRealChain(t *testing.T) {
	for _, tc := range []struct {
		n   int
		ids []string
		hdr bool // node records with role and addresses (as chainsync run writes)
	}{
		{4, []string{""}, true},
		{5, []string{"r1", "r2", "r3"}, true},
		{4, []string{"x", "y"}, false}, // order from the READY wave alone
	} {
		t.Run(fmt.Sprintf("n=%d/rounds=%d/hdr=%v", tc.n, len(tc.ids), tc.hdr), func(t *testing.T) {
			rng := seeded(t)
			files := runTraced(t, rng, t.TempDir(), tc.n, tc.ids, tc.hdr)
			var traces []tracefile.Trace
			for _, f := range files {
				recs, err := tracefile.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				traces = append(traces, tracefile.Trace{File: f, Records: recs})
			}
			rng.Shuffle(len(traces), func(i, j int) { traces[i], traces[j] = traces[j], traces[i] })
			var out bytes.Buffer
			sum, err := tracefile.Render(&out, traces, tracefile.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := parseSVG(t, out.Bytes())
			names := chaintest.Names(tc.n)
			if !slices.Equal(got.lanes, names) || !slices.Equal(sum.Lanes, names) {
				t.Errorf("lanes %v (summary %v), want chain order %v", got.lanes, sum.Lanes, names)
			}
			for _, r := range tc.ids {
				if got.msgs[r] != 4*(tc.n-1) || sum.Messages[r] != 4*(tc.n-1) {
					t.Errorf("round %q: %d msg elements (summary %d), want 4(n-1) = %d", r, got.msgs[r], sum.Messages[r], 4*(tc.n-1))
				}
			}
			if len(got.msgs) != len(tc.ids) {
				t.Errorf("msg elements for rounds %v, want %v", got.msgs, tc.ids)
			}
			k := (tc.n - 1) * len(tc.ids)
			if got.cmds["READY"] != k || got.cmds["START"] != k || got.cmds["COMPLETE"] != 2*k {
				t.Errorf("per command %v, want READY %d START %d COMPLETE %d", got.cmds, k, k, 2*k)
			}
			if got.tasks != tc.n*len(tc.ids) {
				t.Errorf("%d task bars, want %d", got.tasks, tc.n*len(tc.ids))
			}
			if t.Failed() {
				t.Logf("SVG:\n%s", out.String())
			}
		})
	}
}

// Every event of a real round is in the files, with nanosecond times, and
// reads back: across the chain 4(n-1) messages on the wire, sent and
// received,
// one task start and one round end per node.
func TestTraceFileRecords(t *testing.T) {
	rng := seeded(t)
	dir := t.TempDir()
	files := runTraced(t, rng, dir, 3, []string{""}, true)
	sent, recv := 0, 0
	kinds := map[string]int{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		first := strings.SplitN(string(raw), "\n", 2)[0]
		if !strings.Contains(first, `"kind":"node"`) {
			t.Errorf("%s starts with %s, want the node record", f, first)
		}
		recs, err := tracefile.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			kinds[r.Kind]++
			switch r.Kind {
			case tracefile.KindSent:
				if !r.Queued { // a queued message is recorded again when it goes out
					sent++
				}
			case tracefile.KindReceived:
				recv++
			}
		}
		// Times keep all nine digits.
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if !nanoTime.MatchString(line) {
				t.Fatalf("line without a nanosecond time first: %s", line)
			}
		}
	}
	if sent != 8 || recv != 8 {
		t.Errorf("sent %d received %d records, want 4(n-1) = 8 each", sent, recv)
	}
	for _, k := range []string{tracefile.KindState, tracefile.KindTaskStart, tracefile.KindTaskEnd, tracefile.KindLinkUp, tracefile.KindRoundDone} {
		if kinds[k] == 0 {
			t.Errorf("no %s records (got %v)", k, kinds)
		}
	}
	if kinds[tracefile.KindTaskStart] != 3 || kinds[tracefile.KindRoundDone] != 3 {
		t.Errorf("records %v, want 3 task starts and 3 round ends", kinds)
	}
}

// A trace cut short by a crash (last line torn) still reads; damage
// anywhere else is an error that names the line.
func TestReadTornAndDamaged(t *testing.T) {
	good := `{"time":"2026-11-30T12:00:00.000000001Z","node":"A","kind":"node","round":""}` + "\n" +
		`{"time":"2026-11-30T12:00:00.000000002Z","node":"A","kind":"sent","round":"","command":"READY","side":"succ"}` + "\n"
	recs, err := tracefile.Read(strings.NewReader(good+`{"time":"2026-11-30T12:0`), "t")
	if err != nil || len(recs) != 2 {
		t.Fatalf("torn last line: %d records, %v; want 2, nil", len(recs), err)
	}
	if recs[1].Time.Nanosecond() != 2 {
		t.Errorf("time %v lost its nanoseconds", recs[1].Time)
	}
	_, err = tracefile.Read(strings.NewReader(good+"garbage\n"+good), "t")
	if err == nil || !strings.Contains(err.Error(), "t:3:") {
		t.Errorf("damaged line 3: err %v, want one naming t:3", err)
	}
	var out bytes.Buffer
	if _, err := tracefile.Render(&out, nil, tracefile.Options{}); err == nil {
		t.Error("rendering no traces succeeded")
	}
}

// Draft section "Error Handling": a failed task is drawn as a failed task
// bar with its fault marked, and the messages that did happen still pair
// up (3 of them: READY, START, COMPLETE to the failing node).
func TestRenderFault(t *testing.T) {
	dir := t.TempDir()
	names := chaintest.Names(2)
	writers := make([]*tracefile.Writer, 2)
	files := make([]string, 2)
	nodes := chaintest.Start(t, 2, func(i int, cfg *chainsync.Config) {
		files[i] = filepath.Join(dir, names[i]+".jsonl")
		w, err := tracefile.Append(files[i], tracefile.Record{Node: names[i], Role: protocol.RoleOf(i > 0, i < 1).String(), Next: cfg.NextName})
		if err != nil {
			t.Fatal(err)
		}
		writers[i], cfg.Trace = w, w.Observe
		if i == 1 {
			cfg.Task = func(context.Context, string) error { return fmt.Errorf("disk full") }
		}
	})
	for _, nd := range nodes {
		nd.Ready("")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if res, _ := nodes[1].Wait(ctx, ""); res.Status != chainsync.StatusTaskFailed {
		t.Fatalf("B: %v, want task failed", res.Status)
	}
	for i, nd := range nodes {
		nd.Close()
		writers[i].Close()
	}
	var traces []tracefile.Trace
	for _, f := range files {
		recs, err := tracefile.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		traces = append(traces, tracefile.Trace{File: f, Records: recs})
	}
	var out bytes.Buffer
	if _, err := tracefile.Render(&out, traces, tracefile.Options{}); err != nil {
		t.Fatal(err)
	}
	got := parseSVG(t, out.Bytes())
	if got.msgs[""] != 3 || !slices.Equal(got.lanes, names) {
		t.Errorf("msgs %v lanes %v, want 3 messages, lanes A B", got.msgs, got.lanes)
	}
	svg := out.String()
	if !strings.Contains(svg, `class="task failed"`) || !strings.Contains(svg, `class="fault"`) || !strings.Contains(svg, "task-failed") {
		t.Errorf("no failed task bar or fault mark:\n%s", svg)
	}
}

// docs/DESIGN.md "Restarts and durable state": a node restarted by its own task
// appends to its trace file, and the render draws both runs in one lane.
func TestAppendAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "B.jsonl")
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for run := range 2 {
		w, err := tracefile.Append(path, tracefile.Record{Node: "B", Role: "tail"})
		if err != nil {
			t.Fatal(err)
		}
		w.Add(tracefile.Record{Time: t0.Add(time.Duration(run) * time.Second), Node: "B", Kind: tracefile.KindReceived, Command: "READY", Side: "pred"})
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := tracefile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || recs[0].Kind != tracefile.KindNode || recs[2].Kind != tracefile.KindNode {
		t.Fatalf("records %+v, want node, received, node, received", recs)
	}
	var out bytes.Buffer
	sum, err := tracefile.Render(&out, []tracefile.Trace{{File: path, Records: recs}}, tracefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sum.Lanes, []string{"B"}) || sum.Messages[""] != 2 {
		t.Errorf("lanes %v messages %v, want one lane B with 2 messages (their senders not drawn)", sum.Lanes, sum.Messages)
	}
	parseSVG(t, out.Bytes())
}
