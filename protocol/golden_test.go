package protocol_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden traces in testdata/ with the current output")

// TestGolden runs the scripts in testdata/*.txt, in the style of etcd
// raft's interaction tests: each command's output is a trace of messages
// and state changes, compared with the expected output in the file. Run
// with -rewrite to regenerate the files, then review the diff.
//
// The script language (one command per block, "----", then its output):
//
//	chain A B C D [colon] [ordered] [phase=D] [exit=D] [silence=D] [connect=D] [policy=P] [ext=on]
//	                        new chain, Head first; colon: send "COMMAND:" for the
//	                        unnamed round; ordered: protocol.Config.Ordered; the
//	                        durations set the Machines' timeouts (PhaseTimeout,
//	                        ExitWaveTimeout, Silence, ConnectTimeout);
//	                        policy=halt|wait is the Machines' fault policy
//	                        (protocol.Config.Policy, halt if not given); ext=on
//	                        turns the extension lines on (Config.Extensions): each
//	                        timeout is then reported as a fault notice that
//	                        crosses the chain
//	advance D               the clock moves by D; every node not hung ticks (prints
//	                        the ticks that did something)
//	hang C.. / unhang C..   C stops (a hung process: no ticks, no heartbeats, nothing
//	                        delivered to it) / goes on
//	ready A B.. [round=R]   the nodes become locally ready, in that order
//	deliver [N | X->Y]      deliver the oldest message in flight (N times), or the next on link X->Y
//	stabilize               deliver everything in global FIFO order (lockstep); tasks finish instantly
//	hold C..                C's tasks do not finish in stabilize; use finish or fail
//	release C..             undoes hold
//	finish C [round=R]      C's running task succeeds
//	fail C [round=R]        C's running task fails
//	abort C [round=R]       the driver aborts the round at C
//	give-up C [round=R]     C's driver gives up handing the final COMPLETE to its predecessor
//	drop B-C                both links between B and C go down; queued messages are lost
//	restore B-C             both links come back; LinkUp is reported to B, then to C
//	dup X->Y                the last message sent on X->Y is queued again
//	inject X->Y LINE        Y receives the raw LINE from X at once, through the codec
//	state [round=R]         every node's state, and what is in flight
//	check-done [round=R]    the reference checker's end-of-round checks
//	check-failed C [round=R]  ditto, for a round that halted at C
//
// Output: an unindented line is an event (a delivery "A->B READY", "A:
// local ready", "A: task done", ...); the indented lines under it are the
// actions the node's Machine returned, "(no change)" if none. An exit-wave
// COMPLETE sent on a live link is handed over at once (sim.Network.Step):
// what the node's Delivered step returned ("finished: done") follows the
// send, under the same event; one lost on a link that is down is not, and
// the round stays DONE but not finished until a re-send is handed over or
// give-up.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden files in testdata/")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runGoldenFile(t, file)
		})
	}
}

type goldenBlock struct {
	pre []string // comment and blank lines before the command
	cmd string
	out []string
}

func parseGolden(t *testing.T, file string) (blocks []goldenBlock, tail []string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := goldenBlock{pre: pre, cmd: l}
		pre = nil
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q is not followed by ----", file, i+1, l)
		}
		for i += 2; i < len(lines) && lines[i] != ""; i++ {
			b.out = append(b.out, lines[i])
		}
		blocks = append(blocks, b)
	}
	return blocks, pre
}

