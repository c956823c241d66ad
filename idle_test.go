package chainsync

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// docs/DESIGN.md, "Roles and connections": a new predecessor connection is
// pending until its first line. A predecessor with nothing to say yet (a
// Head that is not ready) is not thrown out after PendingTimeout while no
// other predecessor is connected: its first line, however late, is heard.
func TestIdlePredecessorIsNotThrownOut(t *testing.T) {
	cfgs := chainConfigs(t, 2)
	tail := cfgs[1]
	tail.PendingTimeout = 50 * time.Millisecond
	logs, log := newLogCapture()
	tail.Logger = log
	nd, err := Start(tail)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if err := nd.Ready(""); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", tail.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Several PendingTimeouts of silence, then the first line.
	time.Sleep(6 * tail.PendingTimeout)
	if _, err := c.Write([]byte("READY\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "START\n" {
		t.Fatalf("after a late first line: %q, %v; want START (log: %s)", line, err, logs.tail(10))
	}
}

// Snapshot says when each neighbour last sent a line, so an operator sees
// a link that is up but silent before any fault is called.
func TestSnapshotLastHeard(t *testing.T) {
	cfgs := chainConfigs(t, 2)
	nodes := startAll(t, cfgs, []int{1, 0})
	before := time.Now()
	if err := nodes[0].Ready(""); err != nil {
		t.Fatal(err)
	}
	// The Tail is not ready, so it answers nothing: the Head hears nothing.
	deadline := time.Now().Add(10 * time.Second)
	for !nodes[1].Snapshot().PredUp {
		if time.Now().After(deadline) {
			t.Fatal("the Head's READY never reached the Tail")
		}
		time.Sleep(time.Millisecond)
	}
	tail, head := nodes[1].Snapshot(), nodes[0].Snapshot()
	if tail.PredHeard.Before(before) || time.Since(tail.PredHeard) > 10*time.Second {
		t.Errorf("Tail: PredHeard %v, want the time the READY arrived (after %v)", tail.PredHeard, before)
	}
	if !head.SuccHeard.IsZero() {
		t.Errorf("Head: SuccHeard %v, want zero (the Tail has sent nothing)", head.SuccHeard)
	}
}
