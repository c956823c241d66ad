package protocol_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
)

// graceNet is a 4-node chain A-B-C-D with the extension lines, heartbeat
// silence 3s, connect timeout 5s and phase timeout 8s, whose node B
// announces a restart grace before its task (docs/DESIGN.md, "Liveness: a
// restart is not a death"). Every tick's and delivery's timeouts are
// collected by node.
type graceNet struct {
	t        *testing.T
	net      *sim.Network
	timeouts [4][]protocol.Action
	graces   [4][]protocol.GraceNote // ActGrace seen, by node
	backs    [4][]protocol.Action    // ActBack seen, by node
	rng      *rand.Rand
}

const testGrace = 20 * time.Second

func newGraceNet(t *testing.T, policy protocol.Policy, seed uint64) *graceNet {
	g := &graceNet{t: t, rng: rand.New(rand.NewPCG(seed, 7))}
	names := []string{"A", "B", "C", "D"}
	g.net = sim.New(sim.Config{Names: names, Machine: func(i int, pc *protocol.Config) {
		pc.Extensions, pc.Durable, pc.Policy, pc.Self = true, true, policy, names[i]
		pc.Silence, pc.ConnectTimeout, pc.PhaseTimeout = 3*time.Second, 5*time.Second, 8*time.Second
		if i == 1 {
			pc.RestartGrace = testGrace
		}
	}})
	chk := sim.NewChecker(g.net) // every invariant, the graces' included, after every step
	chk.Faults = true
	g.net.Hook = func(i int, ev protocol.Event, acts []protocol.Action, err error) {
		if e := chk.Observe(i, ev, acts, err); e != nil {
			t.Fatalf("seed %d: %v", seed, e)
		}
		for _, a := range acts {
			switch a.Kind {
			case protocol.ActTimeout:
				g.timeouts[i] = append(g.timeouts[i], a)
			case protocol.ActGrace:
				g.graces[i] = append(g.graces[i], *a.Msg.Grace)
			case protocol.ActBack:
				g.backs[i] = append(g.backs[i], a)
			}
		}
	}
	return g
}

// settle delivers what is in flight, in a random order, to the nodes
// that are not hung, and finishes no task.
func (g *graceNet) settle() {
	for {
		var live []int
		for _, l := range g.net.Busy() {
			if _, to := g.net.Ends(l); !g.net.Hung(to) {
				live = append(live, l)
			}
		}
		if len(live) == 0 {
			return
		}
		if _, _, _, err := g.net.Deliver(live[g.rng.IntN(len(live))]); err != nil {
			g.t.Fatalf("deliver: %v", err)
		}
	}
}

// runTo makes every node ready for round r1 and runs the round until the
// task of node k has started (the tasks before it finish).
func (g *graceNet) runTo(k int) {
	for i := range 4 {
		if _, err := g.net.Step(i, protocol.LocalReady("r1")); err != nil {
			g.t.Fatal(err)
		}
	}
	for {
		g.settle()
		if len(g.net.Tasks) == 0 {
			g.t.Fatalf("no task runs")
		}
		if g.net.Tasks[0].Node == k {
			return
		}
		if _, _, err := g.net.FinishTask(0, false); err != nil {
			g.t.Fatal(err)
		}
	}
}

// advance moves the clock by total in steps of step, delivering what the
// ticks send.
func (g *graceNet) advance(total, step time.Duration) {
	for d := time.Duration(0); d < total; d += step {
		g.net.Advance(step)
		g.settle()
	}
}

// finish runs every remaining task and delivery.
func (g *graceNet) finish() {
	for {
		g.settle()
		if len(g.net.Tasks) == 0 {
			return
		}
		if _, _, err := g.net.FinishTask(0, false); err != nil {
			g.t.Fatal(err)
		}
	}
}

// restartB lets the restarted B run (its task was the restart: resumed
// as done) and brings its links up again.
func (g *graceNet) restartB() {
	g.net.Hang(1, false)
	for _, p := range []int{0, 1} {
		g.net.SetLink(p, true)
		g.net.Step(p, protocol.LinkUp(protocol.Succ))
		g.net.Step(p+1, protocol.LinkUp(protocol.Pred))
	}
	if _, err := g.net.Step(1, protocol.TaskDone("r1", false)); err != nil {
		g.t.Fatal(err)
	}
}

func (g *graceNet) noTimeouts(when string) {
	for i, ts := range g.timeouts {
		if len(ts) > 0 {
			g.t.Fatalf("%s: node %d reported %s", when, i, sim.DescribeAction(ts[0]))
		}
	}
}

