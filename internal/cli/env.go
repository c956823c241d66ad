package cli

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Configuration from the environment (docs/DESIGN.md): every flag of
// chainsync run (and of chainsync check, which takes the same flags) may
// also come from CHAINSYNC_<FLAG>, upper case with dashes as underscores;
// a flag given on the command line wins. The mapping is computed from the
// flag set itself, so a flag added to run later is covered without a
// table to keep up to date.

// envPrefix starts every configuration variable.
const envPrefix = "CHAINSYNC_"

// taskVars are the variables a node sets for the processes it starts: its
// task and --ready-cmd (CHAINSYNC_ROUND, CHAINSYNC_ROLE, CHAINSYNC_NODE) and
// the --on-fault hook (CHAINSYNC_FAULT, CHAINSYNC_PEER, CHAINSYNC_SIDE,
// CHAINSYNC_ERROR). They describe that process. A chainsync the process
// starts inherits them, and must not take them for its own configuration,
// so they are never read as settings: no flag maps to one of them.
var taskVars = map[string]bool{
	"CHAINSYNC_ROUND": true, "CHAINSYNC_ROLE": true, "CHAINSYNC_NODE": true,
	"CHAINSYNC_FAULT": true, "CHAINSYNC_PEER": true, "CHAINSYNC_SIDE": true, "CHAINSYNC_ERROR": true, "CHAINSYNC_ORIGIN": true,
	"CHAINSYNC_HOLD": true, "CHAINSYNC_REASON": true, // --on-hold (steer.go)
	"CHAINSYNC_FAILED_NODE": true, // --undo (undo.go)
	"CHAINSYNC_WORKER":      true, // a --worker's (workercmd.go)
}

// envRenames gives the flags whose CHAINSYNC_<FLAG> name is a task
// variable another name. --round would be CHAINSYNC_ROUND, which is the
// round a task runs for: as a setting it is CHAINSYNC_ROUND_ID.
var envRenames = map[string]string{
	"round":  "CHAINSYNC_ROUND_ID",
	"worker": "CHAINSYNC_WORKER_TASK", // CHAINSYNC_WORKER=1 tells a process it is a worker
}

// envName returns the variable that configures flag name, or "" if it has
// none (its natural name is a task variable and it has no rename).
func envName(name string) string {
	if v, ok := envRenames[name]; ok {
		return v
	}
	v := envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if taskVars[v] {
		return ""
	}
	return v
}

// envSetting is one flag that took its value from the environment.
type envSetting struct{ Flag, Var string }

// applyEnv sets every flag of fs that was not given on the command line
// from its variable (see envName), if that is set and not empty. Call it
// after fs.Parse. A value the flag refuses is a usage error naming the
// variable. It returns the settings it applied, in flag order.
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) ([]envSetting, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var applied []envSetting
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		name := envName(f.Name)
		if name == "" {
			return
		}
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = usagef("environment variable %s=%q: not a valid value for --%s: %s", name, v, f.Name, valueReason(f, v, e.Error()))
			return
		}
		applied = append(applied, envSetting{f.Name, name})
	})
	return applied, err
}

// envSources returns " (--x came from CHAINSYNC_X)" for each flag named in err
// whose value came from the environment, so that an operator who never
// typed the flag sees where the bad value came from.
func envSources(err error, fromEnv []envSetting) string {
	msg := err.Error()
	var out []string
	for _, s := range fromEnv {
		f := "--" + s.Flag
		for i := strings.Index(msg, f); i >= 0; {
			end := i + len(f)
			if end == len(msg) || !isFlagChar(msg[end]) {
				out = append(out, f+" came from "+s.Var)
				break
			}
			j := strings.Index(msg[end:], f)
			if j < 0 {
				break
			}
			i = end + j
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, ", ") + ")"
}

func isFlagChar(c byte) bool { return c == '-' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// unknownEnv returns the CHAINSYNC_ variables in environ that configure
// nothing: no flag of fs reads them and they are not task variables.
// chainsync check reports them, since a misspelt variable is otherwise
// silently ignored.
func unknownEnv(fs *flag.FlagSet, environ []string) []string {
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		if n := envName(f.Name); n != "" {
			known[n] = true
		}
	})
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, envPrefix) && !known[k] && !taskVars[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// unknownEnvWarnings says, for each CHAINSYNC_ variable in environ that
// configures nothing (see unknownEnv), what to do about it: the variable
// it is probably a misspelling of, and where the names are listed. cmd is
// "run" or "check".
func unknownEnvWarnings(fs *flag.FlagSet, environ []string, cmd string) []string {
	var known []string
	fs.VisitAll(func(f *flag.Flag) {
		if n := envName(f.Name); n != "" {
			known = append(known, n)
		}
	})
	var out []string
	for _, v := range unknownEnv(fs, environ) {
		hint := "misspelt?"
		best, bestD := "", 3 // at most 2 edits away
		for _, k := range known {
			if d := editDistance(v, k); d < bestD {
				best, bestD = k, d
			}
		}
		if best != "" {
			hint = "did you mean " + best + "?"
		}
		out = append(out, fmt.Sprintf("%s is set but configures nothing (%s each flag --x-y is CHAINSYNC_X_Y; see chainsync %s --help)", v, hint, cmd))
	}
	return out
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// envHelp is the part of run's and check's --help about the environment.
const envHelp = `Every flag may also be set in the environment as CHAINSYNC_<FLAG>, upper
case with dashes as underscores (CHAINSYNC_CHAIN, CHAINSYNC_TLS_CERT,
CHAINSYNC_PHASE_TIMEOUT=10m, CHAINSYNC_QUIET=true); a flag on the command
line wins, empty variables are ignored. --round is CHAINSYNC_ROUND_ID and
--worker CHAINSYNC_WORKER_TASK: CHAINSYNC_ROUND, _ROLE, _NODE, _WORKER,
_FAULT, _PEER, _SIDE and _ERROR are what a node tells its task and hooks,
and never configure a chainsync. The task and hooks get no other
CHAINSYNC_ variable: the node's settings stay its own.
With --chain, --name defaults to this machine's host name (a Kubernetes
StatefulSet pod's name-0, name-1, ...).
`

// hostName returns this machine's name as it appears in the chain: the
// full host name, or else its first label (a pod whose host name is
// web-1.web.ns.svc in a chain that says web-1).
func hostName(ms []member, hostname func() (string, error)) (string, error) {
	h, err := hostname()
	if err != nil || h == "" {
		return "", fmt.Errorf("--chain needs --name, this node's name in the chain (the host name is unknown: %v)", err)
	}
	short, _, _ := strings.Cut(h, ".")
	for _, cand := range []string{h, short} {
		for _, m := range ms {
			if m.Name == cand {
				return cand, nil
			}
		}
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	return "", fmt.Errorf("--chain needs --name: this machine's host name %q is not a name in --chain (names: %s); give --name",
		h, strings.Join(names, ", "))
}

// osHostname is os.Hostname, a variable for tests.
var osHostname = os.Hostname
