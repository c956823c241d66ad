package tracefile

import (
	"cmp"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"slices"
	"strings"
	"time"
)

// Trace is the records of one node, as read from one file; File names it
// when its records carry no node name.
type Trace struct {
	File    string
	Records []Record
}

// Options change how Render draws.
type Options struct {
	// Order is the chain's node names in order, Head first. Empty: the
	// order comes from the traces (see Render).
	Order []string
	// Title heads the picture.
	Title string
}

// Summary says what Render drew.
type Summary struct {
	Lanes    []string       // node names, in chain order
	Messages map[string]int // arrows drawn, per round id
	Span     time.Duration  // from the first to the last event
}

// Layout, in SVG user units (pixels).
const (
	laneGap  = 170.0 // between neighbouring lanes
	leftPad  = 120.0 // room for the time axis
	topPad   = 86.0  // title and lane heads
	minGap   = 7.0   // the least room between two distinct event times
	maxGap   = 90.0  // the most; longer idle stretches are cut (and marked)
	scalePx  = 520.0 // px for the whole span before the cuts
	taskW    = 12.0
	bottomPd = 70.0
)

// lane is one node's column.
type lane struct {
	name string
	hdr  *Record
	recs []Record
}

// Render merges the traces of a chain's nodes and writes the ladder diagram
// to w as SVG: one lane per node in chain order, one arrow per message
// (an element with class "msg"), task spans as bars, faults, state
// changes and link events marked, and a time axis.
//
// The chain order is opts.Order if given; else the "chain" list of a node
// record; else it follows each node's successor (its node record's "next",
// matched to another node's name or listen address); else it is the order
// in which the nodes first received READY (the READY wave runs Head to
// Tail).
//
// The time axis is stretched where events crowd, so that every message is
// visible, and cut where nothing happens for long (marked on the axis);
// its labels are real times since the first event. Traces from different
// machines are drawn on their own clocks.
func Render(w io.Writer, traces []Trace, opts Options) (Summary, error) {
	lanes, err := collect(traces)
	if err != nil {
		return Summary{}, err
	}
	if err := order(lanes, opts.Order); err != nil {
		return Summary{}, err
	}
	return draw(w, lanes, opts)
}

// collect groups the records by node.
func collect(traces []Trace) ([]*lane, error) {
	byName := map[string]*lane{}
	var lanes []*lane
	events := 0
	for _, t := range traces {
		for i := range t.Records {
			r := t.Records[i]
			name := r.Node
			if name == "" {
				name = t.File
			}
			l := byName[name]
			if l == nil {
				l = &lane{name: name}
				byName[name] = l
				lanes = append(lanes, l)
			}
			if r.Kind == KindNode {
				if l.hdr != nil {
					// A node that restarted appended a second node
					// record (or wrote a second file): one lane, all
					// events, the first record.
					continue
				}
				l.hdr = &r
				continue
			}
			l.recs = append(l.recs, r)
			events++
		}
	}
	if len(lanes) == 0 || events == 0 {
		return nil, errors.New("no trace events to draw (are these chainsync run --trace files?)")
	}
	for _, l := range lanes {
		slices.SortStableFunc(l.recs, func(a, b Record) int { return a.Time.Compare(b.Time) })
	}
	return lanes, nil
}

