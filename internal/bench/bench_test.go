package bench

// Tests of the benchmark harness: short runs in both modes whose output
// must be sane (not timed assertions), and the task-order check that
// every run applies (draft: Protocol Operation, tasks run once per round
// in chain order).

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/secure"
)

// TestMain lets this test binary be an agent process for ModeProcs: the
// parent starts it again with CHAINSYNC_BENCH_AGENT=1.
func TestMain(m *testing.M) {
	if os.Getenv("CHAINSYNC_BENCH_AGENT") == "1" {
		os.Exit(AgentMain(os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// checkSane checks what any run must satisfy, whatever the machine's speed.
func checkSane(t *testing.T, run *Run, opts Options) {
	t.Helper()
	if len(run.Results) != len(opts.Ns) {
		t.Fatalf("%d results for %d chain lengths", len(run.Results), len(opts.Ns))
	}
	for i, r := range run.Results {
		n := opts.Ns[i]
		if r.N != n || r.Hops != 4*(n-1) || r.Rounds != opts.Rounds {
			t.Errorf("result %d: n %d hops %d rounds %d, want n %d hops %d rounds %d", i, r.N, r.Hops, r.Rounds, n, 4*(n-1), opts.Rounds)
		}
		for name, s := range map[string]Stats{"chain": r.Chain, "floor": r.Floor} {
			if !(s.Min > 0 && s.Min <= s.Median && s.Median <= s.P90 && s.P90 <= s.P99 && s.P99 <= s.Max) {
				t.Errorf("n=%d %s: statistics out of order: %+v", n, name, s)
			}
		}
		if r.Ratio <= 0 || r.ChainRate <= 0 || r.FloorRate <= 0 {
			t.Errorf("n=%d: ratio %v, rates %v and %v: want all positive", n, r.Ratio, r.ChainRate, r.FloorRate)
		}
		if want := n * (opts.Rounds + opts.Warmup); r.TasksChecked != want {
			t.Errorf("n=%d: %d task runs checked, want %d", n, r.TasksChecked, want)
		}
		if d := float64(opts.TaskSleep) / 1e3; d > 0 && (r.Chain.Min < float64(n)*d || r.Floor.Min < float64(n)*d) {
			t.Errorf("n=%d: a round took less than its %d tasks of %v: chain %v floor %v µs", n, n, opts.TaskSleep, r.Chain.Min, r.Floor.Min)
		}
	}
}

func TestInprocShortRun(t *testing.T) {
	for _, quick := range []bool{false, true} {
		opts := Options{Ns: []int{2, 5}, Mode: ModeInproc, Rounds: 20, Warmup: 3, Concurrent: 1, QuickTask: quick}
		run, err := Execute(context.Background(), opts)
		if err != nil {
			t.Fatalf("quick task %v: %v", quick, err)
		}
		checkSane(t, run, opts)
		if run.QuickTask != quick {
			t.Errorf("run says quick task %v, want %v", run.QuickTask, quick)
		}
	}
}

func TestInprocPipelinedWithTaskSleep(t *testing.T) {
	opts := Options{Ns: []int{3}, Mode: ModeInproc, Rounds: 40, Warmup: 2, Concurrent: 8, TaskSleep: 200 * time.Microsecond}
	run, err := Execute(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSane(t, run, opts)
}

func TestProcsShortRun(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CHAINSYNC_BENCH_AGENT", "1") // inherited by the agent processes only
	opts := Options{Ns: []int{3}, Mode: ModeProcs, Rounds: 15, Warmup: 2, Concurrent: 1,
		AgentCmd: []string{exe, "-test.run=^$"}, Timeout: time.Minute}
	run, err := Execute(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSane(t, run, opts)
	if run.Mode != ModeProcs {
		t.Errorf("mode %q", run.Mode)
	}
}

// An agent process that dies is reported with its stderr, not waited for.
func TestProcsAgentFailureIsReported(t *testing.T) {
	opts := Options{Ns: []int{2}, Mode: ModeProcs, Rounds: 5, Warmup: 0, Concurrent: 1,
		AgentCmd: []string{"sh", "-c", "echo agent broke >&2; exit 3"}, Timeout: 30 * time.Second}
	_, err := Execute(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "agent broke") {
		t.Fatalf("err %v, want it to carry the agent's stderr", err)
	}
}

// verify catches a task run twice, one missing, and one out of chain order.
func TestVerifyCatchesBadTaskRuns(t *testing.T) {
	spec := Spec{N: 2, Rounds: 2, Warmup: 0, Concurrent: 1}
	good := func() []Report {
		return []Report{
			{Index: 0, Tasks: []TaskRecord{{"r0", 10, 20}, {"r1", 50, 60}}},
			{Index: 1, Tasks: []TaskRecord{{"r0", 30, 40}, {"r1", 70, 80}}},
		}
	}
	if n, err := verify(spec, good()); err != nil || n != 4 {
		t.Fatalf("good records: %d checked, %v", n, err)
	}
	for name, tc := range map[string]struct {
		mut  func([]Report)
		want string
	}{
		"twice":        {func(r []Report) { r[1].Tasks = append(r[1].Tasks, TaskRecord{"r1", 90, 95}) }, "twice"},
		"missing":      {func(r []Report) { r[1].Tasks = r[1].Tasks[:1] }, "ran 1 tasks"},
		"out of order": {func(r []Report) { r[1].Tasks[1].Start = 55 }, "started before"},
		"unknown":      {func(r []Report) { r[0].Tasks[1].Round = "x" }, "never started"},
	} {
		reps := good()
		tc.mut(reps)
		if _, err := verify(spec, reps); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to say %q", name, err, tc.want)
		}
	}
}

func TestSummarise(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	s := Summarise(ds)
	if s.Median != 50 || s.P90 != 90 || s.P99 != 99 || s.Min != 1 || s.Max != 100 || s.Mean != 50.5 {
		t.Errorf("summarise 1..100µs: %+v", s)
	}
}

func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Mode: ModeInproc, Rounds: 1, Concurrent: 1}, "no chain length"},
		{Options{Ns: []int{1}, Mode: ModeInproc, Rounds: 1, Concurrent: 1}, "at least 2 nodes"},
		{Options{Ns: []int{2}, Mode: "threads", Rounds: 1, Concurrent: 1}, "use inproc"},
		{Options{Ns: []int{2}, Mode: ModeInproc, Rounds: 0, Concurrent: 1}, "rounds must be"},
		{Options{Ns: []int{2}, Mode: ModeInproc, Rounds: 1, Concurrent: 0}, "concurrent"},
		{Options{Ns: []int{2}, Mode: ModeProcs, Rounds: 1, Concurrent: 1}, "needs a command"},
		{Options{Ns: []int{2}, Mode: ModeInproc, Rounds: 1, Concurrent: 1, QuickTask: true, TaskSleep: time.Millisecond}, "must never block"},
		{Options{Ns: []int{2}, Mode: ModeInproc, Rounds: 1, Concurrent: 1, ParallelTasks: -1}, "parallel tasks must not be negative"},
	} {
		if _, err := Execute(context.Background(), tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want it to say %q", tc.o, err, tc.want)
		}
	}
}

// The text, JSON and SVG outputs carry the numbers of the run.
func TestOutputs(t *testing.T) {
	run := &Run{Mode: ModeInproc, Rounds: 10, Warmup: 1, Concurrent: 1, Machine: ThisMachine(), Results: []Result{
		{N: 2, Hops: 4, Rounds: 10, Chain: Stats{Median: 40, P90: 50, P99: 60, Min: 30, Max: 61},
			Floor: Stats{Median: 30, P90: 35, P99: 40, Min: 20, Max: 41}, Ratio: 1.33, ChainRate: 25000, FloorRate: 33000, TasksChecked: 22},
		{N: 16, Hops: 60, Rounds: 10, Chain: Stats{Median: 1500, P90: 1600, P99: 1700, Min: 1400, Max: 1800},
			Floor: Stats{Median: 1000, P90: 1100, P99: 1200, Min: 900, Max: 1300}, Ratio: 1.5, ChainRate: 660, FloorRate: 1000, TasksChecked: 176},
	}}
	var text bytes.Buffer
	if err := run.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mode inproc", "40.0µs", "1.50ms", "1.33", "1.50", "198 task runs"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := run.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Run
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Results) != 2 || back.Results[1].Floor.Median != 1000 {
		t.Errorf("JSON round trip: %v %+v", err, back)
	}
	var svg bytes.Buffer
	if err := run.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	s := svg.String()
	if !strings.HasPrefix(s, "<svg") || strings.Count(s, "<polyline") != 2 || strings.Count(s, "<circle") != 4 {
		t.Errorf("SVG: want two lines of two points:\n%s", s)
	}
}

