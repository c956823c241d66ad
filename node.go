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
	log  *slog.Logger
	plim *admitLimiter // rate-limits what peers can make the node log and trace (admission.go)
	role protocol.Role
	ln   net.Listener
	prev *prevHost // Config.PrevHostOnly

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	tasks  chan struct{} // semaphore: MaxParallelTasks

	// mu guards what follows; take it with lock and release it with
	// unlock, which carries out what the steps under it queued (lock.go).
	mu      sync.Mutex
	closed  bool
	m       *protocol.Machine
	acts    []protocol.Action // scratch for Step
	wbuf    []byte            // scratch for encoding
	pred    *link             // the current predecessor connection, nil when down
	succ    *link             // the current successor connection, nil when down
	pending map[*link]bool    // accepted, not yet promoted to pred
	// rounds is what the driver keeps for each round the machine keeps
	// (its waiters and result), created when the round is first asked
	// about or opened and dropped when the machine forgets the round
	// (ActForget), plus rounds that only a Wait has asked about.
	rounds map[string]*roundInfo
	recent []string // the last keepHistory rounds that ended, oldest first, for Snapshot
	faults []Fault  // the most recent faults, for Snapshot (at most keepFaults)
	j      *journal.Journal
	broken error      // the journal failed: the node acts no more
	cur    *batch     // what steps queued, carried out by unlock
	spare  *batch     // the other batch, reused
	acting bool       // a goroutine is carrying batches out (in unlock)
	idle   *sync.Cond // signalled when acting ends

	// A durable node's committer goroutine (lock.go): woken by commit,
	// stopped by commitQuit, closes commitDone.
	commit, commitQuit, commitDone chan struct{}

	// Used only by the goroutine acting.
	flushing []*link
	quickRun []string
	starting []taskStart // tasks carried out, to start once mu is free

	inside atomic.Int32  // goroutines holding or waiting for mu, or acting
	holder atomic.Uint64 // test build: the goroutine holding mu (lockCheck)

	nmu       sync.Mutex   // guards notes
	notes     []*note      // log records and trace events not yet handed over
	noteSpare []*note      // the other notes array, reused (held with emu)
	nnotes    atomic.Int32 // len(notes)
	emu       sync.Mutex   // held while handing notes over, one at a time

	// Rounds: the rounds learned from the predecessor (Config.Follow),
	// queued for handOutRounds, which hands them to the application.
	roundsCh  chan string
	roundsSig chan struct{}
	roundsQ   []string
	notices   []protocol.Notice // neighbours' notices, acted on once the step's actions are done
	timeouts  []protocol.Action // the machine's timeouts, acted on once the step's actions are done
	// timing: some timeout or heartbeats are configured, so every event
	// carries the time since epoch (a second before Start) and the clock
	// goroutine ticks the machine (health.go).
	timing bool
	epoch  time.Time
	// mismatched: the configuration mismatches reported, each once.
	mismatched map[mismatchKey]bool
	// refusedOnce: the successor's refusal of a first line was logged.
	refusedOnce bool
}

// keepFaults is how many recent faults Snapshot reports.
const keepFaults = 64

// recordFault logs f (at ERROR; a neighbour's restart at WARN), traces it
// and keeps it for Snapshot.
// Caller holds mu.
func (n *Node) recordFault(f Fault) {
	f.Time = time.Now()
	if len(n.faults) == keepFaults {
		n.faults = slices.Delete(n.faults, 0, 1)
	}
	n.faults = append(n.faults, f)
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
		n.log.Warn("neighbour restarted: "+f.Err, args...)
	case FaultChainHalted:
		n.log.Error("halted: "+f.reason()+"; this node runs no task in the round", args...)
	case FaultChainFault:
		n.log.Warn("fault elsewhere in the chain: "+f.reason()+" (fault policy wait: keeping the round)", args...)
	default:
		n.log.Error("fault: "+f.Err, args...)
		if ri := n.rounds[f.Round]; ri != nil {
			ri.reported = true
		}
	}
	n.trace(TraceEvent{Kind: TraceFault, Fault: f.Kind, Round: f.Round, Side: f.Side, Peer: f.Peer, Origin: f.Origin, Err: errors.New(f.Err)})
	n.announce(f)
}

