package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/internal/bug"
	"github.com/chainsync-go/chainsync/internal/control"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
)

// Steering commands (docs/STEERING.md): chainsync hold, release, approve,
// deny, pause, resume and cancel talk to one node's --control socket with
// one request line each; the node answers once it has taken the request
// (journalled with --state-dir) or with why it refused it.

// steerCmd describes one steering command.
type steerCmd struct {
	name, summary, usage string
	round                bool // --round ID
	roundRequired        bool
	reason               bool // --reason TEXT
	headOnly             bool // pause, resume, cancel
}

const steerCommon = `
Who asks is recorded with the request (--by, default the user's name),
and shows in chainsync status, /status and the log of every node.

Exit status: 0 the node took the request; 1 it refused it (the reason on
stderr), or no node answers at ADDR; 2 usage error.

Flags:
`

var steerCmds = []steerCmd{
	{name: "hold", summary: "stop a node from starting tasks until release", reason: true,
		usage: `Usage: chainsync hold --control ADDR [--reason TEXT]

Holds the node whose --control is ADDR: it starts no task until chainsync
release (a task running now finishes, and its COMPLETE goes on). The node
keeps heartbeating and tells the chain, so no phase timeout, silence or
connect fault fires anywhere because of the hold; every node's status
says "held at NODE since HH:MM (TEXT)". --on-hold runs at the node. With
--state-dir the hold is journalled: a node restarted while held stays held.

Example:
  chainsync hold --control unix:/run/chainsync/b.sock --reason "change window at 10:00"
`},
	{name: "release", summary: "undo hold: the node's tasks start again", reason: true,
		usage: `Usage: chainsync release --control ADDR [--reason TEXT]

Releases a node held with chainsync hold: the task whose turn has come
starts at once.

Example:
  chainsync release --control unix:/run/chainsync/b.sock
`},
	{name: "approve", summary: "let the task waiting for an approval (run --approve) start", round: true, reason: true,
		usage: `Usage: chainsync approve --control ADDR [--round ID] [--reason TEXT]

At a node started with --approve, each task waits, once its turn has come
(its predecessor's COMPLETE arrived), for an approval. approve lets the
round waiting now (or round ID) start its task. A round that is not
waiting is refused, with the reason. With --state-dir the approval is
journalled before the task starts. Who approved and why show in the
node's log and status ("approved at C (round batch-0042) at 10:02 (row
counts checked), by ann").

Example:
  chainsync approve --control unix:/run/chainsync/c.sock --round batch-0042 --reason "row counts checked"
`},
	{name: "deny", summary: "fail the round waiting for an approval, as a failed task would", round: true, reason: true,
		usage: `Usage: chainsync deny --control ADDR [--round ID] [--reason TEXT]

Fails the round waiting for an approval at the node (or round ID, whose
task has not started there) as a failed task would: that node exits 3
(task-failed), the fault policy and the fault notice are those of a
failed task, and the reason is in every node's log and --on-fault hook.

Example:
  chainsync deny --control unix:/run/chainsync/c.sock --reason "smoke test failed"
`},
	{name: "pause", summary: "at the Head: open no new round, hold every node before its next task", reason: true, headOnly: true,
		usage: `Usage: chainsync pause --control ADDR [--reason TEXT]

At the Head (its --control): opens no new round until chainsync resume
(--every skips its ticks and logs it, --rounds-from stops reading,
chainsync open waits, or fails with --no-wait), and holds every node of
the chain before its next task; running tasks finish. No fault fires
anywhere because of the pause. With --state-dir it is journalled.

Example:
  chainsync pause --control unix:/run/chainsync/head.sock --reason "incident 4711"
`},
	{name: "resume", summary: "at the Head: undo pause", reason: true, headOnly: true,
		usage: `Usage: chainsync resume --control ADDR [--reason TEXT]

Undoes chainsync pause at the Head: rounds open again and every node's
tasks start, in the order they always run.

Example:
  chainsync resume --control unix:/run/chainsync/head.sock
`},
	{name: "cancel", summary: "at the Head: end a round everywhere", round: true, roundRequired: true, reason: true, headOnly: true,
		usage: `Usage: chainsync cancel --control ADDR --round ID [--reason TEXT]

At the Head: ends round ID in the whole chain. No task of it starts at a
node after the cancel reaches it; the nodes that ran theirs keep their
result. chainsync open --wait on the round exits 5 ("cancelled at the
Head: TEXT"); a served chain goes on with its next round.

Example:
  chainsync cancel --control unix:/run/chainsync/head.sock --round batch-0042 --reason "bad input file"
`},
}

