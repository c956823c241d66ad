package chainsync

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A panic on one of the library's goroutines (here a task's, on a task
// worker) reaches SetPanicHandler's handler with its value and stack, so
// that a command can report it as the bug it is and exit as it chooses
// instead of the runtime's exit status 2 (docs/OPERATIONS.md, exit status).
func TestPanicReachesTheHandler(t *testing.T) {
	got := make(chan string, 1)
	SetPanicHandler(func(v any, stack []byte) {
		got <- v.(string) + "\n" + string(stack)
	})
	t.Cleanup(func() { SetPanicHandler(nil) })
	cfgs := chainConfigs(t, 1)
	cfgs[0].Task = func(context.Context, string) error { panic("seeded bug") }
	nd := startAll(t, cfgs, []int{0})[0]
	if err := nd.Ready(""); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if !strings.HasPrefix(s, "seeded bug\n") || !strings.Contains(s, "panic_test.go") {
			t.Errorf("handler got %q, want the value and the stack of the panic", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the task's panic did not reach the handler")
	}
}
