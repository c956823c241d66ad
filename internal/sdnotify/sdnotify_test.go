package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeSystemd listens like systemd's notification socket.
func fakeSystemd(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

// Datagrams arrive as sd_notify(3) writes them, on a socket path and in
// the abstract namespace ("@name"); a newline in a status cannot inject a
// key.
func TestNotify(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@chainsync-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano()),
	} {
		t.Run(name[:1], func(t *testing.T) {
			sys := fakeSystemd(t, name)
			t.Setenv(EnvSocket, name)
			n, err := FromEnv()
			if err != nil {
				t.Fatal(err)
			}
			if _, set := os.LookupEnv(EnvSocket); set {
				t.Errorf("FromEnv left %s set for child processes", EnvSocket)
			}
			if err := n.Ready("listening"); err != nil {
				t.Fatal(err)
			}
			if got := recv(t, sys); got != "READY=1\nSTATUS=listening" {
				t.Errorf("got %q", got)
			}
			_ = n.Status("two\nlines\nWATCHDOG=1")
			if got := recv(t, sys); got != "STATUS=two lines WATCHDOG=1" {
				t.Errorf("got %q", got)
			}
			_ = n.Stopping("done")
			if got := recv(t, sys); got != "STOPPING=1\nSTATUS=done" {
				t.Errorf("got %q", got)
			}
			n.Close()
			if err := n.Status("x"); !errors.Is(err, net.ErrClosed) {
				t.Errorf("after Close: %v", err)
			}
		})
	}
}

// Without NOTIFY_SOCKET there is nothing to do, and a nil Notifier is
// silent; an address this package cannot use is an error.
func TestNotSystemd(t *testing.T) {
	n, err := New("")
	if n != nil || err != nil {
		t.Fatalf("New(\"\") = %v, %v", n, err)
	}
	if err := n.Ready("x"); err != nil {
		t.Error(err)
	}
	n.Close()
	if _, err := New("vsock:2:1234"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("vsock: %v", err)
	}
	if _, err := New(filepath.Join(t.TempDir(), "absent")); err == nil || !strings.Contains(err.Error(), "NOTIFY_SOCKET") {
		t.Errorf("absent socket: %v", err)
	}
}
