package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync/secure"
)

// Modes of a run.
const (
	ModeInproc = "inproc" // every node a set of goroutines in this process
	ModeProcs  = "procs"  // every node its own OS process
)

// Options describe a whole run: one chain per entry of Ns.
type Options struct {
	Ns         []int         // chain lengths, each >= 2
	Mode       string        // ModeInproc or ModeProcs
	Rounds     int           // measured rounds per chain
	Warmup     int           // unmeasured rounds first (links up, code paths hot)
	Concurrent int           // rounds in flight at once (1: one at a time)
	TaskSleep  time.Duration // each task sleeps this long (0: empty tasks)
	QuickTask  bool          // run the (empty) tasks inline: chainsync.Config.QuickTask
	// ParallelTasks is every node's chainsync.Config.MaxParallelTasks (0:
	// the default, one task at a time in the order rounds were opened).
	ParallelTasks int
	// StateDir, if set, makes every node durable (chainsync.Config.StateDir):
	// each chain length gets a fresh directory in it for its nodes'
	// journals, removed after the run.
	StateDir string
	// TLS secures every node's links with TLS 1.3 and a pre-shared key
	// made for the run (package secure), and the relay floor's links
	// too, so that the floor is still what the same links allow.
	TLS     bool
	Timeout time.Duration // bound on each chain's run (0: 5 minutes)
	// AgentCmd starts one agent process in ModeProcs: the program and its
	// arguments. The process must call AgentMain with its stdin and stdout.
	AgentCmd []string
	// Progress, if set, gets one line per chain as the run goes.
	Progress io.Writer
}

// Stats summarise latencies, in microseconds.
type Stats struct {
	Median float64 `json:"median_us"`
	P90    float64 `json:"p90_us"`
	P99    float64 `json:"p99_us"`
	Mean   float64 `json:"mean_us"`
	Min    float64 `json:"min_us"`
	Max    float64 `json:"max_us"`
}

// Result is one chain length's measurement.
type Result struct {
	N          int     `json:"n"`
	Hops       int     `json:"hops"` // 4(n-1): messages per fault-free round, and relay hops
	Rounds     int     `json:"rounds"`
	Concurrent int     `json:"concurrent"`
	Chain      Stats   `json:"chain"` // per-round latency of ChainSync rounds
	Floor      Stats   `json:"floor"` // per-round latency of the raw-TCP relay
	Ratio      float64 `json:"ratio"` // Chain.Median / Floor.Median
	// Rounds completed per second: pipelined throughput when Concurrent
	// > 1, one round at a time otherwise.
	ChainRate float64 `json:"chain_rounds_per_s"`
	FloorRate float64 `json:"floor_rounds_per_s"`
	SetupMS   float64 `json:"setup_ms"` // starting and connecting the n agents
	// TasksChecked is the number of task runs verified: once per node per
	// round (warm-up included), each after its predecessor's.
	TasksChecked int `json:"tasks_checked"`
	// Durable runs (StateDir): the fsyncs of all the nodes' journals per
	// round (warm-up included), and of the busiest node alone.
	FsyncsPerRound     float64 `json:"fsyncs_per_round,omitempty"`
	NodeFsyncsPerRound float64 `json:"node_fsyncs_per_round,omitempty"`
}

// Machine says where a run was measured.
type Machine struct {
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	GoVersion string `json:"go_version"`
}

// Run is a whole run's outcome.
type Run struct {
	Mode          string   `json:"mode"`
	Rounds        int      `json:"rounds"`
	Warmup        int      `json:"warmup"`
	Concurrent    int      `json:"concurrent"`
	TaskSleepMS   float64  `json:"task_sleep_ms"`
	QuickTask     bool     `json:"quick_task"`
	ParallelTasks int      `json:"parallel_tasks,omitempty"`
	Durable       bool     `json:"durable,omitempty"` // every node kept a state journal
	TLS           bool     `json:"tls,omitempty"`     // the nodes' links were TLS (pre-shared key)
	Machine       Machine  `json:"machine"`
	Version       string   `json:"version,omitempty"`
	Results       []Result `json:"results"`
}

