package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"slices"
	"strconv"

	"github.com/chainsync-go/chainsync/protocol"
)

// MaxLine is the longest line accepted, in bytes, not counting the LF.
const MaxLine = 256

// quoteMax is how many offending bytes a ProtocolError keeps.
const quoteMax = 64

// quotedMax bounds the quoted bytes in a ProtocolError's message, quotes
// included: a byte that is not printable takes four characters there
// (\xNN), so 64 of them would take 258.
const quotedMax = 130

// ProtocolError is a line that breaks the wire grammar.
type ProtocolError struct {
	Reason string // what is wrong, e.g. "unknown command"
	Line   []byte // the offending bytes, at most 64 of them
	Len    int    // the offending line's length, as far as it was read
	// More says the line went on beyond Len: the reader stopped at the
	// limit instead of buffering the rest.
	More bool
	// Extension says the line is one of the project's extension lines
	// (HEARTBEAT, FAULT) at a reader that does not speak them: the two
	// nodes are configured differently, which reconnecting will not mend.
	Extension bool
}

// Error describes the failure in one line for logs: the offending bytes
// escaped, as many as fit in quotedMax characters.
func (e *ProtocolError) Error() string {
	k := len(e.Line)
	q := strconv.Quote(string(e.Line))
	for len(q) > quotedMax {
		k--
		q = strconv.Quote(string(e.Line[:k]))
	}
	s := fmt.Sprintf("chainsync: malformed line: %s: %s", e.Reason, q)
	switch {
	case e.More:
		s += fmt.Sprintf(" (more than %d bytes, truncated)", MaxLine)
	case e.Len > k:
		s += fmt.Sprintf(" (%d bytes, truncated)", e.Len)
	}
	return s
}

func badLine(reason string, line []byte) *ProtocolError {
	return &ProtocolError{Reason: reason, Line: bytes.Clone(line[:min(len(line), quoteMax)]), Len: len(line)}
}

// Parse decodes one line, without its LF; one trailing CR is allowed.
func Parse(line []byte) (protocol.Message, error) {
	return parse(line, nil, false)
}

// ParseExtensions is Parse at a node that speaks the extension lines:
// HEARTBEAT and the fault notice are accepted too.
func ParseExtensions(line []byte) (protocol.Message, error) {
	return parse(line, nil, true)
}

