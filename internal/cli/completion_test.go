package cli

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runFlagNames lists every flag of chainsync run.
func runFlagNames() []string {
	var names []string
	runFlagSet(&runOpts{}).VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// The completion scripts list every command and every flag of run and
// check, since they are generated from the same tables.
func TestCompletionListsEveryFlag(t *testing.T) {
	bash, zsh := bashCompletion(), zshCompletion()
	for _, c := range visibleCommands() {
		if !strings.Contains(bash, " "+c.name+" ") && !strings.Contains(bash, "\""+c.name+" ") {
			t.Errorf("bash script lacks command %s", c.name)
		}
		if !strings.Contains(zsh, "'"+c.name+":") {
			t.Errorf("zsh script lacks command %s", c.name)
		}
	}
	for _, sect := range []string{"run", "check"} {
		bashFlags := section(t, bash, "    "+sect+")\n", ";;")
		zshFlags := section(t, zsh, "    "+sect+")\n", ";;")
		for _, f := range runFlagNames() {
			if !strings.Contains(bashFlags+" ", "--"+f+" ") && !strings.Contains(bashFlags, "--"+f+"\"") {
				t.Errorf("bash: %s lacks --%s", sect, f)
			}
			if !strings.Contains(zshFlags, "'--"+f+"[") && !strings.Contains(zshFlags, "'--"+f+"=[") {
				t.Errorf("zsh: %s lacks --%s", sect, f)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"completion", "fish"}, &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), "bash or zsh") {
		t.Errorf("completion fish: exit %d, %q", code, errb.String())
	}
}

func section(t *testing.T, s, start, end string) string {
	t.Helper()
	i := strings.Index(s, start)
	if i < 0 {
		t.Fatalf("no %q in script", start)
	}
	s = s[i:]
	if j := strings.Index(s, end); j >= 0 {
		s = s[:j]
	}
	return s
}

// The bash script completes in a real bash: commands, flags, flag values
// and files for file flags.
func TestBashCompletionWorks(t *testing.T) {
	sh, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "chainsync.bash")
	if err := os.WriteFile(script, []byte(bashCompletion()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "node-b.pem"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words string
		want  string
	}{
		{"chainsync ch", "check"},
		{"chainsync run --tls-c", "--tls-ca --tls-cert"},
		{"chainsync check --time", "--timeout"},
		{"chainsync run --log-level ''", "debug info warn error"},
		{"chainsync run --tls-cert node-", "node-b.pem"},
		{"chainsync completion ''", "bash zsh"},
	} {
		cmd := exec.Command(sh, "-c", `source "$1"; COMP_WORDS=(`+tc.words+`); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _chainsync; echo "${COMPREPLY[*]}"`, "sh", script)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != tc.want {
			t.Errorf("%s<TAB>: %q (%v), want %q", tc.words, out, err, tc.want)
		}
	}
}

// The zsh script is valid zsh and loads under compinit.
func TestZshCompletionParses(t *testing.T) {
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "_chainsync")
	if err := os.WriteFile(script, []byte(zshCompletion()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(zsh, "-f", "-c", `autoload -U compinit && compinit -u -d "$2/zcd" && source "$1" && whence -w _chainsync`, "zsh", script, dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "_chainsync: function") {
		t.Errorf("zsh: %s (%v)", out, err)
	}
}

// Every command's --help (and "help COMMAND") exits 0 and prints its help
// on stdout, version included.
func TestEveryCommandHelp(t *testing.T) {
	for _, c := range visibleCommands() {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			var out, errb bytes.Buffer
			code := Main(args, &out, &errb)
			if code != ExitOK || !strings.Contains(out.String(), "Usage: chainsync "+c.name) || errb.Len() != 0 {
				t.Errorf("%v: exit %d, stdout %.60q, stderr %q", args, code, out.String(), errb.String())
			}
			if !strings.Contains(out.String(), "Example") {
				t.Errorf("%v: help has no example", args)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"version", "extra"}, &out, &errb); code != ExitUsage {
		t.Errorf("version extra: exit %d", code)
	}
	if code := Main([]string{"help"}, &out, &errb); code != ExitOK || !strings.Contains(out.String(), "chainsync check") {
		t.Errorf("help: exit %d, %q", code, out.String())
	}
}
