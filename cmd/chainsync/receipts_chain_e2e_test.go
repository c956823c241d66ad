//go:build unix

package main

// Receipts in a running chain (docs/RECEIPTS.md): four nodes on real TCP
// sign one receipt each per round, bound in chain order, and the Head
// ends the round holding all four; chainsync receipts verify checks them
// offline. The draft's Security Considerations (every node is trusted)
// are what receipts answer.

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/receipttest"
	"github.com/chainsync-go/chainsync/receipt"
)

// receiptChain starts A..D with mutual TLS from chainsync certs and
// --receipts, each node writing its bundles to its own directory; the
// task of failAt exits 7. extra adds flags per node. It returns the
// processes, the certificates' directory and the receipts directories.
func receiptChain(t *testing.T, failAt string, extra func(n string) []string) (map[string]*proc, string, map[string]string) {
	t.Helper()
	certs := certsDir(t)
	procs, dirs, _ := receiptNodes(t, func(n string) (string, []string) {
		task := "true"
		if n == failAt {
			task = "exit 7"
		}
		args := []string{"--tls-cert", filepath.Join(certs, n+".pem"), "--tls-key", filepath.Join(certs, n+"-key.pem"),
			"--tls-ca", filepath.Join(certs, "ca.pem")}
		if extra != nil {
			args = append(args, extra(n)...)
		}
		return task, args
	})
	return procs, certs, dirs
}

// receiptNodes starts A..D with --receipts, each writing its bundles to
// a directory of its own; node gives each node's task and flags. It
// returns the processes, the receipts directories and each node's
// arguments (to start one again).
func receiptNodes(t *testing.T, node func(n string) (task string, args []string)) (map[string]*proc, map[string]string, map[string][]string) {
	t.Helper()
	chain := chainOf(receiptNames, freeAddrs(t, len(receiptNames)))
	procs, dirs, argv := map[string]*proc{}, map[string]string{}, map[string][]string{}
	for i := len(receiptNames) - 1; i >= 0; i-- {
		n := receiptNames[i]
		dirs[n] = t.TempDir()
		task, extra := node(n)
		args := append([]string{"run", "--chain", chain, "--name", n, "--round", "r1", "--receipts", "--receipts-dir", dirs[n]}, extra...)
		argv[n] = append(args, "--", "sh", "-c", task)
		procs[n] = startProc(t, n, nil, argv[n]...)
	}
	return procs, dirs, argv
}

// bundleOf reads a node's bundle of round r1 and opens its receipts.
func bundleOf(t *testing.T, dir string) ([]byte, []receipt.Receipt) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "round-r1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "round-r1.jsonl")); fi.Mode().Perm() != 0o600 {
		t.Errorf("bundle mode %v, want 0600", fi.Mode().Perm())
	}
	envs, err := receipt.ParseBundle(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var rs []receipt.Receipt
	for _, e := range envs {
		st, err := e.Open()
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, st.Predicate)
	}
	return data, rs
}

// TestReceiptsChainE2E: a round over a 4-node mTLS chain leaves at the
// Head a bundle of 4 receipts that verifies (exit 0) with the CA, each
// envelope by an independent DSSE check with its node's certificate key;
// every other node holds its own receipt and those after it.
func TestReceiptsChainE2E(t *testing.T) {
	t.Parallel()
	procs, certs, dirs := receiptChain(t, "", nil)
	for n, p := range procs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s exited %d\n%s", n, code, p.err.String())
		}
	}
	data, rs := bundleOf(t, dirs["A"])
	if len(rs) != 4 {
		t.Fatalf("the Head holds %d receipts, want 4:\n%s", len(rs), data)
	}
	keys := receipttest.LoadCerts(t, certs, receiptNames...)
	for i, line := range bytes.Split(bytes.TrimSpace(data), []byte{'\n'}) {
		if err := receipttest.IndependentVerify(line, keys[receiptNames[i]].Cert.PublicKey); err != nil {
			t.Errorf("line %d: %v", i+1, err)
		}
		if rs[i].Node != receiptNames[i] || rs[i].Outcome != receipt.RanOK || rs[i].TaskStart.IsZero() {
			t.Errorf("receipt %d: %+v", i, rs[i])
		}
	}
	code, stdout, stderr := runBin(t, "receipts", "verify", filepath.Join(dirs["A"], "round-r1.jsonl"), "--tls-ca", filepath.Join(certs, "ca.pem"))
	if code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}
	for i, n := range receiptNames[1:] {
		if _, rs := bundleOf(t, dirs[n]); len(rs) != 3-i || rs[0].Node != n {
			t.Errorf("%s holds %d receipts, want %d, its own first", n, len(rs), 3-i)
		}
	}
}

