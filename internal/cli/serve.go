package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync/internal/bug"
	"github.com/chainsync-go/chainsync/internal/control"
	"github.com/chainsync-go/chainsync/internal/taskrun"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/protocol"
)

// A served node (--serve, or a Head that opens rounds with --rounds-from,
// --every or --control) stays up and takes part in every round: a node
// with a predecessor learns each round from the READY that opens it; the
// Head opens them. See docs/SERVE.md.

// keepServed is how many finished rounds a served node remembers (in
// memory, in its state directory, for a reused id): far more than can be
// in flight, few enough that a node that runs for months stays small.
const keepServed = 4096

// servedHeartbeat is --heartbeat for a served node that does not set it:
// the extension lines (heartbeats and fault notices) on, with a silent
// neighbour found after 6 s.
const servedHeartbeat = 2 * time.Second

// noteGiven records which of the flags whose default depends on others
// were given (on the command line or in the environment).
func (o *runOpts) noteGiven(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "heartbeat":
			o.heartbeatGiven = true
		case "chain":
			o.chainGiven = "--chain"
		}
		o.live.noteGiven(f)
	})
	// A variable set to nothing configures no flag (applyEnv), but an
	// empty chain is no chain: say so rather than run alone.
	if v, set := os.LookupEnv(envName("chain")); set && v == "" && o.chainGiven == "" {
		o.chainGiven = envName("chain")
	}
}

// serving reports whether the node runs as a long-lived node.
func (o *runOpts) serving() bool {
	return o.serve || o.opens()
}

// opens reports whether the Head opens rounds on demand (a --control at
// another node only steers it).
func (o *runOpts) opens() bool {
	return o.roundsFrom != "" || o.every > 0 || o.control != "" && !o.hasPred
}

// outcome is how a round ended, as the Head reports it to chainsync
// open, and how it ended at this node.
type outcome struct {
	control.Outcome
	// Local is how it ended at this node: a task that failed elsewhere
	// is a fault here (the chain halted, or the round ended).
	Local chainsync.Status
}

// causeDenied is the cause an undo wave gives a round whose task was
// denied (docs/UNDO.md).
const causeDenied chainsync.FaultKind = "denied"

// outcomeOf describes res, a round's result at this node (name). A round
// that failed elsewhere ended here by a fault notice, which says where
// and how.
func outcomeOf(res chainsync.Result, name string) outcome {
	oc := outcome{Outcome: control.Outcome{Round: res.Round, Status: res.Status.String(), Undo: res.Undo}, Local: res.Status}
	if res.Status == chainsync.StatusDone {
		return oc
	}
	oc.Node = name
	if res.Err != nil {
		oc.Reason = res.Err.Error()
	}
	var ue *chainsync.UndeliveredError
	if errors.As(res.Err, &ue) {
		// Not a failure: what is not known, and whom to ask.
		oc.Node, oc.Reason = ue.Beyond, ue.Known()
		return oc
	}
	var fe *chainsync.FaultError
	if errors.As(res.Err, &fe) {
		switch {
		case fe.Peer != "":
			oc.Node = fe.Peer
		case fe.Origin != "":
			oc.Node = fe.Origin
		}
		// A denial fails the round as a failed task does; with --undo its
		// wave names it "denied".
		if fe.Origin != "" && (fe.Cause == chainsync.FaultTaskFailed || fe.Cause == chainsync.FaultTaskTimeout || fe.Cause == causeDenied) {
			oc.Status = chainsync.StatusTaskFailed.String()
		}
	}
	return oc
}

// opener is the Head's account of the rounds it opened: at most max in
// flight, each id used once.
type opener struct {
	node *chainsync.Node
	o    *runOpts
	log  *slog.Logger
	max  int
	ctx  context.Context // ends when the node stops

	mu      sync.Mutex
	cond    *sync.Cond
	open    map[string][]chan outcome // rounds in flight -> who waits for the outcome
	results chan outcome              // every round's outcome, for the serve loop
	lastID  string
	closed  bool
	skipped int // --rounds-from lines that opened no round
}

func newOpener(ctx context.Context, node *chainsync.Node, o *runOpts, log *slog.Logger) *opener {
	op := &opener{node: node, o: o, log: log, max: o.maxOpen, ctx: ctx,
		open: map[string][]chan outcome{}, results: make(chan outcome, 16)}
	op.cond = sync.NewCond(&op.mu)
	return op
}

// errFull is opening a round beyond --max-open without waiting.
var errFull = errors.New("--max-open rounds are in flight")

