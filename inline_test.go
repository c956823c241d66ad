package chainsync

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A goroutine that runs the tasks of its turn (inline.go) holds their
// ends for one turn. When a task outlasts inlineGrace, what waits is
// handed on: the ends held so far to the loop goroutine, the tasks not
// begun to goroutines of their own, the turn's lines written; the long
// task goes on where it is (the draft's "Phase 3 -- Execution Trigger
// Propagation": a quick task's COMPLETE must not wait for a long one).
func TestSeatHandsOnWhatWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		p := newSeatProbe(release, "long")
		lp := p.lp
		var turns atomic.Int32
		lp.turnFn = func() { turns.Add(1); lp.turn() }
		lp.reactFn = func(*input) {}
		lp.endFn = func() {}

		s := &seat{}
		lp.seatTasks(s, []taskStart{{round: "quick", slot: true}, {round: "long", slot: true}, {round: "later", slot: true}}, nil)
		start := time.Now()
		done := make(chan struct{})
		go func() {
			lp.drain(s)
			close(done)
		}()
		<-lp.wake // handOn: the loop goroutine is to take the quick task's end
		if waited := time.Since(start); waited != inlineGrace {
			t.Errorf("handed on after %v, want inlineGrace (%v)", waited, inlineGrace)
		}
		if ran, launched := p.lists(); !slices.Equal(ran, []string{"quick", "long"}) || !slices.Equal(launched, []string{"later"}) {
			t.Errorf("ran inline %v, handed on %v; want [quick long] and [later]", ran, launched)
		}
		if !lp.waiting() {
			t.Errorf("the quick task's end is not in the inbox for the loop goroutine")
		}
		if k := turns.Load(); k != 0 {
			t.Errorf("%d turns before the long task ended, want none (the loop goroutine takes the ends)", k)
		}
		close(release)
		<-done
		if ran, _ := p.lists(); !slices.Equal(ran, []string{"quick", "long"}) {
			t.Errorf("ran inline %v after the hand-on, want only [quick long]", ran)
		}
	})
}

// seatProbe is a loop whose tasks record where they ran: on the seat
// (ran) or handed to goroutines of their own (launched); the tasks named
// long block until release sends or closes.
type seatProbe struct {
	lp            *loop
	mu            sync.Mutex // ran and launched
	ran, launched []string
}

func newSeatProbe(release <-chan struct{}, long ...string) *seatProbe {
	p := &seatProbe{lp: newLoop(&Config{Name: "N"})}
	p.lp.inlineFn = func(ts taskStart) (taskStart, bool) {
		p.mu.Lock()
		p.ran = append(p.ran, ts.round)
		p.mu.Unlock()
		if slices.Contains(long, ts.round) {
			<-release
		}
		p.lp.hold(input{kind: inTaskEnd, round: ts.round})
		return taskStart{}, false
	}
	p.lp.launchFn = func(ts taskStart) bool {
		p.mu.Lock()
		p.launched = append(p.launched, ts.round)
		p.mu.Unlock()
		return true
	}
	return p
}

// lists returns copies of ran and launched.
func (p *seatProbe) lists() (ran, launched []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ran), slices.Clone(p.launched)
}

// Quick tasks on their goroutine end in one turn: their ends are held
// until the last has run, then taken together (one turn, one write per
// link), and a turn's lines wait for them.
func TestSeatQuickTasksEndInOneTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lp := newLoop(&Config{Name: "N"})
		lp.inlineFn = func(ts taskStart) (taskStart, bool) {
			lp.hold(input{kind: inTaskEnd, round: ts.round})
			return taskStart{}, false
		}
		lp.launchFn = func(ts taskStart) bool {
			t.Errorf("task %s handed to a goroutine of its own", ts.round)
			return true
		}
		var turns [][]string
		lp.reactFn = func(in *input) { turns[len(turns)-1] = append(turns[len(turns)-1], in.round) }
		lp.turnFn = func() { turns = append(turns, nil); lp.turn() }
		lp.endFn = func() {}
		s := &seat{}
		lp.seatTasks(s, []taskStart{{round: "a", slot: true}, {round: "b", slot: true}, {round: "c", slot: true}}, nil)
		lp.drain(s)
		if len(turns) != 1 || !slices.Equal(turns[0], []string{"a", "b", "c"}) {
			t.Errorf("turns took %v, want one turn with [a b c]", turns)
		}
	})
}

