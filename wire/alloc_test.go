package wire_test

import (
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// loopReader serves the same bytes forever, without allocating.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

func loopOf(msgs ...protocol.Message) *loopReader {
	var b []byte
	for _, m := range msgs {
		b = wire.Append(b, m, false)
	}
	return &loopReader{data: b}
}

// Steady-state decoding and encoding allocate nothing: a named round is
// interned by the Reader the first time it is seen (wire/doc.go).
func TestZeroAlloc(t *testing.T) {
	named := protocol.Message{Cmd: protocol.Complete, Round: "0f8c3c1e-6a2b-4bb5-9d1c-2f4f0a3d9e77"}
	r := wire.NewReader(loopOf(named, protocol.Message{Cmd: protocol.Ready}))
	var bad protocol.Message
	if n := testing.AllocsPerRun(1000, func() {
		if m, err := r.ReadMessage(); err != nil || m != named && m.Round != "" {
			bad = m
		}
	}); n != 0 {
		t.Errorf("ReadMessage: %v allocations per message, want 0", n)
	}
	if bad != (protocol.Message{}) {
		t.Errorf("read %+v", bad)
	}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(1000, func() { buf = wire.Append(buf[:0], named, false) }); n != 0 {
		t.Errorf("Append: %v allocations, want 0", n)
	}
	line := []byte("START:\r")
	if n := testing.AllocsPerRun(1000, func() { wire.Parse(line) }); n != 0 {
		t.Errorf("Parse of the unnamed round: %v allocations, want 0", n)
	}
}
