//go:build !linux

package transport

import (
	"net"
	"time"
)

// setUserTimeout is Linux-only; elsewhere keepalive alone detects a
// vanished peer.
func setUserTimeout(*net.TCPConn, time.Duration) {}
