//go:build unix

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// BenchmarkWorkerChain measures a served four-node chain on loopback with
// 64 rounds in flight (the Head's --max-open), every node's task one of:
// a process per round (true), the Go example worker, the Python example
// worker (docs/WORKERS.md, docs/BENCHMARKS.md); and, for comparison, the
// Go worker with --parallel 8. b.N is the number of rounds the Head opens
// (--rounds-from); the time runs from the Head's start to its exit, its
// start-up and its worker's hello included, and rounds/s is b.N over it.
// Run it as
//
//	go test -run '^$' -bench WorkerChain -benchtime 5s ./cmd/chainsync/
func BenchmarkWorkerChain(b *testing.B) {
	dir := b.TempDir()
	goWorker := filepath.Join(dir, "goworker")
	build := exec.Command("go", "build", "-o", goWorker, "../../examples/workers/goworker")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build goworker: %v\n%s", err, out)
	}
	py, err := exec.LookPath("python3")
	if err == nil {
		if out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
			py = string(bytes.TrimSpace(out)) // past a version manager's shim
		}
	}
	pyWorker, _ := filepath.Abs("../../examples/workers/worker.py")
	for _, mode := range []struct {
		name  string
		flags []string
		cmd   []string
	}{
		{"process-per-round", nil, []string{"true"}},
		{"go-worker", []string{"--worker"}, []string{goWorker}},
		{"python-worker", []string{"--worker"}, []string{py, pyWorker}},
		// Not the comparison: a node's requests overlap, so its
		// tasks no longer run one at a time in the order opened.
		{"go-worker-parallel-8", []string{"--worker", "--parallel", "8"}, []string{goWorker}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			if mode.cmd[0] == "" {
				b.Skip("python3 is not on PATH")
			}
			benchChain(b, dir, mode.flags, mode.cmd)
		})
	}
}

// benchChain runs one served chain of four nodes, each with flags, for
// b.N rounds.
func benchChain(b *testing.B, dir string, flags, task []string) {
	ids := filepath.Join(dir, "ids")
	if err := os.WriteFile(ids, bytes.Repeat([]byte("\n"), b.N), 0o600); err != nil { // generated ids
		b.Fatal(err)
	}
	names := nodeNames(4)
	addrs := testnet.FreeAddrs(b, 4)
	chain := chainFlag(names, addrs)
	var procs []*exec.Cmd
	var logs []*syncBuf
	defer func() {
		for _, c := range procs {
			_ = c.Process.Signal(syscall.SIGTERM)
			_ = c.Wait()
		}
		if b.Failed() {
			for i, l := range logs {
				b.Logf("---- %s:\n%s", names[3-i], l.String())
			}
		}
	}()
	start := func(i int) *exec.Cmd {
		args := append([]string{"run", "--quiet", "--chain", chain, "--name", names[i], "--max-open", "64"}, flags...)
		if i == 0 {
			args = append(args, "--rounds-from", ids)
		} else {
			args = append(args, "--serve")
		}
		c := exec.Command(bin, append(append(args, "--"), task...)...)
		c.Env = cleanEnv()
		l := new(syncBuf)
		c.Stderr = l
		logs = append(logs, l)
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		return c
	}
	for i := 3; i >= 1; i-- {
		procs = append(procs, start(i))
	}
	b.ResetTimer()
	t0 := time.Now()
	head := start(0)
	err := head.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	if err != nil {
		b.Fatalf("Head: %v", err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rounds/s")
}

// BenchmarkReceiptsChain measures what --receipts costs (docs/RECEIPTS.md,
// docs/BENCHMARKS.md): the served four-node chain of BenchmarkWorkerChain,
// every node's task the Go example worker, without receipts and with
// them (each node signing with an Ed25519 key from chainsync keygen, and
// with an ECDSA P-256 key as chainsync certs makes), side by side in one
// run. Run it as
//
//	go test -run '^$' -bench ReceiptsChain -benchtime 3000x ./cmd/chainsync/
func BenchmarkReceiptsChain(b *testing.B) {
	dir := b.TempDir()
	goWorker := filepath.Join(dir, "goworker")
	build := exec.Command("go", "build", "-o", goWorker, "../../examples/workers/goworker")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build goworker: %v\n%s", err, out)
	}
	edKey := filepath.Join(dir, "receipt.pem")
	if out, err := exec.Command(bin, "keygen", "--out", edKey).CombinedOutput(); err != nil {
		b.Fatalf("keygen: %v\n%s", err, out)
	}
	certs := filepath.Join(dir, "certs")
	if out, err := exec.Command(bin, "certs", "--dir", certs, "--nodes", "A").CombinedOutput(); err != nil {
		b.Fatalf("certs: %v\n%s", err, out)
	}
	for _, mode := range []struct {
		name  string
		flags []string
	}{
		{"without", nil},
		{"receipts-ed25519", []string{"--receipts", "--receipt-key", edKey}},
		{"receipts-p256", []string{"--receipts", "--receipt-key", filepath.Join(certs, "A-key.pem")}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			benchChain(b, dir, append([]string{"--worker"}, mode.flags...), []string{goWorker})
		})
	}
}
