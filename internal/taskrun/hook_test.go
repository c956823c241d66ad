package taskrun

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync"
)

// panicHandler is a log handler that panics: it stands for a bug on the
// goroutine that runs a hook.
type panicHandler struct{ slog.Handler }

func (panicHandler) Enabled(context.Context, slog.Level) bool { return true }
func (panicHandler) Handle(context.Context, slog.Record) error {
	panic("the hook's goroutine panicked")
}

const hookPanicEnv = "TASKRUN_TEST_HOOK_PANIC"

// TestHookPanicIsReportedAsBug: the draft's "Error Handling" (a fault
// pages someone: --on-fault, --on-hold): every goroutine a node starts
// is under the panic handler, so a bug there is reported as one and the
// node exits 1, never 2 (usage) with a bare runtime panic. --on-hold
// used to run on a bare goroutine of its own. Each hook runs here in a
// helper process (this test binary again) whose logger panics when the
// hook's failure is logged.
func TestHookPanicIsReportedAsBug(t *testing.T) {
	if kind := os.Getenv(hookPanicEnv); kind != "" {
		h := NewHooks(HookConfig{OnFault: "exit 1", OnHold: "exit 1", Node: "B", Log: slog.New(panicHandler{})})
		switch kind {
		case "hold":
			h.Hold(chainsync.HoldEvent{Kind: "hold", Round: "r1"})
		case "fault":
			h.Observe(chainsync.TraceEvent{Kind: chainsync.TraceFault, Round: "r1"})
		}
		// The hook's goroutine is done once it panics, before the panic
		// handler has ended the process: wait for that end, bounded.
		h.Wait()
		time.Sleep(time.Minute)
		os.Exit(3)
	}
	for _, kind := range []string{"hold", "fault"} {
		c := exec.Command(os.Args[0], "-test.run=^TestHookPanicIsReportedAsBug$")
		c.Env = append(os.Environ(), hookPanicEnv+"="+kind)
		var stderr bytes.Buffer
		c.Stderr = &stderr
		err := c.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("%s hook: a panic on its goroutine ended the node with %v, want exit status 1; stderr:\n%s", kind, err, stderr.String())
			continue
		}
		if !strings.Contains(stderr.String(), "chainsync: internal error: the hook's goroutine panicked") {
			t.Errorf("%s hook: the panic was not reported as a bug; stderr:\n%s", kind, stderr.String())
		}
	}
}
