package cli

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync/internal/bug"
	"github.com/chainsync-go/chainsync/internal/control"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/protocol"
)

// The node's side of the control protocol (internal/control): every
// node's --control takes steering requests (steer.go); only the Head's
// opens rounds.

// controlServer serves --control.
type controlServer struct {
	ln    net.Listener
	path  string // the unix socket, removed on close
	node  *chainsync.Node
	opMu  sync.Mutex
	op    *opener       // the Head's, once it serves (setOpener); nil elsewhere
	opSet chan struct{} // closed by setOpener
	log   *slog.Logger
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
	quit  chan struct{} // closed when the Head stops serving
	once  sync.Once     // close runs once
}

// listenControl binds --control (control.Listen) and serves it.
func listenControl(addr string, node *chainsync.Node, log *slog.Logger) (*controlServer, error) {
	ln, path, err := control.Listen(addr)
	if err != nil {
		return nil, err
	}
	cs := &controlServer{ln: ln, path: path, node: node, log: log, conns: map[net.Conn]bool{}, quit: make(chan struct{}), opSet: make(chan struct{})}
	if node.Role().HasPred() {
		log.Info("control endpoint up: steer this node with chainsync hold, release, approve or deny --control "+addr, "control", addr)
	} else {
		log.Info("control endpoint up: open rounds with chainsync open --control "+addr+", steer with chainsync hold, pause, cancel, ...", "control", addr)
	}
	cs.wg.Add(1)
	bug.Go(cs.accept)
	return cs, nil
}

func (cs *controlServer) accept() {
	defer cs.wg.Done()
	for {
		c, err := cs.ln.Accept()
		if err != nil {
			return
		}
		cs.mu.Lock()
		cs.conns[c] = true
		cs.mu.Unlock()
		cs.wg.Add(1)
		bug.Go(func() {
			defer cs.wg.Done()
			cs.serve(c)
			cs.mu.Lock()
			delete(cs.conns, c)
			cs.mu.Unlock()
			c.Close()
		})
	}
}

// serve answers one chainsync open.
func (cs *controlServer) serve(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReaderSize(io.LimitReader(c, control.MaxLine), control.MaxLine)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	enc := json.NewEncoder(c)
	req, err := control.ParseRequest(line)
	if err != nil {
		cs.log.Warn("control request refused", "client", c.RemoteAddr().String(), "err", err.Error())
		_ = enc.Encode(control.Reply{Error: err.Error()})
		// Another program's client (an HTTP request for a status
		// endpoint) sends more than a line: read it, so that closing
		// does not reset the connection before the answer arrives and
		// the client can say what it reached.
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		return
	}
	if req.Op == control.OpName { // which node this socket is (chainsync dashboard)
		name := cs.node.Snapshot().Name
		if name == "" {
			_ = enc.Encode(control.Reply{Error: "this node has no name (--name)"})
			return
		}
		_ = enc.Encode(control.Reply{Message: name})
		return
	}
	if req.Op != control.OpOpen && req.Op != control.OpRetry && req.Op != control.OpWait {
		_ = enc.Encode(cs.steer(req, c.RemoteAddr().String()))
		return
	}
	op := cs.opener() // steer.go
	if op == nil {
		why := "this node is not a Head that opens rounds: chainsync open goes to the Head's --control"
		if !cs.node.Role().HasPred() {
			why = "this Head does not open rounds on demand (start it with --serve, --every or --rounds-from)"
		}
		_ = enc.Encode(control.Reply{Error: why})
		return
	}
	waits := req.Wait || req.Op == control.OpWait
	var notify chan outcome
	if waits {
		notify = make(chan outcome, 1)
	}
	var id string
	switch req.Op {
	case control.OpRetry:
		id, err = op.retry(req, notify) // steer.go
	case control.OpWait:
		id, err = op.waitFor(req.Round, notify) // serve.go
	default:
		id, err = op.openRound(req.ID, !req.NoWait, notify)
	}
	if err != nil {
		_ = enc.Encode(control.Reply{Error: err.Error()})
		return
	}
	if req.Op == control.OpWait {
		cs.log.Info("chainsync open --wait-for waits for the round's outcome", "round", id, "client", c.RemoteAddr().String())
	} else {
		cs.log.Info("round opened by chainsync open", "round", id, "client", c.RemoteAddr().String())
	}
	if err := enc.Encode(control.Reply{Round: id}); err != nil || !waits {
		return
	}
	// Hang up early if the client goes away; else wait for the outcome.
	gone := make(chan struct{})
	bug.Go(func() {
		_, _ = io.Copy(io.Discard, c)
		close(gone)
	})
	stopped := &outcome{Outcome: control.Outcome{Round: id, Status: chainsync.StatusStopped.String(), Node: op.o.name,
		Reason: "the Head stopped before the round was over"}}
	select {
	case oc := <-notify:
		_ = enc.Encode(control.Reply{Round: id, Outcome: &oc.Outcome})
	case <-gone:
	case <-cs.quit:
		// The Head stops, maybe because of this very round (a failure
		// under --fault-policy halt): its outcome, if in, goes first.
		select {
		case oc := <-notify:
			stopped = &oc
		default:
		}
		_ = enc.Encode(control.Reply{Round: id, Outcome: &stopped.Outcome})
	}
}

