package chainsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chainsync-go/chainsync/internal/hot"
	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/transport"
	"github.com/chainsync-go/chainsync/wire"
)

// Node is one running member of a chain. Create it with Start; all its
// methods are safe for concurrent use. It is the facade: each call asks
// the loop (loop.go), whose driver owns the parts that do the work
// (docs/DESIGN.md, "The shape of the code").
type Node struct {
	cfg  Config
	log  *slog.Logger
	role protocol.Role
	ln   net.Listener

	cancel    context.CancelFunc // cancels the node's context (Close)
	crew      *crew              // every goroutine of the node but the loop (crew.go)
	lp        *loop              // the loop's inbox and its turn (loop.go)
	d         *driver            // the loop's side: only the loop's goroutine touches it
	book      *roundBook         // the rounds' results: Wait reads it under its lock (rounds.go)
	store     *store             // the state directory (store.go); nil without one
	feed      *roundFeed         // the rounds learned from the predecessor (follow.go)
	closeOnce sync.Once
	final     Snapshot // the last Snapshot, taken by Close for calls after it
}

// driver is the loop's side of a node: the parts it reacts with, and
// what it keeps beside them. Only the loop's goroutine reads or writes
// it (Start builds it before the loop runs).
type driver struct {
	cfg  Config
	rcpt *receipts // Config.Receipts (receipts.go); nil without
	log  *slog.Logger
	plim *admitLimiter // rate-limits what peers can make the node log and trace (admission.go)
	role protocol.Role
	ln   net.Listener
	prev *prevHost // Config.PrevHostOnly

	ctx   context.Context // cancelled by Close
	crew  *crew           // every goroutine of the node but the loop (crew.go)
	tasks *taskRunner     // runs the tasks and undos (task.go)
	lp    *loop           // the loop's inbox and its turn (loop.go)

	st     *stepper    // the one caller of Machine.Step (step.go)
	view   machineView // the machine, read-only
	wbuf   []byte      // scratch for encoding
	links  *links      // the connections (links.go)
	book   *roundBook  // the rounds' waiters and results (rounds.go)
	faults *faultBook  // the recent faults, liveness, mismatches
	store  *store      // the state directory (store.go); nil without one
	clock  *clockState // the clock's state (health.go); nil without timing
	undo   *undoState  // the undo wave's outcomes (undo.go)
	// resumeFrom is the journal's state, for the loop's first input.
	resumeFrom *journal.State

	// Rounds: the rounds learned from the predecessor (Config.Follow),
	// queued for the application (follow.go).
	feed  *roundFeed
	steer *steering // steering: holds and approvals (steer.go)
	// self names this node in its notices and steering lines (notice.go).
	self string
}

// faultBook is what a node keeps of faults: the most recent, for
// Snapshot; the liveness faults in force and cleared (liveness.go); the
// configuration mismatches reported, each once. The loop's.
type faultBook struct {
	recent     []Fault // at most keepFaults, oldest first
	live       liveFaults
	mismatched map[mismatchKey]bool
	// owed: by side, a fault notice went while that link was down; the
	// machine sends it when the link is up (Snapshot.NoticesOwed).
	owed [3]bool

	host  faultHost
	loop  *loop
	view  machineView
	book  *roundBook
	steer *steering // a denial's reason, for its notice
	log   *slog.Logger
	// What the node is and how it is configured, for the faults' words.
	self, next, listen        string
	ext                       bool
	policy                    FaultPolicy
	heartbeat, connectTimeout time.Duration
}

// faultHost is what the fault book reaches of its node: a neighbour's
// name (the trace and the follow-ups go through its loop).
type faultHost interface {
	peerName(side protocol.Side) string
}

// stateOf returns round id's state in the machine, 0 if it does not keep
// the round.
func (fb *faultBook) stateOf(id string) protocol.State {
	st, _ := fb.view.State(id)
	return st
}

// keep keeps f for Snapshot.
func (fb *faultBook) keep(f Fault) {
	if len(fb.recent) == keepFaults {
		fb.recent = slices.Delete(fb.recent, 0, 1)
	}
	fb.recent = append(fb.recent, f)
}

// firstMismatch reports whether the mismatch key is new, and notes it.
func (fb *faultBook) firstMismatch(key mismatchKey) bool {
	if fb.mismatched[key] {
		return false
	}
	if fb.mismatched == nil {
		fb.mismatched = make(map[mismatchKey]bool)
	}
	fb.mismatched[key] = true
	return true
}

// loopCheck is set by this package's tests only: every step and fsync
// then checks, with the test's goroutine ids, that it runs on its node's
// loop.
var loopCheck atomic.Pointer[loopProbe]

// loopProbe is loopCheck's: goid returns the calling goroutine's id, bad
// reports what ran off its node's loop.
type loopProbe struct {
	goid  func() uint64
	bad   func(node, what string)
	fsync func() // if set, called before every fsync
}