// A node whose tasks on seats have all been quick (quickStreak of them,
// each within quickTaskTime) runs its batches without the seat's timer
// (arming it wakes an idle thread of the process): its watch looks at
// them every watchPeriod instead. A task that then runs long has what
// waits handed on at the watch's look, and the node bounds every batch
// with the timer again (the draft's "Phase 3 -- Execution Trigger
// Propagation": a quick task's COMPLETE must not wait for a long one).
func TestSeatWatchedAfterQuickStreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		p := newSeatProbe(release, "long", "long2")
		lp := p.lp
		defer lp.end()
		lp.turnFn = lp.turn
		lp.reactFn = func(*input) {}
		lp.endFn = func() {}
		batch := func(s *seat, rounds ...string) {
			var ts []taskStart
			for _, r := range rounds {
				ts = append(ts, taskStart{round: r, slot: true})
			}
			lp.seatTasks(s, ts, nil)
		}

		// The streak: quickStreak quick tasks, on a seat with its timer.
		s := &seat{}
		for i := range quickStreak {
			batch(s, "q"+string(rune('a'+i%26)))
			lp.drain(s)
		}
		if q := lp.watch.quick.Load(); q != quickStreak {
			t.Fatalf("%d quick tasks counted after %d, want %d", q, quickStreak, quickStreak)
		}
		// Now a seat's quick batch arms no timer of its own.
		s2 := &seat{}
		batch(s2, "quick0")
		lp.drain(s2)
		if s2.timer != nil {
			t.Errorf("a seat armed its timer after a streak of %d quick tasks", quickStreak)
		}

		// A long task after the streak: handed on at the watch's look.
		batch(s2, "quick", "long", "later")
		start := time.Now()
		done := make(chan struct{})
		go func() {
			lp.drain(s2)
			close(done)
		}()
		<-lp.wake
		if waited := time.Since(start); waited > watchPeriod || waited < inlineGrace {
			t.Errorf("handed on after %v, want within the watch's period (%v)", waited, watchPeriod)
		}
		if ran, launched := p.lists(); !slices.Contains(launched, "later") || slices.Contains(ran, "later") {
			t.Errorf("ran inline %v, handed on %v; want later handed on", ran, launched)
		}
		lp.watch.mu.Lock()
		if k := len(lp.watch.running); k != 0 {
			t.Errorf("%d seats still watched after the hand-on, want none (the seat handed on is done with)", k)
		}
		lp.watch.mu.Unlock()
		release <- struct{}{}
		<-done
		if q := lp.watch.quick.Load(); q != 0 {
			t.Errorf("%d quick tasks counted after a long one, want 0", q)
		}

		// The next batch is bounded by the seat's timer again.
		for len(lp.wake) > 0 {
			<-lp.wake
		}
		batch(s2, "long2", "after")
		start = time.Now()
		done = make(chan struct{})
		go func() {
			lp.drain(s2)
			close(done)
		}()
		<-lp.wake
		if waited := time.Since(start); waited != inlineGrace {
			t.Errorf("after a long task, handed on after %v, want inlineGrace (%v)", waited, inlineGrace)
		}
		close(release)
		<-done
	})
}

// The watch looks at least four times per heartbeat or phase timeout, so
// that a reader held up in a task after a streak of quick ones cannot
// make either fire; a node whose timeouts would have it look more often
// than every 5 ms arms the seat's timer for every batch, streak or not.
// docs/DESIGN.md "Heartbeats".
func TestWatchPeriodFollowsTimeouts(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{}, watchPeriod},
		{Config{Heartbeat: time.Second, PhaseTimeout: time.Minute}, watchPeriod},
		{Config{Heartbeat: 100 * time.Millisecond}, 25 * time.Millisecond},
		{Config{Heartbeat: time.Second, PhaseTimeout: 40 * time.Millisecond}, 10 * time.Millisecond},
		{Config{Heartbeat: 10 * time.Millisecond}, 0},
	} {
		if got := watchPeriodFor(&c.cfg); got != c.want {
			t.Errorf("Heartbeat %v, PhaseTimeout %v: the watch looks every %v, want %v", c.cfg.Heartbeat, c.cfg.PhaseTimeout, got, c.want)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		p := newSeatProbe(nil)
		lp := p.lp
		lp.watch.period = watchPeriodFor(&Config{Heartbeat: 10 * time.Millisecond})
		lp.turnFn = lp.turn
		lp.reactFn = func(*input) {}
		lp.endFn = func() {}
		lp.watch.quick.Store(quickStreak)
		s := &seat{}
		lp.seatTasks(s, []taskStart{{round: "a", slot: true}}, nil)
		lp.drain(s)
		if s.timer == nil {
			t.Error("a node with a 10 ms heartbeat ran a batch without the seat's timer")
		}
	})
}
