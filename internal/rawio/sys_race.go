//go:build linux && race

package rawio

import "syscall"

// Under the race detector the calls are the standard ones, which tell
// the detector what the kernel reads and writes: a buffer shared by two
// goroutines without order is reported, as without this package.

// sysRead is one read system call on fd into b.
func sysRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return max(n, 0), errno(err)
}

// sysWrite is one write system call on fd from b.
func sysWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), b)
	return max(n, 0), errno(err)
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return syscall.EIO
}