// checkOnLoop reports what to loopCheck if it runs off n's loop (an
// fsync may run after the loop has ended: Close's end record).
func (lp *loop) checkOnLoop(what string) {
	p := loopCheck.Load()
	if p == nil {
		return
	}
	if p.goid() != lp.loopG.Load() && (what != "fsync" || !lp.loopEnded()) {
		p.bad(lp.name, what)
	}
	if what == "fsync" && p.fsync != nil {
		p.fsync()
	}
}

// keepFaults is how many recent faults Snapshot reports.
const keepFaults = 64

// recordFault logs f (at ERROR; a neighbour's restart at WARN), traces it
// and keeps it for Snapshot; a fault this node found is announced to the
// chain after the current step's actions (a new event, announce). Loop
// only.
func (fb *faultBook) record(f Fault) {
	f.Time = time.Now()
	fb.keep(f)
	args := []any{"kind", string(f.Kind), "round", f.Round}
	if f.Side != 0 {
		args = append(args, "side", f.Side.String(), "peer", f.Peer)
	}
	if f.Origin != "" {
		args = append(args, "origin", f.Origin, "cause", string(f.Cause), "peer", f.Peer)
	}
	switch f.Kind {
	case FaultPeerRestarted:
		// Not this node's failure, and nothing is lost: a warning.
		fb.log.Warn("neighbour restarted: "+f.Err, args...)
	case FaultChainHalted:
		ran := f.ran
		if ran == "" {
			ran = "this node runs no task in the round"
		}
		fb.log.Error("halted: "+f.reason()+"; "+ran, args...)
	case FaultChainFault:
		fb.log.Warn("fault elsewhere in the chain: "+f.reason()+" (fault policy wait: keeping the round)", args...)
	default:
		fb.log.Error("fault: "+f.Err, args...)
		if ri := fb.book.find(f.Round); ri != nil {
			ri.reported = true
		}
	}
	again := fb.live.page(f) // liveness.go: one page per blamed node until it clears
	fb.loop.trace(TraceEvent{Kind: TraceFault, Fault: f.Kind, Round: f.Round, Side: f.Side, Peer: f.Peer, Origin: f.Origin, Err: errors.New(f.Err), Again: again})
	switch {
	case (f.Kind == FaultTaskFailed || f.Kind == FaultTaskTimeout) && fb.policy == FaultHalt:
		// This node's own task failed: under halt the chain stops here,
		// at this node too. Its other rounds end with the failure as
		// their cause, and no later round's task starts (a halting
		// report, with or without the extension lines).
		fe := &FaultError{Round: f.Round, Kind: f.Kind,
			Reason: "the task of round " + roundName(f.Round) + " failed at this node; halting the chain here"}
		fb.announceLater(f, true, fe)
	case fb.ext && reports(f.Kind) && f.Kind != FaultConfigMismatch && f.Kind != FaultDuplicateNode:
		fb.announceLater(f, false, nil)
	}
}

// peerName names the neighbour on side: its configured name, else its
// address. Loop only (or the fields are immutable).
func (lk *links) peerName(side protocol.Side) string {
	if side == protocol.Pred {
		if !lk.role.HasPred() {
			return ""
		}
		if lk.cfg.PrevName != "" {
			return lk.cfg.PrevName
		}
		if lk.pred != nil {
			return lk.pred.peer
		}
		return lk.cfg.Prev
	}
	if !lk.role.HasSucc() {
		return ""
	}
	if lk.cfg.NextName != "" {
		return lk.cfg.NextName
	}
	return lk.cfg.Next
}

