//go:build !linux

package cli

import "syscall"

// nodeAttr starts a supervised node as it is: no parent-death signal
// here.
func nodeAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

func lockNodeThread()   {}
func unlockNodeThread() {}
