package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chainsync-go/chainsync/internal/bench"
)

const benchUsage = `Usage: chainsync bench [--n N,N,...] [--rounds R] [--mode inproc|procs] [flags]

Measures ChainSync rounds on n-node chains over loopback TCP, against a
floor measured in the same run and harness: a raw-TCP relay that sends one
line through the same 4(n-1) hops (the messages of one round) through the
same nodes. The Head alternates relay rounds and chain rounds. It prints the
median, p90 and p99 latency per round of each, and their ratio; every
node's tasks are checked to have run exactly once per round and in chain
order.

  --mode inproc   every node is goroutines in this process
  --mode procs    every node is its own OS process (this command started
                  again with a hidden subcommand); the relay runs through
                  the same processes

With --concurrent K the Head keeps K rounds (and the relay K lines) in
flight: the rounds/s columns are then pipelined throughput. Each relay hop
passes on every line that has arrived in one write, as the chain's readers
hand every line of a read to their node at once, so the floor is what the
links allow.

Examples:
  chainsync bench                                  n = 2, 4, 16 in one process
  chainsync bench --mode procs --n 16 --rounds 500
  chainsync bench --n 4 --concurrent 64 --rounds 20000
  chainsync bench --n 2,4,16,64 --json > bench.json --svg bench.svg
  chainsync bench --n 4 --task-sleep 1ms
  chainsync bench --n 16 --quick-task              tasks inside the node's loop
  chainsync bench --n 4 --concurrent 64 --rounds 5000 --state-dir /var/tmp/cs
                                                   durable rounds: journals fsynced
  chainsync bench --mode procs --n 16 --tls        links over TLS 1.3 (a pre-shared
                                                   key made for the run)
  chainsync bench --n 16 --rounds 2000 --cpuprofile cpu.out
                                                   where the time goes: go tool pprof cpu.out

Exit status: 0 measured; 1 a run failed (its error says which node and why);
2 usage error.

Flags:
`

type benchOpts struct {
	ns         string
	rounds     int
	warmup     int
	mode       string
	concurrent int
	taskSleep  time.Duration
	quickTask  bool
	parallel   int
	stateDir   string
	tls        bool
	timeout    time.Duration
	json       bool
	svg        string
	cpuProfile string
}

func (o *benchOpts) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.ns, "n", "2,4,16", "chain lengths to measure, `N,N,...` (each at least 2)")
	fs.IntVar(&o.rounds, "rounds", 200, "measured rounds per chain length")
	fs.IntVar(&o.warmup, "warmup", 20, "unmeasured rounds first, so links are up and code paths hot")
	fs.StringVar(&o.mode, "mode", bench.ModeInproc, "`MODE`: inproc (goroutines in this process) or procs (one process per node)")
	fs.IntVar(&o.concurrent, "concurrent", 1, "rounds in flight at once, `K` (pipelined throughput when above 1)")
	fs.DurationVar(&o.taskSleep, "task-sleep", 0, "each node's task sleeps `D` (0: empty tasks); the relay sleeps the same at each node")
	fs.IntVar(&o.parallel, "parallel-tasks", 0, "each node runs up to `K` tasks at once (the library's Config.MaxParallelTasks; default one at a time, in the order the rounds were opened)")
	fs.BoolVar(&o.quickTask, "quick-task", false, "run the empty tasks inside the node's loop, in the turn that started them (the library's Config.QuickTask), not after it")
	fs.StringVar(&o.stateDir, "state-dir", "", "make every node durable: each keeps its state journal (fsynced before it acts) in a fresh directory under `DIR`, removed afterwards; the table adds fsyncs per round. Put DIR on the disk to measure")
	fs.BoolVar(&o.tls, "tls", false, "secure every node's links, and the floor relay's, with TLS 1.3 and a pre-shared key made for the run")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up on a chain length after `D`")
	fs.BoolVar(&o.json, "json", false, "write the results as JSON on stdout instead of a table")
	fs.StringVar(&o.svg, "svg", "", "also plot latency against n for chain and floor into `FILE` (SVG)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to `FILE` (--mode inproc only), for go tool pprof")
}

