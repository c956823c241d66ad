package chainsync

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chainsync-go/chainsync/protocol"
)

// A round a predecessor opened at a Tail that is not locally ready yet is
// the machine's round: when the predecessor stays away past the connect
// timeout under halt, the fault names that round (not "(unnamed) (not
// open here)"), the round ends, and a later Ready cannot revive it
// (docs/FAULTS.md; draft, "Error Handling"). Before the machine owned the
// policy the driver's own table had no record of x: the round stayed
// open and Ready("x") sent START.
func TestHaltEndsRoundOpenedByPredecessor(t *testing.T) {
	tail := startWatched(t, Config{Name: "C", Listen: "127.0.0.1:0", PrevName: "B", ConnectTimeout: 300 * time.Millisecond})
	p := testnet.DialPeer(t, tail.Addr().String(), 5*time.Second)
	p.Send(t, "READY:x\n")
	tail.waitState(t, "x", protocol.StateSync)
	p.Conn().Close()
	ev := waitFault(t, tail, 1, 10*time.Second)
	if ev.Fault != FaultPeerUnreachable || ev.Round != "x" || strings.Contains(ev.Err.Error(), "not open here") {
		t.Fatalf("fault %s in round %q: %v; want peer-unreachable naming round x in its state", ev.Fault, ev.Round, ev.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := tail.Wait(ctx, "x")
	if err != nil || res.Status != StatusFault || faultKindOf(res.Err) != FaultPeerUnreachable {
		t.Fatalf("round x: %+v %v, want ended by the peer-unreachable fault", res, err)
	}
	if err := tail.Ready("x"); !errors.Is(err, protocol.ErrRoundFinished) {
		t.Fatalf("Ready(x) after the halt: %v, want ErrRoundFinished", err)
	}
	if st := tail.state("x"); st != protocol.StateAborted {
		t.Fatalf("round x in %v after the halt, want ABORTED", st)
	}
}

// A Wait on a round nobody opened is not a round: a fault that halts the
// node's rounds does not end it (before, the driver's table gave it the
// fault of an unrelated link).
func TestWaitOnUnknownRoundGetsNoFault(t *testing.T) {
	tail := startWatched(t, Config{Name: "C", Listen: "127.0.0.1:0", PrevName: "B", ConnectTimeout: 300 * time.Millisecond})
	got := make(chan Result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		res, _ := tail.Wait(ctx, "typo")
		got <- res
	}()
	p := testnet.DialPeer(t, tail.Addr().String(), 5*time.Second)
	p.Send(t, "READY:x\n")
	tail.waitState(t, "x", protocol.StateSync)
	p.Conn().Close()
	waitFault(t, tail, 1, 10*time.Second) // the positive event first
	xctx, xcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer xcancel()
	if res, err := tail.Wait(xctx, "x"); err != nil || res.Status != StatusFault {
		t.Fatalf("round x: %+v %v, want ended by the fault", res, err)
	}
	select {
	case res := <-got:
		t.Fatalf("Wait on an unknown round returned %+v after an unrelated fault", res)
	default:
	}
	cancel()
	if res := recvWithin(t, got, 5*time.Second, "the Wait to end with its context"); res.Status != 0 {
		t.Fatalf("Wait on an unknown round: %+v, want no result", res)
	}
}
