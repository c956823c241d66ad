package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chainsync-go/chainsync/internal/bug"
	"github.com/chainsync-go/chainsync/internal/taskrun"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/internal/worker"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/secure"
)

const runUsage = `Usage: chainsync run [flags] -- COMMAND [ARG...]

Runs one node of a ChainSync chain. COMMAND is this node's task: it runs
once per round (directly, no shell), after every node of the chain is ready
and after the predecessor's task finished; then the successor's task starts.
The task sees CHAINSYNC_ROUND (the round id, empty for the unnamed round),
CHAINSYNC_ROLE (head, middle, tail or single) and CHAINSYNC_NODE.

Each node dials its successor (--next) and listens for its predecessor
(--listen). Start the nodes in any order: a node retries until its
successor is up.

Example, a three-node chain on one machine (three terminals):
  chainsync run --name C --listen 127.0.0.1:7002 --prev 127.0.0.1:7001 -- ./upgrade.sh
  chainsync run --name B --listen 127.0.0.1:7001 --prev 127.0.0.1:7000 --next 127.0.0.1:7002 -- ./upgrade.sh
  chainsync run --name A --next 127.0.0.1:7001 -- ./upgrade.sh
or, the same with one string on every node:
  chainsync run --chain A=127.0.0.1:7000,B=127.0.0.1:7001,C=127.0.0.1:7002 --name B -- ./upgrade.sh

Faults are off by default (a node waits for ever, as the draft does). The
recommended pair: the same --heartbeat on every node (finds a hung or cut-off
neighbour and names it) and each node's own --task-timeout, e.g.
  chainsync run --chain $CHAIN --name B --heartbeat 1s --task-timeout 30m \
    --connect-timeout 5m --on-fault 'notify-oncall "$CHAINSYNC_FAULT" "$CHAINSYNC_PEER"' -- ./upgrade.sh
--fault-policy wait keeps the round when a neighbour faults, until it is back
(--on-recover then runs once). A node whose task restarts it (a switch that
reboots) says so with --restart-grace 10m: nobody reports it until it is back
or the grace has passed, e.g.
  chainsync run --chain $CHAIN --name B --heartbeat 1s --restart-grace 10m \
    --state-dir /var/lib/chainsync/B --resume-task done -- ./upgrade-and-reboot.sh

A chain that stays up: --serve on every node, and the Head opens rounds
(--rounds-from FILE|-, --every D, or --control ADDR with chainsync open);
each task runs in the order the Head opened the rounds, e.g.
  chainsync run --chain $CHAIN --name B --serve -- ./transform-batch
  chainsync run --chain $CHAIN --name A --serve --control unix:/tmp/cs.sock -- ./extract-batch
  chainsync open --control unix:/tmp/cs.sock --wait

A stage that stays up (--worker): COMMAND starts once and takes each
round's task as one JSON line on its standard input, {"id":N,"op":"run",
"round":ID}, answering {"id":N,"ok":true} or {"id":N,"ok":false,"error":
TEXT} on its standard output, after a first {"id":0,"op":"hello",...}
that it answers once loaded (docs/WORKERS.md), e.g.
  chainsync run --chain $CHAIN --name B --serve --worker -- python3 stage.py

` + envHelp + `
Exit status: 0 done; 1 could not start (also: the --worker did not
answer hello); 2 usage error; 3 this node's task failed or ran past
--task-timeout (the chain halts here); 4 fault (a neighbour silent or
unreachable, or a timeout fired); 5 the round was cancelled at the Head
(chainsync cancel); 130 interrupted.

Flags:
`

// runOpts are chainsync run's flags.
type runOpts struct {
	name, prev, next, listen, chain string
	round                           string
	rounds                          int
	colon                           bool
	readyCmd, readyFile             string
	readyInterval                   time.Duration
	logFormat, logLevel             string
	quiet                           bool
	connectTimeout, phaseTimeout    time.Duration
	linger                          time.Duration
	pendingTimeout                  time.Duration
	statusInterval                  time.Duration
	maxPending                      int
	onFault                         string
	onFaultTimeout                  time.Duration
	stateDir, resumeTask            string
	heartbeat, taskTimeout          time.Duration
	faultPolicy, verifyCmd          string
	undoCmd                         string // undo.go
	receipts                        bool   // receipts.go
	receiptKey, receiptsDir         string // receipts.go
	parallel                        int
	tls                             secure.Options
	statusAddr, traceFile           string // observe.go
	statusPin                       string // observe.go
	serve                           bool   // serve.go
	roundsFrom, control             string
	insecureControl                 bool // --control beyond loopback, knowingly
	every                           time.Duration
	maxOpen                         int
	heartbeatGiven                  bool   // --heartbeat was set (noteGiven)
	chainGiven                      string // "--chain" or "CHAINSYNC_CHAIN" when given, maybe empty (noteGiven)
	approve                         bool   // steer.go
	onHold                          string // steer.go
	hasPred                         bool   // this node has a predecessor (set by config)
	ctl                             *controlServer
	worker                          bool            // --worker (workercmd.go)
	workers                         *worker.Manager // its worker, once started
	live                            liveOpts        // liveness.go
}

