package chainsync

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// TestFollowOrder: a served chain A -> B -> C in which B and C follow
// (Config.Follow). The Head opens eight rounds; B hears of each from A's
// READY (Node.Rounds), and Snapshot lists them while B is not ready for
// any; then B becomes ready for them in reverse order. Every node still
// passes them on and runs its tasks in the order the Head opened them,
// each once, and B's Snapshot lists them as finished afterwards.
//
// The project's reading of long-lived chains (a node learns a round from
// the READY that opens it; with one task at a time it runs its tasks in
// the order the rounds were opened at the Head). Draft: Message Types
// (ROUND-ID), Protocol Operation.
func TestFollowOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	ran := map[string][]string{}
	task := func(name string) func(context.Context, string) error {
		return func(_ context.Context, round string) error {
			mu.Lock()
			defer mu.Unlock()
			ran[name] = append(ran[name], round)
			return nil
		}
	}
	c, err := Start(Config{Name: "C", Listen: "127.0.0.1:0", Follow: true, Task: task("C")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		for id := range c.Rounds() {
			_ = c.Ready(id)
		}
	}()
	b, err := Start(Config{Name: "B", Listen: "127.0.0.1:0", Next: c.Addr().String(), Follow: true, Task: task("B")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a, err := Start(Config{Name: "A", Next: b.Addr().String(), Task: task("A")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	var opened []string
	for i := range 8 {
		id := fmt.Sprintf("r%d-%d", 7-i, i) // not sorted by id
		opened = append(opened, id)
		if err := a.Ready(id); err != nil {
			t.Fatal(err)
		}
	}
	var learned []string
	for len(learned) < len(opened) {
		select {
		case id := <-b.Rounds():
			learned = append(learned, id)
		case <-ctx.Done():
			t.Fatalf("B learned only %v", learned)
		}
	}
	if !slices.Equal(learned, opened) {
		t.Fatalf("B learned %v, want the Head's order %v", learned, opened)
	}
	var listed []string
	for _, r := range b.Snapshot().Rounds {
		if r.State == protocol.StateSync && !r.Ready {
			listed = append(listed, r.Round)
		}
	}
	if want := slices.Sorted(slices.Values(opened)); !slices.Equal(listed, want) {
		t.Errorf("B's Snapshot lists %v waiting to become ready, want %v", listed, want)
	}
	for _, id := range slices.Backward(opened) {
		if err := b.Ready(id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range opened {
		if res, err := a.Wait(ctx, id); err != nil || res.Status != StatusDone {
			t.Fatalf("round %s: %v %v", id, res.Status, err)
		}
	}
	mu.Lock()
	for _, name := range []string{"A", "B", "C"} {
		if !slices.Equal(ran[name], opened) {
			t.Errorf("%s ran %v, want the Head's order %v", name, ran[name], opened)
		}
	}
	mu.Unlock()
	// B's part ends once its exit-wave COMPLETE is handed over.
	if _, err := b.Wait(ctx, opened[len(opened)-1]); err != nil {
		t.Fatal(err)
	}
	snap := b.Snapshot()
	var finished []string
	for _, r := range snap.Finished {
		if r.Status != StatusDone || r.Ended.Before(r.Opened) {
			t.Errorf("finished round %+v", r)
		}
		finished = append(finished, r.Round)
	}
	if len(snap.Rounds) != 0 || len(finished) != len(opened) {
		t.Errorf("B's Snapshot after the rounds: in progress %v, finished %v", snap.Rounds, finished)
	}
}
