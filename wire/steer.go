package wire

import (
	"bytes"
	"strconv"

	"github.com/chainsync-go/chainsync/protocol"
)

// parseSteer decodes a steering line (docs/PROTOCOL.md, "Steering
// lines"):
//
//	STEER SP origin SP at SP what SP round SP by [ SP reason ]
//
// where round is "-" (none) or ":" and a round id, by is "-" for nobody
// known, and reason is the rest of the line (printable ASCII).
func parseSteer(line, raw []byte) (protocol.Message, error) {
	bad := func() (protocol.Message, error) {
		return protocol.Message{}, badLine("malformed steering line (want STEER ORIGIN AT WHAT ROUND BY [REASON])", raw)
	}
	f := bytes.SplitN(line, []byte{' '}, 7)
	if len(f) < 6 {
		return bad()
	}
	for _, b := range f[1:6] {
		if len(b) == 0 {
			return bad()
		}
	}
	s := protocol.Steer{Origin: string(f[1]), What: protocol.ParseSteerWhat(string(f[3]))}
	if f[2][0] < '1' || f[2][0] > '9' || len(f[2]) > 18 {
		return bad() // no sign, no leading zero, at most 18 digits
	}
	at, err := strconv.ParseInt(string(f[2]), 10, 64)
	if err != nil {
		return bad()
	}
	s.At = at
	switch r := f[4]; {
	case len(r) == 1 && r[0] == '-':
	case r[0] == ':':
		s.HasRound, s.Round = true, string(r[1:])
	default:
		return bad()
	}
	if b := string(f[5]); b != "-" {
		s.By = b
	}
	if len(f) == 7 {
		if len(f[6]) == 0 {
			return bad() // a trailing space
		}
		s.Reason = string(f[6])
	}
	if !s.Valid() {
		return bad()
	}
	return protocol.Message{Cmd: protocol.SteerLine, Steer: &s}, nil
}

func appendSteer(dst []byte, s protocol.Steer) []byte {
	dst = append(dst, "STEER "...)
	dst = append(dst, s.Origin...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, s.At, 10)
	dst = append(dst, ' ')
	dst = append(dst, s.What.String()...)
	dst = append(dst, ' ')
	if s.HasRound {
		dst = append(dst, ':')
		dst = append(dst, s.Round...)
	} else {
		dst = append(dst, '-')
	}
	dst = append(dst, ' ')
	if s.By == "" {
		dst = append(dst, '-')
	} else {
		dst = append(dst, s.By...)
	}
	if s.Reason != "" {
		dst = append(dst, ' ')
		dst = append(dst, s.Reason...)
	}
	return append(dst, '\n')
}