func (o *runOpts) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.prev, "prev", "", "the predecessor's `HOST:PORT` (absent: this node is the Head); it dials this node's --listen, so only HOST is used: connections from another host are refused (a weak check against a mis-wired chain, not security: TLS authenticates); --chain checks no host")
	fs.StringVar(&o.next, "next", "", "the successor's `HOST:PORT`, which this node dials (absent: this node is the Tail)")
	fs.StringVar(&o.listen, "listen", "", "where this node accepts its predecessor, `HOST:PORT` (required with --prev)")
	fs.StringVar(&o.chain, "chain", "", "the whole chain, `NAME=HOST:PORT,...` in order, identical on every node (use with --name)")
	fs.StringVar(&o.name, "name", "", "this node's `NAME` in --chain; also labels its log lines")
	fs.StringVar(&o.round, "round", "", "use round `ID` on the wire (absent: the unnamed round)")
	fs.IntVar(&o.rounds, "rounds", 0, "run `N` concurrent rounds with ids 0..N-1 (as the reference implementation's --n-rounds)")
	fs.BoolVar(&o.colon, "unnamed-round-colon", false, "send the unnamed round as COMMAND: (the reference implementation needs it)")
	fs.StringVar(&o.readyCmd, "ready-cmd", "", "run `CMD` with sh -c until it exits 0; that is \"locally ready\" (absent: ready at once)")
	fs.StringVar(&o.readyFile, "ready-file", "", "locally ready once `PATH` exists (checked every --ready-interval); {round} in it is replaced by the round id")
	fs.DurationVar(&o.readyInterval, "ready-interval", time.Second, "how often to retry --ready-cmd or check --ready-file")
	fs.DurationVar(&o.statusInterval, "status-interval", 30*time.Second, "while a round waits, log where it stands this often, so a long wait is visibly not a hang (0: never)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log `FORMAT` on stderr: text (for people) or json (for machines)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.BoolVar(&o.quiet, "quiet", false, "log only warnings and errors (at least --log-level warn)")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 0, "peer-unreachable fault if a neighbour has not been healthy for this long while a round is in progress, counted from when it last was (with --heartbeat: last heard from; refused or flapping connections do not restart it) (0: wait forever; 30s with --serve)")
	fs.DurationVar(&o.phaseTimeout, "phase-timeout", 0, "fault if a round waits this long in one state for READY, START or COMPLETE; the wait includes every earlier task, and it blames no node: prefer --heartbeat with --task-timeout (0: wait forever)")
	fs.DurationVar(&o.linger, "linger", 10*time.Second, "after its rounds are done, wait at most this long for the predecessor to hang up, so a lost final COMPLETE can be re-sent")
	fs.StringVar(&o.onFault, "on-fault", "", "run `CMD` with sh -c for every fault this node reports (env: CHAINSYNC_FAULT, CHAINSYNC_PEER, CHAINSYNC_SIDE, CHAINSYNC_ROUND, CHAINSYNC_NODE, CHAINSYNC_ERROR, CHAINSYNC_ORIGIN)")
	fs.DurationVar(&o.onFaultTimeout, "on-fault-timeout", 30*time.Second, "kill --on-fault's command (its whole process group) after this long")
	fs.DurationVar(&o.heartbeat, "heartbeat", 0, "send HEARTBEAT on an idle link every `D` and report a neighbour silent for 3D during a round (peer-silent); every node of the chain must set it, to the same D (0: off, the draft's wire)")
	fs.DurationVar(&o.taskTimeout, "task-timeout", 0, "bound this node's task (and --verify-cmd): on expiry its process group gets SIGTERM, then SIGKILL after 5s, and the round fails (exit 3, task-timeout); with --worker the worker is first asked to cancel the request and gets 5s to answer before its group is stopped and started again (0: no bound)")
	fs.StringVar(&o.faultPolicy, "fault-policy", "halt", "what a neighbour's fault (peer-silent, peer-unreachable, phase-timeout) does, `POLICY`: halt (report, run --on-fault, exit 4) or wait (report, run --on-fault, keep waiting for it to come back)")
	fs.StringVar(&o.undoCmd, "undo", "", "this node's compensation: when a round fails further down the chain after this node's task succeeded, run `CMD` with sh -c, in reverse chain order (env: CHAINSYNC_ROUND, CHAINSYNC_NODE, CHAINSYNC_FAILED_NODE, CHAINSYNC_FAULT; bounded by --task-timeout; must be idempotent); every node of the chain has --undo, or none")
	fs.BoolVar(&o.receipts, "receipts", false, "sign, for every round, a receipt of what this node did there (an in-toto statement in a DSSE envelope), bound to its predecessor's; the receipts travel back to the Head with the exit wave (docs/RECEIPTS.md); signed with --receipt-key, else with --tls-key; needs --chain and --name; every node of the chain has --receipts, or none")
	fs.StringVar(&o.receiptKey, "receipt-key", "", "with --receipts, sign the receipts with the key in `FILE` (chainsync keygen makes one) instead of --tls-key: for chains without certificates")
	fs.StringVar(&o.receiptsDir, "receipts-dir", "", "with --receipts, write the receipts this node holds for each round to `DIR`, one file a round (round-ID.jsonl, mode 0600; at the Head, the whole chain's): chainsync receipts verify checks it")
	fs.StringVar(&o.verifyCmd, "verify-cmd", "", "after the task succeeds (and for a task taken as done on resume), run `CMD` with sh -c every --ready-interval until it exits 0, before COMPLETE is sent on (bounded by --task-timeout)")
	fs.StringVar(&o.stateDir, "state-dir", "", "keep this node's progress in `DIR` (created 0700), synced before every message and task, so a restarted node resumes where it stopped; one process per DIR")
	fs.StringVar(&o.resumeTask, "resume-task", "fail", "what to do with a task interrupted by a restart (needs --state-dir), `HOW`: fail the round (exit 3), take it as done (the restart was the task), or rerun it")
	fs.IntVar(&o.maxPending, "max-pending", 16, "connections to --listen that have not yet sent a protocol line; when full, a new one evicts the one that made the least progress")
	fs.DurationVar(&o.pendingTimeout, "pending-timeout", 10*time.Second, "time a new connection to --listen has to authenticate (at most 3s of it) and send its first line")
	fs.BoolVar(&o.worker, "worker", false, "COMMAND is a persistent worker: started once, it takes each round's task as a JSON request on its standard input and answers on its standard output (docs/WORKERS.md); the node is locally ready once it answered hello (within --task-timeout, else 5m: otherwise exit 1); one that ends or hangs is started again")
	fs.IntVar(&o.parallel, "parallel", 1, "tasks of different rounds that may run at once on this node (1: one at a time, in the order the Head opened the rounds); with --worker, the requests outstanding at once")
	fs.BoolVar(&o.serve, "serve", false, "stay up after the configured rounds and take part in every round the predecessor opens (CHAINSYNC_ROUND is its id), until SIGINT/SIGTERM (exit 130); set it on every node of a long-lived chain. Implies --heartbeat 2s and --connect-timeout 30s unless they are given")
	fs.StringVar(&o.roundsFrom, "rounds-from", "", "Head: open a round for each line of `FILE` (- for standard input): one round id a line, an empty line for a generated id; at its end, finish the open rounds and exit (stay up with --serve); a line that opens no round (an id used already) is logged and makes the exit status 2")
	fs.DurationVar(&o.every, "every", 0, "Head: open a round with a generated id every `D` (a tick is skipped, and logged, while --max-open rounds are in flight)")
	fs.StringVar(&o.control, "control", "", "accept chainsync hold, release, approve and deny (at the Head also open, pause, resume and cancel) on `ADDR`: unix:PATH (a socket of mode 0600) or HOST:PORT on loopback (127.0.0.1:PORT, [::1]:PORT, localhost:PORT; the socket has no authentication, so another address needs --insecure-control); at the Head it makes a served Head")
	fs.BoolVar(&o.insecureControl, "insecure-control", false, "let --control listen on an address other machines can reach (not loopback): anyone who can connect can open, hold, cancel and retry rounds, so only on a network where everyone may")
	fs.BoolVar(&o.approve, "approve", false, "each task of this node waits, once its turn has come, for chainsync approve (chainsync deny fails the round here, exit 3); needs --control")
	fs.StringVar(&o.onHold, "on-hold", "", "run `CMD` with sh -c when a hold or an approval wait begins at this node (env: CHAINSYNC_HOLD=hold|approval, CHAINSYNC_ROUND, CHAINSYNC_NODE, CHAINSYNC_REASON)")
	fs.IntVar(&o.maxOpen, "max-open", 64, "Head: at most `N` rounds in flight; beyond it chainsync open waits (or fails with --no-wait), --rounds-from stops reading and --every skips")
	fs.StringVar(&o.statusAddr, "status-addr", "", "serve GET /status (JSON), /healthz and /metrics (Prometheus) on `HOST:PORT`, e.g. 127.0.0.1:9000 (default: off)")
	fs.StringVar(&o.statusPin, "status-pin", "", "with --tls-cert, --status-addr serves HTTPS to clients whose certificate is from --tls-ca or whose key has a `PIN` here (sha256//BASE64, several joined by ;; see chainsync pin)")
	fs.StringVar(&o.traceFile, "trace", "", "append every message, state change, task and fault to `FILE`, one JSON object a line (see chainsync trace render)")
	o.live.flags(fs) // --restart-grace, --on-recover (liveness.go)
	fs.StringVar(&o.tls.CertFile, "tls-cert", "", "this node's certificate (PEM `FILE`); enables TLS 1.3 on both links")
	fs.StringVar(&o.tls.KeyFile, "tls-key", "", "this node's private key (PEM `FILE`)")
	fs.StringVar(&o.tls.CAFile, "tls-ca", "", "trust roots (PEM `FILE`) for verifying both neighbours (mutual TLS)")
	fs.StringVar(&o.tls.PinPrev, "pin-prev", "", "the predecessor's key `PIN` (sha256//BASE64, see chainsync pin)")
	fs.StringVar(&o.tls.PinNext, "pin-next", "", "the successor's key `PIN` (sha256//BASE64, see chainsync pin)")
	fs.StringVar(&o.tls.PSKFile, "psk-file", "", "pre-shared key `FILE` (made by chainsync psk), same on every node; peers prove they know it and their place in --chain (needs --chain)")
	fs.StringVar(&o.tls.ServerName, "tls-server-name", "", "verify the successor's certificate for `NAME` instead of the --next host")
	fs.BoolVar(&o.tls.AcceptAnyPredecessor, "insecure-accept-any-predecessor", false, "with TLS but no --tls-ca, --pin-prev or --psk-file, let any TLS client be the predecessor (without it, such a node refuses to start)")
	fs.BoolVar(&o.tls.AcceptAnySuccessor, "insecure-accept-any-successor", false, "with TLS but no --tls-ca, --pin-next or --psk-file, take any certificate from the successor (without it, such a node refuses to start)")
}