func parse(line []byte, intern func([]byte) string, heartbeats bool) (protocol.Message, error) {
	raw := line
	if len(line) > MaxLine {
		return protocol.Message{}, badLine("line longer than 256 bytes", raw)
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	for _, c := range line {
		if c < 0x20 || c == 0x7f {
			return protocol.Message{}, badLine("NUL or control byte", raw)
		}
	}
	if bytes.HasPrefix(line, []byte("FAULT ")) {
		if !heartbeats {
			pe := badLine("unknown command (FAULT, a fault notice, needs extensions: --heartbeat on both ends)", raw)
			pe.Extension = true
			return protocol.Message{}, pe
		}
		return parseNotice(line, raw)
	}
	if bytes.HasPrefix(line, []byte("GRACE ")) {
		if !heartbeats {
			pe := badLine("unknown command (GRACE, a restart grace, needs extensions: --heartbeat on both ends)", raw)
			pe.Extension = true
			return protocol.Message{}, pe
		}
		return parseGrace(line, raw)
	}
	if bytes.HasPrefix(line, []byte("STEER ")) {
		if !heartbeats {
			pe := badLine("unknown command (STEER, a steering line, needs extensions: --heartbeat on both ends)", raw)
			pe.Extension = true
			return protocol.Message{}, pe
		}
		return parseSteer(line, raw)
	}
	if IsReceiptLine(line) {
		// A Reader with Receipts on reads these before parse sees them.
		pe := badLine("unknown command (a receipt line, needs --receipts on both ends)", raw)
		pe.Extension = true
		return protocol.Message{}, pe
	}
	if IsHello(line) {
		// The identity line: ParseHello reads it (a Reader with Heartbeats
		// on does), never as a protocol.Message.
		pe := badLine("unknown command (HELLO, the identity line, needs extensions: --heartbeat on both ends)", raw)
		pe.Extension = !heartbeats
		if heartbeats {
			pe.Reason = "HELLO, the identity line, is not a message (ParseHello reads it)"
		}
		return protocol.Message{}, pe
	}
	if isUndoLine(line) {
		if !heartbeats {
			pe := badLine("unknown command (an undo line, needs --undo on both ends)", raw)
			pe.Extension = true
			return protocol.Message{}, pe
		}
		return parseUndo(line, raw)
	}
	cmdPart, id, hasColon := bytes.Cut(line, []byte{':'})
	var cmd protocol.Command
	switch string(cmdPart) { // no allocation: the compiler switches on the bytes
	case "READY":
		cmd = protocol.Ready
	case "START":
		cmd = protocol.Start
	case "COMPLETE":
		cmd = protocol.Complete
	case "HEARTBEAT":
		if !heartbeats || hasColon {
			pe := badLine("unknown command (HEARTBEAT needs heartbeats enabled on both ends)", raw)
			pe.Extension = !heartbeats
			return protocol.Message{}, pe
		}
		return protocol.Message{Cmd: protocol.Heartbeat}, nil
	default:
		return protocol.Message{}, badLine("unknown command", raw)
	}
	if !hasColon || len(id) == 0 {
		return protocol.Message{Cmd: cmd}, nil
	}
	if !protocol.ValidRound(id) {
		return protocol.Message{}, badLine("invalid round id (1-128 of A-Z a-z 0-9 - _ .)", raw)
	}
	if intern != nil {
		return protocol.Message{Cmd: cmd, Round: intern(id)}, nil
	}
	return protocol.Message{Cmd: cmd, Round: string(id)}, nil
}

// parseNotice decodes a fault notice line (docs/PROTOCOL.md, "Fault
// notices"):
//
//	FAULT SP round SP kind SP origin SP blamed [SP retry] [SP ":" SP why]
//
// where round is "-" (no round) or ":" and a round id (":" alone is the
// unnamed round), blamed is "-" for none, retry is a number from 1 and
// why the rest of the line: the origin's words for the fault. The field
// after blamed is a retry (digits) or the lone ":" that starts why, so
// the two are never confused.
func parseNotice(line, raw []byte) (protocol.Message, error) {
	f := bytes.SplitN(line, []byte{' '}, 6)
	if len(f) < 5 || slices.ContainsFunc(f, func(b []byte) bool { return len(b) == 0 }) {
		return protocol.Message{}, badLine("malformed fault notice (want FAULT ROUND KIND ORIGIN BLAMED [RETRY] [: WHY])", raw)
	}
	n := protocol.Notice{Kind: string(f[2]), Origin: string(f[3])}
	switch r := f[1]; {
	case len(r) == 1 && r[0] == '-':
	case len(r) >= 1 && r[0] == ':':
		n.HasRound, n.Round = true, string(r[1:])
	default:
		return protocol.Message{}, badLine("malformed fault notice: round must be - or :ID", raw)
	}
	if b := string(f[4]); b != "-" {
		n.Blamed = b
	}
	if len(f) == 6 {
		rest := f[5]
		a, more, cut := bytes.Cut(rest, []byte{' '})
		if len(a) == 0 {
			return protocol.Message{}, badLine("malformed fault notice (two spaces)", raw)
		}
		if a[0] != ':' {
			// The attempt, as the retries that reopened the round at the
			// origin: 1 or more, no sign, no leading zero.
			if a[0] < '1' || a[0] > '9' || len(a) > 6 || len(bytes.Trim(a, "0123456789")) > 0 {
				return protocol.Message{}, badLine("malformed fault notice: RETRY must be a number from 1", raw)
			}
			n.Attempt, _ = strconv.Atoi(string(a))
			rest = more
			if cut && len(rest) == 0 {
				return protocol.Message{}, badLine("malformed fault notice (a space at the end)", raw)
			}
		}
		if len(rest) > 0 {
			why, ok := bytes.CutPrefix(rest, []byte(": "))
			if !ok || len(why) == 0 {
				return protocol.Message{}, badLine("malformed fault notice: after BLAMED and RETRY only \": WHY\" may follow", raw)
			}
			n.Why = string(why)
		}
	}
	if n.Origin == "-" || !n.Valid() {
		return protocol.Message{}, badLine("malformed fault notice", raw)
	}
	return protocol.Message{Cmd: protocol.FaultNotice, Note: &n}, nil
}

// interned is how many round-id strings a Reader keeps: a slot each,
// chosen by the id's hash, so that a lookup touches one slot and a new
// id takes the place of the one before in its slot.
const interned = 256

// internSeed seeds the hash that picks a round id's slot.
var internSeed = maphash.MakeSeed()

// Reader reads protocol lines from a stream.
type Reader struct {
	br     *bufio.Reader
	intern *[interned]string
	// Heartbeats accepts the extension lines (docs/DESIGN.md, "Extension
	// lines"): HEARTBEAT as a Message with Cmd protocol.Heartbeat, and the
	// fault notice as one with Cmd protocol.FaultNotice. Off, both are
	// unknown commands, as they are to a draft-only peer (ProtocolError
	// with Extension set). The identity line, HELLO, is read as a
	// HEARTBEAT (it too says the peer is alive, and belongs to no round),
	// and Hello returns it.
	Heartbeats bool
	hello      *Hello // the identity line just read, until Hello takes it
	// Receipts accepts the receipt lines (RDIGEST, RECEIPT) of a chain
	// with receipts on (it speaks the extension lines too): each is read
	// as a HEARTBEAT, and Receipt returns it. Off, they are extension
	// lines this node does not speak (ProtocolError with Extension set).
	Receipts bool
	receipt  *ReceiptLine // the receipt line just read, until Receipt takes it
}

// NewReader returns a Reader that buffers at most MaxLine+1 bytes of r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, MaxLine+1)}
}

