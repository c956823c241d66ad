package cli

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func runFlagSet(o *runOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.flags(fs)
	return fs
}

// Every run flag has a variable, CHAINSYNC_<FLAG>, and none of them is a
// variable a node sets for its task or hook (docs/DESIGN.md, "Configuration
// from the environment"). A flag added later whose name would clash fails
// here until it gets an entry in envRenames.
func TestEnvNames(t *testing.T) {
	fs := runFlagSet(&runOpts{})
	seen := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		v := envName(f.Name)
		switch {
		case v == "":
			t.Errorf("--%s has no environment variable", f.Name)
		case taskVars[v]:
			t.Errorf("--%s maps to %s, a task variable", f.Name, v)
		case !strings.HasPrefix(v, envPrefix):
			t.Errorf("--%s maps to %s", f.Name, v)
		case seen[v] != "":
			t.Errorf("--%s and --%s both map to %s", f.Name, seen[v], v)
		}
		seen[v] = f.Name
	})
	for flagName, want := range map[string]string{
		"chain": "CHAINSYNC_CHAIN", "tls-cert": "CHAINSYNC_TLS_CERT", "phase-timeout": "CHAINSYNC_PHASE_TIMEOUT",
		"unnamed-round-colon": "CHAINSYNC_UNNAMED_ROUND_COLON", "round": "CHAINSYNC_ROUND_ID",
	} {
		if got := envName(flagName); got != want {
			t.Errorf("envName(%q) = %q, want %q", flagName, got, want)
		}
	}
}