// usageError is a bad command line: exit 2, nothing started.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// config turns the flags into a node configuration, or a usage error.
func (o *runOpts) config(cmd []string) (chainsync.Config, []string, error) {
	var cfg chainsync.Config
	if len(cmd) == 0 {
		return cfg, nil, usagef("no task: give the command after --, e.g. chainsync run --next host:7001 -- ./task.sh")
	}
	// A task that cannot start would be found only when the chain reaches
	// this node, after its predecessors ran theirs: refuse it up front.
	if _, err := exec.LookPath(cmd[0]); err != nil {
		return cfg, nil, usagef("task %q cannot be run: %v", cmd[0], err)
	}
	// An empty chain given (a runbook's unset $CHAIN) must not run the
	// task at once, alone, as a node without neighbours would.
	if o.chainGiven != "" && strings.TrimSpace(o.chain) == "" {
		return cfg, nil, usagef("%s is empty: give the whole chain, NAME=HOST:PORT,... in order, the same on every node (an empty chain would run this node's task at once, in no chain)", o.chainGiven)
	}
	// Addresses first: a typo in a port is a usage error naming its flag,
	// not a failure to listen or to dial once the node runs.
	for _, a := range []struct {
		flag, addr string
		zeroOK     bool // port 0: any free port
	}{{"--listen", o.listen, true}, {"--prev", o.prev, false}, {"--next", o.next, false}, {"--status-addr", o.statusAddr, true}} {
		if a.addr != "" {
			if err := checkHostPort(a.flag, a.addr, a.zeroOK); err != nil {
				return cfg, nil, err
			}
		}
	}
	listen, prev, next := o.listen, o.prev, o.next
	if o.chain != "" {
		if o.prev != "" || o.next != "" {
			return cfg, nil, usagef("--chain already gives the neighbours: drop --prev and --next")
		}
		ms, err := parseChain(o.chain)
		if err != nil {
			return cfg, nil, usageError{err.Error()}
		}
		if o.name == "" { // a StatefulSet pod's name-0, name-1, ...
			if o.name, err = hostName(ms, osHostname); err != nil {
				return cfg, nil, usageError{err.Error()}
			}
		}
		l, p, n, err := place(ms, o.name)
		if err != nil {
			return cfg, nil, usageError{err.Error()}
		}
		prev, next = p, n
		o.tls.SelfName = o.name
		o.tls.PrevName, o.tls.NextName = chainNames(ms, o.name)
		o.tls.ChainNames = nil
		for _, m := range ms {
			o.tls.ChainNames = append(o.tls.ChainNames, m.Name)
		}
		if listen == "" {
			listen = l
		} else if p == "" {
			return cfg, nil, usagef("--listen: %s is the Head of --chain and has no predecessor to listen for", o.name)
		}
	}
	if prev == "" && listen != "" {
		return cfg, nil, usagef("--listen needs --prev: a node that listens has a predecessor (the Head only dials)")
	}
	o.hasPred = prev != ""
	if o.approve && o.control == "" {
		return cfg, nil, usagef("--approve needs --control: chainsync approve and deny talk to this node's control socket")
	}
	if o.round != "" && o.rounds != 0 {
		return cfg, nil, usagef("use --round or --rounds, not both")
	}
	if o.rounds < 0 || o.rounds > 100000 {
		return cfg, nil, usagef("--rounds %d: use 1..100000", o.rounds)
	}
	if o.readyCmd != "" && o.readyFile != "" {
		return cfg, nil, usagef("use --ready-cmd or --ready-file, not both")
	}
	if o.readyInterval <= 0 {
		return cfg, nil, usagef("--ready-interval must be positive")
	}
	if o.statusInterval < 0 {
		return cfg, nil, usagef("--status-interval must not be negative")
	}
	if o.parallel < 1 {
		return cfg, nil, usagef("--parallel must be at least 1")
	}
	if o.maxOpen < 0 || o.maxOpen == 0 && o.serving() {
		return cfg, nil, usagef("--max-open must be at least 1 (the rounds a Head keeps in flight)")
	}
	if o.maxPending < 1 || o.pendingTimeout <= 0 {
		return cfg, nil, usagef("--max-pending must be at least 1 and --pending-timeout positive")
	}
	if o.resumeTask == "" {
		o.resumeTask = "fail"
	}
	resume, err := chainsync.ParseResumeTask(o.resumeTask)
	if err != nil {
		return cfg, nil, usagef("--resume-task %q: use fail, done or rerun", o.resumeTask)
	}
	policy, err := chainsync.ParseFaultPolicy(o.faultPolicy)
	if o.faultPolicy == "" {
		policy, err = chainsync.FaultHalt, nil
	}
	if err != nil {
		return cfg, nil, usagef("--fault-policy %q: use halt or wait", o.faultPolicy)
	}
	if o.serving() && !o.heartbeatGiven {
		// A served chain speaks the extension lines, so that a round that
		// fails anywhere ends everywhere and the Head learns how.
		o.heartbeat = servedHeartbeat
	}
	if o.heartbeat > 0 && o.heartbeat < 10*time.Millisecond {
		return cfg, nil, usagef("--heartbeat %v is too short: use at least 10ms (a few hundred ms or more across a network)", o.heartbeat)
	}
	if o.onFaultTimeout < 0 {
		return cfg, nil, usagef("--on-fault-timeout must not be negative")
	}
	if o.linger < 0 {
		return cfg, nil, usagef("timeouts must not be negative")
	}
	switch {
	case o.statusPin != "" && (o.statusAddr == "" || o.tls.CertFile == ""):
		return cfg, nil, usagef("--status-pin needs --status-addr and --tls-cert: it names who may read the HTTPS status endpoint of a node with a certificate")
	case o.statusAddr != "" && o.tls.CertFile != "" && o.tls.CAFile == "" && o.statusPin == "":
		return cfg, nil, usagef("--status-addr on a node with --tls-cert serves HTTPS and needs to know its readers: give --tls-ca (clients with a certificate from that CA) or --status-pin PIN (chainsync pin CLIENT.pem prints it)")
	}
	if err := o.checkServe(prev != ""); err != nil {
		return cfg, nil, err
	}
	rounds := []string{o.round}
	if o.serving() && o.round == "" && o.rounds == 0 {
		rounds = nil // every round is opened while the chain runs
	}
	if o.rounds > 0 {
		rounds = make([]string, o.rounds)
		for i := range rounds {
			rounds[i] = strconv.Itoa(i)
		}
	}
	cfg = chainsync.Config{
		Name: o.name, Listen: listen, Prev: prev, Next: next,
		Rounds: rounds, UnnamedColon: o.colon, MaxRounds: max(len(rounds), 1), Follow: o.serving(),
		MaxParallelTasks: o.parallel,
		MaxPending:       o.maxPending, PendingTimeout: o.pendingTimeout,
		ConnectTimeout: o.connectTimeout, PhaseTimeout: o.phaseTimeout,
		StateDir: o.stateDir, ResumeTask: resume,
		Heartbeat: o.heartbeat, TaskTimeout: o.taskTimeout, FaultPolicy: policy, Approve: o.approve,
		// A node is done only once its final COMPLETE is handed to its
		// predecessor; --linger bounds the wait for a link to hand it to.
		ExitWaveTimeout: max(o.linger, time.Second),
	}
	if o.serving() {
		// A follower cannot know the Head's --max-open: room for plenty.
		cfg.MaxRounds = max(1024, o.maxOpen+len(rounds))
		cfg.KeepFinished = max(keepServed, 4*cfg.MaxRounds)
	}
	if o.stateDir == "" && o.resumeTask != "fail" {
		return cfg, nil, usagef("--resume-task needs --state-dir: without it a restarted node does not know it was interrupted")
	}
	if o.stateDir != "" {
		// Whoever can write the directory can rewrite the journal.
		if err := journal.CheckDir(o.stateDir); err != nil {
			msg := strings.TrimPrefix(err.Error(), journal.ErrUnsafe.Error()+": ")
			return cfg, nil, usagef("--state-dir %s", strings.TrimPrefix(msg, "chainsync: state directory "))
		}
	}
	if cfg.PrevName == "" && cfg.NextName == "" {
		cfg.PrevName, cfg.NextName = o.tls.PrevName, o.tls.NextName
	}
	cfg.Chain = o.tls.ChainNames // an undelivered round names the nodes to ask
	if o.prev != "" {
		// An explicit --prev is checked: the predecessor's connections
		// must come from its host (with --chain it is only a name).
		cfg.PrevHostOnly = true
	}
	if err := o.receiptConfig(&cfg); err != nil { // receipts.go
		return cfg, nil, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, flagError(err)
	}
	if cfg.PrevHostOnly {
		if err := resolvesPrev(o.prev); err != nil {
			return cfg, nil, err
		}
	}
	o.identify(&cfg) // --chain: the identity line, or the predecessor's host (identity.go)
	// The security log and warnings speak only of the links this node has.
	if err := o.liveConfig(&cfg); err != nil {
		return cfg, nil, err
	}
	o.tls.NoPred, o.tls.NoSucc = listen == "", next == ""
	return cfg, rounds, nil
}

