package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/chaintest"
	"github.com/chainsync-go/chainsync/protocol"
)

const demoUsage = `Usage: chainsync demo [-n N] [--rounds R] [--seed S] [--svg FILE]

Runs an N-node chain (A, B, C, ...) in this process over real loopback TCP.
Nodes become ready at random moments and run short tasks; the message flow
is drawn live as a ladder diagram like the draft's figure, then summarised.
With --svg, the same run is also drawn as an SVG picture (as chainsync trace
render draws real chains).

Example:
  chainsync demo               the draft's four-node A-B-C-D example
  chainsync demo -n 6 --rounds 2
  chainsync demo --svg ladder.svg

Flags:
`

// ladder draws trace events as rows of a ladder diagram.
type ladder struct {
	mu      sync.Mutex
	w       io.Writer
	names   []string
	index   map[string]int
	t0      time.Time
	rounds  int
	phase   map[string]int      // round -> last phase labelled
	sent    int                 // messages that went on the wire
	order   map[string][]string // round -> nodes in task start order
	ready   map[string]time.Time
	started map[string]time.Time // round -> first task start
	bad     []string
}

const colW = 8

func (l *ladder) header() {
	var b strings.Builder
	b.WriteString("   time  ")
	for _, n := range l.names {
		b.WriteString(fmt.Sprintf("%-*s", colW, n))
	}
	fmt.Fprintln(l.w, strings.TrimRight(b.String(), " "))
}

// row prints one line: marks at node columns, an optional arrow between
// neighbours, and a note.
func (l *ladder) row(at time.Time, marks map[int]byte, from, to int, label, note string) {
	width := colW*(len(l.names)-1) + 1
	line := []byte(strings.Repeat(" ", width))
	for i := range l.names {
		line[i*colW] = '|'
	}
	for i, c := range marks {
		line[i*colW] = c
	}
	if from >= 0 {
		lo := min(from, to)*colW + 1
		arrow := "--" + label + "--"
		if to > from {
			arrow += ">"
		} else {
			arrow = "<" + arrow
		}
		copy(line[lo:], fmt.Sprintf("%-*s", colW-1, arrow))
	}
	fmt.Fprintf(l.w, "%7.3f  %s   %s\n", at.Sub(l.t0).Seconds(), line, note)
}

func (l *ladder) roundTag(r string) string {
	if l.rounds <= 1 {
		return ""
	}
	return " [round " + r + "]"
}

// phaseNote returns a phase label the first time round r reaches phase p.
func (l *ladder) phaseNote(r string, p int) string {
	if l.phase[r] >= p {
		return ""
	}
	l.phase[r] = p
	return [...]string{"", "   <- phase 1: READY wave (forward)", "   <- phase 2: START wave (backward)",
		"   <- phase 3: tasks run in order (forward)", "   <- phase 4: exit wave (backward)"}[p]
}

func (l *ladder) markReady(node int, round string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.After(l.ready[round]) {
		l.ready[round] = now
	}
	l.row(now, map[int]byte{node: '*'}, -1, -1, "", l.names[node]+" is locally ready"+l.roundTag(round))
}

func (l *ladder) trace(ev chainsync.TraceEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.index[ev.Node]
	tag := l.roundTag(ev.Round)
	switch ev.Kind {
	case chainsync.TraceSent:
		if ev.Queued {
			return
		}
		l.sent++
		j := i + 1
		if ev.Side == protocol.Pred {
			j = i - 1
		}
		abbr := map[protocol.Command]string{protocol.Ready: "RD", protocol.Start: "ST", protocol.Complete: "CM"}[ev.Msg.Cmd]
		p := map[protocol.Command]int{protocol.Ready: 1, protocol.Start: 2, protocol.Complete: 3}[ev.Msg.Cmd]
		if ev.Msg.Cmd == protocol.Complete && ev.Side == protocol.Pred {
			p = 4
		}
		note := fmt.Sprintf("%s->%s %s%s%s", l.names[i], l.names[j], ev.Msg.Cmd, tag, l.phaseNote(ev.Round, p))
		l.row(ev.Time, nil, i, j, abbr, note)
	case chainsync.TraceTaskStart:
		if _, ok := l.started[ev.Round]; !ok {
			l.started[ev.Round] = ev.Time
		}
		l.order[ev.Round] = append(l.order[ev.Round], l.names[i])
		l.row(ev.Time, map[int]byte{i: '#'}, -1, -1, "", l.names[i]+" runs its task"+tag+l.phaseNote(ev.Round, 3))
	case chainsync.TraceTaskEnd:
		l.row(ev.Time, map[int]byte{i: '#'}, -1, -1, "", l.names[i]+" finished its task"+tag)
	case chainsync.TraceRoundDone:
		note := l.names[i] + " exits" + tag
		if ev.Status != chainsync.StatusDone {
			note = fmt.Sprintf("%s: round %s (%v)", l.names[i], ev.Status, ev.Err)
			l.bad = append(l.bad, note)
		}
		l.row(ev.Time, map[int]byte{i: 'X'}, -1, -1, "", note)
	case chainsync.TraceViolation:
		l.bad = append(l.bad, fmt.Sprintf("%s: %v", l.names[i], ev.Err))
	}
}

type demoOpts struct {
	n, rounds int
	seed      uint64
	svg       string
}

func (o *demoOpts) flags(fs *flag.FlagSet) {
	fs.IntVar(&o.n, "n", 4, "number of nodes, 1..64")
	fs.IntVar(&o.rounds, "rounds", 1, "concurrent rounds, 1..100 (ids 0..R-1)")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed for readiness times and task durations (0: random)")
	fs.StringVar(&o.svg, "svg", "", "also draw the run as an SVG ladder diagram into `FILE`")
}