// TestReceiptsUndoE2E: C's task fails (exit 7) with --undo on every node:
// the Head's receipts say A and B ran and were undone, C failed with
// status 7, D was not reached; verify exits 0 and show reads it.
// docs/UNDO.md with docs/RECEIPTS.md.
func TestReceiptsUndoE2E(t *testing.T) {
	t.Parallel()
	procs, certs, dirs := receiptChain(t, "C", func(string) []string { return []string{"--undo", "true"} })
	for n, p := range procs {
		want := 4
		if n == "C" {
			want = 3
		}
		if code := p.wait(t, 30*time.Second); code != want {
			t.Fatalf("%s exited %d, want %d\n%s", n, code, want, p.err.String())
		}
	}
	data, rs := bundleOf(t, dirs["A"])
	want := []receipt.Outcome{receipt.Undone, receipt.Undone, receipt.Failed, receipt.NotReached}
	if len(rs) != 4 {
		t.Fatalf("the Head holds %d receipts, want 4:\n%s", len(rs), data)
	}
	for i, r := range rs {
		if r.Outcome != want[i] {
			t.Errorf("%s: outcome %s, want %s", r.Node, r.Outcome, want[i])
		}
	}
	if rs[2].Status == nil || *rs[2].Status != 7 {
		t.Errorf("C's status: %v, want 7", rs[2].Status)
	}
	if rs[0].UndoStart.IsZero() || rs[1].UndoEnd.IsZero() {
		t.Errorf("undo times missing: %+v %+v", rs[0], rs[1])
	}
	file := filepath.Join(dirs["A"], "round-r1.jsonl")
	if code, stdout, stderr := runBin(t, "receipts", "verify", file, "--tls-ca", filepath.Join(certs, "ca.pem")); code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr := runBin(t, "receipts", "show", file)
	if code != 0 || !strings.Contains(stdout, "not-reached") || !strings.Contains(stdout, "undone") {
		t.Fatalf("show: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestReceiptsApprovalE2E: C's task waits for chainsync approve; C's
// receipt names who approved, why, and when (docs/STEERING.md with
// docs/RECEIPTS.md).
func TestReceiptsApprovalE2E(t *testing.T) {
	t.Parallel()
	ctl := t.TempDir()
	procs, certs, dirs := receiptChain(t, "", func(n string) []string {
		if n == "C" {
			return []string{"--approve", "--control", controlOf(ctl, "C")}
		}
		return nil
	})
	procs["C"].waitLog(t, 20*time.Second, "C waits for its approval", containsAll("waiting for approval"))
	before := time.Now()
	if code, _, errOut := steerCmd(t, "approve", "--control", controlOf(ctl, "C"), "--by", "carol", "--reason", "change 42"); code != 0 {
		t.Fatalf("approve exited %d: %s", code, errOut)
	}
	for n, p := range procs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s exited %d\n%s", n, code, p.err.String())
		}
	}
	_, rs := bundleOf(t, dirs["A"])
	if len(rs) != 4 {
		t.Fatalf("the Head holds %d receipts, want 4", len(rs))
	}
	ds := rs[2].Decisions
	if len(ds) != 1 || ds[0].Verdict != receipt.VerdictApproved || ds[0].By != "carol" || ds[0].Reason != "change 42" ||
		ds[0].At.Before(before.Add(-time.Second)) || ds[0].At.After(rs[2].TaskStart) {
		t.Fatalf("C's decisions: %+v (task started %v)", ds, rs[2].TaskStart)
	}
	for _, i := range []int{0, 1, 3} {
		if len(rs[i].Decisions) != 0 {
			t.Errorf("%s's receipt names decisions: %+v", rs[i].Node, rs[i].Decisions)
		}
	}
	if code, stdout, stderr := runBin(t, "receipts", "verify", filepath.Join(dirs["A"], "round-r1.jsonl"), "--tls-ca", filepath.Join(certs, "ca.pem")); code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestReceiptsPSKE2E: a chain secured by a pre-shared key signs with
// --receipt-key on every node; the Head's bundle verifies with
// --receipt-pin.
func TestReceiptsPSKE2E(t *testing.T) {
	t.Parallel()
	psk, keys := newPSK(t), t.TempDir()
	pinRE := regexp.MustCompile(`(?m)^sha256//[A-Za-z0-9+/]{43}=$`)
	var pins []string
	for _, n := range receiptNames {
		code, stdout, stderr := runBin(t, "keygen", "--out", filepath.Join(keys, n+".pem"))
		if code != 0 || pinRE.FindString(stdout) == "" {
			t.Fatalf("keygen: exit %d\n%s%s", code, stdout, stderr)
		}
		pins = append(pins, "--receipt-pin", n+"="+pinRE.FindString(stdout))
	}
	procs, dirs, _ := receiptNodes(t, func(n string) (string, []string) {
		return "true", []string{"--psk-file", psk, "--receipt-key", filepath.Join(keys, n+".pem")}
	})
	for n, p := range procs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s exited %d\n%s", n, code, p.err.String())
		}
	}
	file := filepath.Join(dirs["A"], "round-r1.jsonl")
	if code, stdout, stderr := runBin(t, append([]string{"receipts", "verify", file}, pins...)...); code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}
	wrong := append([]string(nil), pins...)
	wrong[3] = "B=" + strings.TrimPrefix(pins[1], "A=")
	if code, _, stderr := runBin(t, append([]string{"receipts", "verify", file}, wrong...)...); code != 1 || !strings.Contains(stderr, "B's") {
		t.Fatalf("verify with A's pin for B: exit %d: %s", code, stderr)
	}
}

