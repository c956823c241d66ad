package control

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestParseRequestStrict: a node takes only the requests this package
// documents (docs/STEERING.md, "The control socket"; what starts the
// Head's "Phase 1 -- Readiness Collection" is the implementation's): each
// line here is refused with an error saying what is wrong, and each
// request the commands send is taken as sent.
func TestParseRequestStrict(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`null`, "null"},
		{`{}`, "no op"},
		{`{"cmd":"hold"}`, `unknown field "cmd"`},
		{`{"op":"nosuch"}`, `unknown op "nosuch"`},
		{`{"op":"hold","extra":1}`, `unknown field "extra"`},
		{`{"op":"open"} {"op":"hold"}`, "more than one"},
		{`[]`, "bad request"},
		{`"open"`, "bad request"},
		{`{"op":"open"`, "bad request"},
		{``, "bad request"},
		{`{"op":1}`, "bad request"},
		{`{"OP":"hold"}`, `unknown field "OP"`},
		{`{"Op":"pause"}`, `unknown field "Op"`},
		{`{"op":"hold","Reason":"x"}`, `unknown field "Reason"`},
		{`[]`, "not a JSON object"},
	} {
		req, err := ParseRequest([]byte(tc.line))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRequest(%s) = %+v, %v; want an error containing %q", tc.line, req, err, tc.want)
		}
	}
	for _, op := range Ops {
		sent := Request{Op: op, ID: "r1", Wait: true, NoWait: true, Round: "r2", HasRound: true, Reason: "why", By: "ann"}
		line, err := json.Marshal(sent)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseRequest(append(line, '\n'))
		if err != nil || got != sent {
			t.Errorf("ParseRequest(%s) = %+v, %v; want %+v", line, got, err, sent)
		}
	}
}

// TestLocal: only a unix socket or a loopback TCP address counts as
// reachable from this machine alone (docs/STEERING.md, "The control
// socket"; the draft's "Security Considerations": an unauthenticated
// socket must not be reachable from the network by default).
func TestLocal(t *testing.T) {
	for addr, want := range map[string]bool{
		"unix:/run/chainsync/a.sock": true,
		"127.0.0.1:7300":             true,
		"127.1.2.3:7300":             true,
		"[::1]:7300":                 true,
		"localhost:7300":             true,
		"LocalHost:7300":             true,
		"[::ffff:127.0.0.1]:7300":    true,
		"0.0.0.0:7300":               false,
		":7300":                      false,
		"[::]:7300":                  false,
		"192.168.1.5:7300":           false,
		"head.example:7300":          false,
		"[fe80::1%lo]:7300":          false,
		"nonsense":                   false,
		"unix:":                      false,
	} {
		if got := Local(addr); got != want {
			t.Errorf("Local(%q) = %v, want %v", addr, got, want)
		}
	}
}

// A unix control socket's file appears only once it takes connections
// (it is bound beside its path and renamed into place), mode 0600, with
// nothing else left in its directory; a second Listen on a live socket
// is refused, and one on a stale socket replaces it.
func TestListenUnixInPlace(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("unix sockets: Linux and macOS")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "c.sock")
	ln, got, err := Listen("unix:" + path)
	if err != nil {
		t.Fatal(err)
	}
	if got != path {
		t.Fatalf("path %q, want %q", got, path)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial right after Listen: %v", err)
	}
	c.Close()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file: %v %v, want mode 0600", fi, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want the socket alone", len(entries))
	}
	if _, _, err := Listen("unix:" + path); err == nil || !strings.Contains(err.Error(), "another process serves") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
	ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the caller removes the socket file, not Close: %v", err)
	}
	ln2, _, err := Listen("unix:" + path)
	if err != nil {
		t.Fatalf("Listen on a stale socket: %v", err)
	}
	ln2.Close()
}
