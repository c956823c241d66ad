package cli

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/bug"
	"github.com/chainsync-go/chainsync/receipt"
	"github.com/chainsync-go/chainsync/secure"
)

// receiptCommands are the receipt commands' entries in the command table.
func receiptCommands() []*command {
	return []*command{
		{name: "receipts", args: "verify|show FILE [flags]", summary: "check or read a round's receipts (a bundle), offline",
			usage: receiptsUsage, flags: receiptsFlags, main: receiptsMain},
		{name: "keygen", args: "--out FILE [--force]", summary: "make an Ed25519 receipt key and print its pin",
			usage: keygenUsage, flags: keygenFlags, main: keygenMain},
	}
}

const keygenUsage = `Usage: chainsync keygen --out FILE [--force]

Makes a new Ed25519 key for signing receipts, for a chain without
certificates (pre-shared keys, plain TCP): FILE holds it as PKCS #8 PEM,
mode 0600. Prints its pin, which whoever checks the chain's receipts gives
as --receipt-pin NAME=PIN. A node with a TLS certificate signs with its
TLS key and needs none. It never replaces an existing FILE unless --force
is given.

Example:
  chainsync keygen --out /etc/chainsync/receipt-key.pem
  chainsync receipts verify round-r1.jsonl --receipt-pin A=sha256//... --receipt-pin B=sha256//...

Exit status: 0 written; 1 not written (FILE exists, or cannot be written); 2 usage error.

Flags:
`

func keygenFlags(fs *flag.FlagSet) {
	fs.String("out", "", "write the key to `FILE`")
	fs.Bool("force", false, "replace FILE if it exists (receipts signed with the old key then verify only with the old pin)")
}

// keygenMain is chainsync keygen.
func keygenMain(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("keygen", flag.ContinueOnError)
	quietFlags(fset)
	keygenFlags(fset)
	if err := fset.Parse(args); err != nil {
		return flagFailed(stdout, stderr, fset, "keygen", err)
	}
	out := fset.Lookup("out").Value.String()
	force := fset.Lookup("force").Value.String() == "true"
	if out == "" || fset.NArg() > 0 {
		fmt.Fprintln(stderr, "chainsync keygen: give --out FILE and no other arguments (see chainsync keygen --help)")
		return ExitUsage
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err == nil {
		err = secure.WriteKeyFile(out, key, force)
	}
	if errors.Is(err, fs.ErrExist) {
		fmt.Fprintf(stderr, "chainsync keygen: %s exists; nothing written (give --force to replace it, or choose another --out)\n", out)
		return ExitError
	}
	var pin string
	if err == nil {
		pin, err = secure.PinOfKey(key.Public())
	}
	if err != nil {
		fmt.Fprintln(stderr, "chainsync keygen:", err)
		return ExitError
	}
	fmt.Fprintf(stdout, "wrote an Ed25519 receipt key to %s (mode 0600); its pin, for --receipt-pin NAME=PIN:\n%s\n", out, pin)
	return ExitOK
}

const receiptsUsage = `Usage: chainsync receipts verify FILE (--tls-ca CA.pem | --pin NAME=PIN... | --receipt-pin NAME=PIN...) [--chain NAMES]
       chainsync receipts show FILE

Reads a bundle of receipts, one DSSE envelope a line, as a node writes for
a round (docs/RECEIPTS.md). Offline: it connects to nothing.

verify checks that every node of the chain signed exactly one receipt for
the round, with the key its certificate (from --tls-ca, common name = the
node's name) or its pin names; that the receipts are in chain order, each
binding its predecessor's; that all are of the same round of the same
chain; and that their outcomes agree (no node after a failure ran; an
undo only before the failure, the last first). It names the node and
the rule a bundle breaks.

show prints one line per node: outcome, task (and undo) times, approvals
and denials. It checks no signature: use verify for that.

Examples:
  chainsync receipts verify round-r1.jsonl --tls-ca certs/ca.pem
  chainsync receipts verify round-r1.jsonl --receipt-pin A=sha256//... --receipt-pin B=sha256//...
  chainsync receipts show round-r1.jsonl

Exit status: 0 valid (show: read); 1 invalid, naming the node and the rule,
or FILE unreadable; 2 usage error.

Flags of verify:
`

// pinsFlag collects NAME=PIN flags into a map of pins by node.
type pinsFlag struct {
	name string
	pins map[string][]string
}

func (p *pinsFlag) String() string { return "" }

func (p *pinsFlag) Set(s string) error {
	name, pin, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return errors.New("want NAME=PIN, for example B=sha256//BASE64")
	}
	pins, err := secure.ParsePins("--"+p.name+" "+name, pin)
	if err != nil {
		return err
	}
	p.pins[name] = append(p.pins[name], pins...)
	return nil
}

