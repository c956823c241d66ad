package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chainsync-go/chainsync/internal/bug"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/secure"
	"github.com/chainsync-go/chainsync/transport"
)

const checkUsage = `Usage: chainsync check [run flags] [--timeout D] [-- COMMAND [ARG...]]

Preflight for chainsync run, with the same flags (and CHAINSYNC_
variables): validates the configuration, then reaches both neighbours
exactly as run would, through the same TLS, pins and pre-shared key, and
sends no protocol line, so no round starts. It listens for the predecessor
and dials the successor at the same time, so neighbours that both run check
see each other: start check on every node within --timeout. A task after --
is checked to be runnable; with --worker it is started, must answer hello
within --timeout, and is stopped. Two neighbours that both run check also
compare their round settings (--round, --rounds), --heartbeat (on or off,
and its interval), --serve, --undo and --chain ("C's --chain is A,C,B; this
node's is A,B,C"). A predecessor connection from the address --chain gives
another node is never "ok": it names that node. Prints one line per link,
"ok" or the reason (wrong CA, pin mismatch, PSK mismatch, configuration
mismatch, refused, unreachable, ...).

Example, before the maintenance window, on every node:
  chainsync check --chain A=10.0.0.1:7000,B=10.0.0.2:7000,C=10.0.0.3:7000 --name B \
    --tls-cert B.pem --tls-key B-key.pem --tls-ca ca.pem -- ./upgrade.sh

Exit status: 0 every link checks out; 1 a link does not; 2 usage error (the
configuration itself is wrong: run would refuse it too).

Flags (those of chainsync run, plus --timeout):
`

// checkOpts are chainsync check's flags: run's plus its own.
type checkOpts struct {
	runOpts
	timeout time.Duration
}

func (o *checkOpts) flags(fs *flag.FlagSet) {
	o.runOpts.flags(fs)
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the neighbours (the successor to be reachable, the predecessor to connect)")
}

// confirmWait is how long a dialer waits after its TLS handshake for the
// successor's verdict: a TLS 1.3 server that refuses the client's
// certificate says so only after the client considers the handshake done.
const confirmWait = 2 * time.Second

// speakFirstWait is how long the listening side of check waits for a
// connection to speak before it offers its settings line: a running
// predecessor that is ready speaks at once; another check waits for the
// offer.
const speakFirstWait = 200 * time.Millisecond

// linkCheck is the outcome for one link.
type linkCheck struct {
	ok     bool
	detail string // ok: what was verified; otherwise the reason
}

