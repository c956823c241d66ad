package chainsync_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chainsync-go/chainsync"
)

// A three-node chain A -> B -> C over loopback TCP in one process: the
// tasks run strictly in chain order, and only once all three nodes are
// ready (draft-dohmeyer-chainsync, "Protocol Operation"). Each node listens
// on a port of its own choosing, so the nodes start from the Tail, whose
// address its predecessor must know; with fixed addresses they could start
// in any order.
func ExampleStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	task := func(name string) func(context.Context, string) error {
		return func(context.Context, string) error {
			mu.Lock()
			defer mu.Unlock()
			fmt.Println(name, "runs its task")
			return nil
		}
	}

	// C, the Tail: listens for B, dials nobody.
	c, err := chainsync.Start(chainsync.Config{Name: "C", Listen: "127.0.0.1:0", Task: task("C")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// B: listens for A, dials C.
	b, err := chainsync.Start(chainsync.Config{Name: "B", Listen: "127.0.0.1:0", Next: c.Addr().String(), Task: task("B")})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	// A, the Head: dials B, listens for nobody.
	a, err := chainsync.Start(chainsync.Config{Name: "A", Next: b.Addr().String(), Task: task("A")})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	// Each node becomes locally ready for the unnamed round "", in any
	// order; nothing runs until all three are.
	for _, n := range []*chainsync.Node{c, a, b} {
		if err := n.Ready(""); err != nil {
			log.Fatal(err)
		}
	}
	for _, n := range []*chainsync.Node{a, b, c} {
		res, err := n.Wait(ctx, "")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(n.Role(), res.Status)
	}
	// Output:
	// A runs its task
	// B runs its task
	// C runs its task
	// head done
	// middle done
	// tail done
}

// Named rounds run concurrently and independently over the same two
// connections; here a two-node chain runs rounds "r1" and "r2", and a task
// learns its round from its argument.
func Example_namedRounds() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	ran := map[string][]string{}
	task := func(name string) func(context.Context, string) error {
		return func(_ context.Context, round string) error {
			mu.Lock()
			defer mu.Unlock()
			ran[round] = append(ran[round], name)
			return nil
		}
	}
	tail, err := chainsync.Start(chainsync.Config{Name: "T", Listen: "127.0.0.1:0", Task: task("T")})
	if err != nil {
		log.Fatal(err)
	}
	defer tail.Close()
	head, err := chainsync.Start(chainsync.Config{Name: "H", Next: tail.Addr().String(), Task: task("H")})
	if err != nil {
		log.Fatal(err)
	}
	defer head.Close()

	for _, round := range []string{"r1", "r2"} {
		for _, n := range []*chainsync.Node{head, tail} {
			if err := n.Ready(round); err != nil {
				log.Fatal(err)
			}
		}
	}
	for _, round := range []string{"r1", "r2"} {
		res, err := head.Wait(ctx, round)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := tail.Wait(ctx, round); err != nil {
			log.Fatal(err)
		}
		mu.Lock()
		fmt.Println(round, res.Status, ran[round])
		mu.Unlock()
	}
	// Output:
	// r1 done [H T]
	// r2 done [H T]
}