// Durable runs (--state-dir, draft: Protocol Operation with the
// journal of docs/DESIGN.md "Restarts and durable state"): every node
// journals its state, tasks still run once and in order, the run reports
// fsyncs per round and leaves no journal behind; in both modes.
func TestDurableRun(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CHAINSYNC_BENCH_AGENT", "1") // inherited by the agent processes only
	for k, mode := range []string{ModeInproc, ModeProcs} {
		// Tasks one at a time (in order), then up to 16 at once (group
		// commit takes the steps of several rounds in one fsync).
		opts := Options{Ns: []int{3}, Mode: mode, Rounds: 40, Warmup: 2, Concurrent: 16, QuickTask: true, StateDir: dir, Timeout: time.Minute,
			ParallelTasks: 16 * k}
		if mode == ModeProcs {
			opts.AgentCmd = []string{exe, "-test.run=^$"}
		}
		run, err := Execute(context.Background(), opts)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		checkSane(t, run, opts)
		if run.ParallelTasks != opts.ParallelTasks {
			t.Errorf("%s: run says %d parallel tasks, want %d", mode, run.ParallelTasks, opts.ParallelTasks)
		}
		r := run.Results[0]
		if !run.Durable || r.FsyncsPerRound <= 0 || r.NodeFsyncsPerRound <= 0 || r.NodeFsyncsPerRound > r.FsyncsPerRound {
			t.Fatalf("%s: durable %v, fsyncs per round %v (busiest node %v): want a positive count", mode, run.Durable, r.FsyncsPerRound, r.NodeFsyncsPerRound)
		}
		var out bytes.Buffer
		if err := run.WriteText(&out); err != nil || !strings.Contains(out.String(), "fsyncs/round") {
			t.Fatalf("%s: the table has no fsyncs/round column: %v\n%s", mode, err, out.String())
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("%s: the run left %d entries in the state directory", mode, len(left))
		}
	}
}