// checkMain is chainsync check.
func checkMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	quietFlags(fs)
	var o checkOpts
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return flagFailed(stdout, stderr, fs, "check", err)
	}
	var fromEnv []envSetting
	fail := func(err error) int {
		fmt.Fprintf(stderr, "chainsync check: %v%s\n(see chainsync check --help)\n", err, envSources(err, fromEnv))
		return ExitUsage
	}
	fromEnv, err := applyEnv(fs, os.LookupEnv)
	if err != nil {
		return fail(err)
	}
	o.noteGiven(fs)
	if o.timeout <= 0 {
		return fail(usagef("--timeout must be positive"))
	}
	task := fs.Args()
	if len(task) == 0 {
		// No task to check: give config one that certainly runs.
		exe, err := os.Executable()
		if err != nil {
			exe = "sh"
		}
		task = []string{exe}
	}
	cfg, _, err := o.config(task)
	if err != nil {
		return fail(err)
	}
	log, err := o.logger(stderr)
	if err != nil {
		return fail(err)
	}
	logEnv(log, fromEnv)
	sec, err := secure.Load(o.tls)
	if err == nil {
		err = sec.CheckSides(cfg.Role().HasPred(), cfg.Role().HasSucc())
	}
	if err != nil {
		return fail(err)
	}

	role := cfg.Role()
	fmt.Fprintf(stdout, "%s: %s; links: %s\n", labelled("node", o.name), role, sec.Describe())
	for _, w := range sec.Warnings() {
		fmt.Fprintln(stdout, "warning:", w)
	}
	for _, w := range unknownEnvWarnings(fs, os.Environ(), "check") {
		fmt.Fprintln(stdout, "warning:", w)
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var pred, succ chan linkCheck
	if role.HasPred() {
		// Listen before dialing: the successor dial's source port must not
		// take this node's own listen port.
		pred = make(chan linkCheck, 1)
		ln, err := transport.Listen(ctx, cfg.Listen)
		if err != nil {
			pred <- linkCheck{false, "cannot listen: " + err.Error()}
		} else {
			bug.Go(func() { pred <- checkPred(ctx, sec, ln, cfg.PendingTimeout, o.timeout, o.settings()) })
		}
	}
	if role.HasSucc() {
		succ = make(chan linkCheck, 1)
		bug.Go(func() { succ <- checkSucc(ctx, sec, &cfg, o.timeout, o.settings()) })
	}
	code := ExitOK
	report := func(what string, ch chan linkCheck) {
		if ch == nil {
			return
		}
		r := <-ch
		verdict := "ok"
		if !r.ok {
			verdict, code = "FAIL", ExitError
		}
		fmt.Fprintf(stdout, "%s: %s: %s\n", what, verdict, r.detail)
	}
	report(fmt.Sprintf("%s (listening on %s)", labelled("predecessor", peerName(o.chain, cfg.Prev)), cfg.Listen), pred)
	report(fmt.Sprintf("%s at %s", labelled("successor", peerName(o.chain, cfg.Next)), cfg.Next), succ)
	if pred == nil && succ == nil {
		fmt.Fprintln(stdout, "no neighbours: a one-node chain has no links to check")
	}
	if o.worker && fs.NArg() > 0 { // the worker says hello (workercmd.go)
		if r := checkWorker(&o.runOpts, fs.Args(), role.String(), o.timeout); r.ok {
			fmt.Fprintf(stdout, "ok: %s\n", r.detail)
		} else {
			fmt.Fprintf(stdout, "FAIL: %s\n", r.detail)
			code = ExitError
		}
	}
	for _, r := range localChecks(&o.runOpts) {
		verdict := "ok"
		if !r.ok {
			verdict, code = "FAIL", ExitError
		}
		fmt.Fprintf(stdout, "%s: %s\n", verdict, r.detail)
	}
	return code
}

// localChecks checks what run would need on this machine besides the
// links, without changing anything: that --status-addr can be bound and
// that the directory of --trace exists.
func localChecks(o *runOpts) []linkCheck {
	var out []linkCheck
	if o.statusAddr != "" {
		ln, err := net.Listen("tcp", o.statusAddr)
		if err != nil {
			out = append(out, linkCheck{false, "status endpoint (--status-addr): cannot listen: " + err.Error()})
		} else {
			ln.Close()
			out = append(out, linkCheck{true, "status endpoint (--status-addr " + o.statusAddr + "): can listen"})
		}
	}
	if o.traceFile != "" {
		dir := filepath.Dir(o.traceFile)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			out = append(out, linkCheck{false, fmt.Sprintf("trace file (--trace %s): directory %s does not exist", o.traceFile, dir)})
		}
	}
	return out
}

// labelled returns "what name", or what alone for an unnamed node.
func labelled(what, name string) string {
	if name == "" {
		return what
	}
	return what + " " + name
}

// peerName returns the name --chain gives addr, or "".
func peerName(chain, addr string) string {
	if chain == "" || addr == "" {
		return ""
	}
	ms, err := parseChain(chain)
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if m.Addr == addr {
			return m.Name
		}
	}
	return ""
}

