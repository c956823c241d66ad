package chainsync

import (
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// The loop: one turn at a time owns the protocol machine and everything
// the driver keeps beside it (docs/DESIGN.md, "The shape of the code").
// A turn runs on whichever goroutine holds the loop's token: the loop
// goroutine (run), or the node's own goroutine that posted an input and
// found no turn running (post). Every input reaches it as a typed input
// in the loop's inbox (loop.queue), in the order posted (inKind lists
// them all, react is the one switch over them): the lines a reader
// read (all the complete lines of one read, in one input), a connection
// accepted, secured or lost, a task's end, an exit-wave delivery, and the
// API's calls (Ready, Snapshot, steering, Close), which wait for the
// loop's reply; the clock's tick comes on its own channel. (Wait takes no
// turn: it reads the round book under the book's own lock, rounds.go.) Only the
// stepper (step.go) steps the machine, and a step never runs inside
// another step's actions: a reaction to an action (a fault's notice, the
// policy's aborts) is a follow-up input (later), stepped after them, in
// the same turn.
//
// A turn takes every event waiting (up to maxTurn), then carries out what
// their steps asked for, in this order:
//
//  1. persist: the store writes the whole turn's journal records (and the
//     steering file, if a request changed it) and syncs them, one write
//     and one fsync however many events made them
//     (group commit: what arrives during the fsync waits for the next
//     turn and shares its fsync);
//  2. act: lines go to their links' outboxes, results are released to
//     Wait, requests are answered, tasks start (quick tasks run here, on
//     the loop, and their ends are stepped into the same turn);
//  3. flush: after the turn, off the token, each link's lines leave in
//     one write (runHeld); if the turn started tasks, the goroutine that
//     ran it runs them first, and their lines leave with the turn's
//     (inline.go).
//
// So every record a step made is on disk before any line that step sends
// leaves, any task it starts runs and any result it reports is seen. The
// loop never blocks on a socket: a write the socket does not take at once
// goes to the link's writer goroutine, and every close of a connection
// (a TLS close writes) happens on a goroutine of its own.

// maxTurn bounds the events taken in one turn, so that a flood on one link
// cannot hold the others' lines back for long.
const maxTurn = 256

// inboxSize bounds the loop's inbox (loop.queue): a reader that finds
// this many inputs waiting waits for the token and takes them itself
// (backpressure, not loss).
const inboxSize = 256

// effKind is the kind of one queued effect.
type effKind uint8

const (
	effSend   effKind = iota + 1 // queue the line buf[off:end] on l
	effTask                      // start task, after the turn (task.go, inline.go)
	effQuick                     // run round's quick task on the loop
	effDone                      // release ri's result to Wait
	effAnswer                    // answer a request (steer.go) once its records are on disk
	effShut                      // close l, after its last words (lastWords)
)

// effect is one thing a step asked for, carried out once the turn's
// records are on disk.
type effect struct {
	kind     effKind
	exit     bool // effSend: the round's final exit-wave COMPLETE
	l        *link
	off, end int
	round    string
	task     taskStart
	ri       *roundInfo
	reply    chan reply // effAnswer
	err      error      // effAnswer
	id       string     // effAnswer
}

// batch is what the steps of a turn queued.
type batch struct {
	effs   []effect
	buf    []byte            // the encoded lines of effSend
	recs   []protocol.Record // journal records
	faults []journal.Fault   // journal fault records, written before recs
	steer  []byte            // the steering file's new content (nil: unchanged)
}

func (b *batch) empty() bool {
	return len(b.effs) == 0 && len(b.recs) == 0 && len(b.faults) == 0 && b.steer == nil
}

func (b *batch) reset() {
	clear(b.effs)
	b.effs, b.buf, b.recs, b.faults, b.steer = b.effs[:0], b.buf[:0], b.recs[:0], b.faults[:0], nil
}

// inKind is what one input to the loop is: the list of everything a node
// reacts to, each handled by one case of react.
type inKind uint8

const (
	// From a link's reader, writer and the goroutines that connect it.
	inLines       inKind = iota + 1 // l read msg, or msgs: all the complete lines of one read
	inHello                         // l's identity line; flag: it was l's first line (identity.go)
	inAlive                         // a HEARTBEAT was the first line of the pending predecessor l (duplicate.go)
	inReadEnd                       // l's stream ended with err
	inWriteFailed                   // a write on l failed with err
	inDelivered                     // the final exit-wave COMPLETE of rounds was written; flag: of round alone
	inAccepted                      // the acceptor took l: admit it (reply: ok, gone)
	inStray                         // the acceptor refused l for err (prevhost.go)
	inWatch                         // l's TLS handshake begins (reply: the conn to run it on)
	inSecured                       // l's TLS handshake ended with conn, err (reply: ok)
	inServeEnd                      // the goroutine serving the pending l ended
	inTrack                         // l's reader tracks its first bytes (reply: its pending record)
	inKeepIdle                      // the pending l sent nothing yet: wait on? (reply: ok)
	inPendingEnd                    // the pending l's stream ended with err, before any line
	inDialed                        // the dialer connected l to the successor (reply: ok)
	inViolation                     // trace a violation found off the loop
	inCheckHeld                     // time to decide on the held predecessor connection
	// From tasks.
	inTaskStarted // round's task took its slot
	inTaskEnd     // round's task ended with err; flag: it timed out
	inUndoEnd     // round's undo ended with err; flag: it timed out
	// From the API (reply when it is done).
	inInit     // Start: steering state, the first tick, the journal's rounds
	inReady    // round is locally ready
	inUnwait   // a Wait on ri gave up (its ctx ended)
	inSnapshot // what the node is doing (reply: snap)
	inPredUp   // is a predecessor link up? (reply: ok)
	inSteer    // a steering request (steer.go), answered once carried out
	inPaused   // is the chain paused here? (reply: ok, ch)
	inClose    // Close begins: no more new work; links shut
	inStopAll  // Close: every unfinished round ends stopped (reply: snap)
	inKeep     // write the receipts held for round to ReceiptsDir now (receipts.go)
	inProbe    // run fn on the loop (this package's tests)
	// Follow-ups: queued by the loop itself (later), taken after the
	// current input's actions, in the same turn.
	inAnnounce      // step the notice of fault (flag: halting), with cause
	inAnnounceSteer // step this node's steering line if it changed (steer.go)
	inRetried       // round was reopened by a retry (steer.go)
	inReport        // step note, a notice this node sends (liveness.go)
	inStepLater     // run fn, a step after the actions of the one before (receipts.go)
)

// input is one thing for the loop to react to; which fields it carries
// depends on kind.
type input struct {
	kind   inKind
	flag   bool
	l      *link
	msg    protocol.Message   // inLines: the one line read (msgs nil)
	msgs   []protocol.Message // inLines: the lines of one read, if more than one
	batch  *msgBatch          // inLines: msgs's holder (pooled), given back once they are acted on
	round  string
	rounds []string
	err    error
	hello  *wire.Hello
	conn   net.Conn
	ri     *roundInfo
	trace  *TraceEvent
	fault  *Fault
	cause  *FaultError
	note   *protocol.Notice
	steer  *steerReq
	fn     func()
	ev     *protocol.Event // inStepLater: the event to step
	then   func(error)     // inStepLater: told the step's error
	reply  chan reply
}

// reply is the loop's answer to an input that asked for one.
type reply struct {
	ok   bool
	err  error
	conn net.Conn
	gone <-chan struct{}
	pc   *pendingConn
	snap *Snapshot
	ch   <-chan struct{}
	id   string
}

// loop is the node's loop seen from outside and from its parts: its inbox,
// the channels that stop it and tell it ended, the guard that lets a
// callback's Snapshot read the node, and the turn: what the turn's steps
// queued (cur, spare), the follow-ups (later), the links to flush and the
// tasks to start at its end.
type loop struct {
	// The inbox: every input in the order it was posted, taken by
	// whichever goroutine holds the token. over (qmu) says the loop has
	// ended: nothing more is taken.
	qmu   sync.Mutex
	queue []input
	over  bool
	// token is held by the one goroutine that runs the node's turns at a
	// time: the loop goroutine (run), or the node's own goroutine that
	// posted an input and found the token free (post). wake tells the
	// loop goroutine that an input waits.
	token    sync.Mutex
	wake     chan struct{}
	turnFn   func() // a turn (turn), run with the token held
	callerFn func() // the loop goroutine's turn (callerTurn)
	// reactFn and endFn are the driver's react and endTurn: what a turn
	// does with each input it takes, and how it ends.
	reactFn  func(*input)
	endFn    func()
	stop     chan struct{}
	loopDone chan struct{}
	// loopG is the id of the goroutine holding the token, known only to
	// this package's tests (loopCheck).
	loopG atomic.Uint64
	// inCallback is set while the loop is in a Config.Trace or OnHold
	// callback, which may call Snapshot: the loop is parked in it, and
	// cbMu holds it there until such a Snapshot has read the node.
	inCallback atomic.Bool
	cbMu       sync.Mutex
	// replies are ask's reply channels, reused: each is answered once
	// per ask (a node's own: a channel made in a testing/synctest bubble
	// stays in it).
	replies sync.Pool

	// The turn (the token holder's only).
	taken    []input     // the inputs the turn took from the inbox
	closed   bool        // Close has begun: nothing new starts
	cur      *batch      // what the turn's steps queued
	spare    *batch      // the other batch, reused
	queued   []input     // follow-ups to react to later in this turn
	flushing []*link     // links with lines queued in this turn
	quickRun []string    // scratch for runQuick
	now      time.Time   // the turn's clock reading, taken on first use (turnTime)
	starting []taskStart // tasks to start at the end of the turn
	// launching are the tasks the turn starts, run by the goroutine that
	// ran it once the turn is over (its seat: inlineFn, inline.go), or
	// else launched on goroutines of their own once its lines are
	// written (runHeld, launchFn).
	launching []taskStart
	launchFn  func(taskStart) bool
	inlineFn  func(taskStart) (taskStart, bool)

	// linesFirst: a turn's lines leave before the tasks it started run on
	// the goroutine that ran it (Config.RestartGrace: the task may end
	// the process).
	linesFirst bool

	// watch looks at the seats that run tasks without their timer
	// (inline.go).
	watch watch

	name    string           // Config.Name, for the trace and loopCheck
	traceFn func(TraceEvent) // Config.Trace
	// observe, if set, sees every trace event first, with its time: the
	// receipts part takes the task's and the undo's times from them.
	observe func(*TraceEvent)
}

func newLoop(cfg *Config) *loop {
	return &loop{wake: make(chan struct{}, 1), stop: make(chan struct{}), loopDone: make(chan struct{}),
		cur: new(batch), spare: new(batch), name: cfg.Name, traceFn: cfg.Trace, linesFirst: cfg.RestartGrace > 0,
		watch: watch{period: watchPeriodFor(cfg)}}
}

// post hands in to the loop from one of the node's own goroutines (a
// reader, a writer, a task's goroutine, the acceptor): if no turn is running
// it runs one right here, on the poster's goroutine, with the token held,
// which saves waking the loop goroutine for it; else the loop goroutine
// is told. false if the loop has ended (the node is closed). Never
// called on the loop itself (see later).
func (lp *loop) post(in input) bool { return lp.put(in, true, nil) }

// postWith is post for a link's reader or a task's goroutine, which
// lends its seat to the turn: the tasks the turn starts run on it
// (inline.go).
func (lp *loop) postWith(in input, s *seat) bool { return lp.put(in, true, s) }

// submit hands in to the loop goroutine: for the API's callers, whose
// goroutines are the application's and run no turn.
func (lp *loop) submit(in input) bool { return lp.put(in, false, nil) }

// put queues in; with here it runs a turn on the caller's goroutine if
// the token is free (or, the inbox being full, once it is).
func (lp *loop) put(in input, here bool, s *seat) bool {
	lp.qmu.Lock()
	if lp.over {
		lp.qmu.Unlock()
		return false
	}
	lp.queue = append(lp.queue, in)
	full := len(lp.queue) >= inboxSize
	lp.qmu.Unlock()
	switch {
	case !here:
	case full:
		lp.token.Lock() // backpressure: wait for the turn running now
		lp.runHeldBy(lp.turnFn, s)
		lp.drain(s)
		return true
	case lp.token.TryLock():
		lp.runHeldBy(lp.turnFn, s)
		lp.drain(s)
		return true
	}
	// The loop goroutine takes it: after the turn running now, if any
	// (whoever holds the token drains the inbox in order, so in never
	// overtakes an input posted before it).
	lp.wakeLoop()
	return true
}

// take moves up to k waiting inputs from the inbox to dst. Token
// holder only.
func (lp *loop) take(dst []input, k int) []input {
	lp.qmu.Lock()
	k = min(k, len(lp.queue))
	dst = append(dst, lp.queue[:k]...)
	n := copy(lp.queue, lp.queue[k:])
	clear(lp.queue[n:])
	lp.queue = lp.queue[:n]
	lp.qmu.Unlock()
	return dst
}

// runHeld runs f with the token, which the caller has just taken, and
// releases it; nothing if the loop has ended. A panic in f ends the
// loop (Close still releases everything) and goes on to the goroutine's
// panic handler.
func (lp *loop) runHeld(f func()) { lp.runHeldBy(f, nil) }

// runHeldBy is runHeld on a goroutine that lends its seat s to the turn
// (a link's reader, a task's goroutine, the loop goroutine; nil: none):
// the tasks the turn starts run on it once the turn is over, and the
// turn's lines leave with those of the tasks' ends (inline.go).
func (lp *loop) runHeldBy(f func(), s *seat) {
	ok := false
	var flush [4]*link
	var launch [2]taskStart
	out, tasks := flush[:0], launch[:0]
	defer func() {
		if !ok {
			lp.end()
		} else {
			tasks = append(tasks, lp.launching...)
		}
		clear(lp.launching)
		lp.launching = lp.launching[:0]
		out = append(out, lp.flushing...)
		clear(lp.flushing)
		lp.flushing = lp.flushing[:0]
		lp.token.Unlock()
		// A turn takes at most maxTurn inputs: what is left, the loop
		// goroutine takes (its wake-ups may have been folded into one).
		if lp.waiting() {
			lp.wakeLoop()
		}
		// The tasks the turn started run on this goroutine (inline.go),
		// first: the turn's lines leave with those of their ends. Not on
		// a node whose task may be its restart: its GRACE lines must be
		// out before the task begins.
		seated := s != nil && len(tasks) > 0
		if seated && !lp.linesFirst {
			lp.seatTasks(s, tasks, out)
			return
		}
		// The turn's lines leave after it, off the token: no socket I/O
		// under it. Each link's outbox keeps its lines in order whoever
		// writes them, and a write the socket does not take at once goes
		// to the link's writer.
		for _, l := range out {
			l.flush()
		}
		if seated {
			lp.seatTasks(s, tasks, nil)
			return
		}
		// Else the tasks it started run on goroutines of their own, which
		// wake once the lines are out.
		for _, t := range tasks {
			lp.launchFn(t)
		}
	}()
	lp.qmu.Lock()
	over := lp.over
	lp.qmu.Unlock()
	if !over {
		lp.now = time.Time{}
		if p := loopCheck.Load(); p != nil {
			lp.loopG.Store(p.goid())
		}
		f()
	}
	ok = true
}

// hold queues in without a turn and without waking the loop goroutine:
// the start or end of a task that runs on the goroutine whose turn
// started it, which has them taken once it is done with its tasks, or
// hands them to the loop goroutine (inline.go). false if the loop has
// ended.
func (lp *loop) hold(in input) bool {
	lp.qmu.Lock()
	defer lp.qmu.Unlock()
	if lp.over {
		return false
	}
	lp.queue = append(lp.queue, in)
	return true
}

// turnTime is the time of the turn: one clock reading for all that
// asks in one turn (a round's state changes, for Snapshot). Token holder
// only.
func (lp *loop) turnTime() time.Time {
	if lp.now.IsZero() {
		lp.now = time.Now()
	}
	return lp.now
}

// end ends the loop: nothing more is taken, and loopDone is closed.
// Token holder only.
func (lp *loop) end() {
	lp.qmu.Lock()
	defer lp.qmu.Unlock()
	if !lp.over {
		lp.over = true
		close(lp.loopDone)
		lp.watch.stop()
	}
}

// ask hands in to the loop goroutine and waits for its reply; false if
// the loop has ended without answering.
func (lp *loop) ask(in input) (reply, bool) {
	ch, _ := lp.replies.Get().(chan reply)
	if ch == nil {
		ch = make(chan reply, 1)
	}
	in.reply = ch
	if !lp.submit(in) {
		lp.replies.Put(ch) // never handed in
		return reply{}, false
	}
	select {
	case r := <-ch:
		lp.replies.Put(ch) // the loop answers an input once: empty for good
		return r, true
	case <-lp.loopDone:
		// The loop reacted to every input it took before it ended.
		select {
		case r := <-ch:
			lp.replies.Put(ch)
			return r, true
		default:
			return reply{}, false
		}
	}
}

// answer replies to in, if it asked. Loop only.
func (in *input) answer(r reply) {
	if in.reply != nil {
		in.reply <- r
		in.reply = nil
	}
}

// later queues in to be reacted to after the current input, in the same
// turn: for what the loop causes itself (a fault's notice, a write that
// failed while it flushed). Loop only.
func (lp *loop) later(in input) { lp.queued = append(lp.queued, in) }

// run is the loop goroutine: it runs a turn when told an input waits,
// and the clock's ticks. It ends when its stop channel is closed, after
// the last turn, or when a turn elsewhere ended the loop (a panic).
func (d *driver) run() {
	lp := d.lp
	s := &seat{takeOver: func() bool {
		goSafe(d.run)
		return true
	}}
	tick := d.clock.C()
	tickFn := func() { // the turn on the clock's tick
		d.onTick()
		lp.turn()
	}
	for {
		select {
		case <-lp.wake:
			lp.token.Lock()
			lp.runHeldBy(lp.callerFn, s)
		case <-tick:
			lp.token.Lock()
			lp.runHeldBy(tickFn, s)
		case <-lp.stop:
			defer d.clock.stop()
			lp.token.Lock()
			lp.runHeld(func() {
				d.endTurn()
				lp.end()
			})
			return
		case <-lp.loopDone:
			d.clock.stop()
			return // a turn ended it (a panic)
		}
		if lp.drain(s); s.handedOn() {
			return // a task outlasted inlineGrace: a new loop goroutine took over
		}
	}
}

// turn takes the inputs waiting (up to maxTurn), reacts to each, and
// carries out what their steps asked for (the driver's endTurn). Token
// holder only.
func (lp *loop) turn() {
	lp.takeAll()
	lp.endFn()
}

// maxYields bounds how often one turn of the loop goroutine lets the
// callers it answered go on before it ends (callerTurn).
const maxYields = 8

// callerTurn is the loop goroutine's turn. Once it has answered an API
// call (Ready, a steering request), it lets the caller go on before it
// writes anything: a caller that calls again at once (Ready for the
// next round, as an application that keeps rounds in flight does) posts
// into this same turn, and the lines of both leave in one write per link
// instead of one each. A yield that brings no input ends the turn, so a
// lone call waits for one yield, no more. Token holder only.
func (lp *loop) callerTurn() {
	for y := 0; ; y++ {
		if !lp.takeAll() || y == maxYields {
			break
		}
		runtime.Gosched()
		if !lp.waiting() {
			break
		}
	}
	lp.endFn()
}

// takeAll takes the inputs waiting (up to maxTurn) and reacts to each;
// true if one of them asked for a reply. Token holder only.
func (lp *loop) takeAll() (answered bool) {
	for n := 0; n < maxTurn; {
		lp.taken = lp.take(lp.taken[:0], maxTurn-n)
		if len(lp.taken) == 0 {
			break
		}
		for i := range lp.taken {
			answered = answered || lp.taken[i].reply != nil
			lp.reactFn(&lp.taken[i])
		}
		n += len(lp.taken)
	}
	clear(lp.taken)
	return answered
}

// waiting reports whether an input waits in the inbox of a loop that
// has not ended.
func (lp *loop) waiting() bool {
	lp.qmu.Lock()
	defer lp.qmu.Unlock()
	return len(lp.queue) > 0 && !lp.over
}

// wakeLoop tells the loop goroutine that an input waits (wake-ups fold
// into one).
func (lp *loop) wakeLoop() {
	select {
	case lp.wake <- struct{}{}:
	default:
	}
}

// react is the one place that lists what a node reacts to. Loop only.
func (d *driver) react(in *input) {
	l := in.l
	switch in.kind {
	case inLines:
		if in.msgs == nil {
			d.handle(l, in.msg)
			d.linksDown()
		} else {
			d.handleAll(l, in.msgs)
			in.batch.release()
		}
	case inHello:
		up := d.links.helloArrived(l, *in.hello, in.flag)
		d.linksDown()
		if up {
			d.stepOrLog(protocol.LinkUp(protocol.Pred), "link up", "")
		}
	case inAlive:
		d.links.dup.aliveFirst(l)
		d.linksDown()
	case inReadEnd:
		d.links.readFailed(l, in.err)
		d.linksDown()
	case inWriteFailed:
		d.links.writeFailed(l, in.err)
		d.linksDown()
	case inDelivered:
		if in.flag {
			d.delivered(in.round)
		}
		for _, id := range in.rounds {
			if !d.delivered(id) {
				break
			}
		}
	case inAccepted:
		in.answer(d.links.accepted(l))
	case inStray:
		d.links.stray(in.err) // identity.go
		if d.links.adm.refused(l, in.err) {
			d.lp.trace(TraceEvent{Kind: TraceViolation, Side: protocol.Pred, Peer: l.peer, Err: in.err})
		}
	case inWatch:
		in.answer(reply{conn: d.links.adm.watch(l, l.c)})
	case inSecured:
		in.answer(reply{ok: d.links.secured(l, in.conn, in.err)})
	case inServeEnd:
		d.links.adm.done(l)
	case inTrack:
		in.answer(reply{pc: d.links.adm.conns[l]})
	case inKeepIdle:
		in.answer(reply{ok: d.links.keepIdle(l)})
	case inPendingEnd:
		d.links.adm.endedNow(l, in.err)
	case inDialed:
		ok := d.links.dialed(l)
		if ok {
			// Re-sends what the machine says on the new link.
			d.stepOrLog(protocol.LinkUp(l.side), "link up", "")
		}
		in.answer(reply{ok: ok})
	case inViolation:
		d.lp.trace(*in.trace)
	case inCheckHeld:
		up, held, queue := d.links.dup.checkHeld()
		d.linksDown()
		switch {
		case up:
			d.stepOrLog(protocol.LinkUp(protocol.Pred), "link up", "")
		case held != nil && d.promotePred(held, queue[0]):
			d.linksDown()
			d.handleAll(held, queue[1:])
		default:
			d.linksDown()
		}
	case inTaskStarted:
		d.tasks.taskStarted(in.round)
	case inTaskEnd:
		if !d.lp.closed {
			d.stepOrLog(d.tasks.taskFinished(in.round, in.err, in.flag), "task done", in.round)
		}
	case inUndoEnd:
		if !d.lp.closed {
			d.stepOrLog(d.undo.undoFinished(in.round, in.err, in.flag), "undo done", in.round)
		}
	case inInit:
		d.initLoop()
		in.answer(reply{})
	case inReady:
		in.answer(reply{err: d.ready(in.round)})
	case inUnwait:
		_, known := d.view.State(in.round)
		d.book.gaveUp(in.round, in.ri, known)
	case inSnapshot:
		st := d.snapshot()
		in.answer(reply{snap: &st})
	case inPredUp:
		in.answer(reply{ok: d.links.pred != nil})
	case inSteer:
		d.steerRequest(in)
	case inPaused:
		ok, ch := d.steer.paused()
		in.answer(reply{ok: ok, ch: ch})
	case inClose:
		in.answer(reply{ok: d.closeLoop()})
	case inStopAll:
		d.book.stopAll()
		st := d.snapshot()
		in.answer(reply{snap: &st})
	case inKeep:
		if d.rcpt != nil {
			d.rcpt.keep(in.round)
		}
		in.answer(reply{})
	case inProbe:
		in.fn()
		in.answer(reply{})
	case inAnnounce:
		d.announce(*in.fault, in.flag, in.cause)
	case inAnnounceSteer:
		d.steer.announceSteer()
		_ = d.steerSteps()
	case inRetried:
		d.steer.retriedNow(in.round)
	case inReport:
		d.stepOrLog(protocol.Report(*in.note), "fault-cleared notice", "") // a notice this node sends (liveness.go)
	case inStepLater:
		in.then(d.step(*in.ev, nil)) // a part's event, handed back (receipts.go)
	}
}

// endTurn carries out what the turn's steps queued: persist, act, flush
// (see the top of this file). Quick tasks' ends and the reactions queued
// with later are stepped and carried out too, until nothing is left.
func (d *driver) endTurn() {
	for {
		// A reaction may queue more: taken in order, the slice reused.
		for i := 0; i < len(d.lp.queued); i++ {
			in := d.lp.queued[i]
			d.lp.queued[i] = input{}
			d.react(&in)
		}
		d.lp.queued = d.lp.queued[:0]
		if !d.lp.cur.empty() {
			b := d.lp.cur
			d.lp.cur, d.lp.spare = d.lp.spare, b
			broken := d.st.broken != nil
			if !broken && (len(b.recs) > 0 || len(b.faults) > 0 || b.steer != nil) {
				d.lp.handOff() // what is queued already is on disk: out with it first
				if err := d.store.save(b); err != nil {
					d.journalFailed(err)
					broken = true
				}
			}
			d.carryOut(b, broken)
			b.reset()
			continue
		}
		if len(d.lp.queued) == 0 {
			break
		}
	}
	for i, t := range d.lp.starting {
		if ri := d.book.find(t.round); t.undo == nil && ri != nil && ri.finished() {
			// The round ended in this turn after its task was asked for
			// (the halt policy ended it for a task that failed in the
			// same turn): its task does not run.
			if t.slot {
				d.tasks.give()
			}
			d.lp.starting[i] = taskStart{}
			if infoOn(d.log) {
				d.log.Info("task not started: the round ended before it could start", "round", t.round)
			}
			continue
		}
		// Once Close waits, it does not start (its round ends stopped; a
		// restarted node resumes it).
		d.lp.launching = append(d.lp.launching, t)
		d.lp.starting[i] = taskStart{}
	}
	d.lp.starting = d.lp.starting[:0]
}

// handOff hands the outboxes of the links the turn queued lines on so
// far to their writers, which write them while the turn goes on (it is
// about to sync the journal). Token holder only.
func (lp *loop) handOff() {
	for i, l := range lp.flushing {
		l.kick()
		lp.flushing[i] = nil
	}
	lp.flushing = lp.flushing[:0]
}

// carryOut does b's effects in order. With broken (the journal failed) it
// sends nothing and starts no task: the node acts no more.
func (d *driver) carryOut(b *batch, broken bool) {
	quick := d.lp.quickRun[:0]
	for i := range b.effs {
		e := &b.effs[i]
		switch e.kind {
		case effSend:
			if broken {
				continue
			}
			if !e.l.enqueue(b.buf[e.off:e.end], e.exit, e.round) {
				if !d.lp.closed {
					err := fmt.Errorf("more than %d bytes queued: the peer is not reading", maxOutbox)
					d.log.Warn("closing link (everything unsent is re-sent on reconnect)", "to", e.l.side.String(), "peer", e.l.peer, "err", err)
					d.links.drop(e.l, err)
					d.linksDown()
				}
				continue
			}
			if !slices.Contains(d.lp.flushing, e.l) {
				d.lp.flushing = append(d.lp.flushing, e.l)
			}
		case effTask:
			if broken {
				if e.task.slot {
					d.tasks.give()
				}
				continue
			}
			d.lp.starting = append(d.lp.starting, e.task)
		case effQuick:
			if !broken {
				quick = append(quick, e.round)
			}
		case effDone:
			if say := e.ri.say; say != nil {
				e.ri.say = nil
				say() // the turn's records are on disk: the round is over
			}
			close(e.ri.done)
		case effAnswer:
			if broken && e.err == nil {
				e.err = d.st.broken // what it changed is not on disk
			}
			e.reply <- reply{err: e.err, id: e.id}
		case effShut:
			e.l.shut() // what it was sent in this turn still goes out
		}
	}
	if len(quick) > 0 {
		d.runQuick(quick)
	}
	d.lp.quickRun = quick[:0]
}

// runQuick runs quick tasks (Config.QuickTask) one after another on the
// loop, then steps their ends: the lines those steps send go out with the
// rest of the turn's, in one write per link.
func (d *driver) runQuick(rounds []string) {
	for _, round := range rounds {
		if !d.tasks.take() {
			d.tasks.startTask(round) // a slot is busy: wait for it like any task
			continue
		}
		d.tasks.taskStarted(round)
		err := d.tasks.runHere(round)
		if !d.lp.closed {
			d.stepOrLog(d.tasks.taskFinished(round, err, false), "task done", round)
		}
	}
}

// stepOrLog steps ev, an event the machine must take (a link up, a
// task's or an undo's end); an error it returns is a bug here, logged
// as an internal error about what (and round, if any), unless the
// journal has failed. Loop only.
func (d *driver) stepOrLog(ev protocol.Event, what, round string) {
	if err := d.step(ev, nil); err != nil && d.st.broken == nil {
		if round != "" {
			d.log.Error("internal error: "+what, "round", round, "err", err)
		} else {
			d.log.Error("internal error: "+what, "err", err)
		}
	}
}

// handleAll acts on the lines of one read, up to one that closes l. Loop
// only.
func (d *driver) handleAll(l *link, msgs []protocol.Message) {
	for _, msg := range msgs {
		ok := d.handle(l, msg)
		d.linksDown()
		if !ok {
			return
		}
	}
}

// handle acts on one message; false means l is closed. Loop only.
func (d *driver) handle(l *link, msg protocol.Message) bool {
	if d.lp.closed {
		return false
	}
	cur := d.links.succ
	if l.side == protocol.Pred {
		cur = d.links.pred
		if cur != l && !d.links.adm.pending[l] {
			return false // already dropped
		}
	} else if cur != l {
		return false
	}
	if cur == l {
		if refused, open, fe := d.links.dup.refusedAsDuplicate(l, msg); refused { // duplicate.go
			for _, id := range open {
				if err := d.step(protocol.Abort(id), fe); err != nil && d.st.broken == nil {
					d.log.Error("internal error: abort", "round", id, "err", err)
				}
			}
			d.links.drop(l, fmt.Errorf("refused as a duplicate by the successor"))
			return false
		}
		d.links.received(l, msg)
		if err := d.step(protocol.Recv(l.side, msg), nil); err != nil {
			d.links.violation(l, err)
			return false
		}
		return true
	}
	// A pending predecessor connection. With the extension lines on it is
	// held while the current one is alive (duplicate.go).
	if d.links.identityUnsaid(l, msg) { // identity.go
		return false
	}
	if d.links.dup.holdPred(l, msg) {
		return true
	}
	return d.promotePred(l, msg)
}

// promotePred makes the pending predecessor connection l the current one
// if msg, its first line, is one the machine accepts (protocol.Promote,
// which also re-sends what a new link needs); false if it is not (then l
// is closed). Until then it is logged and traced only as the
// (rate-limited) bad input it may turn out to be: a stranger's junk line
// must not cost a log line and a trace record each. Loop only.
func (d *driver) promotePred(l *link, msg protocol.Message) bool {
	err := d.stepThen(protocol.Promote(l.side, msg), nil, func() {
		d.links.received(l, msg)
		d.links.takePred(l)
	})
	if err != nil {
		d.links.violation(l, fmt.Errorf("first line %s: %w", msg.Cmd, err))
		return false
	}
	return true
}

// linksDown steps the ends of the current links the links dropped in
// the call just returned (links.drop). Loop only.
func (d *driver) linksDown() {
	for len(d.links.downs) > 0 {
		ev := d.links.downs[0]
		d.links.downs = d.links.downs[1:]
		if err := d.step(ev, nil); err != nil && d.st.broken == nil {
			d.log.Error("internal error: link down", "err", err)
		}
	}
}

// line queues line for l as an effect of the turn. Loop only.
func (b *batch) line(l *link, line []byte, exitWave bool, round string) {
	off := len(b.buf)
	b.buf = append(b.buf, line...)
	b.effs = append(b.effs, effect{kind: effSend, l: l, off: off, end: len(b.buf), exit: exitWave, round: round})
}

// lastWords queues line (a fault notice) as the last on l, which the
// caller then drops: it leaves with the turn's other lines, once the
// turn's records are on disk, and l is closed after it. Loop only.
func (lp *loop) lastWords(l *link, line []byte) {
	lp.cur.line(l, line, false, "")
	l.closing = true
	lp.cur.add(effect{kind: effShut, l: l})
}

// add appends an effect to the turn. Loop only.
func (b *batch) add(e effect) { b.effs = append(b.effs, e) }

// loopEnded reports whether the loop has ended (Close, after its last
// turn).
func (lp *loop) loopEnded() bool {
	select {
	case <-lp.loopDone:
		return true
	default:
		return false
	}
}
