package rawio

import (
	"bufio"
	"io"
	"syscall"
	"testing"
)

// TestBlockingSocketPassesThrough checks that a TCP connection whose
// socket was put in blocking mode (by a Dial function that took its
// descriptor, say) is read and written the standard way: a raw call on
// it could wait in the kernel with the scheduler none the wiser.
func TestBlockingSocketPassesThrough(t *testing.T) {
	a, b := pair(t)
	rc, err := a.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Control(func(fd uintptr) { err = syscall.SetNonblock(int(fd), false) }); err != nil {
		t.Fatal(err)
	}
	if r := NewReader(a); r != io.Reader(a) {
		t.Fatalf("NewReader of a blocking socket: %T, want the connection itself", r)
	}
	if k, err := NewWriter(a).WriteNow([]byte("x\n")); k != 0 || err != nil {
		t.Fatalf("WriteNow to a blocking socket: %d, %v; want 0, nil", k, err)
	}
	if _, err := NewWriter(a).Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(NewReader(b)).ReadString('\n')
	if err != nil || line != "x\n" {
		t.Fatalf("read %q, %v", line, err)
	}
}