// Validate checks opts and returns an error that says what to change.
func (o *Options) Validate() error {
	if len(o.Ns) == 0 {
		return errors.New("no chain length: give --n, e.g. --n 2,4,16")
	}
	for _, n := range o.Ns {
		if n < 2 {
			return fmt.Errorf("chain length %d: a chain needs at least 2 nodes for hops to measure", n)
		}
	}
	if o.Mode != ModeInproc && o.Mode != ModeProcs {
		return fmt.Errorf("mode %q: use %s (goroutines in one process) or %s (one process per node)", o.Mode, ModeInproc, ModeProcs)
	}
	if o.Mode == ModeProcs && len(o.AgentCmd) == 0 {
		return errors.New("mode procs needs a command to start agent processes")
	}
	if o.StateDir != "" {
		if fi, err := os.Stat(o.StateDir); err == nil && !fi.IsDir() {
			return fmt.Errorf("--state-dir %s is not a directory: give a directory on the disk to measure", o.StateDir)
		}
	}
	spec := Spec{N: 2, Rounds: o.Rounds, Warmup: o.Warmup, Concurrent: o.Concurrent, TaskSleep: o.TaskSleep, QuickTask: o.QuickTask, ParallelTasks: o.ParallelTasks}
	return spec.validate()
}

// Execute runs every chain of opts in turn.
func Execute(ctx context.Context, opts Options) (*Run, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Minute
	}
	run := &Run{Mode: opts.Mode, Rounds: opts.Rounds, Warmup: opts.Warmup, Concurrent: opts.Concurrent,
		TaskSleepMS: float64(opts.TaskSleep) / 1e6, QuickTask: opts.QuickTask, ParallelTasks: opts.ParallelTasks, Durable: opts.StateDir != "", TLS: opts.TLS, Machine: ThisMachine()}
	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("--state-dir: %w", err)
		}
	}
	psk := ""
	if opts.TLS {
		dir, err := os.MkdirTemp("", "chainsync-bench-tls-")
		if err != nil {
			return nil, fmt.Errorf("--tls: a directory for the run's pre-shared key: %w", err)
		}
		defer os.RemoveAll(dir)
		psk = filepath.Join(dir, "psk")
		if err := secure.WritePSKFile(psk, false); err != nil {
			return nil, fmt.Errorf("--tls: %w", err)
		}
	}
	for _, n := range opts.Ns {
		res, err := executeOne(ctx, opts, n, psk)
		if err != nil {
			return run, fmt.Errorf("n=%d: %w", n, err)
		}
		run.Results = append(run.Results, res)
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "n=%d done: chain median %.1fµs, floor %.1fµs, ratio %.2f\n",
				n, res.Chain.Median, res.Floor.Median, res.Ratio)
		}
	}
	return run, nil
}

// executeOne runs the chain of n nodes; psk, if set, is the file of
// the key that secures their links.
func executeOne(ctx context.Context, opts Options, n int, psk string) (Result, error) {
	spec := Spec{N: n, Warmup: opts.Warmup, Rounds: opts.Rounds, Concurrent: opts.Concurrent,
		TaskSleep: opts.TaskSleep, QuickTask: opts.QuickTask, ParallelTasks: opts.ParallelTasks, Timeout: opts.Timeout, PSKFile: psk}
	if opts.StateDir != "" {
		dir, err := os.MkdirTemp(opts.StateDir, fmt.Sprintf("bench-n%d-", n))
		if err != nil {
			return Result{}, fmt.Errorf("--state-dir: %w", err)
		}
		defer os.RemoveAll(dir)
		spec.StateDir = dir
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	var (
		reps  []Report
		setup time.Duration
		err   error
	)
	if opts.Mode == ModeProcs {
		reps, setup, err = runProcs(ctx, spec, opts.AgentCmd)
	} else {
		reps, setup, err = runInproc(ctx, spec)
	}
	if err != nil {
		return Result{}, err
	}
	return analyse(spec, reps, setup)
}

// runInproc runs n agents as goroutines of this process.
func runInproc(ctx context.Context, spec Spec) ([]Report, time.Duration, error) {
	t0 := time.Now()
	agents := make([]*agent, spec.N)
	defer func() {
		for _, a := range agents {
			if a != nil {
				a.close()
			}
		}
	}()
	for i := range agents {
		s := spec
		s.Index = i
		a, err := newAgent(s)
		if err != nil {
			return nil, 0, err
		}
		agents[i] = a
	}
	// In index order: each dial lands in the next listener's backlog
	// before the next agent accepts it.
	for i, a := range agents {
		var next Addrs
		if i+1 < len(agents) {
			next = agents[i+1].addrs()
		}
		if err := a.connect(next); err != nil {
			return nil, 0, err
		}
	}
	setup := time.Since(t0)
	reps := make([]Report, spec.N)
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Go(func() { reps[i] = a.run(ctx) })
	}
	wg.Wait()
	return reps, setup, reportErrors(reps)
}