// checkPred accepts on ln, as run does, until a would-be predecessor
// connects and completes the handshake run would demand (secure.Accept,
// within pending), or ctx ends. A connection that never starts TLS (a
// port scanner, a TCP health probe) does not decide; any TLS verdict does.
func checkPred(ctx context.Context, sec *secure.Config, ln net.Listener, pending, timeout time.Duration, mine settings) linkCheck {
	addr := ln.Addr().String()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	last := ""
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				if last != "" {
					return linkCheck{false, last}
				}
				return linkCheck{false, fmt.Sprintf("no connection from the predecessor within %v: is it running chainsync check or run with this node as its successor? does a firewall block %s?", timeout, addr)}
			}
			return linkCheck{false, "accept: " + err.Error()}
		}
		transport.Tune(c)
		peer := c.RemoteAddr().String()
		sc, err := secure.Accept(ctx, sec, c, time.Now().Add(pending))
		if err != nil {
			var re *secure.RefusedError
			if errors.As(err, &re) && (re.Reason == secure.ReasonNotTLS || re.Reason == secure.ReasonTimeout ||
				(re.Reason == secure.ReasonHandshake && errors.Is(err, io.EOF))) {
				last = refusal(err)
				continue
			}
			if ctx.Err() != nil && last != "" {
				return linkCheck{false, last}
			}
			return linkCheck{false, refusal(err)}
		}
		detail := "connected from " + peer + tlsDetail(sc, "client")
		// A running predecessor speaks first (its identity line, or its
		// READY once ready): it is sent nothing, since a line it does not
		// know would be bad input to it. Else offer this node's settings;
		// a predecessor running check answers with its own (a running node
		// does not, and closes).
		br := bufio.NewReaderSize(sc, 512)
		_ = sc.SetReadDeadline(time.Now().Add(speakFirstWait))
		var theirs settings
		ok := false
		if _, err := br.Peek(1); err == nil {
			detail += "; a running node (it spoke first), sent nothing"
		} else {
			_ = sc.SetDeadline(time.Now().Add(confirmWait))
			_, _ = io.WriteString(sc, mine.line())
			theirs, ok = readSettings(br)
		}
		sc.Close()
		// Never "ok" for a connection from another node's address, nor
		// from one run would refuse (identity.go).
		wrong := mine.wrongSource(c.RemoteAddr())
		if ok {
			diffs := []string{}
			if wrong != "" {
				diffs = append(diffs, wrong)
			}
			if d := mine.chainDiff(theirs.whoami); d != "" {
				diffs = append(diffs, d)
			}
			if d := compareSettings(theirs, mine); d != "" {
				diffs = append(diffs, d)
			}
			if len(diffs) > 0 {
				return linkCheck{false, "configuration mismatch with the predecessor: " + strings.Join(diffs, "; ")}
			}
			detail += "; same round settings, --heartbeat and --serve"
			if theirs.digest != "" {
				detail += ", same --chain"
			}
		}
		if wrong != "" {
			return linkCheck{false, wrong}
		}
		return linkCheck{true, detail}
	}
}

