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
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/transport"
	"github.com/chainsync-go/chainsync/wire"
)

// Node is one running member of a chain. Create it with Start; all its
// methods are safe for concurrent use.
type Node struct {
	cfg  Config
	undo undoState // the undo wave's outcomes (undo.go); the loop's
	rcpt *receipts // Config.Receipts (receipts.go); nil without; the loop's
	log  *slog.Logger
	plim *admitLimiter // rate-limits what peers can make the node log and trace (admission.go)
	role protocol.Role
	ln   net.Listener
	prev *prevHost // Config.PrevHostOnly

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	crew   *crew       // every goroutine of the node but the loop (crew.go)
	tasks  *taskRunner // runs the tasks and undos (task.go)

	// The loop (loop.go): its inbox, the channel that stops it, the one
	// it closes when it has ended; loopG is its goroutine's id, known
	// only to this package's tests (loopCheck).
	in       chan input
	stop     chan struct{}
	loopDone chan struct{}
	loopG    atomic.Uint64
	// inCallback is set while the loop is in a Config.Trace or OnHold
	// callback, which may call Snapshot: the loop is parked in it, and
	// cbMu holds it there until such a Snapshot has read the node.
	inCallback atomic.Bool
	cbMu       sync.Mutex
	closeOnce  sync.Once

	// Everything below belongs to the loop: only its goroutine reads or
	// writes it.
	closed   bool
	st       stepper     // the one caller of Machine.Step (step.go)
	view     machineView // the machine, read-only
	wbuf     []byte      // scratch for encoding
	pred     *link       // the current predecessor connection, nil when down
	succ     *link       // the current successor connection, nil when down
	adm      *admission  // the pending predecessor connections (admission.go)
	book     *roundBook  // the rounds' waiters and results (rounds.go)
	faults   *faultBook  // the recent faults, liveness, mismatches
	store    *store      // the state directory (store.go); nil without one
	cur      *batch      // what the turn's steps queued (loop.go)
	spare    *batch      // the other batch, reused
	queued   []input     // follow-ups to react to later in this turn (loop.go)
	flushing []*link     // links with lines queued in this turn
	quickRun []string    // scratch for runQuick
	starting []taskStart // tasks to start at the end of the turn
	clock    *clockState // the clock's state (health.go); nil without timing
	final    Snapshot    // the last Snapshot, taken by Close for calls after it
	// resumeFrom is the journal's state, for the loop's first input.
	resumeFrom *journal.State

	// Rounds: the rounds learned from the predecessor (Config.Follow),
	// queued for the application (follow.go).
	feed *roundFeed
	// refusedOnce: the successor's refusal of a first line was logged.
	refusedOnce bool
	steer       *steering // steering: holds and approvals (steer.go)
	// id is this node's identity line (identity.go), nil if it sends
	// none; dup the would-be predecessors that claim the current one's
	// place (duplicate.go).
	id  *identity
	dup dupState
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

	host  faultHost
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

// faultHost is what the fault book reaches of its node: the trace, the
// loop's follow-ups (a notice to announce), and a neighbour's name.
type faultHost interface {
	trace(ev TraceEvent)
	later(in input)
	peerName(side protocol.Side) string
}

// stateOf returns round id's state in the machine, 0 if it does not keep
// the round.
func (fb *faultBook) stateOf(id string) protocol.State {
	st, _ := fb.view.State(id)
	return st
}

// recordFault is the fault book's record of f (the parts' way to it).
// Loop only.
func (n *Node) recordFault(f Fault) { n.faults.record(f) }

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
	bad   func(n *Node, what string)
	fsync func(n *Node) // if set, called before every fsync
}