// parseNs reads a comma-separated list of chain lengths.
func parseNs(s string) ([]int, error) {
	var ns []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			return nil, fmt.Errorf("--n %q: %q is not a chain length of at least 2; give e.g. --n 2,4,16", s, f)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

func benchMain(args []string, stdout, stderr io.Writer) int {
	var o benchOpts
	fs := flag.NewFlagSet("chainsync bench", flag.ContinueOnError)
	quietFlags(fs)
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return flagFailed(stdout, stderr, fs, "bench", err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "chainsync bench: unexpected argument %q\nRun \"chainsync bench --help\" for the flags.\n", fs.Arg(0))
		return ExitUsage
	}
	ns, err := parseNs(o.ns)
	if err != nil {
		fmt.Fprintf(stderr, "chainsync bench: %v\n", err)
		return ExitUsage
	}
	opts := bench.Options{Ns: ns, Mode: o.mode, Rounds: o.rounds, Warmup: o.warmup,
		Concurrent: o.concurrent, TaskSleep: o.taskSleep, QuickTask: o.quickTask, ParallelTasks: o.parallel, StateDir: o.stateDir, TLS: o.tls, Timeout: o.timeout, Progress: stderr}
	if o.mode == bench.ModeProcs {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "chainsync bench: --mode procs starts this program again, but its path is unknown: %v\n", err)
			return ExitError
		}
		opts.AgentCmd = []string{exe, benchAgentCommand}
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "chainsync bench: %v\n", err)
		return ExitUsage
	}
	if o.cpuProfile != "" {
		if o.mode != bench.ModeInproc {
			fmt.Fprintf(stderr, "chainsync bench: --cpuprofile needs --mode inproc: with --mode procs the nodes run in other processes\n")
			return ExitUsage
		}
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "chainsync bench: --cpuprofile: %v\n", err)
			return ExitUsage
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "chainsync bench: --cpuprofile: %v\n", err)
			return ExitError
		}
		defer pprof.StopCPUProfile()
	}
	// Check the SVG file can be written before spending minutes measuring.
	var svg *os.File
	if o.svg != "" {
		if svg, err = os.Create(o.svg); err != nil {
			fmt.Fprintf(stderr, "chainsync bench: --svg: %v\n", err)
			return ExitUsage
		}
		defer svg.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run, err := bench.Execute(ctx, opts)
	if err != nil {
		if svg != nil {
			svg.Close()
			os.Remove(o.svg)
		}
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "chainsync bench: interrupted\n")
			return ExitInterrupted
		}
		fmt.Fprintf(stderr, "chainsync bench: %v\n", err)
		return ExitError
	}
	run.Version = "chainsync " + Version
	if o.json {
		err = run.WriteJSON(stdout)
	} else {
		err = run.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "chainsync bench: %v\n", err)
		return ExitError
	}
	if svg != nil {
		if err := run.WriteSVG(svg); err != nil {
			fmt.Fprintf(stderr, "chainsync bench: --svg: %v\n", err)
			return ExitError
		}
		if err := svg.Close(); err != nil {
			fmt.Fprintf(stderr, "chainsync bench: --svg: %v\n", err)
			return ExitError
		}
	}
	return ExitOK
}

// benchAgentCommand is the hidden subcommand that --mode procs starts for
// each node; it talks to its parent over stdin and stdout.
const benchAgentCommand = "bench-agent"

func benchAgentMain(stdout, stderr io.Writer) int {
	if fi, err := os.Stdin.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		fmt.Fprintf(stderr, "chainsync %s: this is one node of chainsync bench --mode procs, which starts it; run chainsync bench instead\n", benchAgentCommand)
		return ExitUsage
	}
	return bench.AgentMain(os.Stdin, stdout, stderr)
}
