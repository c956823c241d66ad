package wire

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/chainsync-go/chainsync/protocol"
)

// The receipt lines (docs/PROTOCOL.md, "Receipt lines"), extension lines
// of a chain with receipts on:
//
//	RDIGEST SP round SP node SP digest
//	RECEIPT SP round SP node SP part "/" parts SP data
//
// round is ":" and a round id (":" alone is the unnamed round); node a
// NoticeName, the node whose receipt it is; digest the SHA-256 of that
// receipt's payload, 64 lower-case hex digits; part and parts 1 to
// MaxReceiptParts, without leading zeros; data the next bytes of the
// receipt's envelope, printable ASCII without spaces. A receipt's lines
// are sent one after another, parts 1 to parts, each as long as
// MaxLine allows; the envelope is at most MaxReceipt bytes.

// Bounds of the receipt lines.
const (
	// MaxReceipt is the longest envelope the RECEIPT lines carry, in
	// bytes (receipt.MaxEnvelope).
	MaxReceipt = 16 << 10
	// MaxReceiptParts is the most lines one receipt is cut into. The
	// shortest room for data, after the longest round and name, is 69
	// bytes, so MaxReceipt needs at most 238.
	MaxReceiptParts = 999
	// ReceiptDigestLen is the length of a digest: SHA-256 in hex.
	ReceiptDigestLen = 64
)

var (
	rdigestPrefix = []byte("RDIGEST ")
	receiptPrefix = []byte("RECEIPT ")
)

// IsReceiptLine reports whether line (without its LF) is meant as a
// receipt line: it starts with "RDIGEST " or "RECEIPT ".
func IsReceiptLine(line []byte) bool {
	return bytes.HasPrefix(line, rdigestPrefix) || bytes.HasPrefix(line, receiptPrefix)
}

// ReceiptDigest is the RDIGEST line: Node's receipt for Round has the
// digest Digest. A node sends its own to its successor before the
// successor's task may start, so that the successor's receipt binds it.
type ReceiptDigest struct {
	Round  string // the round id ("" the unnamed round)
	Node   string // whose receipt
	Digest string // SHA-256 of its payload, lower-case hex
}

// ReceiptPart is one RECEIPT line: bytes Data of Node's receipt for Round,
// part Part of Parts.
type ReceiptPart struct {
	Round       string
	Node        string
	Part, Parts int
	Data        []byte // the line's bytes: copy them to keep them
}

// ReceiptLine is a receipt line as read: exactly one of its fields is set.
type ReceiptLine struct {
	Digest *ReceiptDigest
	Part   *ReceiptPart
}

