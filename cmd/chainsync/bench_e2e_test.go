//go:build unix

package main

// End-to-end tests of chainsync bench with the built binary: a short run
// of each mode whose output must be sane (not timed assertions). Each run
// also checks every task ran once per round in chain order (draft:
// Protocol Operation).

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// benchRun is the part of chainsync bench --json these tests read.
type benchRun struct {
	Mode    string `json:"mode"`
	Results []struct {
		N     int `json:"n"`
		Hops  int `json:"hops"`
		Chain struct {
			Median float64 `json:"median_us"`
			P99    float64 `json:"p99_us"`
		} `json:"chain"`
		Floor struct {
			Median float64 `json:"median_us"`
		} `json:"floor"`
		Ratio        float64 `json:"ratio"`
		ChainRate    float64 `json:"chain_rounds_per_s"`
		TasksChecked int     `json:"tasks_checked"`
	} `json:"results"`
}

func TestBenchBothModes(t *testing.T) {
	for _, mode := range []string{"inproc", "procs"} {
		t.Run(mode, func(t *testing.T) {
			svg := filepath.Join(t.TempDir(), "bench.svg")
			cmd := exec.Command(bin, "bench", "--mode", mode, "--n", "2,3", "--rounds", "15", "--warmup", "2", "--json", "--svg", svg)
			cmd.Env = cleanEnv()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("chainsync bench: %v\nstderr: %s", err, stderr.String())
			}
			var run benchRun
			if err := json.Unmarshal(out, &run); err != nil {
				t.Fatalf("--json output is not JSON: %v\n%s", err, out)
			}
			if run.Mode != mode || len(run.Results) != 2 {
				t.Fatalf("mode %q, %d results: %s", run.Mode, len(run.Results), out)
			}
			for i, r := range run.Results {
				n := 2 + i
				if r.N != n || r.Hops != 4*(n-1) || r.TasksChecked != n*17 {
					t.Errorf("n=%d: %+v", n, r)
				}
				if r.Chain.Median <= 0 || r.Chain.P99 < r.Chain.Median || r.Floor.Median <= 0 || r.Ratio <= 0 || r.ChainRate <= 0 {
					t.Errorf("n=%d: implausible figures %+v", n, r)
				}
			}
			b, err := os.ReadFile(svg)
			if err != nil || !strings.HasPrefix(string(b), "<svg") || strings.Count(string(b), "<polyline") != 2 {
				t.Errorf("--svg file: %v\n%.300s", err, b)
			}
		})
	}
}

// The table names its columns and the verification; bad flags are usage
// errors that change nothing.
func TestBenchTableAndUsage(t *testing.T) {
	cmd := exec.Command(bin, "bench", "--n", "2", "--rounds", "5", "--warmup", "1", "--concurrent", "4")
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chainsync bench: %v", err)
	}
	for _, want := range []string{"4 rounds in flight", "chain p50", "floor p50", "ratio", "rounds/s", "Verified: 12 task runs"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	svg := filepath.Join(t.TempDir(), "never.svg")
	for _, args := range [][]string{
		{"--n", "1"}, {"--n", "2,x"}, {"--mode", "threads"}, {"--rounds", "0"}, {"--concurrent", "0"}, {"extra"},
		{"--n", "1", "--svg", svg},
	} {
		cmd := exec.Command(bin, append([]string{"bench"}, args...)...)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || err == nil {
			t.Errorf("bench %v: exit %d, want 2 (usage)\n%s", args, code, out)
		}
		if !strings.Contains(string(out), "chainsync bench:") {
			t.Errorf("bench %v: no error message:\n%s", args, out)
		}
	}
	if _, err := os.Stat(svg); err == nil {
		t.Errorf("a usage error created the --svg file")
	}
}
