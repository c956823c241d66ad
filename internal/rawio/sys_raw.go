//go:build linux && !race

package rawio

import (
	"syscall"
	"unsafe"
)

// sysRead is one read system call on fd into b (not empty), made raw.
func sysRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// sysWrite is one write system call on fd from b (not empty), made raw.
func sysWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}
