// Package sdnotify tells systemd how a service is doing, for units with
// Type=notify, using only the standard library: it writes sd_notify(3)
// datagrams such as "READY=1" and "STATUS=..." to the unix datagram
// socket systemd names in $NOTIFY_SOCKET (a path, or "@name" for a socket
// in the abstract namespace).
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
)

// EnvSocket is the environment variable systemd sets to its socket.
const EnvSocket = "NOTIFY_SOCKET"

// Notifier sends state to one notification socket. A nil *Notifier (not
// running under systemd) ignores every call, so callers need no checks.
// It is safe for concurrent use.
type Notifier struct {
	mu   sync.Mutex
	conn *net.UnixConn
}

// ErrUnsupported is returned for a NOTIFY_SOCKET this package cannot
// reach (systemd's vsock: addresses, used inside virtual machines).
var ErrUnsupported = errors.New("sdnotify: unsupported socket address")

// New connects to socket, a path or "@name" (abstract namespace). An
// empty socket returns a nil Notifier and no error: not under systemd.
func New(socket string) (*Notifier, error) {
	if socket == "" {
		return nil, nil
	}
	if !strings.HasPrefix(socket, "/") && !strings.HasPrefix(socket, "@") {
		return nil, fmt.Errorf("%w: %s=%q", ErrUnsupported, EnvSocket, socket)
	}
	// The standard library maps a leading '@' to the abstract namespace.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("sdnotify: %s=%q: %w", EnvSocket, socket, err)
	}
	return &Notifier{conn: c}, nil
}

// FromEnv connects to $NOTIFY_SOCKET and removes the variable from this
// process's environment, so that the processes it starts (a task that is
// itself a systemd-aware program) do not report as this service.
func FromEnv() (*Notifier, error) {
	socket := os.Getenv(EnvSocket)
	os.Unsetenv(EnvSocket)
	return New(socket)
}

// Send writes one notification, lines of KEY=VALUE, e.g. "READY=1" or
// "STATUS=waiting for START". A newline inside a value would start a new
// key: Status takes care of that.
func (n *Notifier) Send(state string) error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		return net.ErrClosed
	}
	_, err := n.conn.Write([]byte(state))
	return err
}

// Ready tells systemd the service is up, with an initial status.
func (n *Notifier) Ready(status string) error {
	return n.Send("READY=1\n" + statusLine(status))
}

// Status sets the one-line status systemctl status shows.
func (n *Notifier) Status(status string) error { return n.Send(statusLine(status)) }

// Stopping tells systemd the service is shutting down, with a last status.
func (n *Notifier) Stopping(status string) error {
	return n.Send("STOPPING=1\n" + statusLine(status))
}

func statusLine(s string) string {
	return "STATUS=" + strings.NewReplacer("\n", " ", "\r", " ").Replace(s)
}

// Close closes the socket. Later calls return net.ErrClosed.
func (n *Notifier) Close() error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		return nil
	}
	err := n.conn.Close()
	n.conn = nil
	return err
}