// steerFlags holds the flags of a steering command.
type steerFlags struct {
	control, round, reason, by string
	timeout                    time.Duration
	roundSet                   bool
}

func (sc steerCmd) flags(fs *flag.FlagSet, o *steerFlags) {
	fs.StringVar(&o.control, "control", "", "the node's --control `ADDR`: unix:PATH or HOST:PORT (required)")
	if sc.round {
		what := "the round `ID` (absent: the round waiting now)"
		if sc.roundRequired {
			what = "the round `ID` (required)"
		}
		fs.StringVar(&o.round, "round", "", what)
	}
	if sc.reason {
		fs.StringVar(&o.reason, "reason", "", "why, in `TEXT` (shown in status and the logs of every node)")
	}
	fs.StringVar(&o.by, "by", "", "who asks, a `NAME` for the record (default: the user's name)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to try to reach the node")
}

// steerCommands are the steering commands' entries in the command table.
func steerCommands() []*command {
	var out []*command
	for _, sc := range steerCmds {
		args := "--control ADDR"
		switch {
		case sc.roundRequired:
			args += " --round ID"
		case sc.round:
			args += " [--round ID]"
		}
		if sc.reason {
			args += " [--reason TEXT]"
		}
		out = append(out, &command{name: sc.name, args: args, summary: sc.summary, usage: sc.usage + steerCommon,
			flags: func(fs *flag.FlagSet) { sc.flags(fs, &steerFlags{}) },
			main:  func(args []string, stdout, stderr io.Writer) int { return steerMain(sc, args, stdout, stderr) }})
	}
	return out
}

// defaultBy names who asks: the user's name.
func defaultBy() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if s := os.Getenv("USER"); s != "" {
		return s
	}
	return fmt.Sprintf("uid-%d", os.Getuid())
}

func steerMain(sc steerCmd, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(sc.name, flag.ContinueOnError)
	quietFlags(fs)
	var o steerFlags
	sc.flags(fs, &o)
	if err := fs.Parse(args); err != nil {
		return flagFailed(stdout, stderr, fs, sc.name, err)
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "round" {
			o.roundSet = true
		}
	})
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "chainsync %s: "+format+"\n(see chainsync %s --help)\n", append(append([]any{sc.name}, a...), sc.name)...)
		return ExitUsage
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}
	if o.control == "" {
		return usage("--control is required: the node's --control address")
	}
	if _, _, err := control.Network(o.control); err != nil {
		return usage("%v", err)
	}
	if o.roundSet && !protocol.ValidRound(o.round) {
		return usage("--round %q: use 1-128 of A-Z a-z 0-9 - _ .", o.round)
	}
	if sc.roundRequired && !o.roundSet {
		return usage("--round is required")
	}
	if len(o.reason) > 1000 || strings.ContainsAny(o.reason, "\n\r") {
		return usage("--reason: one line of at most 1000 bytes")
	}
	if o.by == "" {
		o.by = defaultBy()
	}
	if len(o.by) > protocol.MaxNoticeName || protocol.NoticeName(o.by) != o.by {
		return usage("--by %q: at most %d of A-Z a-z 0-9 - _ . : @ [ ]", o.by, protocol.MaxNoticeName)
	}
	req := control.Request{Op: sc.name, Round: o.round, HasRound: o.roundSet, Reason: o.reason, By: o.by}
	c, rep, code := ask(o.control, req, o.timeout, sc.name, "the node", stderr)
	if code != ExitOK {
		return code
	}
	c.Close()
	if rep.Error != "" {
		fmt.Fprintf(stderr, "chainsync %s: refused: %s\n", sc.name, rep.Error)
		return ExitError
	}
	if rep.Message != "" {
		fmt.Fprintln(stdout, rep.Message)
	}
	return ExitOK
}

