//go:build unix

package main

// The kill -9 matrix (issue 8; docs/DESIGN.md "Restarts and durable state"):
// a 4-process chain A -> B -> C -> D, one node killed with SIGKILL at each
// phase of a round and restarted with the same command line, with and
// without --state-dir.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
)

// mxPhase is where in a round the victim is killed.
type mxPhase int

const (
	// before the READY wave reached it (its predecessor, or for the Head
	// the Head itself, is held not locally ready)
	phBeforeReady mxPhase = iota
	// READY reached it, START has not (the Tail is held not locally ready)
	phAfterReady
	// inside its own task (the task holds until released)
	phInTask
	// its task ended, the exit wave has not come back through it (the
	// successor's task holds; for the Tail, the moment its task ends)
	phAfterTask
	// it forwarded the exit wave (the Head has exited 0 by then; the
	// others are lingering for their predecessor to hang up)
	phAfterExit
)

var phaseNames = []string{"before-ready", "after-ready", "in-task", "after-task", "after-exit"}

func (p mxPhase) String() string { return phaseNames[p] }

// mxOutcome is what a case must end in.
type mxOutcome int

const (
	// every process exits 0; every task ran exactly once, in chain order
	outComplete mxOutcome = iota
	// as outComplete, but the Head's task ran twice (see mxExpect)
	outHeadRerun
	// the chain cannot go on: a log line names the restart; no task ran
	// twice or out of order; the test stops the processes
	outStuckNamed
	// the round completed (every task once, in order, every original
	// process exits 0); the restarted victim, which remembers nothing, waits
	// for a new round that never comes and is stopped by the test
	outNewRun
	// the Tail killed the moment its task ended: outNewRun if its COMPLETE
	// got out before SIGKILL, else outStuckNamed
	outTailRace
)

var outcomeNames = []string{"complete", "head-reruns", "stuck-named", "new-run", "tail-race"}

// mxExpect is the outcome of a case. With --state-dir (and --resume-task
// done) every case completes and every task runs exactly once: that is
// the point of the journal. Without it:
//   - before READY reached the victim, or after READY but before START, a
//     restart loses nothing: the neighbours re-send their last message on
//     the new connection and the round carries on.
//   - the Head killed inside its own task: unavoidable rerun. On restart it
//     sends READY, exactly what a Head that only lost its connection
//     re-sends, so B takes it as a duplicate and re-sends its last message,
//     START; the Head cannot tell "I ran my task and died" from "I never got
//     START" and runs its task again. Nothing on the wire distinguishes a
//     reconnect from a restart (the draft's messages carry no incarnation),
//     so only the Head's own durable state can prevent this: --state-dir.
//     The order still holds: B's task starts only after the rerun ended.
//   - a middle node or the Tail killed inside its task, or after its task:
//     its predecessor re-sends COMPLETE to a node that is back in SYNC; the
//     restarted node refuses it and says it may have restarted without
//     --state-dir. The chain halts there; no task runs twice.
//   - the Head killed after its task: it sends READY again to B, which has
//     seen its COMPLETE: B logs at WARN that the predecessor restarted
//     without its state and re-sends it nothing for that round (no START:
//     the Head would run its task again). The rest of the chain runs its
//     tasks; B hands the exit wave to the restarted Head, which refuses it
//     and says it may have restarted; the Head waits for ever.
//   - after the exit wave the round is over everywhere; the restarted node
//     starts afresh and waits for a round nobody will start.
func mxExpect(state bool, victim int, ph mxPhase) mxOutcome {
	if state {
		return outComplete
	}
	switch ph {
	case phBeforeReady, phAfterReady:
		return outComplete
	case phInTask:
		if victim == 0 {
			return outHeadRerun
		}
		return outStuckNamed
	case phAfterTask:
		if victim == 3 {
			return outTailRace
		}
		return outStuckNamed
	}
	return outNewRun
}