// Start validates cfg, binds the listener (if the node has a predecessor)
// and starts dialing the successor (if it has one). The node then runs
// until Close. Rounds begin with Ready.
func Start(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.withDefaults()
	d := &driver{
		cfg:    cfg,
		role:   cfg.Role(),
		book:   &roundBook{byID: hot.NewTable[*roundInfo]()},
		crew:   new(crew),
		faults: new(faultBook),
		prev:   newPrevHost(&cfg),
		lp:     newLoop(&cfg),
		log:    cfg.Logger,
	}
	// One task at a time: the tasks run in the order the Head opened the
	// rounds, which the READY wave carries down the chain.
	pc := protocol.Config{Role: d.role, MaxRounds: cfg.MaxRounds, KeepFinished: cfg.KeepFinished, Ordered: cfg.MaxParallelTasks == 1}
	if cfg.Rounds != nil && !cfg.Follow {
		set := make(map[string]bool, len(cfg.Rounds))
		for _, r := range cfg.Rounds {
			set[r] = true
		}
		pc.AcceptRound = func(r string) bool { return set[r] }
	}
	pc.Durable = cfg.StateDir != ""
	pc.Extensions = extensionsOn(&cfg)
	if pc.Receipts = cfg.Receipts; pc.Receipts {
		pc.Chain = cfg.Chain // receipts.go
	}
	pc.Undo, pc.Name = cfg.Undo != nil, cfg.Name                         // the undo wave (undo.go)
	pc.Self, pc.RestartGrace = selfLabel(&cfg, d.role), cfg.RestartGrace // liveness.go
	pc.Approve = cfg.Approve
	if cfg.FaultPolicy == FaultWait {
		pc.Policy = protocol.PolicyWait
	}
	// The timeouts are the machine's, in the time the driver's events
	// carry (docs/DESIGN.md, "Time").
	pc.PhaseTimeout, pc.ExitWaveTimeout, pc.ConnectTimeout = cfg.PhaseTimeout, cfg.ExitWaveTimeout, cfg.ConnectTimeout
	if cfg.Heartbeat > 0 {
		pc.Silence = 3 * cfg.Heartbeat
	}
	m := protocol.New(pc)
	d.st = &stepper{m: m, durable: cfg.StateDir != "",
		timing: pc.PhaseTimeout > 0 || pc.ExitWaveTimeout > 0 || pc.ConnectTimeout > 0 || pc.Silence > 0,
		epoch:  time.Now().Add(-time.Second), lp: d.lp} // so that every At is positive
	d.view = m
	var cancel context.CancelFunc
	d.ctx, cancel = context.WithCancel(context.Background())
	d.tasks = newTaskRunner(&cfg, d.ctx, d.crew, d.lp)
	d.tasks.lp, d.tasks.book, d.tasks.faults, d.tasks.log, d.tasks.policy = d.lp, d.book, d.faults, d.log, cfg.FaultPolicy
	d.feed = newRoundFeed()
	d.book.lp, d.book.log, d.book.feed, d.book.follow = d.lp, d.log, d.feed, cfg.Follow
	d.crew.spawn(func() { d.feed.run(d.ctx.Done()) })
	d.plim = newAdmitLimiter(d.log)
	d.plim.noPred = !d.role.HasPred()
	if cfg.peerLogBurst > 0 {
		d.plim.burst = cfg.peerLogBurst
	}
	adm := newAdmission(&cfg, d.plim, d.ctx.Done(), d.crew, d.lp)
	d.crew.spawn(func() { d.plim.run(d.ctx.Done()) })
	// The state directory first: a second process for the same node is
	// told who holds it, rather than that the port is taken.
	st, err := d.openState()
	if err == nil {
		err = refuseRerun(&d.cfg, st)
	}
	if err != nil {
		cancel()
		if d.store != nil {
			d.store.j.Close()
		}
		return nil, err
	}

	if d.role.HasPred() {
		d.ln = cfg.Listener
		if d.ln == nil {
			listen := transport.Listen
			if cfg.listen != nil {
				listen = cfg.listen
			}
			ln, err := listen(d.ctx, cfg.Listen)
			if err != nil {
				cancel()
				if d.store != nil {
					d.store.j.Close()
				}
				hint := ""
				if errors.Is(err, syscall.EADDRINUSE) {
					hint = " (is another process using the port?)"
				}
				return nil, fmt.Errorf("chainsync: cannot listen for the predecessor on %s: %w%s", cfg.Listen, err, hint)
			}
			d.ln = ln
		}
	}
	sec := "plain TCP (no TLS: use only on loopback or a trusted network)"
	if cfg.Secure != nil {
		sec = cfg.Secure.Describe()
	}
	attrs := []any{"role", d.role.String(), "links", sec}
	if d.ln != nil {
		attrs = append(attrs, "listen", d.ln.Addr().String())
		if cfg.Prev != "" {
			attrs = append(attrs, "prev", cfg.Prev)
		}
	}
	if cfg.Next != "" {
		attrs = append(attrs, "next", cfg.Next)
	}
	d.self = selfName(&d.cfg, d.ln, d.role)
	d.steer = &steering{loop: d.lp, st: d.st, faults: d.faults, view: d.view, book: d.book, store: d.store, log: d.log, self: d.self, role: d.role,
		approve: cfg.Approve, ext: extensionsOn(&d.cfg), dir: cfg.StateDir, policy: cfg.FaultPolicy, onHold: cfg.OnHold}
	if d.rcpt = newReceipts(&d.cfg, &receiptsPort{lp: d.lp, st: d.st, crew: d.crew}, d.log); d.rcpt != nil {
		d.steer.decided = d.rcpt.decided
		d.lp.observe = d.rcpt.observe // the task's and the undo's times
	}
	d.undo = &undoState{loop: d.lp, faults: d.faults, book: d.book, log: d.log, on: cfg.Undo != nil, chain: cfg.Chain,
		policy: cfg.FaultPolicy, taskTimeout: cfg.TaskTimeout, resumeTask: cfg.ResumeTask}
	d.links = &links{id: newIdentity(&d.cfg), adm: adm, st: d.st, view: d.view, lp: d.lp, faults: d.faults, undo: d.undo, plim: d.plim,
		cfg: &d.cfg, log: d.log, role: d.role}
	d.undo.host = d.links
	d.steer.undo = d.undo
	d.plim.untraced = d.links.traceUntraced
	d.links.dup = dupState{host: d.links, st: d.st, faults: d.faults, loop: d.lp, view: d.view, book: d.book, log: d.log, plim: d.plim, heartbeat: cfg.Heartbeat,
		ext: extensionsOn(&d.cfg), self: d.self}
	fb := d.faults
	fb.host, fb.loop, fb.view, fb.book, fb.steer, fb.log = d.links, d.lp, d.view, d.book, d.steer, d.log
	fb.self, fb.next, fb.ext = d.self, cfg.Next, extensionsOn(&d.cfg)
	fb.policy, fb.heartbeat, fb.connectTimeout = cfg.FaultPolicy, cfg.Heartbeat, cfg.ConnectTimeout
	if d.ln != nil {
		fb.listen = d.ln.Addr().String()
	}
	d.log.Info("node started", attrs...)

	if d.st.timing {
		d.clock = newClock(&cfg)
	}
	d.lp.reactFn, d.lp.endFn = d.react, d.endTurn
	d.lp.turnFn, d.lp.callerFn = d.lp.turn, d.lp.callerTurn // what a goroutine that posts runs, and the loop goroutine (loop.go)
	d.lp.launchFn, d.lp.inlineFn = d.tasks.launch, d.tasks.runInline
	goSafe(d.run)
	d.resumeFrom = st
	d.lp.ask(input{kind: inInit})
	cn := &connector{cfg: d.cfg, ctx: d.ctx, ln: d.ln, adm: d.links.adm, prev: d.prev, plim: d.plim, crew: d.crew, log: d.log, loop: d.lp}
	if d.ln != nil {
		d.crew.spawn(cn.acceptLoop)
	}
	if d.role.HasSucc() {
		d.crew.spawn(cn.dialLoop)
	}
	n := &Node{cfg: d.cfg, log: d.log, role: d.role, ln: d.ln, cancel: cancel, crew: d.crew, lp: d.lp, d: d, book: d.book, store: d.store, feed: d.feed}
	return n, nil
}

