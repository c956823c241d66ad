package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// FormatUS writes a latency given in microseconds for people: µs below a
// millisecond, ms below a second, s above.
func FormatUS(us float64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%.1fµs", us)
	case us < 1e6:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.3fs", us/1e6)
}

// Describe says in one line how the run was made.
func (r *Run) Describe() string {
	tasks := "empty tasks"
	if r.QuickTask {
		tasks = "empty quick tasks (run inline)"
	}
	if r.TaskSleepMS > 0 {
		tasks = fmt.Sprintf("tasks that sleep %gms", r.TaskSleepMS)
	}
	if r.ParallelTasks > 1 {
		tasks += fmt.Sprintf(", up to %d at once per node", r.ParallelTasks)
	}
	flight := "one round at a time"
	if r.Concurrent > 1 {
		flight = fmt.Sprintf("%d rounds in flight", r.Concurrent)
	}
	where := "goroutines in one process"
	if r.Mode == ModeProcs {
		where = "one process per node"
	}
	s := fmt.Sprintf("mode %s (%s), %d rounds after %d warm-up, %s, %s", r.Mode, where, r.Rounds, r.Warmup, flight, tasks)
	if r.Durable {
		s += ", durable (every node journals and fsyncs its state)"
	}
	if r.TLS {
		s += ", links over TLS 1.3 (pre-shared key)"
	}
	return s
}

// DescribeMachine says in one line where the run was made.
func (r *Run) DescribeMachine() string {
	m := r.Machine
	s := fmt.Sprintf("%s/%s, %d CPUs", m.GOOS, m.GOARCH, m.CPUs)
	if m.CPUModel != "" {
		s += " (" + m.CPUModel + ")"
	}
	if m.Kernel != "" {
		s += ", kernel " + m.Kernel
	}
	s += ", " + m.GoVersion
	if r.Version != "" {
		s += ", " + r.Version
	}
	return s
}

// WriteText writes the run as a table for people.
func (r *Run) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "chainsync bench: %s\n", r.Describe())
	fmt.Fprintf(w, "machine: %s\n\n", r.DescribeMachine())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "n\thops\tchain p50\tp90\tp99\tfloor p50\tp90\tp99\tratio\tchain rounds/s\tfloor rounds/s\t"
	if r.Durable {
		head += "fsyncs/round\tper node\t"
	}
	fmt.Fprintln(tw, head)
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.0f\t%.0f\t", x.N, x.Hops,
			FormatUS(x.Chain.Median), FormatUS(x.Chain.P90), FormatUS(x.Chain.P99),
			FormatUS(x.Floor.Median), FormatUS(x.Floor.P90), FormatUS(x.Floor.P99),
			x.Ratio, x.ChainRate, x.FloorRate)
		if r.Durable {
			fmt.Fprintf(tw, "%.2f\t%.2f\t", x.FsyncsPerRound, x.NodeFsyncsPerRound)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	checked := 0
	for _, x := range r.Results {
		checked += x.TasksChecked
	}
	relay := "a raw-TCP relay"
	if r.TLS {
		relay = "a relay over TLS 1.3, as the chain's links are,"
	}
	_, err := fmt.Fprintf(w, "\nchain: latency of one ChainSync round, from the Head's Ready to its result.\n"+
		"floor: %s of the same 4(n-1) hops through the same nodes, measured alternately with the chain.\n"+
		"ratio: chain p50 / floor p50. Verified: %d task runs, each exactly once and after its predecessor's.\n", relay, checked)
	if err == nil && r.Durable {
		_, err = fmt.Fprintf(w, "fsyncs/round: fsyncs of all the nodes' state journals per round (warm-up included); per node: the busiest node's.\n"+
			"The relay floor writes no journal.\n")
	}
	return err
}

// WriteJSON writes the run as one indented JSON object.
func (r *Run) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Series is one line of a plot: a label and y values (microseconds) at
// the plot's x values.
type Series struct {
	Label string
	Y     []float64
	Dash  bool
	Color string
}