// HasLine reports whether a whole line (or an overlong one) is buffered,
// so that ReadMessage returns without reading from the stream.
func (r *Reader) HasLine() bool {
	k := r.br.Buffered()
	if k == 0 {
		return false
	}
	if k > MaxLine {
		return true
	}
	b, _ := r.br.Peek(k)
	return bytes.IndexByte(b, '\n') >= 0
}

// ReadMessage reads the next line. It returns a *ProtocolError for a
// malformed line (the stream is then unusable: close it), io.EOF at a clean
// end of stream, io.ErrUnexpectedEOF for a stream cut inside a line, and
// the underlying error otherwise.
func (r *Reader) ReadMessage() (protocol.Message, error) {
	line, err := r.br.ReadSlice('\n')
	switch {
	case err == nil:
		if r.Heartbeats && IsHello(line) {
			return r.readHello(line[:len(line)-1])
		}
		if r.Receipts && IsReceiptLine(line) {
			return r.readReceipt(line[:len(line)-1])
		}
		return parse(line[:len(line)-1], r.internRound, r.Heartbeats)
	case errors.Is(err, bufio.ErrBufferFull):
		pe := badLine("line longer than 256 bytes", line)
		pe.More = true
		return protocol.Message{}, pe
	case err == io.EOF && len(line) > 0:
		return protocol.Message{}, io.ErrUnexpectedEOF
	}
	return protocol.Message{}, err
}

// internRound returns a string for id, allocating only the first time an id
// is seen (of the rounds under way, whose ids come again and again), so
// steady-state decoding allocates nothing.
func (r *Reader) internRound(id []byte) string {
	if r.intern == nil {
		r.intern = new([interned]string)
	}
	slot := &r.intern[maphash.Bytes(internSeed, id)%interned]
	if *slot != string(id) {
		*slot = string(id)
	}
	return *slot
}

// Append appends m's wire form to dst. With colon set, the unnamed round is
// written "COMMAND:" (for peers such as the reference implementation, which
// cannot parse a bare COMMAND); otherwise it is the draft's bare "COMMAND".
// Append does not validate m: tests use it to play a broken peer. Use Valid
// first where m may come from outside.
func Append(dst []byte, m protocol.Message, colon bool) []byte {
	if m.Cmd == protocol.FaultNotice && m.Note != nil {
		return appendNotice(dst, *m.Note)
	}
	if m.Cmd == protocol.SteerLine && m.Steer != nil {
		return appendSteer(dst, *m.Steer)
	}
	if m.Cmd.IsUndo() {
		return appendUndo(dst, m)
	}
	if m.Cmd == protocol.Grace && m.Grace != nil {
		return appendGrace(dst, *m.Grace)
	}
	if m.Receipt != nil && (m.Cmd == protocol.RDigestLine || m.Cmd == protocol.ReceiptLine) {
		return appendReceiptMessage(dst, m)
	}
	dst = append(dst, m.Cmd.String()...)
	if m.Round != "" || colon && m.Cmd != protocol.Heartbeat {
		dst = append(dst, ':')
		dst = append(dst, m.Round...)
	}
	return append(dst, '\n')
}

// Valid reports whether m can be written: a defined command and a legal
// round id.
func Valid(m protocol.Message) bool {
	if m.Cmd == protocol.FaultNotice {
		return m.Note != nil && m.Note.Valid() && m.Note.Len() <= MaxLine
	}
	if m.Cmd == protocol.SteerLine {
		return m.Steer != nil && m.Steer.Valid()
	}
	if m.Cmd.IsUndo() {
		return validUndo(m)
	}
	if m.Cmd == protocol.Grace {
		return m.Grace != nil && m.Grace.Valid()
	}
	if m.Cmd == protocol.RDigestLine || m.Cmd == protocol.ReceiptLine {
		return validReceiptMessage(m)
	}
	return m.Cmd.Valid() && protocol.ValidRound(m.Round)
}

func appendNotice(dst []byte, n protocol.Notice) []byte {
	dst = append(dst, "FAULT "...)
	if n.HasRound {
		dst = append(dst, ':')
		dst = append(dst, n.Round...)
	} else {
		dst = append(dst, '-')
	}
	dst = append(dst, ' ')
	dst = append(dst, n.Kind...)
	dst = append(dst, ' ')
	dst = append(dst, n.Origin...)
	dst = append(dst, ' ')
	if n.Blamed == "" {
		dst = append(dst, '-')
	} else {
		dst = append(dst, n.Blamed...)
	}
	if n.Attempt > 0 {
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, int64(n.Attempt), 10)
	}
	if n.Why != "" {
		dst = append(dst, " : "...)
		dst = append(dst, n.Why...)
	}
	return append(dst, '\n')
}
