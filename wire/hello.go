package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Hello is the identity line (docs/PROTOCOL.md, "The identity line"), an
// extension line: with extensions on, a node placed by a whole chain
// sends it first on each link, so that its neighbour can tell a
// mis-wired or differently configured chain from the right one:
//
//	HELLO SP name SP pos "/" size SP chain SP rounds [SP names] [SP "hb=" millis]
//
// It catches mistakes; it proves nothing (anyone can send it).
type Hello struct {
	Name  string // the sender's name, a protocol.NoticeName
	Pos   int    // the sender's place in its chain, 1 (the Head) to Size
	Size  int    // the length of the sender's chain
	Chain string // the digest of the sender's chain (HelloDigest)
	// Rounds is the digest of the sender's round settings.
	Rounds string
	// Names are the names of the sender's chain, Head first (NoticeNames),
	// when the line has room for them; nil when it has not.
	Names []string
	// Heartbeat is the sender's heartbeat interval, a whole number of
	// milliseconds (HelloHeartbeat); HeartbeatOff if it runs without
	// heartbeats (its extension lines on for another reason); 0 if the
	// line does not say (a sender of an older version).
	Heartbeat time.Duration
}

// Bounds of the identity line's fields.
const (
	// MaxChainSize is the longest chain a Hello can describe.
	MaxChainSize = 999999
	// DigestLen is the length of a digest field: 16 lower-case hex digits.
	DigestLen = 16
	// MaxHeartbeat is the longest heartbeat interval a Hello can carry.
	MaxHeartbeat = 999999999 * time.Millisecond
	// HeartbeatOff is Hello.Heartbeat of a sender without heartbeats.
	HeartbeatOff time.Duration = -1
)

// HelloHeartbeat is what a Hello says of a heartbeat interval d:
// HeartbeatOff if d is not positive, else d rounded up to a whole
// millisecond, at most MaxHeartbeat.
func HelloHeartbeat(d time.Duration) time.Duration {
	if d <= 0 {
		return HeartbeatOff
	}
	return min(MaxHeartbeat, (d+time.Millisecond-1)/time.Millisecond*time.Millisecond)
}

var hbPrefix = []byte("hb=")

var helloPrefix = []byte("HELLO ")

// IsHello reports whether line (without its LF) is meant as an identity
// line: it starts with "HELLO ". Whether it is a well-formed one is
// ParseHello's to say.
func IsHello(line []byte) bool { return bytes.HasPrefix(line, helloPrefix) }