// mxTask is every node's task. It records its start and end (unix ns),
// notes any other task of the case still alive when it starts (their
// marker processes, found in /proc), starts a background `sleep` whose
// argument is the case's unique marker (a leftover the node must kill: it
// would be an orphan otherwise), and holds until $DIR/release exists if
// it is $HOLD's task.
const mxTask = `n=$CHAINSYNC_NODE
if grep -qs "3600\.$MARK" /proc/[0-9]*/cmdline; then echo "$n" >> "$DIR/overlap"; fi
date +%s%N >> "$DIR/$n.start"
sleep "3600.$MARK$IDX" >/dev/null 2>&1 &
if [ "$n" = "$HOLD" ] && [ ! -e "$DIR/release" ]; then
  : > "$DIR/$n.held"
  while [ ! -e "$DIR/release" ]; do sleep 0.05; done
else
  sleep 0.05
fi
date +%s%N >> "$DIR/$n.end"
`

type mxCase struct {
	state  bool
	victim int // 0 Head, 1 or 2 a middle, 3 Tail
	phase  mxPhase
	delay  time.Duration
	mark   string // unique digits for the task's marker processes
}

func (c mxCase) name() string {
	mode := "nostate"
	if c.state {
		mode = "state"
	}
	return fmt.Sprintf("%s/%s/%s/%s", mode, nodeNames(4)[c.victim], c.phase, c.delay)
}

// TestKillMatrix: docs/DESIGN.md "Restarts and durable state" end to end
// with the built binary. Every position (Head, a middle chosen by the
// seed, Tail) x every phase x restart after 0.2 s and 3 s, with and
// without --state-dir (see mxExpect for what each must end in): 60
// cases, about 20 s of wall time because they run 20 at a time (the 3 s
// restarts dominate; -short leaves them out). CHAINSYNC_MATRIX_PARALLEL
// bounds the cases running at once.
func TestKillMatrix(t *testing.T) {
	t.Parallel()
	seed := e2eSeed(t)
	t.Logf("seed %d (replay: CHAINSYNC_E2E_SEED=%d go test -run '^TestKillMatrix$' ./cmd/chainsync/)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	delays := []time.Duration{3 * time.Second, 200 * time.Millisecond} // the long ones first
	if testing.Short() {
		delays = delays[1:]
	}
	var cases []mxCase
	for _, d := range delays {
		for _, state := range []bool{true, false} {
			for _, pos := range []int{0, -1, 3} {
				for ph := phBeforeReady; ph <= phAfterExit; ph++ {
					v := pos
					if v < 0 {
						v = 1 + rng.IntN(2)
					}
					cases = append(cases, mxCase{state: state, victim: v, phase: ph, delay: d,
						mark: fmt.Sprintf("%09d%02d", rng.IntN(1e9), len(cases))})
				}
			}
		}
	}
	par := 20
	if s := os.Getenv("CHAINSYNC_MATRIX_PARALLEL"); s != "" {
		if v, err := strconv.Atoi(s); err == nil && v > 0 {
			par = v
		}
	}
	// Subtests started from goroutines run at once without t.Parallel's
	// limit (GOMAXPROCS); par bounds the processes alive at a time.
	start := time.Now()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t.Run(c.name(), func(t *testing.T) { runMatrixCase(t, c) })
		}()
	}
	wg.Wait()
	t.Logf("%d cases in %v (%d at a time)", len(cases), time.Since(start).Round(100*time.Millisecond), par)
}

