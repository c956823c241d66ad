package journal

import (
	"os"
	"syscall"
)

// openIn opens name in the directory d (openat, relative to the open
// directory, so a directory renamed or replaced meanwhile changes
// nothing) without following a symbolic link: a link planted where one
// of the state directory's files belongs fails with ELOOP instead of
// leading the node to write its lock or journal somewhere else.
func openIn(d *os.File, name string, flag int, perm uint32) (*os.File, error) {
	fd, err := syscall.Openat(int(d.Fd()), name, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.Name() + "/" + name, Err: err}
	}
	return os.NewFile(uintptr(fd), d.Name()+"/"+name), nil
}

// removeIn removes name (a file, or a symbolic link itself, never its
// target) from the directory d.
func removeIn(d *os.File, name string) error {
	if err := syscall.Unlinkat(int(d.Fd()), name); err != nil {
		return &os.PathError{Op: "remove", Path: d.Name() + "/" + name, Err: err}
	}
	return nil
}

// renameIn renames oldName to newName within the directory d. A symbolic
// link at newName is replaced, not followed.
func renameIn(d *os.File, oldName, newName string) error {
	if err := syscall.Renameat(int(d.Fd()), oldName, int(d.Fd()), newName); err != nil {
		return &os.LinkError{Op: "rename", Old: d.Name() + "/" + oldName, New: d.Name() + "/" + newName, Err: err}
	}
	return nil
}
