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
// or an unspecified address. If from does not resolve, or is not an
// address of this machine, the function dials from the address the
// system picks from then on, and calls failed (if set) once with the
// reason. The function is for one goroutine at a time (a dial loop).
func DialFrom(from string, failed func(error)) func(ctx context.Context, addr string) (net.Conn, error) {
	if from == "" {
		return nil
	}
	if ip := net.ParseIP(from); ip != nil && ip.IsUnspecified() {
		return nil
	}
	var bound *net.TCPAddr
	off := false
	giveUp := func(err error) {
		off, bound = true, nil
		if failed != nil {
			failed(err)
		}
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if bound == nil && !off {
			as, err := net.DefaultResolver.LookupIPAddr(ctx, from)
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case err != nil:
				giveUp(err)
			case len(as) == 0:
				giveUp(fmt.Errorf("%s has no address", from))
			default:
				bound = &net.TCPAddr{IP: as[0].IP, Zone: as[0].Zone}
			}
		}
		d := net.Dialer{KeepAliveConfig: KeepAlive}
		if bound != nil {
			d.LocalAddr = bound
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil && bound != nil && errors.Is(err, syscall.EADDRNOTAVAIL) {
			giveUp(err)
			return (&net.Dialer{KeepAliveConfig: KeepAlive}).DialContext(ctx, "tcp", addr)
		}
		return c, err
	}
}