// ask sends req to the control socket at addr and reads one answer; who
// names what serves it (the Head, the node) in the errors it prints for
// cmd. The connection stays open for a further answer (open --wait). A
// steering request's answer comes within max(timeout, 30s); open, retry
// and wait may wait for a free slot or a resume first.
func ask(addr string, req control.Request, timeout time.Duration, cmd, who string, stderr io.Writer) (*control.Conn, control.Reply, int) {
	c, err := control.Dial(addr, timeout)
	if err != nil {
		fmt.Fprintf(stderr, "chainsync %s: cannot reach %s at --control %s: %v (is chainsync run --control %s running?)\n", cmd, who, addr, err, addr)
		return nil, control.Reply{}, ExitError
	}
	if err := c.Send(req); err != nil {
		c.Close()
		fmt.Fprintf(stderr, "chainsync %s: %v\n", cmd, err)
		return nil, control.Reply{}, ExitError
	}
	if req.Op != control.OpOpen && req.Op != control.OpRetry && req.Op != control.OpWait {
		_ = c.SetReadDeadline(time.Now().Add(max(timeout, 30*time.Second)))
	}
	rep, err := c.Receive()
	if err != nil {
		c.Close()
		fmt.Fprintf(stderr, "chainsync %s: %v\n", cmd, err)
		return nil, rep, ExitError
	}
	return c, rep, ExitOK
}

// steer carries out a steering request at this node; the reply's Error
// says why it was refused.
func (cs *controlServer) steer(req control.Request, client string) control.Reply {
	node := cs.node
	r := chainsync.Request{Round: req.Round, HasRound: req.HasRound, By: req.By, Reason: req.Reason}
	var err error
	var msg string
	round := req.Round // the round the request names; approve and deny find the one waiting
	switch req.Op {
	case "hold":
		if err = node.Hold(r); err == nil {
			msg = "held: no task starts at this node until chainsync release"
		}
	case "release":
		if err = node.Release(r); err == nil {
			msg = "released"
		}
	case "approve":
		var id string
		if id, err = node.Approve(r); err == nil {
			round, msg = id, "approved round "+roundLabel(id)+": its task starts"
		}
	case "deny":
		var id string
		if id, err = node.Deny(r); err == nil {
			round, msg = id, "denied round "+roundLabel(id)+": it fails here as a failed task would"
		}
	case "pause":
		if err = node.Pause(r); err == nil {
			msg = "paused: no round opens and no node starts a task until chainsync resume"
		}
	case "resume":
		if err = node.Resume(r); err == nil {
			msg = "resumed"
		}
	case "cancel":
		if err = node.Cancel(r); err == nil {
			msg = "cancelled round " + roundLabel(req.Round) + " in the whole chain"
		}
	default:
		return control.Reply{Error: fmt.Sprintf("unknown request %q", req.Op)}
	}
	if err != nil {
		text := strings.TrimPrefix(err.Error(), chainsync.ErrRefused.Error()+": ")
		if errors.Is(err, chainsync.ErrStopped) {
			text = "the node is stopping"
		}
		return control.Reply{Error: text}
	}
	cs.log.Info("steering request taken: "+req.Op, "by", req.By, "client", client, "round", round, "reason", req.Reason)
	return control.Reply{Message: msg}
}

// errPaused is opening a round while the chain is paused, without
// waiting.
var errPaused = errors.New("the chain is paused at the Head (chainsync resume)")

