package chainsync

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
)

// Collect, persist, act: how a node's lock is used.
//
// Under n.mu, and only there, the machine steps; what its steps ask for is
// queued in a batch (n.cur): the journal records to write, the lines for
// each link, the tasks to start, the rounds whose result is in. Log
// records and trace events made meanwhile go to a queue of their own, the
// notes. Nothing else happens under n.mu: no socket write, no fsync, no
// user code.
//
// unlock releases n.mu and then carries the batch out, in this order:
//
//  1. persist: the batch's journal records are written and fsynced, one
//     write and one fsync for every record the batch holds, however many
//     events made them (group commit: while one batch is being synced,
//     the next one collects);
//  2. the notes are handed to the logger and to Config.Trace;
//  3. act: lines go to their links' outboxes, results are released to
//     Wait, tasks start (quick tasks run here, and their ends are stepped
//     under n.mu again into the next batch);
//  4. the links are flushed (one write per link for all their lines).
//
// One goroutine at a time carries batches out (n.acting). A goroutine that
// unlocks while another one is carrying out leaves its batch to that one,
// which takes batches until none is left; so batches are carried out in
// the order their steps happened, and every record a step made is on disk
// before any line that step sends leaves, any task it starts runs and any
// result it reports is seen (docs/DESIGN.md, "Restarts and durable state").
//
// Every path that takes n.mu goes through lock and unlock (lock_test.go
// checks that no other code touches n.mu), so the test build can check
// that no socket write and no fsync happens while the goroutine holds it.

// effKind is the kind of one queued effect.
type effKind uint8

const (
	effSend  effKind = iota + 1 // queue the line buf[off:end] on l
	effTask                     // start task on a task worker (task.go)
	effQuick                    // run round's quick task on the acting goroutine
	effDone                     // release ri's result to Wait
)

// effect is one thing a step asked for, carried out after n.mu is released.
type effect struct {
	kind     effKind
	exit     bool // effSend: the round's final exit-wave COMPLETE
	l        *link
	off, end int
	round    string
	task     taskStart
	ri       *roundInfo
}

// batch is what steps under n.mu queued since the last one was taken.
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

// lock takes n.mu. Every path that takes it releases it with unlock.
func (n *Node) lock() {
	n.inside.Add(1)
	n.mu.Lock()
	if lc := lockCheck.Load(); lc != nil {
		n.holder.Store(lc.goid())
	}
}

// release releases n.mu and hands over the notes, without carrying out a
// batch (the goroutine acting does that, or the batch is empty).
func (n *Node) release() {
	n.releaseMu()
	if n.inside.Add(-1) == 0 {
		// No other goroutine holds or waits for mu, or is acting: none
		// would hand the notes over. (One that does hands them over
		// itself, so a caller of Snapshot is not made to write another
		// goroutine's log.)
		n.emitNotes(false)
	}
}

func (n *Node) releaseMu() {
	if lockCheck.Load() != nil {
		n.holder.Store(0)
	}
	n.mu.Unlock()
}

func (n *Node) relock() {
	n.mu.Lock()
	if lc := lockCheck.Load(); lc != nil {
		n.holder.Store(lc.goid())
	}
}

// unlock releases n.mu and carries out what the steps under it queued
// (see the top of this file), unless another goroutine is doing so: then
// that one carries it out too.
func (n *Node) unlock() {
	if n.acting || n.cur.empty() {
		n.release()
		return
	}
	n.acting = true
	if n.commit != nil {
		// A durable node: its committer carries batches out, so that
		// no caller (Ready, a reader with more lines to read) waits for
		// an fsync, and what they queue meanwhile joins the next one.
		n.release()
		select {
		case n.commit <- struct{}{}:
		default:
		}
		return
	}
	n.carry()
}

// committer carries out a durable node's batches (see unlock) until the
// node is closed.
func (n *Node) committer() {
	defer close(n.commitDone)
	for {
		select {
		case <-n.commit:
			n.lock()
			n.carry()
		case <-n.commitQuit:
			return
		}
	}
}

