package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/chaintest"
	"github.com/chainsync-go/chainsync/internal/tracefile"
	"github.com/chainsync-go/chainsync/protocol"
)

// fanout sends every trace event to several listeners (metrics, the trace
// file, ...), since chainsync.Config.Trace is one func. Each listener must
// be quick: the node calls it on the goroutine that carries out its steps.
type fanout []func(chainsync.TraceEvent)

// hook returns the Config.Trace for the listeners, nil if there are none.
func (f fanout) hook() func(chainsync.TraceEvent) {
	switch len(f) {
	case 0:
		return nil
	case 1:
		return f[0]
	}
	return func(ev chainsync.TraceEvent) {
		for _, h := range f {
			h(ev)
		}
	}
}

const traceUsage = `Usage: chainsync trace render [--order A,B,...] [--title T] -o OUT.svg FILE...

Draws the traces of a chain's nodes (chainsync run --trace FILE, one file
per node, from any machines) as one ladder diagram in SVG: one lane per node
in chain order, one arrow per message, tasks as bars, faults marked, a time
axis. Open it in a web browser.

The chain order comes from the traces (each file starts with its node's name
and neighbours); --order gives it explicitly. Traces from different machines
are drawn on their own clocks, so keep the clocks in sync (NTP) for arrows
that slope the right way.

Examples:
  chainsync trace render A.jsonl B.jsonl C.jsonl D.jsonl -o ladder.svg
  chainsync trace render traces/*.jsonl --order A,B,C,D -o - > ladder.svg

Exit status: 0 written; 1 a file could not be read or written; 2 usage error.

Flags:
`

type traceOpts struct {
	out, order, title string
}

func (o *traceOpts) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.out, "o", "", "write the SVG to `FILE` (- for stdout)")
	fs.StringVar(&o.order, "order", "", "the chain's node names in order, `A,B,...` (default: from the traces)")
	fs.StringVar(&o.title, "title", "", "the picture's `TITLE`")
}

func traceFlags(fs *flag.FlagSet) { (&traceOpts{}).flags(fs) }

// traceMain is chainsync trace.
func traceMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "render" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
			printUsage(stdout, traceUsage, traceFlags)
			return ExitOK
		}
		fmt.Fprintf(stderr, "chainsync trace: want the subcommand render\n\n%s", traceUsage)
		return ExitUsage
	}
	fs := flag.NewFlagSet("trace render", flag.ContinueOnError)
	quietFlags(fs)
	var o traceOpts
	o.flags(fs)
	files, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return flagFailed(stdout, stderr, fs, "trace render", err)
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "chainsync trace render: "+format+"\n(see chainsync trace --help)\n", a...)
		return ExitUsage
	}
	if len(files) == 0 {
		return bad("give the trace files of the chain's nodes (chainsync run --trace FILE)")
	}
	if o.out == "" {
		return bad("give the output file with -o, e.g. -o ladder.svg (or -o - for stdout)")
	}
	var order []string
	if o.order != "" {
		for _, n := range strings.Split(o.order, ",") {
			if n = strings.TrimSpace(n); n != "" {
				order = append(order, n)
			}
		}
	}
	var traces []tracefile.Trace
	for _, f := range files {
		recs, err := tracefile.ReadFile(f)
		if err != nil {
			fmt.Fprintf(stderr, "chainsync trace render: %v\n", err)
			return ExitError
		}
		traces = append(traces, tracefile.Trace{File: f, Records: recs})
	}
	opts := tracefile.Options{Order: order, Title: o.title}
	var sum tracefile.Summary
	if o.out == "-" {
		sum, err = tracefile.Render(stdout, traces, opts)
	} else {
		err = writeFileAtomic(o.out, func(w io.Writer) error {
			var rerr error
			sum, rerr = tracefile.Render(w, traces, opts)
			return rerr
		})
	}
	if err != nil {
		fmt.Fprintf(stderr, "chainsync trace render: %v\n", err)
		if strings.Contains(err.Error(), "--order") {
			return ExitUsage
		}
		return ExitError
	}
	total := 0
	for _, n := range sum.Messages {
		total += n
	}
	if o.out != "-" {
		fmt.Fprintf(stdout, "wrote %s: %d node(s) %s, %d message(s) in %d round(s), %v\n",
			o.out, len(sum.Lanes), strings.Join(sum.Lanes, " -> "), total, len(sum.Messages), sum.Span)
	}
	return ExitOK
}

// parseInterspersed parses flags that may come after the positional
// arguments too (render A.jsonl B.jsonl -o x.svg), returning the positional
// arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// writeFileAtomic writes path through a temporary file in the same
// directory, so a failure leaves no half-written file behind.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// checkWritable reports whether a file can be created next to path, so a
// command can refuse a bad output path before doing its work.
func checkWritable(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp.Close()
	return os.Remove(tmp.Name())
}

// demoRecorder keeps the demo's trace events for chainsync demo --svg.
type demoRecorder struct {
	mu   sync.Mutex
	recs []tracefile.Record
}

func (r *demoRecorder) observe(ev chainsync.TraceEvent) {
	rec := tracefile.FromEvent(ev)
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

// write draws the recorded run into path.
func (r *demoRecorder) write(path string, n, rounds int, seed uint64) error {
	r.mu.Lock()
	recs := slices.Clone(r.recs)
	r.mu.Unlock()
	names := chaintest.Names(n)
	for i, name := range names {
		recs = append(recs, tracefile.Record{Kind: tracefile.KindNode, Node: name, Role: protocol.RoleOf(i > 0, i < n-1).String()})
	}
	title := fmt.Sprintf("chainsync demo -n %d --rounds %d --seed %d", n, rounds, seed)
	return writeFileAtomic(path, func(w io.Writer) error {
		_, err := tracefile.Render(w, []tracefile.Trace{{File: "demo", Records: recs}}, tracefile.Options{Order: names, Title: title})
		return err
	})
}