// checkSucc reaches cfg's successor as run does (secure.Dial, with run's
// backoff and handshake bound) until it answers or ctx ends, and sends
// nothing.
func checkSucc(ctx context.Context, sec *secure.Config, cfg *chainsync.Config, timeout time.Duration, mine settings) linkCheck {
	addr := cfg.Next
	b := transport.Backoff{Min: cfg.BackoffMin, Max: cfg.BackoffMax}
	var lastErr error
	// From this node's own address, as run dials (identity.go).
	sc, err := secure.Dial(ctx, sec, transport.DialFrom(cfg.DialFrom, nil), addr, &b, cfg.PendingTimeout, func(err error, _ int, _ time.Duration) { lastErr = err })
	if err != nil {
		var re *secure.RefusedError
		if errors.As(err, &re) || ctx.Err() == nil {
			return linkCheck{false, refusal(err)} // reached, then refused
		}
		return linkCheck{false, dialReason(addr, lastErr, timeout)}
	}
	defer sc.Close()
	// A successor running check offers its settings first; answer with
	// this node's and compare. A running node says nothing.
	br := bufio.NewReaderSize(sc, 512)
	_ = sc.SetReadDeadline(time.Now().Add(confirmWait))
	if peek, err := br.Peek(len(settingsTag)); err == nil && string(peek) == settingsTag {
		theirs, ok := readSettings(br)
		if ok {
			_ = sc.SetWriteDeadline(time.Now().Add(confirmWait))
			_, _ = io.WriteString(sc, mine.line())
			diff := mine.chainDiff(theirs.whoami)
			if d := compareSettings(mine, theirs); d != "" && diff != "" {
				diff += "; " + d
			} else if d != "" {
				diff = d
			}
			if diff != "" {
				return linkCheck{false, "configuration mismatch with the successor: " + diff}
			}
			what := "connected, plain TCP"
			if sec.Enabled() {
				what = "connected" + tlsDetail(sc, "server")
			}
			return linkCheck{true, what + "; same round settings, --heartbeat and --serve"}
		}
	}
	if !sec.Enabled() {
		return linkCheck{true, "connected, plain TCP"}
	}
	// Wait for the successor's verdict on this node's certificate: an
	// alert (refused), close_notify (a peer running check accepted and
	// hung up) or silence (a running node waits for a protocol line).
	_ = sc.SetReadDeadline(time.Now().Add(confirmWait))
	var buf [1]byte
	_, err = br.Read(buf[:])
	var re *secure.RefusedError
	switch {
	case errors.As(err, &re):
		return linkCheck{false, refusal(err)}
	case errors.Is(err, syscall.ECONNRESET):
		return linkCheck{false, "the successor reset the connection right after the handshake: it probably refused this node (see its log or check output)"}
	}
	return linkCheck{true, "connected" + tlsDetail(sc, "server")}
}

// tlsDetail describes the verified peer certificate of a secured conn.
func tlsDetail(c net.Conn, what string) string {
	cs, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return ", plain TCP"
	}
	st := cs.ConnectionState()
	s := ", " + tls.VersionName(st.Version)
	if len(st.PeerCertificates) > 0 {
		cert := st.PeerCertificates[0]
		s += fmt.Sprintf(", %s certificate %q %s", what, cert.Subject.CommonName, secure.PinOf(cert))
	}
	return s
}

// refusal names a handshake failure by what the operator must fix.
func refusal(err error) string {
	var re *secure.RefusedError
	if !errors.As(err, &re) {
		return err.Error()
	}
	kind := string(re.Reason)
	switch re.Reason {
	case secure.ReasonUntrusted:
		kind = "wrong CA"
	case secure.ReasonWrongPin:
		kind = "pin mismatch"
	case secure.ReasonPSKMismatch, secure.ReasonNoPSKProof:
		kind = "PSK mismatch"
	case secure.ReasonRejectedByPeer:
		kind = "refused by the peer"
	}
	return kind + ": " + re.Error()
}

