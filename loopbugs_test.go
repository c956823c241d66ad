package chainsync

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
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

// A node restarted on its state directory after a fault ended its round
// (its neighbours gone, the halt policy) has nothing left to wait for:
// with the neighbours still away it reports no new fault. Before the
// machine owned the policy, the driver's watchdog fired again after the
// restart and reported a second peer-unreachable fault "in round
// (unnamed) (not open here)", with an empty round, and the command ran
// --on-fault once more (docs/RESTARTS.md; docs/FAULTS.md). The restarted
// node tells of the past fault at most once, as the past (TraceFault with
// Resumed), naming its round. B serves (so a restart resumes rather than
// refuse a rerun) and its predecessor is played by the test.
func TestResumedAfterHaltReportsNoNewFault(t *testing.T) {
	simulated(t, func(t *testing.T) {
		const timeout = 2 * time.Second
		nw := testnet.NewNetwork()
		cfg := simChain(t, nw, 3)[1] // B; C never comes
		cfg.StateDir, cfg.ConnectTimeout, cfg.Follow = t.TempDir(), timeout, true
		first := startWatched(t, cfg)
		c, err := nw.Dialer(simHost(0))(context.Background(), cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		a := testnet.NewPeer(t, c)
		a.Send(t, "READY:r1\n")
		first.waitState(t, "r1", protocol.StateSync)
		a.Close() // A halts and goes away
		ev := waitFault(t, first, 1, time.Minute)
		if ev.Fault != FaultPeerUnreachable || ev.Round != "r1" {
			t.Fatalf("first run: fault %s in round %q, want peer-unreachable in r1", ev.Fault, ev.Round)
		}
		if res := waitResult(t, first, "r1", time.Minute); res.Status != StatusFault {
			t.Fatalf("first run: r1 %v, want fault (policy halt)", res.Status)
		}
		first.Close()

		second := startWatched(t, cfg)
		after(5 * timeout) // the neighbours stay away for several connect timeouts
		synctest.Wait()
		for _, ev := range faultsOf(second) {
			if !ev.Resumed || ev.Round != "r1" || strings.Contains(ev.Err.Error(), "not open here") {
				t.Errorf("after the restart: fault %s in round %q (resumed %v): %v; want only r1's past fault, told as resumed",
					ev.Fault, ev.Round, ev.Resumed, ev.Err)
			}
		}
		if k := len(faultsOf(second)); k > 1 {
			t.Errorf("after the restart: %d faults, want at most the past one", k)
		}
	})
}

// The same without serving: the fault's end of the round is journalled,
// so a rerun on the state directory is refused as one whose rounds have
// all ended (docs/RESTARTS.md) instead of waiting for the neighbours once
// more. Before the machine owned the policy, the abort was not journalled:
// the restarted node ran r1 again from SYNC, reported its fault a second
// time and added one "in round (unnamed) (not open here)" for its
// successor.
func TestRerunAfterHaltIsRefused(t *testing.T) {
	simulated(t, func(t *testing.T) {
		const timeout = 2 * time.Second
		nw := testnet.NewNetwork()
		cfg := simChain(t, nw, 3)[1]
		cfg.StateDir, cfg.ConnectTimeout = t.TempDir(), timeout
		cfg.Rounds = []string{"r1"}
		first := startWatched(t, cfg)
		c, err := nw.Dialer(simHost(0))(context.Background(), cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		a := testnet.NewPeer(t, c)
		a.Send(t, "READY:r1\n")
		first.waitState(t, "r1", protocol.StateSync)
		a.Close()
		if ev := waitFault(t, first, 1, time.Minute); ev.Round != "r1" {
			t.Fatalf("first run: fault in round %q, want r1", ev.Round)
		}
		waitResult(t, first, "r1", time.Minute)
		after(3 * timeout)
		synctest.Wait()
		for _, ev := range faultsOf(first) {
			if ev.Round != "r1" {
				t.Errorf("first run: a fault in round %q after r1 ended: %v", ev.Round, ev.Err)
			}
		}
		first.Close()
		if nd, err := Start(cfg); !errors.Is(err, ErrAlreadyEnded) {
			if nd != nil {
				nd.Close()
			}
			t.Fatalf("rerun on the state directory: %v, want ErrAlreadyEnded", err)
		}
	})
}
