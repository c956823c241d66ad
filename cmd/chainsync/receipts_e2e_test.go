//go:build unix

package main

// chainsync keygen and chainsync receipts verify|show on files
// (docs/RECEIPTS.md): bundles signed with the keys chainsync certs and
// chainsync keygen wrote verify (exit 0), every tampering exits 1 naming
// the node and the rule, and bad command lines exit 2. The draft's
// Security Considerations (every node of the chain is trusted) are what
// receipts answer: the proof of who did what, in which order.

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/receipttest"
	"github.com/chainsync-go/chainsync/receipt"
)

var receiptNames = []string{"A", "B", "C", "D"}

// writeBundle writes envs as a bundle file and returns its path.
func writeBundle(t *testing.T, envs []receipt.Envelope) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "round.jsonl")
	if err := receipt.WriteBundle(p, envs); err != nil {
		t.Fatal(err)
	}
	return p
}

// certsDir runs chainsync certs for the four nodes and returns its dir.
func certsDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if code, _, stderr := runBin(t, "certs", "--dir", dir, "--nodes", strings.Join(receiptNames, ",")); code != 0 {
		t.Fatalf("chainsync certs: exit %d: %s", code, stderr)
	}
	return dir
}

func TestReceiptsVerifyE2E(t *testing.T) {
	t.Parallel()
	dir := certsDir(t)
	ca := filepath.Join(dir, "ca.pem")
	keys := receipttest.LoadCerts(t, dir, receiptNames...)
	ok := []receipt.Outcome{receipt.RanOK, receipt.RanOK, receipt.RanOK, receipt.RanOK}
	sign := func(round string, outs []receipt.Outcome, edit func(*receipt.Receipt)) []receipt.Envelope {
		return receipttest.SignRound(t, keys, receiptNames, round, outs, edit)
	}
	envs := sign("r1", ok, nil)
	good := writeBundle(t, envs)

	// Each line of the bundle verifies by an independent DSSE check with
	// its node's certificate key.
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range bytes.Split(bytes.TrimSpace(data), []byte{'\n'}) {
		if err := receipttest.IndependentVerify(line, keys[receiptNames[i]].Cert.PublicKey); err != nil {
			t.Errorf("line %d: %v", i+1, err)
		}
	}

	code, stdout, stderr := runBin(t, "receipts", "verify", good, "--tls-ca", ca)
	if code != 0 || !strings.Contains(stdout, "valid: round r1 (attempt 1) of the chain A,B,C,D, 4 receipts") {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}
	var pinArgs []string
	for _, n := range receiptNames {
		_, pin, _ := runBin(t, "pin", filepath.Join(dir, n+".pem"))
		pinArgs = append(pinArgs, "--pin", n+"="+strings.TrimSpace(pin))
	}
	if code, _, stderr := runBin(t, append([]string{"receipts", "verify", good, "--chain", "A,B,C,D"}, pinArgs...)...); code != 0 {
		t.Fatalf("verify with --pin: exit %d: %s", code, stderr)
	}

	other := filepath.Join(t.TempDir(), "other")
	if code, _, stderr := runBin(t, "certs", "--dir", other, "--nodes", "C"); code != 0 {
		t.Fatal(stderr)
	}
	otherC := receipttest.LoadCerts(t, other, "C")["C"]
	r2 := sign("r2", ok, nil)
	flipped := append([]receipt.Envelope(nil), envs...)
	flipped[1].Payload = bytes.Replace(bytes.Clone(envs[1].Payload), []byte(`"taskEnd":"`+receipttest.Hour+`01:30Z"`), []byte(`"taskEnd":"`+receipttest.Hour+`01:31Z"`), 1)
	resigned := func() []receipt.Envelope {
		r := receipttest.Base(receiptNames, 2, "r1", receipt.RanOK)
		r.Pred = envs[1].Digest()
		e, err := receipt.Sign(otherC.Key, otherC.Cert, r)
		if err != nil {
			t.Fatal(err)
		}
		return []receipt.Envelope{envs[0], envs[1], e, envs[3]}
	}()
	for _, tc := range []struct {
		name string
		envs []receipt.Envelope
		say  string
	}{
		{"a byte flipped in B's payload", flipped, "B's signature does not verify with B's key"},
		{"B and C swapped", []receipt.Envelope{envs[0], envs[2], envs[1], envs[3]}, "line 2: C's receipt stands where B's belongs"},
		{"C removed", []receipt.Envelope{envs[0], envs[1], envs[3]}, "C's receipt is missing"},
		{"C re-signed with a key not C's", resigned, "line 3: C's receipt is signed with a certificate that does not verify with the CA"},
		{"C from another round", []receipt.Envelope{envs[0], envs[1], r2[2], envs[3]}, "line 3: C's receipt is of another round: round r2"},
		{"D binds A's receipt", sign("r1", ok, func(r *receipt.Receipt) {
			if r.Node == "D" {
				r.Pred = envs[0].Digest()
			}
		}), "D's receipt binds a predecessor receipt that is not C's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBin(t, "receipts", "verify", writeBundle(t, tc.envs), "--tls-ca", ca)
			if code != 1 || !strings.Contains(stderr, tc.say) || stdout != "" {
				t.Fatalf("exit %d, want 1 saying %q:\n%s%s", code, tc.say, stdout, stderr)
			}
		})
	}

	// A byte of B's envelope made one that is not base64 at all: the
	// bundle does not parse, and verify still names B, by its line.
	t.Run("B's payload not base64", func(t *testing.T) {
		path := writeBundle(t, envs)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.Split(data, []byte{'\n'})
		i := bytes.Index(lines[1], []byte(`"payload":"`)) + len(`"payload":"`) + 10
		lines[1][i] = '!'
		if err := os.WriteFile(path, bytes.Join(lines, []byte{'\n'}), 0o600); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runBin(t, "receipts", "verify", path, "--tls-ca", ca)
		if code != 1 || !strings.Contains(stderr, "B's receipt is not a valid receipt") || !strings.Contains(stderr, "line 2") {
			t.Fatalf("exit %d, want 1 naming B:\n%s%s", code, stdout, stderr)
		}
	})

	// The undo case: A and B ran and were undone, C failed with its
	// status, D was not reached; and an approval at C.
	at := receipttest.T0.Add(90 * time.Second)
	undo := writeBundle(t, sign("r1", []receipt.Outcome{receipt.Undone, receipt.Undone, receipt.Failed, receipt.NotReached}, func(r *receipt.Receipt) {
		if r.Node == "C" {
			r.Decisions = []receipt.Decision{{Verdict: receipt.VerdictApproved, By: "ann", At: at, Reason: "window open"}}
		}
	}))
	if code, stdout, stderr := runBin(t, "receipts", "verify", undo, "--tls-ca", ca); code != 0 ||
		!strings.Contains(stdout, "A undone, B undone, C failed, D not-reached") {
		t.Fatalf("verify the undo round: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runBin(t, "receipts", "show", undo)
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderr)
	}
	for _, re := range []string{
		`(?m)^round r1 \(attempt 1\) of the chain A,B,C,D, settings 69e51a080b5ec448: 4 receipt\(s\), signatures not checked`,
		`(?m)^A  undone  task ` + receipttest.Hour + `00:00.000Z \.\. ` + receipttest.Hour + `00:30.000Z \(30s\)  undo ` + receipttest.Hour + `10:00.000Z \.\. ` + receipttest.Hour + `10:01.000Z \(1s\)$`,
		`(?m)^B  undone  task .* undo ` + receipttest.Hour + `09:00.000Z`,
		`(?m)^C  failed \(exit 3\)  task ` + receipttest.Hour + `02:00.000Z .*  approved by ann at ` + receipttest.Hour + `01:30.000Z \("window open"\)$`,
		`(?m)^D  not-reached$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("show does not match %s:\n%s", re, stdout)
		}
	}
}

// A chain without certificates: each node's receipt key from chainsync
// keygen, verified with --receipt-pin.
func TestReceiptKeysE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := map[string]receipttest.Signer{}
	var pins []string
	pinRE := regexp.MustCompile(`(?m)^sha256//[A-Za-z0-9+/]{43}=$`)
	for _, n := range receiptNames {
		file := filepath.Join(dir, n+"-receipt.pem")
		code, stdout, stderr := runBin(t, "keygen", "--out", file)
		pin := pinRE.FindString(stdout)
		if code != 0 || pin == "" {
			t.Fatalf("keygen: exit %d\n%s%s", code, stdout, stderr)
		}
		if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", file, fi.Mode(), err)
		}
		key, err := receipt.LoadKey(file)
		if err != nil {
			t.Fatal(err)
		}
		keys[n] = receipttest.Signer{Key: key}
		pins = append(pins, "--receipt-pin", n+"="+pin)
	}
	file := filepath.Join(dir, "A-receipt.pem")
	before, _ := os.ReadFile(file)
	if code, _, stderr := runBin(t, "keygen", "--out", file); code != 1 || !strings.Contains(stderr, "exists; nothing written") {
		t.Fatalf("keygen over a key: exit %d: %s", code, stderr)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(before, after) {
		t.Fatal("keygen replaced a key without --force")
	}
	bundle := writeBundle(t, receipttest.SignRound(t, keys, receiptNames, "r1",
		[]receipt.Outcome{receipt.RanOK, receipt.RanOK, receipt.RanOK, receipt.RanOK}, nil))
	if code, stdout, stderr := runBin(t, append([]string{"receipts", "verify", bundle}, pins...)...); code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}
	// B's pin given as C's: C's receipt is not signed with that key.
	wrong := append([]string(nil), pins...)
	wrong[5] = "C=" + strings.TrimPrefix(pins[3], "B=")
	if code, _, stderr := runBin(t, append([]string{"receipts", "verify", bundle}, wrong...)...); code != 1 ||
		!strings.Contains(stderr, "line 3: C's receipt is signed with a key that is not C's") {
		t.Fatalf("a wrong pin: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runBin(t, append([]string{"receipts", "verify", bundle}, pins[:6]...)...); code != 1 ||
		!strings.Contains(stderr, "no key is known for D") {
		t.Fatalf("no pin for D: exit %d: %s", code, stderr)
	}
}

// Bad command lines exit 2 and say why; an unreadable bundle exits 1.
func TestReceiptsUsageE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.jsonl")
	if err := os.WriteFile(junk, []byte("{\"payloadType\":\"text/plain\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		say  string
	}{
		{[]string{"receipts"}, 2, "want the subcommand verify or show"},
		{[]string{"receipts", "check", junk}, 2, "want the subcommand verify or show"},
		{[]string{"receipts", "verify", junk}, 2, "give the chain's keys"},
		{[]string{"receipts", "verify", "--tls-ca", junk}, 2, "give exactly one FILE"},
		{[]string{"receipts", "verify", junk, "--pin", "B"}, 2, "want NAME=PIN"},
		{[]string{"receipts", "verify", junk, "--receipt-pin", "B=abc"}, 2, "not a pin"},
		{[]string{"receipts", "verify", junk, "--tls-ca", filepath.Join(dir, "none.pem")}, 2, "--tls-ca"},
		{[]string{"receipts", "verify", junk, "--pin", "B=sha256//" + strings.Repeat("A", 43) + "=", "--chain", "A,A"}, 2, "each once"},
		{[]string{"receipts", "verify", junk, "--pin", "B=sha256//" + strings.Repeat("A", 43) + "="}, 1, "line 1: receipt: payload type"},
		{[]string{"receipts", "show", filepath.Join(dir, "none.jsonl")}, 1, "no such file"},
		{[]string{"keygen"}, 2, "give --out FILE"},
		{[]string{"keygen", "--out", filepath.Join(dir, "k.pem"), "extra"}, 2, "give --out FILE"},
	} {
		code, stdout, stderr := runBin(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.say) {
			t.Errorf("%v: exit %d, want %d saying %q:\n%s%s", tc.args, code, tc.code, tc.say, stdout, stderr)
		}
	}
	if exists(filepath.Join(dir, "k.pem")) {
		t.Error("keygen wrote a key despite a usage error")
	}
}
