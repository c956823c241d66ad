// Package wire is the ChainSync line codec: COMMAND[:ROUND-ID] LF, exactly
// as docs/DESIGN.md's grammar says.
//
// Reading is strict and bounded: a Reader never buffers more than MaxLine+1
// bytes, and every malformed line (too long, unknown command, bad round id,
// NUL or control bytes) is a *ProtocolError carrying the offending bytes,
// escaped and truncated. One CR before the LF is tolerated, and "COMMAND:"
// (colon, empty id) is read as the unnamed round, as the reference
// implementation sends it. Decoding and encoding allocate nothing in the
// steady state.
package wire