// peerName names the neighbour on side: its configured name, else its
// address. Caller holds mu (or the fields are immutable).
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
		cfg:     cfg,
		role:    cfg.Role(),
		tasks:   make(chan struct{}, cfg.MaxParallelTasks),
		pending: make(map[*link]bool),
		rounds:  make(map[string]*roundInfo),
		cur:     new(batch),
		spare:   new(batch),
		prev:    newPrevHost(&cfg),
	}
	// Everything the node logs is handed to cfg.Logger in order, never
	// while it holds its lock (lock.go).
	n.log = slog.New(noteHandler{n: n, h: cfg.Logger.Handler()})
	n.idle = sync.NewCond(nodeLocker{n})
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
	pc.Extensions = cfg.Heartbeat > 0
	// The timeouts are the machine's, in the time the driver's events
	// carry (docs/DESIGN.md, "Time").
	pc.PhaseTimeout, pc.ExitWaveTimeout, pc.ConnectTimeout = cfg.PhaseTimeout, cfg.ExitWaveTimeout, cfg.ConnectTimeout
	if cfg.Heartbeat > 0 {
		pc.Silence = 3 * cfg.Heartbeat
	}
	n.timing = pc.PhaseTimeout > 0 || pc.ExitWaveTimeout > 0 || pc.ConnectTimeout > 0 || pc.Silence > 0
	n.epoch = time.Now().Add(-time.Second) // so that every At is positive
	n.m = protocol.New(pc)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.roundsCh = make(chan string)
	n.roundsSig = make(chan struct{}, 1)
	n.wg.Add(1)
	go n.handOutRounds()
	n.plim = newAdmitLimiter(n.log)
	if cfg.peerLogBurst > 0 {
		n.plim.burst = cfg.peerLogBurst
	}
	n.plim.untraced = n.traceUntraced
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.plim.run(n.ctx.Done()) }()
	// The state directory first: a second process for the same node is
	// told who holds it, rather than that the port is taken.
	st, err := n.openState()
	if err == nil {
		err = n.refuseRerun(st)
	}
	if err != nil {
		n.cancel()
		if n.j != nil {
			n.j.Close()
		}
		return nil, err
	}

	if n.role.HasPred() {
		n.ln = cfg.Listener
		if n.ln == nil {
			ln, err := transport.Listen(n.ctx, cfg.Listen)
			if err != nil {
				n.cancel()
				if n.j != nil {
					n.j.Close()
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
	n.log.Info("node started", attrs...)

	if n.j != nil {
		n.commit = make(chan struct{}, 1)
		n.commitQuit, n.commitDone = make(chan struct{}), make(chan struct{})
		go n.committer()
	}
	n.lock()
	if n.timing {
		// The machine learns the time: its timeouts count from now, for
		// the rounds restored from the journal too.
		if err := n.step(n.tick(false)); err != nil {
			n.log.Error("internal error: first tick", "err", err)
		}
		n.wg.Add(1)
		go n.clock()
	}
	if n.ln != nil {
		n.wg.Add(1)
		go n.acceptLoop()
	}
	if n.role.HasSucc() {
		n.wg.Add(1)
		go n.dialLoop()
	}
	if st != nil {
		n.resume(st)
	}
	n.unlock()
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

// Ready tells the node it is locally ready for round ("" is the unnamed
// round). The node moves as soon as its predecessor is ready too.
func (n *Node) Ready(round string) error {
	n.lock()
	defer n.unlock()
	if n.closed {
		return ErrStopped
	}
	if n.cfg.Rounds != nil && !n.cfg.Follow && !slices.Contains(n.cfg.Rounds, round) {
		return fmt.Errorf("chainsync: round %q is not in this node's configured rounds", round)
	}
	ri := n.round(round)
	if ri.finished() {
		return protocol.ErrRoundFinished // e.g. halted by a notice before this node was ready
	}
	if err := n.step(protocol.LocalReady(round)); err != nil {
		return err
	}
	ri.ready = true
	return nil
}

// Wait blocks until round is over at this node, or ctx ends. It may be
// called before or after the round ends: the results of the last
// Config.KeepFinished (16384) finished rounds are kept.
//
// A round that ends because the node was closed returns its Result with
// StatusStopped and the error ErrStopped; so does Wait on a closed node.
// Waiting on a round that never starts holds nothing once ctx ends.
func (n *Node) Wait(ctx context.Context, round string) (Result, error) {
	n.lock()
	ri := n.rounds[round]
	if ri == nil && n.closed {
		n.unlock()
		return Result{Round: round, Status: StatusStopped, Err: ErrStopped}, ErrStopped
	}
	if ri == nil {
		ri = n.round(round)
	}
	ri.waiters++
	n.unlock()
	select {
	case <-ri.done:
		n.lock()
		ri.waiters--
		n.unlock()
		if ri.res.Status == StatusStopped {
			return ri.res, ErrStopped
		}
		return ri.res, nil
	case <-ctx.Done():
		n.lock()
		ri.waiters--
		// A round nobody started and nobody waits for any more leaves no
		// trace (a Wait on a mistyped round id must not leak).
		if ri.state == 0 && !ri.ready && ri.waiters == 0 && !ri.finished() && n.rounds[round] == ri {
			delete(n.rounds, round)
		}
		n.unlock()
		return Result{Round: round}, ctx.Err()
	}
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
	// JournalSyncs is how many fsyncs the state journal made since Start
	// (0 without Config.StateDir). A node syncs once for everything a
	// batch of events produced, so this grows slower than the records.
	JournalSyncs uint64
}

// Snapshot returns what the node is doing now: which links are up and
// where each unfinished round stands.
func (n *Node) Snapshot() Snapshot {
	n.lock()
	defer n.unlock()
	st := Snapshot{Name: n.cfg.Name, Role: n.role, PredUp: n.pred != nil, SuccUp: n.succ != nil,
		PredPeer: n.peerName(protocol.Pred), SuccPeer: n.peerName(protocol.Succ)}
	st.Faults = slices.Clone(n.faults)
	if n.j != nil {
		st.JournalSyncs = n.j.Syncs()
	}
	if l := n.pred; l != nil && l.heardAt() != 0 {
		st.PredHeard = time.Unix(0, l.heardAt())
	}
	if l := n.succ; l != nil && l.heardAt() != 0 {
		st.SuccHeard = time.Unix(0, l.heardAt())
	}
	for id, ri := range n.rounds {
		if ri.finished() {
			continue
		}
		s := ri.state
		rs := RoundStatus{Round: id, State: s, Since: ri.since, Ready: ri.ready,
			WaitingFor: protocol.WaitIn(n.role, max(s, protocol.StateSync), ri.ready)}
		st.Rounds = append(st.Rounds, rs)
	}
	// Rounds a predecessor opened that this node has no record of yet.
	for _, id := range n.m.Unfinished() {
		if _, ok := n.rounds[id]; !ok {
			st.Rounds = append(st.Rounds, RoundStatus{Round: id, State: protocol.StateSync})
		}
	}
	slices.SortFunc(st.Rounds, func(a, b RoundStatus) int { return strings.Compare(a.Round, b.Round) })
	for _, id := range n.recent {
		ri := n.rounds[id]
		if ri == nil || !ri.finished() {
			continue // the id was used again since
		}
		rr := RoundResult{Round: id, Status: ri.res.Status, Opened: ri.opened, Ended: ri.ended}
		if ri.res.Err != nil {
			rr.Err = ri.res.Err.Error()
		}
		st.Finished = append(st.Finished, rr)
	}
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
		n.lock()
		up := n.pred != nil
		n.unlock()
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
func (n *Node) Close() error {
	n.lock()
	if n.closed {
		n.unlock()
		return nil
	}
	n.closed = true
	end := n.endedNormally()
	for _, l := range []*link{n.pred, n.succ} {
		if l != nil {
			l.shut() // what is queued (a fault notice) still goes out
		}
	}
	for l := range n.pending {
		l.c.Close()
	}
	n.unlock()
	n.cancel()
	if n.ln != nil {
		n.ln.Close()
	}
	n.wg.Wait()
	n.lock()
	for id, ri := range n.rounds {
		n.resolve(id, ri, Result{Round: id, Status: StatusStopped, Err: ErrStopped})
	}
	n.unlock()
	n.lock()
	n.waitIdle() // everything queued is carried out: the journal is free
	j := n.j
	n.unlock()
	if j != nil {
		// Nothing steps any more: the journal is this goroutine's.
		if end {
			n.recordEnd(j)
		}
		j.Close()
	}
	if n.commitQuit != nil {
		close(n.commitQuit)
		<-n.commitDone
	}
	n.log.Info("node stopped")
	return nil
}

// step feeds ev to the machine, stamped with the time if the node keeps
// time, and carries out the actions. Caller holds mu.
func (n *Node) step(ev protocol.Event) error {
	if n.timing && ev.At == 0 {
		ev.At = time.Since(n.epoch)
	}
	acts, err := n.stepSaved(ev, n.acts[:0])
	if err != nil {
		return err
	}
	n.acts = acts
	n.perform(acts)
	n.actOnTimeouts()
	n.actOnNotices()
	return nil
}

// actOnNotices applies the fault policy to the notices a step brought,
// after its actions (ending a round steps the machine again). Caller
// holds mu.
func (n *Node) actOnNotices() {
	for len(n.notices) > 0 {
		note := n.notices[0]
		n.notices = n.notices[1:]
		n.noticeArrived(note)
	}
}

// stepSaved feeds ev to the machine and, with a state directory, queues
// the step's records ahead of its actions: unlock writes and syncs them
// before it carries out anything queued after them (docs/DESIGN.md,
// "Restarts and durable state": fsync, then act). Once the journal has
// failed the node stops acting: it returns the error and no actions.
// Caller holds mu.
func (n *Node) stepSaved(ev protocol.Event, out []protocol.Action) ([]protocol.Action, error) {
	if n.broken != nil {
		return out, n.broken
	}
	start := len(out)
	out, err := n.m.Step(ev, out)
	if err != nil || n.j == nil {
		return out, err
	}
	for _, a := range out[start:] {
		if a.Kind == protocol.ActSave {
			n.cur.recs = append(n.cur.recs, a.Record)
		}
	}
	return out, nil
}

// journalFailed stops a node whose journal cannot be written: acting on a
// change that is not on disk could run a task twice after a restart, so
// every unfinished round ends with a fault and the node does nothing more.
// Caller holds mu.
func (n *Node) journalFailed(err error) {
	n.broken = fmt.Errorf("chainsync: state journal failed, the node stops here: %w", err)
	n.log.Error("cannot write the state journal; stopping every round (fix the disk, then restart the node: it resumes from the last record written)",
		"dir", n.cfg.StateDir, "err", err.Error())
	for id, ri := range n.rounds {
		ri.reported = true // the line above
		n.resolve(id, ri, Result{Round: id, Status: StatusFault, Err: n.broken})
	}
}

// perform carries out actions in order. Caller holds mu.
func (n *Node) perform(acts []protocol.Action) {
	for i := range acts {
		n.act(&acts[i])
	}
}

func (n *Node) act(a *protocol.Action) {
	switch a.Kind {
	case protocol.ActSend:
		n.send(a.To, a.Msg, a.Resend)
	case protocol.ActRunTask:
		if n.quickTasks() {
			n.queue(effect{kind: effQuick, round: a.Round}) // run by unlock, without mu
		} else {
			n.startTask(a.Round)
		}
	case protocol.ActOpened:
		n.opened(a.Round, a.To == protocol.Pred)
		if ri := n.rounds[a.Round]; ri != nil {
			ri.state = protocol.StateSync
		}
	case protocol.ActTimeout:
		n.timeouts = append(n.timeouts, *a)
	case protocol.ActForget:
		delete(n.rounds, a.Round) // its waiters, if any, hold their record
	case protocol.ActState:
		ri := n.round(a.Round)
		ri.since = time.Now()
		ri.state = a.State
		if n.infoOn() {
			n.log.Info("state", "round", a.Round, "from", a.From.String(), "to", a.State.String())
		}
		n.trace(TraceEvent{Kind: TraceState, Round: a.Round, From: a.From, To: a.State})
	case protocol.ActPeerRestarted:
		n.peerRestarted(a.To, a.Msg)
	case protocol.ActNotice:
		n.notices = append(n.notices, *a.Msg.Note)
	case protocol.ActDone:
		ri := n.round(a.Round)
		res := Result{Round: a.Round, Status: StatusDone}
		switch a.Outcome {
		case protocol.TaskFailed:
			res.Status, res.Err = StatusTaskFailed, &TaskError{Round: a.Round, Err: ri.cause, Timeout: ri.timedOut}
		case protocol.Aborted:
			res.Status = StatusFault
			if res.Err = ri.cause; res.Err == nil {
				res.Err = errors.New("chainsync: round aborted")
			}
		case protocol.NotDelivered:
			fe := &FaultError{Round: a.Round, State: protocol.StateDone, Kind: FaultExitWaveUndelivered, Side: protocol.Pred,
				Peer: n.peerName(protocol.Pred), After: n.cfg.ExitWaveTimeout,
				Reason: "the exit wave was not delivered: the final COMPLETE could not be handed to the predecessor, which did not reconnect"}
			n.recordFault(fe.fault())
			res.Status, res.Err = StatusFault, fe
		}
		n.resolve(a.Round, ri, res)
	}
}

// send writes msg to the neighbour on side, if that link is up; if it is
// down the message is not lost: the machine re-sends it on LinkUp.
// Caller holds mu.
func (n *Node) send(side protocol.Side, msg protocol.Message, resend bool) {
	l := n.succ
	if side == protocol.Pred {
		l = n.pred
	}
	if l == nil {
		if msg.Cmd == protocol.FaultNotice {
			// Notices are not re-sent: a neighbour that is away learns of
			// the fault from the notices of those that are not.
			n.log.Info("link down; fault notice not sent that way", "to", side.String(), "notice", msg.Note.String())
			return
		}
		// Its send on LinkUp will be the first on that link, not a re-send.
		n.round(msg.Round).unsent[side] = msg.Cmd
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
		if ri := n.rounds[msg.Round]; ri != nil && ri.unsent[side] != 0 {
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
	exitWave := side == protocol.Pred && msg.Cmd == protocol.Complete
	n.queueLine(l, n.wbuf, exitWave, msg.Round)
}

// writeFailed closes a link whose write failed or timed out.
func (n *Node) writeFailed(l *link, err error) {
	n.lock()
	defer n.unlock()
	if n.closed {
		return
	}
	n.log.Warn("write failed; closing link (everything unsent is re-sent on reconnect)", "to", l.side.String(), "peer", l.peer, "err", err)
	n.drop(l, err)
}

// trace queues ev for Config.Trace, which gets it once n.mu is released
// (lock.go).
func (n *Node) trace(ev TraceEvent) {
	if n.cfg.Trace != nil {
		ev.Time = time.Now()
		ev.Node = n.cfg.Name
		n.addNote(&note{trace: ev})
	}
}

// infoOn reports whether Info logs are wanted, so hot paths build no
// log arguments for a silent logger.
func (n *Node) infoOn() bool { return n.log.Enabled(context.Background(), slog.LevelInfo) }

// abort reports a fault of kind in round id that blames side (0: this
// node) and ends the round with it. Caller holds mu.
func (n *Node) abort(id string, kind FaultKind, side protocol.Side, reason string, after time.Duration) {
	fe := &FaultError{Round: id, State: n.stateOf(id), Kind: kind, Side: side, Peer: n.peerName(side), Reason: reason, After: after}
	n.recordFault(fe.fault())
	n.endRound(id, fe)
}

// endRound ends round id with the fault fe, which the caller has just
// recorded (recordFault). Caller holds mu.
func (n *Node) endRound(id string, fe *FaultError) {
	ri := n.round(id)
	ri.cause, ri.reported = fe, true
	if n.j != nil && n.broken == nil && !ri.finished() {
		// Written with the batch, before the abort's record: a restarted
		// node then reports the fault the round really ended with.
		n.cur.faults = append(n.cur.faults, journal.Fault{Round: id, Kind: string(fe.Kind)})
	}
	if err := n.step(protocol.Abort(id)); err != nil {
		// The machine never saw this round (e.g. not locally ready yet).
		n.resolve(id, ri, Result{Round: id, Status: StatusFault, Err: ri.cause})
	}
}