// docs/DESIGN.md, "Liveness: a restart is not a death": B announces its
// grace before its task and every other node learns it; B is killed
// inside its task and restarted within the grace, on seeded schedules
// whose outage ranges over the grace: no node reports anything (no
// silence, no down link, no phase timeout of the rounds that wait on
// B), the round completes everywhere, and the grace is over at every
// node.
func TestSimulateGraceRestartWithin(t *testing.T) {
	for seed := range uint64(50) {
		for _, policy := range []protocol.Policy{protocol.PolicyHalt, protocol.PolicyWait} {
			g := newGraceNet(t, policy, seed)
			g.runTo(1)
			for _, i := range []int{0, 2, 3} {
				if len(g.graces[i]) != 1 || g.graces[i][0].Node != "B" || g.graces[i][0].For != testGrace {
					t.Fatalf("seed %d: node %d learned %v, want B's grace of %v", seed, i, g.graces[i], testGrace)
				}
			}
			if gv := g.net.Nodes[3].M.Graces(); len(gv) != 1 || gv[0].Neighbor || gv[0].Side != protocol.Pred {
				t.Fatalf("seed %d: D's view %+v", seed, gv)
			}
			if _, err := g.net.Restart(1); err != nil {
				t.Fatal(err)
			}
			g.net.Hang(1, true) // rebooting: not running yet
			outage := time.Duration(1+g.rng.IntN(int(testGrace/time.Second)-2)) * time.Second
			g.advance(outage, 500*time.Millisecond)
			g.noTimeouts(fmt.Sprintf("seed %d, B away %v of its %v grace", seed, outage, testGrace))
			g.restartB()
			g.finish()
			g.advance(10*time.Second, time.Second) // the clocks run on: nothing comes late
			g.noTimeouts(fmt.Sprintf("seed %d, after B came back", seed))
			for i, nd := range g.net.Nodes {
				if st, _ := nd.M.State("r1"); st != protocol.StateDone {
					t.Fatalf("seed %d: node %d in %v, want DONE", seed, i, st)
				}
				if gv := nd.M.Graces(); len(gv) != 0 {
					t.Fatalf("seed %d: node %d still has graces %+v", seed, i, gv)
				}
			}
		}
	}
}

// docs/DESIGN.md, "Liveness: a restart is not a death": B never comes
// back. Nothing is reported within the grace; once it has passed, A, C
// and D each report one TimeoutGrace naming B (and nothing else about
// it), and under halt every round ends; C and D never ran their tasks.
func TestSimulateGraceRunsOut(t *testing.T) {
	for seed := range uint64(20) {
		g := newGraceNet(t, protocol.PolicyHalt, seed)
		g.runTo(1)
		if _, err := g.net.Restart(1); err != nil {
			t.Fatal(err)
		}
		g.net.Hang(1, true) // it never comes back
		g.advance(testGrace-time.Second, 500*time.Millisecond)
		g.noTimeouts(fmt.Sprintf("seed %d, within the grace", seed))
		g.advance(3*time.Second, 500*time.Millisecond)
		for _, i := range []int{0, 2, 3} {
			ts := g.timeouts[i]
			if len(ts) != 1 || ts[0].Timeout != protocol.TimeoutGrace || ts[0].Msg.Grace.Node != "B" || ts[0].After != testGrace {
				t.Fatalf("seed %d: node %d reported %v, want one grace timeout naming B", seed, i, ts)
			}
			if st, _ := g.net.Nodes[i].M.State("r1"); st != protocol.StateAborted {
				t.Fatalf("seed %d: node %d in %v, want ABORTED", seed, i, st)
			}
		}
		g.advance(20*time.Second, time.Second)
		for _, i := range []int{0, 2, 3} {
			if len(g.timeouts[i]) != 1 {
				t.Fatalf("seed %d: node %d reported again: %v", seed, i, g.timeouts[i])
			}
		}
		for _, tk := range g.net.Tasks {
			t.Fatalf("seed %d: a task of node %d runs after the halt", seed, tk.Node)
		}
	}
}

// docs/DESIGN.md, "Liveness": B's task ends without a restart: its own
// GRACE line of grace 0 ends the grace everywhere, and B's silence later
// is reported as usual.
func TestGraceEndsWithTheTask(t *testing.T) {
	g := newGraceNet(t, protocol.PolicyWait, 1)
	g.runTo(1)
	if _, _, err := g.net.FinishTask(0, false); err != nil {
		t.Fatal(err)
	}
	g.settle()
	for i, nd := range g.net.Nodes {
		if gv := nd.M.Graces(); len(gv) != 0 {
			t.Fatalf("node %d still has graces %+v", i, gv)
		}
	}
	g.net.Hang(1, true)
	g.advance(5*time.Second, 500*time.Millisecond)
	if ts := g.timeouts[2]; len(ts) != 1 || ts[0].Timeout != protocol.TimeoutSilence || ts[0].To != protocol.Pred {
		t.Fatalf("C reported %v, want B silent", ts)
	}
}

