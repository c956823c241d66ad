package cli

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeNodes plays the runs of a supervised node: each start returns the
// next status at once, after advancing the fake clock by the run's
// length.
type fakeNodes struct {
	codes  []int
	runs   []time.Duration
	clock  time.Time
	starts int
	sigs   []os.Signal
}

func (f *fakeNodes) start([]string) (<-chan int, func(os.Signal), error) {
	i := f.starts
	f.starts++
	f.clock = f.clock.Add(f.runs[min(i, len(f.runs)-1)])
	done := make(chan int, 1)
	done <- f.codes[min(i, len(f.codes)-1)]
	return done, func(s os.Signal) { f.sigs = append(f.sigs, s) }, nil
}

// TestSuperviseRestarts: docs/RESTARTS.md, "The switch stack, restarted
// by its own task" (the draft's switch stack, each switch's upgrade
// restarting its own node): supervise restarts a node that died without
// an outcome (killed by a signal, or exit 1), never one with an outcome,
// and at most --max-restarts times in a row of runs shorter than a
// minute; a run of a minute or longer starts the count again.
func TestSuperviseRestarts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		codes      []int
		runs       []time.Duration
		max        int
		wantStarts int
		wantCode   int
	}{
		{"done", []int{0}, []time.Duration{time.Second}, 3, 1, 0},
		{"usage", []int{2}, []time.Duration{time.Second}, 3, 1, 2},
		{"task failed", []int{3}, []time.Duration{time.Second}, 3, 1, 3},
		{"fault", []int{4}, []time.Duration{time.Second}, 3, 1, 4},
		{"cancelled", []int{5}, []time.Duration{time.Second}, 3, 1, 5},
		{"stopped", []int{130}, []time.Duration{time.Second}, 3, 1, 130},
		{"killed, then done", []int{137, 137, 0}, []time.Duration{time.Second}, 3, 3, 0},
		{"cannot start, then done", []int{1, 0}, []time.Duration{time.Second}, 3, 2, 0},
		{"never restart", []int{137}, []time.Duration{time.Second}, 0, 1, 137},
		{"gives up", []int{1}, []time.Duration{time.Second}, 3, 4, 1},
		{"long runs are forgiven", []int{137, 137, 137, 137, 137, 0}, []time.Duration{2 * time.Minute}, 2, 6, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeNodes{codes: tc.codes, runs: tc.runs, clock: time.Unix(0, 0)}
			var log strings.Builder
			s := supervisor{cmd: []string{"node"}, opts: superviseOpts{maxRestarts: tc.max}, sigs: make(chan os.Signal),
				log: &log, now: func() time.Time { return f.clock }, start: f.start}
			if code := s.loop(); code != tc.wantCode || f.starts != tc.wantStarts {
				t.Fatalf("exit %d after %d starts, want %d after %d; log:\n%s", code, f.starts, tc.wantCode, tc.wantStarts, log.String())
			}
			if n := strings.Count(log.String(), "; starting it again in"); n != tc.wantStarts-1 {
				t.Errorf("%d restarts logged, want %d:\n%s", n, tc.wantStarts-1, log.String())
			}
		})
	}
}

// TestSuperviseStopPassesOn: a stop signal goes to the node, and the
// node's status is supervise's, with no restart even when the node died
// of it.
func TestSuperviseStopPassesOn(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	done := make(chan int, 1)
	var got []os.Signal
	starts := 0
	s := supervisor{cmd: []string{"node"}, opts: superviseOpts{maxRestarts: 5}, sigs: sigs, log: &strings.Builder{}, now: time.Now,
		start: func([]string) (<-chan int, func(os.Signal), error) {
			starts++
			return done, func(sg os.Signal) { got = append(got, sg); done <- 128 + int(syscall.SIGTERM) }, nil
		}}
	sigs <- syscall.SIGTERM
	if code := s.loop(); code != 143 || starts != 1 || len(got) != 1 || got[0] != syscall.SIGTERM {
		t.Fatalf("exit %d, %d starts, signals passed %v; want 143, 1 start, SIGTERM", code, starts, got)
	}
}