// inFlight returns the number of rounds open now.
func (op *opener) inFlight() int {
	op.mu.Lock()
	defer op.mu.Unlock()
	return len(op.open)
}

// openRound opens round id ("" asks for a generated id): it waits for a
// free slot under --max-open if wait, else fails with errFull; it refuses
// an id in flight or already finished here. notify, if not nil, receives
// the round's outcome. It returns the id.
func (op *opener) openRound(id string, wait bool, notify chan outcome) (string, error) {
	if err := op.waitUnpaused(wait); err != nil { // chainsync pause (steer.go)
		return "", err
	}
	op.mu.Lock()
	for len(op.open) >= op.max && !op.closed {
		if !wait {
			op.mu.Unlock()
			return "", fmt.Errorf("%w (%d): try again later, or raise --max-open", errFull, op.max)
		}
		op.cond.Wait()
	}
	if op.closed {
		op.mu.Unlock()
		return "", chainsync.ErrStopped
	}
	gen := id == ""
	if gen {
		id = op.newID()
	}
	if !protocol.ValidRound(id) || id == "" {
		op.mu.Unlock()
		return "", fmt.Errorf("round id %q: use 1-128 of A-Z a-z 0-9 - _ . (a dot, a dash, an underscore)", id)
	}
	if _, dup := op.open[id]; dup {
		op.mu.Unlock()
		return "", fmt.Errorf("round %s is already open: a round id is used once", id)
	}
	var subs []chan outcome
	if notify != nil {
		subs = append(subs, notify)
	}
	op.open[id] = subs
	op.mu.Unlock()

	// The Head's own readiness for the round (--ready-cmd, --ready-file)
	// comes before the round is opened on the wire.
	if err := waitReady(op.ctx, id, op.o, op.log); err != nil {
		op.finish(outcome{Outcome: control.Outcome{Round: id, Status: chainsync.StatusStopped.String()}, Local: chainsync.StatusStopped})
		return "", err
	}
	err := op.node.Ready(id)
	if errors.Is(err, protocol.ErrRoundFinished) {
		op.mu.Lock()
		delete(op.open, id)
		op.cond.Broadcast()
		op.mu.Unlock()
		return "", fmt.Errorf("round %s was used already (it is finished at this node): a round id is used once; choose another id, leave --id out for a new one, or reopen it with chainsync open --retry %[1]s if it did not end done", id)
	}
	if err != nil {
		op.mu.Lock()
		delete(op.open, id)
		op.cond.Broadcast()
		op.mu.Unlock()
		return "", err
	}
	op.log.Info("round opened", "round", id, "in_flight", op.inFlight())
	bug.Go(func() { op.watch(id) })
	return id, nil
}

// adopt counts a round that is already open at the node (resumed from
// --state-dir, or given with --round/--rounds) as in flight.
func (op *opener) adopt(id string) {
	op.mu.Lock()
	if _, ok := op.open[id]; ok {
		op.mu.Unlock()
		return
	}
	op.open[id] = nil
	op.mu.Unlock()
	bug.Go(func() { op.watch(id) })
}

// waitFor has notify receive the outcome of round id, opened already
// (chainsync open --wait-for): one in flight when it ends, one that ended
// lately here at once. A round this Head neither has in flight nor ended
// lately is refused: there is nothing to wait for.
func (op *opener) waitFor(id string, notify chan outcome) (string, error) {
	if !protocol.ValidRound(id) || id == "" {
		return "", fmt.Errorf("round id %q: use 1-128 of A-Z a-z 0-9 - _ . (a dot, a dash, an underscore)", id)
	}
	op.mu.Lock()
	if subs, ok := op.open[id]; ok {
		op.open[id] = append(subs, notify)
		op.mu.Unlock()
		return id, nil
	}
	op.mu.Unlock()
	for _, r := range op.node.Snapshot().Finished {
		if r.Round != id {
			continue
		}
		// Its result is kept at the node: Wait returns it at once.
		ctx, cancel := context.WithTimeout(op.ctx, 10*time.Second)
		defer cancel()
		res, err := op.node.Wait(ctx, id)
		if err != nil && res.Status == 0 {
			return "", err
		}
		notify <- outcomeOf(res, op.o.name) // buffered
		return id, nil
	}
	return "", fmt.Errorf("round %s is not in flight at this Head and did not end here lately: nothing to wait for (chainsync journal at the Head tells how an older round ended)", id)
}

// watch waits for the round's outcome at the Head, which is its outcome in
// the whole chain.
func (op *opener) watch(id string) {
	res, _ := op.node.Wait(context.Background(), id)
	op.finish(outcomeOf(res, op.o.name))
}

