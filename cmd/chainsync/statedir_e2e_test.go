//go:build unix

package main

// A --state-dir that does not exist is created with a warning that names
// it (README, "`chainsync run` flags", --state-dir; docs/RESTARTS.md).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStateDirCreatedWithWarningE2E: a node whose --state-dir does not
// exist (a typo would otherwise start it afresh in silence) creates it
// with mode 0700 and says so at WARN, which --quiet still shows, before
// the node starts; an existing directory gets no warning.
//
// docs/DESIGN.md, "Restarts and durable state"; README, --state-dir.
func TestStateDirCreatedWithWarningE2E(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "stat-dir-typo")
	p := startProc(t, "A", nil, "run", "--name", "A", "--state-dir", dir, "--quiet", "--round", "r1", "--", "true")
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	warn := p.waitLog(t, time.Second, "warning of the new --state-dir", containsAll("WARN", "--state-dir did not exist", dir))
	if !strings.Contains(warn, "starts afresh") {
		t.Errorf("the warning does not say the node starts afresh: %q", warn)
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("--state-dir %s: %v, mode %v; want a directory of mode 0700", dir, err, fi.Mode())
	}
	// The same directory again, with a new round: it exists now.
	q := startProc(t, "A", nil, "run", "--name", "A", "--state-dir", dir, "--quiet", "--round", "r2", "--", "true")
	if code := q.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("second run: exit %d, want 0", code)
	}
	if strings.Contains(q.err.String(), "did not exist") {
		t.Errorf("an existing --state-dir was warned about:\n%s", q.err.String())
	}
}