type receiptsOpts struct {
	ca, chain string
	pins      map[string][]string
}

func (o *receiptsOpts) flags(fs *flag.FlagSet) {
	if o.pins == nil {
		o.pins = map[string][]string{}
	}
	fs.StringVar(&o.ca, "tls-ca", "", "the chain's CA certificate `FILE`: a node without a pin must sign with a certificate from it")
	fs.Var(&pinsFlag{"pin", o.pins}, "pin", "`NAME=PIN`: the pin of node NAME's TLS certificate key (chainsync pin NAME.pem); repeat per node")
	fs.Var(&pinsFlag{"receipt-pin", o.pins}, "receipt-pin", "`NAME=PIN`: the pin of node NAME's receipt key (chainsync keygen prints it); repeat per node")
	fs.StringVar(&o.chain, "chain", "", "the chain the receipts must be of: `NAMES` A,B,... or run's --chain NAME=HOST:PORT,... (default: the one the receipts agree on)")
}

func receiptsFlags(fs *flag.FlagSet) { (&receiptsOpts{}).flags(fs) }

// receiptsMain is chainsync receipts.
func receiptsMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "verify" && args[0] != "show" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
			printUsage(stdout, receiptsUsage, receiptsFlags)
			return ExitOK
		}
		fmt.Fprintf(stderr, "chainsync receipts: want the subcommand verify or show\n\n%s", receiptsUsage)
		return ExitUsage
	}
	sub := "receipts " + args[0]
	fset := flag.NewFlagSet(sub, flag.ContinueOnError)
	quietFlags(fset)
	var o receiptsOpts
	if args[0] == "verify" {
		o.flags(fset)
	}
	files, err := parseInterspersed(fset, args[1:])
	if err != nil {
		return flagFailed(stdout, stderr, fset, sub, err)
	}
	if len(files) != 1 {
		fmt.Fprintf(stderr, "chainsync %s: give exactly one FILE, a bundle of receipts (see chainsync receipts --help)\n", sub)
		return ExitUsage
	}
	file := files[0]
	if args[0] == "show" {
		return receiptsShow(file, stdout, stderr)
	}
	var t receipt.Trust
	t.Pins = o.pins
	if o.ca == "" && len(o.pins) == 0 {
		fmt.Fprintf(stderr, "chainsync %s: give the chain's keys: --tls-ca CA.pem, or --pin NAME=PIN / --receipt-pin NAME=PIN for each node\n", sub)
		return ExitUsage
	}
	if o.ca != "" {
		if t.Roots, err = loadRoots(o.ca); err != nil {
			fmt.Fprintf(stderr, "chainsync %s: --tls-ca %s: %v\n", sub, o.ca, err)
			return ExitUsage
		}
	}
	if o.chain != "" {
		if t.Chain, err = chainNamesFlag(o.chain); err != nil {
			fmt.Fprintf(stderr, "chainsync %s: %v\n", sub, err)
			return ExitUsage
		}
	}
	envs, code := readBundle(sub, file, stderr)
	if envs == nil {
		return code
	}
	rs, err := receipt.Verify(envs, t)
	if err != nil {
		fmt.Fprintf(stderr, "chainsync %s: %s: %v\n", sub, file, err)
		return ExitError
	}
	var outs []string
	for _, r := range rs {
		outs = append(outs, r.Node+" "+string(r.Outcome))
	}
	fmt.Fprintf(stdout, "%s: valid: %s, %d receipts: %s\n", file, roundName(rs[0]), len(rs), strings.Join(outs, ", "))
	return ExitOK
}

