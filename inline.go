package chainsync

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Tasks run where their turn ran. The goroutine that ran a turn which
// started tasks (a link's reader, the loop goroutine, or a task's own
// goroutine) runs them itself once the turn is over, off the token, and
// then each task whose slot they pass on (task.go): no goroutine is woken
// for a task. Their starts and ends wait in the inbox (hold) until the
// goroutine is done with them, and are then stepped in one turn, whose
// lines leave in one write per link together with those of the turn that
// started them. A pipelined chain of quick tasks (a stage that hands a
// batch on) thus does one turn and one write for many tasks, as a chain
// of quick tasks on the loop does (Config.QuickTask), and the lines a
// node sends come in batches, which its successor reads in one read.
//
// A task that is not quick must hold nothing back: not the ends of those
// that ran before it, not the tasks started with it (MaxParallelTasks),
// not the turn's lines, not the goroutine's other work (a reader's
// reading: its neighbour's heartbeats, a cancel; the loop goroutine's
// API calls and ticks). Once the goroutine has been in its tasks for
// inlineGrace, a timer hands on what waits (handOn): the ends held so far
// to the loop goroutine, the tasks not begun to goroutines of their own,
// the lines to their links, and the goroutine's other work to a new
// goroutine, which goes on from where the old one was (a reader's
// caller, the dialer or the predecessor's server, goes on after the new
// reader). The old goroutine ends the task it is in, hands its end on,
// and returns.
//
// Arming that timer for each batch costs a process with more than one
// thread a wake-up of an idle one (the timer is the earliest of its
// thread's). So a node whose last quickStreak tasks on seats each ended
// within quickTaskTime runs its batches without it: its watch looks at
// them every watchPeriod while they run, and hands on the work of a
// goroutine whose tasks have run past inlineGrace, as its timer would
// have; the node then arms the timer for each batch again until the
// streak is back. A task that runs long after a streak of quick ones thus
// holds the rest back for up to about watchPeriod, once, or a quarter of
// the node's heartbeat or phase timeout if that is shorter (a node whose
// timeouts are so short that the watch would look every few
// milliseconds keeps the timer for every batch).
//
// On a node with a restart grace (Config.RestartGrace) the turn's lines
// leave before its tasks begin: the task may be the process's restart,
// and its GRACE lines must be out first.

// inlineGrace is how long a goroutine runs the tasks of its turns before
// it hands on what waits for it.
const inlineGrace = 200 * time.Microsecond

// quickStreak, quickTaskTime and watchPeriod: how many tasks in a row
// must have ended within quickTaskTime before a node's seats run without
// their timer, and how often the node's watch then looks at them (at
// most: watchPeriodFor).
const (
	quickStreak   = 64
	quickTaskTime = inlineGrace / 4
	watchPeriod   = 50 * time.Millisecond
)

// minWatchPeriod is the shortest period the watch looks at: below it, a
// node arms the seat's timer for every batch (looking that often would
// cost more).
const minWatchPeriod = 5 * time.Millisecond

// watchPeriodFor is how often the watch of a node with cfg looks:
// watchPeriod, or a quarter of the node's shortest timeout that a reader
// held up in a task could make fire, if that is shorter (Heartbeat,
// whose silence is reported after three of it; PhaseTimeout); 0, the
// timer for every batch, if that is under minWatchPeriod.
func watchPeriodFor(cfg *Config) time.Duration {
	p := watchPeriod
	for _, d := range []time.Duration{cfg.Heartbeat, cfg.PhaseTimeout} {
		if d > 0 {
			p = min(p, d/4)
		}
	}
	if p < minWatchPeriod {
		return 0
	}
	return p
}

