package protocol_test

import (
	"errors"
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
)

// docs/DESIGN.md, "Extension lines": a node's own notice goes to both
// neighbours; a neighbour's is passed on away from where it came, once,
// and never answered.
func TestNoticeForwardedOnce(t *testing.T) {
	n := protocol.Notice{HasRound: true, Round: "r1", Kind: "peer-silent", Origin: "C", Blamed: "B"}
	msg := protocol.Message{Cmd: protocol.FaultNotice, Note: &n}
	m := protocol.New(protocol.Config{Role: protocol.Middle, Extensions: true})
	acts, err := m.Step(protocol.Recv(protocol.Pred, msg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 2 || acts[0].Kind != protocol.ActSend || acts[0].To != protocol.Succ || *acts[0].Msg.Note != n ||
		acts[1].Kind != protocol.ActNotice || acts[1].To != protocol.Pred {
		t.Fatalf("first notice: %+v", acts)
	}
	// The same notice again, from either side: nothing (passed on once).
	for _, side := range []protocol.Side{protocol.Pred, protocol.Succ} {
		if acts, err := m.Step(protocol.Recv(side, msg), nil); err != nil || len(acts) != 0 {
			t.Fatalf("repeat from %v: %+v, %v", side, acts, err)
		}
	}
	// A notice changes no round.
	if m.Active() != 0 {
		t.Fatalf("a notice opened a round")
	}
	// From the successor, a new notice goes to the predecessor.
	n2 := n
	n2.Kind = "task-failed"
	acts, _ = m.Step(protocol.Recv(protocol.Succ, protocol.Message{Cmd: protocol.FaultNotice, Note: &n2}), nil)
	if len(acts) != 2 || acts[0].To != protocol.Pred {
		t.Fatalf("from the successor: %+v", acts)
	}
	// At the Tail a notice from the predecessor goes nowhere, but is reported.
	tail := protocol.New(protocol.Config{Role: protocol.Tail, Extensions: true})
	acts, _ = tail.Step(protocol.Recv(protocol.Pred, msg), nil)
	if len(acts) != 1 || acts[0].Kind != protocol.ActNotice {
		t.Fatalf("tail: %+v", acts)
	}
}

// docs/DESIGN.md, "Extension lines": this node's own report goes to both
// neighbours, and is not passed on again when a neighbour echoes it.
func TestReportToBothNeighbours(t *testing.T) {
	n := protocol.Notice{Kind: "config-mismatch", Origin: "B", Blamed: "A"}
	m := protocol.New(protocol.Config{Role: protocol.Middle, Extensions: true})
	acts, err := m.Step(protocol.Report(n), nil)
	if err != nil || len(acts) != 2 || acts[0].To != protocol.Pred || acts[1].To != protocol.Succ {
		t.Fatalf("report: %+v, %v", acts, err)
	}
	if acts, _ := m.Step(protocol.Recv(protocol.Succ, protocol.Message{Cmd: protocol.FaultNotice, Note: &n}), nil); len(acts) != 0 {
		t.Fatalf("echo of its own notice: %+v", acts)
	}
	head := protocol.New(protocol.Config{Role: protocol.Head, Extensions: true})
	if acts, _ := head.Step(protocol.Report(n), nil); len(acts) != 1 || acts[0].To != protocol.Succ {
		t.Fatalf("head report: %+v", acts)
	}
	if _, err := m.Step(protocol.Report(protocol.Notice{Kind: "Bad Kind", Origin: "B"}), nil); !errors.Is(err, protocol.ErrBadNotice) {
		t.Fatalf("bad notice: %v", err)
	}
	plain := protocol.New(protocol.Config{Role: protocol.Middle})
	if _, err := plain.Step(protocol.Report(n), nil); !errors.Is(err, protocol.ErrNoExtensions) {
		t.Fatalf("report without extensions: %v", err)
	}
}

// docs/DESIGN.md, "Extension lines" and "Long-lived chains": a notice at a
// node without extensions, and a READY for a round the node does not run,
// are configuration mismatches, not garbage.
func TestMismatchViolations(t *testing.T) {
	n := protocol.Notice{Kind: "peer-silent", Origin: "C", Blamed: "B"}
	plain := protocol.New(protocol.Config{Role: protocol.Middle})
	_, err := plain.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.FaultNotice, Note: &n}), nil)
	var v *protocol.Violation
	if !errors.As(err, &v) || !v.Mismatch {
		t.Fatalf("notice without extensions: %v", err)
	}
	only := protocol.New(protocol.Config{Role: protocol.Middle, AcceptRound: func(r string) bool { return r == "y" }})
	_, err = only.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Ready, Round: "x"}), nil)
	if !errors.As(err, &v) || !v.Mismatch || only.Active() != 0 {
		t.Fatalf("READY x at a node running y: %v", err)
	}
	// A round this node runs is no mismatch.
	if _, err := only.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Ready, Round: "y"}), nil); err != nil {
		t.Fatal(err)
	}
}

// NoticeName keeps a notice within the wire's bounds whatever a node is
// called.
func TestNoticeName(t *testing.T) {
	for in, want := range map[string]string{"B": "B", "10.0.0.1:7000": "10.0.0.1:7000", "switch 2": "switch_2",
		"é": "__", "": ""} {
		if got := protocol.NoticeName(in); got != want {
			t.Errorf("NoticeName(%q) = %q, want %q", in, got, want)
		}
	}
	long := protocol.NoticeName(string(make([]byte, 100)))
	if len(long) != protocol.MaxNoticeName {
		t.Errorf("long name: %d bytes", len(long))
	}
}

// docs/PROTOCOL.md, "Fault notices": the origin's words (Why) are part of
// the notice: a node passes them on unchanged, and a link that comes
// back carries them again with the notice it missed.
func TestNoticeWhyPassedOnAndResent(t *testing.T) {
	n := protocol.Notice{HasRound: true, Round: "r3", Kind: "task-failed", Origin: "C", Blamed: "C", Why: "disk full at C"}
	m := protocol.New(protocol.Config{Role: protocol.Middle, Extensions: true})
	acts, err := m.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.FaultNotice, Note: &n}), nil)
	if err != nil || len(acts) == 0 || acts[0].Kind != protocol.ActSend || acts[0].To != protocol.Succ || *acts[0].Msg.Note != n {
		t.Fatalf("passed on: %+v, %v; want %+v to the successor", acts, err, n)
	}
	acts, err = m.Step(protocol.LinkUp(protocol.Succ), nil)
	if err != nil {
		t.Fatal(err)
	}
	resent := false
	for _, a := range acts {
		if a.Kind == protocol.ActSend && a.Resend && a.Msg.Note != nil {
			resent = true
			if *a.Msg.Note != n {
				t.Errorf("re-sent %+v, want %+v", *a.Msg.Note, n)
			}
		}
	}
	if !resent {
		t.Fatalf("the link that came up carried no notice: %+v", acts)
	}
	// Words that could not travel make the notice invalid: a violation.
	bad := n
	bad.Why = "disk\tfull"
	if _, err := m.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.FaultNotice, Note: &bad}), nil); err == nil {
		t.Errorf("a notice with a tab in its words was taken")
	}
}
