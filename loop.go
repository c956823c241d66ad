package chainsync

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strconv"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
)

// The loop: one goroutine per node owns the protocol machine and
// everything the driver keeps beside it (docs/DESIGN.md, "The shape of
// the code"). Every input reaches it as an event on n.in: the lines a
// reader read (all the complete lines of one read, in one event), a
// connection promoted or lost, a task's end, an exit-wave delivery, the
// clock's tick, and the API's calls (Ready, Wait, Snapshot, Close).
// Nothing else steps the machine, and a step never runs inside another
// step's actions: a reaction to an action (a fault's notice, the policy's
// aborts) is stepped after them, in the same turn.
//
// A turn takes every event waiting (up to maxTurn), then carries out what
// their steps asked for, in this order:
//
//  1. persist: the journal records of the whole turn are written and
//     synced, one write and one fsync however many events made them
//     (group commit: what arrives during the fsync waits for the next
//     turn and shares its fsync);
//  2. act: lines go to their links' outboxes, results are released to
//     Wait, tasks start (quick tasks run here, on the loop, and their
//     ends are stepped into the same turn);
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
	effSend  effKind = iota + 1 // queue the line buf[off:end] on l
	effTask                     // start task on a task worker (task.go)
	effQuick                    // run round's quick task on the loop
	effDone                     // release ri's result to Wait
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
}

// batch is what the steps of a turn queued.
type batch struct {
	effs   []effect
	buf    []byte            // the encoded lines of effSend
	recs   []protocol.Record // journal records
	faults []journal.Fault   // journal fault records, written before recs
}

func (b *batch) empty() bool {
	return len(b.effs) == 0 && len(b.recs) == 0 && len(b.faults) == 0
}

func (b *batch) reset() {
	clear(b.effs)
	b.effs, b.buf, b.recs, b.faults = b.effs[:0], b.buf[:0], b.recs[:0], b.faults[:0]
}

// post hands f to the loop, to run as an event; false if the loop has
// ended (the node is closed). Never called on the loop itself (see later).
func (n *Node) post(f func()) bool {
	select {
	case n.in <- f:
		return true
	case <-n.loopDone:
		return false
	}
}

// call runs f on the loop and waits until it has run; false if the loop
// has ended. f must not block.
func (n *Node) call(f func()) bool {
	done := make(chan struct{})
	if !n.post(func() { f(); close(done) }) {
		return false
	}
	select {
	case <-done:
		return true
	case <-n.loopDone:
		// The loop ran every event it took before it ended.
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// later queues f to run on the loop after the current event, in the same
// turn: for what the loop causes itself (a write that failed while it
// flushed). Loop only.
func (n *Node) later(f func()) { n.queued = append(n.queued, f) }

// run is the loop. It ends when n.stop is closed, after the last turn.
func (n *Node) run() {
	defer close(n.loopDone)
	if n.clock != nil {
		defer n.clock.t.Stop()
	}
	n.loopG.Store(curGoid())
	tick := n.clockC()
	for {
		select {
		case f := <-n.in:
			f()
		case <-tick:
			n.onTick()
		case <-n.stop:
			n.endTurn()
			return
		}
		// Everything that is waiting joins this turn.
		for k := 1; k < maxTurn; k++ {
			select {
			case f := <-n.in:
				f()
				continue
			default:
			}
			break
		}
		n.endTurn()
	}
}

// endTurn carries out what the turn's steps queued: persist, act, flush
// (see the top of this file). Quick tasks' ends and the reactions queued
// with later are stepped and carried out too, until nothing is left.
func (n *Node) endTurn() {
	for {
		for len(n.queued) > 0 {
			f := n.queued[0]
			n.queued = n.queued[1:]
			f()
		}
		if !n.cur.empty() {
			b := n.cur
			n.cur, n.spare = n.spare, b
			broken := n.broken != nil
			if !broken && (len(b.recs) > 0 || len(b.faults) > 0) {
				n.flush() // what is queued already is on disk: out with it first
				if err := n.j.SaveAll(b.faults, b.recs); err != nil {
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
		if ri := n.rounds[t.round]; t.undo == nil && ri != nil && ri.finished() {
			// The round ended in this turn after its task was asked for
			// (the halt policy ended it for a task that failed in the
			// same turn): its task does not run.
			if t.slot {
				<-n.tasks
			}
			n.wg.Done()
			n.starting[i] = taskStart{}
			if n.infoOn() {
				n.log.Info("task not started: the round ended before it could start", "round", t.round)
			}
			continue
		}
		if n.cfg.ownTaskGoroutines {
			goSafe(func() { n.runTask(t) })
		} else {
			taskWorkers.run(n, t)
		}
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
					<-n.tasks
				}
				n.wg.Done()
				continue
			}
			n.starting = append(n.starting, e.task)
		case effQuick:
			if !broken {
				quick = append(quick, e.round)
			}
		case effDone:
			close(e.ri.done)
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
		select {
		case n.tasks <- struct{}{}:
		default:
			n.startTask(round) // a slot is busy: wait for it like any task
			continue
		}
		n.taskStarted(round)
		err := n.cfg.Task(n.ctx, round)
		<-n.tasks
		if !n.closed {
			n.taskFinished(round, err, false)
		}
	}
}

// queueLine queues line for l as an effect of the turn. Loop only.
func (n *Node) queueLine(l *link, line []byte, exitWave bool, round string) {
	b := n.cur
	off := len(b.buf)
	b.buf = append(b.buf, line...)
	b.effs = append(b.effs, effect{kind: effSend, l: l, off: off, end: len(b.buf), exit: exitWave, round: round})
}

// queue appends an effect to the turn. Loop only.
func (n *Node) queue(e effect) { n.cur.effs = append(n.cur.effs, e) }

// onLoop reports whether the caller is the loop's goroutine (a Trace
// callback that reads the node). It costs a stack read: only Snapshot,
// which a Trace callback may call, asks.
func (n *Node) onLoop() bool { return n.loopG.Load() == curGoid() }

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

// curGoid returns the calling goroutine's id.
func curGoid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}
