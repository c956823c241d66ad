package status

import "testing"

// Escape: what a node sends reaches a terminal with no control character,
// bidi override or invalid byte left (issue: chainsync status printed a
// node's text raw).
func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"B":                 "B",
		"caf\u00e9 \\x1b":   "caf\u00e9 \\x1b",
		"\x1b[2J\a":         `\x1b[2J\x07`,
		"a\r\nb\tc\x7f":     `a\r\nb\tc\x7f`,
		"\u009b31m\u202ex":  `\u009b31m\u202ex`,
		"\xff\xfe ok":       `\xff\xfe ok`,
		"line\u2028sep\x00": `line\u2028sep\x00`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
	d := &Doc{Name: "\x1b]0;t\a", Rounds: []Round{{Round: "r\n"}}, Faults: []Fault{{Error: "e\r"}}}
	EscapeAll(&d)
	if d.Name != `\x1b]0;t\x07` || d.Rounds[0].Round != `r\n` || d.Faults[0].Error != `e\r` {
		t.Errorf("EscapeAll left %+v", d)
	}
}
