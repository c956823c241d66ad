package chainsync

import (
	"sync"
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
// On a node with a restart grace (Config.RestartGrace) the turn's lines
// leave before its tasks begin: the task may be the process's restart,
// and its GRACE lines must be out first.

// inlineGrace is how long a goroutine runs the tasks of its turns before
// it hands on what waits for it.
const inlineGrace = 200 * time.Microsecond

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
		if s.timer == nil {
			s.timer = time.AfterFunc(inlineGrace, func() { safely(s.handOn) })
		} else {
			s.timer.Reset(inlineGrace)
		}
		s.mu.Unlock()
		for {
			t, ok := s.next()
			if !ok {
				break
			}
			if t, ok = lp.inlineFn(t); ok {
				s.push(t) // it waited for the slot t had
			}
		}
		s.mu.Lock()
		s.running = false
		handed := s.handed
		clear(s.tasks)
		s.tasks, s.i = s.tasks[:0], 0
		s.mu.Unlock()
		s.timer.Stop()
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