// runMain is chainsync run.
func runMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	quietFlags(fs)
	var o runOpts
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return flagFailed(os.Stdout, stderr, fs, "run", err)
	}
	fromEnv, err := applyEnv(fs, os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "chainsync run: %v\n(see chainsync run --help)\n", err)
		return ExitUsage
	}
	o.noteGiven(fs)
	cfg, rounds, err := o.config(fs.Args())
	if err == nil && o.tls.Enabled() {
		var sc *secure.Config
		if sc, err = secure.Load(o.tls); err == nil {
			err = sc.CheckSides(cfg.Role().HasPred(), cfg.Role().HasSucc())
		}
		if err != nil {
			err = usageError{err.Error()}
		} else {
			cfg.Secure = sc
			for _, w := range sc.Warnings() {
				fmt.Fprintln(stderr, "chainsync: warning:", w)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "chainsync run: %v%s\n(see chainsync run --help)\n", err, envSources(err, fromEnv))
		return ExitUsage
	}
	log, err := o.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "chainsync run: %v%s\n", err, envSources(err, fromEnv))
		return ExitUsage
	}
	logEnv(log, fromEnv)
	// A misspelt variable would otherwise be ignored without a word.
	for _, w := range unknownEnvWarnings(fs, os.Environ(), "run") {
		log.Warn(w)
	}
	cfg.Logger = log
	return run(cfg, rounds, &o, fs.Args(), log)
}

