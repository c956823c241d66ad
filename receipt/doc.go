// Package receipt makes and checks ChainSync receipts: each node's signed
// account of what it did in one round, chained in the chain's order, so
// that anyone holding a round's receipts can check offline who did what,
// in which order, and that no receipt was dropped or altered
// (docs/RECEIPTS.md).
//
// A receipt is an in-toto Statement v1 in a DSSE envelope, signed over
// DSSE's pre-authentication encoding (PAE) with ECDSA P-256 (the keys of
// chainsync certs) or Ed25519 (chainsync keygen). Its predicate, of type
// PredicateType, is a Receipt: the chain, the round, the node and its
// place, the outcome, the task's (and undo's) times, the approvals and
// denials given there, and Pred, the SHA-256 of the predecessor's receipt
// payload as signed. Both formats are a few lines over the standard
// library's crypto, so the package needs nothing else; any DSSE
// implementation given a node's public key verifies its envelope.
//
// # Usage
//
// A node that keeps receipts, for each round:
//
//  1. Learn the predecessor's digest (Envelope.Digest of its receipt, from
//     the wire's receipt-digest line) before the task starts; the Head
//     has none.
//  2. When its part of the round is settled, fill a Receipt and Sign it
//     with its TLS key and certificate, or its receipt key (LoadKey).
//  3. Marshal the envelope and keep those exact bytes (journal and fsync)
//     before sending anything about it: ECDSA signatures differ each
//     time, so after a restart the node sends what it kept, never a new
//     signature.
//  4. Send its digest to the successor, and its receipt, with those of
//     the nodes after it, to the predecessor (the wire's receipt lines).
//  5. Write the receipts it holds as a bundle (WriteBundle) if asked.
//
// A verifier reads a bundle (ParseBundle) and calls Verify with the
// chain's Trust: the CA, or each node's pin (secure.PinOfKey).
package receipt
