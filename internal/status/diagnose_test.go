package status_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/status"
)

// chainDocs builds status documents for a chain from a compact spec: per
// node "STATE" (with a ready flag "!" for not locally ready), "-" for a
// node whose round is over, "x" for a node that does not answer.
func chainDocs(spec []string, faults map[int]status.Fault, linkDown map[int]string) []status.Node {
	n := len(spec)
	now := time.Date(2026, 11, 30, 12, 0, 10, 0, time.UTC)
	names := []string{"A", "B", "C", "D", "E", "F"}[:n]
	var out []status.Node
	for i, s := range spec {
		node := status.Node{Addr: "10.0.0." + string(rune('1'+i)) + ":9000"}
		if s == "x" {
			node.Err = errors.New("connection refused")
			out = append(out, node)
			continue
		}
		role := map[bool]map[bool]string{true: {true: "middle", false: "tail"}, false: {true: "head", false: "single"}}[i > 0][i < n-1]
		d := &status.Doc{Name: names[i], Role: role, Time: now}
		if i > 0 {
			d.Links.Pred = status.Link{Exists: true, Up: linkDown[i] != "pred", Peer: names[i-1]}
		}
		if i < n-1 {
			d.Links.Succ = status.Link{Exists: true, Up: linkDown[i] != "succ", Peer: names[i+1]}
		}
		if s != "-" {
			r := status.Round{State: strings.TrimSuffix(s, "!"), Ready: !strings.HasSuffix(s, "!"), Since: now.Add(-3 * time.Second)}
			switch {
			case !r.Ready:
				r.WaitingFor, r.From = status.WaitLocalReadiness, status.FromSelf
			case r.State == "START":
				r.WaitingFor, r.From = status.WaitTask, status.FromSelf
			case r.State == "SYNC" && i > 0:
				r.WaitingFor, r.From = "READY", "pred"
			case r.State == "READY" && i < n-1:
				r.WaitingFor, r.From = "START", "succ"
			case r.State == "WATCH":
				r.WaitingFor, r.From = "COMPLETE", "pred"
			case r.State == "COMPLETE" && i < n-1:
				r.WaitingFor, r.From = "COMPLETE", "succ"
			}
			d.Rounds = []status.Round{r}
		}
		if f, ok := faults[i]; ok {
			d.Faults = []status.Fault{f}
		}
		node.Doc = d
		out = append(out, node)
	}
	return out
}

// The rule chainsync status documents, phase by phase of the draft's
// "Protocol Flow".
func TestDiagnose(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spec     []string
		faults   map[int]status.Fault
		linkDown map[int]string
		at       string
		waiting  string
		why      string
	}{
		{"READY wave held by a node not ready", []string{"READY", "READY", "SYNC!", "SYNC!"}, nil, nil, "C", status.WaitLocalReadiness, "not locally ready"},
		{"Head not ready", []string{"SYNC!", "SYNC", "SYNC", "SYNC!"}, nil, nil, "A", status.WaitLocalReadiness, "not locally ready"},
		{"READY lost on a down link", []string{"READY", "READY", "SYNC", "SYNC"}, nil, map[int]string{2: "pred"}, "C", "READY", "link between them is down"},
		{"Head's task", []string{"START", "WATCH", "WATCH", "WATCH"}, nil, nil, "A", status.WaitTask, "running its task"},
		{"Tail's task", []string{"COMPLETE", "COMPLETE", "COMPLETE", "START"}, nil, nil, "D", status.WaitTask, "running its task"},
		{"a middle node crashed during its task", []string{"COMPLETE", "x", "WATCH", "WATCH"}, nil, nil, "B", "COMPLETE", "does not answer"},
		{"exit wave: the Tail is gone after finishing", []string{"COMPLETE", "COMPLETE", "COMPLETE", "x"}, nil, nil, "D", "COMPLETE", "does not answer"},
		{"exit wave in flight", []string{"COMPLETE", "COMPLETE", "-", "-"}, nil, nil, "B", "COMPLETE", "has finished its part"},
		{"a node faulted and waits (wait policy)", []string{"COMPLETE", "COMPLETE", "COMPLETE", "WATCH"},
			map[int]status.Fault{2: {Kind: "peer-silent", Peer: "D", Side: "succ", Error: "no word from D for 1.5s"}}, nil, "C", "COMPLETE", "peer-silent"},
		{"a node waits for a neighbour it reported silent, which does not answer (hung)", []string{"COMPLETE", "COMPLETE", "x", "WATCH"},
			map[int]status.Fault{1: {Kind: "peer-silent", Peer: "C", Side: "succ", Error: "no word from C for 1.5s"}}, nil, "C", "COMPLETE", "B reported it peer-silent"},
		{"a node halted with a failed task", []string{"COMPLETE", "COMPLETE", "-", "WATCH"},
			map[int]status.Fault{2: {Kind: "task-failed", Error: "exit 1"}}, nil, "C", "", "task-failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := status.Diagnose(chainDocs(tc.spec, tc.faults, tc.linkDown))
			if len(v) != 1 {
				t.Fatalf("%d verdicts, want 1: %+v", len(v), v)
			}
			if v[0].Done || v[0].Node != tc.at || v[0].WaitingFor != tc.waiting || !strings.Contains(v[0].Why, tc.why) {
				t.Errorf("verdict %+v, want held at %s waiting for %q, why containing %q", v[0], tc.at, tc.waiting, tc.why)
			}
		})
	}
	if v := status.Diagnose(chainDocs([]string{"-", "-", "-"}, nil, nil)); len(v) != 0 {
		t.Errorf("finished chain: %+v, want no rounds", v)
	}
}

// The strict parser used by the metrics tests rejects what it must.
func TestStrictParserRejects(t *testing.T) {
	head := "# HELP x_total X.\n# TYPE x_total counter\n"
	for _, bad := range []string{
		"",
		head + "x_total 1",              // no final newline
		head + "x_total 1\n\n",          // blank line
		head + "x_total 1 1700000000\n", // timestamp
		head + "x_total{a=\"1\"} 1\nx_total{a=\"1\"} 2\n",                // duplicate series
		head + "x_total{a=\"\\q\"} 1\n",                                  // bad escape
		head + "x_total{a=\"1\",a=\"2\"} 1\n",                            // repeated label
		head + "x_total -1\n",                                            // negative counter
		"x_total 1\n",                                                    // no TYPE
		"# HELP y Y.\n# TYPE y gauge\ny 1\n" + head + "x_total 1\ny 2\n", // family split
		"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", // not cumulative
		"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",                          // no +Inf
	} {
		if _, err := parseExposition(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	good := head + "x_total{a=\"q\\\"\\n\\\\\"} 1\n# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3.5\nh_count 2\n"
	e, err := parseExposition(good)
	if err != nil {
		t.Fatal(err)
	}
	if e.get("x_total", "a", "q\"\n\\") != 1 || e.get("h_count") != 2 {
		t.Errorf("parsed %v", e.values)
	}
}
