package chainsync

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// DECISIONS.md, "Roles and connections": a new predecessor connection is
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
