package chainsync

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Config describes one node of a chain. Only the fields that place the node
// in the chain are needed; every limit and timeout has a safe default.
type Config struct {
	// Name labels this node in logs (e.g. "B"). Optional.
	Name string
	// Listen is where this node accepts its predecessor ("host:port").
	// Empty means the node has no predecessor: it is the Head.
	Listen string
	// Listener, if set, is used instead of binding Listen (tests, socket
	// activation). The node closes it on Close.
	Listener net.Listener
	// Dial, if set, makes each attempt to connect to Next instead of a
	// TCP dial (tests on an in-memory network, a custom transport). The
	// node still retries with its backoff and secures the connection
	// with Secure.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Prev is the predecessor's address, used in logs. The predecessor
	// dials this node; this node never dials it, so its port is not used.
	Prev string
	// PrevHostOnly, with Prev set to "host:port", accepts a predecessor
	// connection only from an address Prev's host resolves to, exactly
	// (127.0.0.12 is not 127.0.0.11: the predecessor should dial from its
	// own address, DialFrom). It is a weak check
	// against a chain wired to the wrong node, not security: a source
	// address proves nothing. Use Secure to authenticate the predecessor.
	PrevHostOnly bool
	// PrevName and NextName name the neighbours (as --chain does) in logs
	// and fault reports. Optional: without them a neighbour is named by
	// its address.
	PrevName, NextName string
	// Chain, optional, names every node of the chain in order (as --chain
	// does), this one among them: an undelivered round's report names the
	// nodes after the one past which no word came, and an undo wave that
	// stopped names the nodes it left undone.
	Chain []string
	// ChainAddrs, with Chain, gives the addresses of its nodes in the same
	// order (as --chain does). With both and Heartbeat, the node sends an
	// identity line first on each link: its name, its place in Chain and
	// digests of Chain (names and addresses) and RoundSettings; it refuses
	// a neighbour whose line says it is not the node Chain names there, or
	// that its chain or round settings differ, with a FaultConfigMismatch
	// that says how (docs/PROTOCOL.md, "The identity line"). Name must be
	// in Chain.
	ChainAddrs []string
	// RoundSettings, with ChainAddrs, sums up the settings that must be
	// the same on every node for rounds to run (the command's "--rounds
	// 3", "--serve"); the identity line carries its digest.
	RoundSettings string
	// DialFrom, if set, is the local host (an IP address or a name, no
	// port) to dial the successor from, so that a successor that checks
	// its predecessor's host (PrevHostOnly) sees this node's own address
	// on a machine with several (the command sets it to this node's
	// --chain or --listen host when that is a loopback address, where the
	// system would pick 127.0.0.1). If it cannot be bound, the node dials
	// from the address the system picks and says so. Ignored with Dial.
	DialFrom string
	// Next is the successor's address, which this node dials. Empty means
	// the node has no successor: it is the Tail.
	Next string

	// Task runs this node's work for a round, once per round, when the
	// chain reaches this node. A non-nil error halts the chain here: no
	// COMPLETE is sent on. It must return soon after ctx is cancelled (the
	// node is closing). Nil means an empty task. It runs off the node's
	// loop, on the goroutine that read what made it runnable, once that
	// input has been acted on; a task that runs longer than a fraction of
	// a millisecond hands that goroutine's other work to a new one, so a
	// task may block as long as it needs. (After a streak of 64 tasks that
	// each took under 50 µs, that hand-on may come up to 50 ms late, once,
	// or a quarter of Heartbeat or PhaseTimeout if shorter: the node then
	// stops arming a timer for each batch; docs/DESIGN.md.)
	Task func(ctx context.Context, round string) error

	// QuickTask says Task returns within microseconds, never blocks and
	// never calls the Node (an in-process hand-off, a counter): the node
	// then runs it inside the node's loop, in the turn that started it
	// (once that turn's records are on disk), and steps its end in the
	// same turn, instead of after the turn with its end stepped in one
	// more. That saves a turn per batch of tasks. A task that blocks would
	// stall the whole node, so leave it false for anything else. It is
	// ignored with Verify or TaskTimeout.
	QuickTask bool

	// Rounds, if non-nil, is the set of round ids this node takes part in;
	// a predecessor's READY for any other round is a protocol violation.
	// Nil means any round a predecessor opens is accepted (up to MaxRounds).
	// With Follow, Rounds are the rounds known up front, and any other
	// round the predecessor opens is accepted too.
	Rounds []string
	// Follow makes a long-lived node: it joins every round its predecessor
	// opens, learning the round from the READY that opens it, and reports
	// each such round on Node.Rounds, where the application learns it and
	// says when it is locally ready (Node.Ready). The application must
	// read Node.Rounds: a round it never hears of never becomes locally
	// ready, and with one task at a time it holds up every later round.
	Follow bool
	// UnnamedColon sends the unnamed round as "COMMAND:" instead of the
	// draft's bare "COMMAND", for peers that require the colon (the draft
	// author's reference implementation does).
	UnnamedColon bool
	// MaxRounds bounds the rounds in progress at once. Default 1024.
	MaxRounds int
	// KeepFinished is how many finished rounds the node remembers: their
	// results for Wait and Snapshot, their ids in the protocol machine (a
	// late duplicate stays a no-op, a finished round never runs again)
	// and their records in StateDir. Default 16384; keep it well above
	// the rounds that can be in flight at once.
	KeepFinished int
	// MaxParallelTasks bounds the tasks running at once on this node.
	// Default 1: one task at a time, in the order the rounds reach it.
	MaxParallelTasks int

	// StateDir, if set, is this node's durable state: every change to a
	// round is written there and synced before the message or task it
	// causes, so a node restarted with the same StateDir carries on where
	// its neighbours last saw it (docs/DESIGN.md, "Restarts and durable
	// state"). Created with mode 0700 if missing; one process at a time.
	// Empty: state lives in memory only, and a restarted node starts over.
	StateDir string
	// ResumeTask says what a node restarted with StateDir does with a round
	// whose task had started but not ended: ResumeFail (the default),
	// ResumeDone or ResumeRerun.
	ResumeTask ResumeTask
	// ExitWaveTimeout, if positive, bounds how long a round that is over
	// at this node waits to hand its final COMPLETE to a live predecessor
	// connection; after it the round ends with a FaultExitWaveUndelivered
	// fault. Zero waits until Close.
	ExitWaveTimeout time.Duration

	// Heartbeat, if positive, turns on heartbeats (docs/DESIGN.md,
	// "Heartbeats"): the line HEARTBEAT is sent on a link that carried
	// nothing for Heartbeat, and a neighbour whose link stays up but
	// silent for 3*Heartbeat while a round is in progress is reported as a
	// FaultPeerSilent fault that blames it. Both ends must turn it on: a
	// draft-only peer treats HEARTBEAT as bad input. Zero: off.
	Heartbeat time.Duration
	// RestartGrace, if positive (it needs Heartbeat), says that this
	// node's task may restart the node: just before each task the node
	// announces to the chain that it may be gone for up to RestartGrace,
	// and no node reports its silence, its down link or a phase timeout
	// that waits on it until it is back or the grace has passed; then
	// every node reports a FaultPeerUnreachable fault blaming it
	// (docs/DESIGN.md, "Liveness: a restart is not a death").
	RestartGrace time.Duration
	// Undo, if set, is this node's compensation for a round in which its
	// task succeeded and that then failed further on: the nodes whose
	// task had succeeded run their undo in reverse chain order, each
	// after its successor's undo ended (docs/UNDO.md). It is a chain
	// setting: every node has one, or none. It turns the extension lines
	// on, is bounded by TaskTimeout, and must be idempotent: a node
	// restarted during its undo runs it again.
	Undo func(ctx context.Context, round string, u UndoInfo) error
	// TaskTimeout, if positive, bounds this node's task (and Verify): on
	// expiry the task's context is cancelled and the round ends
	// task-failed, with a FaultTaskTimeout fault. Zero: no bound.
	TaskTimeout time.Duration
	// Receipts turns receipts on (docs/RECEIPTS.md): for every round,
	// this node signs one receipt of what it did there, bound to its
	// predecessor's, and the receipts travel back to the Head with the
	// exit wave. It is a chain setting (every node has it, or none; put it
	// in RoundSettings) and turns the extension lines on. It needs Chain,
	// with Name in it, and ReceiptKey.
	Receipts bool
	// ReceiptKey signs this node's receipts: ECDSA P-256 or Ed25519 (the
	// TLS key, or a key of its own from chainsync keygen). ReceiptCert,
	// if set, is the key's certificate, which each receipt then carries
	// (a verifier checks it against the chain's CA); without it a receipt
	// carries the public key, checked against a pin.
	ReceiptKey  crypto.Signer
	ReceiptCert *x509.Certificate
	// ReceiptsDir, if set with Receipts, is a directory where the node
	// writes, once it holds them, the receipts of each round (its own and
	// every one after it: at the Head, the whole chain's) as a bundle,
	// one file per round, mode 0600 (receipt.WriteBundle).
	ReceiptsDir string
	// Verify, if set, runs after the task succeeds, and for a task taken
	// as done on resume (ResumeDone), before COMPLETE is sent on: "the
	// switch is back and healthy before the next one restarts". An error
	// fails the round like a failed task. It shares TaskTimeout's bound.
	Verify func(ctx context.Context, round string) error
	// FaultPolicy says what a fault caused by a neighbour (silent,
	// unreachable, a phase timeout) does: FaultHalt (the default) aborts
	// the rounds in progress; FaultWait reports it and keeps waiting.
	FaultPolicy FaultPolicy

	// Secure, if set, secures both links (TLS; see package secure).
	// Nil means plain TCP, which the node says in its log.
	Secure Securer

	// ConnectTimeout, if positive, is how long a link may be down (before
	// its first connection or after a loss) while a round is in progress
	// before the node reports a fault and aborts its unfinished rounds.
	// Zero waits forever, which is the draft's behaviour.
	ConnectTimeout time.Duration
	// PhaseTimeout, if positive, is how long a round may wait for a
	// neighbour in one state (for READY, START or COMPLETE) before the
	// node reports a fault and aborts that round. Zero waits forever.
	//
	// These timeouts (and Heartbeat's silence) are the protocol machine's
	// (docs/DESIGN.md, "Time"): the node's clock ticks it at least ten
	// times per timeout, so each is reported within a tenth of it.
	PhaseTimeout time.Duration
	// WriteTimeout bounds one write to a neighbour; a peer that stops
	// reading is disconnected after it. Default 10s.
	WriteTimeout time.Duration
	// PendingTimeout is how long a newly accepted connection may take to
	// complete its handshake and send its first protocol line before it
	// is closed. Default 10s. The TLS handshake and PSK proof alone get
	// at most 3s.
	PendingTimeout time.Duration
	// MaxPending bounds accepted connections that have not yet sent a
	// protocol line. When that many wait, a new one evicts the pending
	// connection that has made the least progress, oldest first (see
	// SECURITY.md, "Strangers at the listen port"). Default 16.
	MaxPending int
	// BackoffMin and BackoffMax bound the delay between dial attempts.
	// Defaults 50ms and 2s.
	BackoffMin, BackoffMax time.Duration

	// Logger receives the node's log: Info for every state change and
	// message, Warn for peer misbehaviour, Error for faults. Nil: silent.
	Logger *slog.Logger
	// Trace, if set, is called for every event of note, one call at a
	// time, in the order the events happened, and never with the node's
	// lock held: it may read the node (Snapshot, Role, Addr). It runs on
	// the goroutine that carries out the node's steps, before the lines
	// and tasks those steps cause, so it must be quick and must not block;
	// it must not call Ready or Close (they would wait for the events
	// being traced). Tools (the demo's ladder diagram, metrics) hook in
	// here. Logger gets its records the same way.
	Trace func(TraceEvent)

	// Approve makes each of this node's tasks wait, once its turn has
	// come, for Node.Approve (or end at Node.Deny); see docs/STEERING.md.
	Approve bool
	// OnHold, if set, is told when a hold or an approval wait begins at
	// this node. It runs on the node's loop, like Trace: it must not
	// block.
	OnHold func(HoldEvent)

	// peerLogBurst, for tests that watch every violation: how many lines
	// peers may cause per kind and interval (0: admitBurst).
	peerLogBurst int

	// listen, for tests on a simulated network: binds Listen when the
	// node starts, instead of a TCP listener.
	listen func(ctx context.Context, addr string) (net.Listener, error)
	// lookupHost, for tests: resolves a host name for PrevHostOnly and
	// the chain's addresses (prevhost.go); nil: the system's resolver.
	lookupHost func(ctx context.Context, host string) ([]net.IPAddr, error)
}

