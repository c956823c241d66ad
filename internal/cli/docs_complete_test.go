package cli

// The documentation is complete: the README's flag table is exactly run's
// flag set, its command table lists every command, docs/OPERATIONS.md
// lists every reason chainsync check can give, and every file in deploy/
// names only flags and CHAINSYNC_ variables that exist. A flag added to
// the command without a line in the docs fails here.

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/secure"
)

// mdSection returns the part of a Markdown file from the heading line
// heading to the next heading of the same or a higher level.
func mdSection(t *testing.T, file, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no heading %q", file, heading)
	}
	level := strings.Index(heading, " ") // the number of #s
	rest := text[i+1+len(heading):]
	for _, l := range regexp.MustCompile(`(?m)^#{1,6} `).FindAllStringIndex(rest, -1) {
		if l[1]-l[0]-1 <= level && !inCodeBlock(rest[:l[0]]) {
			return rest[:l[0]]
		}
	}
	return rest
}

// inCodeBlock reports whether text ends inside a fenced code block.
func inCodeBlock(text string) bool {
	return strings.Count("\n"+text, "\n```")%2 == 1
}

// runFlags returns the names of chainsync run's flags.
func runFlags() map[string]bool {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	(&runOpts{}).flags(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

var docFlag = regexp.MustCompile("--([a-z][a-z0-9-]*)")

// The README's flag table has a row for every flag of chainsync run, and
// no row for a flag run does not have.
func TestReadmeFlagTableIsRunsFlagSet(t *testing.T) {
	sec := mdSection(t, "README.md", "## `chainsync run` flags")
	inTable := map[string]bool{}
	for _, l := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(l, "| `--") {
			continue
		}
		first := strings.SplitN(strings.TrimPrefix(l, "|"), " | ", 2)[0]
		for _, m := range docFlag.FindAllStringSubmatch(first, -1) {
			inTable[m[1]] = true
		}
	}
	want := runFlags()
	var missing, extra []string
	for f := range want {
		if !inTable[f] {
			missing = append(missing, "--"+f)
		}
	}
	for f := range inTable {
		if !want[f] {
			extra = append(extra, "--"+f)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 {
		t.Errorf("README.md's flag table has no row for %v (chainsync run has them)", missing)
	}
	if len(extra) > 0 {
		t.Errorf("README.md's flag table lists %v, which chainsync run does not have", extra)
	}
	if len(inTable) < 10 {
		t.Fatalf("found only %d flags in the table: is it still a table of | `--flag` | rows?", len(inTable))
	}
}

// The README's command table lists every command of the main help.
func TestReadmeCommandTableIsComplete(t *testing.T) {
	sec := mdSection(t, "README.md", "## Commands")
	for _, c := range visibleCommands() {
		if !strings.Contains(sec, "| `chainsync "+c.name) {
			t.Errorf("README.md's command table has no row for chainsync %s", c.name)
		}
	}
}

// reasonConst finds the refusal reasons of package secure in its source.
var reasonConst = regexp.MustCompile(`(?m)^\s*Reason[A-Za-z]+ Reason = "([^"]+)"`)

// docs/OPERATIONS.md's preflight section names every reason chainsync check
// can give a link: each refusal of package secure as check words it, and
// the dial failures.
func TestCheckReasonsDocumented(t *testing.T) {
	sec := strings.Join(strings.Fields(mdSection(t, "docs/OPERATIONS.md", "## Preflight: `chainsync check`")), " ")
	src, err := os.ReadFile(filepath.Join(repoRoot, "secure", "errors.go"))
	if err != nil {
		t.Fatal(err)
	}
	found := reasonConst.FindAllStringSubmatch(string(src), -1)
	if len(found) < 5 {
		t.Fatalf("found only %d reasons in secure/errors.go", len(found))
	}
	kinds := map[string]bool{"refused": true, "unreachable": true}
	for _, m := range found {
		msg := refusal(&secure.RefusedError{Peer: "10.0.0.1:7000", Reason: secure.Reason(m[1])})
		kind, _, _ := strings.Cut(msg, ": ")
		kinds[kind] = true
	}
	for kind := range kinds {
		if !strings.Contains(sec, "`"+kind+"`") {
			t.Errorf("docs/OPERATIONS.md, \"Preflight\": check can say %q, which the list of reasons does not name (in backquotes)", kind)
		}
	}
}

var (
	// A variable set: NAME=value (env files, Environment=, kubectl set env)
	// or "name: NAME" (a Kubernetes env entry).
	envAssign = regexp.MustCompile(`(?:^|[\s"'{,=])(CHAINSYNC_[A-Z0-9_]*[A-Z0-9])=|name: (CHAINSYNC_[A-Z0-9_]*[A-Z0-9])\b`)
	// A Kubernetes args or command list.
	yamlList = regexp.MustCompile(`(?m)^\s*(?:-\s+)?(?:args|command):\s*\[(.*)\]\s*$`)
	// ExecStart= in a unit.
	execStart = regexp.MustCompile(`(?m)^ExecStart=(.*)$`)
)

// Every file in deploy/ names only flags chainsync run has and sets only
// CHAINSYNC_ variables that configure a run flag; the variables it reads
// (in a task's or hook's command) are run settings or the ones a node sets
// for its task.
func TestDeployFilesNameRealSettings(t *testing.T) {
	flags := runFlags()
	flags["help"] = true
	settings := map[string]bool{}
	for f := range flags {
		if v := envName(f); v != "" {
			settings[v] = true
		}
	}
	files := repoFiles(t, func(p string) bool { return strings.HasPrefix(p, "deploy/") })
	if len(files) < 5 {
		t.Fatalf("found only %v in deploy/", files)
	}
	total, lines := 0, 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		sets := 0
		for _, m := range envAssign.FindAllStringSubmatch(text, -1) {
			v := m[1] + m[2]
			sets++
			if !settings[v] {
				t.Errorf("%s sets %s, which configures no chainsync run flag", f, v)
			}
		}
		for _, v := range envToken.FindAllString(text, -1) {
			if !settings[v] && !taskVars[v] {
				t.Errorf("%s names %s, which is neither a run setting nor a variable a node sets for its task", f, v)
			}
		}
		// Flags on chainsync's command lines: a YAML args list whose first
		// element is a chainsync command, and a unit's ExecStart.
		var cmdlines []string
		for _, m := range yamlList.FindAllStringSubmatch(text, -1) {
			items := strings.Split(m[1], ",")
			if first := strings.Trim(strings.TrimSpace(items[0]), `"'`); first == "run" || first == "check" {
				cmdlines = append(cmdlines, m[1])
			}
		}
		joined := strings.ReplaceAll(text, "\\\n", " ")
		for _, m := range execStart.FindAllStringSubmatch(joined, -1) {
			if strings.Contains(m[1], "chainsync") {
				cmdlines = append(cmdlines, m[1])
			}
		}
		// Shell lines (a container's script, a comment's example).
		for _, l := range strings.Split(joined, "\n") {
			for _, c := range []string{"chainsync run ", "chainsync check "} {
				if i := strings.Index(l, c); i >= 0 {
					cmdlines = append(cmdlines, l[i:])
				}
			}
		}
		for _, l := range cmdlines {
			if k := strings.Index(l, "--\""); k >= 0 {
				l = l[:k] // a YAML list: the task's own flags come after "--"
			}
			if k := strings.Index(l, " -- "); k >= 0 {
				l = l[:k]
			}
			for _, m := range docFlag.FindAllStringSubmatch(l, -1) {
				if !flags[m[1]] {
					t.Errorf("%s: %q uses --%s, which chainsync run does not have", f, strings.TrimSpace(l), m[1])
				}
			}
		}
		total += sets
		lines += len(cmdlines)
	}
	if total < 20 || lines < 3 {
		t.Fatalf("found %d CHAINSYNC_ settings and %d chainsync command lines in deploy/: is the parser still finding them?", total, lines)
	}
}
