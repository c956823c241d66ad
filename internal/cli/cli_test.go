package cli

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --chain derives each node's place (docs/DESIGN.md "Roles and connections":
// the Head only dials, the Tail only listens).
func TestPlaceFromChain(t *testing.T) {
	ms, err := parseChain("A=10.0.0.1:7000, B=10.0.0.2:7000,C=[::1]:7002")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, listen, prev, next string }{
		{"A", "", "", "10.0.0.2:7000"},
		{"B", "10.0.0.2:7000", "10.0.0.1:7000", "[::1]:7002"},
		{"C", "[::1]:7002", "10.0.0.2:7000", ""},
	} {
		l, p, n, err := place(ms, tc.name)
		if err != nil || l != tc.listen || p != tc.prev || n != tc.next {
			t.Errorf("%s: listen %q prev %q next %q err %v", tc.name, l, p, n, err)
		}
	}
	if _, _, _, err := place(ms, "D"); err == nil || !strings.Contains(err.Error(), "A, B, C") {
		t.Errorf("unknown name: %v", err)
	}
}

func TestParseChainErrors(t *testing.T) {
	for in, want := range map[string]string{
		"A=h:1,A=h:2":  "appears twice",
		"A=h:1,B=h:1":  "same address",
		"A=h:1,B":      "want NAME=HOST:PORT",
		"A=nohostport": "not HOST:PORT",
		"=h:1":         "want NAME=HOST:PORT",
	} {
		if _, err := parseChain(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want it to say %q", in, err, want)
		}
	}
}

// Bad command lines are usage errors with a message saying what to do.
func TestConfigUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		o    runOpts
		cmd  []string
		want string
	}{
		{runOpts{}, nil, "no task"},
		{runOpts{prev: "h:1"}, []string{"true"}, "--prev needs --listen"},
		{runOpts{listen: "h:1"}, []string{"true"}, "--listen needs --prev"},
		{runOpts{chain: "A=h:1"}, []string{"true"}, "is not a name in --chain"},
		{runOpts{round: "a b"}, []string{"true"}, "--round"},
		{runOpts{round: "x", rounds: 2}, []string{"true"}, "not both"},
		{runOpts{}, []string{"/no/such/task"}, "cannot be run"},
		// Decided by chainsync.Config.Validate, said in terms of the flags.
		{runOpts{next: "nohostport"}, []string{"true"}, `--next "nohostport": want HOST:PORT`},
		{runOpts{prev: "h:1", listen: "nohostport"}, []string{"true"}, `--listen "nohostport": want HOST:PORT`},
		{runOpts{heartbeat: -1}, []string{"true"}, "--heartbeat and --task-timeout must not be negative"},
		{runOpts{taskTimeout: -1}, []string{"true"}, "--heartbeat and --task-timeout must not be negative"},
		{runOpts{phaseTimeout: -1}, []string{"true"}, "timeouts must not be negative"},
		{runOpts{connectTimeout: -1}, []string{"true"}, "timeouts must not be negative"},
		{runOpts{linger: -1}, []string{"true"}, "timeouts must not be negative"},
	} {
		o := tc.o
		if o.readyInterval == 0 {
			o.readyInterval = 1
		}
		o.parallel, o.maxPending, o.pendingTimeout = 1, 1, 1
		_, _, err := o.config(tc.cmd)
		if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v %v: err %v, want a usage error saying %q", tc.o, tc.cmd, err, tc.want)
		}
	}
}

// The text log is one short line per record with the round always named.
func TestHumanLogLine(t *testing.T) {
	var b bytes.Buffer
	log, err := newLogger(&b, "text", slog.LevelInfo, "B")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("sent", "round", "", "msg", "READY", "to", "succ", "resend", false)
	log.Info("state", "round", "r1", "from", "SYNC", "to", "READY")
	got := b.String()
	for _, want := range []string{" B  sent READY to succ round=(unnamed)\n", " B  state SYNC -> READY round=r1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "resend") {
		t.Errorf("resend=false should be left out: %q", got)
	}
	if _, err := newLogger(&b, "xml", slog.LevelInfo, ""); err == nil {
		t.Error("--log-format xml accepted")
	}
}

// chainsync bench --state-dir measures durable rounds: every node keeps a
// journal, the table adds fsyncs per round; a file given as the directory
// is a usage error that names the flag.
func TestBenchStateDir(t *testing.T) {
	var out, errb bytes.Buffer
	dir := t.TempDir()
	if code := benchMain([]string{"--n", "2", "--rounds", "10", "--warmup", "1", "--state-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "fsyncs/round") || !strings.Contains(out.String(), "durable") {
		t.Fatalf("no durable columns in:\n%s", out.String())
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := benchMain([]string{"--n", "2", "--state-dir", file}, &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), "--state-dir") {
		t.Fatalf("exit %d, stderr %q: want a usage error naming --state-dir", code, errb.String())
	}
}