// WriteSVG plots the median latency of chain and floor, with whiskers to
// p90, against n (both axes logarithmic).
func (r *Run) WriteSVG(w io.Writer) error {
	xs := make([]float64, len(r.Results))
	chain := Series{Label: "ChainSync round (p50, whisker to p90)", Color: "#1f5fbf"}
	floor := Series{Label: "raw-TCP relay floor, 4(n-1) hops (p50, whisker to p90)", Color: "#c0392b", Dash: true}
	var chainHi, floorHi []float64
	for i, x := range r.Results {
		xs[i] = float64(x.N)
		chain.Y = append(chain.Y, x.Chain.Median)
		floor.Y = append(floor.Y, x.Floor.Median)
		chainHi = append(chainHi, x.Chain.P90)
		floorHi = append(floorHi, x.Floor.P90)
	}
	title := "ChainSync round latency against its raw-TCP floor"
	return Plot(w, title, r.Describe()+"\n"+r.DescribeMachine(), "nodes in the chain (n)", "round latency",
		xs, []Series{chain, floor}, [][]float64{chainHi, floorHi})
}

// Plot writes a standalone SVG line chart with logarithmic axes: one
// polyline per series, each point marked, optional whiskers from a
// series' value up to hi (nil for none). Y values are microseconds.
func Plot(w io.Writer, title, subtitle, xLabel, yLabel string, xs []float64, series []Series, hi [][]float64) error {
	const (
		width       = 760
		left, right = 80, 30
		top         = 80
	)
	bottom := 58 + 16*len(series) // axis labels, then one legend line per series
	height := 290 + top + bottom
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
	}
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for i, s := range series {
		for j, y := range s.Y {
			if y > 0 {
				ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
			}
			if hi != nil && hi[i] != nil && hi[i][j] > 0 {
				ymax = math.Max(ymax, hi[i][j])
			}
		}
	}
	if len(xs) == 0 || math.IsInf(ymin, 0) {
		return fmt.Errorf("nothing to plot")
	}
	lx0, lx1 := math.Log10(xmin), math.Log10(xmax)
	if lx1-lx0 < 1e-9 {
		lx0, lx1 = lx0-0.5, lx1+0.5
	}
	pad := (lx1 - lx0) * 0.05 // keep the end points off the frame
	lx0, lx1 = lx0-pad, lx1+pad
	ly0, ly1 := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
	if ly1-ly0 < 1 {
		ly1 = ly0 + 1
	}
	px := func(x float64) float64 { return float64(left) + (math.Log10(x)-lx0)/(lx1-lx0)*pw }
	py := func(y float64) float64 { return float64(top) + ph - (math.Log10(y)-ly0)/(ly1-ly0)*ph }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", 10, esc(title))
	for i, line := range strings.Split(subtitle, "\n") {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">%s</text>`+"\n", 10, 42+16*i, esc(line))
	}
	// Grid and y ticks at 1, 2, 5 times powers of ten.
	for e := ly0; e <= ly1; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if math.Log10(v) > ly1+1e-9 {
				break
			}
			y := py(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, y, float64(left)+pw, y, stroke)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#333">%s</text>`+"\n", left-6, y+4, esc(tickUS(v)))
		}
	}
	for _, x := range xs {
		X := px(x)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", X, top, X, float64(top)+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333">%g</text>`+"\n", X, float64(top)+ph+16, x)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", float64(left)+pw/2, float64(top)+ph+34, esc(xLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(top)+ph/2, esc(yLabel))
	for i, s := range series {
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="6 4"`
		}
		var pts []string
		for j, y := range s.Y {
			if y > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(xs[j]), py(y)))
			}
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.Color, dash)
		for j, y := range s.Y {
			if y <= 0 {
				continue
			}
			X, Y := px(xs[j]), py(y)
			if hi != nil && hi[i] != nil && hi[i][j] > y {
				wx := X + float64(i)*4 - 2 // side by side, not on top of each other
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", wx, Y, wx, py(hi[i][j]), s.Color)
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s n=%g: %s</title></circle>`+"\n", X, Y, s.Color, esc(s.Label), xs[j], esc(FormatUS(y)))
		}
		ly := float64(height-bottom) + 62 + float64(i)*16
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", left, ly-4, left+30, ly-4, s.Color, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f">%s</text>`+"\n", left+38, ly, esc(s.Label))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// tickUS labels an axis tick given in microseconds.
func tickUS(us float64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%gµs", us)
	case us < 1e6:
		return fmt.Sprintf("%gms", us/1e3)
	}
	return fmt.Sprintf("%gs", us/1e6)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