// docs/DESIGN.md, "Liveness": a neighbour reported silent that speaks
// again is reported back (ActBack) once, with how long it was silent.
func TestBackAfterSilence(t *testing.T) {
	g := newGraceNet(t, protocol.PolicyWait, 2)
	g.runTo(2) // C's task runs: B waits for the exit wave
	g.net.Hang(2, true)
	g.advance(6*time.Second, 500*time.Millisecond)
	if len(g.timeouts[1]) != 1 || len(g.timeouts[3]) != 1 {
		t.Fatalf("B %v, D %v: want C silent at both", g.timeouts[1], g.timeouts[3])
	}
	g.net.Hang(2, false)
	g.advance(2*time.Second, 500*time.Millisecond)
	for _, i := range []int{1, 3} {
		b := g.backs[i]
		if len(b) != 1 || b[0].After < 3*time.Second || b[0].After > 7*time.Second {
			t.Fatalf("node %d: back %v, want one ActBack after about 6s", i, b)
		}
	}
}

// docs/DESIGN.md, "Liveness": a cleared notice ends no round, under halt
// too, is passed on, and makes the notices blaming that node news again.
func TestClearedNotice(t *testing.T) {
	m := protocol.New(protocol.Config{Role: protocol.Middle, Extensions: true, Policy: protocol.PolicyHalt})
	if _, err := m.Step(protocol.LocalReady("r1"), nil); err != nil {
		t.Fatal(err)
	}
	silent := protocol.Notice{HasRound: true, Round: "r1", Kind: "peer-silent", Origin: "D", Blamed: "E"}
	cleared := silent
	cleared.Kind = protocol.KindCleared
	wait := protocol.New(protocol.Config{Role: protocol.Middle, Extensions: true, Policy: protocol.PolicyWait})
	for _, mm := range []*protocol.Machine{wait} {
		acts, _ := mm.Step(protocol.Recv(protocol.Succ, protocol.Message{Cmd: protocol.FaultNotice, Note: &silent}), nil)
		if len(acts) != 2 {
			t.Fatalf("first notice: %v", acts)
		}
		if acts, _ := mm.Step(protocol.Recv(protocol.Succ, protocol.Message{Cmd: protocol.FaultNotice, Note: &silent}), nil); len(acts) != 0 {
			t.Fatalf("repeat: %v", acts)
		}
		acts, _ = mm.Step(protocol.Recv(protocol.Succ, protocol.Message{Cmd: protocol.FaultNotice, Note: &cleared}), nil)
		if len(acts) != 2 || acts[0].Kind != protocol.ActSend || acts[1].Kind != protocol.ActNotice {
			t.Fatalf("cleared: %v", acts)
		}
		if acts, _ := mm.Step(protocol.Recv(protocol.Succ, protocol.Message{Cmd: protocol.FaultNotice, Note: &silent}), nil); len(acts) != 2 {
			t.Fatalf("the same fault after it cleared is news: %v", acts)
		}
	}
	acts, _ := m.Step(protocol.Recv(protocol.Succ, protocol.Message{Cmd: protocol.FaultNotice, Note: &cleared}), nil)
	for _, a := range acts {
		if a.Kind == protocol.ActDone {
			t.Fatalf("a cleared notice ended a round under halt: %v", acts)
		}
	}
	if m.Active() != 1 {
		t.Fatalf("active %d", m.Active())
	}
}

// docs/PROTOCOL.md, "Restart graces": a GRACE line at a node without the
// extension lines is a configuration mismatch; a malformed one a
// violation.
func TestGraceLineChecks(t *testing.T) {
	g := protocol.GraceNote{HasRound: true, Round: "r1", Node: "B", For: time.Second, Hops: 1}
	plain := protocol.New(protocol.Config{Role: protocol.Middle})
	_, err := plain.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Grace, Grace: &g}), nil)
	if v, ok := err.(*protocol.Violation); !ok || !v.Mismatch {
		t.Fatalf("plain node: %v", err)
	}
	ext := protocol.New(protocol.Config{Role: protocol.Middle, Extensions: true})
	bad := g
	bad.Hops = 0
	if _, err := ext.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Grace, Grace: &bad}), nil); err == nil {
		t.Fatalf("hops 0 accepted")
	}
	for _, b := range []protocol.GraceNote{{Node: "B", For: protocol.MaxGrace + time.Millisecond, Hops: 1},
		{Node: "B", For: time.Microsecond, Hops: 1}, {Node: "-", Hops: 1}, {Node: "B", Hops: protocol.MaxGraceHops + 1}} {
		if b.Valid() {
			t.Errorf("%+v valid", b)
		}
	}
}

