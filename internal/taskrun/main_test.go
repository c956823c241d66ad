package taskrun

import (
	"os"
	"testing"
)

// TestMain lets this test binary stand in for chainsync where StartReaper
// starts its own binary again (os.Executable) as the reaper: without it,
// a test that starts a reaper would start the whole test suite as its
// reaper, and so on without end.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ReaperCommand {
		os.Exit(ReaperMain())
	}
	os.Exit(m.Run())
}