// carry carries out batches until none is left, then releases mu. Caller
// holds mu and has set n.acting.
func (n *Node) carry() {
	flush := n.flushing[:0]
	for {
		b := n.cur
		n.cur, n.spare = n.spare, nil
		broken := n.broken != nil
		n.releaseMu()
		if !broken && len(b.recs) > 0 {
			// The lines already queued are on disk: out with them first.
			flush = n.flush(flush)
			if err := n.persist(b); err != nil {
				n.relock()
				n.journalFailed(err)
				n.releaseMu()
				broken = true
			}
		}
		n.emitNotes(true)
		var ranQuick bool
		flush, ranQuick = n.carryOut(b, broken, flush)
		n.relock()
		b.reset()
		n.spare = b
		if !n.cur.empty() {
			n.startTasks()
			if ranQuick {
				continue // the lines the quick tasks' ends send go with the others
			}
		} else if len(flush) == 0 {
			break
		}
		n.releaseMu()
		flush = n.flush(flush)
		n.relock()
		if n.cur.empty() {
			break
		}
	}
	n.acting = false
	n.flushing = flush[:0]
	n.idle.Broadcast()
	// The tasks start once mu is free: a task that ends at once then does
	// not find it held by this goroutine, checking for more work.
	var buf [4]taskStart
	starts := append(buf[:0], n.starting...)
	clear(n.starting)
	n.starting = n.starting[:0]
	n.release()
	for _, t := range starts {
		taskWorkers.run(n, t)
	}
}

// startTasks starts the tasks carried out so far, while more batches
// follow. Caller holds mu (by carry).
func (n *Node) startTasks() {
	for i, t := range n.starting {
		taskWorkers.run(n, t)
		n.starting[i] = taskStart{}
	}
	n.starting = n.starting[:0]
}

// flush writes out the outboxes of links (without n.mu) and returns the
// list emptied.
func (n *Node) flush(links []*link) []*link {
	for i, l := range links {
		l.flush()
		links[i] = nil
	}
	return links[:0]
}

// persist writes and syncs b's journal records (the journal's OnSync
// checks, in the test build, that n.mu is not held). Called without n.mu,
// by the goroutine acting.
func (n *Node) persist(b *batch) error {
	return n.j.SaveAll(b.faults, b.recs)
}

