package protocol_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// BenchmarkLinkUpManyOpened: a link comes up at a middle node that has
// opened 100,000 rounds ahead (an application that opens rounds far ahead,
// or the pipelined bench's agents) and sent something of 64 of them. The
// reconnect rule re-sends the last message of those 64, in the order
// opened (docs/DESIGN.md, "Roles and connections"); the rounds with
// nothing to re-send cost a look each, not a place in a sort. x-floor
// compares with a walk over a map of as many rounds.
func BenchmarkLinkUpManyOpened(b *testing.B) {
	const opened, sent = 100_000, 64
	m := protocol.New(protocol.Config{Role: protocol.Middle, MaxRounds: opened})
	for i := range opened {
		if _, err := m.Step(protocol.LocalReady("r"+strconv.Itoa(i)), nil); err != nil {
			b.Fatal(err)
		}
	}
	for i := range sent {
		if _, err := m.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Ready, Round: "r" + strconv.Itoa(i)}), nil); err != nil {
			b.Fatal(err)
		}
	}
	// The floor: one look at each of as many rounds, a walk over a map
	// of that size, the best a node can do without an index of the
	// rounds in the order opened.
	floorMap := make(map[string]*int, opened)
	for i := range opened {
		floorMap["r"+strconv.Itoa(i)] = new(int)
	}
	floor := time.Duration(1 << 62)
	for range 5 {
		t0, n := time.Now(), 0
		for _, v := range floorMap {
			if *v == 0 {
				n++
			}
		}
		if d := time.Since(t0); d < floor && n == opened {
			floor = d
		}
	}
	var acts []protocol.Action
	for b.Loop() {
		var err error
		if acts, err = m.Step(protocol.LinkUp(protocol.Succ), acts[:0]); err != nil {
			b.Fatal(err)
		}
		if len(acts) != sent {
			b.Fatalf("LinkUp re-sent %d lines, want %d", len(acts), sent)
		}
	}
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(floor), "x-floor")
}
