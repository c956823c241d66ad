package protocol_test

import (
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// stream is a byte FIFO: the sending end appends, a wire.Reader reads.
type stream struct {
	buf []byte
	off int
}

func (s *stream) Read(p []byte) (int, error) {
	if s.off == len(s.buf) {
		return 0, io.EOF
	}
	n := copy(p, s.buf[s.off:])
	s.off += n
	if s.off == len(s.buf) {
		s.buf, s.off = s.buf[:0], 0
	}
	return n, nil
}

// Draft: Introduction ("exactly 4(n-1) messages per synchronization
// round") and Protocol Operation, at scale: a 100,000-node chain runs one
// named round in lockstep, every message through the codec, with exactly
// 4(n-1) messages, tasks in chain order and the Head finishing last. The
// round itself must be allocation-light: a few allocations per node (its
// round record), none per message.
func TestHundredThousandNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("long chain: skipped with -short")
	}
	const n = 100_000
	const round = "round-100k"
	start := time.Now()
	ms := make([]*protocol.Machine, n)
	for i := range ms {
		ms[i] = protocol.New(protocol.Config{Role: protocol.RoleOf(i > 0, i < n-1)})
	}
	created := time.Since(start)

	// In lockstep every message is delivered in the order it was sent, so
	// one byte stream and one Reader carry them all; hops says who gets
	// each line and from which side.
	type hop struct {
		to   int32
		from protocol.Side
	}
	var (
		s        stream
		rd       = wire.NewReader(&s)
		hops     = make([]hop, 0, 16)
		next     int
		tasks    = make([]int32, 0, 16)
		out      = make([]protocol.Action, 0, 16)
		msgs     int
		nextTask int
		nextDone = n - 1
		// Nodes whose final COMPLETE was just handed to the predecessor,
		// to be told so (protocol.Delivered) after the step.
		delivered []int32
	)
	var apply func(i int, ev protocol.Event)
	apply = func(i int, ev protocol.Event) {
		var err error
		out, err = ms[i].Step(ev, out[:0])
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		for _, a := range out {
			switch a.Kind {
			case protocol.ActSend:
				s.buf = wire.Append(s.buf, a.Msg, false)
				if a.To == protocol.Succ {
					hops = append(hops, hop{int32(i + 1), protocol.Pred})
				} else {
					hops = append(hops, hop{int32(i - 1), protocol.Succ})
					if a.Msg.Cmd == protocol.Complete {
						delivered = append(delivered, int32(i)) // handed over at once
					}
				}
				msgs++
			case protocol.ActRunTask:
				// Draft: Phase 3: "Execution order is therefore strictly A -> B -> C -> ... -> N."
				if i != nextTask {
					t.Fatalf("node %d runs its task; want node %d next", i, nextTask)
				}
				nextTask++
				tasks = append(tasks, int32(i))
			case protocol.ActDone:
				// Draft: Phase 4: the exit wave runs Tail to Head; the Head is last.
				if i != nextDone || a.Outcome != protocol.Done {
					t.Fatalf("node %d finished (%v); want node %d next", i, a.Outcome, nextDone)
				}
				nextDone--
			}
		}
		for len(delivered) > 0 {
			d := delivered[0]
			delivered = delivered[1:]
			apply(int(d), protocol.Delivered(round))
		}
	}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	begin := time.Now()
	// Tail first: every node but the Head is locally ready before its
	// predecessor's READY arrives. No task may start before the last one.
	for i := n - 1; i >= 0; i-- {
		apply(i, protocol.LocalReady(round))
		if nextTask != 0 {
			t.Fatalf("a task started before node %d was ready", i-1)
		}
	}
	for next < len(hops) || len(tasks) > 0 {
		if len(tasks) > 0 { // tasks finish instantly
			i := tasks[0]
			tasks = tasks[:copy(tasks, tasks[1:])]
			apply(int(i), protocol.TaskDone(round, false))
			continue
		}
		h := hops[next]
		next++
		if next == len(hops) {
			hops, next = hops[:0], 0
		}
		msg, err := rd.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		apply(int(h.to), protocol.Recv(h.from, msg))
	}
	elapsed := time.Since(begin)
	runtime.ReadMemStats(&after)

	if msgs != 4*(n-1) {
		t.Errorf("%d messages, want 4(n-1) = %d", msgs, 4*(n-1))
	}
	if nextTask != n || nextDone != -1 {
		t.Errorf("%d tasks ran, %d nodes not done", nextTask, nextDone+1)
	}
	for i, m := range ms {
		if st, _ := m.State(round); st != protocol.StateDone || m.Active() != 0 {
			t.Fatalf("node %d: state %v, active %d", i, st, m.Active())
		}
	}
	allocs := after.Mallocs - before.Mallocs
	t.Logf("n=%d: %d messages; machines created in %v, round in %v; %d allocations (%.2f per node)",
		n, msgs, created, elapsed, allocs, float64(allocs)/n)
	if perNode := float64(allocs) / n; perNode > 4 {
		t.Errorf("%.2f allocations per node in the round, want at most 4", perNode)
	}
}
