//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package testnet

import "os"

// portLocks: whether FreeAddrs locks the ports it hands out (not here).
const portLocks = false

// flock takes no lock here (the standard library has no flock(2)): the
// port is only drawn at random, so two test binaries running at once can
// draw the same one.
func flock(*os.File) error { return nil }