// Role returns the node's role in the chain.
func (n *Node) Role() protocol.Role { return n.role }

// Addr returns the address the node listens on for its predecessor, or
// nil for the Head.
func (n *Node) Addr() net.Addr {
	if n.ln == nil {
		return nil
	}
	return n.ln.Addr()
}

// initLoop is the loop's first input (Start): the steering state, the
// first tick and the rounds the journal kept. Loop only.
func (d *driver) initLoop() {
	d.steer.restoreSteer() // a node restarted while held is held (steer.go)
	_ = d.steerSteps()
	if d.st.timing {
		// The machine learns the time: its timeouts count from now,
		// for the rounds restored from the journal too.
		if err := d.step(d.links.tick(false), nil); err != nil {
			d.log.Error("internal error: first tick", "err", err)
		}
	}
	if st := d.resumeFrom; st != nil {
		d.resumeFrom = nil
		d.resume(st)
		if d.rcpt != nil {
			d.rcpt.resume(st.TaskTimes) // receipts.go
		}
	}
}

// Ready tells the node it is locally ready for round ("" is the unnamed
// round). The node moves as soon as its predecessor is ready too.
func (n *Node) Ready(round string) error {
	if n.cfg.Rounds != nil && !n.cfg.Follow && !slices.Contains(n.cfg.Rounds, round) {
		return fmt.Errorf("chainsync: round %q is not in this node's configured rounds", round)
	}
	r, ok := n.lp.ask(input{kind: inReady, round: round})
	if !ok {
		return ErrStopped
	}
	return r.err
}

// ready is Ready, on the loop.
func (d *driver) ready(round string) error {
	if d.lp.closed {
		return ErrStopped
	}
	if ri := d.book.find(round); ri != nil && ri.finished() {
		return protocol.ErrRoundFinished // e.g. ended by a notice before this node was ready
	}
	err := d.step(protocol.LocalReady(round), nil)
	if err == nil {
		d.book.get(round)
	}
	return err
}

// Wait blocks until round is over at this node, or ctx ends. It may be
// called before or after the round ends: the results of the last
// Config.KeepFinished (16384) finished rounds are kept.
//
// A round that ends because the node was closed returns its Result with
// StatusStopped and the error ErrStopped; so does Wait on a closed node.
// Waiting on a round that never starts holds nothing once ctx ends.
//
// Wait takes no turn of the node's loop: it finds the round's record in
// the round book (under the book's own lock) and waits on it.
func (n *Node) Wait(ctx context.Context, round string) (Result, error) {
	stopped := Result{Round: round, Status: StatusStopped, Err: ErrStopped}
	ri := n.book.waitOn(round)
	if ri == nil {
		return stopped, ErrStopped
	}
	select {
	case <-ri.done:
	case <-n.lp.loopDone:
		// The node is closed (its last turn released every result it
		// settled), or its loop died of a panic (nothing more is).
		select {
		case <-ri.done:
		default:
			n.book.waitEnded(ri)
			return stopped, ErrStopped
		}
	case <-ctx.Done():
		n.lp.submit(input{kind: inUnwait, round: round, ri: ri})
		return Result{Round: round}, ctx.Err()
	}
	n.book.waitEnded(ri)
	if ri.res.Status == StatusStopped {
		return ri.res, ErrStopped
	}
	return ri.res, nil
}

