package status

import "testing"

// Names that could be misread in a sentence are quoted in the verdicts'
// words ("3 waits for COMPLETE from 4" reads as counts); others are not.
func TestQuoteName(t *testing.T) {
	for in, want := range map[string]string{
		"B": "B", "web-0": "web-0", "10.0.0.2:7000": "10.0.0.2:7000",
		"3": `"3"`, "1.5": `"1.5"`, "org C": `"org C"`, "a,b": `"a,b"`, "": "",
	} {
		if got := QuoteName(in); got != want {
			t.Errorf("QuoteName(%q) = %s, want %s", in, got, want)
		}
	}
}