// stopSignals stop a running node: it logs the signal, passes it to its
// running task's process group, and exits 130.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// run starts the node, makes it ready per round, and waits for every round.
func run(cfg chainsync.Config, rounds []string, o *runOpts, cmd []string, log *slog.Logger) (code int) {
	role := cfg.Role()
	rp, err := taskrun.StartReaper()
	if err != nil {
		log.Warn("cannot start the task reaper: a task's children may outlive this node if it is killed", "err", err.Error())
	}
	defer rp.Close()
	cgroups := taskrun.OpenCgroups(o.stateDir, log) // a cgroup per task, where the node may make them
	defer cgroups.Close()
	tasks := taskrun.New(taskrun.Config{Cmd: cmd, Env: []string{"CHAINSYNC_ROLE=" + role.String(), "CHAINSYNC_NODE=" + o.name},
		Reaper: rp, Cgroups: cgroups, Log: log})
	cfg.Task = func(ctx context.Context, round string) error {
		return tasks.Run(ctx, taskrun.Grace, "CHAINSYNC_ROUND="+round)
	}
	if o.worker {
		w := o.newWorker(tasks, cmd[0], role.String(), o.taskTimeout, log) // workercmd.go
		defer w.Close()
		cfg.Task = w.Run
	}
	if o.undoCmd != "" {
		cfg.Undo = undoFunc(o, rp, role, log) // undo.go
	}
	if o.verifyCmd != "" {
		cfg.Verify = func(ctx context.Context, round string) error {
			return verify(ctx, o, round, log)
		}
	}
	// The fault hook runs for every fault the node reports, also those
	// that, with --fault-policy wait, end no round.
	hooks := taskrun.NewHooks(taskrun.HookConfig{OnFault: o.onFault, OnRecover: o.live.onRecover, OnHold: o.onHold,
		Timeout: o.onFaultTimeout, Node: o.name, Log: log})
	if o.onFault != "" || o.live.onRecover != "" {
		cfg.Trace = hooks.Observe
	}
	if o.onHold != "" {
		cfg.OnHold = hooks.Hold // --on-hold (steer.go)
	}
	// SIGHUP and SIGQUIT stop the node like SIGTERM: a node is never left
	// half-stopped by a closed terminal, nor dumps its goroutines.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)
	// Before the signals are let go: a stop while a hook still runs stops
	// the hook and the node at once (exit 130).
	defer func() { code = waitHooks(hooks, code, sigs, log) }()
	sd := openNotify(log)     // before Start: no task may inherit NOTIFY_SOCKET
	o.launchWorker(sigs, log) // --worker: after openNotify, for the same reason (workercmd.go)
	obs, err := o.startObservers(&cfg)
	if err != nil {
		log.Error("cannot start", "err", err.Error())
		_ = sd.Stopping("cannot start: " + err.Error())
		return ExitError
	}
	defer obs.close(log)
	if code := makeStateDir(o.stateDir, log); code != ExitOK {
		_ = sd.Stopping("cannot start: cannot create --state-dir")
		return code
	}
	node, err := chainsync.Start(cfg)
	if errors.Is(err, chainsync.ErrAlreadyEnded) {
		log.Error(strings.TrimPrefix(err.Error(), chainsync.ErrAlreadyEnded.Error()+": ")) // also under --quiet: nothing ran
		_ = sd.Stopping("cannot start: " + err.Error())
		return ExitUsage
	}
	if err != nil {
		log.Error("cannot start", "err", err.Error())
		_ = sd.Stopping("cannot start: " + err.Error())
		if errors.Is(err, journal.ErrUnsafe) {
			return ExitUsage // a link planted in --state-dir: the operator must look
		}

		return ExitError
	}
	// The state directory is ours now: kill what an earlier process's
	// task left in its cgroup (cgroup_linux.go).
	cgroups.ReapEarlier()
	obs.serve(node, log) // before READY=1, so the status endpoint is up by then
	if o.control != "" {
		// Every node's control socket takes steering requests; the
		// Head's opens rounds too, once it serves (serveRun).
		cs, err := listenControl(o.control, node, log)
		if err != nil {
			log.Error("cannot start", "err", err.Error())
			_ = sd.Stopping("cannot start: " + err.Error())
			node.Close()
			return ExitError
		}
		defer cs.close()
		o.ctl = cs
	}
	defer startNotify(sd, node, rounds, log).stop() // READY=1 now: listening and dialing

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if role.HasPred() {
		for _, r := range rounds {
			bug.Go(func() { becomeReady(ctx, node, r, o, log) })
		}
	} else {
		// The Head opens its rounds in the order given, which is then the
		// order of the tasks on every node (--parallel 1).
		bug.Go(func() {
			for _, r := range rounds {
				becomeReady(ctx, node, r, o, log)
			}
		})
	}
	if o.statusInterval > 0 {
		bug.Go(func() { reportStatus(ctx, node, o.statusInterval, log) })
	}
	stop := func(s os.Signal) int {
		if f, ok := s.(workerFailed); ok { // workercmd.go
			log.Error("cannot start: the worker is not up, so this node cannot take part in any round", "err", f.err.Error())
			_ = sd.Stopping("cannot start: " + f.err.Error())
			cancel()
			node.Close()
			return ExitError
		}
		log.Warn("interrupted; stopping (a running task's process group gets the signal too)", "signal", s.String())
		if ss, ok := s.(syscall.Signal); ok {
			tasks.SetStopSignal(ss)
		}
		hooks.Stop()
		cancel()
		node.Close()
		return ExitInterrupted
	}
	if o.serving() {
		code := serveRun(ctx, node, rounds, o, log, sigs, stop)
		cancel()
		halted := code == ExitTaskFailed || code == ExitFault
		if halted {
			handNotices(node, o.linger, sigs, log)
		}
		if o.receipts && halted {
			// Halted: the receipts of the rounds that just ended may
			// still be on their way back (with the fault notice).
			var ended []string
			for _, f := range node.Snapshot().Finished {
				ended = append(ended, f.Round)
			}
			waitReceipts(node, ended, o.linger, sigs, log) // receipts.go
		}
		node.Close()
		return code
	}

	results := make(chan chainsync.Result, len(rounds))
	for _, r := range rounds {
		bug.Go(func() {
			res, _ := node.Wait(context.Background(), r)
			results <- res
		})
	}
	code = ExitOK
	for range rounds {
		select {
		case res := <-results:
			code = worse(code, resultCode(res))
		case s := <-sigs:
			return stop(s)
		}
	}
	cancel()
	if code == ExitTaskFailed || code == ExitFault {
		handNotices(node, o.linger, sigs, log)
	}
	if o.receipts {
		waitReceipts(node, rounds, o.linger, sigs, log) // receipts.go
	}
	if code == ExitOK && role.HasPred() {
		log.Info("all rounds done; waiting for the predecessor to hang up", "at_most", o.linger)
		lctx, lcancel := context.WithTimeout(context.Background(), o.linger)
		select {
		case err := <-lingerDone(lctx, node):
			if err != nil {
				log.Warn("predecessor still connected after --linger; exiting anyway", "linger", o.linger)
			}
		case s := <-sigs:
			log.Warn("interrupted while lingering", "signal", s.String())
		}
		lcancel()
	}
	node.Close()
	if code == ExitOK {
		log.Info("all rounds done", "rounds", len(rounds))
	}
	return code
}

