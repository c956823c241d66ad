package transport

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h (the syscall package
// does not define it).
const tcpUserTimeout = 0x12

// setUserTimeout bounds how long sent data may stay unacknowledged before
// the kernel drops the connection. Keepalive alone does not cover this:
// Linux sends no keepalive probes while data is in flight, so a peer that
// vanished just after we wrote to it would be noticed only after the
// retransmission limit, about 15 minutes.
func setUserTimeout(c *net.TCPConn, d time.Duration) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d.Milliseconds()))
	})
}
