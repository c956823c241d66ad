package protocol_test

import (
	"strconv"
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
)

// BenchmarkLinkUpManyOpened: a link comes up at a middle node that has
// opened 100,000 rounds ahead (an application that opens rounds far ahead,
// or the pipelined bench's agents) and sent something of 64 of them. The
// reconnect rule re-sends the last message of those 64, in the order
// opened (docs/DESIGN.md, "Roles and connections"); the rounds with
// nothing to re-send cost a look each, not a place in a sort.
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
}