// watch is a node's look at its seats that run tasks without their
// timer (quickStreak), and the count of quick tasks that decides it.
type watch struct {
	quick  atomic.Int32  // tasks in a row that ended within quickTaskTime, up to quickStreak
	period time.Duration // how often it looks (watchPeriodFor); 0: never used

	mu      sync.Mutex
	running []*seat     // seats in their tasks without their timer
	timer   *time.Timer // fires after period (look)
	armed   bool        // timer is set
	used    bool        // a seat began since the last look
	stopped bool        // the loop has ended: not armed again
}

// ran counts one task that ran for d on a seat.
func (w *watch) ran(d time.Duration) {
	switch {
	case d >= quickTaskTime:
		w.quick.Store(0)
	case w.quick.Load() < quickStreak:
		w.quick.Add(1)
	}
}

// add lists s, which begins its tasks without its timer, and arms the
// watch if it is not.
func (w *watch) add(s *seat) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running = append(w.running, s)
	w.used = true
	if w.armed || w.stopped {
		return
	}
	w.armed = true
	if w.timer == nil {
		w.timer = time.AfterFunc(w.period, func() { safely(w.look) })
	} else {
		w.timer.Reset(w.period)
	}
}

// remove unlists s, whose tasks are over.
func (w *watch) remove(s *seat) {
	w.mu.Lock()
	if i := slices.Index(w.running, s); i >= 0 {
		last := len(w.running) - 1
		w.running[i] = w.running[last]
		w.running[last] = nil
		w.running = w.running[:last]
	}
	w.mu.Unlock()
}

// look hands on the work of every listed seat whose tasks have run for
// inlineGrace or longer, and arms the watch again while seats run. A seat
// handed on is no longer listed (its goroutine may never come back to
// unlist it: a task that panicked under a handler that lets the process
// live).
func (w *watch) look() {
	now := time.Now()
	var late []*seat
	w.mu.Lock()
	kept := w.running[:0]
	for _, s := range w.running {
		s.mu.Lock()
		switch {
		case !s.running || s.handed:
		case now.Sub(s.since) >= inlineGrace:
			late = append(late, s)
		default:
			kept = append(kept, s)
		}
		s.mu.Unlock()
	}
	clear(w.running[len(kept):])
	w.running = kept
	if w.stopped || !w.used && len(w.running) == 0 {
		w.armed = false
	} else {
		w.used = false
		w.timer.Reset(w.period)
	}
	w.mu.Unlock()
	if len(late) > 0 {
		w.quick.Store(0) // a task ran long: bound every batch again
	}
	for _, s := range late {
		s.handOn()
	}
}

// stop ends the watch with its loop.
func (w *watch) stop() {
	w.mu.Lock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}

// seat is one goroutine's place for the tasks its turns start: a link's
// reader's, the loop goroutine's, or a task's own goroutine's.
type seat struct {
	// takeOver, for a reader or the loop goroutine, starts the goroutine
	// that takes over its work; false once the node's Close waits (the
	// goroutine goes on itself). nil for a task's own goroutine, which
	// has no other work.
	takeOver func() bool

	mu      sync.Mutex
	lp      *loop       // the loop whose turns started the tasks
	running bool        // the goroutine is in its tasks
	handed  bool        // what waited was handed on
	tasks   []taskStart // the tasks to run; the next to begin: tasks[i]
	i       int
	out     []*link     // links whose lines wait for the tasks' ends
	timer   *time.Timer // fires after inlineGrace (handOn)
	timed   bool        // the timer is set for these tasks (else the watch looks)
	since   time.Time   // when the goroutine began these tasks (for the watch)
	took    bool        // a new goroutine took over the reader's or loop's work
}

// seatTasks gives s the tasks a turn on its goroutine started, to run
// once the turn is over (drain). A task that waits for a slot waits in
// the runner's queue; a task that holds one runs on s. The seat's
// goroutine only, off the token.
func (lp *loop) seatTasks(s *seat, tasks []taskStart, out []*link) {
	s.mu.Lock()
	s.lp = lp
	s.out = append(s.out, out...)
	for _, t := range tasks {
		if t.slot {
			s.tasks = append(s.tasks, t)
		}
	}
	s.mu.Unlock()
	for _, t := range tasks {
		if !t.slot {
			lp.launchFn(t)
		}
	}
}

