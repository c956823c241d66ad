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
	"time"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/transport"
	"github.com/chainsync-go/chainsync/wire"
)

// Node is one running member of a chain. Create it with Start; all its
// methods are safe for concurrent use.
type Node struct {
	cfg  Config
	log  *slog.Logger
	role protocol.Role
	ln   net.Listener

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	tasks  chan struct{} // semaphore: MaxParallelTasks

	mu      sync.Mutex
	closed  bool
	m       *protocol.Machine
	acts    []protocol.Action // scratch for Step
	wbuf    []byte            // scratch for encoding
	pred    *link             // the current predecessor connection, nil when down
	succ    *link             // the current successor connection, nil when down
	pending map[*link]bool    // accepted, not yet promoted to pred
	rounds  map[string]*roundInfo
	toRun   []taskStart    // tasks to start once mu is released (see unlock)
	over    []string       // finished rounds in rounds, oldest first (pruned past keepResults)
	down    [3]*time.Timer // per side: ConnectTimeout watchdog while down
	faults  []Fault        // the most recent faults, for Snapshot (at most keepFaults)
}

// keepFaults is how many recent faults Snapshot reports.
const keepFaults = 64

// recordFault logs f at ERROR, traces it and keeps it for Snapshot.
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
	n.log.Error("fault: "+f.Err, args...)
	n.trace(TraceEvent{Kind: TraceFault, Fault: f.Kind, Round: f.Round, Side: f.Side, Peer: f.Peer, Err: errors.New(f.Err)})
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

// keepResults is how many finished rounds' results Wait can still return.
const keepResults = 16384

// roundInfo is the driver's view of one round: its waiters and its timer.
type roundInfo struct {
	done  chan struct{}
	res   Result
	timer *time.Timer // PhaseTimeout
	cause error       // why the round is ending: the task's error or the fault
	ready bool        // this node was told it is locally ready
	since time.Time   // when the round entered its current state
}

// finished reports whether the round's result is in.
func (ri *roundInfo) finished() bool {
	select {
	case <-ri.done:
		return true
	default:
		return false
	}
}

// link is one connection to a neighbour.
type link struct {
	c    net.Conn
	side protocol.Side
	peer string
	r    *wire.Reader
	wdl  time.Time // when to refresh the write deadline
}