// order sorts lanes into chain order.
func order(lanes []*lane, given []string) error {
	pos := func(names []string) (map[string]int, bool) {
		m := map[string]int{}
		for i, n := range names {
			m[n] = i
		}
		for _, l := range lanes {
			if _, ok := m[l.name]; !ok {
				return nil, false
			}
		}
		return m, true
	}
	sortBy := func(m map[string]int) {
		slices.SortStableFunc(lanes, func(a, b *lane) int { return cmp.Compare(m[a.name], m[b.name]) })
	}
	if len(given) > 0 {
		m, ok := pos(given)
		if !ok {
			var missing []string
			for _, l := range lanes {
				if !slices.Contains(given, l.name) {
					missing = append(missing, l.name)
				}
			}
			return fmt.Errorf("--order %s does not name node(s) %s found in the traces", strings.Join(given, ","), strings.Join(missing, ", "))
		}
		sortBy(m)
		return nil
	}
	for _, l := range lanes {
		if l.hdr != nil && len(l.hdr.Chain) > 0 {
			if m, ok := pos(l.hdr.Chain); ok {
				sortBy(m)
				return nil
			}
		}
	}
	if byLinks(lanes) {
		return nil
	}
	// The READY wave reaches the nodes in chain order; the Head receives
	// no READY at all.
	first := map[string]time.Time{}
	for _, l := range lanes {
		for _, r := range l.recs {
			if r.Kind == KindReceived && r.Command == "READY" && r.Side == "pred" {
				first[l.name] = r.Time
				break
			}
		}
	}
	rank := func(l *lane) int {
		switch {
		case l.hdr != nil && (l.hdr.Role == "head" || l.hdr.Role == "single"):
			return 0
		case !first[l.name].IsZero():
			return 1
		case l.hdr == nil || l.hdr.Role == "":
			return 0 // no READY ever arrived here: the Head, or a node the wave never reached
		}
		return 2
	}
	slices.SortStableFunc(lanes, func(a, b *lane) int {
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		if c := first[a.name].Compare(first[b.name]); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	return nil
}

// byLinks orders lanes by following each node's successor; false if the
// node records do not give a single chain through every lane.
func byLinks(lanes []*lane) bool {
	succ := map[*lane]*lane{}
	hasPred := map[*lane]bool{}
	for _, a := range lanes {
		if a.hdr == nil {
			return false
		}
		if a.hdr.Next == "" {
			continue
		}
		for _, b := range lanes {
			if b != a && refersTo(a.hdr.Next, b) {
				succ[a] = b
				hasPred[b] = true
				break
			}
		}
	}
	var head *lane
	for _, l := range lanes {
		if !hasPred[l] {
			if head != nil {
				return false
			}
			head = l
		}
	}
	var out []*lane
	for l := head; l != nil && len(out) <= len(lanes); l = succ[l] {
		out = append(out, l)
	}
	if len(out) != len(lanes) {
		return false
	}
	copy(lanes, out)
	return true
}

// refersTo reports whether ref (a node's "next") names lane b: its name,
// its listen address, or its listen port on a wildcard address.
func refersTo(ref string, b *lane) bool {
	if ref == b.name {
		return true
	}
	if b.hdr == nil || b.hdr.Listen == "" {
		return false
	}
	if ref == b.hdr.Listen {
		return true
	}
	h1, p1, err1 := net.SplitHostPort(ref)
	h2, p2, err2 := net.SplitHostPort(b.hdr.Listen)
	if err1 != nil || err2 != nil || p1 != p2 {
		return false
	}
	if h2 == "" || h2 == "0.0.0.0" || h2 == "::" {
		return true
	}
	return h1 == h2
}

// timeline maps event times to y positions: monotone, at least minGap
// between distinct times, at most maxGap (longer gaps are cut).
type timeline struct {
	times []time.Time
	ys    []float64
	cuts  []int // indexes i where the gap before times[i] was cut
}

func newTimeline(lanes []*lane) *timeline {
	var ts []time.Time
	for _, l := range lanes {
		for _, r := range l.recs {
			ts = append(ts, r.Time)
		}
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	ts = slices.CompactFunc(ts, func(a, b time.Time) bool { return a.Equal(b) })
	tl := &timeline{times: ts, ys: make([]float64, len(ts))}
	span := ts[len(ts)-1].Sub(ts[0]).Seconds()
	scale := 0.0
	if span > 0 {
		scale = scalePx / span
	}
	y := topPad + 20
	for i := range ts {
		if i > 0 {
			g := ts[i].Sub(ts[i-1]).Seconds() * scale
			if g > maxGap {
				g = maxGap
				tl.cuts = append(tl.cuts, i)
			}
			y += max(g, minGap)
		}
		tl.ys[i] = y
	}
	return tl
}

func (tl *timeline) y(t time.Time) float64 {
	i, _ := slices.BinarySearchFunc(tl.times, t, func(a, b time.Time) int { return a.Compare(b) })
	if i >= len(tl.ys) {
		return tl.ys[len(tl.ys)-1]
	}
	return tl.ys[i]
}

func (tl *timeline) end() float64 { return tl.ys[len(tl.ys)-1] }

// message is one arrow.
type message struct {
	from, to   int // lane indexes; -1 or len(lanes) for a node not drawn
	cmd, round string
	sent, recv time.Time // either may be zero (not in the traces)
	resend     bool
}

// match pairs every message sent with its receipt: the k-th message with
// a given command and round from one lane to its neighbour is the k-th
// such message the neighbour received from that side (links are FIFO).
func match(lanes []*lane) []message {
	type key struct {
		from, to   int
		cmd, round string
	}
	sends := map[key][]Record{}
	recvs := map[key][]Record{}
	var keys []key
	seen := map[key]bool{}
	add := func(k key) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for i, l := range lanes {
		for _, r := range l.recs {
			if r.Command == "" || (r.Side != "pred" && r.Side != "succ") {
				continue
			}
			other := i + 1
			if r.Side == "pred" {
				other = i - 1
			}
			switch {
			case r.Kind == KindSent && !r.Queued:
				k := key{i, other, r.Command, r.Round}
				sends[k] = append(sends[k], r)
				add(k)
			case r.Kind == KindReceived:
				k := key{other, i, r.Command, r.Round}
				recvs[k] = append(recvs[k], r)
				add(k)
			}
		}
	}
	var out []message
	for _, k := range keys {
		s, r := sends[k], recvs[k]
		for j := range max(len(s), len(r)) {
			m := message{from: k.from, to: k.to, cmd: k.cmd, round: k.round}
			if j < len(s) {
				m.sent, m.resend = s[j].Time, s[j].Resend
			}
			if j < len(r) {
				m.recv = r[j].Time
			}
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b message) int { return a.start().Compare(b.start()) })
	return out
}

func (m message) start() time.Time {
	if m.sent.IsZero() {
		return m.recv
	}
	return m.sent
}

// svg accumulates the picture.
type svg struct {
	b strings.Builder
}

func (s *svg) f(format string, a ...any) { fmt.Fprintf(&s.b, format, a...) }

func esc(s string) string { return html.EscapeString(s) }

func roundLabel(id string) string {
	if id == "" {
		return "(unnamed)"
	}
	return id
}

func draw(w io.Writer, lanes []*lane, opts Options) (Summary, error) {
	tl := newTimeline(lanes)
	t0 := tl.times[0]
	sum := Summary{Messages: map[string]int{}, Span: tl.times[len(tl.times)-1].Sub(t0)}
	for _, l := range lanes {
		sum.Lanes = append(sum.Lanes, l.name)
	}
	rounds := map[string]bool{}
	for _, l := range lanes {
		for _, r := range l.recs {
			if r.Command != "" {
				rounds[r.Round] = true
			}
		}
	}
	x := func(i int) float64 { return leftPad + 40 + float64(i)*laneGap }
	width := max(x(len(lanes)-1)+150, 900)
	height := tl.end() + bottomPd + 40
	var s svg
	s.f(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	title := opts.Title
	if title == "" {
		title = "ChainSync trace: " + strings.Join(sum.Lanes, " -> ")
	}
	s.f("<title>%s</title>\n", esc(title))
	s.f(`<style>
.lane line{stroke:#999;stroke-width:1.5}
.lane text.name{font-weight:bold;font-size:15px}
.lane text.role{fill:#666}
.msg line{stroke-width:1.4}
.msg[data-command="READY"] line{stroke:#1f6fb4}.msg[data-command="START"] line{stroke:#2f9e44}.msg[data-command="COMPLETE"] line{stroke:#a05a00}
.msg[data-resend] line{stroke-dasharray:5 3}.msg[data-unmatched] line{stroke-dasharray:2 3}
.msg text{font-size:10px;fill:#333}
.task{fill:#f2c14e;stroke:#b8860b}.task.failed{fill:#e05555;stroke:#900}.task.running{fill:#f7dc98}
.fault text{fill:#c00;font-weight:bold;font-size:11px}.fault path{stroke:#c00;stroke-width:2.5}
.state circle{fill:#fff;stroke:#555}.done path{stroke:#333;stroke-width:2}
.link text{font-size:9px;fill:#777}.violation text{font-size:10px;fill:#c60}
.axis line{stroke:#444}.axis text{font-size:10px;fill:#444}.axis .cut{stroke:#c00;stroke-dasharray:2 2}
</style>
<defs>
<marker id="head" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker>
</defs>
`)
	s.f(`<text x="12" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", esc(title))
	var rl []string
	for r := range rounds {
		rl = append(rl, roundLabel(r))
	}
	slices.Sort(rl)
	s.f(`<text x="12" y="42" fill="#555">%d node(s), %d round(s): %s; span %v; time runs down, stretched where events crowd</text>`+"\n",
		len(lanes), len(rounds), esc(strings.Join(rl, ", ")), sum.Span.Round(time.Microsecond))

	// Time axis.
	top, bottom := topPad+20, tl.end()
	s.f(`<g class="axis"><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, leftPad, top-10, leftPad, bottom+10)
	s.f(`<text x="%.1f" y="%.1f" text-anchor="end">time (s)</text>`, leftPad-6, top-16)
	lastY, lastText := -1e9, ""
	for i, t := range tl.times {
		y, text := tl.ys[i], fmtSec(t.Sub(t0))
		if y-lastY < 14 || text == lastText {
			continue
		}
		lastY, lastText = y, text
		s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`,
			leftPad-4, y, leftPad, y, leftPad-7, y+3.5, text)
	}
	for _, i := range tl.cuts {
		y0, y1 := tl.ys[i-1], tl.ys[i]
		s.f(`<line class="cut" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"><title>%v with no events, cut short</title></line>`,
			leftPad+3, y0+3, leftPad+3, y1-3, tl.times[i].Sub(tl.times[i-1]).Round(time.Millisecond))
	}
	s.f("</g>\n")

	// Lanes.
	for i, l := range lanes {
		role := ""
		if l.hdr != nil {
			role = l.hdr.Role
		}
		s.f(`<g class="lane" data-node="%s" data-index="%d"><text class="name" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`,
			esc(l.name), i, x(i), topPad-22, esc(l.name))
		s.f(`<text class="role" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x(i), topPad-8, esc(role))
		s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/></g>`+"\n", x(i), top-10, x(i), bottom+10)
	}

	// Task spans.
	for i, l := range lanes {
		open := map[string]Record{}
		bar := func(r Record, end time.Time, class, what string) {
			y0, y1 := tl.y(r.Time), tl.y(end)
			s.f(`<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: task, round %s, %s</title></rect>`+"\n",
				class, x(i)-taskW/2, y0, taskW, max(y1-y0, 2), esc(l.name), esc(roundLabel(r.Round)), esc(what))
		}
		for _, r := range l.recs {
			switch r.Kind {
			case KindUndoStart:
				open["undo "+r.Round] = r
			case KindUndoEnd:
				if st, ok := open["undo "+r.Round]; ok {
					delete(open, "undo "+r.Round)
					what := "undo, " + fmtDur(r.Time.Sub(st.Time))
					if r.Error != "" {
						what = "undo failed: " + r.Error
					}
					bar(st, r.Time, "task undo", what)
				}
			case KindTaskStart:
				open[r.Round] = r
			case KindTaskEnd:
				st, ok := open[r.Round]
				if !ok {
					continue
				}
				delete(open, r.Round)
				if r.Error != "" {
					bar(st, r.Time, "task failed", "failed after "+fmtDur(r.Time.Sub(st.Time))+": "+r.Error)
				} else {
					bar(st, r.Time, "task", fmtDur(r.Time.Sub(st.Time)))
				}
			}
		}
		for _, st := range open {
			bar(st, tl.times[len(tl.times)-1], "task running", "still running when the trace ends")
		}
	}

	// Messages.
	msgs := match(lanes)
	multi := len(rounds) > 1
	for _, m := range msgs {
		x1, x2 := x(m.from), x(m.to)
		if m.from < 0 || m.from >= len(lanes) { // the sender is not drawn
			x1 = x2 - laneGap/2*float64(sign(m.to-m.from))
		}
		if m.to < 0 || m.to >= len(lanes) {
			x2 = x1 + laneGap/2*float64(sign(m.to-m.from))
		}
		var y1, y2 float64
		// The class is exactly "msg" (one element per message, easy to
		// count); what kind of message it is goes in data- attributes.
		extra := ""
		switch {
		case m.sent.IsZero():
			y2 = tl.y(m.recv)
			y1 = y2 - minGap
			extra = ` data-unmatched="true"`
		case m.recv.IsZero():
			y1 = tl.y(m.sent)
			y2 = y1 + minGap
			extra = ` data-unmatched="true"`
		default:
			y1, y2 = tl.y(m.sent), tl.y(m.recv)
		}
		if m.resend {
			extra += ` data-resend="true"`
		}
		d := 1.0
		if x2 < x1 {
			d = -1
		}
		from, to := laneName(lanes, m.from), laneName(lanes, m.to)
		label := m.cmd
		if multi {
			label += " " + roundLabel(m.round)
		}
		how := ""
		switch {
		case m.sent.IsZero():
			how = "; its sending is not in the traces"
		case m.recv.IsZero():
			how = "; its receipt is not in the traces (lost, or the receiver's trace is missing)"
		}
		if m.resend {
			how += "; a re-send after a reconnect"
		}
		s.f(`<g class="msg" data-round="%s" data-command="%s" data-from="%s" data-to="%s"%s>`, esc(m.round), esc(m.cmd), esc(from), esc(to), extra)
		s.f(`<title>%s -> %s %s, round %s%s</title>`, esc(from), esc(to), m.cmd, esc(roundLabel(m.round)), esc(how))
		s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" marker-end="url(#head)"/>`, x1+d*(taskW/2+1), y1, x2-d*(taskW/2+1), y2)
		s.f(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text></g>`+"\n", (x1+x2)/2, (y1+y2)/2-3, esc(label))
		sum.Messages[m.round]++
	}

	// State changes, link events, violations, faults, round ends.
	for i, l := range lanes {
		xi := x(i)
		for _, r := range l.recs {
			y := tl.y(r.Time)
			at := fmtSec(r.Time.Sub(t0))
			switch r.Kind {
			case KindState:
				s.f(`<g class="state"><circle cx="%.1f" cy="%.1f" r="2.5"/><title>%s %s: %s -> %s, round %s</title></g>`+"\n",
					xi+taskW/2+4, y, at, esc(l.name), esc(r.FromState), esc(r.State), esc(roundLabel(r.Round)))
			case KindLinkUp, KindLinkDown:
				word := "up"
				if r.Kind == KindLinkDown {
					word = "down"
				}
				s.f(`<g class="link"><text x="%.1f" y="%.1f">%s link %s</text><title>%s %s: %s link %s %s</title></g>`+"\n",
					xi+10, y+3, esc(r.Side), word, at, esc(l.name), esc(r.Side), word, esc(r.Error))
			case KindViolation:
				s.f(`<g class="violation"><text x="%.1f" y="%.1f">! violation by %s</text><title>%s %s: %s</title></g>`+"\n",
					xi+10, y+3, esc(r.Side), at, esc(l.name), esc(r.Error))
			case KindFault:
				blame := ""
				if r.Peer != "" {
					blame = " (" + r.Peer + ")"
				}
				s.f(`<g class="fault"><path d="M%.1f,%.1f l10,10 m0,-10 l-10,10"/><text x="%.1f" y="%.1f">%s%s</text><title>%s %s: fault in round %s: %s</title></g>`+"\n",
					xi-5, y-5, xi+10, y+4, esc(r.Fault), esc(blame), at, esc(l.name), esc(roundLabel(r.Round)), esc(r.Error))
			case KindUndone:
				s.f(`<g class="undone"><text x="%.1f" y="%.1f">%s</text><title>%s %s: round %s: %s</title></g>`+"\n",
					xi+10, y+3, esc(r.Error), at, esc(l.name), esc(roundLabel(r.Round)), esc(r.Error))
			case KindRoundDone:
				s.f(`<g class="done"><path d="M%.1f,%.1f h16"/><title>%s %s: round %s over here: %s</title></g>`+"\n",
					xi-8, y, at, esc(l.name), esc(roundLabel(r.Round)), esc(r.Status))
			case KindDropped:
				s.f(`<g class="violation"><text x="%.1f" y="%.1f">%d trace records dropped</text></g>`+"\n", xi+10, y+3, r.Count)
			case KindSteer:
				who := ""
				if r.Peer != "" {
					who = " at " + r.Peer
				}
				s.f(`<g class="steer"><text x="%.1f" y="%.1f">&#9646; %s%s</text><title>%s %s: %s%s, round %s: %s</title></g>`+"\n",
					xi+10, y+3, esc(r.Steer), esc(who), at, esc(l.name), esc(r.Steer), esc(who), esc(roundLabel(r.Round)), esc(r.Error))
			}
		}
	}

	// Legend.
	ly := tl.end() + 40
	s.f(`<g class="legend" font-size="11"><text x="12" y="%.1f">arrows: messages (READY blue, START green, COMPLETE brown; dashed: re-sent; dotted: one end not in the traces)</text>`, ly)
	s.f(`<text x="12" y="%.1f">bars: tasks (red: failed) · red X: fault · &#9646;: steering (a hold, an approval, a pause, a cancel, a retry) · short bar: round over here · circles: state changes · red dots on the axis: idle time cut short (hover for details)</text></g>`+"\n", ly+16)
	s.f("</svg>\n")
	_, err := io.WriteString(w, s.b.String())
	return sum, err
}

func sign(v int) int {
	if v < 0 {
		return -1
	}
	return 1
}

func laneName(lanes []*lane, i int) string {
	if i >= 0 && i < len(lanes) {
		return lanes[i].name
	}
	if i < 0 {
		return "(predecessor not drawn)"
	}
	return "(successor not drawn)"
}

func fmtSec(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
