package chainsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync/internal/hot"
	"github.com/chainsync-go/chainsync/protocol"
)

// roundInfo is what the driver keeps of one round beside the machine:
// its waiters and its result, when it was opened and ended, and what a
// down link has not carried. What the round is (its state, readiness)
// is the machine's.
type roundInfo struct {
	done  chan struct{} // closed once res is set and on disk (at the end of the turn)
	over  bool          // res is set
	res   Result
	cause error     // why the round is ending: the task's error or the fault
	since time.Time // when the round last changed state (ActState), for Snapshot
	// abortedIn: the state the machine aborted the round in (ActState).
	abortedIn protocol.State
	waiters   int       // Wait calls blocked on this round
	timedOut  bool      // the task failed by running past TaskTimeout
	opened    time.Time // when this node first heard of the round
	ended     time.Time // when the round ended here
	// unsent, per side, is the message the machine sent while that link
	// was down and no connection has carried yet: when the link comes up
	// it goes out for the first time, not as a re-send.
	unsent [3]protocol.Command
	// reported: why the round ends is already logged at ERROR (its fault,
	// or the journal failing), so its end is not a second ERROR line.
	reported bool
	// say logs the round's end ("round over ..."): resolve sets it, and
	// the turn calls it once the turn's records are on disk, with the
	// result's release, so that a log that says a round is over never
	// precedes the records that make it so (a node killed just after
	// the line resumes with the round over).
	say func()
	// failedWhy: the words of the notice that the round's task failed at
	// another node (its error), for a round end that waits for the undo
	// wave (undo.go).
	failedWhy string
}

// finished reports whether the round's result is in. Loop only.
func (ri *roundInfo) finished() bool { return ri.over }

// RoundStatus is one unfinished round in a Snapshot.
type RoundStatus struct {
	Round string
	State protocol.State // 0 if this node has not opened the round yet
	Since time.Time      // when the round entered State (or was first seen)
	Ready bool           // this node was told it is locally ready
	// WaitingFor is what the round waits for: a message from a neighbour
	// (WaitingFor.Msg says which, and from which side), or this node
	// itself (to become locally ready, or its task, or, its turn come, an
	// approval or a release: WaitApproval, WaitHold).
	WaitingFor protocol.Wait
	// Gate names this node when WaitingFor is WaitApproval or WaitHold.
	Gate string
	// Undo: the round failed and its undo wave is under way here, in
	// words (undo.go); "" otherwise.
	Undo string
}

// Doing says in words what the round is waiting for at this node.
func (r RoundStatus) Doing() string {
	if r.Undo != "" {
		return r.Undo
	}
	switch w := r.WaitingFor; w {
	case protocol.WaitLocal:
		return "waiting to become locally ready"
	case protocol.WaitReady:
		return waitsFor(w) + " (locally ready)"
	case protocol.WaitStart:
		return waitsFor(w) + " (the rest of the chain is not ready yet)"
	case protocol.WaitComplete:
		return waitsFor(w) + " (an earlier task is running)"
	case protocol.WaitTask:
		return "running its task"
	case protocol.WaitExit:
		return waitsFor(w) + " (the exit wave; its task is done)"
	case protocol.WaitHandOver:
		return "waiting to hand its final COMPLETE to the predecessor once a link to it is up (done here)"
	case protocol.WaitApproval:
		return "waiting for approval at " + r.Gate + " (chainsync approve or deny)"
	case protocol.WaitHold:
		return "held at " + r.Gate + " (chainsync release)"
	}
	return max(r.State, protocol.StateSync).String()
}

// roundBook is what the driver keeps of the rounds beside the machine:
// a roundInfo for each round the machine keeps (its waiters and result),
// created when the round is first asked about or opened and dropped when
// the machine forgets it (ActForget), plus rounds that only a Wait has
// asked about; and the last rounds that ended, for Snapshot. The loop's,
// but for the table of records itself: Wait finds (or adds) a round's
// record and counts itself among its waiters on the application's
// goroutine, without a turn (a turn would wake the loop goroutine and
// the caller once each per Wait), so the table is guarded by mu.
type roundBook struct {
	// mu guards byID, closed and each record's waiters; never held
	// while anything else is called.
	mu     sync.Mutex
	byID   hot.Table[*roundInfo] // the records in use now are found fastest
	closed bool                  // the node is closing: a Wait adds no record
	recent []string              // the last keepHistory rounds that ended, oldest first

	lp     *loop        // a result is released at the end of the turn
	log    *slog.Logger // a round's end, logged
	feed   *roundFeed   // the rounds the predecessor opened (Config.Follow)
	follow bool         // Config.Follow
}

