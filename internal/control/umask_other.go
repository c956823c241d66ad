//go:build !unix

package control

// umask does nothing here (no umask); it returns 0.
func umask(int) int { return 0 }
