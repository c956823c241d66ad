//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package journal

import (
	"fmt"
	"os"
	"runtime"
)

// supported refuses every state directory here (see "Other systems" in
// the package doc).
func supported() error {
	why := "the standard library has no flock(2) here to lock it"
	if runtime.GOOS == "windows" {
		why = "the standard library has no lock for it here, no open that refuses a symbolic link in it, and its mode cannot say who may write it"
	}
	return fmt.Errorf("%w on %s: %s; run without one (a restarted node then remembers nothing: docs/RESTARTS.md, \"Without --state-dir\")",
		ErrUnsupported, runtime.GOOS, why)
}

// flock is never reached: Open refuses first.
func flock(*os.File) error { return supported() }
