package worker

import (
	"encoding/json"
	"testing"
)

// TestAppendRun: the request line written without reflection is the one
// json.Marshal would write, for plain round ids and for those that need
// escapes. docs/WORKERS.md, "The protocol".
func TestAppendRun(t *testing.T) {
	for _, round := range []string{"", "batch-0007", "a b", `q"uote`, `back\slash`, "tab\t", "<&>", "é", "\xff", "\u2028", "x\x7f"} {
		got := string(appendRun(nil, 42, round))
		q, _ := json.Marshal(round)
		want := `{"id":42,"op":"run","round":` + string(q) + "}\n"
		if got != want {
			t.Errorf("round %q: wrote %q, want %q", round, got, want)
		}
	}
}

// TestParseOK: the reader of the usual answer takes exactly the lines
// that json.Unmarshal reads as that answer, and leaves every other line
// to it. docs/WORKERS.md, "The protocol".
func TestParseOK(t *testing.T) {
	for _, tc := range []struct {
		line string
		id   uint64
		ok   bool
	}{
		{`{"id":0,"ok":true}`, 0, true},
		{`{"id":7,"ok":true}`, 7, true},
		{`{"id":18446744073709551615,"ok":true}`, 1<<64 - 1, true},
		{`{"id":18446744073709551616,"ok":true}`, 0, false}, // overflows
		{`{"id":07,"ok":true}`, 0, false},                   // not JSON
		{`{"id":-1,"ok":true}`, 0, false},
		{`{"id":,"ok":true}`, 0, false},
		{`{"id":1.5,"ok":true}`, 0, false},
		{`{"id":7,"ok":false}`, 0, false},
		{`{"id":7,"ok":true,"x":1}`, 0, false},
		{`{"id": 7, "ok": true}`, 0, false}, // json.Unmarshal's to read
		{`{"id":7,"ok":true}}`, 0, false},
		{`{"id":7"ok":true}`, 0, false},
	} {
		id, ok := parseOK([]byte(tc.line))
		if id != tc.id || ok != tc.ok {
			t.Errorf("parseOK(%s) = %d, %v; want %d, %v", tc.line, id, ok, tc.id, tc.ok)
		}
		if ok {
			var r reply
			if err := json.Unmarshal([]byte(tc.line), &r); err != nil || r.ID == nil || *r.ID != id || r.OK == nil || !*r.OK {
				t.Errorf("parseOK took %s, which json.Unmarshal reads otherwise (%v)", tc.line, err)
			}
		}
	}
}
