// Package secure protects the TCP links of a ChainSync chain: TLS 1.3,
// mutual TLS, public-key pinning and pre-shared keys.
//
// The draft's Security Considerations say connections SHOULD use TLS 1.3 and
// production deployments SHOULD use mutual TLS with certificate pinning or
// pre-shared keys, so that an untrusted process cannot join the chain. This
// package turns an operator's flags ([Options]) into a checked [Config] and
// secures each connection the transport makes:
//
//   - [Config.Client] for the connection a node dials to its successor,
//   - [Config.Server] for a connection a node accepts from a would-be
//     predecessor.
//
// Both return a [net.Conn] that carries the ordinary ChainSync line protocol,
// or a [*RefusedError] that says why the peer was refused, for the log.
// Nothing here reads or writes a protocol line.
//
// # Modes
//
// With no option set, [Load] returns a plain-TCP Config whose Client and
// Server return the connection unchanged (and [Config.Describe] says so).
// Otherwise every link is TLS 1.3 only: TLS 1.2 and older, and plaintext, are
// refused. Who is authenticated, and how:
//
//   - --tls-ca: the peer's certificate must chain to the CA. The successor's
//     certificate must also carry the name the node dialed (the host of its
//     address, or --tls-server-name). The predecessor must present a client
//     certificate signed by the CA (mutual TLS).
//   - --pin-prev / --pin-next: the neighbour's leaf public key must hash to
//     the pin (curl's --pinnedpubkey form, sha256//BASE64; several pins may be
//     joined with ';' for key rotation). Without a CA, self-signed
//     certificates are accepted on the strength of the pin alone; names and
//     dates are then not checked, like an SSH host key. With a CA, both the
//     chain and the pin must hold.
//   - --psk-file: after the TLS handshake each side proves it knows the key
//     and the names of the link's two ends, bound to this TLS session (see
//     Pre-shared keys below). The key file must hold at least 32 random
//     bytes as base64 or hex ([ParsePSK]; [WritePSKFile] makes one), and PSK
//     mode needs the chain's names ([Options].SelfName, PrevName,
//     NextName). Without --tls-cert, an ephemeral self-signed certificate is
//     made at [Load]. PSK mode adds a short exchange to the start of the
//     stream, so both ends must run it; the other modes are standard TLS
//     around the unchanged line protocol.
//   - A side with none of the above authenticates nobody; the system's
//     trust roots do not count (any public certificate passes them).
//     [Config.CheckSides] refuses a node that has such a side, unless
//     [Options].AcceptAnyPredecessor or AcceptAnySuccessor says it is meant
//     (then that side takes any peer, and [Config.Warnings] says so);
//     [Config.Server] and [Config.Client] refuse such a side too.
//
// # Usage
//
//  1. Build [Options] from the flags and call [Load] once at startup, then
//     [Config.CheckSides] with the sides the node has. Print an error and
//     exit if either fails; log [Config.Describe] and every
//     [Config.Warnings] line.
//  2. For each dialed connection call [Config.Client] with a context whose
//     deadline bounds the handshake; for each accepted one, [Config.Server].
//     Without a deadline, [DefaultHandshakeTimeout] applies.
//     [Dial] and [Accept] do this the way a node does (dialing with
//     backoff; an accepted connection gets at most [AcceptTimeout]), for
//     the node and for chainsync check alike.
//  3. On error the raw connection is already closed. Log the error: a
//     [*RefusedError] reads "refused peer ADDR: REASON (detail)". A canceled
//     context yields an error that wraps [context.Canceled] instead.
//  4. Use the returned connection for protocol lines. A successor that
//     rejects this node's certificate after the handshake (TLS 1.3 clients
//     learn that on their first read) makes Read return a [*RefusedError]
//     with [ReasonRejectedByPeer].
//
// # Pre-shared keys
//
// crypto/tls has no external-PSK mode, so the key is proven inside the
// channel, right after the TLS 1.3 handshake and before any protocol line.
// For a link from dialer D (the predecessor) to listener L:
//
//	ekm          = TLS-Exporter("EXPORTER-chainsync-psk", "", 32)  (RFC 8446 section 7.5)
//	mac(r, D, L) = HMAC-SHA256(key, "chainsync psk proof v2" 0x00 r 0x00 len16(D) D len16(L) L ekm)
//	client line  = "CHAINSYNC-PSK2 " esc(D) " " esc(L) " " hex(mac("client", D, L)) LF
//	server line  = "CHAINSYNC-PSK2 " hex(mac("server", D, L)) LF
//
// The exchange, under the handshake deadline:
//
//  1. The dialing side (client) sends its line.
//  2. The accepting side (server) reads exactly that one line (at most 2048
//     bytes, byte by byte so nothing after it is consumed) and checks the
//     MAC over the names it claims, with hmac.Equal. A wrong MAC gets
//     "CHAINSYNC-PSK2 REJECT" ([ReasonPSKMismatch]). A right MAC for names
//     other than (its predecessor, itself) gets "REJECT-POSITION" with its
//     own view of the names and a MAC over them ([ReasonWrongPosition]):
//     a connection redirected to another node of the chain, or looped back
//     to the dialer. Either way it closes: no protocol line is read. Otherwise
//     it sends its own proof line.
//  3. The client checks the server's reply the same way.
//
// Why this holds. The exporter is unique to the TLS session: it derives from
// the session's secrets and transcript. A proof therefore cannot be replayed
// on another connection, nor relayed by a man in the middle who terminates
// TLS on both sides, because his two sessions have different exporters (the
// channel binding of RFC 9266's tls-exporter). The names bind the proof to
// one link of the chain, which a plain TCP relay to the wrong node cannot
// change. The role label keeps a server from reflecting the client's proof.
// The server speaks second, so a stranger who connects to a listener learns
// nothing about the key. The client's proof is shown to whoever answers at
// the successor's address, who could then test guesses offline, one HMAC
// per guess: so Load accepts only random keys of at least 32 bytes.
//
// With [Options].ChainNames, a neighbour's certificate whose common name is
// another node of the chain is refused too ([ReasonWrongPosition]), which
// binds positions in mutual TLS where certificates share an address.
//
// [GenerateCerts] makes a small CA and per-node certificates for
// `chainsync certs`; [PinOf] and [PinFile] compute pins.
package secure
