package transport

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"
)

// Every link gets TCP_NODELAY, keepalive and (on Linux) TCP_USER_TIMEOUT,
// so a neighbour that vanishes is noticed even with a message in flight
// (docs/DESIGN.md "Faults": "TCP keepalive is on").
func TestTuneSetsSocketOptions(t *testing.T) {
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var b Backoff
	c, err := Dial(context.Background(), nil, ln.Addr().String(), &b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	get := func(level, opt int) int {
		var v int
		var gerr error
		if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil {
			t.Fatalf("getsockopt(%d, %d): %v", level, opt, gerr)
		}
		return v
	}
	if get(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) == 0 {
		t.Error("keepalive is off")
	}
	if get(syscall.IPPROTO_TCP, syscall.TCP_NODELAY) == 0 {
		t.Error("TCP_NODELAY is off")
	}
	if got := time.Duration(get(syscall.IPPROTO_TCP, tcpUserTimeout)) * time.Millisecond; got != UserTimeout {
		t.Errorf("TCP_USER_TIMEOUT = %v, want %v", got, UserTimeout)
	}
}