func reportErrors(reps []Report) error {
	var errs []error
	for _, r := range reps {
		if r.Err != "" {
			errs = append(errs, errors.New(r.Err))
		}
	}
	return errors.Join(errs...)
}

// child is one agent process as its parent sees it.
type child struct {
	cmd    *exec.Cmd
	enc    *json.Encoder
	stdin  io.Closer
	dec    *json.Decoder
	stderr *tailBuffer
	wait   func() error // cmd.Wait, once
}

// runProcs runs n agents as child processes started with agentCmd and
// steers them over their stdin and stdout, one JSON value a line: the
// parent sends the Spec, reads the child's Addrs, sends its successor's
// Addrs, reads its Report, and closes stdin to let it go.
func runProcs(ctx context.Context, spec Spec, agentCmd []string) ([]Report, time.Duration, error) {
	t0 := time.Now()
	kids := make([]*child, spec.N)
	defer func() {
		for _, k := range kids {
			if k == nil {
				continue
			}
			k.stdin.Close()
			done := make(chan struct{})
			go func() { k.wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				k.cmd.Process.Kill()
				<-done
			}
		}
	}()
	fail := func(i int, what string, err error) error {
		msg := fmt.Sprintf("node %d (process): %s: %v", i, what, err)
		if k := kids[i]; k != nil {
			// Its stderr is complete only once it has exited.
			k.cmd.Process.Kill()
			k.wait()
			if s := strings.TrimSpace(k.stderr.String()); s != "" {
				msg += "; its stderr: " + s
			}
		}
		return errors.New(msg)
	}
	for i := range kids {
		cmd := exec.Command(agentCmd[0], agentCmd[1:]...)
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, 0, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, 0, err
		}
		k := &child{cmd: cmd, enc: json.NewEncoder(in), stdin: in,
			dec: json.NewDecoder(bufio.NewReader(out)), stderr: &tailBuffer{max: 4096}}
		cmd.Stderr = k.stderr
		k.wait = sync.OnceValue(cmd.Wait)
		if err := cmd.Start(); err != nil {
			return nil, 0, fmt.Errorf("cannot start agent process %q: %w", agentCmd[0], err)
		}
		kids[i] = k
		s := spec
		s.Index = i
		if err := k.enc.Encode(s); err != nil {
			return nil, 0, fail(i, "sending its spec", err)
		}
	}
	// A child that hangs must not hang the parent: kill them all when the
	// run's time is up, which makes every read below fail.
	stop := context.AfterFunc(ctx, func() {
		for _, k := range kids {
			k.cmd.Process.Kill()
		}
	})
	defer stop()
	addrs := make([]Addrs, spec.N)
	for i, k := range kids {
		if err := k.dec.Decode(&addrs[i]); err != nil {
			return nil, 0, fail(i, "reading its addresses", err)
		}
	}
	for i, k := range kids {
		var next Addrs
		if i+1 < spec.N {
			next = addrs[i+1]
		}
		if err := k.enc.Encode(next); err != nil {
			return nil, 0, fail(i, "sending its successor", err)
		}
	}
	sent := time.Since(t0)
	reps := make([]Report, spec.N)
	var connect time.Duration
	for i, k := range kids {
		if err := k.dec.Decode(&reps[i]); err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (the run took longer than its timeout)", ctx.Err())
			}
			return nil, 0, fail(i, "reading its report", err)
		}
		connect = max(connect, reps[i].Setup)
	}
	return reps, sent + connect, reportErrors(reps)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// AgentMain is the body of an agent process: it reads its Spec and its
// successor's addresses from in, writes its own addresses and finally its
// Report to out (one JSON value a line), then waits for in to close. It
// returns the process's exit status.
func AgentMain(in io.Reader, out io.Writer, errOut io.Writer) int {
	dec := json.NewDecoder(bufio.NewReader(in))
	enc := json.NewEncoder(out)
	var spec Spec
	if err := dec.Decode(&spec); err != nil {
		fmt.Fprintf(errOut, "chainsync bench agent: reading the spec: %v (this command is started by chainsync bench --mode procs, not by hand)\n", err)
		return 2
	}
	a, err := newAgent(spec)
	if err != nil {
		fmt.Fprintf(errOut, "chainsync bench agent: %v\n", err)
		return 1
	}
	defer a.close()
	if err := enc.Encode(a.addrs()); err != nil {
		return 1
	}
	var next Addrs
	if err := dec.Decode(&next); err != nil {
		fmt.Fprintf(errOut, "chainsync bench agent %d: reading the successor's address: %v\n", spec.Index, err)
		return 1
	}
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	t0 := time.Now()
	var rep Report
	if err := a.connect(next); err != nil {
		rep = Report{Index: spec.Index, Err: err.Error()}
	} else {
		setup := time.Since(t0)
		rep = a.run(ctx)
		rep.Setup = setup
	}
	if err := enc.Encode(rep); err != nil {
		return 1
	}
	// Stay up until the parent has every report: a neighbour may still
	// need this node to deliver its last messages.
	var quit struct{}
	dec.Decode(&quit)
	if rep.Err != "" {
		return 1
	}
	return 0
}

