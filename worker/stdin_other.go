//go:build !unix

package worker

import "io"

// pollable returns r (see stdin_unix.go).
func pollable(r io.Reader) io.Reader { return r }
