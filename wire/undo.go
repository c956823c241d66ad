package wire

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"github.com/chainsync-go/chainsync/protocol"
)

// The undo lines (docs/PROTOCOL.md, "The undo wave"):
//
//	UNDO SP "ON"
//	UNDO SP round SP failed SP kind SP code SP undone
//	UNDONE SP round SP failed SP kind SP code SP undone SP stop SP scode SP kept
//
// round is ":" and a round id (":" alone is the unnamed round); failed
// and stop are NoticeNames without a comma (stop "-": none); kind is a
// fault kind; code and scode an exit status (0-255), "-" for none or "T"
// for a timeout; undone and kept a count (0-99999) followed by up to that
// many names, each after a comma; kept is "-" when not known.

// isUndoLine reports whether line is one of the undo lines.
func isUndoLine(line []byte) bool {
	return bytes.HasPrefix(line, []byte("UNDO ")) || bytes.HasPrefix(line, []byte("UNDONE "))
}

func parseUndo(line, raw []byte) (protocol.Message, error) {
	if string(line) == "UNDO ON" {
		return protocol.Message{Cmd: protocol.UndoOn}, nil
	}
	f := strings.Split(string(line), " ")
	bad := func() (protocol.Message, error) {
		return protocol.Message{}, badLine("malformed undo line (see docs/PROTOCOL.md, The undo wave)", raw)
	}
	cmd := protocol.UndoLine
	want := 6
	if f[0] == "UNDONE" {
		cmd, want = protocol.UndoEnd, 9
	}
	if len(f) != want || !strings.HasPrefix(f[1], ":") || slices.Contains(f, "") {
		return bad()
	}
	id := f[1][1:]
	if !protocol.ValidRound(id) {
		return bad()
	}
	code := func(s string) (int, bool) {
		switch s {
		case "-":
			return -1, true
		case "T":
			return protocol.CodeTimeout, true
		}
		if len(s) == 0 || len(s) > 3 || strings.Trim(s, "0123456789") != "" {
			return 0, false
		}
		v, err := strconv.Atoi(s)
		return v, err == nil && v <= protocol.MaxUndoCode
	}
	list := func(s string) (string, int, bool) {
		if s == "-" {
			return "", -1, true
		}
		n, rest, _ := strings.Cut(s, ",")
		if len(n) == 0 || len(n) > 5 || strings.Trim(n, "0123456789") != "" {
			return "", 0, false
		}
		v, err := strconv.Atoi(n)
		if err != nil || strings.Contains(s, ",") && rest == "" {
			return "", 0, false
		}
		return rest, v, true
	}
	w := protocol.Wave{Failed: f[2], Kind: f[3], StopCode: -1}
	var ok bool
	if w.Code, ok = code(f[4]); !ok {
		return bad()
	}
	if w.Undone, w.UndoneN, ok = list(f[5]); !ok || w.UndoneN < 0 {
		return bad()
	}
	if cmd == protocol.UndoEnd {
		if f[6] != "-" {
			w.Stop = f[6]
		}
		if w.StopCode, ok = code(f[7]); !ok {
			return bad()
		}
		if w.Kept, w.KeptN, ok = list(f[8]); !ok {
			return bad()
		}
	}
	if !w.Valid(cmd) {
		return bad()
	}
	return protocol.Message{Cmd: cmd, Round: id, Undo: &w}, nil
}

func appendUndo(dst []byte, m protocol.Message) []byte {
	if m.Cmd == protocol.UndoOn || m.Undo == nil {
		return append(dst, "UNDO ON\n"...)
	}
	w := m.Undo
	code := func(dst []byte, c int) []byte {
		switch {
		case c == protocol.CodeTimeout:
			return append(dst, 'T')
		case c < 0:
			return append(dst, '-')
		}
		return strconv.AppendInt(dst, int64(c), 10)
	}
	list := func(dst []byte, s string, n int) []byte {
		if n < 0 {
			return append(dst, '-')
		}
		dst = strconv.AppendInt(dst, int64(n), 10)
		if s != "" {
			dst = append(dst, ',')
			dst = append(dst, s...)
		}
		return dst
	}
	if m.Cmd == protocol.UndoEnd {
		dst = append(dst, "UNDONE :"...)
	} else {
		dst = append(dst, "UNDO :"...)
	}
	dst = append(dst, m.Round...)
	dst = append(dst, ' ')
	dst = append(dst, w.Failed...)
	dst = append(dst, ' ')
	dst = append(dst, w.Kind...)
	dst = append(dst, ' ')
	dst = code(dst, w.Code)
	dst = append(dst, ' ')
	dst = list(dst, w.Undone, w.UndoneN)
	if m.Cmd == protocol.UndoEnd {
		dst = append(dst, ' ')
		if w.Stop == "" {
			dst = append(dst, '-')
		} else {
			dst = append(dst, w.Stop...)
		}
		dst = append(dst, ' ')
		dst = code(dst, w.StopCode)
		dst = append(dst, ' ')
		dst = list(dst, w.Kept, w.KeptN)
	}
	return append(dst, '\n')
}

// validUndo reports whether an undo line can be written.
func validUndo(m protocol.Message) bool {
	if m.Cmd == protocol.UndoOn {
		return true
	}
	return m.Undo != nil && m.Undo.Valid(m.Cmd) && protocol.ValidRound(m.Round) && m.Undo.Len(m.Cmd, m.Round) <= MaxLine
}
