package wire

import (
	"bytes"
	"slices"
	"strconv"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// parseGrace decodes a GRACE line (docs/PROTOCOL.md, "Restart graces"):
//
//	GRACE SP round SP node SP millis SP hops
//
// where round is "-" (no round) or ":" and a round id (":" alone is the
// unnamed round), millis the grace in milliseconds (0: the node is back;
// at most protocol.MaxGrace) and hops 1 on the line the node sends, one
// more at each node that passes it on (at most protocol.MaxGraceHops).
func parseGrace(line, raw []byte) (protocol.Message, error) {
	f := bytes.Split(line, []byte{' '})
	if len(f) != 5 || slices.ContainsFunc(f, func(b []byte) bool { return len(b) == 0 }) {
		return protocol.Message{}, badLine("malformed GRACE line (want GRACE ROUND NODE MILLIS HOPS)", raw)
	}
	g := protocol.GraceNote{Node: string(f[2])}
	switch r := f[1]; {
	case len(r) == 1 && r[0] == '-':
	case len(r) >= 1 && r[0] == ':':
		g.HasRound, g.Round = true, string(r[1:])
	default:
		return protocol.Message{}, badLine("malformed GRACE line: round must be - or :ID", raw)
	}
	ms, ok := digits(f[3], 10)
	hops, ok2 := digits(f[4], 5)
	if !ok || !ok2 {
		return protocol.Message{}, badLine("malformed GRACE line: MILLIS and HOPS are decimal numbers", raw)
	}
	g.For, g.Hops = time.Duration(ms)*time.Millisecond, int(hops)
	if ms > int64(protocol.MaxGrace/time.Millisecond) || !g.Valid() {
		return protocol.Message{}, badLine("malformed GRACE line", raw)
	}
	return protocol.Message{Cmd: protocol.Grace, Grace: &g}, nil
}

// digits reads 1..max decimal digits.
func digits(b []byte, max int) (int64, bool) {
	if len(b) == 0 || len(b) > max {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

func appendGrace(dst []byte, g protocol.GraceNote) []byte {
	dst = append(dst, "GRACE "...)
	if g.HasRound {
		dst = append(dst, ':')
		dst = append(dst, g.Round...)
	} else {
		dst = append(dst, '-')
	}
	dst = append(dst, ' ')
	dst = append(dst, g.Node...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(g.For/time.Millisecond), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(g.Hops), 10)
	return append(dst, '\n')
}
