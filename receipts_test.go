package chainsync

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/receipt"
	"github.com/chainsync-go/chainsync/secure"
)

// Receipts in the library (docs/RECEIPTS.md), on the simulated network:
// four nodes with Config.Receipts; once each round is over, the Head holds
// every node's receipt (WaitReceipts), and they verify against each
// node's key, in chain order, each binding its predecessor's. The draft's
// Protocol Operation, with the receipts lines beside it.
func TestReceiptsLibrarySimulated(t *testing.T) {
	simulated(t, func(t *testing.T) {
		cfgs := simChain(t, testnet.NewNetwork(), 4)
		chain := []string{"N0", "N1", "N2", "N3"}
		pins := map[string][]string{}
		dir := t.TempDir()
		for i := range cfgs {
			_, key, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			pin, err := secure.PinOfKey(key.Public())
			if err != nil {
				t.Fatal(err)
			}
			pins[chain[i]] = []string{pin}
			cfgs[i].Chain, cfgs[i].Receipts, cfgs[i].ReceiptKey = chain, true, key
			cfgs[i].Heartbeat = 0
			if i == 0 {
				cfgs[i].ReceiptsDir = dir
			}
			if err := cfgs[i].Validate(); err != nil {
				t.Fatal(err)
			}
		}
		nodes := startAll(t, cfgs, []int{3, 2, 1, 0})
		for _, n := range nodes {
			if err := n.Ready(""); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range nodes {
			if res, err := n.Wait(context.Background(), ""); err != nil || res.Status != StatusDone {
				t.Fatalf("round: %+v %v", res, err)
			}
			if err := n.WaitReceipts(context.Background(), ""); err != nil {
				t.Fatal(err)
			}
		}
		notes := rcptHeld(nodes[0], "")
		if len(notes) != 4 {
			t.Fatalf("the Head holds %d receipts, want 4", len(notes))
		}
		var envs []receipt.Envelope
		for _, n := range notes {
			e, err := receipt.Unmarshal([]byte(n.Envelope))
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, e)
		}
		rs, err := receipt.Verify(envs, receipt.Trust{Pins: pins, Chain: chain})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			if r.Node != chain[i] || r.Outcome != receipt.RanOK {
				t.Errorf("receipt %d: %s %s", i, r.Node, r.Outcome)
			}
		}
		nodes[0].Close() // the bundle is written before Close returns
		f, err := os.Open(filepath.Join(dir, "round.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if kept, err := receipt.ParseBundle(f); err != nil || len(kept) != 4 {
			t.Fatalf("the Head's bundle: %d receipts, %v", len(kept), err)
		}
	})
}

// rcptHeld returns the receipts n holds for round, asked off the loop
// (this package's tests).
func rcptHeld(n *Node, round string) []protocol.ReceiptNote {
	var notes []protocol.ReceiptNote
	n.lp.ask(input{kind: inProbe, fn: func() { notes = n.d.st.receipts(round) }})
	return notes
}