// ParseHello decodes an identity line, without its LF; one trailing CR is
// allowed. Anything else is a *ProtocolError.
func ParseHello(line []byte) (Hello, error) {
	raw := line
	if len(line) > MaxLine {
		return Hello{}, badLine("line longer than 256 bytes", raw)
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	bad := func() (Hello, error) {
		return Hello{}, badLine("malformed identity line (want HELLO NAME POS/SIZE CHAIN ROUNDS [NAMES] [hb=MILLIS])", raw)
	}
	if !IsHello(line) {
		return bad()
	}
	f := bytes.Split(line[len(helloPrefix):], []byte{' '})
	var h Hello
	if n := len(f); n > 4 && bytes.HasPrefix(f[n-1], hbPrefix) {
		ms, ok := helloMillis(f[n-1][len(hbPrefix):])
		if !ok {
			return bad()
		}
		h.Heartbeat = HeartbeatOff
		if ms > 0 {
			h.Heartbeat = time.Duration(ms) * time.Millisecond
		}
		f = f[:n-1]
	}
	if len(f) != 4 && len(f) != 5 {
		return bad()
	}
	h.Name = string(f[0])
	if !helloName(h.Name) {
		return bad()
	}
	ps, ss, ok := bytes.Cut(f[1], []byte{'/'})
	if !ok {
		return bad()
	}
	var okP, okS bool
	h.Pos, okP = helloNumber(ps)
	h.Size, okS = helloNumber(ss)
	if !okP || !okS || h.Pos > h.Size {
		return bad()
	}
	if !helloDigest(f[2]) || !helloDigest(f[3]) {
		return bad()
	}
	h.Chain, h.Rounds = string(f[2]), string(f[3])
	if len(f) == 5 {
		names := strings.Split(string(f[4]), ",")
		if len(names) != h.Size {
			return bad()
		}
		for _, n := range names {
			if !helloName(n) {
				return bad()
			}
		}
		h.Names = names
	}
	return h, nil
}

func helloName(s string) bool {
	return s != "" && s != "-" && protocol.NoticeName(s) == s
}

// helloNumber reads 1..MaxChainSize in decimal, without leading zeros.
func helloNumber(b []byte) (int, bool) {
	if len(b) > 0 && b[0] == '0' {
		return 0, false
	}
	v, ok := digits(b, 6)
	return int(v), ok
}

// helloMillis reads 0..999999999 in decimal, without leading zeros.
func helloMillis(b []byte) (int, bool) {
	if len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	v, ok := digits(b, 9)
	return int(v), ok
}

func helloDigest(b []byte) bool {
	if len(b) != DigestLen {
		return false
	}
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidHello reports whether h can be written: a NoticeName, a place
// within its chain, two digests, either no names or Size of them, and a
// heartbeat that HelloHeartbeat gives (or 0, not said). AppendHello
// drops names that would not fit in the line.
func ValidHello(h Hello) bool {
	if !helloName(h.Name) || h.Pos < 1 || h.Size > MaxChainSize || h.Pos > h.Size ||
		!helloDigest([]byte(h.Chain)) || !helloDigest([]byte(h.Rounds)) ||
		h.Heartbeat != 0 && HelloHeartbeat(h.Heartbeat) != h.Heartbeat {
		return false
	}
	if h.Names == nil {
		return true
	}
	if len(h.Names) != h.Size {
		return false
	}
	for _, n := range h.Names {
		if !helloName(n) {
			return false
		}
	}
	return true
}

// AppendHello appends h's wire form to dst, with its names if the whole
// line then stays within MaxLine (otherwise without them), and its
// heartbeat unless that is 0. It does not validate h: use ValidHello
// first.
func AppendHello(dst []byte, h Hello) []byte {
	var hb []byte
	if h.Heartbeat != 0 {
		hb = append(append(hb, ' '), hbPrefix...)
		hb = strconv.AppendInt(hb, max(0, int64(h.Heartbeat/time.Millisecond)), 10)
	}
	start := len(dst)
	dst = append(dst, helloPrefix...)
	dst = append(dst, h.Name...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(h.Pos), 10)
	dst = append(dst, '/')
	dst = strconv.AppendInt(dst, int64(h.Size), 10)
	dst = append(dst, ' ')
	dst = append(dst, h.Chain...)
	dst = append(dst, ' ')
	dst = append(dst, h.Rounds...)
	if len(h.Names) > 0 {
		k := len(h.Names) // separators: one space, and a comma between names
		for _, n := range h.Names {
			k += len(n)
		}
		if len(dst)-start+k+len(hb) <= MaxLine {
			dst = append(dst, ' ')
			for i, n := range h.Names {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, n...)
			}
		}
	}
	dst = append(dst, hb...)
	return append(dst, '\n')
}

// Digest is the digest a Hello carries for s (a chain, or round
// settings, in a canonical form): the first 8 bytes of its SHA-256, in
// lower-case hex.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:DigestLen/2])
}

// readHello reads an identity line at a Reader with Heartbeats on.
func (r *Reader) readHello(line []byte) (protocol.Message, error) {
	h, err := ParseHello(line)
	if err != nil {
		return protocol.Message{}, err
	}
	r.hello = &h
	return protocol.Message{Cmd: protocol.Heartbeat}, nil
}

// Hello returns the identity line that the last ReadMessage read (it then
// returned a HEARTBEAT), once; false if that line was no identity line.
func (r *Reader) Hello() (Hello, bool) {
	h := r.hello
	r.hello = nil
	if h == nil {
		return Hello{}, false
	}
	return *h, true
}
