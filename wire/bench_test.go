package wire_test

import (
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// BenchmarkCodec measures encoding and decoding one message. Every case
// should report 0 allocs/op: decoding a named round allocates only the
// first time the Reader sees that round id.
func BenchmarkCodec(b *testing.B) {
	for _, bc := range []struct {
		name string
		m    protocol.Message
	}{
		{"unnamed", protocol.Message{Cmd: protocol.Ready}},
		{"named", protocol.Message{Cmd: protocol.Complete, Round: "0f8c3c1e-6a2b-4bb5-9d1c-2f4f0a3d9e77"}},
	} {
		b.Run("Encode/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 256)
			for b.Loop() {
				buf = wire.Append(buf[:0], bc.m, false)
			}
			b.SetBytes(int64(len(buf)))
		})
		b.Run("Decode/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			lr := loopOf(bc.m)
			r := wire.NewReader(lr)
			b.SetBytes(int64(len(lr.data)))
			for b.Loop() {
				if m, err := r.ReadMessage(); err != nil || m.Cmd != bc.m.Cmd {
					b.Fatal(m, err)
				}
			}
		})
	}
	b.Run("Parse/unnamed", func(b *testing.B) {
		b.ReportAllocs()
		line := []byte("COMPLETE:\r")
		for b.Loop() {
			if _, err := wire.Parse(line); err != nil {
				b.Fatal(err)
			}
		}
	})
}
