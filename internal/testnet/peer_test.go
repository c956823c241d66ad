package testnet

import (
	"strings"
	"testing"
	"time"
)

// The raw peer against a scripted "node" on loopback TCP: exact bytes,
// lines, silence, hang-up and close, and the record of what came.
func TestPeer(t *testing.T) {
	ln := ListenPeer(t)
	client := DialPeer(t, ln.Addr(), 5*time.Second)
	node := ln.Accept(t, 5*time.Second)

	node.Send(t, "READY:r1\nSTART:r1\n")
	client.Expect(t, "READY:r1\n")
	if l, err := client.Line(5 * time.Second); err != nil || l != "START:r1\n" {
		t.Fatalf("Line: %q, %v", l, err)
	}
	client.Quiet(t, 10*time.Millisecond) // everything sent was consumed above
	if err := client.ExpectErr("COMPLETE\n", 10*time.Millisecond); err == nil {
		t.Fatal("ExpectErr: no error for bytes never sent")
	}

	node.Send(t, "COMPLETE:r2\n")
	if err := client.ExpectErr("COMPLETE:r1\n", 5*time.Second); err == nil || !strings.Contains(err.Error(), `"COMPLETE:r2\n"`) {
		t.Fatalf("ExpectErr on other bytes: %v", err)
	}
	client.Expect(t, "COMPLETE:r2\n") // a mismatch consumes nothing

	// HangUp closes only the sending side: the other end reads the end
	// of the stream, and can still send until it closes.
	client.HangUp()
	node.ExpectClosed(t, 5*time.Second)
	node.Send(t, "COMPLETE\n")
	node.Close()
	client.Expect(t, "COMPLETE\n")
	client.ExpectClosed(t, 5*time.Second)
	if got, want := client.Received(), "READY:r1\nSTART:r1\nCOMPLETE:r2\nCOMPLETE\n"; got != want {
		t.Errorf("Received %q, want %q", got, want)
	}
	if got := node.Received(); got != "" {
		t.Errorf("the node's end received %q, want nothing", got)
	}
}

// AwaitClosed reports a reset as closed, after discarding what came first.
func TestPeerAwaitClosedAfterReset(t *testing.T) {
	ln := ListenPeer(t)
	client := DialPeer(t, ln.Addr(), 5*time.Second)
	node := ln.Accept(t, 5*time.Second)
	node.Send(t, "FAULT\n")
	node.Reset()
	if d := client.AwaitClosed(t, 5*time.Second); d > 5*time.Second {
		t.Errorf("AwaitClosed took %v", d)
	}
}