// waitUnpaused waits while the Head has paused the chain (chainsync
// pause), or fails with errPaused if !wait.
func (op *opener) waitUnpaused(wait bool) error {
	for {
		paused, resumed := op.node.Paused()
		if !paused {
			return nil
		}
		if !wait {
			return errPaused
		}
		select {
		case <-resumed:
		case <-op.ctx.Done():
			return chainsync.ErrStopped
		}
	}
}

// retry reopens req.Round at the Head (chainsync open --retry): it waits
// while the chain is paused, refuses a round in flight, and watches the
// reopened round's outcome like an opened one's.
func (op *opener) retry(req control.Request, notify chan outcome) (string, error) {
	id := req.Round
	if err := op.waitUnpaused(!req.NoWait); err != nil {
		return "", err
	}
	op.mu.Lock()
	if _, busy := op.open[id]; busy {
		op.mu.Unlock()
		return "", fmt.Errorf("round %s is in flight: retry it once it has ended", roundLabel(id))
	}
	var subs []chan outcome
	if notify != nil {
		subs = append(subs, notify)
	}
	op.open[id] = subs
	op.mu.Unlock()
	err := op.node.Retry(chainsync.Request{Round: id, HasRound: true, By: req.By, Reason: req.Reason})
	if err != nil {
		op.mu.Lock()
		delete(op.open, id)
		op.cond.Broadcast()
		op.mu.Unlock()
		return "", errors.New(strings.TrimPrefix(err.Error(), chainsync.ErrRefused.Error()+": "))
	}
	op.log.Info("round reopened by chainsync open --retry", "round", id, "by", req.By)
	bug.Go(func() { op.watch(id) })
	return id, nil
}

// opener returns the Head's opener. At the Head, whose --control makes
// it serve, a request that comes while the Head is still starting waits
// for it (at most 10 s) rather than being told it opens no rounds.
func (cs *controlServer) opener() *opener {
	if !cs.node.Role().HasPred() {
		t := time.NewTimer(10 * time.Second)
		select {
		case <-cs.opSet:
		case <-cs.quit:
		case <-t.C:
		}
		t.Stop()
	}
	cs.opMu.Lock()
	defer cs.opMu.Unlock()
	return cs.op
}

// journalSteering says in words what a state directory's steering file
// holds (chainsync journal): a hold, a pause, the approvals given, the
// retried rounds done here already, the Head's pause as last heard.
func journalSteering(dir string) []string {
	data, err := journal.ReadSteer(dir)
	if err != nil {
		return []string{"the steering state cannot be read: " + strings.TrimPrefix(err.Error(), "chainsync: ")}
	}
	if len(data) == 0 {
		return nil
	}
	var f struct {
		Hold, Pause *struct {
			Since  int64  `json:"since"`
			By     string `json:"by"`
			Reason string `json:"reason"`
		}
		Approved   []string        `json:"approved"`
		Skip       []string        `json:"skip"`
		ChainPause *protocol.Steer `json:"chain_pause"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return []string{"the steering state is damaged: " + err.Error()}
	}
	when := func(ms int64, by, reason string) string {
		s := "since " + time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05 UTC")
		if by != "" {
			s += " by " + by
		}
		if reason != "" {
			s += " (" + reason + ")"
		}
		return s
	}
	var out []string
	if h := f.Hold; h != nil {
		out = append(out, "held "+when(h.Since, h.By, h.Reason)+": no task starts until chainsync release")
	}
	if p := f.Pause; p != nil {
		out = append(out, "the chain paused here "+when(p.Since, p.By, p.Reason)+": until chainsync resume")
	}
	if p := f.ChainPause; p != nil {
		out = append(out, "the chain paused at the Head "+p.Origin+" "+when(p.At, p.By, p.Reason)+", as last heard")
	}
	if len(f.Approved) > 0 {
		out = append(out, "approvals given: "+roundList(f.Approved))
	}
	if len(f.Skip) > 0 {
		out = append(out, "retried rounds whose task is done here already: "+roundList(f.Skip))
	}
	return out
}