func (op *opener) finish(oc outcome) {
	op.mu.Lock()
	subs := op.open[oc.Round]
	delete(op.open, oc.Round)
	op.cond.Broadcast()
	op.mu.Unlock()
	for _, ch := range subs {
		ch <- oc // buffered
	}
	select {
	case op.results <- oc:
	case <-op.ctx.Done():
	}
}

// stop wakes every caller waiting for a slot; no more rounds open.
func (op *opener) stop() {
	op.mu.Lock()
	op.closed = true
	op.cond.Broadcast()
	op.mu.Unlock()
}

// newID returns a new round id: the time in UTC to the second, then four
// hex digits that grow within the second (starting at random), so ids are
// unique and sort by time, e.g. 20261201T064500Z-3f9a. Caller holds mu.
func (op *opener) newID() string {
	for {
		now := time.Now().UTC()
		stamp := now.Format("20060102T150405Z")
		var n uint16
		if prev, ok := strings.CutPrefix(op.lastID, stamp+"-"); ok {
			var v uint16
			if _, err := fmt.Sscanf(prev, "%04x", &v); err == nil && v < 0xffff {
				n = v + 1
			} else {
				time.Sleep(time.Until(now.Truncate(time.Second).Add(time.Second)))
				continue
			}
		} else {
			var b [2]byte
			_, _ = rand.Read(b[:])
			n = binary.BigEndian.Uint16(b[:]) & 0x7fff
		}
		id := fmt.Sprintf("%s-%04x", stamp, n)
		op.lastID = id
		if _, dup := op.open[id]; !dup {
			return id
		}
	}
}

// readRounds opens a round for every line of r (an empty line: a new
// generated id), waiting for a free slot under --max-open before it reads
// on. It returns at the end of r or when ctx ends.
func (op *opener) readRounds(ctx context.Context, r io.Reader, name string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	line := 0
	for sc.Scan() {
		line++
		id := strings.TrimSpace(sc.Text())
		if ctx.Err() != nil {
			return
		}
		if _, err := op.openRound(id, true, nil); err != nil {
			if errors.Is(err, chainsync.ErrStopped) || ctx.Err() != nil {
				return
			}
			op.log.Error("--rounds-from: cannot open this round; skipped", "file", name, "line", line, "err", err.Error())
			op.mu.Lock()
			op.skipped++
			op.mu.Unlock()
		}
	}
	if err := sc.Err(); err != nil {
		op.log.Error("--rounds-from: read failed; no more rounds from it", "file", name, "line", line+1, "err", err.Error())
	}
}

// tick opens a round with a generated id every d, skipping (and logging)
// a tick when --max-open rounds are in flight.
func (op *opener) tick(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := op.openRound("", false, nil); err != nil {
			if errors.Is(err, errFull) {
				op.log.Warn("--every: tick skipped, --max-open rounds are in flight", "max_open", op.max)
			} else if errors.Is(err, errPaused) {
				op.log.Info("--every: tick skipped, the chain is paused (chainsync resume)")
			} else if ctx.Err() == nil && !errors.Is(err, chainsync.ErrStopped) {
				op.log.Error("--every: cannot open a round", "err", err.Error())
			}
		}
	}
}