// FaultPolicy is what a node does about a fault caused by a neighbour
// (draft section "Error Handling": applications want different things).
type FaultPolicy uint8

// The choices for Config.FaultPolicy.
const (
	// FaultHalt reports the fault and aborts the rounds in progress: the
	// chain stops here, and its neighbours detect it in turn.
	FaultHalt FaultPolicy = iota
	// FaultWait reports the fault and keeps waiting, so that a repaired
	// or restarted neighbour resumes the chain with its progress kept.
	FaultWait
)

// String returns "halt" or "wait".
func (p FaultPolicy) String() string {
	switch p {
	case FaultHalt:
		return "halt"
	case FaultWait:
		return "wait"
	}
	return "FaultPolicy(?)"
}

// ParseFaultPolicy reads "halt" or "wait".
func ParseFaultPolicy(s string) (FaultPolicy, error) {
	for _, p := range []FaultPolicy{FaultHalt, FaultWait} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: fault-policy %q: use halt or wait", ErrConfig, s)
}

// ResumeTask is what a restarted node does with a round whose task was
// interrupted by the restart (the task started, and no end was recorded).
type ResumeTask uint8

// The choices for Config.ResumeTask.
const (
	// ResumeFail ends the round as task-failed: the chain halts here, for
	// a person to look at. The safe default.
	ResumeFail ResumeTask = iota
	// ResumeDone takes the interrupted task as done (the restart was the
	// task, as when the task upgrades and reboots this node's machine)
	// and sends COMPLETE on.
	ResumeDone
	// ResumeRerun runs the task again.
	ResumeRerun
)