// drain runs s's tasks, and each task their slots pass to, then has
// their starts and ends stepped; again while those steps start tasks.
// It returns when none is left, or once what waited was handed on. The
// seat's goroutine only; s may be nil.
func (lp *loop) drain(s *seat) {
	if s == nil {
		return
	}
	defer s.flush()
	for {
		s.mu.Lock()
		if s.i == len(s.tasks) {
			s.mu.Unlock()
			return
		}
		s.running, s.handed = true, false
		s.timed = lp.watch.period == 0 || lp.watch.quick.Load() < quickStreak
		switch {
		case !s.timed:
			s.since = time.Now()
		case s.timer == nil:
			s.timer = time.AfterFunc(inlineGrace, func() { safely(s.handOn) })
		default:
			s.timer.Reset(inlineGrace)
		}
		timed := s.timed
		s.mu.Unlock()
		if !timed {
			lp.watch.add(s)
		}
		for {
			t, ok := s.next()
			if !ok {
				break
			}
			began := time.Now()
			t, ok = lp.inlineFn(t)
			lp.watch.ran(time.Since(began))
			if ok {
				s.push(t) // it waited for the slot t had
			}
		}
		s.mu.Lock()
		s.running = false
		handed := s.handed
		clear(s.tasks)
		s.tasks, s.i = s.tasks[:0], 0
		s.mu.Unlock()
		if timed {
			s.timer.Stop()
		} else {
			lp.watch.remove(s)
		}
		if handed || !lp.token.TryLock() {
			// The loop goroutine takes what was held (and is the one to
			// start what their steps start).
			lp.wakeLoop()
			return
		}
		lp.runHeldBy(lp.turnFn, s)
	}
}

// flush writes the lines that waited for the tasks. The seat's goroutine
// and handOn may flush at once: each writes the links it took, and the
// list is reused only if no other was begun meanwhile.
func (s *seat) flush() {
	s.mu.Lock()
	out := s.out
	s.out = nil
	s.mu.Unlock()
	for _, l := range out {
		l.flush()
	}
	clear(out)
	s.mu.Lock()
	if s.out == nil {
		s.out = out[:0]
	}
	s.mu.Unlock()
}

// next is the next task to run, if the goroutine still runs them.
func (s *seat) next() (taskStart, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handed || s.i == len(s.tasks) {
		return taskStart{}, false
	}
	s.i++
	return s.tasks[s.i-1], true
}

// push adds t, a task that waited for a slot and now holds one, to the
// tasks the goroutine runs; once what waited was handed on, it goes to a
// goroutine of its own instead.
func (s *seat) push(t taskStart) {
	s.mu.Lock()
	if !s.handed {
		s.tasks = append(s.tasks, t)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.lp.launchFn(t)
}

// handOn hands on what waits once the goroutine has been in its tasks for
// inlineGrace: the ends held so far to the loop goroutine, the tasks not
// begun to goroutines of their own, the lines to their links, and the
// goroutine's other work to a new goroutine.
func (s *seat) handOn() {
	s.mu.Lock()
	if !s.running || s.handed {
		s.mu.Unlock()
		return
	}
	s.handed = true
	rest, lp := s.tasks[s.i:], s.lp
	s.tasks, s.i = nil, 0
	// Decided with handed, so that the goroutine, once out of its task,
	// knows whether to go on (handedOn): never two readers of a link.
	s.took = s.takeOver != nil && s.takeOver()
	s.mu.Unlock()
	for _, t := range rest {
		lp.launchFn(t)
	}
	lp.wakeLoop()
	s.flush()
}

// handedOn reports whether a new goroutine took over the work of the
// seat's goroutine, which then ends. The seat's goroutine only, between
// its turns.
func (s *seat) handedOn() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.took
}
