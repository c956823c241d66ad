package receipt_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/chainsync-go/chainsync/receipt"
	"github.com/chainsync-go/chainsync/secure"
)

// Two nodes sign their receipts for round r1 in chain order, the second
// binding the first; a checker who knows their pins verifies the bundle.
func Example() {
	chain := []string{"A", "B"}
	keys := map[string]ed25519.PrivateKey{}
	pins := map[string][]string{}
	for _, n := range chain {
		seed := sha256.Sum256([]byte("example key of " + n)) // a real key: chainsync keygen
		keys[n] = ed25519.NewKeyFromSeed(seed[:])
		pin, _ := secure.PinOfKey(keys[n].Public())
		pins[n] = []string{pin}
	}
	start := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	var bundle []receipt.Envelope
	pred := "" // the Head binds nothing
	for i, n := range chain {
		r := receipt.Receipt{
			Chain: chain, Settings: "5ef30b6ee28fe844", Round: "r1", Attempt: 1,
			Node: n, Place: i + 1, Outcome: receipt.RanOK,
			TaskStart: start.Add(time.Duration(i) * time.Minute), TaskEnd: start.Add(time.Duration(i)*time.Minute + 30*time.Second),
			Pred: pred, Signed: start.Add(time.Duration(i)*time.Minute + 31*time.Second),
		}
		env, err := receipt.Sign(keys[n], nil, r)
		if err != nil {
			fmt.Println(err)
			return
		}
		bundle = append(bundle, env)
		pred = env.Digest() // what the successor's receipt binds
	}
	rs, err := receipt.Verify(bundle, receipt.Trust{Pins: pins})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rs {
		fmt.Println(r.Node, r.Outcome, r.TaskEnd.Sub(r.TaskStart))
	}
	// Output:
	// A ran-ok 30s
	// B ran-ok 30s
}