// readBundle reads a bundle file; on failure it reports and returns nil
// and the exit status.
func readBundle(sub, file string, stderr io.Writer) ([]receipt.Envelope, int) {
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintf(stderr, "chainsync %s: %v\n", sub, err)
		return nil, ExitError
	}
	defer f.Close()
	envs, err := receipt.ParseBundle(f)
	if err == nil && len(envs) == 0 {
		err = errors.New("no receipts in the file")
	}
	if err != nil {
		if who := lineOwner(file, err); who != "" {
			fmt.Fprintf(stderr, "chainsync %s: %s: %s's receipt is not a valid receipt: %v\n", sub, file, who, err)
		} else {
			fmt.Fprintf(stderr, "chainsync %s: %s: %v\n", sub, file, err)
		}
		return nil, ExitError
	}
	return envs, ExitOK
}

// lineOwner names the node whose receipt stands on the line of file that
// err (ParseBundle's) names, from the place in the chain of a receipt on
// another line (a bundle holds its receipts in chain order); "" if it
// cannot tell.
func lineOwner(file string, err error) string {
	var bad int
	if _, e := fmt.Sscanf(err.Error(), "line %d:", &bad); e != nil {
		return ""
	}
	data, e := os.ReadFile(file)
	if e != nil {
		return ""
	}
	n := 0
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		n++
		if len(bytes.TrimSpace(line)) == 0 || n == bad {
			continue
		}
		env, e := receipt.Unmarshal(bytes.TrimSpace(line))
		if e != nil {
			continue
		}
		st, e := env.Open()
		if e != nil {
			continue
		}
		if i := slices.Index(st.Predicate.Chain, st.Predicate.Node); i >= 0 {
			if j := i + bad - n; j >= 0 && j < len(st.Predicate.Chain) {
				return st.Predicate.Chain[j]
			}
		}
		return ""
	}
	return ""
}

// loadRoots reads the CA certificates of a PEM file.
func loadRoots(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate in the file")
	}
	return pool, nil
}

// chainNamesFlag reads --chain as names (A,B,C) or as run's --chain.
func chainNamesFlag(s string) ([]string, error) {
	if strings.Contains(s, "=") {
		ms, err := parseChain(s)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, m := range ms {
			names = append(names, m.Name)
		}
		return names, nil
	}
	var names []string
	for n := range strings.SplitSeq(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" || slices.Contains(names, n) {
			return nil, fmt.Errorf("--chain %q: want the node names in order, each once, A,B,C", s)
		}
		names = append(names, n)
	}
	return names, nil
}

// roundName says which round receipts are of, for people.
func roundName(r receipt.Receipt) string {
	id := "round " + r.Round
	if r.Round == "" {
		id = "the unnamed round"
	}
	return fmt.Sprintf("%s (attempt %d) of the chain %s", id, r.Attempt, strings.Join(r.Chain, ","))
}

// receiptsShow is chainsync receipts show: one line per receipt.
func receiptsShow(file string, stdout, stderr io.Writer) int {
	envs, code := readBundle("receipts show", file, stderr)
	if envs == nil {
		return code
	}
	sts := make([]receipt.Statement, len(envs))
	errs := make([]error, len(envs))
	width, first := 0, -1
	for i, e := range envs {
		if sts[i], errs[i] = e.Open(); errs[i] == nil {
			width = max(width, len(sts[i].Predicate.Node))
			if first < 0 {
				first = i
			}
		}
	}
	if first >= 0 {
		r := sts[first].Predicate
		fmt.Fprintf(stdout, "%s, settings %s: %d receipt(s), signatures not checked (chainsync receipts verify checks them)\n",
			roundName(r), r.Settings, len(envs))
	}
	for i := range envs {
		if errs[i] != nil {
			fmt.Fprintf(stdout, "line %d: not a receipt: %v\n", i+1, errs[i])
			continue
		}
		fmt.Fprintf(stdout, "%-*s  %s\n", width, sts[i].Predicate.Node, showLine(sts[i].Predicate))
	}
	return ExitOK
}