// get returns the record of id, creating it.
func (b *roundBook) get(id string) *roundInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.getLocked(id)
}

// getLocked is get, with mu held.
func (b *roundBook) getLocked(id string) *roundInfo {
	ri := b.byID.Get(id)
	if ri == nil {
		now := time.Now()
		ri = &roundInfo{done: make(chan struct{}), since: now, opened: now}
		b.byID.Set(id, ri)
	}
	return ri
}

// find returns the record of id, nil if there is none.
func (b *roundBook) find(id string) *roundInfo {
	b.mu.Lock()
	ri := b.byID.Get(id)
	b.mu.Unlock()
	return ri
}

// forget drops the record of id (its waiters, if any, hold it).
func (b *roundBook) forget(id string) {
	b.mu.Lock()
	b.byID.Delete(id)
	b.mu.Unlock()
}

// all lists every record, for a loop that ends or reports rounds
// (which may call back into the application, so not under mu).
func (b *roundBook) all() []bookEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]bookEntry, 0, b.byID.Len())
	for id, ri := range b.byID.All() {
		out = append(out, bookEntry{id, ri})
	}
	return out
}

// bookEntry is one record of the book, with its round id.
type bookEntry struct {
	id string
	ri *roundInfo
}

// close marks the node closing: from now on a Wait on a round the book
// does not know adds no record (it is answered stopped). Loop only.
func (b *roundBook) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// settle sets ri's result, released to Wait once the turn's records are
// on disk; false if it had one already. The round is listed as ended
// last (a retried round once, as its last attempt ended). A round that
// ended before this process started (resume) is settled too: its result
// is kept, its end is not reported again. Loop only.
func (b *roundBook) settle(id string, ri *roundInfo, res Result) bool {
	if ri.finished() {
		return false
	}
	ri.res = res
	ri.ended = time.Now()
	ri.over = true
	if i := slices.Index(b.recent, id); i >= 0 { // listed once at most
		b.recent = slices.Delete(b.recent, i, i+1)
	}
	if len(b.recent) == keepHistory {
		b.recent = append(b.recent[:0], b.recent[1:]...)
	}
	b.recent = append(b.recent, id)
	// The record stays until the machine forgets the round (ActForget):
	// the machine's table says which rounds this node remembers.
	b.lp.cur.add(effect{kind: effDone, ri: ri})
	return true
}

// waitOn is the start of a Wait on round: its record, nil if the node
// is closing and there is none. Any goroutine.
func (b *roundBook) waitOn(round string) *roundInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	ri := b.byID.Get(round)
	if ri == nil && b.closed {
		return nil
	}
	if ri == nil {
		ri = b.getLocked(round)
	}
	ri.waiters++
	return ri
}

// waitEnded is the end of a Wait on ri that saw its result. Any
// goroutine.
func (b *roundBook) waitEnded(ri *roundInfo) {
	b.mu.Lock()
	ri.waiters--
	b.mu.Unlock()
}

// gaveUp is the end of a Wait on ri whose context ended first; known:
// the machine keeps the round. A round nobody started and nobody waits
// for any more leaves no trace (a Wait on a mistyped round id must not
// leak). Loop only.
func (b *roundBook) gaveUp(round string, ri *roundInfo, known bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ri.waiters--
	if !known && ri.waiters == 0 && !ri.finished() && b.byID.Get(round) == ri {
		b.byID.Delete(round)
	}
}

// allOver reports whether the book has rounds and every one has ended.
func (b *roundBook) allOver() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ri := range b.byID.All() {
		if !ri.finished() {
			return false
		}
	}
	return b.byID.Len() > 0
}

// finished lists the last rounds that ended, oldest first.
func (b *roundBook) finished() []RoundResult {
	var out []RoundResult
	for _, id := range b.recent {
		ri := b.find(id)
		if ri == nil || !ri.finished() {
			continue // the id was used again since
		}
		rr := RoundResult{Round: id, Status: ri.res.Status, Opened: ri.opened, Ended: ri.ended, Undo: ri.res.Undo}
		if ri.res.Err != nil {
			rr.Err = ri.res.Err.Error()
		}
		out = append(out, rr)
	}
	return out
}