// A task that fails halts the chain at its node: the failing node's round
// ends with StatusTaskFailed and no COMPLETE is sent on, so the nodes after
// it never run their task. Its predecessor, which would otherwise wait for
// the exit wave for ever, gives up after its PhaseTimeout; without fault
// notices (Config.Heartbeat) it cannot know why the exit wave did not come
// back, so its round ends StatusUndelivered: the tasks after it may have
// run (an UndeliveredError says whom to ask).
func ExampleResult_taskFailed() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var tailRan atomic.Bool
	c, err := chainsync.Start(chainsync.Config{Name: "C", Listen: "127.0.0.1:0",
		Task: func(context.Context, string) error { tailRan.Store(true); return nil }})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	b, err := chainsync.Start(chainsync.Config{Name: "B", Listen: "127.0.0.1:0", Next: c.Addr().String(),
		Task: func(context.Context, string) error { return fmt.Errorf("disk full") }})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	a, err := chainsync.Start(chainsync.Config{Name: "A", Next: b.Addr().String(), PhaseTimeout: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	for _, n := range []*chainsync.Node{a, b, c} {
		_ = n.Ready("")
	}
	res, _ := b.Wait(ctx, "")
	fmt.Println("B:", res.Status)
	res, _ = a.Wait(ctx, "")
	fmt.Println("A:", res.Status)
	fmt.Println("C ran its task:", tailRan.Load())
	// Output:
	// B: task failed
	// A: undelivered
	// C ran its task: false
}

// A long-lived chain, as a staged data pipeline embedded in a program: the
// Head extracts, B transforms, C loads. B and C follow (Config.Follow):
// they join every round the Head opens, learning it from Node.Rounds, and
// say when they are ready for it. The Head opens one round per batch as
// batches arrive; with one task at a time, every node processes the
// batches in the order the Head opened them.
func Example_longLivedChain() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	done := map[string][]string{}
	stage := func(name string) func(context.Context, string) error {
		return func(_ context.Context, batch string) error {
			mu.Lock()
			defer mu.Unlock()
			done[name] = append(done[name], batch)
			return nil
		}
	}
	// follow answers every round a node learns from its predecessor; a
	// real stage would first fetch what the batch needs.
	follow := func(n *chainsync.Node) {
		for batch := range n.Rounds() {
			_ = n.Ready(batch)
		}
	}

	c, err := chainsync.Start(chainsync.Config{Name: "C", Listen: "127.0.0.1:0", Follow: true, Task: stage("load")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	go follow(c)
	b, err := chainsync.Start(chainsync.Config{Name: "B", Listen: "127.0.0.1:0", Next: c.Addr().String(), Follow: true, Task: stage("transform")})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	go follow(b)
	a, err := chainsync.Start(chainsync.Config{Name: "A", Next: b.Addr().String(), Task: stage("extract")})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	// The stream of batches: the Head opens a round for each.
	var batches []string
	for i := 1; i <= 5; i++ {
		batch := fmt.Sprintf("batch-%d", i)
		batches = append(batches, batch)
		if err := a.Ready(batch); err != nil {
			log.Fatal(err)
		}
	}
	for _, batch := range batches {
		if res, err := a.Wait(ctx, batch); err != nil || res.Status != chainsync.StatusDone {
			log.Fatal(batch, res.Status, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, stage := range []string{"extract", "transform", "load"} {
		fmt.Println(stage, done[stage])
	}
	// Output:
	// extract [batch-1 batch-2 batch-3 batch-4 batch-5]
	// transform [batch-1 batch-2 batch-3 batch-4 batch-5]
	// load [batch-1 batch-2 batch-3 batch-4 batch-5]
}

// A node with Config.Approve runs each task only once a person approved
// it (docs/STEERING.md): here a one-node chain whose round waits for its
// approval, is approved, and runs. OnHold is told when the wait begins;
// a real program would page someone, and chainsync approve (or Deny)
// answers.
func ExampleNode_Approve() {
	waiting := make(chan string, 1)
	n, err := chainsync.Start(chainsync.Config{
		Name:    "publish",
		Approve: true,
		OnHold:  func(ev chainsync.HoldEvent) { waiting <- ev.Kind + " " + ev.Round },
		Task: func(_ context.Context, round string) error {
			fmt.Println("publishing", round)
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	if err := n.Ready("batch-7"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("waiting for", <-waiting)
	fmt.Println("approving")
	if _, err := n.Approve(chainsync.Request{By: "ann"}); err != nil {
		log.Fatal(err)
	}
	res, err := n.Wait(context.Background(), "batch-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status)
	// Output:
	// waiting for approval batch-7
	// approving
	// publishing batch-7
	// done
}