func runMatrixCase(t *testing.T, c mxCase) {
	want := mxExpect(c.state, c.victim, c.phase)
	t.Logf("victim %s, phase %s, restart after %v, marker %s, expect %s", nodeNames(4)[c.victim], c.phase, c.delay, c.mark, outcomeNames[want])
	dir := t.TempDir()
	names := nodeNames(4)
	addrs := freeAddrs(t, 4)
	v := c.victim

	// Who holds what, so that the kill lands in the phase.
	notReady := -1 // a node whose ready file appears only after the kill
	hold := ""     // a node whose task holds until $DIR/release exists
	switch c.phase {
	case phBeforeReady:
		notReady = max(v-1, 0)
	case phAfterReady:
		notReady = 3
	case phInTask:
		hold = names[v]
	case phAfterTask:
		if v < 3 {
			hold = names[v+1]
		}
	}
	script := filepath.Join(dir, "task.sh")
	if err := os.WriteFile(script, []byte(mxTask), 0o644); err != nil {
		t.Fatal(err)
	}
	readyFile := func(i int) string { return filepath.Join(dir, "ready."+names[i]) }
	for i := range names {
		if i != notReady {
			if err := os.WriteFile(readyFile(i), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(i int) *proc {
		args := append([]string{"run"}, placeArgs("prevnext", names, addrs, i)...)
		args = append(args, "--ready-file", readyFile(i), "--ready-interval", "50ms")
		if c.state {
			args = append(args, "--state-dir", filepath.Join(dir, "state."+names[i]), "--resume-task", "done")
		}
		args = append(args, "--", "sh", script)
		env := []string{"DIR=" + dir, "MARK=" + c.mark, "IDX=" + strconv.Itoa(i), "HOLD=" + hold}
		return startProc(t, names[i], env, args...)
	}
	procs := make([]*proc, 4)
	for i := range procs {
		procs[i] = run(i)
	}
	victim := procs[v]

	// The kill's trigger.
	const within = 20 * time.Second
	switch c.phase {
	case phBeforeReady:
		// Up and connected: the Tail's link counts once C dialed it.
		if v < 3 {
			victim.waitLog(t, within, "link up to succ", containsAll("link up to succ"))
		} else {
			procs[2].waitLog(t, within, "link up to succ", containsAll("link up to succ"))
		}
	case phAfterReady:
		if v == 0 {
			victim.waitLog(t, within, "sent READY", containsAll("sent READY to succ"))
		} else {
			victim.waitLog(t, within, "received READY", containsAll("received READY from pred"))
		}
	case phInTask:
		waitFile(t, filepath.Join(dir, names[v]+".held"), within)
	case phAfterTask:
		if v < 3 {
			waitFile(t, filepath.Join(dir, hold+".held"), within)
		} else {
			// The end is written: SIGKILL lands as the task exits, before
			// or after the node saw it end (either way it ran once).
			waitFor(t, within, "end of D's task", func() bool { return len(readLines(t, filepath.Join(dir, "D.end"))) > 0 })
		}
	case phAfterExit:
		if v == 0 {
			if code := victim.wait(t, within); code != 0 {
				t.Fatalf("the Head exited %d at the end of the round, want 0", code)
			}
		} else {
			victim.waitLog(t, within, "round over, done", containsAll("round over", "status=done"))
		}
	}
	alive := victim.running()
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	killedAt := time.Now()
	victim.wait(t, 5*time.Second)

	if c.phase == phAfterExit && v > 0 && !alive {
		t.Logf("%s had exited (%d) before the kill", names[v], victim.code)
	}
	// Did the victim end normally before the kill? Its journal says so
	// (its end record is written as it closes, just before it exits, so
	// a kill can land after it while the process still runs).
	ended := !alive
	if c.state {
		if snap, err := journal.Read(filepath.Join(dir, "state."+names[v])); err == nil && snap.State.Ended != 0 {
			ended = true
		}
	}

	// While the victim is down, let the rest of the chain move on.
	if notReady >= 0 {
		if err := os.WriteFile(readyFile(notReady), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if hold != "" {
		if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The task's process group dies with its node (the reaper's work: the
	// parent-death signal reaches only sh), normally before the node is
	// back; a busy machine gets 2 s. A successor's task starting beside a
	// leftover would be caught by the tasks' own /proc check.
	marker := "3600." + c.mark + strconv.Itoa(v)
	groupGone := func() bool { return c.phase != phInTask || len(mxLeftovers(marker)) == 0 }
	// The restart delay is the case's subject: a node back at once, or
	// after its neighbours moved on.
	time.Sleep(time.Until(killedAt.Add(c.delay)))
	procs[v] = run(v) // the same command line
	t.Logf("%s killed (it was running: %v) and restarted after %v", names[v], alive, time.Since(killedAt).Round(time.Millisecond))
	if !poll(time.Until(killedAt.Add(2*time.Second)), groupGone) {
		t.Fatalf("2s after SIGKILL of %s its task's processes still run: %s", names[v], strings.Join(mxLeftovers(marker), "; "))
	}

	// The outcome.
	got := want
	if want == outTailRace {
		// Did D's COMPLETE get out before the kill? Then C receives it
		// at once, before anything it sends the restarted D could get
		// the restart named; if not, the restart is named.
		gotComplete := func() bool { return procs[2].logCount("received COMPLETE from succ") > 0 }
		poll(20*time.Second, func() bool { return gotComplete() || mxWaitNamed(procs, 0) != "" })
		got = outStuckNamed
		if gotComplete() {
			got = outNewRun
		}
		t.Logf("Tail race: %s", outcomeNames[got])
	}
	runs := map[string]int{"A": 1, "B": 1, "C": 1, "D": 1}
	switch got {
	case outComplete, outHeadRerun:
		for i, p := range procs {
			code := p.wait(t, 40*time.Second)
			if i == v && c.state && ended {
				// It had ended normally before the kill: started again on
				// its state directory it refuses to do nothing silently
				// (docs/RESTARTS.md), exit 2.
				if code != 2 || !strings.Contains(p.err.String(), "already ended (done at ") {
					t.Errorf("%s, restarted after it ended, exited %d, want 2 saying the round already ended", names[i], code)
				}
				continue
			}
			if code != 0 {
				t.Errorf("%s exited %d, want 0", names[i], code)
			}
		}
		if c.state && c.phase == phInTask {
			procs[v].waitLog(t, time.Second, "its task resumed as done", containsAll("interrupted", "--resume-task done"))
		}
		if got == outHeadRerun {
			runs["A"] = 2
		}
	case outNewRun:
		for i, p := range procs {
			if i == v {
				continue
			}
			if code := p.wait(t, 40*time.Second); code != 0 {
				t.Errorf("%s exited %d, want 0", names[i], code)
			}
		}
		// Nothing may run: the restarted victim is alone. It is ready,
		// and, if it has a successor, has found it gone (its first
		// retry): all it can do now is wait, which it must still be
		// doing when it is stopped (exit 130, its round stopped).
		procs[v].waitLog(t, 10*time.Second, "locally ready", containsAll("locally ready"))
		if v < 3 {
			procs[v].waitLog(t, 10*time.Second, "its first retry of the successor", containsAll("successor not reachable yet; retrying", "attempt=1"))
		}
		if !procs[v].running() {
			t.Errorf("the restarted %s exited %d; want it waiting for a new round", names[v], procs[v].code)
		}
		mxStop(t, procs)
		if procs[v].code != 130 || !strings.Contains(procs[v].err.String(), "status=stopped") {
			t.Errorf("the restarted %s exited %d when stopped; want 130, its round stopped while it waited", names[v], procs[v].code)
		}
		if strings.Contains(procs[v].err.String(), "task started") {
			t.Errorf("the restarted %s started a task", names[v])
		}
	case outStuckNamed:
		named := mxWaitNamed(procs, 20*time.Second)
		if named == "" {
			t.Errorf("the chain halted but no log line names the restart")
		} else {
			t.Logf("named: %s", named)
		}
		// Who says so: the restarted node itself, offered a COMPLETE it
		// cannot place; or, for the Head (whose READY B can place as
		// older than its COMPLETE), B.
		if v == 0 {
			procs[1].waitLog(t, 10*time.Second, "B naming the Head's restart", containsAll("WARN", "predecessor", "restarted without its state"))
		} else {
			procs[v].waitLog(t, 10*time.Second, "the victim saying it may have restarted", containsAll("WARN", "may have restarted without --state-dir"))
		}
		// Killed in its task, the victim halts the chain there: no task
		// after it runs. Killed after its task, only the exit wave is
		// stuck: every task runs, the last ones perhaps after the restart
		// was named; wait for them before stopping the chain.
		last := v
		if c.phase == phAfterTask {
			last = 3
			end := filepath.Join(dir, names[last]+".end")
			poll(20*time.Second, func() bool { return len(readLines(t, end)) > 0 })
		}
		for i, nm := range names {
			if i > last {
				runs[nm] = 0
			}
		}
		// Nothing more may run. The restart was named where the
		// COMPLETE (or, for the Head, the READY) of the restarted node's
		// neighbour was refused: the message that could have started a
		// task again, or one after the halt, was handled by then. No
		// node logged a task start it should not have (the files below
		// may miss a task stopped before it wrote one).
		mxStop(t, procs)
		for i, p := range procs {
			if (i > last || i == v) && strings.Contains(p.err.String(), "task started") {
				t.Errorf("%s started a task after the chain halted at %s's restart", names[i], names[v])
			}
		}
	}
	// With --resume-task done the interrupted task counts as its one run.
	interrupted := ""
	if c.phase == phInTask {
		interrupted = names[v]
	}
	mxCheckTasks(t, dir, runs, interrupted, killedAt)
	mxCheckNoOrphans(t, c.mark)
}

// mxWaitNamed waits up to d for a warning of any process that names a
// restart (its neighbour's, or its own possible one), and returns it.
func mxWaitNamed(procs []*proc, d time.Duration) string {
	named := ""
	poll(d, func() bool {
		for _, p := range procs {
			for _, l := range strings.Split(p.err.String(), "\n") {
				if strings.Contains(l, "WARN") && strings.Contains(l, "restarted") {
					named = p.name + ": " + l
					return true
				}
			}
		}
		return false
	})
	return named
}

// mxStop stops every process still running with SIGTERM (exit 130).
func mxStop(t *testing.T, procs []*proc) {
	t.Helper()
	for _, p := range procs {
		if p.running() {
			// Not before it handles signals (a process just restarted).
			p.waitLog(t, 10*time.Second, "node started", containsAll("node started"))
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range procs {
		if code := p.wait(t, 15*time.Second); code != 0 && code != 130 {
			t.Errorf("%s exited %d after SIGTERM, want 130 (or 0 if it had finished)", p.name, code)
		}
	}
}

// mxCheckTasks checks the tasks' own records: node nm's task started
// runs[nm] times, each run but the interrupted node's first ended, the
// runs were in chain order, and none overlapped another (its start came
// after the previous run's end, or after the kill for the interrupted
// run; and no task saw another one's processes alive when it started).
func mxCheckTasks(t *testing.T, dir string, runs map[string]int, interrupted string, killedAt time.Time) {
	t.Helper()
	type span struct {
		node       string
		start, end int64
	}
	var spans []span
	for _, nm := range nodeNames(4) {
		st, en := nanos(t, filepath.Join(dir, nm+".start")), nanos(t, filepath.Join(dir, nm+".end"))
		wantEnds := runs[nm]
		if nm == interrupted {
			wantEnds--
		}
		if len(st) != runs[nm] || len(en) != wantEnds {
			t.Errorf("%s's task started %d and ended %d times, want %d and %d", nm, len(st), len(en), runs[nm], wantEnds)
			continue
		}
		for i, s := range st {
			sp := span{nm, s, 0}
			switch {
			case nm == interrupted && i == 0:
				sp.end = killedAt.UnixNano()
			case nm == interrupted:
				sp.end = en[i-1]
			default:
				sp.end = en[i]
			}
			spans = append(spans, sp)
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	for i := 1; i < len(spans); i++ {
		a, b := spans[i-1], spans[i]
		if b.node < a.node {
			t.Errorf("%s's task ran after %s's: out of chain order", b.node, a.node)
		}
		if b.start < a.end {
			t.Errorf("%s's task started %v before %s's ended", b.node, time.Duration(a.end-b.start), a.node)
		}
	}
	if ov := readLines(t, filepath.Join(dir, "overlap")); len(ov) > 0 {
		t.Errorf("tasks of %v started while another task's processes were alive", ov)
	}
}

// mxLeftovers lists the processes whose command line contains marker.
func mxLeftovers(marker string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		out = append(out, "pid "+e.Name()+": "+strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))))
	}
	return out
}

// mxCheckNoOrphans: once every node is gone, no task process of the case
// survives (each started a marker `sleep 3600.MARK...` and left it).
func mxCheckNoOrphans(t *testing.T, mark string) {
	t.Helper()
	marker := "3600." + mark
	var left []string
	if poll(2*time.Second, func() bool { left = mxLeftovers(marker); return len(left) == 0 }) {
		return
	}
	t.Errorf("orphaned task processes survive their nodes: %s", strings.Join(left, "; "))
	for _, l := range left {
		pid, _, _ := strings.Cut(strings.TrimPrefix(l, "pid "), ":")
		if n, err := strconv.Atoi(pid); err == nil {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	}
}