// setOpener makes the control socket open rounds with op (the Head).
func (cs *controlServer) setOpener(op *opener) {
	cs.opMu.Lock()
	cs.op = op
	select {
	case <-cs.opSet:
	default:
		close(cs.opSet)
	}
	cs.opMu.Unlock()
}

func (cs *controlServer) close() { cs.once.Do(cs.closeNow) }

func (cs *controlServer) closeNow() {
	close(cs.quit)
	cs.ln.Close()
	// Let the clients waiting for an outcome have their answer.
	answered := make(chan struct{})
	bug.Go(func() {
		for {
			cs.mu.Lock()
			n := len(cs.conns)
			cs.mu.Unlock()
			if n == 0 {
				close(answered)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	select {
	case <-answered:
	case <-time.After(2 * time.Second):
	}
	cs.mu.Lock()
	for c := range cs.conns {
		c.Close()
	}
	cs.mu.Unlock()
	cs.wg.Wait()
	if cs.path != "" {
		_ = os.Remove(cs.path)
	}
}

const openUsage = `Usage: chainsync open --control ADDR [--id ID | --retry ID] [--wait] [--no-wait]
       chainsync open --control ADDR --wait-for ID

Asks a served Head (chainsync run --control ADDR) to open a round, and
prints the round's id. Without --id the Head makes a new id, unique and
sortable by time (e.g. 20261201T064500Z-3f9a). An id that was used already
is refused. When --max-open rounds are in flight, open waits for one to end
(or fails at once with --no-wait); while the chain is paused (chainsync
pause) it waits for chainsync resume (or fails with --no-wait).

--retry ID reopens a round that failed, faulted, was denied or cancelled,
under its own id: every node whose task for it had succeeded passes it on
without running it again ("already done here"), the node where it failed
and those after it run theirs, and it keeps its place in each node's
order. A round that ended done is refused ("done already", exit 1).

With --wait, open waits until the round is over in the whole chain and
says how it ended: exit 0 done; 3 a task failed; 4 a fault; the node where
it failed and why on stderr.

--wait-for ID opens nothing: it waits for round ID, opened already, as
--wait would have (an open --wait that was interrupted, or whose Head
restarted, is picked up this way): the same output and exit status. A
round that ended lately at the Head is answered at once; one the Head
neither has in flight nor ended lately is refused (exit 1).

Examples:
  chainsync open --control unix:/run/chainsync/control.sock
  chainsync open --control 127.0.0.1:7300 --id batch-0042 --wait
  chainsync open --control 127.0.0.1:7300 --wait-for batch-0042

Exit status: 0 opened (with --wait or --wait-for: done); 1 refused (id
used already, --max-open reached with --no-wait, no such round to wait
for, no Head at ADDR); 2 usage error; 3 a task failed (--wait); 4 fault
(--wait); 5 cancelled at the Head (chainsync cancel, --wait); 130 the
Head stopped first.

Flags:
`

type openOpts struct {
	control, id    string
	wait, noWait   bool
	connectTimeout time.Duration
	retry          string // --retry ID (steer.go)
	waitFor        string // --wait-for ID
}

func (o *openOpts) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.control, "control", "", "the Head's --control `ADDR`: unix:PATH or HOST:PORT (required)")
	fs.StringVar(&o.id, "id", "", "the round's `ID` (1-128 of A-Z a-z 0-9 - _ .); absent: the Head makes one")
	fs.BoolVar(&o.wait, "wait", false, "wait until the round is over in the whole chain; the exit status says how it ended")
	fs.BoolVar(&o.noWait, "no-wait", false, "fail (exit 1) instead of waiting when --max-open rounds are in flight")
	fs.DurationVar(&o.connectTimeout, "timeout", 10*time.Second, "how long to try to reach the Head")
	fs.StringVar(&o.waitFor, "wait-for", "", "wait for round `ID`, opened already (by an open --wait whose answer was lost, say), to be over in the whole chain, as --wait does: the same output and exit status")
	fs.StringVar(&o.retry, "retry", "", "reopen round `ID`, which failed, faulted, was denied or cancelled, under its own id: the nodes whose task for it succeeded pass it on without running it again; a round that ended done is refused")
}

func openMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("open", flag.ContinueOnError)
	quietFlags(fs)
	var o openOpts
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return flagFailed(stdout, stderr, fs, "open", err)
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "chainsync open: "+format+"\n(see chainsync open --help)\n", a...)
		return ExitUsage
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}
	if o.control == "" {
		return usage("--control is required: the Head's --control address")
	}
	if _, _, err := control.Network(o.control); err != nil {
		return usage("%v", err)
	}
	if o.id != "" && !protocol.ValidRound(o.id) {
		return usage("--id %q: use 1-128 of A-Z a-z 0-9 - _ .", o.id)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	retrying, waitingFor := given["retry"], given["wait-for"]
	if retrying && (o.id != "" || !protocol.ValidRound(o.retry)) {
		return usage("--retry %q: give one round id (1-128 of A-Z a-z 0-9 - _ .), and no --id", o.retry)
	}
	if waitingFor {
		switch {
		case !protocol.ValidRound(o.waitFor):
			return usage("--wait-for %q: give one round id (1-128 of A-Z a-z 0-9 - _ .)", o.waitFor)
		case o.id != "" || retrying || o.noWait:
			return usage("--wait-for waits for a round opened already: give it no --id, --retry or --no-wait")
		}
		o.wait = true // the same output and exit status as open --wait
	}
	creq := control.Request{Op: control.OpOpen, ID: o.id, Wait: o.wait, NoWait: o.noWait}
	switch {
	case retrying:
		creq.Op, creq.Round, creq.HasRound, creq.By = control.OpRetry, o.retry, true, defaultBy()
	case waitingFor:
		creq = control.Request{Op: control.OpWait, Round: o.waitFor, HasRound: true, Wait: true}
	}
	c, rep, code := ask(o.control, creq, o.connectTimeout, "open", "the Head", stderr)
	if code != ExitOK {
		return code
	}
	defer c.Close()
	if rep.Error != "" {
		fmt.Fprintf(stderr, "chainsync open: refused: %s\n", rep.Error)
		return ExitError
	}
	fmt.Fprintln(stdout, rep.Round)
	if !o.wait {
		return ExitOK
	}
	id := rep.Round
	rep, err := c.Receive()
	if err != nil || rep.Outcome == nil {
		fmt.Fprintf(stderr, "chainsync open: round %s: the Head went away before the round was over: %v (chainsync open --wait-for %s waits for it again)\n", id, err, id)
		return ExitError
	}
	oc := rep.Outcome
	if oc.Undo != "" {
		// How the undo wave ended (--undo): the line itself on standard
		// output, after the round id, and with the reason below.
		fmt.Fprintln(stdout, oc.Undo)
		defer fmt.Fprintf(stderr, "chainsync open: round %s: %s\n", oc.Round, oc.Undo)
	}
	switch oc.Status {
	case chainsync.StatusDone.String():
		return ExitOK
	case chainsync.StatusTaskFailed.String():
		fmt.Fprintf(stderr, "chainsync open: round %s: task failed at %s: %s\n", oc.Round, nodeLabel(oc.Node), oc.Reason)
		return ExitTaskFailed
	case chainsync.StatusFault.String():
		fmt.Fprintf(stderr, "chainsync open: round %s: fault at %s: %s\n", oc.Round, nodeLabel(oc.Node), oc.Reason)
		return ExitFault
	case chainsync.StatusUndelivered.String():
		// Not known to have failed: whom to ask before doing it again.
		fmt.Fprintf(stderr, "chainsync open: round %s: undelivered: %s\n", oc.Round, oc.Reason)
		return ExitFault
	case chainsync.StatusCancelled.String():
		fmt.Fprintf(stderr, "chainsync open: round %s: %s\n", oc.Round, oc.Reason) // "cancelled at the Head: REASON"
		return ExitCancelled
	}
	fmt.Fprintf(stderr, "chainsync open: round %s: %s: %s\n", oc.Round, oc.Status, oc.Reason)
	return ExitInterrupted
}

func nodeLabel(name string) string {
	if name == "" {
		return "the Head"
	}
	return "node " + name
}