// analyse checks the task records of every agent and summarises the
// Head's measurements.
func analyse(spec Spec, reps []Report, setup time.Duration) (Result, error) {
	checked, err := verify(spec, reps)
	if err != nil {
		return Result{}, err
	}
	head := reps[0]
	if len(head.Chain) != spec.Rounds || len(head.Relay) != spec.Rounds {
		return Result{}, fmt.Errorf("the Head measured %d chain and %d relay rounds, want %d each", len(head.Chain), len(head.Relay), spec.Rounds)
	}
	res := Result{
		N: spec.N, Hops: 4 * (spec.N - 1), Rounds: spec.Rounds, Concurrent: spec.Concurrent,
		Chain: Summarise(head.Chain), Floor: Summarise(head.Relay),
		SetupMS: float64(setup) / 1e6, TasksChecked: checked,
	}
	if res.Floor.Median > 0 {
		res.Ratio = res.Chain.Median / res.Floor.Median
	}
	if head.ChainElapsed > 0 {
		res.ChainRate = float64(spec.Rounds) / head.ChainElapsed.Seconds()
	}
	if head.RelayElapsed > 0 {
		res.FloorRate = float64(spec.Rounds) / head.RelayElapsed.Seconds()
	}
	if spec.StateDir != "" {
		var all, most uint64
		for _, r := range reps {
			all += r.Syncs
			most = max(most, r.Syncs)
		}
		rounds := float64(spec.Warmup + spec.Rounds)
		res.FsyncsPerRound, res.NodeFsyncsPerRound = float64(all)/rounds, float64(most)/rounds
	}
	return res, nil
}

// verify checks that every node ran each round's task exactly once and,
// within each round, only after its predecessor's task ended (draft:
// tasks run in chain order). It returns the number of task runs checked.
func verify(spec Spec, reps []Report) (int, error) {
	warm, ids := spec.roundIDs()
	all := append(warm, ids...)
	known := make(map[string]bool, len(all))
	for _, id := range all {
		known[id] = true
	}
	byNode := make([]map[string]TaskRecord, spec.N)
	checked := 0
	for i, rep := range reps {
		m := make(map[string]TaskRecord, len(rep.Tasks))
		for _, t := range rep.Tasks {
			if _, dup := m[t.Round]; dup {
				return 0, fmt.Errorf("node %d ran the task of round %s twice", i, t.Round)
			}
			if !known[t.Round] {
				return 0, fmt.Errorf("node %d ran a task for round %q, which the run never started", i, t.Round)
			}
			m[t.Round] = t
		}
		if len(m) != len(all) {
			return 0, fmt.Errorf("node %d ran %d tasks, want one for each of the %d rounds", i, len(m), len(all))
		}
		byNode[i] = m
	}
	for _, id := range all {
		for i := range spec.N {
			t, ok := byNode[i][id]
			if !ok {
				return 0, fmt.Errorf("node %d never ran the task of round %s", i, id)
			}
			if i > 0 && t.Start < byNode[i-1][id].End {
				return 0, fmt.Errorf("round %s: node %d's task started before node %d's ended", id, i, i-1)
			}
			checked++
		}
	}
	return checked, nil
}

// Summarise is the median, percentiles (nearest rank), mean and extremes
// of ds, in microseconds; zero for none.
func Summarise(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	// Nearest rank: the smallest value with at least p of them at or below it.
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Stats{Median: us(rank(0.5)), P90: us(rank(0.9)), P99: us(rank(0.99)),
		Mean: us(sum / time.Duration(len(s))), Min: us(s[0]), Max: us(s[len(s)-1])}
}

// ThisMachine describes the machine the run is on.
func ThisMachine() Machine {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range bytes.Lines(b) {
			if k, v, ok := strings.Cut(string(line), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