// waitHooks waits for the hooks still running as the node ends (each is
// bounded by --on-fault-timeout) and returns code; a stop signal
// meanwhile kills them and makes it ExitInterrupted.
func waitHooks(hooks *taskrun.Hooks, code int, sigs <-chan os.Signal, log *slog.Logger) int {
	done := make(chan struct{})
	bug.Go(func() {
		hooks.Wait()
		close(done)
	})
	select {
	case <-done:
		return code
	case <-time.After(100 * time.Millisecond):
	}
	log.Info("waiting for the hooks still running (each at most --on-fault-timeout)")
	select {
	case <-done:
		return code
	case s := <-sigs:
		log.Warn("interrupted while the hooks ran; stopping them", "signal", s.String())
		hooks.Stop()
		<-done
		return ExitInterrupted
	}
}

// handNotices waits, at most linger, until the node has handed its fault
// notices (of its failed task, of a config-mismatch it found, of a halt
// it passes on) to both neighbours: one whose link was down when they
// went (a neighbour starting or restarting, or re-dialing this node after
// this node restarted) gets them when the link is up again, and only a
// node still running can send them. Without them that neighbour would
// wait for the round for ever. A notice that blames the neighbour it is
// for is not waited for (Snapshot.NoticesOwed).
func handNotices(node *chainsync.Node, linger time.Duration, sigs <-chan os.Signal, log *slog.Logger) {
	owed := node.Snapshot().NoticesOwed
	if len(owed) == 0 {
		return
	}
	log.Info("handing the fault notice to the neighbours whose link is down before exiting", "to", sidesText(owed), "at_most", linger)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	deadline := time.NewTimer(linger)
	defer deadline.Stop()
	for {
		select {
		case <-t.C:
			if owed = node.Snapshot().NoticesOwed; len(owed) == 0 {
				return
			}
		case <-deadline.C:
			log.Warn("the fault notice did not reach every neighbour within --linger; exiting anyway (they find the fault by their own timeouts, if set)", "to", sidesText(owed), "linger", linger)
			return
		case s := <-sigs:
			log.Warn("interrupted while handing the fault notice on", "signal", s.String())
			return
		}
	}
}