// resolve ends a round for its waiters, and logs and traces its end.
// Loop only.
func (b *roundBook) resolve(id string, ri *roundInfo, res Result) {
	if !b.settle(id, ri, res) {
		return
	}
	lvl, msg := slog.LevelInfo, "round over"
	var ue *UndeliveredError
	if res.Status == StatusUndelivered {
		ue = undeliveredIn(res.Err) // not for every round: its pointer escapes
	}
	var extra []any // built only for a line that is logged
	switch {
	case res.Status == StatusDone:
	case ue != nil:
		// Not a failure here: what is not known, and whom to ask.
		lvl, msg = slog.LevelWarn, "round over: undelivered: "+ue.Known()
	case res.Status == StatusCancelled:
		// People ended it: no fault, and no fault line above.
		lvl, msg = slog.LevelWarn, "round over: cancelled"
		if res.Err != nil {
			extra = []any{"reason", res.Err.Error()}
		}
	case ri.reported:
		// One ERROR line per fault: the fault's own line said it all;
		// this one only refers to it.
		lvl, msg = slog.LevelWarn, "round over; the cause is the fault logged above"
		if k := faultKindOf(res.Err); k != "" {
			extra = []any{"fault", k}
		}
	case res.Status == StatusStopped:
		lvl = slog.LevelWarn // the node was closed (interrupted): not a fault
	default:
		lvl = slog.LevelError
		if res.Err != nil {
			extra = []any{"err", res.Err.Error()}
		}
	}
	if log := b.log; log.Enabled(context.Background(), lvl) {
		args := append([]any{"round", id, "status", res.Status.String()}, extra...)
		ri.say = func() { log.Log(context.Background(), lvl, msg, args...) }
	}
	b.lp.trace(TraceEvent{Kind: TraceRoundDone, Round: id, Status: res.Status, Err: res.Err})
}

// restored is settle for a round that ended before this process started
// (resume): its result is kept, its end is not reported again. When it
// opened is not known here, and it ended when its task ended, if the
// journal says (else zero: "before this node restarted"), not now.
// Loop only.
func (b *roundBook) restored(id string, ri *roundInfo, res Result, ended time.Time) {
	if b.settle(id, ri, res) {
		ri.opened, ri.ended = time.Time{}, ended
	}
}

// faultKindOf names the kind of fault err reports, or "".
func faultKindOf(err error) FaultKind {
	if err == nil {
		return "" // a round done: nothing to look for (and no allocation)
	}
	var fe *FaultError
	var te *TaskError
	switch {
	case errors.As(err, &fe):
		return fe.Kind
	case errors.As(err, &te) && te.Timeout:
		return FaultTaskTimeout
	case errors.As(err, &te):
		return FaultTaskFailed
	}
	return ""
}

// waitsFor says what a round waiting on a neighbour waits for, e.g.
// "waiting for START from the successor".
func waitsFor(w protocol.Wait) string {
	cmd, side := w.Msg()
	return "waiting for " + cmd.String() + " from the " + sideWord(side)
}

// sideWord names a side in words: "predecessor" or "successor".
func sideWord(side protocol.Side) string {
	if side == protocol.Succ {
		return "successor"
	}
	return "predecessor"
}

// delivered is told by a link's writer that the final COMPLETE of round
// id was written to a live connection: it tells the machine, for which
// the round is now over here; false if the node acts no more (closed, or
// its journal failed). Loop only.
func (d *driver) delivered(id string) bool {
	if d.lp.closed || d.st.broken != nil {
		return false
	}
	ev := protocol.Delivered(id)
	if round, node, ok := handedReceipt(id); ok {
		ev = protocol.ReceiptHanded(round, node) // receipts.go
		d.rcpt.handed(round, node)
	}
	// An error: the journal failed, and the node acts no more.
	return d.step(ev, nil) == nil
}

// peerRestarted reports a neighbour that sent msg, older than its last
// message for that round: it restarted without its state. The machine
// answered nothing. Loop only.
func (lk *links) peerRestarted(side protocol.Side, msg protocol.Message) {
	what := "predecessor"
	if side == protocol.Succ {
		what = "successor"
	}
	peer := lk.peerName(side)
	addr := ""
	if l := lk.pred; side == protocol.Pred && l != nil && l.peer != peer {
		addr = " (" + l.peer + ")"
	} else if l := lk.succ; side == protocol.Succ && l != nil && l.peer != peer {
		addr = " (" + l.peer + ")"
	}
	reason := fmt.Sprintf("the %s %s%s restarted without its state: it sent %s after it had already sent a later message in this round; not answered, so no task runs twice or out of order (give every node a --state-dir)",
		what, peer, addr, msg.Cmd)
	lk.faults.record(Fault{Kind: FaultPeerRestarted, Round: msg.Round, Side: side, Peer: peer, Err: reason})
}

// stopAll ends every unfinished round stopped (Close). Loop only.
func (b *roundBook) stopAll() {
	for _, e := range b.all() {
		b.resolve(e.id, e.ri, Result{Round: e.id, Status: StatusStopped, Err: ErrStopped})
	}
}