// Snapshot is what a node is doing at one moment, for progress reports.
type Snapshot struct {
	Name           string        // Config.Name
	Role           protocol.Role // this node's role
	PredUp, SuccUp bool          // whether each link is connected now
	PredPeer       string        // the predecessor's name, or address if it has none
	SuccPeer       string        // the successor's name, or address if it has none
	// PredHeard and SuccHeard are when each neighbour last sent a line on
	// its current link (zero: none yet, or the link is down), so a link
	// that is up but silent shows before a heartbeat fault is called.
	PredHeard, SuccHeard time.Time
	Rounds               []RoundStatus // unfinished rounds, by round id
	Faults               []Fault       // the most recent faults, oldest first
	// Finished are the last rounds that ended here (at most 32), oldest
	// first, with how and when.
	Finished []RoundResult
	// Steering: the nodes known to be held, waiting for an approval or
	// paused (this node first), and the denials heard of (steer.go).
	Steering []SteerStatus
	// Restarting: the restart graces in force here (liveness.go).
	Restarting []GraceStatus
	// PredSilent and SuccSilent: with heartbeats, the link is up but the
	// neighbour has not been heard from for two heartbeat intervals: it
	// may be stopped, hung or gone without closing the connection.
	PredSilent, SuccSilent bool
	// PredWaiting, while no predecessor link is up, is the address of a
	// would-be predecessor that is connected and has said it is alive
	// (heartbeats, its identity line) but has sent no round's line yet:
	// an idle Head or middle node before its first round, which becomes
	// the predecessor link with that line. Empty if there is none.
	PredWaiting string
	// NoticesOwed are the neighbours (by side) a fault notice is still
	// owed to: their link was down when it was sent, and it goes when the
	// link is up again. A neighbour that a fault here blames is left out.
	// A process about to exit after a fault waits for it (bounded), so
	// that a neighbour learns why the chain halted.
	NoticesOwed []protocol.Side
	// JournalSyncs is how many fsyncs the state journal made since Start
	// (0 without Config.StateDir). A node syncs once for everything a
	// batch of events produced, so this grows slower than the records.
	JournalSyncs uint64
}

// Snapshot returns what the node is doing now: which links are up and
// where each unfinished round stands. A Config.Trace callback may call
// it.
func (n *Node) Snapshot() Snapshot {
	if n.lp.inCallback.Load() {
		// The loop is in a callback: parked there until cbMu is
		// unlocked, so the node is read as if on the loop.
		n.lp.cbMu.Lock()
		if n.lp.inCallback.Load() {
			defer n.lp.cbMu.Unlock()
			return n.d.snapshot()
		}
		// The callback ended meanwhile: let the guard go before asking
		// the loop, whose next callback takes the guard as it ends.
		n.lp.cbMu.Unlock()
	}
	r, ok := n.lp.ask(input{kind: inSnapshot})
	if !ok {
		<-n.lp.loopDone
		return n.final
	}
	return *r.snap
}

// callback runs f, a Config callback, on the loop: a Snapshot called
// meanwhile (by f, or by a goroutine f waits for) reads the node at once,
// the loop being parked in f. Loop only.
func (lp *loop) callback(f func()) {
	lp.inCallback.Store(true)
	defer lp.leaveCallback()
	f()
}

// leaveCallback ends callback (or trace's call of Config.Trace): once a
// Snapshot reading the node meanwhile is done. Loop only.
func (lp *loop) leaveCallback() {
	lp.cbMu.Lock()
	lp.inCallback.Store(false)
	lp.cbMu.Unlock()
}