// showLine is a receipt for people: outcome, times, decisions.
func showLine(r receipt.Receipt) string {
	var b strings.Builder
	b.WriteString(string(r.Outcome))
	if r.Status != nil {
		fmt.Fprintf(&b, " (exit %d)", *r.Status)
	}
	if !r.TaskStart.IsZero() {
		fmt.Fprintf(&b, "  task %s .. %s (%v)", stamp(r.TaskStart), stamp(r.TaskEnd), r.TaskEnd.Sub(r.TaskStart))
	}
	if !r.UndoStart.IsZero() {
		fmt.Fprintf(&b, "  undo %s .. %s (%v)", stamp(r.UndoStart), stamp(r.UndoEnd), r.UndoEnd.Sub(r.UndoStart))
	}
	for _, d := range r.Decisions {
		fmt.Fprintf(&b, "  %s by %s at %s", d.Verdict, d.By, stamp(d.At))
		if d.Reason != "" {
			fmt.Fprintf(&b, " (%q)", d.Reason)
		}
	}
	return b.String()
}

// stamp writes a receipt's time in UTC to the millisecond.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// receiptConfig sets cfg's receipt fields from --receipts, --receipt-key
// and --receipts-dir (chainsync run), or says what is missing.
func (o *runOpts) receiptConfig(cfg *chainsync.Config) error {
	if !o.receipts {
		if o.receiptKey != "" || o.receiptsDir != "" {
			return usagef("--receipt-key and --receipts-dir need --receipts")
		}
		return nil
	}
	if len(cfg.Chain) == 0 || o.name == "" {
		return usagef("--receipts needs --chain and --name: each receipt names the chain, in order, and this node's place in it")
	}
	switch {
	case o.receiptKey != "":
		key, err := receipt.LoadKey(o.receiptKey)
		if err != nil {
			return usagef("--receipt-key %s: %v", o.receiptKey, err)
		}
		cfg.ReceiptKey = key
	case o.tls.KeyFile != "" && o.tls.CertFile != "":
		pair, err := tls.LoadX509KeyPair(o.tls.CertFile, o.tls.KeyFile)
		if err != nil {
			return usagef("--receipts signs with --tls-key: %v", err)
		}
		key, ok := pair.PrivateKey.(crypto.Signer)
		if !ok || !receiptKeyType(key.Public()) {
			return usagef("--receipts signs with --tls-key, which is not ECDSA P-256 or Ed25519: give --receipt-key FILE (chainsync keygen makes one)")
		}
		leaf := pair.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return usagef("--tls-cert %s: %v", o.tls.CertFile, err)
			}
		}
		cfg.ReceiptKey, cfg.ReceiptCert = key, leaf
	default:
		return usagef("--receipts needs a key to sign the receipts with: give --tls-key with --tls-cert, or --receipt-key FILE (chainsync keygen makes one)")
	}
	if o.receiptsDir != "" {
		if fi, err := os.Stat(o.receiptsDir); err != nil || !fi.IsDir() {
			return usagef("--receipts-dir %s is not a directory: create it first (the bundles are written in it, mode 0600)", o.receiptsDir)
		}
	}
	cfg.Receipts, cfg.ReceiptsDir = true, o.receiptsDir
	return nil
}

// receiptKeyType reports whether pub is a key receipts are signed with.
func receiptKeyType(pub crypto.PublicKey) bool {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return k.Curve == elliptic.P256()
	case ed25519.PublicKey:
		return true
	}
	return false
}

// waitReceipts waits, at most linger in all, until node holds the
// receipts of each round it must hold and has handed them on: after a
// round that ended early they travel after its end.
func waitReceipts(node *chainsync.Node, rounds []string, linger time.Duration, sigs <-chan os.Signal, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), linger)
	defer cancel()
	done := make(chan int, 1) // how many of rounds have all their receipts
	bug.Go(func() {
		for i, r := range rounds {
			if node.WaitReceipts(ctx, r) != nil {
				done <- i
				return
			}
		}
		done <- len(rounds)
	})
	select {
	case i := <-done:
		if i < len(rounds) {
			log.Warn("receipts not all here after --linger; exiting anyway (the bundle holds those that came)", "round", rounds[i])
			for _, r := range rounds[i:] {
				_ = node.KeepReceipts(r)
			}
		}
	case s := <-sigs:
		log.Warn("interrupted while waiting for the receipts", "signal", s.String())
	}
}
