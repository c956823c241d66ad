package cli

import (
	"os"
	"testing"

	"github.com/chainsync-go/chainsync/internal/taskrun"
)

// TestMain lets this test binary stand in for chainsync where run starts
// its own binary again (os.Executable) as the task reaper: without it, a
// test that runs a node would start the whole test suite as its reaper,
// and so on without end.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == taskrun.ReaperCommand {
		os.Exit(taskrun.ReaperMain())
	}
	os.Exit(m.Run())
}