// TestReceiptsKillE2E: B, with --state-dir, is killed with SIGKILL after
// it signed and sent its receipt, and restarted on its state directory:
// it sends the receipt it signed before, byte for byte, not a second
// one (an ECDSA signature differs each time it is made), and the Head's
// bundle verifies. docs/RESTARTS.md with docs/RECEIPTS.md.
func TestReceiptsKillE2E(t *testing.T) {
	t.Parallel()
	certs, state, gate := certsDir(t), t.TempDir(), filepath.Join(t.TempDir(), "go")
	procs, dirs, argv := receiptNodes(t, func(n string) (string, []string) {
		task := "true"
		if n == "C" {
			task = "while [ ! -e " + gate + " ]; do sleep 0.05; done"
		}
		args := []string{"--tls-cert", filepath.Join(certs, n+".pem"), "--tls-key", filepath.Join(certs, n+"-key.pem"),
			"--tls-ca", filepath.Join(certs, "ca.pem")}
		if n == "B" {
			args = append(args, "--state-dir", filepath.Join(state, "B"))
		}
		return task, args
	})
	procs["B"].waitLog(t, 20*time.Second, "B sends its receipt", containsAll("sent RECEIPT to pred"))
	procs["C"].waitLog(t, 20*time.Second, "C's task starts", containsAll("task started"))
	killed := time.Now()
	procs["B"].signal(t, syscall.SIGKILL)
	procs["B"].wait(t, 10*time.Second)
	b2 := startProc(t, "B2", nil, argv["B"]...)
	b2.waitLog(t, 20*time.Second, "B's links are up again", containsAll("link up to succ"))
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	procs["B"] = b2
	for n, p := range procs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s exited %d\n%s", n, code, p.err.String())
		}
	}
	headData, rs := bundleOf(t, dirs["A"])
	bData, _ := bundleOf(t, dirs["B"])
	if len(rs) != 4 {
		t.Fatalf("the Head holds %d receipts, want 4", len(rs))
	}
	headB := bytes.Split(headData, []byte{'\n'})[1]
	own := bytes.Split(bData, []byte{'\n'})[0]
	if !bytes.Equal(headB, own) {
		t.Fatalf("B's receipt at the Head differs from the one B kept:\n%s\n%s", headB, own)
	}
	if !rs[1].Signed.Before(killed) {
		t.Fatalf("B's receipt was signed at %v, after B was killed at %v", rs[1].Signed, killed)
	}
	if code, stdout, stderr := runBin(t, "receipts", "verify", filepath.Join(dirs["A"], "round-r1.jsonl"), "--tls-ca", filepath.Join(certs, "ca.pem")); code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestReceiptsMismatchE2E: receipts are a chain setting: A with
