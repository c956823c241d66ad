//go:build unix

package main

// Flag errors of the built binary: one line naming the flag as the docs
// spell it, with a hint where there is one, and one line pointing at
// --help; never the whole flag list (README, "Exit status": 2 usage error).

import (
	"strings"
	"testing"
	"time"
)

// TestFlagErrorsAreShortE2E: every subcommand's bad flag is at most three
// lines on stderr, names the flag in --flag form (and, for a duration
// without a unit, the unit to add), points at --help, starts nothing, and
// exits 2. README, "Exit status" (2: usage error) and "Commands".
func TestFlagErrorsAreShortE2E(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  []string
		want []string // each in stderr
	}{
		{args: []string{"run", "--chain", "A=127.0.0.11:17500,B=127.0.0.12:17500", "--name", "A", "--heartbeat", "5", "--", "true"},
			want: []string{"--heartbeat", `"5"`, "5s", "--help"}},
		{args: []string{"run", "--heartbet", "5s", "--", "true"}, want: []string{"unknown flag --heartbet", "did you mean --heartbeat?"}},
		{args: []string{"run", "--quiet=maybe", "--", "true"}, want: []string{"--quiet", "true or false"}},
		{args: []string{"run", "--rounds", "many", "--", "true"}, want: []string{"--rounds", "whole number"}},
		{args: []string{"run", "--", "true"}, env: []string{"CHAINSYNC_HEARTBEAT=5"}, want: []string{"CHAINSYNC_HEARTBEAT", "--heartbeat", "5s"}},
		// Without --serve too: a Head that may keep no round in flight
		// would wait for ever on its first line.
		{args: []string{"run", "--max-open", "0", "--rounds-from", "/dev/null", "--", "true"}, want: []string{"--max-open must be at least 1"}},
		{args: []string{"check", "--timeout", "30", "--", "true"}, want: []string{"--timeout", "30s"}},
		{args: []string{"open", "--control"}, want: []string{"--control needs a value"}},
		{args: []string{"status", "127.0.0.1:9", "--timeout", "2"}, want: []string{"--timeout", "2s"}},
		{args: []string{"trace", "render", "a.jsonl", "--bogus"}, want: []string{"unknown flag --bogus"}},
		{args: []string{"certs", "--dri", "x"}, want: []string{"unknown flag --dri", "--dir"}},
		{args: []string{"psk", "--frce", "x"}, want: []string{"unknown flag --frce", "--force"}},
		{args: []string{"demo", "-n", "x"}, want: []string{"--n", "whole number"}},
		{args: []string{"bench", "--rounds", "1e9x"}, want: []string{"--rounds", "whole number"}},
		{args: []string{"journal", "--jsn", "x"}, want: []string{"unknown flag --jsn", "--json"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			p := startProc(t, "chainsync", tc.env, tc.args...)
			if code := p.wait(t, 10*time.Second); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			stderr := strings.TrimRight(p.err.String(), "\n")
			if n := len(strings.Split(stderr, "\n")); n > 3 {
				t.Errorf("%d lines on stderr, want at most 3:\n%s", n, stderr)
			}
			for _, w := range append(tc.want, "--help") {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "Usage:") || strings.Contains(stderr, "parse error") {
				t.Errorf("stderr has the flag package's usage or wording:\n%s", stderr)
			}
		})
	}
}
