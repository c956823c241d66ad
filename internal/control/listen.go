package control

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Network splits a --control address into a network and an address:
// unix:PATH is a unix socket, HOST:PORT a TCP address.
func Network(addr string) (network, address string, err error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return "", "", fmt.Errorf("--control %q: give the socket's path, e.g. unix:/run/chainsync/control.sock", addr)
		}
		return "unix", path, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", "", fmt.Errorf("--control %q: want unix:PATH or HOST:PORT, e.g. 127.0.0.1:7300", addr)
	}
	return "tcp", addr, nil
}

// Listen binds the control socket at addr. A unix socket is created
// with mode 0600, and its file appears only once it takes connections
// (a stale socket left by a dead node is replaced; a live one is not);
// path is then its file, for the caller to remove when it closes the
// listener, and "" for TCP.
func Listen(addr string) (ln net.Listener, path string, err error) {
	network, address, err := Network(addr)
	if err != nil {
		return nil, "", err
	}
	if network == "tcp" {
		ln, err = net.Listen("tcp", address)
		if err != nil {
			return nil, "", fmt.Errorf("--control %s: %v", addr, err)
		}
		return ln, "", nil
	}
	if c, err := net.DialTimeout("unix", address, time.Second); err == nil {
		c.Close()
		return nil, "", fmt.Errorf("--control %s: another process serves that socket", addr)
	}
	if fi, err := os.Lstat(address); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, "", fmt.Errorf("--control %s: %s exists and is not a socket", addr, address)
		}
		_ = os.Remove(address) // stale: nobody answers on it
	}
	ln, err = listenUnix(address)
	if err != nil {
		return nil, "", fmt.Errorf("--control %s: %v", addr, err)
	}
	return ln, address, nil
}

// listenUnix listens on a unix socket at path, mode 0600. It binds a
// name of its own beside path and renames it into place once it
// listens, so that the file at path, once there, takes connections: a
// client (or a script) that waits for the file is never refused for
// coming between the bind and the listen.
func listenUnix(path string) (net.Listener, error) {
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".cs%d.sock", os.Getpid()))
	if len(tmp) > len(path) && len(tmp) > 100 {
		tmp = path // too long a name for a socket: bind in place
	}
	_ = os.Remove(tmp)  // a leftover of a process with this pid
	old := umask(0o177) // the socket is born 0600
	ln, err := net.Listen("unix", tmp)
	umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	if tmp != path {
		// The caller removes path when it closes the listener.
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		if err := os.Rename(tmp, path); err != nil {
			ln.Close()
			os.Remove(tmp)
			return nil, err
		}
	}
	return ln, nil
}

// Local reports whether only this machine can reach a control socket at
// addr (a valid --control address): a unix socket, or a TCP address whose
// host is a loopback IP (127.0.0.0/8, ::1) or localhost. Any other host,
// an empty one (every interface) or a name that would need resolving is
// not: the socket has no authentication, so whoever reaches it steers the
// chain.
func Local(addr string) bool {
	network, address, err := Network(addr)
	if err != nil {
		return false
	}
	if network == "unix" {
		return true
	}
	host, _, _ := net.SplitHostPort(address)
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback() && ip.Zone() == ""
}