// --receipts and B without, both with --heartbeat (so each says who it
// is), is a config-mismatch that names --receipts, before any task runs.
func TestReceiptsMismatchE2E(t *testing.T) {
	t.Parallel()
	dir, keys := t.TempDir(), t.TempDir()
	if code, _, stderr := runBin(t, "keygen", "--out", filepath.Join(keys, "A.pem")); code != 0 {
		t.Fatalf("keygen: %s", stderr)
	}
	addrs := freeAddrs(t, 2)
	chain := "A=" + addrs[0] + ",B=" + addrs[1]
	b := startProc(t, "B", []string{"DIR=" + dir}, "run", "--chain", chain, "--name", "B", "--round", "r1", "--heartbeat", "200ms",
		"--", "sh", "-c", `touch "$DIR/B.task"`)
	a := startProc(t, "A", []string{"DIR=" + dir}, "run", "--chain", chain, "--name", "A", "--round", "r1", "--heartbeat", "200ms",
		"--receipts", "--receipt-key", filepath.Join(keys, "A.pem"), "--", "sh", "-c", `touch "$DIR/A.task"`)
	b.waitLog(t, 20*time.Second, "B's config-mismatch", containsAll("config-mismatch", "--receipts"))
	if code := a.wait(t, 30*time.Second); code != 4 {
		t.Errorf("A exited %d, want 4\n%s", code, a.err.String())
	}
	for _, n := range []string{"A", "B"} {
		if exists(filepath.Join(dir, n+".task")) {
			t.Errorf("%s's task ran despite the mismatch", n)
		}
	}
}

// TestReceiptsRunUsageE2E: --receipts without a key to sign with, or
// without --chain, is a usage error (exit 2) that names the fix, and
// starts nothing.
func TestReceiptsRunUsageE2E(t *testing.T) {
	t.Parallel()
	addrs := freeAddrs(t, 2)
	chain := "A=" + addrs[0] + ",B=" + addrs[1]
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--chain", chain, "--name", "A", "--receipts"}, "--tls-key with --tls-cert, or --receipt-key FILE (chainsync keygen makes one)"},
		{[]string{"--next", addrs[1], "--receipts", "--receipt-key", "x.pem"}, "--receipts needs --chain and --name"},
		{[]string{"--chain", chain, "--name", "A", "--receipts-dir", t.TempDir()}, "--receipts-dir need --receipts"},
		{[]string{"--chain", chain, "--name", "A", "--receipts", "--receipt-key", filepath.Join(t.TempDir(), "none.pem")}, "--receipt-key"},
	} {
		code, _, stderr := runBin(t, append(append([]string{"run"}, tc.args...), "--", "true")...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want 2 naming %q:\n%s", tc.args, code, tc.want, stderr)
		}
	}
}