// carryOut does b's effects in order, without n.mu, and returns the links
// to flush. With broken (the journal failed) it sends nothing and starts
// no task: the node acts no more. ranQuick reports that quick tasks ran
// and their ends were stepped into the next batch.
func (n *Node) carryOut(b *batch, broken bool, flush []*link) (_ []*link, ranQuick bool) {
	quick := n.quickRun[:0]
	for i := range b.effs {
		e := &b.effs[i]
		switch e.kind {
		case effSend:
			if broken {
				continue
			}
			if !e.l.enqueue(b.buf[e.off:e.end], e.exit, e.round) {
				n.lock()
				if !n.closed {
					err := fmt.Errorf("more than %d bytes queued: the peer is not reading", maxOutbox)
					n.log.Warn("closing link (everything unsent is re-sent on reconnect)", "to", e.l.side.String(), "peer", e.l.peer, "err", err)
					n.drop(e.l, err)
				}
				n.unlock()
				continue
			}
			if !slices.Contains(flush, e.l) {
				flush = append(flush, e.l)
			}
		case effTask:
			if broken {
				if e.task.slot {
					<-n.tasks
				}
				n.wg.Done()
				continue
			}
			n.starting = append(n.starting, e.task) // started by carry
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
		ranQuick = true
	}
	n.quickRun = quick[:0]
	return flush, ranQuick
}

// runQuick runs quick tasks (Config.QuickTask) one after another on this
// goroutine, without n.mu, then steps their ends under one hold of it:
// the lines those steps send go out with the rest, in one write per link.
func (n *Node) runQuick(rounds []string) {
	type end struct {
		round string
		err   error
	}
	var ends [16]end
	done := ends[:0]
	var busy []string
	for _, round := range rounds {
		select {
		case n.tasks <- struct{}{}:
		default:
			busy = append(busy, round) // a slot is busy: wait for it like any task
			continue
		}
		n.taskStarted(round)
		n.emitNotes(true) // the trace shows the task start before the task runs
		err := n.cfg.Task(n.ctx, round)
		<-n.tasks
		done = append(done, end{round, err})
	}
	n.lock()
	for _, round := range busy {
		n.startTask(round)
	}
	for _, e := range done {
		if !n.closed {
			n.taskFinished(e.round, e.err, false)
		}
	}
	n.release() // the acting goroutine carries out what they queued
}

// queueLine queues line for l (nil: dropped) as an effect. Caller holds mu.
func (n *Node) queueLine(l *link, line []byte, exitWave bool, round string) {
	b := n.cur
	off := len(b.buf)
	b.buf = append(b.buf, line...)
	b.effs = append(b.effs, effect{kind: effSend, l: l, off: off, end: len(b.buf), exit: exitWave, round: round})
}

// queue appends an effect. Caller holds mu.
func (n *Node) queue(e effect) { n.cur.effs = append(n.cur.effs, e) }

// note is one log record or trace event, handed over after n.mu is
// released, in the order they were made.
type note struct {
	h     slog.Handler // the log record's handler; nil for a trace event
	rec   slog.Record
	trace TraceEvent
}

// addNote queues a note, and hands the notes over at once if no goroutine
// holds n.mu or is carrying a batch out (one that does hands it over).
func (n *Node) addNote(nt *note) {
	n.nmu.Lock()
	n.notes = append(n.notes, nt)
	n.nnotes.Add(1)
	n.nmu.Unlock()
	if n.inside.Load() == 0 {
		n.emitNotes(false)
	}
}

// emitNotes hands the queued notes to the logger and Config.Trace, one at
// a time and in order, never with n.mu held. wait: block until every note
// queued so far is handed over (the goroutine acting, before its lines
// leave); otherwise, if another goroutine is handing notes over, leave
// them to it.
func (n *Node) emitNotes(wait bool) {
	for n.nnotes.Load() > 0 {
		if wait {
			n.emu.Lock()
		} else if !n.emu.TryLock() {
			return // the goroutine emitting takes these too: it checks again after unlocking
		}
		for {
			n.nmu.Lock()
			take := n.notes
			if len(take) == 0 {
				n.nmu.Unlock()
				break
			}
			n.notes = n.noteSpare[:0]
			n.nnotes.Store(0)
			n.nmu.Unlock()
			for i, nt := range take {
				if nt.h == nil {
					n.cfg.Trace(nt.trace)
				} else {
					_ = nt.h.Handle(context.Background(), nt.rec)
				}
				take[i] = nil
			}
			n.noteSpare = take[:0] // only the goroutine holding emu touches it
		}
		n.emu.Unlock()
	}
}

// noteHandler is the handler of n.log: it queues each record as a note, so
// that code under n.mu can log without writing anything under it.
type noteHandler struct {
	n *Node
	h slog.Handler
}

func (h noteHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h noteHandler) Handle(_ context.Context, r slog.Record) error {
	h.n.addNote(&note{h: h.h, rec: r.Clone()})
	return nil
}

func (h noteHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return noteHandler{h.n, h.h.WithAttrs(as)}
}

func (h noteHandler) WithGroup(name string) slog.Handler {
	return noteHandler{h.n, h.h.WithGroup(name)}
}

// nodeLocker is n.lock and n.release as a sync.Locker, for n.idle.
type nodeLocker struct{ n *Node }

func (l nodeLocker) Lock()   { l.n.lock() }
func (l nodeLocker) Unlock() { l.n.release() }

// waitIdle waits until no goroutine is carrying a batch out. Caller holds
// mu (taken with lock).
func (n *Node) waitIdle() {
	for n.acting {
		n.idle.Wait()
	}
}

// lockChecker is set by this package's tests only: it makes every socket
// write and fsync check that its goroutine does not hold n.mu.
type lockChecker struct {
	goid func() uint64              // the calling goroutine's id
	fail func(n *Node, what string) // called on a write or fsync under n.mu
}

var lockCheck atomic.Pointer[lockChecker]

// assertUnlocked reports, in the test build, a write or fsync made while
// this goroutine holds n.mu.
func (n *Node) assertUnlocked(what string) {
	if lc := lockCheck.Load(); lc != nil && n.holder.Load() == lc.goid() {
		lc.fail(n, what)
	}
}

var _ sync.Locker = nodeLocker{}