// Start validates cfg, binds the listener (if the node has a predecessor)
// and starts dialing the successor (if it has one). The node then runs
// until Close. Rounds begin with Ready.
func Start(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:     cfg,
		log:     cfg.Logger,
		role:    cfg.role(),
		tasks:   make(chan struct{}, cfg.MaxParallelTasks),
		pending: make(map[*link]bool),
		rounds:  make(map[string]*roundInfo),
	}
	pc := protocol.Config{Role: n.role, MaxRounds: cfg.MaxRounds}
	if cfg.Rounds != nil {
		set := make(map[string]bool, len(cfg.Rounds))
		for _, r := range cfg.Rounds {
			set[r] = true
		}
		pc.AcceptRound = func(r string) bool { return set[r] }
	}
	n.m = protocol.New(pc)
	n.ctx, n.cancel = context.WithCancel(context.Background())

	if n.role.HasPred() {
		n.ln = cfg.Listener
		if n.ln == nil {
			ln, err := transport.Listen(n.ctx, cfg.Listen)
			if err != nil {
				n.cancel()
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

	n.mu.Lock()
	if n.ln != nil {
		n.linkDown(protocol.Pred)
		n.wg.Add(1)
		go n.acceptLoop()
	}
	if n.role.HasSucc() {
		n.linkDown(protocol.Succ)
		n.wg.Add(1)
		go n.dialLoop()
	}
	n.mu.Unlock()
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
	n.mu.Lock()
	defer n.unlock()
	if n.closed {
		return ErrStopped
	}
	if n.cfg.Rounds != nil && !slices.Contains(n.cfg.Rounds, round) {
		return fmt.Errorf("chainsync: round %q is not in this node's configured rounds", round)
	}
	ri := n.round(round)
	if err := n.step(protocol.LocalReady(round)); err != nil {
		return err
	}
	ri.ready = true
	if st, _ := n.m.State(round); st == protocol.StateSync {
		n.armPhase(round, ri, st) // now waiting for the predecessor's READY
	}
	return nil
}

// Wait blocks until round is over at this node, or ctx ends. It may be
// called before or after the round ends: the results of the last 16384
// finished rounds are kept.
func (n *Node) Wait(ctx context.Context, round string) (Result, error) {
	n.mu.Lock()
	ri := n.round(round)
	n.mu.Unlock()
	select {
	case <-ri.done:
		return ri.res, nil
	case <-ctx.Done():
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
	Rounds         []RoundStatus // unfinished rounds, by round id
	Faults         []Fault       // the most recent faults, oldest first
}

// RoundStatus is one unfinished round in a Snapshot.
type RoundStatus struct {
	Round string
	State protocol.State // 0 if this node has not opened the round yet
	Since time.Time      // when the round entered State (or was first seen)
	Ready bool           // this node was told it is locally ready
	// WaitingFor is the message the round waits for ("READY", "START" or
	// "COMPLETE"), or "" when it waits for this node itself (to become
	// locally ready, or for its task); From is the side it must come from.
	WaitingFor string
	From       protocol.Side
}

// Doing says in words what the round is waiting for at this node.
func (r RoundStatus) Doing() string {
	switch r.State {
	case 0, protocol.StateSync:
		if !r.Ready {
			return "waiting to become locally ready"
		}
		return "locally ready; " + waitsFor(protocol.StateSync)
	case protocol.StateReady:
		return waitsFor(r.State) + " (the rest of the chain is not ready yet)"
	case protocol.StateWatch:
		return waitsFor(r.State) + " (an earlier task is running)"
	case protocol.StateStart:
		return "running its task"
	case protocol.StateComplete:
		return "task done; " + waitsFor(r.State) + " (the exit wave)"
	}
	return r.State.String()
}

// Snapshot returns what the node is doing now: which links are up and
// where each unfinished round stands.
func (n *Node) Snapshot() Snapshot {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := Snapshot{Name: n.cfg.Name, Role: n.role, PredUp: n.pred != nil, SuccUp: n.succ != nil,
		PredPeer: n.peerName(protocol.Pred), SuccPeer: n.peerName(protocol.Succ)}
	st.Faults = slices.Clone(n.faults)
	for id, ri := range n.rounds {
		if ri.finished() {
			continue
		}
		s, _ := n.m.State(id)
		rs := RoundStatus{Round: id, State: s, Since: ri.since, Ready: ri.ready}
		if (s != 0 || ri.ready) && n.waitsForNeighbour(max(s, protocol.StateSync)) {
			rs.WaitingFor = waitingFor(max(s, protocol.StateSync))
			rs.From = protocol.Pred
			if waitSide(s) == "successor" {
				rs.From = protocol.Succ
			}
		}
		st.Rounds = append(st.Rounds, rs)
	}
	slices.SortFunc(st.Rounds, func(a, b RoundStatus) int { return strings.Compare(a.Round, b.Round) })
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
		n.mu.Lock()
		up := n.pred != nil
		n.mu.Unlock()
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
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	for _, l := range []*link{n.pred, n.succ} {
		if l != nil {
			l.c.Close()
		}
	}
	for l := range n.pending {
		l.c.Close()
	}
	for _, t := range n.down {
		if t != nil {
			t.Stop()
		}
	}
	n.mu.Unlock()
	n.cancel()
	if n.ln != nil {
		n.ln.Close()
	}
	n.wg.Wait()
	n.mu.Lock()
	for id, ri := range n.rounds {
		n.resolve(id, ri, Result{Round: id, Status: StatusStopped, Err: ErrStopped})
	}
	n.mu.Unlock()
	n.log.Info("node stopped")
	return nil
}

// round returns the driver's record of id, creating it. Caller holds mu.
func (n *Node) round(id string) *roundInfo {
	ri := n.rounds[id]
	if ri == nil {
		ri = &roundInfo{done: make(chan struct{}), since: time.Now()}
		n.rounds[id] = ri
	}
	return ri
}

// step feeds ev to the machine and carries out the actions. Caller holds mu.
func (n *Node) step(ev protocol.Event) error {
	acts, err := n.m.Step(ev, n.acts[:0])
	if err != nil {
		return err
	}
	n.acts = acts
	n.perform(acts)
	return nil
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
		// The goroutine starts in unlock, once mu is free: started here,
		// a quick task would finish and block on mu while this goroutine
		// still holds it, paying a park and wake-up on every hop.
		n.wg.Add(1)
		start := taskStart{round: a.Round}
		select {
		case n.tasks <- struct{}{}: // a task slot is free: start now
			n.taskStarted(a.Round)
			start.slot = true
		default:
		}
		n.toRun = append(n.toRun, start)
	case protocol.ActState:
		ri := n.round(a.Round)
		ri.since = time.Now()
		if n.infoOn() {
			n.log.Info("state", "round", a.Round, "from", a.From.String(), "to", a.State.String())
		}
		n.trace(TraceEvent{Kind: TraceState, Round: a.Round, From: a.From, To: a.State})
		n.armPhase(a.Round, ri, a.State)
	case protocol.ActDone:
		ri := n.round(a.Round)
		res := Result{Round: a.Round, Status: StatusDone}
		switch a.Outcome {
		case protocol.TaskFailed:
			res.Status, res.Err = StatusTaskFailed, &TaskError{Round: a.Round, Err: ri.cause}
		case protocol.Aborted:
			res.Status = StatusFault
			if res.Err = ri.cause; res.Err == nil {
				res.Err = errors.New("chainsync: round aborted")
			}
		}
		n.resolve(a.Round, ri, res)
	}
}

// resolve ends a round for its waiters. Caller holds mu.
func (n *Node) resolve(id string, ri *roundInfo, res Result) {
	if ri.finished() {
		return
	}
	if ri.timer != nil {
		ri.timer.Stop()
	}
	ri.res = res
	close(ri.done)
	n.over = append(n.over, id)
	if len(n.over) > keepResults {
		delete(n.rounds, n.over[0])
		n.over = n.over[1:]
	}
	lvl := slog.LevelInfo
	if res.Status != StatusDone {
		lvl = slog.LevelError
	}
	args := []any{"round", id, "status", res.Status.String()}
	if res.Err != nil {
		args = append(args, "err", res.Err.Error())
	}
	n.log.Log(context.Background(), lvl, "round over", args...)
	n.trace(TraceEvent{Kind: TraceRoundDone, Round: id, Status: res.Status, Err: res.Err})
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
		n.log.Warn("link down; message will be sent on reconnect", "round", msg.Round, "msg", msg.Cmd.String(), "to", side.String())
		n.trace(TraceEvent{Kind: TraceSent, Side: side, Round: msg.Round, Msg: msg, Queued: true})
		return
	}
	n.wbuf = wire.Append(n.wbuf[:0], msg, n.cfg.UnnamedColon)
	// Refresh the write deadline only when half of it is used up: setting
	// it costs more than the write on the fast path.
	if now := time.Now(); now.After(l.wdl) {
		l.wdl = now.Add(n.cfg.WriteTimeout / 2)
		_ = l.c.SetWriteDeadline(now.Add(n.cfg.WriteTimeout))
	}
	// Report before writing, so that a log or trace never shows the reply
	// to a message before the message.
	if n.infoOn() {
		n.log.Info("sent", "round", msg.Round, "msg", msg.Cmd.String(), "to", side.String(), "resend", resend)
	}
	n.trace(TraceEvent{Kind: TraceSent, Side: side, Peer: l.peer, Round: msg.Round, Msg: msg, Resend: resend})
	if _, err := l.c.Write(n.wbuf); err != nil {
		n.log.Warn("write failed; closing link (the message is re-sent on reconnect)", "to", side.String(), "peer", l.peer, "err", err)
		n.drop(l, err)
	}
}

func (n *Node) trace(ev TraceEvent) {
	if n.cfg.Trace != nil {
		ev.Time = time.Now()
		ev.Node = n.cfg.Name
		n.cfg.Trace(ev)
	}
}

// taskStart is a task the machine asked to run; slot says it already
// holds a MaxParallelTasks slot.
type taskStart struct {
	round string
	slot  bool
}

// unlock releases mu, then starts the tasks that steps under it asked for.
// Every path that steps the machine unlocks with it.
func (n *Node) unlock() {
	run := n.toRun
	n.toRun = nil
	n.mu.Unlock()
	for _, t := range run {
		go n.runTask(t.round, t.slot)
	}
}

// infoOn reports whether Info logs are wanted, so hot paths build no
// log arguments for a silent logger.
func (n *Node) infoOn() bool { return n.log.Enabled(context.Background(), slog.LevelInfo) }

// taskStarted logs the start of a task. Caller holds mu.
func (n *Node) taskStarted(round string) {
	if n.infoOn() {
		n.log.Info("task started", "round", round)
	}
	n.trace(TraceEvent{Kind: TraceTaskStart, Round: round})
}

// runTask runs round's task; slot says it already holds a task slot.
func (n *Node) runTask(round string, slot bool) {
	defer n.wg.Done()
	if slot && n.ctx.Err() != nil { // closed before the task could start
		<-n.tasks
		return
	}
	if !slot {
		select {
		case n.tasks <- struct{}{}:
		case <-n.ctx.Done():
			return
		}
		n.mu.Lock()
		n.taskStarted(round)
		n.mu.Unlock()
	}
	err := n.cfg.Task(n.ctx, round)
	<-n.tasks

	n.mu.Lock()
	defer n.unlock()
	if n.closed {
		return
	}
	if err != nil {
		n.log.Error("task failed; halting the chain here (no COMPLETE is sent on)", "round", round, "err", err)
		n.round(round).cause = err
		n.recordFault(Fault{Kind: FaultTaskFailed, Round: round, Err: (&TaskError{Round: round, Err: err}).Error()})
	} else if n.infoOn() {
		n.log.Info("task finished", "round", round)
	}
	n.trace(TraceEvent{Kind: TraceTaskEnd, Round: round, Err: err})
	if err := n.step(protocol.TaskDone(round, err != nil)); err != nil {
		n.log.Error("internal error: task done", "round", round, "err", err)
	}
}

// armPhase (re)starts the round's PhaseTimeout for a state in which it waits
// for a neighbour. Caller holds mu.
func (n *Node) armPhase(id string, ri *roundInfo, st protocol.State) {
	if ri.timer != nil {
		ri.timer.Stop()
		ri.timer = nil
	}
	d := n.cfg.PhaseTimeout
	if d <= 0 || !n.waitsForNeighbour(st) {
		return
	}
	ri.timer = time.AfterFunc(d, func() {
		n.mu.Lock()
		defer n.unlock()
		if cur, _ := n.m.State(id); n.closed || cur != st {
			return
		}
		reason := fmt.Sprintf("no %s from the %s", waitingFor(st), waitSide(st))
		if st == protocol.StateSync && !ri.ready {
			reason = "the predecessor opened this round but this node never became locally ready for it"
		}
		n.abort(id, FaultPhaseTimeout, 0, reason, d)
	})
}

// watchOpened starts PhaseTimeout for a round a predecessor's READY just
// opened, so a round this node never claims cannot hold a MaxRounds slot
// for ever. Caller holds mu.
func (n *Node) watchOpened(msg protocol.Message) {
	if msg.Cmd != protocol.Ready || n.cfg.PhaseTimeout <= 0 {
		return
	}
	if st, _ := n.m.State(msg.Round); st == protocol.StateSync {
		if ri := n.round(msg.Round); ri.timer == nil {
			n.armPhase(msg.Round, ri, st)
		}
	}
}

// waitsForNeighbour reports whether a round in st is waiting on a
// neighbour rather than on this node.
func (n *Node) waitsForNeighbour(st protocol.State) bool {
	switch st {
	case protocol.StateSync:
		return n.role.HasPred()
	case protocol.StateReady, protocol.StateComplete:
		return n.role.HasSucc()
	case protocol.StateWatch:
		return true
	}
	return false
}

// waitsFor says what a round in st waits for, e.g. "waiting for START
// from the successor".
func waitsFor(st protocol.State) string {
	return "waiting for " + waitingFor(st) + " from the " + waitSide(st)
}

func waitingFor(st protocol.State) string {
	switch st {
	case protocol.StateReady:
		return "START"
	case protocol.StateWatch, protocol.StateComplete:
		return "COMPLETE"
	}
	return "READY"
}

func waitSide(st protocol.State) string {
	if st == protocol.StateReady || st == protocol.StateComplete {
		return "successor"
	}
	return "predecessor"
}

// abort ends round id with a fault of kind that blames side (0: this
// node). Caller holds mu.
func (n *Node) abort(id string, kind FaultKind, side protocol.Side, reason string, after time.Duration) {
	ri := n.round(id)
	st, _ := n.m.State(id)
	fe := &FaultError{Round: id, State: st, Kind: kind, Side: side, Peer: n.peerName(side), Reason: reason, After: after}
	ri.cause = fe
	n.recordFault(Fault{Kind: kind, Round: id, Side: side, Peer: fe.Peer, Err: fe.Error()})
	if err := n.step(protocol.Abort(id)); err != nil {
		// The machine never saw this round (e.g. not locally ready yet).
		n.resolve(id, ri, Result{Round: id, Status: StatusFault, Err: ri.cause})
	}
}