func runGoldenFile(t *testing.T, file string) {
	blocks, tail := parseGolden(t, file)
	g := &golden{t: t, held: map[int]bool{}}
	var buf bytes.Buffer
	failed := false
	for _, b := range blocks {
		got := g.run(b.cmd)
		if !*rewrite && !slices.Equal(got, b.out) {
			failed = true
			k := 0
			for k < len(got) && k < len(b.out) && got[k] == b.out[k] {
				k++
			}
			t.Errorf("%s: %s: output differs from line %d\n--- want\n%s\n--- got\n%s", file, b.cmd, k+1,
				strings.Join(b.out, "\n"), strings.Join(got, "\n"))
		}
		for _, l := range b.pre {
			buf.WriteString(l + "\n")
		}
		buf.WriteString(b.cmd + "\n----\n")
		for _, l := range got {
			buf.WriteString(l + "\n")
		}
		buf.WriteString("\n")
	}
	for _, l := range tail {
		buf.WriteString(l + "\n")
	}
	if *rewrite {
		out := bytes.TrimRight(buf.Bytes(), "\n")
		if err := os.WriteFile(file, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if failed {
		t.Log("run with -rewrite to accept the new output")
	}
}

// golden interprets one script.
type golden struct {
	t    *testing.T
	net  *sim.Network
	chk  *sim.Checker
	held map[int]bool
	out  []string
}

func (g *golden) printf(format string, args ...any) {
	g.out = append(g.out, fmt.Sprintf(format, args...))
}

func (g *golden) run(cmd string) []string {
	g.out = nil
	fields := strings.Fields(cmd)
	args, kv := fields[1:], map[string]string{}
	for i := 0; i < len(args); {
		if k, v, ok := strings.Cut(args[i], "="); ok {
			kv[k] = v
			args = slices.Delete(args, i, i+1)
		} else {
			i++
		}
	}
	round := kv["round"]
	if fields[0] != "chain" && g.net == nil {
		g.t.Fatalf("%q before chain", cmd)
	}
	switch fields[0] {
	case "chain":
		var colon, ordered bool
		for len(args) > 0 && (args[len(args)-1] == "colon" || args[len(args)-1] == "ordered") {
			colon = colon || args[len(args)-1] == "colon"
			ordered = ordered || args[len(args)-1] == "ordered"
			args = args[:len(args)-1]
		}
		dur := func(k string) time.Duration {
			if kv[k] == "" {
				return 0
			}
			d, err := time.ParseDuration(kv[k])
			if err != nil {
				g.t.Fatalf("%q: %v", cmd, err)
			}
			return d
		}
		var policy protocol.Policy
		switch kv["policy"] {
		case "", "halt":
		case "wait":
			policy = protocol.PolicyWait
		default:
			g.t.Fatalf("%q: policy=%s: use halt or wait", cmd, kv["policy"])
		}
		g.net = sim.New(sim.Config{Names: args, Machine: func(_ int, pc *protocol.Config) {
			pc.Ordered = ordered
			pc.PhaseTimeout, pc.ExitWaveTimeout, pc.Silence, pc.ConnectTimeout = dur("phase"), dur("exit"), dur("silence"), dur("connect")
			pc.Policy, pc.Extensions = policy, kv["ext"] == "on"
		}})
		g.net.Colon = colon
		g.chk = sim.NewChecker(g.net)
		g.chk.Faults = true // the scripts drop links and duplicate messages
		g.chk.Attach(func(err error) { g.t.Fatalf("%s: invariant broken: %v", cmd, err) })
		g.held = map[int]bool{}
		var parts []string
		for _, nd := range g.net.Nodes {
			parts = append(parts, fmt.Sprintf("%s (%v)", nd.Name, nd.Role))
		}
		g.printf("%s", strings.Join(parts, " <-> "))
	case "ready":
		for _, name := range args {
			i := g.node(name)
			acts, err := g.net.Step(i, protocol.LocalReady(round))
			g.printf("%s%s: local ready", name, roundSuffix(round))
			g.actions(i, acts, err)
		}
	case "deliver":
		switch {
		case len(args) == 0:
			g.deliverOldest()
		case strings.Contains(args[0], "->"):
			g.deliver(g.link(args[0]))
		default:
			k, err := strconv.Atoi(args[0])
			if err != nil {
				g.t.Fatalf("%q: %v", cmd, err)
			}
			for ; k > 0; k-- {
				g.deliverOldest()
			}
		}
	case "stabilize":
		for steps := 0; ; steps++ {
			if steps > 100000 {
				g.t.Fatalf("%q does not stabilize", cmd)
			}
			if k := g.runnableTask(); k >= 0 {
				g.finish(k, false)
				continue
			}
			if g.net.Oldest() < 0 {
				break
			}
			g.deliverOldest()
		}
		if len(g.out) == 0 {
			g.printf("(nothing to do)")
		}
	case "advance":
		d, err := time.ParseDuration(args[0])
		if err != nil {
			g.t.Fatalf("%q: %v", cmd, err)
		}
		for i, acts := range g.net.Advance(d) {
			if len(acts) > 0 {
				g.printf("%s: tick %v", g.name(i), g.net.Now)
				g.actions(i, acts, nil)
			}
		}
		if len(g.out) == 0 {
			g.printf("%v: (no timeout)", g.net.Now)
		}
	case "hang", "unhang":
		for _, name := range args {
			g.net.Hang(g.node(name), fields[0] == "hang")
		}
		g.printf("ok")
	case "hold", "release":
		for _, name := range args {
			g.held[g.node(name)] = fields[0] == "hold"
		}
		g.printf("ok")
	case "finish", "fail":
		i := g.node(args[0])
		k := slices.Index(g.net.Tasks, sim.Task{Node: i, Round: round})
		if k < 0 {
			g.printf("%s%s: no task running", args[0], roundSuffix(round))
			break
		}
		g.finish(k, fields[0] == "fail")
	case "abort":
		i := g.node(args[0])
		acts, err := g.net.Step(i, protocol.Abort(round))
		g.printf("%s%s: abort", args[0], roundSuffix(round))
		g.actions(i, acts, err)
	case "give-up":
		i := g.node(args[0])
		acts, err := g.net.Step(i, protocol.Undelivered(round))
		g.printf("%s%s: gives up handing the final COMPLETE to its predecessor", args[0], roundSuffix(round))
		g.actions(i, acts, err)
	case "drop", "restore":
		a, b, ok := strings.Cut(args[0], "-")
		p := g.node(a)
		if !ok || g.node(b) != p+1 {
			g.t.Fatalf("%q: want adjacent nodes X-Y, Head side first", cmd)
		}
		if fields[0] == "drop" {
			for _, l := range []int{sim.Fwd(p), sim.Bwd(p)} {
				if n := g.net.Pending(l); n > 0 {
					from, to := g.net.Ends(l)
					g.printf("%s->%s: %d message(s) lost", g.name(from), g.name(to), n)
				}
			}
			g.net.SetLink(p, false)
			g.printf("%s: down", args[0])
			break
		}
		g.net.SetLink(p, true)
		g.printf("%s: up", args[0])
		acts, err := g.net.Step(p, protocol.LinkUp(protocol.Succ))
		g.printf("%s: link to %s up", a, b)
		g.actions(p, acts, err)
		acts, err = g.net.Step(p+1, protocol.LinkUp(protocol.Pred))
		g.printf("%s: link to %s up", b, a)
		g.actions(p+1, acts, err)
	case "dup":
		if g.net.DupLast(g.link(args[0])) {
			g.printf("%s: last message queued again", args[0])
		} else {
			g.printf("%s: nothing to duplicate", args[0])
		}
	case "inject":
		l := g.link(args[0])
		from, to := g.net.Ends(l)
		line := strings.SplitN(cmd, " ", 3)[2]
		g.printf("%s %q (injected)", args[0], line)
		msg, err := wire.Parse([]byte(line))
		if err != nil {
			g.printf("  %s: rejected by the codec: %v", g.name(to), err)
			break
		}
		side := protocol.Succ
		if to == from+1 {
			side = protocol.Pred
		}
		before, known := g.net.Nodes[to].M.State(msg.Round)
		acts, err := g.net.Step(to, protocol.Recv(side, msg))
		g.actions(to, acts, err)
		if after, _ := g.net.Nodes[to].M.State(msg.Round); err != nil && (after != before) {
			g.t.Fatalf("%q: rejected message moved %s from %v (known %v) to %v", cmd, g.name(to), before, known, after)
		}
	case "state":
		for _, nd := range g.net.Nodes {
			st, ok := nd.M.State(round)
			s := "-"
			if ok {
				s = st.String()
			}
			g.printf("%s%s: %s", nd.Name, roundSuffix(round), s)
		}
		var inflight []string
		for l := 0; l < g.net.Links(); l++ {
			if n := g.net.Pending(l); n > 0 {
				from, to := g.net.Ends(l)
				inflight = append(inflight, fmt.Sprintf("%s->%s x%d", g.name(from), g.name(to), n))
			}
		}
		if len(inflight) == 0 {
			inflight = []string{"nothing"}
		}
		g.printf("in flight: %s", strings.Join(inflight, ", "))
		if len(g.net.Tasks) > 0 {
			var ts []string
			for _, tk := range g.net.Tasks {
				ts = append(ts, g.name(tk.Node)+roundSuffix(tk.Round))
			}
			g.printf("tasks running: %s", strings.Join(ts, ", "))
		}
	case "check-done":
		if err := g.chk.CheckDone(round); err != nil {
			g.printf("FAIL: %v", err)
		} else {
			g.printf("ok: every node ran once, in order, and is done; %d messages", 4*(len(g.net.Nodes)-1))
		}
	case "check-failed":
		if err := g.chk.CheckFailed(round, g.node(args[0])); err != nil {
			g.printf("FAIL: %v", err)
		} else {
			g.printf("ok: halted at %s", args[0])
		}
	default:
		g.t.Fatalf("unknown command %q", cmd)
	}
	return g.out
}

func roundSuffix(round string) string {
	if round == "" {
		return ""
	}
	return " " + round
}

func (g *golden) node(name string) int {
	for i, nd := range g.net.Nodes {
		if nd.Name == name {
			return i
		}
	}
	g.t.Fatalf("no node %q", name)
	return -1
}

func (g *golden) name(i int) string { return g.net.Nodes[i].Name }

func (g *golden) link(s string) int {
	a, b, _ := strings.Cut(s, "->")
	l, ok := g.net.Link(g.node(a), g.node(b))
	if !ok {
		g.t.Fatalf("no link %q", s)
	}
	return l
}

func (g *golden) runnableTask() int {
	for k, tk := range g.net.Tasks {
		if !g.held[tk.Node] {
			return k
		}
	}
	return -1
}

func (g *golden) finish(k int, failed bool) {
	tk, acts, err := g.net.FinishTask(k, failed)
	what := "done"
	if failed {
		what = "failed"
	}
	g.printf("%s%s: task %s", g.name(tk.Node), roundSuffix(tk.Round), what)
	g.actions(tk.Node, acts, err)
}

func (g *golden) deliverOldest() {
	l := g.net.Oldest()
	if l < 0 {
		g.printf("(nothing in flight)")
		return
	}
	g.deliver(l)
}

func (g *golden) deliver(l int) {
	if g.net.Pending(l) == 0 {
		from, to := g.net.Ends(l)
		g.printf("%s->%s: nothing in flight", g.name(from), g.name(to))
		return
	}
	from, to := g.net.Ends(l)
	to2, msg, acts, err := g.net.Deliver(l)
	if to2 != to {
		g.t.Fatalf("delivered to %d, want %d", to2, to)
	}
	g.printf("%s->%s %v", g.name(from), g.name(to), msg)
	g.actions(to, acts, err)
}

// actions prints what node i's Machine returned, indented under its event.
func (g *golden) actions(i int, acts []protocol.Action, err error) {
	name := g.name(i)
	if err != nil {
		var v *protocol.Violation
		if errors.As(err, &v) {
			st, ok := g.net.Nodes[i].M.State(v.Msg.Round)
			what := "unknown round"
			if ok {
				what = st.String()
			}
			g.printf("  %s: VIOLATION, state unchanged (%s): %v", name, what, err)
		} else {
			g.printf("  %s: error: %v", name, err)
		}
		return
	}
	// ActOpened is not printed: the event line says what opened the round.
	acts = slices.DeleteFunc(slices.Clone(acts), func(a protocol.Action) bool { return a.Kind == protocol.ActOpened })
	if len(acts) == 0 {
		g.printf("  (no change)")
	}
	for _, a := range acts {
		switch a.Kind {
		case protocol.ActState:
			g.printf("  %s%s: %v -> %v", name, roundSuffix(a.Round), a.From, a.State)
		case protocol.ActSend:
			to := i + 1
			if a.To == protocol.Pred {
				to = i - 1
			}
			s := fmt.Sprintf("  %s: send %v to %s", name, a.Msg, g.name(to))
			if a.Resend {
				s += " (re-send)"
			}
			if !g.net.Up(min(i, to)) {
				s += " (lost: link down)"
			}
			g.out = append(g.out, s)
		case protocol.ActRunTask:
			g.printf("  %s%s: run task", name, roundSuffix(a.Round))
		case protocol.ActDone:
			g.printf("  %s%s: finished: %v", name, roundSuffix(a.Round), a.Outcome)
		case protocol.ActPeerRestarted:
			g.printf("  %s%s: %v restarted without its state (sent %v); not answered", name, roundSuffix(a.Round), a.To, a.Msg.Cmd)
		case protocol.ActSave:
			g.printf("  %s%s: save %v", name, roundSuffix(a.Round), a.Record.State)
		case protocol.ActForget:
			g.printf("  %s%s: forgotten", name, roundSuffix(a.Round))
		case protocol.ActNotice:
			g.printf("  %s: notice: %v", name, a.Msg)
		case protocol.ActTimeout:
			if a.Timeout == protocol.TimeoutPhase {
				what := a.Wait.String()
				if a.To == protocol.Pred {
					what += " from " + g.name(i-1)
				} else if a.To == protocol.Succ {
					what += " from " + g.name(i+1)
				}
				g.printf("  %s%s: phase timeout: %v, waiting for %s", name, roundSuffix(a.Round), a.From, what)
				break
			}
			peer := i + 1
			if a.To == protocol.Pred {
				peer = i - 1
			}
			g.printf("  %s: %v timeout: %s for %v", name, a.Timeout, g.name(peer), a.After)
		case protocol.ActBack:
			peer := i + 1
			if a.To == protocol.Pred {
				peer = i - 1
			}
			g.printf("  %s: %s back after %v", name, g.name(peer), a.After)
		case protocol.ActGrace:
			g.printf("  %s: grace %v", name, a.Msg.Grace)
		default:
			g.printf("  %s: unknown action %+v", name, a)
		}
	}
}