// ParseReceiptLine decodes a receipt line, without its LF; one trailing
// CR is allowed. Anything else is a *ProtocolError. A Part's Data points
// into line.
func ParseReceiptLine(line []byte) (ReceiptLine, error) {
	raw := line
	if len(line) > MaxLine {
		return ReceiptLine{}, badLine("line longer than 256 bytes", raw)
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	f := bytes.Split(line, []byte{' '})
	switch {
	case bytes.HasPrefix(line, rdigestPrefix):
		d, ok := parseRDigest(f)
		if !ok {
			return ReceiptLine{}, badLine("malformed RDIGEST line (want RDIGEST :ROUND NODE SHA256-HEX)", raw)
		}
		return ReceiptLine{Digest: &d}, nil
	case bytes.HasPrefix(line, receiptPrefix):
		p, ok := parseRPart(f)
		if !ok {
			return ReceiptLine{}, badLine("malformed RECEIPT line (want RECEIPT :ROUND NODE PART/PARTS DATA)", raw)
		}
		return ReceiptLine{Part: &p}, nil
	}
	return ReceiptLine{}, badLine("not a receipt line", raw)
}

// receiptHead reads a receipt line's round and node fields.
func receiptHead(round, node []byte) (string, string, bool) {
	if len(round) == 0 || round[0] != ':' || !protocol.ValidRound(round[1:]) {
		return "", "", false
	}
	n := string(node)
	if !helloName(n) {
		return "", "", false
	}
	return string(round[1:]), n, true
}

func parseRDigest(f [][]byte) (ReceiptDigest, bool) {
	if len(f) != 4 {
		return ReceiptDigest{}, false
	}
	round, node, ok := receiptHead(f[1], f[2])
	if !ok || len(f[3]) != ReceiptDigestLen || !lowerHexBytes(f[3]) {
		return ReceiptDigest{}, false
	}
	return ReceiptDigest{Round: round, Node: node, Digest: string(f[3])}, true
}

func parseRPart(f [][]byte) (ReceiptPart, bool) {
	if len(f) != 5 {
		return ReceiptPart{}, false
	}
	round, node, ok := receiptHead(f[1], f[2])
	if !ok {
		return ReceiptPart{}, false
	}
	ps, ns, ok := bytes.Cut(f[3], []byte{'/'})
	part, okP := partNumber(ps)
	parts, okN := partNumber(ns)
	if !ok || !okP || !okN || part > parts || len(f[4]) == 0 {
		return ReceiptPart{}, false
	}
	for _, c := range f[4] {
		if c < 0x21 || c > 0x7e {
			return ReceiptPart{}, false
		}
	}
	return ReceiptPart{Round: round, Node: node, Part: part, Parts: parts, Data: f[4]}, true
}

// partNumber reads 1..MaxReceiptParts in decimal, without leading zeros.
func partNumber(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 3 || b[0] == '0' {
		return 0, false
	}
	v, ok := digits(b, 3)
	return int(v), ok && v <= MaxReceiptParts
}

func lowerHexBytes(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidReceiptDigest reports whether d can be written.
func ValidReceiptDigest(d ReceiptDigest) bool {
	return protocol.ValidRound(d.Round) && helloName(d.Node) && len(d.Digest) == ReceiptDigestLen && lowerHexBytes([]byte(d.Digest))
}

// AppendReceiptDigest appends d's RDIGEST line to dst. It does not
// validate d: use ValidReceiptDigest first.
func AppendReceiptDigest(dst []byte, d ReceiptDigest) []byte {
	dst = append(dst, rdigestPrefix...)
	dst = append(dst, ':')
	dst = append(dst, d.Round...)
	dst = append(dst, ' ')
	dst = append(dst, d.Node...)
	dst = append(dst, ' ')
	dst = append(dst, d.Digest...)
	return append(dst, '\n')
}

// AppendReceipt appends the RECEIPT lines that carry env, node's receipt
// for round, to dst: as few lines as MaxLine allows. It refuses a round
// or node that is not one, and an envelope that is empty, longer than
// MaxReceipt, or holds a byte that is not printable ASCII or is a space.
func AppendReceipt(dst []byte, round, node string, env []byte) ([]byte, error) {
	if !protocol.ValidRound(round) || !helloName(node) {
		return dst, fmt.Errorf("chainsync: receipt line: bad round %q or node %q", round, node)
	}
	if len(env) == 0 || len(env) > MaxReceipt {
		return dst, fmt.Errorf("chainsync: receipt line: an envelope of %d bytes (1 to %d)", len(env), MaxReceipt)
	}
	for _, c := range env {
		if c < 0x21 || c > 0x7e {
			return dst, fmt.Errorf("chainsync: receipt line: byte %q in the envelope (printable ASCII, no space)", c)
		}
	}
	// The head of each line is at most this long, with the widest
	// part numbers; with the room left, count the parts.
	head := len(receiptPrefix) + 1 + len(round) + 1 + len(node) + 1 + 7 + 1
	room := MaxLine - head
	parts := (len(env) + room - 1) / room
	for i := 1; len(env) > 0; i++ {
		n := min(room, len(env))
		dst = append(dst, receiptPrefix...)
		dst = append(dst, ':')
		dst = append(dst, round...)
		dst = append(dst, ' ')
		dst = append(dst, node...)
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, '/')
		dst = strconv.AppendInt(dst, int64(parts), 10)
		dst = append(dst, ' ')
		dst = append(dst, env[:n]...)
		dst = append(dst, '\n')
		env = env[n:]
	}
	return dst, nil
}

// ReceiptAssembler puts a link's RECEIPT lines back together, one
// receipt at a time, holding at most MaxReceipt bytes.
type ReceiptAssembler struct {
	round, node string
	next, parts int // the part expected next (0: none pending), of parts
	buf         []byte
}

// Add takes the next RECEIPT line read on the link. When p completes a
// receipt it returns the envelope's bytes (a new slice) and true. A part
// out of order (not 1 when none is pending, not the next of the pending
// receipt), or a receipt longer than MaxReceipt, is a *ProtocolError, as
// bad input; the assembler then holds nothing.
func (a *ReceiptAssembler) Add(p ReceiptPart) ([]byte, bool, error) {
	bad := func(why string) ([]byte, bool, error) {
		*a = ReceiptAssembler{buf: a.buf[:0]}
		return nil, false, &ProtocolError{Reason: why, Line: bytes.Clone(p.Data[:min(len(p.Data), quoteMax)]), Len: len(p.Data)}
	}
	switch {
	case a.next == 0 && p.Part != 1:
		return bad(fmt.Sprintf("RECEIPT part %d/%d of %s's receipt without the parts before it", p.Part, p.Parts, p.Node))
	case a.next != 0 && (p.Round != a.round || p.Node != a.node || p.Parts != a.parts || p.Part != a.next):
		return bad(fmt.Sprintf("RECEIPT part %d/%d of %s's receipt where part %d/%d of %s's belongs", p.Part, p.Parts, p.Node, a.next, a.parts, a.node))
	case len(a.buf)+len(p.Data) > MaxReceipt:
		return bad(fmt.Sprintf("a receipt longer than %d bytes", MaxReceipt))
	}
	if p.Part == 1 {
		a.round, a.node, a.parts, a.buf = p.Round, p.Node, p.Parts, a.buf[:0]
	}
	a.buf = append(a.buf, p.Data...)
	a.next = p.Part + 1
	if p.Part < p.Parts {
		return nil, false, nil
	}
	env := bytes.Clone(a.buf)
	a.next, a.buf = 0, a.buf[:0]
	return env, true, nil
}

// Pending reports whether a receipt is partly read: at the end of a link
// it is lost, and its sender sends it again, whole, on the next.
func (a *ReceiptAssembler) Pending() bool { return a.next != 0 }

// readReceipt reads a receipt line at a Reader with Receipts on.
func (r *Reader) readReceipt(line []byte) (protocol.Message, error) {
	l, err := ParseReceiptLine(line)
	if err != nil {
		return protocol.Message{}, err
	}
	if l.Part != nil {
		l.Part.Data = bytes.Clone(l.Part.Data) // line is the reader's buffer
	}
	r.receipt = &l
	return protocol.Message{Cmd: protocol.Heartbeat}, nil
}

// Receipt returns the receipt line that the last ReadMessage read (it then
// returned a HEARTBEAT), once; false if that line was no receipt line.
func (r *Reader) Receipt() (ReceiptLine, bool) {
	l := r.receipt
	r.receipt = nil
	if l == nil {
		return ReceiptLine{}, false
	}
	return *l, true
}

// Message returns d as the machine takes it (protocol.RDigestLine).
func (d ReceiptDigest) Message() protocol.Message {
	return protocol.Message{Cmd: protocol.RDigestLine, Round: d.Round, Receipt: &protocol.ReceiptNote{Node: d.Node, Digest: d.Digest}}
}

// appendReceiptMessage appends the lines of a machine's receipt message:
// one RDIGEST line, or the RECEIPT lines of the whole envelope.
func appendReceiptMessage(dst []byte, m protocol.Message) []byte {
	n := m.Receipt
	if m.Cmd == protocol.RDigestLine {
		return AppendReceiptDigest(dst, ReceiptDigest{Round: m.Round, Node: n.Node, Digest: n.Digest})
	}
	out, err := AppendReceipt(dst, m.Round, n.Node, []byte(n.Envelope))
	if err != nil {
		return dst // Valid refuses it
	}
	return out
}

// validReceiptMessage reports whether a machine's receipt message can be
// written.
func validReceiptMessage(m protocol.Message) bool {
	n := m.Receipt
	if n == nil || !ValidReceiptDigest(ReceiptDigest{Round: m.Round, Node: n.Node, Digest: n.Digest}) {
		return false
	}
	if m.Cmd == protocol.ReceiptLine {
		_, err := AppendReceipt(nil, m.Round, n.Node, []byte(n.Envelope))
		return err == nil
	}
	return true
}