// snapshot is Snapshot, on the loop.
func (d *driver) snapshot() Snapshot {
	st := Snapshot{Name: d.cfg.Name, Role: d.role, PredUp: d.links.pred != nil, SuccUp: d.links.succ != nil,
		PredPeer: d.links.peerName(protocol.Pred), SuccPeer: d.links.peerName(protocol.Succ)}
	st.Faults = slices.Clone(d.faults.recent)
	for _, side := range []protocol.Side{protocol.Pred, protocol.Succ} {
		// Not owed to a neighbour a fault here blames: gone, or refusing
		// this node, or back with nothing to learn from it.
		peer := d.links.peerName(side)
		if d.faults.owed[side] && !slices.ContainsFunc(d.faults.recent, func(f Fault) bool { return f.Peer == peer }) {
			st.NoticesOwed = append(st.NoticesOwed, side)
		}
	}
	if d.store != nil {
		st.JournalSyncs = d.store.syncs()
	}
	if l := d.links.pred; l != nil && l.heardAt() != 0 {
		st.PredHeard = time.Unix(0, l.heardAt())
	}
	if l := d.links.succ; l != nil && l.heardAt() != 0 {
		st.SuccHeard = time.Unix(0, l.heardAt())
	}
	if d.links.pred == nil {
		st.PredWaiting = d.links.adm.alive()
	}
	for _, v := range d.view.View() {
		rs := RoundStatus{Round: v.Round, State: v.State, Ready: v.LocalReady,
			WaitingFor: protocol.WaitIn(d.role, v.State, v.LocalReady)}
		if ri := d.book.find(v.Round); ri != nil {
			rs.Since = ri.since
		}
		if ph, w, _ := d.view.Undo(v.Round); ph != protocol.PhaseNone {
			rs.Undo = undoDoing(ph, w) // undo.go
		}
		st.Rounds = append(st.Rounds, rs)
	}
	slices.SortFunc(st.Rounds, func(a, b RoundStatus) int { return strings.Compare(a.Round, b.Round) })
	d.steer.steerSnapshot(&st)
	d.faults.graceSnapshot(&st, d.view.Graces())
	st.PredSilent, st.SuccSilent = d.links.silentLink(d.links.pred), d.links.silentLink(d.links.succ)
	st.Finished = d.book.finished()
	return st
}

