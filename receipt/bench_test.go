package receipt_test

import (
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/internal/receipttest"
	"github.com/chainsync-go/chainsync/receipt"
	"github.com/chainsync-go/chainsync/wire"
)

// What a receipt costs a node per round: signing one (ECDSA P-256 with a
// certificate, or Ed25519), marshalling it for the journal and cutting it
// into wire lines; and what checking a four-node bundle costs.

func benchSign(b *testing.B, keys map[string]signer) {
	r := receipttest.Base(names, 1, "r1", receipt.RanOK)
	r.Pred = strings.Repeat("a", 64)
	k := keys["B"]
	b.ReportAllocs()
	for b.Loop() {
		e, err := receipt.Sign(k.Key, k.Cert, r)
		if err != nil {
			b.Fatal(err)
		}
		line, err := e.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := wire.AppendReceipt(nil, "r1", "B", line); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSignECDSA(b *testing.B) {
	keys, _ := certChain(b, names...)
	benchSign(b, keys)
}

func BenchmarkSignEd25519(b *testing.B) {
	keys, _ := edKeys(b, names...)
	benchSign(b, keys)
}

func BenchmarkVerifyBundle4(b *testing.B) {
	keys, roots := certChain(b, names...)
	envs := receipttest.SignRound(b, keys, names, "r1", allOK, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := receipt.Verify(envs, receipt.Trust{Roots: roots}); err != nil {
			b.Fatal(err)
		}
	}
}
