package protocol

import "testing"

// What a round waits for in each of the draft's states (section "States")
// at each role, and the status words for it, read back by ParseWait.
func TestWaitIn(t *testing.T) {
	for _, tc := range []struct {
		role  Role
		st    State
		ready bool
		want  Wait
	}{
		{Middle, StateSync, false, WaitLocal},
		{Head, StateSync, false, WaitLocal},
		{Middle, StateSync, true, WaitReady},
		{Tail, StateSync, true, WaitReady},
		{Head, StateSync, true, WaitNothing}, // passes through at once
		{Head, StateReady, true, WaitStart},
		{Middle, StateReady, true, WaitStart},
		{Tail, StateReady, true, WaitNothing}, // the Tail starts phase 2 itself
		{Middle, StateWatch, true, WaitComplete},
		{Tail, StateWatch, true, WaitComplete},
		{Head, StateStart, true, WaitTask},
		{Middle, StateComplete, true, WaitExit},
		{Tail, StateComplete, true, WaitNothing}, // the Tail starts the exit wave itself
		{Middle, StateDone, true, WaitHandOver},  // until EvDelivered
		{Head, StateDone, true, WaitNothing},
		{Middle, StateFailed, true, WaitNothing},
		{Middle, StateAborted, false, WaitNothing},
	} {
		if got := WaitIn(tc.role, tc.st, tc.ready); got != tc.want {
			t.Errorf("%s in %s (ready %v): %v, want %v", tc.role, tc.st, tc.ready, got, tc.want)
		}
	}
	for w, want := range map[Wait][3]string{
		WaitLocal: {"local-readiness", "self", ""}, WaitTask: {"task", "self", ""},
		WaitReady: {"READY", "pred", "READY"}, WaitStart: {"START", "succ", "START"},
		WaitComplete: {"COMPLETE", "pred", "COMPLETE"}, WaitExit: {"COMPLETE", "succ", "COMPLETE"},
		WaitHandOver: {"hand-over", "self", ""},
	} {
		cmd, side := w.Msg()
		from := "self"
		if side != 0 {
			from = side.String()
		}
		if w.String() != want[0] || from != want[1] || cmd != 0 && cmd.String() != want[2] || w.Self() != (side == 0 && w != WaitHandOver) {
			t.Errorf("%d: %q from %q (%v), want %q", w, w.String(), from, cmd, want)
		}
		if got := ParseWait(w.String(), from); got != w {
			t.Errorf("ParseWait(%q, %q) = %d, want %d", w.String(), from, got, w)
		}
	}
	if got := ParseWait("COMPLETE", "self"); got != WaitNothing {
		t.Errorf("COMPLETE from self: %d, want WaitNothing", got)
	}
	if WaitNothing.String() != "" || ParseWait("", "") != WaitNothing {
		t.Error("WaitNothing has words")
	}
}