// checkOnLoop reports what to loopCheck if it runs off n's loop (an
// fsync may run after the loop has ended: Close's end record).
func (n *Node) checkOnLoop(what string) {
	p := loopCheck.Load()
	if p == nil {
		return
	}
	if p.goid() != n.loopG.Load() && (what != "fsync" || !n.loopEnded()) {
		p.bad(n, what)
	}
	if what == "fsync" && p.fsync != nil {
		p.fsync(n)
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
	fb.host.trace(TraceEvent{Kind: TraceFault, Fault: f.Kind, Round: f.Round, Side: f.Side, Peer: f.Peer, Origin: f.Origin, Err: errors.New(f.Err), Again: again})
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
func (n *Node) peerName(side protocol.Side) string {
	if side == protocol.Pred {
		if !n.role.HasPred() {
			return ""
		}
		if n.cfg.PrevName != "" {
			return n.cfg.PrevName
		}
		if n.pred != nil {
			return n.pred.peer
		}
		return n.cfg.Prev
	}
	if !n.role.HasSucc() {
		return ""
	}
	if n.cfg.NextName != "" {
		return n.cfg.NextName
	}
	return n.cfg.Next
}

// Start validates cfg, binds the listener (if the node has a predecessor)
// and starts dialing the successor (if it has one). The node then runs
// until Close. Rounds begin with Ready.
func Start(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.withDefaults()
	n := &Node{
		cfg:      cfg,
		role:     cfg.Role(),
		book:     &roundBook{byID: make(map[string]*roundInfo)},
		crew:     new(crew),
		faults:   new(faultBook),
		cur:      new(batch),
		spare:    new(batch),
		prev:     newPrevHost(&cfg),
		in:       make(chan input, inboxSize),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		log:      cfg.Logger,
	}
	// One task at a time: the tasks run in the order the Head opened the
	// rounds, which the READY wave carries down the chain.
	pc := protocol.Config{Role: n.role, MaxRounds: cfg.MaxRounds, KeepFinished: cfg.KeepFinished, Ordered: cfg.MaxParallelTasks == 1}
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
	pc.Self, pc.RestartGrace = selfLabel(&cfg, n.role), cfg.RestartGrace // liveness.go
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
	n.st = stepper{m: m, durable: cfg.StateDir != "",
		timing: pc.PhaseTimeout > 0 || pc.ExitWaveTimeout > 0 || pc.ConnectTimeout > 0 || pc.Silence > 0,
		epoch:  time.Now().Add(-time.Second)} // so that every At is positive
	n.view = m
	n.id = newIdentity(&n.cfg)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.tasks = newTaskRunner(&cfg, n.ctx, n.crew, n)
	n.feed = newRoundFeed()
	n.crew.spawn(func() { n.feed.run(n.ctx.Done()) })
	n.plim = newAdmitLimiter(n.log)
	if cfg.peerLogBurst > 0 {
		n.plim.burst = cfg.peerLogBurst
	}
	n.plim.untraced = n.traceUntraced
	n.adm = newAdmission(&cfg, n.plim, n.ctx.Done(), n.crew, n)
	n.crew.spawn(func() { n.plim.run(n.ctx.Done()) })
	// The state directory first: a second process for the same node is
	// told who holds it, rather than that the port is taken.
	st, err := n.openState()
	if err == nil {
		err = refuseRerun(&n.cfg, st)
	}
	if err != nil {
		n.cancel()
		if n.store != nil {
			n.store.j.Close()
		}
		return nil, err
	}

	if n.role.HasPred() {
		n.ln = cfg.Listener
		if n.ln == nil {
			listen := transport.Listen
			if cfg.listen != nil {
				listen = cfg.listen
			}
			ln, err := listen(n.ctx, cfg.Listen)
			if err != nil {
				n.cancel()
				if n.store != nil {
					n.store.j.Close()
				}
				return nil, fmt.Errorf("chainsync: cannot listen for the predecessor on %s: %w (is another process using the port?)", cfg.Listen, err)
			}
			n.ln = ln
		}
	}
	sec := "plain TCP (no TLS: use only on loopback or a trusted network)"
	if cfg.Secure != nil {
		sec = cfg.Secure.Describe()
	}
	attrs := []any{"role", n.role.String(), "links", sec}
	if n.ln != nil {
		attrs = append(attrs, "listen", n.ln.Addr().String())
		if cfg.Prev != "" {
			attrs = append(attrs, "prev", cfg.Prev)
		}
	}
	if cfg.Next != "" {
		attrs = append(attrs, "next", cfg.Next)
	}
	n.self = selfName(&n.cfg, n.ln, n.role)
	n.steer = &steering{host: n, view: n.view, book: n.book, store: n.store, log: n.log, self: n.self, role: n.role,
		approve: cfg.Approve, ext: extensionsOn(&n.cfg), dir: cfg.StateDir, policy: cfg.FaultPolicy, onHold: cfg.OnHold}
	if n.rcpt = newReceipts(&n.cfg, n, n.log); n.rcpt != nil {
		n.steer.decided = n.rcpt.decided
	}
	n.undo = undoState{host: n, faults: n.faults, book: n.book, log: n.log, on: cfg.Undo != nil, chain: cfg.Chain,
		policy: cfg.FaultPolicy, taskTimeout: cfg.TaskTimeout, resumeTask: cfg.ResumeTask}
	n.dup = dupState{host: n, view: n.view, book: n.book, log: n.log, plim: n.plim, heartbeat: cfg.Heartbeat,
		ext: extensionsOn(&n.cfg), self: n.self}
	fb := n.faults
	fb.host, fb.view, fb.book, fb.steer, fb.log = n, n.view, n.book, n.steer, n.log
	fb.self, fb.next, fb.ext = n.self, cfg.Next, extensionsOn(&n.cfg)
	fb.policy, fb.heartbeat, fb.connectTimeout = cfg.FaultPolicy, cfg.Heartbeat, cfg.ConnectTimeout
	if n.ln != nil {
		fb.listen = n.ln.Addr().String()
	}
	n.log.Info("node started", attrs...)

	if n.st.timing {
		n.clock = newClock(&cfg)
	}
	goSafe(n.run)
	n.resumeFrom = st
	n.ask(input{kind: inInit})
	cn := &connector{cfg: n.cfg, ctx: n.ctx, ln: n.ln, adm: n.adm, prev: n.prev, plim: n.plim, crew: n.crew, log: n.log, loop: n}
	if n.ln != nil {
		n.crew.spawn(cn.acceptLoop)
	}
	if n.role.HasSucc() {
		n.crew.spawn(cn.dialLoop)
	}
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
func (n *Node) initLoop() {
	n.steer.restoreSteer() // a node restarted while held is held (steer.go)
	if n.st.timing {
		// The machine learns the time: its timeouts count from now,
		// for the rounds restored from the journal too.
		if err := n.step(n.tick(false), nil); err != nil {
			n.log.Error("internal error: first tick", "err", err)
		}
	}
	if st := n.resumeFrom; st != nil {
		n.resumeFrom = nil
		n.resume(st)
		if n.rcpt != nil {
			n.rcpt.resume(st.TaskTimes) // receipts.go
		}
	}
}

// Ready tells the node it is locally ready for round ("" is the unnamed
// round). The node moves as soon as its predecessor is ready too.
func (n *Node) Ready(round string) error {
	if n.cfg.Rounds != nil && !n.cfg.Follow && !slices.Contains(n.cfg.Rounds, round) {
		return fmt.Errorf("chainsync: round %q is not in this node's configured rounds", round)
	}
	r, ok := n.ask(input{kind: inReady, round: round})
	if !ok {
		return ErrStopped
	}
	return r.err
}

// ready is Ready, on the loop.
func (n *Node) ready(round string) error {
	if n.closed {
		return ErrStopped
	}
	if ri := n.book.find(round); ri != nil && ri.finished() {
		return protocol.ErrRoundFinished // e.g. ended by a notice before this node was ready
	}
	err := n.step(protocol.LocalReady(round), nil)
	if err == nil {
		n.book.get(round)
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
func (n *Node) Wait(ctx context.Context, round string) (Result, error) {
	r, _ := n.ask(input{kind: inWait, round: round})
	ri := r.ri
	if ri == nil {
		return Result{Round: round, Status: StatusStopped, Err: ErrStopped}, ErrStopped
	}
	select {
	case <-ri.done:
		n.post(input{kind: inUnwait, round: round, ri: ri})
		if ri.res.Status == StatusStopped {
			return ri.res, ErrStopped
		}
		return ri.res, nil
	case <-ctx.Done():
		n.post(input{kind: inUnwait, round: round, ri: ri, flag: true})
		return Result{Round: round}, ctx.Err()
	}
}

// waitOn is the start of a Wait on round: its record, nil if the node is
// closed and has none. Loop only.
func (n *Node) waitOn(round string) *roundInfo { return n.book.waitOn(round, n.closed) }

// unwait is the end of a Wait on ri; gaveUp: its context ended first.
// Loop only.
func (n *Node) unwait(round string, ri *roundInfo, gaveUp bool) {
	_, known := n.view.State(round)
	n.book.unwait(round, ri, gaveUp, known)
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
	// JournalSyncs is how many fsyncs the state journal made since Start
	// (0 without Config.StateDir). A node syncs once for everything a
	// batch of events produced, so this grows slower than the records.
	JournalSyncs uint64
}

// Snapshot returns what the node is doing now: which links are up and
// where each unfinished round stands. A Config.Trace callback may call
// it.
func (n *Node) Snapshot() Snapshot {
	if n.inCallback.Load() {
		// The loop is in a callback: parked there until cbMu is
		// unlocked, so the node is read as if on the loop.
		n.cbMu.Lock()
		defer n.cbMu.Unlock()
		if n.inCallback.Load() {
			return n.snapshot()
		}
	}
	r, ok := n.ask(input{kind: inSnapshot})
	if !ok {
		<-n.loopDone
		return n.final
	}
	return *r.snap
}

// callback runs f, a Config callback, on the loop: a Snapshot called
// meanwhile (by f, or by a goroutine f waits for) reads the node at once,
// the loop being parked in f. Loop only.
func (n *Node) callback(f func()) {
	n.inCallback.Store(true)
	defer n.leaveCallback()
	f()
}

// leaveCallback ends callback (or trace's call of Config.Trace): once a
// Snapshot reading the node meanwhile is done. Loop only.
func (n *Node) leaveCallback() {
	n.cbMu.Lock()
	n.inCallback.Store(false)
	n.cbMu.Unlock()
}

// snapshot is Snapshot, on the loop.
func (n *Node) snapshot() Snapshot {
	st := Snapshot{Name: n.cfg.Name, Role: n.role, PredUp: n.pred != nil, SuccUp: n.succ != nil,
		PredPeer: n.peerName(protocol.Pred), SuccPeer: n.peerName(protocol.Succ)}
	st.Faults = slices.Clone(n.faults.recent)
	if n.store != nil {
		st.JournalSyncs = n.store.syncs()
	}
	if l := n.pred; l != nil && l.heardAt() != 0 {
		st.PredHeard = time.Unix(0, l.heardAt())
	}
	if l := n.succ; l != nil && l.heardAt() != 0 {
		st.SuccHeard = time.Unix(0, l.heardAt())
	}
	for _, v := range n.view.View() {
		rs := RoundStatus{Round: v.Round, State: v.State, Ready: v.LocalReady,
			WaitingFor: protocol.WaitIn(n.role, v.State, v.LocalReady)}
		if ri := n.book.find(v.Round); ri != nil {
			rs.Since = ri.since
		}
		if ph, w, _ := n.view.Undo(v.Round); ph != protocol.PhaseNone {
			rs.Undo = undoDoing(ph, w) // undo.go
		}
		st.Rounds = append(st.Rounds, rs)
	}
	slices.SortFunc(st.Rounds, func(a, b RoundStatus) int { return strings.Compare(a.Round, b.Round) })
	n.steer.steerSnapshot(&st)
	n.faults.graceSnapshot(&st, n.view.Graces())
	st.PredSilent, st.SuccSilent = n.silentLink(n.pred), n.silentLink(n.succ)
	st.Finished = n.book.finished()
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
		r, _ := n.ask(input{kind: inPredUp})
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
		<-n.loopDone
		return nil
	}
	r, _ := n.ask(input{kind: inClose})
	end := r.ok
	n.cancel()
	if n.ln != nil {
		n.ln.Close()
	}
	n.crew.wait() // the loop goes on meanwhile: what they post is taken
	if r, ok := n.ask(input{kind: inStopAll}); ok {
		n.final = *r.snap
	}
	close(n.stop)
	<-n.loopDone // its last turn carried everything out: the journal is free
	if n.store != nil {
		n.store.close(end, n.log)
	}
	n.log.Info("node stopped")
	return nil
}

// closeLoop is the start of Close on the loop: nothing new starts, the
// links are shut (what is queued on them still goes out); true if the
// journal is to record a normal end. Loop only.
func (n *Node) closeLoop() bool {
	n.closed = true
	end := n.endedNormally()
	for _, l := range []*link{n.pred, n.succ} {
		if l != nil {
			l.shut() // what is queued (a fault notice) still goes out
		}
	}
	n.adm.closeAll()
	return end
}

// stopAll ends every unfinished round stopped (Close). Loop only.
func (n *Node) stopAll() {
	for id, ri := range n.book.byID {
		n.resolve(id, ri, Result{Round: id, Status: StatusStopped, Err: ErrStopped})
	}
}

// step feeds ev to the machine (through the stepper) and carries out the
// actions; cause is the fault the machine's policy carries out in them,
// if the caller knows it already (a halting report). Loop only.
func (n *Node) step(ev protocol.Event, cause *FaultError) error {
	return n.stepThen(ev, cause, nil)
}

// stepThen is step with before run between the step and its actions
// (promotePred makes the link current there). Loop only.
func (n *Node) stepThen(ev protocol.Event, cause *FaultError, before func()) error {
	n.checkOnLoop("step")
	acts, err := n.st.step(ev, &n.cur.recs)
	if err != nil {
		return err
	}
	if before != nil {
		before()
	}
	n.perform(acts, cause)
	return nil
}

// saveSteerFile queues the steering file's content for the turn's
// write (store.go); the journal's error if it has failed. Loop only.
func (n *Node) saveSteerFile(data []byte) error {
	if n.st.broken != nil {
		return n.st.broken
	}
	n.cur.steer = data
	return nil
}

// journalFault queues a fault record, round ended by a fault of kind,
// for the turn's write, with a state directory that has not failed.
// Loop only.
func (n *Node) journalFault(round, kind string) {
	if n.store != nil && n.st.broken == nil {
		n.cur.faults = append(n.cur.faults, journal.Fault{Round: round, Kind: kind})
	}
}

// broken is the journal's error once it has failed. Loop only.
func (n *Node) broken() error { return n.st.broken }

// journalFailed stops a node whose journal cannot be written: acting on a
// change that is not on disk could run a task twice after a restart, so
// every unfinished round ends with a fault and the node does nothing more.
// Loop only.
func (n *Node) journalFailed(err error) {
	n.st.broken = fmt.Errorf("chainsync: state journal failed, the node stops here: %w", err)
	n.log.Error("cannot write the state journal; stopping every round (fix the disk, then restart the node: it resumes from the last record written)",
		"dir", n.cfg.StateDir, "err", err.Error())
	for id, ri := range n.book.byID {
		ri.reported = true // the line above
		n.resolve(id, ri, Result{Round: id, Status: StatusFault, Err: n.st.broken})
	}
}

// perform carries out one step's actions in order. cause, the fault the
// machine's policy is carrying out, travels with them: given by the
// caller, or found by an action (a timeout, a notice) for those after it.
// Loop only.
func (n *Node) perform(acts []protocol.Action, cause *FaultError) {
	for i := range acts {
		if fe := n.act(&acts[i], cause); fe != nil {
			cause = fe
		}
	}
}

// act carries out one action; it returns the fault the action found, if
// any, the cause of the rounds the policy ends in the actions after it.
func (n *Node) act(a *protocol.Action, cause *FaultError) *FaultError {
	switch a.Kind {
	case protocol.ActSend:
		n.send(a.To, a.Msg, a.Resend)
	case protocol.ActRunTask:
		if n.tasks.quick {
			n.cur.add(effect{kind: effQuick, round: a.Round}) // run at the end of the turn (loop.go)
		} else {
			n.startTask(a.Round)
		}
	case protocol.ActOpened:
		n.opened(a.Round, a.To == protocol.Pred)
	case protocol.ActTimeout:
		return n.faults.timedOut(a)
	case protocol.ActForget:
		n.book.forget(a.Round) // its waiters, if any, hold their record
	case protocol.ActState:
		ri := n.book.get(a.Round)
		ri.since = time.Now()
		if a.State == protocol.StateAborted {
			ri.abortedIn = a.From
		}
		if n.infoOn() {
			n.log.Info("state", "round", a.Round, "from", a.From.String(), "to", a.State.String())
		}
		n.trace(TraceEvent{Kind: TraceState, Round: a.Round, From: a.From, To: a.State})
	case protocol.ActPeerRestarted:
		n.peerRestarted(a.To, a.Msg)
	case protocol.ActRunUndo, protocol.ActUndone:
		return n.undo.undoAct(a)
	case protocol.ActNotice:
		if !n.faults.noticeLive(*a.Msg.Note) { // liveness.go: a clearing, or a late notice
			return n.faults.noticeArrived(*a.Msg.Note, a.Started, a.From)
		}
	case protocol.ActGrace:
		n.faults.graceAct(a)
	case protocol.ActBack:
		n.faults.back(a)
	case protocol.ActSteer, protocol.ActGate, protocol.ActSkip:
		n.steer.steerAct(a)
	case protocol.ActSignReceipt, protocol.ActReceipts:
		n.rcpt.act(a) // receipts.go
	case protocol.ActDone:
		ri := n.book.get(a.Round)
		res := Result{Round: a.Round, Status: StatusDone, Undo: n.undo.outcomes[a.Round]}
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
				res.Status, res.Err = StatusUndelivered, n.undelivered(a.Round, res.Err)
			}
		case protocol.NotDelivered:
			fe := &FaultError{Round: a.Round, State: protocol.StateDone, Kind: FaultExitWaveUndelivered, Side: protocol.Pred,
				Peer: n.peerName(protocol.Pred), After: n.cfg.ExitWaveTimeout,
				Reason: "the exit wave was not delivered: the final COMPLETE could not be handed to the predecessor, which did not reconnect"}
			n.recordFault(fe.fault())
			res.Status, res.Err = StatusFault, fe
		}
		res = n.steer.steerResult(ri, res) // steer.go: a cancelled round
		if k := faultKindOf(res.Err); k != "" && res.Status != StatusCancelled {
			// Written with the turn's records: the journal (and a node
			// restarted on it) knows the fault the round really ended
			// with, whichever way it learned it (a notice, the undo wave,
			// its own task: task-failed or task-timeout). A cancel wrote
			// its own record.
			n.journalFault(a.Round, string(k))
		}
		n.resolve(a.Round, ri, res)
	}
	return nil
}

// send writes msg to the neighbour on side, if that link is up; if it is
// down the message is not lost: the machine re-sends it on LinkUp.
// Loop only.
func (n *Node) send(side protocol.Side, msg protocol.Message, resend bool) {
	l := n.succ
	if side == protocol.Pred {
		l = n.pred
	}
	if l == nil {
		// The machine re-sends the steering, grace and notice lines a link
		// missed when it is up again (a node whose link was down when a
		// grace passed still learns of it).
		switch msg.Cmd {
		case protocol.SteerLine:
			n.log.Info("link down; steering line goes when it is up", "to", side.String(), "steer", msg.Steer.String())
			return
		case protocol.Grace:
			n.log.Info("link down; restart grace line goes when it is up", "to", side.String(), "grace", msg.Grace.String())
			return
		case protocol.FaultNotice:
			n.log.Info("link down; fault notice goes when it is up", "to", side.String(), "notice", msg.Note.String())
			return
		}
		// Its send on LinkUp will be the first on that link, not a re-send.
		n.book.get(msg.Round).unsent[side] = msg.Cmd
		if side == protocol.Pred && msg.Cmd == protocol.Complete {
			n.log.Warn("predecessor link down; the final COMPLETE is handed over when it reconnects (the round is not done until then)",
				"round", msg.Round)
		} else {
			// Routine (a neighbour not up yet, or reconnecting): the machine
			// re-sends it when the link comes up.
			n.log.Info("link down; message will be sent on reconnect", "round", msg.Round, "msg", msg.Cmd.String(), "to", side.String())
		}
		n.trace(TraceEvent{Kind: TraceSent, Side: side, Round: msg.Round, Msg: msg, Queued: true})
		return
	}
	if resend {
		// The machine re-sends the last message of each round when a link
		// comes up; one that never went out (the link was down when it was
		// sent) goes out for the first time now: not a re-send.
		if ri := n.book.find(msg.Round); ri != nil && ri.unsent[side] != 0 {
			resend = ri.unsent[side] != msg.Cmd
			ri.unsent[side] = 0
		}
	}
	n.wbuf = wire.Append(n.wbuf[:0], msg, n.cfg.UnnamedColon)
	// Report before queueing, so that a log or trace never shows the
	// reply to a message before the message.
	if n.infoOn() {
		n.log.Info("sent", "round", msg.Round, "msg", msg.Cmd.String(), "to", side.String(), "resend", resend)
	}
	n.trace(TraceEvent{Kind: TraceSent, Side: side, Peer: l.peer, Round: msg.Round, Msg: msg, Resend: resend})
	exitWave, mark := side == protocol.Pred && msg.Cmd == protocol.Complete, msg.Round
	if side == protocol.Pred && msg.Cmd == protocol.ReceiptLine {
		exitWave, mark = true, receiptMark(msg.Round, msg.Receipt.Node) // its handing reported (receipts.go)
	}
	n.cur.line(l, n.wbuf, exitWave, mark)
}

// writeFailed closes a link whose write failed or timed out. Loop only.
func (n *Node) writeFailed(l *link, err error) {
	if n.closed {
		return
	}
	n.log.Warn("write failed; closing link (everything unsent is re-sent on reconnect)", "to", l.side.String(), "peer", l.peer, "err", err)
	n.drop(l, err)
}

// trace hands ev to Config.Trace. Loop only: the callbacks come one at a
// time, in the order of events.
func (n *Node) trace(ev TraceEvent) {
	if n.rcpt != nil {
		ev.Time = time.Now()
		n.rcpt.observe(&ev) // the task's and the undo's times (receipts.go)
	}
	if n.cfg.Trace != nil {
		if ev.Time.IsZero() {
			ev.Time = time.Now()
		}
		ev.Node = n.cfg.Name
		n.inCallback.Store(true) // as callback does, without a closure per event
		defer n.leaveCallback()
		n.cfg.Trace(ev)
	}
}

// infoOn reports whether Info logs are wanted, so hot paths build no
// log arguments for a silent logger.
func (n *Node) infoOn() bool { return n.log.Enabled(context.Background(), slog.LevelInfo) }
