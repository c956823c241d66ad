package chainsync

import (
	"fmt"
	"net"
	"slices"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// The loop: one goroutine per node owns the protocol machine and
// everything the driver keeps beside it (docs/DESIGN.md, "The shape of
// the code"). Every input reaches it as a typed input on n.in (inKind
// lists them all, react is the one switch over them): the lines a reader
// read (all the complete lines of one read, in one input), a connection
// accepted, secured or lost, a task's end, an exit-wave delivery, and the
// API's calls (Ready, Wait, Snapshot, steering, Close), which wait for
// the loop's reply; the clock's tick comes on its own channel. Only the
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
//  3. flush: each link's lines leave in one write.
//
// So every record a step made is on disk before any line that step sends
// leaves, any task it starts runs and any result it reports is seen. The
// loop never blocks on a socket: a write the socket does not take at once
// goes to the link's writer goroutine, and every close of a connection
// (a TLS close writes) happens on a goroutine of its own.

// maxTurn bounds the events taken in one turn, so that a flood on one link
// cannot hold the others' lines back for long.
const maxTurn = 256

// inboxSize is the capacity of n.in: a reader that is this far ahead of
// the loop waits for it (backpressure, not loss).
const inboxSize = 256

// effKind is the kind of one queued effect.
type effKind uint8

const (
	effSend   effKind = iota + 1 // queue the line buf[off:end] on l
	effTask                      // start task on a task worker (task.go)
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
	inLines       inKind = iota + 1 // l read msgs: all the complete lines of one read
	inHello                         // l's identity line; flag: it was l's first line (identity.go)
	inAlive                         // a HEARTBEAT was the first line of the pending predecessor l (duplicate.go)
	inReadEnd                       // l's stream ended with err
	inWriteFailed                   // a write on l failed with err
	inDelivered                     // the final exit-wave COMPLETE of rounds was written
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
	inWait     // a Wait on round begins (reply: its record)
	inUnwait   // a Wait on ri ended; flag: it gave up (ctx)
	inSnapshot // what the node is doing (reply: snap)
	inPredUp   // is a predecessor link up? (reply: ok)
	inSteer    // a steering request (steer.go), answered once carried out
	inPaused   // is the chain paused here? (reply: ok, ch)
	inClose    // Close begins: no more new work; links shut
	inStopAll  // Close: every unfinished round ends stopped (reply: snap)
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
	msgs   []protocol.Message
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
	reply  chan reply
}

// reply is the loop's answer to an input that asked for one.
type reply struct {
	ok   bool
	err  error
	ri   *roundInfo
	conn net.Conn
	gone <-chan struct{}
	pc   *pendingConn
	snap *Snapshot
	ch   <-chan struct{}
	id   string
}

// post hands in to the loop; false if the loop has ended (the node is
// closed). Never called on the loop itself (see later).
func (n *Node) post(in input) bool {
	select {
	case n.in <- in:
		return true
	case <-n.loopDone:
		return false
	}
}

// ask hands in to the loop and waits for its reply; false if the loop
// has ended without answering.
func (n *Node) ask(in input) (reply, bool) {
	in.reply = make(chan reply, 1)
	if !n.post(in) {
		return reply{}, false
	}
	select {
	case r := <-in.reply:
		return r, true
	case <-n.loopDone:
		// The loop reacted to every input it took before it ended.
		select {
		case r := <-in.reply:
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
func (n *Node) later(in input) { n.queued = append(n.queued, in) }

// run is the loop. It ends when n.stop is closed, after the last turn.
func (n *Node) run() {
	defer close(n.loopDone)
	defer n.clock.stop()
	if p := loopCheck.Load(); p != nil {
		n.loopG.Store(p.goid())
	}
	tick := n.clock.C()
	for {
		select {
		case in := <-n.in:
			n.react(&in)
		case <-tick:
			n.onTick()
		case <-n.stop:
			n.endTurn()
			return
		}
		// Everything that is waiting joins this turn.
		for k := 1; k < maxTurn; k++ {
			select {
			case in := <-n.in:
				n.react(&in)
				continue
			default:
			}
			break
		}
		n.endTurn()
	}
}

// react is the one place that lists what a node reacts to. Loop only.
func (n *Node) react(in *input) {
	l := in.l
	switch in.kind {
	case inLines:
		n.handleAll(l, in.msgs)
	case inHello:
		n.helloArrived(l, *in.hello, in.flag)
	case inAlive:
		n.dup.aliveFirst(l)
	case inReadEnd:
		n.readFailed(l, in.err)
	case inWriteFailed:
		n.writeFailed(l, in.err)
	case inDelivered:
		n.delivered(in.rounds)
	case inAccepted:
		in.answer(n.accepted(l))
	case inStray:
		n.stray(in.err) // identity.go
		if n.adm.refused(l, in.err) {
			n.trace(TraceEvent{Kind: TraceViolation, Side: protocol.Pred, Peer: l.peer, Err: in.err})
		}
	case inWatch:
		in.answer(reply{conn: n.adm.watch(l, l.c)})
	case inSecured:
		in.answer(reply{ok: n.secured(l, in.conn, in.err)})
	case inServeEnd:
		n.adm.done(l)
	case inTrack:
		in.answer(reply{pc: n.adm.conns[l]})
	case inKeepIdle:
		in.answer(reply{ok: n.keepIdle(l)})
	case inPendingEnd:
		n.adm.endedNow(l, in.err)
	case inDialed:
		in.answer(reply{ok: n.dialed(l)})
	case inViolation:
		n.trace(*in.trace)
	case inCheckHeld:
		n.dup.checkHeld()
	case inTaskStarted:
		n.taskStarted(in.round)
	case inTaskEnd:
		if !n.closed {
			n.taskFinished(in.round, in.err, in.flag)
		}
	case inUndoEnd:
		if !n.closed {
			n.undo.undoFinished(in.round, in.err, in.flag)
		}
	case inInit:
		n.initLoop()
		in.answer(reply{})
	case inReady:
		in.answer(reply{err: n.ready(in.round)})
	case inWait:
		in.answer(reply{ri: n.waitOn(in.round)})
	case inUnwait:
		n.unwait(in.round, in.ri, in.flag)
	case inSnapshot:
		st := n.snapshot()
		in.answer(reply{snap: &st})
	case inPredUp:
		in.answer(reply{ok: n.pred != nil})
	case inSteer:
		n.steerRequest(in)
	case inPaused:
		ok, ch := n.steer.paused()
		in.answer(reply{ok: ok, ch: ch})
	case inClose:
		in.answer(reply{ok: n.closeLoop()})
	case inStopAll:
		n.stopAll()
		st := n.snapshot()
		in.answer(reply{snap: &st})
	case inProbe:
		in.fn()
		in.answer(reply{})
	case inAnnounce:
		n.announce(*in.fault, in.flag, in.cause)
	case inAnnounceSteer:
		n.steer.announceSteer()
	case inRetried:
		n.steer.retriedNow(in.round)
	case inReport:
		n.stepNote(*in.note)
	case inStepLater:
		in.fn()
	}
}

// endTurn carries out what the turn's steps queued: persist, act, flush
// (see the top of this file). Quick tasks' ends and the reactions queued
// with later are stepped and carried out too, until nothing is left.
func (n *Node) endTurn() {
	for {
		for len(n.queued) > 0 {
			in := n.queued[0]
			n.queued = n.queued[1:]
			n.react(&in)
		}
		if !n.cur.empty() {
			b := n.cur
			n.cur, n.spare = n.spare, b
			broken := n.st.broken != nil
			if !broken && (len(b.recs) > 0 || len(b.faults) > 0 || b.steer != nil) {
				n.flush() // what is queued already is on disk: out with it first
				if err := n.store.save(b); err != nil {
					n.journalFailed(err)
					broken = true
				}
			}
			n.carryOut(b, broken)
			b.reset()
			continue
		}
		n.flush()
		if len(n.queued) == 0 && n.cur.empty() {
			break
		}
	}
	for i, t := range n.starting {
		if ri := n.book.find(t.round); t.undo == nil && ri != nil && ri.finished() {
			// The round ended in this turn after its task was asked for
			// (the halt policy ended it for a task that failed in the
			// same turn): its task does not run.
			if t.slot {
				n.tasks.give()
			}
			n.starting[i] = taskStart{}
			if n.infoOn() {
				n.log.Info("task not started: the round ended before it could start", "round", t.round)
			}
			continue
		}
		// Once Close waits, it does not start (its round ends stopped; a
		// restarted node resumes it).
		n.tasks.launch(t)
		n.starting[i] = taskStart{}
	}
	n.starting = n.starting[:0]
}

// flush writes out the outboxes of the links the turn queued lines on.
func (n *Node) flush() {
	for i, l := range n.flushing {
		l.flush()
		n.flushing[i] = nil
	}
	n.flushing = n.flushing[:0]
}

// carryOut does b's effects in order. With broken (the journal failed) it
// sends nothing and starts no task: the node acts no more.
func (n *Node) carryOut(b *batch, broken bool) {
	quick := n.quickRun[:0]
	for i := range b.effs {
		e := &b.effs[i]
		switch e.kind {
		case effSend:
			if broken {
				continue
			}
			if !e.l.enqueue(b.buf[e.off:e.end], e.exit, e.round) {
				if !n.closed {
					err := fmt.Errorf("more than %d bytes queued: the peer is not reading", maxOutbox)
					n.log.Warn("closing link (everything unsent is re-sent on reconnect)", "to", e.l.side.String(), "peer", e.l.peer, "err", err)
					n.drop(e.l, err)
				}
				continue
			}
			if !slices.Contains(n.flushing, e.l) {
				n.flushing = append(n.flushing, e.l)
			}
		case effTask:
			if broken {
				if e.task.slot {
					n.tasks.give()
				}
				continue
			}
			n.starting = append(n.starting, e.task)
		case effQuick:
			if !broken {
				quick = append(quick, e.round)
			}
		case effDone:
			close(e.ri.done)
		case effAnswer:
			if broken && e.err == nil {
				e.err = n.st.broken // what it changed is not on disk
			}
			e.reply <- reply{err: e.err, id: e.id}
		case effShut:
			e.l.shut() // what it was sent in this turn still goes out
		}
	}
	if len(quick) > 0 {
		n.runQuick(quick)
	}
	n.quickRun = quick[:0]
}

// runQuick runs quick tasks (Config.QuickTask) one after another on the
// loop, then steps their ends: the lines those steps send go out with the
// rest of the turn's, in one write per link.
func (n *Node) runQuick(rounds []string) {
	for _, round := range rounds {
		if !n.tasks.take() {
			n.startTask(round) // a slot is busy: wait for it like any task
			continue
		}
		n.taskStarted(round)
		err := n.tasks.runHere(round)
		if !n.closed {
			n.taskFinished(round, err, false)
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
func (n *Node) lastWords(l *link, line []byte) {
	n.cur.line(l, line, false, "")
	l.closing = true
	n.cur.add(effect{kind: effShut, l: l})
}

// add appends an effect to the turn. Loop only.
func (b *batch) add(e effect) { b.effs = append(b.effs, e) }

// loopEnded reports whether the loop has ended (Close, after its last
// turn).
func (n *Node) loopEnded() bool {
	select {
	case <-n.loopDone:
		return true
	default:
		return false
	}
}
