package cli

// The documentation and the deployment files must match the command: no
// flag or CHAINSYNC_ variable that does not exist, and the packaging
// properties the README promises.

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository, two directories up from internal/cli.
const repoRoot = "../.."

// repoFiles returns the repository's files (relative, slash-separated)
// whose names match keep, skipping .git.
func repoFiles(t *testing.T, keep func(string) bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if keep(rel) {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	envToken  = regexp.MustCompile(`CHAINSYNC_[A-Z0-9_]*[A-Z0-9]`)
	flagToken = regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
)

// otherVars are CHAINSYNC_ variables that are not settings and not task
// variables: knobs of the test suite.
var otherVars = map[string]bool{
	"CHAINSYNC_NETNS_SLOW": true, "CHAINSYNC_E2E_SEED": true, "CHAINSYNC_SCALE": true,
	"CHAINSYNC_SCALE_N": true, "CHAINSYNC_REFERENCE": true, // scale test sizes; bench/peers' reference checkout
	"CHAINSYNC_SOAK": true, // the served chain's soak benchmark (TestServeSoak)
}

// The README, the docs and the deployment files name only CHAINSYNC_
// variables that exist, and their chainsync run / check command lines only
// flags that exist, so an example cannot go stale when a flag is renamed.
func TestDocsNameRealSettings(t *testing.T) {
	var co checkOpts
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	co.flags(fs) // run's flags plus --timeout
	vars := map[string]bool{}
	flags := map[string]bool{"help": true}
	fs.VisitAll(func(f *flag.Flag) { vars[envName(f.Name)] = true; flags[f.Name] = true })

	files := repoFiles(t, func(p string) bool {
		return strings.HasSuffix(p, ".md") || strings.HasPrefix(p, "deploy/") || p == "Dockerfile"
	})
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, v := range envToken.FindAllString(text, -1) {
			if !vars[v] && !taskVars[v] && !otherVars[v] {
				t.Errorf("%s names %s, which configures nothing", f, v)
			}
		}
		// Command lines, with backslash continuations joined.
		text = strings.ReplaceAll(text, "\\\n", " ")
		for _, line := range strings.Split(text, "\n") {
			i := strings.Index(line, "chainsync run ")
			if j := strings.Index(line, "chainsync check "); i < 0 || (j >= 0 && j < i) {
				i = j
			}
			if i < 0 {
				continue
			}
			cmd := line[i:]
			if k := strings.Index(cmd, " -- "); k >= 0 {
				cmd = cmd[:k] // the task's own flags are its business
			}
			for _, m := range flagToken.FindAllStringSubmatch(cmd, -1) {
				if !flags[m[1]] {
					t.Errorf("%s: %q uses --%s, which chainsync run/check does not have", f, strings.TrimSpace(cmd), m[1])
				}
			}
		}
	}
}

// The packaging the README promises: a static binary on an empty base, as a
// non-root user; systemd units with Type=notify.
func TestPackaging(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	var last string
	for _, l := range strings.Split(df, "\n") {
		if strings.HasPrefix(l, "FROM ") {
			last = l
		}
	}
	if last != "FROM scratch" && !strings.Contains(last, "distroless") {
		t.Errorf("the default (last) stage is %q, want scratch or distroless", last)
	}
	final := df[strings.LastIndex(df, "\nFROM "):]
	if !strings.Contains(df, "CGO_ENABLED=0") || !strings.Contains(final, "USER 65532") {
		t.Errorf("Dockerfile: want CGO_ENABLED=0 and a non-root USER in the final stage")
	}
	for _, unit := range []string{"deploy/systemd/chainsync@.service"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, unit))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "\nType=notify\n") {
			t.Errorf("%s is not Type=notify", unit)
		}
	}
	readme, _ := os.ReadFile(filepath.Join(repoRoot, "docs/OPERATIONS.md"))
	if strings.Contains(string(readme), "Type=exec") || !strings.Contains(string(readme), "Type=notify") {
		t.Errorf("docs/OPERATIONS.md's unit should use Type=notify")
	}
}
