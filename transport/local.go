package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
)

// DialFrom returns a function that makes TCP connections from the local
// host from (an IP address or a host name, no port), so that a peer that
// checks where a connection comes from sees this node's own address on a
// machine with several (a chain on 127.0.0.11, 127.0.0.12, ...: the
// system would pick 127.0.0.1). It returns nil (the system picks) for ""
// or an unspecified address. Of from's addresses it uses one of the
// family of the address dialled (for a name, the first). If from does not
// resolve, has no address of that family, or is not an address of this
// machine, the function dials from the address the system picks, and
// calls failed (if set) once with the reason. The function is for one
// goroutine at a time (a dial loop).
func DialFrom(from string, failed func(error)) func(ctx context.Context, addr string) (net.Conn, error) {
	if from == "" {
		return nil
	}
	if ip := net.ParseIP(from); ip != nil && ip.IsUnspecified() {
		return nil
	}
	var ips []net.IP
	off, told := false, false
	tell := func(err error) {
		if !told && failed != nil {
			failed(err)
		}
		told = true
	}
	plain := net.Dialer{KeepAliveConfig: KeepAlive}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if ips == nil && !off {
			as, err := net.DefaultResolver.LookupIPAddr(ctx, from)
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case err != nil:
				off = true
				tell(err)
			case len(as) == 0:
				off = true
				tell(fmt.Errorf("%s has no address", from))
			default:
				for _, a := range as {
					ips = append(ips, a.IP)
				}
			}
		}
		local := pick(ips, addr)
		if off || local == nil {
			if !off && ips != nil {
				tell(fmt.Errorf("%s has no address of the family of %s", from, addr))
			}
			return plain.DialContext(ctx, "tcp", addr)
		}
		d := plain
		d.LocalAddr = &net.TCPAddr{IP: local}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil && ctx.Err() == nil && !errors.Is(err, syscall.ECONNREFUSED) && !isTimeout(err) {
			// Not this machine's address (EADDRNOTAVAIL), or one it
			// cannot dial from: from the system's choice from now on.
			if c2, err2 := plain.DialContext(ctx, "tcp", addr); err2 == nil {
				off = true
				tell(err)
				return c2, nil
			}
		}
		return c, err
	}
}

// pick returns the address of ips of the family of addr's host, the
// first for a name, nil if none fits.
func pick(ips []net.IP, addr string) net.IP {
	if len(ips) == 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	dst := net.ParseIP(host)
	if err != nil || dst == nil {
		return ips[0]
	}
	for _, ip := range ips {
		if (ip.To4() != nil) == (dst.To4() != nil) {
			return ip
		}
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
