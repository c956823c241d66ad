package transport

import (
	"testing"
	"time"
)

// The backoff doubles from Min to Max, each delay jittered within [d/2, d].
func TestBackoffCappedWithJitter(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	for i, want := range []time.Duration{10, 20, 40, 80, 80, 80} {
		want *= time.Millisecond
		if d := b.Next(); d < want/2 || d > want {
			t.Errorf("attempt %d: %v, want within [%v, %v]", i+1, d, want/2, want)
		}
	}
	b.Reset()
	if d := b.Next(); d > 10*time.Millisecond {
		t.Errorf("after Reset: %v", d)
	}
}