// Linger waits, after this node's rounds are done, until its predecessor
// has hung up and stayed away for grace, or ctx ends. A node's last message
// in a round is the exit-wave COMPLETE to its predecessor, and nothing
// acknowledges it: if the link drops with it in flight, the predecessor
// reconnects and re-sends its COMPLETE, and only a node still running can
// answer. A process that exits after its rounds should Linger first. The
// Head has no predecessor and returns at once.
func (n *Node) Linger(ctx context.Context, grace time.Duration) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var goneSince time.Time
	for {
		r, _ := n.lp.ask(input{kind: inPredUp})
		up := r.ok
		switch {
		case !n.role.HasPred():
			return nil
		case up:
			goneSince = time.Time{}
		case goneSince.IsZero():
			goneSince = time.Now()
		case time.Since(goneSince) >= grace:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close stops the node: it cancels running tasks' contexts, closes every
// connection and the listener, and waits for all its goroutines (so tasks
// must honour their context). Unfinished rounds end with StatusStopped.
// A node whose loop died of a panic (SetPanicHandler) is released all
// the same.
func (n *Node) Close() error {
	first := false
	n.closeOnce.Do(func() { first = true })
	if !first {
		<-n.lp.loopDone
		return nil
	}
	r, _ := n.lp.ask(input{kind: inClose})
	end := r.ok
	n.cancel()
	if n.ln != nil {
		n.ln.Close()
	}
	n.crew.wait() // the loop goes on meanwhile: what they post is taken
	if r, ok := n.lp.ask(input{kind: inStopAll}); ok {
		n.final = *r.snap
	}
	close(n.lp.stop)
	<-n.lp.loopDone // its last turn carried everything out: the journal is free
	if n.store != nil {
		n.store.close(end, n.log)
	}
	n.log.Info("node stopped")
	return nil
}

// closeLoop is the start of Close on the loop: nothing new starts, the
// links are shut (what is queued on them still goes out); true if the
// journal is to record a normal end. Loop only.
func (d *driver) closeLoop() bool {
	d.lp.closed = true
	d.book.close()
	end := d.endedNormally()
	for _, l := range []*link{d.links.pred, d.links.succ} {
		if l != nil {
			// After the lines this turn queued for it (a fault notice
			// sent as the link came up): they still go out.
			d.lp.cur.add(effect{kind: effShut, l: l})
		}
	}
	d.links.adm.closeAll()
	return end
}

// step feeds ev to the machine (through the stepper) and carries out the
// actions; cause is the fault the machine's policy carries out in them,
// if the caller knows it already (a halting report). Loop only.
func (d *driver) step(ev protocol.Event, cause *FaultError) error {
	return d.stepThen(ev, cause, nil)
}

// stepThen is step with before run between the step and its actions
// (promotePred makes the link current there). Loop only.
func (d *driver) stepThen(ev protocol.Event, cause *FaultError, before func()) error {
	d.lp.checkOnLoop("step")
	acts, err := d.st.step(ev, &d.lp.cur.recs)
	if err != nil {
		return err
	}
	if before != nil {
		before()
	}
	d.perform(acts, cause)
	return nil
}

// journalFailed stops a node whose journal cannot be written: acting on a
// change that is not on disk could run a task twice after a restart, so
// every unfinished round ends with a fault and the node does nothing more.
// Loop only.
func (d *driver) journalFailed(err error) {
	d.st.broken = fmt.Errorf("chainsync: state journal failed, the node stops here: %w", err)
	d.log.Error("cannot write the state journal; stopping every round (fix the disk, then restart the node: it resumes from the last record written)",
		"dir", d.cfg.StateDir, "err", err.Error())
	for _, e := range d.book.all() {
		e.ri.reported = true // the line above
		d.book.resolve(e.id, e.ri, Result{Round: e.id, Status: StatusFault, Err: d.st.broken})
	}
}

// perform carries out one step's actions in order. cause, the fault the
// machine's policy is carrying out, travels with them: given by the
// caller, or found by an action (a timeout, a notice) for those after it.
// Loop only.
func (d *driver) perform(acts []protocol.Action, cause *FaultError) {
	for i := range acts {
		if fe := d.act(&acts[i], cause); fe != nil {
			cause = fe
		}
	}
}

// act carries out one action; it returns the fault the action found, if
// any, the cause of the rounds the policy ends in the actions after it.
func (d *driver) act(a *protocol.Action, cause *FaultError) *FaultError {
	switch a.Kind {
	case protocol.ActSend:
		d.send(a.To, a.Msg, a.Resend)
	case protocol.ActRunTask:
		if d.tasks.quick {
			d.lp.cur.add(effect{kind: effQuick, round: a.Round}) // run at the end of the turn (loop.go)
		} else {
			d.tasks.startTask(a.Round)
		}
	case protocol.ActOpened:
		d.book.opened(a.Round, a.To == protocol.Pred)
	case protocol.ActTimeout:
		return d.faults.timedOut(a)
	case protocol.ActForget:
		d.book.forget(a.Round) // its waiters, if any, hold their record
	case protocol.ActState:
		ri := d.book.get(a.Round)
		ri.since = d.st.stepTime()
		if a.State == protocol.StateAborted {
			ri.abortedIn = a.From
		}
		if infoOn(d.log) {
			d.log.Info("state", "round", a.Round, "from", a.From.String(), "to", a.State.String())
		}
		d.lp.trace(TraceEvent{Kind: TraceState, Round: a.Round, From: a.From, To: a.State})
	case protocol.ActPeerRestarted:
		d.links.peerRestarted(a.To, a.Msg)
	case protocol.ActRunUndo, protocol.ActUndone:
		return d.undo.undoAct(a)
	case protocol.ActNotice:
		if !d.faults.noticeLive(*a.Msg.Note) { // liveness.go: a clearing, or a late notice
			return d.faults.noticeArrived(*a.Msg.Note, a.Started, a.From)
		}
	case protocol.ActGrace:
		d.faults.graceAct(a)
	case protocol.ActBack:
		d.faults.back(a)
	case protocol.ActSteer, protocol.ActGate, protocol.ActSkip:
		d.steer.steerAct(a)
	case protocol.ActSignReceipt, protocol.ActReceipts:
		d.rcpt.act(a) // receipts.go
	case protocol.ActDone:
		ri := d.book.get(a.Round)
		res := Result{Round: a.Round, Status: StatusDone, Undo: d.undo.outcomes[a.Round]}
		switch a.Outcome {
		case protocol.TaskFailed:
			res.Status, res.Err = StatusTaskFailed, &TaskError{Round: a.Round, Err: ri.cause, Timeout: ri.timedOut}
		case protocol.Aborted, protocol.NoExitWave:
			res.Status = StatusFault
			if ri.cause == nil && cause != nil {
				// The machine's policy ends the round for this fault.
				fe := *cause
				fe.Round, fe.State = a.Round, ri.abortedIn
				ri.cause, ri.reported = &fe, true
			}
			if res.Err = ri.cause; res.Err == nil {
				res.Err = errors.New("chainsync: round aborted (a round opened after the node halted for a fault ends at once: see the fault it logged)")
			}
			if a.Outcome == protocol.NoExitWave && !failedAfter(res.Err) {
				// The tasks after this node may have run: say so, not
				// that the round failed.
				res.Status, res.Err = StatusUndelivered, undelivered(&d.cfg, d.links.peerName(protocol.Succ), a.Round, res.Err)
			}
		case protocol.NotDelivered:
			fe := &FaultError{Round: a.Round, State: protocol.StateDone, Kind: FaultExitWaveUndelivered, Side: protocol.Pred,
				Peer: d.links.peerName(protocol.Pred), After: d.cfg.ExitWaveTimeout,
				Reason: "the exit wave was not delivered: the final COMPLETE could not be handed to the predecessor, which did not reconnect"}
			d.faults.record(fe.fault())
			res.Status, res.Err = StatusFault, fe
		}
		res = d.steer.steerResult(ri, res) // steer.go: a cancelled round
		if k := faultKindOf(res.Err); k != "" && res.Status != StatusCancelled {
			// Written with the turn's records: the journal (and a node
			// restarted on it) knows the fault the round really ended
			// with, whichever way it learned it (a notice, the undo wave,
			// its own task: task-failed or task-timeout). A cancel wrote
			// its own record.
			d.st.journalFault(journalFault(a.Round, k, res.Err))
		}
		d.book.resolve(a.Round, ri, res)
	}
	return nil
}

// send writes msg to the neighbour on side, if that link is up; if it is
// down the message is not lost: the machine re-sends it on LinkUp.
// Loop only.
func (d *driver) send(side protocol.Side, msg protocol.Message, resend bool) {
	l := d.links.succ
	if side == protocol.Pred {
		l = d.links.pred
	}
	if l == nil {
		// The machine re-sends the steering, grace and notice lines a link
		// missed when it is up again (a node whose link was down when a
		// grace passed still learns of it).
		switch msg.Cmd {
		case protocol.SteerLine:
			d.log.Info("link down; steering line goes when it is up", "to", side.String(), "steer", msg.Steer.String())
			return
		case protocol.Grace:
			d.log.Info("link down; restart grace line goes when it is up", "to", side.String(), "grace", msg.Grace.String())
			return
		case protocol.FaultNotice:
			d.faults.owed[side] = true
			d.log.Info("link down; fault notice goes when it is up", "to", side.String(), "notice", msg.Note.String())
			return
		}
		// Its send on LinkUp will be the first on that link, not a re-send.
		d.book.get(msg.Round).unsent[side] = msg.Cmd
		if side == protocol.Pred && msg.Cmd == protocol.Complete {
			d.log.Warn("predecessor link down; the final COMPLETE is handed over when it reconnects (the round is not done until then)",
				"round", msg.Round)
		} else {
			// Routine (a neighbour not up yet, or reconnecting): the machine
			// re-sends it when the link comes up.
			d.log.Info("link down; message will be sent on reconnect", "round", msg.Round, "msg", msg.Cmd.String(), "to", side.String())
		}
		d.lp.trace(TraceEvent{Kind: TraceSent, Side: side, Round: msg.Round, Msg: msg, Queued: true})
		return
	}
	if resend {
		// The machine re-sends the last message of each round when a link
		// comes up; one that never went out (the link was down when it was
		// sent) goes out for the first time now: not a re-send.
		if ri := d.book.find(msg.Round); ri != nil && ri.unsent[side] != 0 {
			resend = ri.unsent[side] != msg.Cmd
			ri.unsent[side] = 0
		}
	}
	if msg.Cmd == protocol.FaultNotice {
		d.faults.owed[side] = false // this one, and those it missed, go now
		if resend && d.faults.staleToBlamed(*msg.Note, d.links.peerName(side)) {
			return
		}
	}
	d.wbuf = wire.Append(d.wbuf[:0], msg, d.cfg.UnnamedColon)
	// Report before queueing, so that a log or trace never shows the
	// reply to a message before the message.
	if infoOn(d.log) {
		d.log.Info("sent", "round", msg.Round, "msg", msg.Cmd.String(), "to", side.String(), "resend", resend)
	}
	d.lp.trace(TraceEvent{Kind: TraceSent, Side: side, Peer: l.peer, Round: msg.Round, Msg: msg, Resend: resend})
	exitWave, mark := side == protocol.Pred && msg.Cmd == protocol.Complete, msg.Round
	if side == protocol.Pred && msg.Cmd == protocol.ReceiptLine {
		exitWave, mark = true, receiptMark(msg.Round, msg.Receipt.Node) // its handing reported (receipts.go)
	}
	d.lp.cur.line(l, d.wbuf, exitWave, mark)
}

// writeFailed closes a link whose write failed or timed out. Loop only.
func (lk *links) writeFailed(l *link, err error) {
	if lk.lp.closed {
		return
	}
	lk.log.Warn("write failed; closing link (everything unsent is re-sent on reconnect)", "to", l.side.String(), "peer", l.peer, "err", err)
	lk.drop(l, err)
}

// trace hands ev to Config.Trace. Loop only: the callbacks come one at a
// time, in the order of events. Without a callback it costs nothing: the
// event is copied to the heap (it escapes to the callbacks) only in
// traceTo.
func (lp *loop) trace(ev TraceEvent) {
	if lp.observe != nil || lp.traceFn != nil {
		lp.traceTo(ev)
	}
}

// traceTo is trace, with a callback to call. Loop only.
func (lp *loop) traceTo(ev TraceEvent) {
	if lp.observe != nil {
		ev.Time = time.Now()
		lp.observe(&ev) // the task's and the undo's times (receipts.go)
	}
	if lp.traceFn != nil {
		if ev.Time.IsZero() {
			ev.Time = time.Now()
		}
		ev.Node = lp.name
		lp.inCallback.Store(true) // as callback does, without a closure per event
		defer lp.leaveCallback()
		lp.traceFn(ev)
	}
}

// infoOn reports whether Info logs are wanted, so hot paths build no
// log arguments for a silent logger.
func infoOn(log *slog.Logger) bool { return log.Enabled(context.Background(), slog.LevelInfo) }