// waitReady waits until this node is locally ready for round (--ready-cmd
// or --ready-file, {round} replaced by the id); at once without either.
// It fails only when ctx ends.
func waitReady(ctx context.Context, round string, o *runOpts, log *slog.Logger) error {
	if err := o.workerUp(ctx); err != nil { // --worker: its hello first (workercmd.go)
		return err
	}
	check := func() bool { return true }
	switch {
	case o.readyCmd != "":
		check = func() bool {
			return taskrun.RunShell(ctx, o.readyCmd, "CHAINSYNC_ROUND="+round, "CHAINSYNC_NODE="+o.name) == nil
		}
	case o.readyFile != "":
		path := readyPath(o.readyFile, round)
		check = func() bool { _, err := os.Stat(path); return err == nil }
	}
	if check() { // the usual case: no ticker on every round's path
		return nil
	}
	log.Info("not locally ready yet; checking again every "+o.readyInterval.String(), "round", round)
	t := time.NewTicker(o.readyInterval)
	defer t.Stop()
	for !check() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// readyPath is --ready-file for round: every {round} replaced by its id.
func readyPath(file, round string) string { return strings.ReplaceAll(file, "{round}", round) }

// serveRun runs a served node until it is stopped (exit 130), a round
// fails under --fault-policy halt (exit 3 or 4), or, at a Head reading
// --rounds-from without --serve, the file ends and its rounds are over
// (exit 0, or the worst outcome). rounds are the rounds configured up
// front, whose readiness run already started.
func serveRun(ctx context.Context, node *chainsync.Node, rounds []string, o *runOpts, log *slog.Logger,
	sigs <-chan os.Signal, stop func(os.Signal) int) int {
	halt := o.faultPolicy != "wait"
	results := make(chan outcome, 64)
	watched := map[string]bool{}
	var wmu sync.Mutex
	watch := func(id string) {
		wmu.Lock()
		defer wmu.Unlock()
		if watched[id] {
			return
		}
		watched[id] = true
		bug.Go(func() {
			res, _ := node.Wait(context.Background(), id)
			select {
			case results <- outcomeOf(res, o.name):
			case <-ctx.Done():
			}
		})
	}
	forget := func(id string) {
		wmu.Lock()
		delete(watched, id)
		wmu.Unlock()
	}
	pending := func() int {
		wmu.Lock()
		defer wmu.Unlock()
		return len(watched)
	}

	var op *opener
	// eof is closed at the end of --rounds-from. The reader closes its own
	// channel: the loop below may stop looking at eof, never close it.
	eof := make(chan struct{})
	if node.Role().HasPred() {
		for _, id := range rounds {
			watch(id)
		}
		for _, r := range node.Snapshot().Rounds { // resumed from --state-dir
			watch(r.Round)
		}
		bug.Go(func() {
			for id := range node.Rounds() {
				watch(id)
				bug.Go(func() { becomeReady(ctx, node, id, o, log) })
			}
		})
	} else {
		op = newOpener(ctx, node, o, log)
		defer op.stop()
		results = op.results
		for _, id := range rounds {
			op.adopt(id)
		}
		for _, r := range node.Snapshot().Rounds { // resumed from --state-dir
			op.adopt(r.Round)
		}
		if o.roundsFrom != "" {
			bug.Go(func() {
				defer close(eof)
				r, name := io.Reader(os.Stdin), "standard input"
				if o.roundsFrom != "-" {
					f, err := os.Open(o.roundsFrom)
					if err != nil {
						log.Error("--rounds-from: cannot open the file; no rounds from it", "err", err.Error())
						return
					}
					defer f.Close()
					r, name = f, o.roundsFrom
				}
				op.readRounds(ctx, r, name)
				if ctx.Err() != nil {
					return
				}
				switch {
				case !o.serve:
					log.Info("--rounds-from: end of input; finishing the rounds in flight, then exiting", "file", name)
				case o.control != "" || o.every > 0:
					log.Info("--rounds-from: end of input; serving on (--serve): rounds from --control or --every, until stopped", "file", name)
				default:
					log.Info("--rounds-from: end of input; serving on (--serve) until stopped", "file", name)
				}
			})
		}
		if o.every > 0 {
			bug.Go(func() { op.tick(ctx, o.every) })
		}
		if o.ctl != nil {
			o.ctl.setOpener(op) // started by run: chainsync open now opens rounds
			defer o.ctl.close()
		}
	}
	// Without --serve the end of --rounds-from ends the Head once its
	// rounds are over; with it, the Head serves on until it is stopped.
	var fileDone <-chan struct{}
	if o.roundsFrom != "" && !o.serve {
		fileDone = eof
	}
	if fileDone != nil {
		log.Info("opening a round for each line of --rounds-from; exiting once its end is read and its rounds are over")
	} else {
		log.Info("serving: taking part in every round until stopped (SIGINT or SIGTERM)")
	}
	code := ExitOK
	ended := false // --rounds-from ended: exit once no round is in flight
	// halting: under halt a round failed; the node stops once no round is
	// left unfinished here (the machine ended the others, but a failed
	// round's undo wave, --undo, still runs to its end).
	halting := false
	var recheck <-chan time.Time
	for {
		wait := fileDone
		if ended {
			wait = nil
		}
		select {
		case s := <-sigs:
			return stop(s)
		case <-wait:
			ended = true
		case <-recheck:
		case oc := <-results:
			forget(oc.Round)
			if c := served(oc, op != nil, halt, log); c != ExitOK {
				code = worse(code, c)
				if halt && !halting {
					halting = true
					t := time.NewTicker(200 * time.Millisecond)
					defer t.Stop()
					recheck = t.C
				}
			}
		}
		if halting && len(node.Snapshot().Rounds) == 0 {
			// Every round is over here, but the results of some may not
			// have been read yet: the round whose task failed here (exit
			// 3) outranks the rounds the halt ended with it (exit 4),
			// whichever of them came first.
			return lastResults(results, pending, forget, code, func(oc outcome) int { return served(oc, op != nil, halt, log) })
		}
		if ended && op.inFlight() == 0 {
			log.Info("--rounds-from ended and every round it opened is over; exiting")
			op.mu.Lock()
			skipped := op.skipped
			op.mu.Unlock()
			if skipped > 0 && code == ExitOK {
				// A rerun of a used file must not look like a success.
				log.Error("--rounds-from: some of its lines opened no round (the errors above say why); exit 2", "skipped", skipped)
				return ExitUsage
			}
			return code
		}
	}
}

// lastResultsWait bounds how long a halting node waits for the results of
// rounds that are over but not yet read (a round it never heard of has
// none to give).
const lastResultsWait = 500 * time.Millisecond

// lastResults reads the results still coming once every round is over
// at a halting node, until none is pending or lastResultsWait has
// passed, and returns code made worse by each (take says its exit code).
func lastResults(results <-chan outcome, pending func() int, forget func(string), code int, take func(outcome) int) int {
	t := time.NewTimer(lastResultsWait)
	defer t.Stop()
	for pending() > 0 {
		select {
		case oc := <-results:
			forget(oc.Round)
			code = worse(code, take(oc))
		case <-t.C:
			return code
		}
	}
	return code
}

// checkServe checks the flags of a served node; hasPred says whether the
// node has a predecessor (only the Head opens rounds).
func (o *runOpts) checkServe(hasPred bool) error {
	if o.serve && !hasPred && !o.opens() && o.round == "" && o.rounds == 0 {
		return usagef("--serve: this node is the Head, which opens the rounds: add --rounds-from FILE|-, --every D or --control ADDR")
	}
	if o.opens() && hasPred {
		return usagef("--rounds-from and --every open rounds, which only the Head does (this node has a predecessor): give them to the Head, and --serve to the other nodes")
	}
	if o.every < 0 {
		return usagef("--every must not be negative")
	}
	if o.every > 0 && o.every < time.Millisecond {
		return usagef("--every %v is too short: use at least 1ms", o.every)
	}
	if o.serving() && (o.maxOpen < 1 || o.maxOpen > 100000) {
		return usagef("--max-open %d: use 1..100000", o.maxOpen)
	}
	if o.control != "" {
		if _, _, err := control.Network(o.control); err != nil {
			return usageError{err.Error()}
		}
		if !o.insecureControl && !control.Local(o.control) {
			return usagef("--control %s: other machines can reach that address, and the control socket has no authentication: anyone who connects could open, hold, cancel or retry rounds. Use unix:PATH (mode 0600) or a loopback address such as 127.0.0.1:PORT (reach it over ssh), or add --insecure-control if everyone on that network may steer the chain", o.control)
		}
	} else if o.insecureControl {
		return usagef("--insecure-control without --control: it lets --control listen beyond loopback")
	}
	if o.roundsFrom != "" && o.roundsFrom != "-" {
		f, err := os.Open(o.roundsFrom)
		if err != nil {
			return usagef("--rounds-from %s: %v (give a file of round ids, one a line, or - for standard input)", o.roundsFrom, err)
		}
		f.Close()
	}
	return nil
}

// served reports a round's outcome at a served node and returns its exit
// code (ExitOK for a round done or stopped).
func served(oc outcome, head, halt bool, log *slog.Logger) int {
	switch oc.Local {
	case chainsync.StatusDone:
		if head {
			log.Info("round done in the whole chain", "round", oc.Round)
		}
		return ExitOK
	case chainsync.StatusStopped:
		return ExitOK
	case chainsync.StatusCancelled:
		log.Warn("round cancelled at the Head; serving on", "round", oc.Round, "reason", oc.Reason)
		return ExitOK
	}
	c := ExitFault
	if oc.Local == chainsync.StatusTaskFailed {
		c = ExitTaskFailed // this node's own task
	}
	if oc.Local == chainsync.StatusUndelivered {
		how := "serving on (--fault-policy wait)"
		if halt {
			how = "stopping (--fault-policy halt)"
		}
		log.Warn("round undelivered: "+oc.Reason+"; "+how, "round", oc.Round, "status", oc.Status, "node", oc.Node)
		return c
	}
	if halt {
		log.Error("round failed; stopping (--fault-policy halt)", "round", oc.Round, "status", oc.Status, "node", oc.Node)
	} else {
		log.Error("round failed; serving on (--fault-policy wait)", "round", oc.Round, "status", oc.Status, "node", oc.Node)
	}
	return c
}