// String returns "fail", "done" or "rerun".
func (r ResumeTask) String() string {
	switch r {
	case ResumeFail:
		return "fail"
	case ResumeDone:
		return "done"
	case ResumeRerun:
		return "rerun"
	}
	return "ResumeTask(?)"
}

// ParseResumeTask reads "fail", "done" or "rerun".
func ParseResumeTask(s string) (ResumeTask, error) {
	for _, r := range []ResumeTask{ResumeFail, ResumeDone, ResumeRerun} {
		if s == r.String() {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%w: resume-task %q: use fail, done or rerun", ErrConfig, s)
}

// Securer secures a link's connection before any protocol line crosses it.
// *secure.Config implements it.
type Securer interface {
	// Client secures a connection this node dialed to its successor at addr.
	Client(ctx context.Context, raw net.Conn, addr string) (net.Conn, error)
	// Server secures a connection accepted from a would-be predecessor.
	Server(ctx context.Context, raw net.Conn) (net.Conn, error)
	// Describe says in a few words what protects the links, for the log.
	Describe() string
}

// ErrConfig wraps every configuration error from Validate and Start.
var ErrConfig = errors.New("chainsync: invalid configuration")

// ConfigError is a configuration error from Validate (and so from Start).
// It matches ErrConfig with errors.Is. Field names the Config field to
// fix, so that a command can name its own flag for it.
type ConfigError struct {
	Field  string // the Config field at fault, e.g. "Listen", "Rounds", "Heartbeat"
	Value  string // the offending value, if one was given ("" when the field is missing)
	Reason string // what is wrong and what to do, in words
}

// Error returns "chainsync: invalid configuration: " and the reason.
func (e *ConfigError) Error() string { return ErrConfig.Error() + ": " + e.Reason }

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// Validate reports the first problem with c as a *ConfigError, or nil if
// Start would accept it. It changes nothing: Start fills in the defaults.
// A command that builds a Config from flags calls it to refuse a bad
// command line before it starts anything.
func (c *Config) Validate() error {
	bad := func(field, value, format string, a ...any) error {
		return &ConfigError{Field: field, Value: value, Reason: fmt.Sprintf(format, a...)}
	}
	if c.Prev != "" && c.Listen == "" && c.Listener == nil {
		return bad("Listen", "", "a node with a predecessor (Prev %q) needs Listen, the address its predecessor dials", c.Prev)
	}
	if c.PrevHostOnly {
		if _, _, err := net.SplitHostPort(c.Prev); err != nil {
			return bad("Prev", c.Prev, "Prev %q is not host:port (PrevHostOnly checks its host): %v", c.Prev, err)
		}
	}
	if c.Next != "" {
		if _, _, err := net.SplitHostPort(c.Next); err != nil {
			return bad("Next", c.Next, "Next %q is not host:port: %v", c.Next, err)
		}
	}
	if c.Listen != "" && c.Listener == nil {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return bad("Listen", c.Listen, "Listen %q is not host:port: %v", c.Listen, err)
		}
	}
	if c.ChainAddrs != nil {
		if len(c.ChainAddrs) != len(c.Chain) {
			return bad("ChainAddrs", fmt.Sprint(len(c.ChainAddrs)), "ChainAddrs has %d addresses for the %d nodes of Chain: give one per node, in the same order", len(c.ChainAddrs), len(c.Chain))
		}
		if !slices.Contains(c.Chain, c.Name) {
			return bad("Name", c.Name, "Name %q is not in Chain %v", c.Name, c.Chain)
		}
	}
	if err := c.checkReceipts(bad); err != nil {
		return err
	}
	for _, r := range c.Rounds {
		if !protocol.ValidRound(r) {
			return bad("Rounds", r, "round id %q: use 1-128 of A-Z a-z 0-9 - _ . (or empty for the unnamed round)", r)
		}
	}
	if c.FaultPolicy > FaultWait {
		return bad("FaultPolicy", c.FaultPolicy.String(), "FaultPolicy %d: use FaultHalt or FaultWait", c.FaultPolicy)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"Heartbeat", c.Heartbeat}, {"TaskTimeout", c.TaskTimeout},
		{"ConnectTimeout", c.ConnectTimeout}, {"PhaseTimeout", c.PhaseTimeout}, {"RestartGrace", c.RestartGrace},
	} {
		if d.v < 0 {
			return bad(d.field, d.v.String(), "%s must not be negative", d.field)
		}
	}
	if c.RestartGrace > 0 && c.Heartbeat <= 0 {
		return bad("RestartGrace", c.RestartGrace.String(), "RestartGrace needs Heartbeat: the grace is announced on the extension lines, which heartbeats turn on (set Heartbeat on every node)")
	}
	if c.RestartGrace > protocol.MaxGrace {
		return bad("RestartGrace", c.RestartGrace.String(), "RestartGrace %v is longer than the longest the wire carries (%v)", c.RestartGrace, protocol.MaxGrace)
	}
	if c.ResumeTask > ResumeRerun {
		return bad("ResumeTask", c.ResumeTask.String(), "ResumeTask %d: use ResumeFail, ResumeDone or ResumeRerun", c.ResumeTask)
	}
	for _, l := range []struct {
		field string
		v     int
	}{{"MaxRounds", c.MaxRounds}, {"MaxParallelTasks", c.MaxParallelTasks}, {"MaxPending", c.MaxPending}, {"KeepFinished", c.KeepFinished}} {
		if l.v < 0 {
			return bad(l.field, fmt.Sprint(l.v), "limits must not be negative (%s %d)", l.field, l.v)
		}
	}
	return nil
}

// withDefaults fills in the defaults of a valid c.
func (c *Config) withDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.WriteTimeout, 10*time.Second)
	def(&c.PendingTimeout, 10*time.Second)
	if c.MaxPending == 0 {
		c.MaxPending = 16
	}
	if c.MaxParallelTasks == 0 {
		c.MaxParallelTasks = 1
	}
	if c.MaxRounds == 0 {
		c.MaxRounds = 1024
	}
	if c.KeepFinished == 0 {
		c.KeepFinished = 16384
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Task == nil {
		c.Task = func(context.Context, string) error { return nil }
	}
}

// Role returns the role a node with this configuration has in its chain:
// it has a predecessor if it listens (Listen or Listener), a successor if
// it dials (Next).
func (c *Config) Role() protocol.Role {
	return protocol.RoleOf(c.Listen != "" || c.Listener != nil, c.Next != "")
}