// A flag on the command line wins over the environment; the variables a
// node sets for its task never configure a chainsync (CHAINSYNC_ROUND is
// not --round).
func TestApplyEnvPrecedence(t *testing.T) {
	env := map[string]string{
		"CHAINSYNC_NAME":          "from-env",
		"CHAINSYNC_CHAIN":         "A=h:1,B=h:2",
		"CHAINSYNC_PHASE_TIMEOUT": "5m",
		"CHAINSYNC_QUIET":         "true",
		"CHAINSYNC_ROUND":         "task-round", // what a parent node told its task
		"CHAINSYNC_NODE":          "X",
		"CHAINSYNC_NEXT":          "", // empty: ignored
		"CHAINSYNC_TYPO":          "1",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var o runOpts
	fs := runFlagSet(&o)
	if err := fs.Parse([]string{"--name", "B", "--", "true"}); err != nil {
		t.Fatal(err)
	}
	applied, err := applyEnv(fs, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if o.name != "B" || o.chain != "A=h:1,B=h:2" || o.phaseTimeout != 5*time.Minute || !o.quiet || o.round != "" || o.next != "" {
		t.Errorf("got name %q chain %q phase %v quiet %v round %q next %q", o.name, o.chain, o.phaseTimeout, o.quiet, o.round, o.next)
	}
	var got []string
	for _, s := range applied {
		got = append(got, s.Var)
	}
	if strings.Join(got, " ") != "CHAINSYNC_CHAIN CHAINSYNC_PHASE_TIMEOUT CHAINSYNC_QUIET" {
		t.Errorf("applied %v", got)
	}
	if fs.Arg(0) != "true" {
		t.Errorf("task args changed: %v", fs.Args())
	}
	environ := []string{"CHAINSYNC_TYPO=1", "CHAINSYNC_ROUND=r", "CHAINSYNC_CHAIN=x", "PATH=/bin"}
	if u := unknownEnv(fs, environ); len(u) != 1 || u[0] != "CHAINSYNC_TYPO" {
		t.Errorf("unknownEnv = %v, want [CHAINSYNC_TYPO]", u)
	}

	// The round is set through CHAINSYNC_ROUND_ID.
	var o2 runOpts
	fs2 := runFlagSet(&o2)
	_ = fs2.Parse(nil)
	if _, err := applyEnv(fs2, func(k string) (string, bool) { return map[string]string{"CHAINSYNC_ROUND_ID": "r7"}[k], true }); err != nil || o2.round != "r7" {
		t.Errorf("CHAINSYNC_ROUND_ID: round %q err %v", o2.round, err)
	}
}

// A value the flag refuses is a usage error naming the variable.
func TestApplyEnvBadValue(t *testing.T) {
	for k, v := range map[string]string{"CHAINSYNC_PHASE_TIMEOUT": "soon", "CHAINSYNC_QUIET": "maybe", "CHAINSYNC_ROUNDS": "two"} {
		var o runOpts
		fs := runFlagSet(&o)
		_ = fs.Parse(nil)
		_, err := applyEnv(fs, func(name string) (string, bool) {
			if name == k {
				return v, true
			}
			return "", false
		})
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: err %v, want a usage error naming the variable", k, v, err)
		}
	}
}

// With --chain, --name defaults to the host name, or its first label.
func TestNameFromHostName(t *testing.T) {
	ms, _ := parseChain("web-0=a:1,web-1=b:1,web-2=c:1")
	for host, want := range map[string]string{"web-1": "web-1", "web-2.web.default.svc.cluster.local": "web-2"} {
		got, err := hostName(ms, func() (string, error) { return host, nil })
		if err != nil || got != want {
			t.Errorf("host %q: %q, %v; want %q", host, got, err, want)
		}
	}
	_, err := hostName(ms, func() (string, error) { return "laptop", nil })
	if err == nil || !strings.Contains(err.Error(), `"laptop"`) || !strings.Contains(err.Error(), "give --name") {
		t.Errorf("host not in chain: %v", err)
	}

	defer func(f func() (string, error)) { osHostname = f }(osHostname)
	osHostname = func() (string, error) { return "web-2", nil }
	o := runOpts{chain: "web-0=a:1,web-1=b:1,web-2=c:1", readyInterval: 1, parallel: 1, maxPending: 1, pendingTimeout: 1}
	cfg, _, err := o.config([]string{"true"})
	if err != nil || o.name != "web-2" || cfg.Name != "web-2" || cfg.Prev != "b:1" || cfg.Next != "" {
		t.Errorf("config from host name: name %q cfg %+v err %v", o.name, cfg, err)
	}
}

// --log-level picks the level; --quiet raises it to at least warn.
func TestLogLevel(t *testing.T) {
	for _, tc := range []struct {
		s     string
		quiet bool
		want  slog.Level
	}{
		{"debug", false, slog.LevelDebug}, {"info", false, slog.LevelInfo}, {"WARN", false, slog.LevelWarn},
		{"error", false, slog.LevelError}, {"info", true, slog.LevelWarn}, {"error", true, slog.LevelError},
	} {
		if got, err := parseLevel(tc.s, tc.quiet); err != nil || got != tc.want {
			t.Errorf("parseLevel(%q, %v) = %v, %v; want %v", tc.s, tc.quiet, got, err, tc.want)
		}
	}
	if _, err := parseLevel("loud", false); err == nil || !strings.Contains(err.Error(), "debug, info, warn or error") {
		t.Errorf("bad level: %v", err)
	}
	var b strings.Builder
	o := runOpts{logFormat: "text", logLevel: "warn", name: "B"}
	log, err := o.logger(&b)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown")
	if got := b.String(); strings.Contains(got, "hidden") || !strings.Contains(got, "WARN  shown") {
		t.Errorf("--log-level warn wrote %q", got)
	}
}

// An error about a flag set from the environment says which variable set
// it; a flag with a longer name that starts the same does not count.
func TestEnvSources(t *testing.T) {
	from := []envSetting{{"round", "CHAINSYNC_ROUND_ID"}, {"listen", "CHAINSYNC_LISTEN"}}
	for msg, want := range map[string]string{
		`--round "bad id!": use 1-128 of ...`: " (--round came from CHAINSYNC_ROUND_ID)",
		"use --round or --rounds, not both":   " (--round came from CHAINSYNC_ROUND_ID)",
		"--rounds -1: use 1..100000":          "",
		"--listen needs --prev":               " (--listen came from CHAINSYNC_LISTEN)",
		"no task":                             "",
	} {
		if got := envSources(errors.New(msg), from); got != want {
			t.Errorf("%q: %q, want %q", msg, got, want)
		}
	}
}
