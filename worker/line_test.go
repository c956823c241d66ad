package worker

import (
	"encoding/json"
	"testing"
)

// TestParseRun: the reader of the usual request takes exactly the lines
// that json.Unmarshal reads as that request, with the same id and round,
// and leaves every other line to it. docs/WORKERS.md, "The protocol".
func TestParseRun(t *testing.T) {
	for _, tc := range []struct {
		line  string
		id    uint64
		round string
		ok    bool
	}{
		{`{"id":7,"op":"run","round":"batch-0007"}`, 7, "batch-0007", true},
		{`{"id":1,"op":"run","round":""}`, 1, "", true},
		{`{"id":0,"op":"run","round":"<&> x"}`, 0, "<&> x", true},
		{`{"id":18446744073709551615,"op":"run","round":"r"}`, 1<<64 - 1, "r", true},
		{`{"id":18446744073709551616,"op":"run","round":"r"}`, 0, "", false}, // overflows
		{`{"id":07,"op":"run","round":"r"}`, 0, "", false},                   // not JSON
		{`{"id":,"op":"run","round":"r"}`, 0, "", false},
		{`{"id":7,"op":"run","round":"a\"b"}`, 0, "", false}, // escapes: json.Unmarshal's
		{`{"id":7,"op":"run","round":"a"b"}`, 0, "", false},
		{`{"id":7,"op":"run","round":"a\u0041"}`, 0, "", false},
		{`{"id":7,"op":"run","round":"é"}`, 0, "", false},
		{"{\"id\":7,\"op\":\"run\",\"round\":\"a\tb\"}", 0, "", false},
		{`{"id":7,"op":"cancel"}`, 0, "", false},
		{`{"id":7,"op":"run","round":"r","x":1}`, 0, "", false},
		{`{"id":7,"op":"run","round":"r"`, 0, "", false},
		{`{"id":7,"op":"run","round":"}`, 0, "", false},
		{`{"id":7,"op":"run","round":"r"}}`, 0, "", false},
		{`{"id": 7, "op": "run", "round": "r"}`, 0, "", false},
	} {
		id, round, ok := parseRun([]byte(tc.line))
		if id != tc.id || round != tc.round || ok != tc.ok {
			t.Errorf("parseRun(%s) = %d, %q, %v; want %d, %q, %v", tc.line, id, round, ok, tc.id, tc.round, tc.ok)
		}
		if ok {
			var m message
			if err := json.Unmarshal([]byte(tc.line), &m); err != nil || m.ID == nil || *m.ID != id || m.Op != "run" || m.Round != round {
				t.Errorf("parseRun took %s, which json.Unmarshal reads otherwise (%v)", tc.line, err)
			}
		}
	}
}