func demoFlags(fs *flag.FlagSet) { (&demoOpts{}).flags(fs) }

func demoMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	quietFlags(fs)
	var o demoOpts
	o.flags(fs)
	n, rounds, seed := &o.n, &o.rounds, &o.seed
	if err := fs.Parse(args); err != nil {
		return flagFailed(stdout, stderr, fs, "demo", err)
	}
	if fs.NArg() > 0 || *n < 1 || *n > 64 || *rounds < 1 || *rounds > 100 {
		fmt.Fprintln(stderr, "chainsync demo: want -n 1..64 and --rounds 1..100, and no other arguments")
		return ExitUsage
	}
	if *seed == 0 {
		*seed = rand.Uint64()
	}
	var rec *demoRecorder
	if o.svg != "" {
		// Fail before the run, not after it, if the file cannot be written.
		if err := checkWritable(o.svg); err != nil {
			fmt.Fprintf(stderr, "chainsync demo: --svg: %v\n", err)
			return ExitUsage
		}
		rec = &demoRecorder{}
	}
	code, err := demo(*n, *rounds, *seed, stdout, rec)
	if err != nil {
		fmt.Fprintf(stderr, "chainsync demo: %v (seed %d)\n", err, *seed)
	}
	if rec != nil {
		if werr := rec.write(o.svg, *n, *rounds, *seed); werr != nil {
			fmt.Fprintf(stderr, "chainsync demo: --svg: %v\n", werr)
			return max(code, ExitError)
		}
		fmt.Fprintf(stdout, "  picture:             %s\n", o.svg)
	}
	return code
}

func demo(n, rounds int, seed uint64, w io.Writer, rec *demoRecorder) (int, error) {
	rng := rand.New(rand.NewPCG(seed, 0))
	names := chaintest.Names(n)
	ids := []string{""}
	if rounds > 1 {
		ids = make([]string, rounds)
		for i := range ids {
			ids[i] = fmt.Sprint(i)
		}
	}
	l := &ladder{w: w, names: names, index: map[string]int{}, rounds: rounds, phase: map[string]int{},
		order: map[string][]string{}, ready: map[string]time.Time{}, started: map[string]time.Time{}}
	for i, nm := range names {
		l.index[nm] = i
	}
	fmt.Fprintf(w, "ChainSync demo: %d node(s) %s over loopback TCP, %d round(s), seed %d\n", n, strings.Join(names, " -> "), rounds, seed)
	fmt.Fprintf(w, "Nodes become ready at random moments (*); tasks (#) take 50-250 ms; X = node exits.\n\n")

	durations := make([]time.Duration, n)
	for i := range durations {
		durations[i] = time.Duration(50+rng.IntN(200)) * time.Millisecond
	}
	l.t0 = time.Now()
	l.header()
	nodes, err := chaintest.Build(n, chaintest.Options{Configure: func(i int, cfg *chainsync.Config) {
		hooks := fanout{l.trace}
		if rec != nil {
			hooks = append(hooks, rec.observe)
		}
		cfg.Rounds, cfg.MaxRounds, cfg.Trace = ids, len(ids), hooks.hook()
		cfg.BackoffMin, cfg.BackoffMax = 10*time.Millisecond, 200*time.Millisecond
		cfg.Task = func(ctx context.Context, _ string) error {
			select {
			case <-time.After(durations[i]):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}})
	if err != nil {
		return ExitError, err
	}
	defer chaintest.Close(nodes)
	type readyAt struct {
		node  int
		round string
		at    time.Duration
	}
	var plan []readyAt
	for i := range nodes {
		for _, r := range ids {
			plan = append(plan, readyAt{i, r, time.Duration(rng.IntN(1200)) * time.Millisecond})
		}
	}
	for _, p := range plan {
		time.AfterFunc(p.at, func() {
			l.markReady(p.node, p.round)
			nodes[p.node].Ready(p.round)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, r := range ids {
		for i, nd := range nodes {
			res, err := nd.Wait(ctx, r)
			if err != nil {
				return ExitFault, fmt.Errorf("node %s round %q: %v", names[i], r, err)
			}
			if res.Status != chainsync.StatusDone {
				return ExitFault, fmt.Errorf("node %s: %v", names[i], res.Err)
			}
		}
	}
	total := time.Since(l.t0)
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(w, "\nSummary\n")
	want := 4 * (n - 1) * rounds
	fmt.Fprintf(w, "  messages exchanged:  %d (4(n-1) x rounds = %d)\n", l.sent, want)
	ok := l.sent == want && len(l.bad) == 0
	for _, r := range ids {
		label := "task order:"
		if rounds > 1 {
			label = "round " + r + " order:"
		}
		order := strings.Join(l.order[r], " -> ")
		if order != strings.Join(names, " -> ") {
			ok = false
		}
		fmt.Fprintf(w, "  %-20s %s\n", label, order)
		fmt.Fprintf(w, "  %-20s %v from the last node ready to the first task start\n", "", l.started[r].Sub(l.ready[r]).Round(time.Microsecond))
	}
	fmt.Fprintf(w, "  total time:          %v\n", total.Round(time.Millisecond))
	for _, b := range l.bad {
		fmt.Fprintf(w, "  problem: %s\n", b)
	}
	if !ok {
		return ExitFault, errors.New("the run broke a ChainSync promise (see above)")
	}
	fmt.Fprintf(w, "  every task ran once, in chain order, after the whole chain was ready.\n")
	return ExitOK, nil
}