// docs/DESIGN.md, "Liveness": a task that its restart interrupted and
// that runs again (a resume policy of "rerun") is announced again: the
// neighbours hold B's grace anew, and a second restart inside it is no
// fault either.
func TestGraceRerunAnnouncesAgain(t *testing.T) {
	g := newGraceNet(t, protocol.PolicyHalt, 3)
	g.runTo(1)
	if _, err := g.net.Restart(1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{0, 1} {
		g.net.SetLink(p, true)
		g.net.Step(p, protocol.LinkUp(protocol.Succ))
		g.net.Step(p+1, protocol.LinkUp(protocol.Pred))
	}
	g.settle()
	before := len(g.graces[0])
	g.net.Rerun(1, "r1")
	g.settle()
	for _, i := range []int{0, 2, 3} {
		gs := g.graces[i]
		if last := gs[len(gs)-1]; last.Node != "B" || last.For != testGrace {
			t.Fatalf("node %d: last grace %v, want B's of %v again", i, last, testGrace)
		}
	}
	if len(g.graces[0]) <= before {
		t.Fatalf("A heard no new grace after the rerun")
	}
	if _, err := g.net.Restart(1); err != nil {
		t.Fatal(err)
	}
	g.net.Hang(1, true)
	g.advance(testGrace-2*time.Second, 500*time.Millisecond)
	g.noTimeouts("within the grace of the rerun")
}

// docs/DESIGN.md, "Liveness: a restart is not a death", with a link
// down: B announces its grace while the link C-D is down, so the line C
// passes on to D is lost; when the link comes back C sends it again.
// B then never comes back: D reports B as not back within its grace
// (TimeoutGrace naming B), as A and C do, rather than only hearing of a
// fault elsewhere.
func TestGraceReachesALinkThatWasDown(t *testing.T) {
	g := newGraceNet(t, protocol.PolicyHalt, 1)
	g.runTo(0)
	g.net.SetLink(2, false)
	if _, _, err := g.net.FinishTask(0, false); err != nil {
		t.Fatal(err)
	}
	g.settle()
	if len(g.net.Tasks) != 1 || g.net.Tasks[0].Node != 1 {
		t.Fatalf("tasks %v, want B's", g.net.Tasks)
	}
	if gv := g.net.Nodes[3].M.Graces(); len(gv) != 0 {
		t.Fatalf("D learned %+v with its link down", gv)
	}
	g.net.SetLink(2, true)
	g.net.Step(2, protocol.LinkUp(protocol.Succ))
	g.net.Step(3, protocol.LinkUp(protocol.Pred))
	g.settle()
	if gv := g.net.Nodes[3].M.Graces(); len(gv) != 1 || gv[0].Node != "B" {
		t.Fatalf("D after its link came back: graces %+v, want B's", gv)
	}
	if _, err := g.net.Restart(1); err != nil {
		t.Fatal(err)
	}
	g.net.Hang(1, true) // it never comes back
	g.advance(testGrace+2*time.Second, 500*time.Millisecond)
	for _, i := range []int{0, 2, 3} {
		var named bool
		for _, a := range g.timeouts[i] {
			named = named || a.Timeout == protocol.TimeoutGrace && a.Msg.Grace.Node == "B"
		}
		if !named {
			t.Errorf("node %d reported %d timeouts, none that B did not come back", i, len(g.timeouts[i]))
		}
	}
}

// docs/DESIGN.md, "Extension lines": a fault notice that passes a node
// while its link onward is down is sent when the link comes back, once.
func TestNoticeReachesALinkThatWasDown(t *testing.T) {
	net := sim.New(sim.Config{Names: []string{"A", "B", "C"}, Machine: func(i int, c *protocol.Config) {
		c.Extensions, c.Policy = true, protocol.PolicyWait
	}})
	var notices [3]int
	net.Hook = func(i int, ev protocol.Event, acts []protocol.Action, err error) {
		for _, a := range acts {
			if a.Kind == protocol.ActNotice {
				notices[i]++
			}
		}
	}
	net.SetLink(0, false)
	if _, err := net.Step(2, protocol.Report(protocol.Notice{Kind: "peer-silent", Origin: "C", Blamed: "D"})); err != nil {
		t.Fatal(err)
	}
	deliverAll := func() {
		for len(net.Busy()) > 0 {
			if _, _, _, err := net.Deliver(net.Oldest()); err != nil {
				t.Fatal(err)
			}
		}
	}
	deliverAll()
	if notices != [3]int{0, 1, 0} {
		t.Fatalf("with A's link down: notices %v, want B's only", notices)
	}
	for range 2 { // the second time, nothing is left to send
		net.SetLink(0, false)
		net.SetLink(0, true)
		net.Step(0, protocol.LinkUp(protocol.Succ))
		net.Step(1, protocol.LinkUp(protocol.Pred))
		deliverAll()
	}
	if notices != [3]int{1, 1, 0} {
		t.Fatalf("after A's link came back: notices %v, want A's and B's, once each", notices)
	}
}
