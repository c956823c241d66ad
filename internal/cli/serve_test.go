package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
)

// Generated round ids are unique, sort by the time they were made, and are
// valid round ids (docs/SERVE.md, "Round ids"; draft, Message Types:
// ROUND-ID).
func TestGeneratedIDs(t *testing.T) {
	op := &opener{open: map[string][]chan outcome{}}
	shape := regexp.MustCompile(`^\d{8}T\d{6}Z-[0-9a-f]{4}$`)
	seen := map[string]bool{}
	prev := ""
	for range 5000 {
		id := op.newID()
		if !shape.MatchString(id) || !protocol.ValidRound(id) {
			t.Fatalf("generated id %q is not like 20261201T064500Z-3f9a", id)
		}
		if seen[id] || id <= prev {
			t.Fatalf("generated id %q after %q: not unique and increasing", id, prev)
		}
		seen[id] = true
		prev = id
	}
}

// The flags that open rounds belong to the Head; bad values are usage
// errors that name the flag.
func TestServeFlags(t *testing.T) {
	for _, tc := range []struct {
		o       runOpts
		hasPred bool
		want    string
	}{
		{runOpts{roundsFrom: "-", maxOpen: 64}, true, "--rounds-from"},
		{runOpts{control: "127.0.0.1:1", maxOpen: 64}, true, "only the Head"},
		{runOpts{every: -1, maxOpen: 64}, false, "--every"},
		{runOpts{serve: true, every: 1e9, maxOpen: 0}, false, "--max-open"},
		{runOpts{control: "unix:", maxOpen: 64}, false, "--control"},
		{runOpts{control: "nowhere", maxOpen: 64}, false, "--control"},
		{runOpts{roundsFrom: "/nonexistent/ids", maxOpen: 64}, false, "--rounds-from"},
		{runOpts{serve: true, maxOpen: 64}, false, "--every D or --control"},
	} {
		err := tc.o.checkServe(tc.hasPred)
		if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a usage error naming %s", tc.o, err, tc.want)
		}
	}
	if err := (&runOpts{control: "unix:/tmp/x.sock", every: 1e9, roundsFrom: "-", maxOpen: 2}).checkServe(false); err != nil {
		t.Errorf("a good Head: %v", err)
	}
	if got := readyPath("/data/{round}.ready", "batch-7"); got != "/data/batch-7.ready" {
		t.Errorf("readyPath = %q", got)
	}
}