// TestReceiptsNodeLostE2E: D is killed while its task runs, so the round
// ends early and D's receipt never comes: once --linger has passed, every
// other node still writes the receipts it holds (the Head's: A's, B's
// and C's), and verify exits 1 naming D's receipt as missing.
// docs/RECEIPTS.md; the draft's Error Handling.
func TestReceiptsNodeLostE2E(t *testing.T) {
	t.Parallel()
	certs := certsDir(t)
	procs, dirs, _ := receiptNodes(t, func(n string) (string, []string) {
		task := "true"
		if n == "D" {
			task = "sleep 60"
		}
		return task, []string{"--tls-cert", filepath.Join(certs, n+".pem"), "--tls-key", filepath.Join(certs, n+"-key.pem"),
			"--tls-ca", filepath.Join(certs, "ca.pem"), "--phase-timeout", "3s", "--linger", "3s"}
	})
	procs["D"].waitLog(t, 20*time.Second, "D's task starts", containsAll("task started"))
	procs["D"].signal(t, syscall.SIGKILL)
	procs["D"].wait(t, 10*time.Second)
	for _, n := range []string{"A", "B", "C"} {
		if code := procs[n].wait(t, 60*time.Second); code != 4 {
			t.Errorf("%s exited %d, want 4 (D was lost)\n%s", n, code, procs[n].err.String())
		}
	}
	data, rs := bundleOf(t, dirs["A"])
	if len(rs) != 3 || rs[0].Node != "A" || rs[2].Node != "C" {
		t.Fatalf("the Head kept %d receipts, want A's, B's and C's:\n%s", len(rs), data)
	}
	code, stdout, stderr := runBin(t, "receipts", "verify", filepath.Join(dirs["A"], "round-r1.jsonl"), "--tls-ca", filepath.Join(certs, "ca.pem"))
	if code != 1 || !strings.Contains(stdout+stderr, "D's receipt is missing") {
		t.Fatalf("verify of a bundle without D's receipt: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestReceiptsServedHaltE2E: on a served chain, C's task fails under
// --fault-policy halt (the default) and every node stops: before it
// exits, each waits for the receipts that travel back with the fault
// notice, so the Head still ends the round holding every node's receipt
// (a bundle that verifies: A and B ran, C failed, D not reached).
func TestReceiptsServedHaltE2E(t *testing.T) {
	t.Parallel()
	certs, work := certsDir(t), t.TempDir()
	ids := filepath.Join(work, "ids")
	if err := os.WriteFile(ids, []byte("r1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chain := chainOf(receiptNames, freeAddrs(t, len(receiptNames)))
	procs, dirs := map[string]*proc{}, map[string]string{}
	for i := len(receiptNames) - 1; i >= 0; i-- {
		n := receiptNames[i]
		dirs[n] = t.TempDir()
		args := []string{"run", "--chain", chain, "--name", n, "--receipts", "--receipts-dir", dirs[n],
			"--tls-cert", filepath.Join(certs, n+".pem"), "--tls-key", filepath.Join(certs, n+"-key.pem"), "--tls-ca", filepath.Join(certs, "ca.pem")}
		if i == 0 {
			args = append(args, "--rounds-from", ids, "--serve")
		} else {
			args = append(args, "--serve")
		}
		task := "true"
		if n == "C" {
			task = "exit 7"
		}
		procs[n] = startProc(t, n, nil, append(args, "--", "sh", "-c", task)...)
	}
	for _, n := range receiptNames {
		if code := procs[n].wait(t, 30*time.Second); code != 3 && code != 4 {
			t.Errorf("%s exited %d, want 3 or 4 (the chain halted)", n, code)
		}
	}
	data, rs := bundleOf(t, dirs["A"])
	if len(rs) != 4 || rs[2].Outcome != receipt.Failed {
		t.Fatalf("the Head kept %d receipts, want 4 with C's failure:\n%s", len(rs), data)
	}
	if code, stdout, stderr := runBin(t, "receipts", "verify", filepath.Join(dirs["A"], "round-r1.jsonl"), "--tls-ca", filepath.Join(certs, "ca.pem")); code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestReceiptsMismatchNoHeartbeatE2E: without --heartbeat, --receipts on
// one node of two is still a config-mismatch before any task, at both
// nodes (exit 4 within seconds), whichever of them has it; each names
// --receipts, not --heartbeat alone.
func TestReceiptsMismatchNoHeartbeatE2E(t *testing.T) {
	t.Parallel()
	keys := t.TempDir()
	if code, _, stderr := runBin(t, "keygen", "--out", filepath.Join(keys, "k.pem")); code != 0 {
		t.Fatalf("keygen: %s", stderr)
	}
	for _, with := range []string{"A", "B"} {
		t.Run("receipts at "+with, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			addrs := freeAddrs(t, 2)
			chain := "A=" + addrs[0] + ",B=" + addrs[1]
			args := func(n string) []string {
				a := []string{"run", "--chain", chain, "--name", n, "--round", "r1", "--linger", "1s"}
				if n == with {
					a = append(a, "--receipts", "--receipt-key", filepath.Join(keys, "k.pem"))
				}
				return append(a, "--", "sh", "-c", `touch "$DIR/`+n+`.task"`)
			}
			b := startProc(t, "B", []string{"DIR=" + dir}, args("B")...)
			a := startProc(t, "A", []string{"DIR=" + dir}, args("A")...)
			for _, p := range []*proc{a, b} {
				if code := p.wait(t, 20*time.Second); code != 4 {
					t.Errorf("%s exited %d, want 4\n%s", p.name, code, p.err.String())
				}
				if !strings.Contains(p.err.String(), "config-mismatch") || !strings.Contains(p.err.String(), "--receipts") {
					t.Errorf("%s does not name the mismatch of --receipts:\n%s", p.name, p.err.String())
				}
			}
			for _, n := range []string{"A", "B"} {
				if exists(filepath.Join(dir, n+".task")) {
					t.Errorf("%s's task ran despite the mismatch", n)
				}
			}
		})
	}
}

// TestReceiptsUndoFailedStatusE2E: C's task fails and B's undo exits 5:
// B's receipt says undo-failed with the undo's exit status (5), as
// docs/RECEIPTS.md documents the field.
func TestReceiptsUndoFailedStatusE2E(t *testing.T) {
	t.Parallel()
	procs, _, dirs := receiptChain(t, "C", func(n string) []string {
		if n == "B" {
			return []string{"--undo", "exit 5"}
		}
		return []string{"--undo", "true"}
	})
	for _, p := range procs {
		p.wait(t, 30*time.Second)
	}
	data, rs := bundleOf(t, dirs["A"])
	if len(rs) != 4 || rs[1].Outcome != receipt.UndoFailed {
		t.Fatalf("the Head's receipts: want B's undo-failed:\n%s", data)
	}
	if rs[1].Status == nil || *rs[1].Status != 5 {
		t.Fatalf("B's undo-failed receipt has status %v, want 5 (the undo's exit status)", rs[1].Status)
	}
}

// TestReceiptsRetryKeepsEachAttemptE2E: on a served chain under
// --fault-policy wait, C's task fails (attempt 1) and the round is
// retried (attempt 2). The Head keeps both bundles: the retry's as
// round-r1.jsonl and the failed attempt's as round-r1@attempt-1.jsonl,
// each verifying on its own. docs/RECEIPTS.md "Retried rounds".
func TestReceiptsRetryKeepsEachAttemptE2E(t *testing.T) {
	t.Parallel()
	dir, certs := t.TempDir(), certsDir(t)
	rdir := filepath.Join(dir, "receipts")
	if err := os.Mkdir(rdir, 0o700); err != nil {
		t.Fatal(err)
	}
	task := `if [ "$CHAINSYNC_NODE" = C ] && [ ! -e "$DIR/C.failed" ]; then touch "$DIR/C.failed"; exit 1; fi
echo "$CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/$CHAINSYNC_NODE.ran"`
	servedChainTask(t, dir, receiptNames, func(n string) []string {
		args := []string{"--fault-policy", "wait", "--state-dir", filepath.Join(dir, n+".state"), "--receipts",
			"--tls-cert", filepath.Join(certs, n+".pem"), "--tls-key", filepath.Join(certs, n+"-key.pem"),
			"--tls-ca", filepath.Join(certs, "ca.pem")}
		if n == "A" {
			args = append(args, "--receipts-dir", rdir)
		}
		return args
	}, task)
	waitFor(t, 10*time.Second, "A's control socket", func() bool { return exists(filepath.Join(dir, "A.sock")) })
	if code, _, errOut := steerCmd(t, "open", "--control", controlOf(dir, "A"), "--id", "r1", "--wait"); code != 3 {
		t.Fatalf("open r1 --wait exited %d, want 3 (C's task failed): %s", code, errOut)
	}
	bundle := filepath.Join(rdir, "round-r1.jsonl")
	waitFor(t, 10*time.Second, "the Head's bundle of attempt 1", func() bool { return exists(bundle) })
	if code, out, errOut := steerCmd(t, "open", "--control", controlOf(dir, "A"), "--retry", "r1", "--wait"); code != 0 {
		t.Fatalf("open --retry r1 --wait exited %d (%q): %s", code, out, errOut)
	}
	earlier := filepath.Join(rdir, "round-r1@attempt-1.jsonl")
	waitFor(t, 10*time.Second, "the bundle of attempt 1 kept aside", func() bool { return exists(earlier) })
	waitFor(t, 10*time.Second, "the Head's bundle of attempt 2", func() bool { return exists(bundle) })
	for path, want := range map[string]string{
		earlier: "(attempt 1) of the chain A,B,C,D",
		bundle:  "(attempt 2) of the chain A,B,C,D",
	} {
		code, stdout, stderr := runBin(t, "receipts", "verify", path, "--tls-ca", filepath.Join(certs, "ca.pem"))
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("verify %s: exit %d, want 0 and %q\n%s%s", filepath.Base(path), code, want, stdout, stderr)
		}
	}
	if fi, err := os.Stat(earlier); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("the kept bundle's mode is %v, want 0600", fi.Mode().Perm())
	}
}