// sidesText names sides: "pred", "succ" or "pred and succ".
func sidesText(sides []protocol.Side) string {
	names := make([]string, len(sides))
	for i, s := range sides {
		names[i] = s.String()
	}
	return strings.Join(names, " and ")
}

func lingerDone(ctx context.Context, node *chainsync.Node) <-chan error {
	ch := make(chan error, 1)
	bug.Go(func() { ch <- node.Linger(ctx, 200*time.Millisecond) })
	return ch
}

// worse is the exit status of two rounds' ends: a task that failed here
// (3) says more than a fault elsewhere that ended other rounds with it
// (4) or a cancel (5); an interruption outranks them all.
func worse(a, b int) int {
	rank := func(c int) int {
		switch c {
		case ExitOK:
			return 0
		case ExitFault:
			return 1
		case ExitCancelled:
			return 2
		case ExitTaskFailed:
			return 3
		}
		return 4
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

func resultCode(res chainsync.Result) int {
	switch res.Status {
	case chainsync.StatusDone:
		return ExitOK
	case chainsync.StatusTaskFailed:
		return ExitTaskFailed
	case chainsync.StatusFault, chainsync.StatusUndelivered:
		return ExitFault
	case chainsync.StatusCancelled:
		return ExitCancelled
	}
	return ExitInterrupted
}

// becomeReady waits for --ready-cmd or --ready-file (if any), then tells
// the node it is locally ready for round.
func becomeReady(ctx context.Context, node *chainsync.Node, round string, o *runOpts, log *slog.Logger) {
	if waitReady(ctx, round, o, log) != nil {
		return
	}
	log.Info("locally ready", "round", round)
	err := node.Ready(round)
	switch {
	case errors.Is(err, protocol.ErrRoundFinished):
		log.Info("round already over here (its end is in --state-dir); nothing to do", "round", round)
	case err != nil && ctx.Err() == nil:
		log.Error("ready failed", "round", round, "err", err.Error())
	}
}

// reportStatus logs, every interval, where each unfinished round stands
// and which links are up.
func reportStatus(ctx context.Context, node *chainsync.Node, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		snap := node.Snapshot()
		links := append(statusLinks(node, snap), reportGraces(snap, log)...) // liveness.go
		for _, r := range snap.Rounds {
			args := append([]any{"round", r.Round, "for", time.Since(r.Since).Round(time.Second)}, links...)
			log.Info("still "+r.Doing(), args...)
		}
	}
}

func upDown(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

// makeStateDir creates a --state-dir that does not exist, with a warning
// that names it: a typo in the path would otherwise start the node
// afresh, its rounds forgotten, in silence. The warning is logged at WARN,
// so --quiet shows it, before the node starts.
func makeStateDir(dir string, log *slog.Logger) int {
	if dir == "" {
		return ExitOK
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		return ExitOK // there (the journal checks it), or unreadable: Start says why
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Error("cannot create --state-dir", "state_dir", abs, "err", err.Error())
		return ExitError
	}
	log.Warn("--state-dir did not exist: created it, so this node starts afresh with nothing to resume; if that is a typo for an existing state directory, stop this node and correct --state-dir", "state_dir", abs)
	return ExitOK
}

// verify runs --verify-cmd every --ready-interval until it exits 0: the
// health gate between this node's task and its successor's ("the switch
// is back and healthy before the next one restarts"). ctx bounds it
// (--task-timeout, or the node stopping).
func verify(ctx context.Context, o *runOpts, round string, log *slog.Logger) error {
	t := time.NewTicker(o.readyInterval)
	defer t.Stop()
	for attempt := 1; ; attempt++ {
		err := taskrun.RunShell(ctx, o.verifyCmd, "CHAINSYNC_ROUND="+round, "CHAINSYNC_NODE="+o.name)
		if ctx.Err() != nil {
			return fmt.Errorf("--verify-cmd never succeeded (%d attempts): %w", attempt, ctx.Err())
		}
		if err == nil {
			log.Info("verified: --verify-cmd succeeded; sending COMPLETE on", "round", round, "attempts", attempt)
			return nil
		}
		if attempt == 1 {
			log.Info("task done; not healthy yet (--verify-cmd failed), checking again every "+o.readyInterval.String(), "round", round, "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("--verify-cmd never succeeded (%d attempts): %w", attempt, ctx.Err())
		case <-t.C:
		}
	}
}
