package secure

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"strings"
	"testing"
)

// Draft: Security Considerations ("prevent node impersonation"). A PSK
// proof covers the names of both ends of its link, so a node that knows the
// chain's key still cannot stand in for another position: a connection
// redirected to the wrong node, or looped back to the dialer, is refused by
// both ends, and each log line names the two positions.
func TestPSKPosition(t *testing.T) {
	key := newKeyFile(t)
	a := mustLoad(t, pskOpts(key, "", "A", "B"))  // the Head, dials B
	b := mustLoad(t, pskOpts(key, "A", "B", "C")) // listens for A, dials C
	c := mustLoad(t, pskOpts(key, "B", "C", ""))  // the Tail, listens for B

	t.Run("right position", func(t *testing.T) {
		cli, srv := connect(t, b, a)
		if cli.err != nil || srv.err != nil {
			t.Fatalf("A->B: client %v, server %v", cli.err, srv.err)
		}
		exchange(t, cli.conn, srv.conn)
	})
	t.Run("redirected to the next node", func(t *testing.T) {
		// A dialed B's address; something there forwards to C.
		cli, srv := connect(t, c, a)
		wantRefused(t, "C", srv.err, ReasonWrongPosition, `"A" dialing its successor "B"`, `this node is "C" and its predecessor is "B"`, "redirected")
		wantRefused(t, "A", cli.err, ReasonWrongPosition, `answered is "C", whose predecessor is "B"`, `successor "B"`, "redirected")
		if cli.conn != nil || srv.conn != nil {
			t.Fatal("a connection was returned")
		}
	})
	t.Run("redirected backwards", func(t *testing.T) {
		cli, srv := connect(t, b, b) // B's successor address leads to B
		wantRefused(t, "B as server", srv.err, ReasonWrongPosition, `this node itself ("B" dialing its successor "C")`, "looped back")
		wantRefused(t, "B as client", cli.err, ReasonWrongPosition, `this node itself ("B")`, `successor "C"`, "looped back")
	})
	t.Run("wrong key is not a position problem", func(t *testing.T) {
		other := mustLoad(t, pskOpts(newKeyFile(t), "", "A", "B"))
		cli, srv := connect(t, b, other)
		wantRefused(t, "server", srv.err, ReasonPSKMismatch)
		wantRefused(t, "client", cli.err, ReasonPSKMismatch)
	})
	t.Run("names are covered by the MAC", func(t *testing.T) {
		// A's proof with the names it claims replaced by the ones C
		// expects: the MAC no longer matches, so C sees a wrong key, and
		// says nothing about its own position.
		addr, ch := serve(t, c)
		tc, err := foreignClient(t, addr, a.client.Clone())
		if err != nil {
			t.Fatal(err)
		}
		p, _ := a.proof(tc, macClient, "A", "B")
		if _, err := tc.Write([]byte(pskLinePrefix + "B C " + hex.EncodeToString(p) + "\n")); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		wantRefused(t, "C", r.err, ReasonPSKMismatch)
		if line, _ := bufio.NewReader(tc).ReadString('\n'); line != pskLinePrefix+pskReject+"\n" {
			t.Errorf("forger got %q, want only REJECT", line)
		}
	})
	t.Run("forged position refusal", func(t *testing.T) {
		// A stranger at B's address (no key) answers A's proof with a
		// REJECT-POSITION it cannot MAC: A must not log a position story
		// the stranger made up, but a key problem.
		stranger := mustLoad(t, pskOpts(newKeyFile(t), "A", "B", ""))
		addr, ch := listen(t, func(raw net.Conn) (net.Conn, error) {
			tc := tls.Server(raw, stranger.server)
			if err := tc.Handshake(); err != nil {
				return nil, err
			}
			if _, err := readProofLine(tc); err != nil {
				return nil, err
			}
			_, err := io.WriteString(tc, pskLinePrefix+pskRejectPos+" X Y "+strings.Repeat("00", 32)+"\n")
			return tc, err
		})
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Client(context.Background(), raw, addr)
		wantRefused(t, "A", err, ReasonPSKMismatch, "refusal carries no valid proof of the key")
		if r := <-ch; r.conn != nil {
			r.conn.Close()
		}
	})
	t.Run("names with spaces and odd bytes", func(t *testing.T) {
		x := mustLoad(t, pskOpts(key, "", "node 1", "n%2/ü"))
		y := mustLoad(t, pskOpts(key, "node 1", "n%2/ü", ""))
		cli, srv := connect(t, y, x)
		if cli.err != nil || srv.err != nil {
			t.Fatalf("client %v, server %v", cli.err, srv.err)
		}
		exchange(t, cli.conn, srv.conn)
	})
}

// With a CA, a node's certificate is checked for its address only, and
// certificates of nodes on one machine all carry 127.0.0.1. Given the
// chain's names, a certificate that names another node of the chain (as
// those from `chainsync certs` do, in their common name) is refused: the
// redirect and the loopback above fail in mutual TLS too.
func TestCertPosition(t *testing.T) {
	certs := chain(t, "A", "B", "C")
	names := []string{"A", "B", "C"}
	opts := func(self, prev, next string) Options {
		o := mtls(certs[self])
		o.SelfName, o.PrevName, o.NextName, o.ChainNames = self, prev, next, names
		return o
	}
	a, b, c := mustLoad(t, opts("A", "", "B")), mustLoad(t, opts("B", "A", "C")), mustLoad(t, opts("C", "B", ""))
	t.Run("right position", func(t *testing.T) {
		cli, srv := connect(t, b, a)
		if cli.err != nil || srv.err != nil {
			t.Fatalf("client %v, server %v", cli.err, srv.err)
		}
		exchange(t, cli.conn, srv.conn)
	})
	t.Run("redirected to the next node", func(t *testing.T) {
		cli, srv := connect(t, c, a)
		wantRefused(t, "A", cli.err, ReasonWrongPosition, `chain node "C", not of "B"`, "redirected")
		if srv.err == nil {
			t.Fatal("C accepted A")
		}
	})
	t.Run("looped back", func(t *testing.T) {
		cli, srv := connect(t, b, b)
		wantRefused(t, "B as client", cli.err, ReasonWrongPosition, `this node's own ("B")`, "looped back")
		if srv.err == nil {
			t.Fatal("B accepted itself")
		}
	})
	t.Run("predecessor from another position", func(t *testing.T) {
		// C's listener, reached by A whose check of the successor is
		// off (no names): C itself refuses A.
		plainA := mustLoad(t, mtls(certs["A"]))
		cli, srv := connect(t, c, plainA)
		wantRefused(t, "C", srv.err, ReasonWrongPosition, `predecessor's certificate is that of chain node "A", not of "B"`)
		if cli.err == nil {
			wantRefused(t, "A read", readErr(cli.conn), ReasonRejectedByPeer)
		}
	})
	t.Run("without names: unchanged", func(t *testing.T) {
		cli, srv := connect(t, mustLoad(t, mtls(certs["C"])), mustLoad(t, mtls(certs["A"])))
		if cli.err != nil || srv.err != nil {
			t.Fatalf("client %v, server %v", cli.err, srv.err)
		}
		exchange(t, cli.conn, srv.conn)
	})
}