// TestTLSRun: --tls runs the chain over TLS 1.3 with a pre-shared key
// made for the run (the draft's Security Considerations), in both modes,
// with rounds one at a time and in flight; the key is gone afterwards.
func TestTLSRun(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CHAINSYNC_BENCH_AGENT", "1") // inherited by the agent processes only
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "chainsync-bench-tls-*"))
	for _, mode := range []string{ModeInproc, ModeProcs} {
		for _, k := range []int{1, 16} {
			opts := Options{Ns: []int{3}, Mode: mode, Rounds: 30, Warmup: 2, Concurrent: k, TLS: true, Timeout: time.Minute}
			if mode == ModeProcs {
				opts.AgentCmd = []string{exe, "-test.run=^$"}
			}
			run, err := Execute(context.Background(), opts)
			if err != nil {
				t.Fatalf("%s, %d in flight: %v", mode, k, err)
			}
			checkSane(t, run, opts)
			var out bytes.Buffer
			if err := run.WriteText(&out); err != nil || !run.TLS || !strings.Contains(out.String(), "relay over TLS 1.3") {
				t.Fatalf("%s: run says TLS %v; the table does not say so: %v\n%s", mode, run.TLS, err, out.String())
			}
		}
	}
	if after, _ := filepath.Glob(filepath.Join(os.TempDir(), "chainsync-bench-tls-*")); len(after) > len(before) {
		t.Errorf("the runs left their keys behind: %v", after)
	}
}

// TestTLSAgentSpeaksTLS checks that an agent given a pre-shared key
// secures its node's links (the draft's Security Considerations: TLS
// 1.3, pre-shared keys): a client that proves the key, named as the
// node's predecessor, completes a TLS handshake with it (a plain-TCP
// node would not answer the handshake); and that the relay links are
// TLS too.
func TestTLSAgentSpeaksTLS(t *testing.T) {
	psk := filepath.Join(t.TempDir(), "psk")
	if err := secure.WritePSKFile(psk, false); err != nil {
		t.Fatal(err)
	}
	spec := Spec{N: 2, Rounds: 1, Concurrent: 1, PSKFile: psk}
	agents := make([]*agent, 2)
	for i := range agents {
		s := spec
		s.Index = i
		a, err := newAgent(s)
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		agents[i] = a
	}
	tail := agents[1].addrs()
	if err := agents[0].connect(tail); err != nil {
		t.Fatal(err)
	}
	if err := agents[1].connect(Addrs{}); err != nil {
		t.Fatal(err)
	}
	sec, err := secure.Load(secure.Options{PSKFile: psk, SelfName: "0", NextName: "1"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.DialTimeout("tcp", tail.Chain, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := sec.Client(ctx, raw, tail.Chain)
	if err != nil {
		t.Fatalf("TLS with the run's key to the Tail's node: %v", err)
	}
	c.Close()
	// The relay floor runs over TLS too.
	if err := agents[0].relayUp(); err != nil {
		t.Fatal(err)
	}
	for name, rc := range map[string]net.Conn{"the Head's relay to the Tail": agents[0].relayNext, "the Tail's relay from the Head": agents[1].relayPred} {
		if _, ok := rc.(interface{ ConnectionState() tls.ConnectionState }); !ok {
			t.Errorf("%s is a %T, not a TLS connection", name, rc)
		}
	}
}
