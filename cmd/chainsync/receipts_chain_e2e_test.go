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
	"strings"
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
	addrs := freeAddrs(t, len(receiptNames))
	chain := chainOf(receiptNames, addrs)
	procs, dirs := map[string]*proc{}, map[string]string{}
	for i := len(receiptNames) - 1; i >= 0; i-- {
		n := receiptNames[i]
		dirs[n] = t.TempDir()
		task := "true"
		if n == failAt {
			task = "exit 7"
		}
		args := []string{"run", "--chain", chain, "--name", n, "--round", "r1", "--receipts", "--receipts-dir", dirs[n],
			"--tls-cert", filepath.Join(certs, n+".pem"), "--tls-key", filepath.Join(certs, n+"-key.pem"),
			"--tls-ca", filepath.Join(certs, "ca.pem")}
		if extra != nil {
			args = append(args, extra(n)...)
		}
		procs[n] = startProc(t, n, nil, append(args, "--", "sh", "-c", task)...)
	}
	return procs, certs, dirs
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