// dialReason says why the successor could not be reached.
func dialReason(addr string, err error, timeout time.Duration) string {
	var dnsErr *net.DNSError
	switch {
	case err == nil:
		return fmt.Sprintf("unreachable: no answer from %s within %v (wrong address, or a firewall dropping packets?)", addr, timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("refused: nothing listens on %s (is the successor running chainsync check or run there?)", addr)
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("unreachable: cannot resolve %s: %v", addr, dnsErr)
	}
	return fmt.Sprintf("unreachable: %v", strings.TrimPrefix(err.Error(), "dial tcp "))
}

// settingsTag starts the line two nodes running check exchange to compare
// their settings. It is not a protocol line: only check sends it, and only
// to a neighbour that runs check too (a running node never offers one).
const settingsTag = "CHAINSYNC-CHECK "

// settings are what must agree between neighbours for a round to run:
// the rounds (--round, --rounds), the extension lines (--heartbeat), and
// --serve.
type settings struct {
	rounds    string // "round=ID", "rounds=N" or "unnamed"
	heartbeat bool
	interval  time.Duration // --heartbeat's interval; 0: not said (a check before it was compared)
	serve     bool
	undo      bool // --undo, a chain setting (docs/UNDO.md)
	whoami         // who sends it, and its --chain (identity.go)
}

func (o *runOpts) settings() settings {
	st := settings{rounds: "unnamed", heartbeat: o.heartbeat > 0, interval: o.heartbeat, serve: o.serve, undo: o.undoCmd != ""}
	switch {
	case o.rounds > 0:
		st.rounds = "rounds=" + strconv.Itoa(o.rounds)
	case o.round != "":
		st.rounds = "round=" + o.round
	}
	st.whoami = o.whoami()
	return st
}

func (st settings) line() string {
	undo := ""
	if st.undo {
		undo = " undo=true" // only then: the line of a node without it is as before
	}
	interval := ""
	if st.heartbeat {
		// A field of its own: a check that does not know it reads
		// heartbeat=true as before and ignores it.
		interval = " heartbeat_interval=" + st.interval.String()
	}
	return fmt.Sprintf("%s%s heartbeat=%t serve=%t%s%s%s\n", settingsTag, st.rounds, st.heartbeat, st.serve, st.whoami.fields(), undo, interval)
}

// readSettings reads a neighbour's settings line, if it sends one.
func readSettings(r io.Reader) (settings, bool) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 512)
	}
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, settingsTag) || len(line) > 400 {
		return settings{}, false
	}
	f := strings.Fields(strings.TrimPrefix(line, settingsTag))
	if len(f) < 3 {
		return settings{}, false
	}
	st := settings{rounds: f[0], heartbeat: f[1] == "heartbeat=true", serve: f[2] == "serve=true", undo: slices.Contains(f[3:], "undo=true"), whoami: readWhoami(f[3:])}
	for _, kv := range f[3:] {
		if v, ok := strings.CutPrefix(kv, "heartbeat_interval="); ok && st.heartbeat {
			st.interval, _ = time.ParseDuration(v)
		}
	}
	return st, true
}

// compareSettings says how a predecessor's settings differ from its
// successor's, or "" if they agree. Served chains learn their rounds from
// the Head, so their round settings may differ.
func compareSettings(pred, succ settings) string {
	var diffs []string
	if !pred.serve && !succ.serve && pred.rounds != succ.rounds {
		diffs = append(diffs, fmt.Sprintf("the predecessor runs %s, the successor %s (--round/--rounds)", describeRounds(pred.rounds), describeRounds(succ.rounds)))
	}
	if pred.heartbeat != succ.heartbeat {
		diffs = append(diffs, fmt.Sprintf("--heartbeat is %s at the predecessor and %s at the successor (set the same --heartbeat on every node of the chain, or on none)", onOff(pred.heartbeat), onOff(succ.heartbeat)))
	}
	if pred.heartbeat && succ.heartbeat && pred.interval > 0 && succ.interval > 0 && pred.interval != succ.interval {
		diffs = append(diffs, fmt.Sprintf("--heartbeat is %v at the predecessor and %v at the successor (%s)", pred.interval, succ.interval, chainsync.SameHeartbeat))
	}
	if pred.serve != succ.serve {
		diffs = append(diffs, fmt.Sprintf("--serve is %s at the predecessor and %s at the successor (set it on every node of a long-lived chain)", onOff(pred.serve), onOff(succ.serve)))
	}
	if pred.undo != succ.undo {
		diffs = append(diffs, fmt.Sprintf("--undo is %s at the predecessor and %s at the successor (set it on every node or none)", onOff(pred.undo), onOff(succ.undo)))
	}
	return strings.Join(diffs, "; ")
}

func describeRounds(s string) string {
	switch {
	case s == "unnamed":
		return "the unnamed round"
	case strings.HasPrefix(s, "round="):
		return "round " + strings.TrimPrefix(s, "round=")
	}
	return strings.TrimPrefix(s, "rounds=") + " rounds (--rounds)"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
