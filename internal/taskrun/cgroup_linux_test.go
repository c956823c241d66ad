package taskrun

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTaskCgroupFallBack: where a start in the task's cgroup fails (here
// the "cgroup" is a plain directory, which clone refuses) and the same
// start without one works, the task runs once, in its process group only,
// the runner stops using cgroups and says so, and the directory it made
// is removed. docs/DESIGN.md, "The task dies with its node".
func TestTaskCgroupFallBack(t *testing.T) {
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "ran")
	var logBuf syncWriter
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	tr := New(Config{Cmd: []string{"sh", "-c", "echo x >> " + out}, Reaper: &Reaper{}, Log: log})
	tr.cg = &Cgroups{dir: dir, log: log}
	for range 2 {
		if err := tr.Run(context.Background(), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(out)
	if got := strings.Count(string(b), "x"); got != 2 {
		t.Fatalf("two runs ran the task %d times, want 2", got)
	}
	if !tr.cg.off {
		t.Error("the runner still uses cgroups after a start in one failed and one without worked")
	}
	if n := strings.Count(logBuf.String(), "tasks run without a cgroup of their own from now on"); n != 1 {
		t.Errorf("the fall-back was logged %d times, want once:\n%s", n, logBuf.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %d entries in the cgroup directory", len(ents))
	}
}

// syncWriter is a bytes buffer safe for a logger used from goroutines.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
