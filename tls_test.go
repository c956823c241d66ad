package chainsync

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/rawio"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/secure"
)

// Draft: Security Considerations ("Connections SHOULD use TLS 1.3 ...
// mutual TLS with certificate pinning or pre-shared keys").

// genCerts makes a CA and certificates for nodes N0..N(n-1) on loopback.
func genCerts(t *testing.T, n int) []secure.Generated {
	t.Helper()
	specs := make([]secure.NodeSpec, n)
	for i := range specs {
		specs[i] = secure.NodeSpec{Name: fmt.Sprintf("N%d", i)}
	}
	gen, err := secure.GenerateCerts(t.TempDir(), specs, false)
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

func mustLoad(t *testing.T, o secure.Options) *secure.Config {
	t.Helper()
	c, err := secure.Load(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runChain readies every node and waits for all to finish.
func runChain(t *testing.T, nodes []*Node) {
	t.Helper()
	for _, nd := range nodes {
		nd.Ready("")
	}
	waitDone(t, nodes, "", "")
}

func TestMutualTLSChain(t *testing.T) {
	gen := genCerts(t, 3)
	cfgs := tcpChainConfigs(t, 3)
	for i := range cfgs {
		cfgs[i].Secure = mustLoad(t, secure.Options{CertFile: gen[i].CertFile, KeyFile: gen[i].KeyFile, CAFile: gen[i].CAFile})
	}
	runChain(t, startAll(t, cfgs, []int{0, 1, 2}))
}

func TestPinnedChain(t *testing.T) {
	gen := genCerts(t, 3)
	cfgs := tcpChainConfigs(t, 3)
	for i := range cfgs {
		o := secure.Options{CertFile: gen[i].CertFile, KeyFile: gen[i].KeyFile} // no CA: pins alone
		if i > 0 {
			o.PinPrev = gen[i-1].Pin
		}
		if i < 2 {
			o.PinNext = gen[i+1].Pin
		}
		cfgs[i].Secure = mustLoad(t, o)
	}
	runChain(t, startAll(t, cfgs, []int{2, 0, 1}))
}

func TestPSKChain(t *testing.T) {
	runChain(t, startAll(t, pskChainConfigs(t, 3), []int{1, 2, 0}))
}

// pskChainConfigs returns the configurations of an n-node chain on
// loopback whose links are TLS with one pre-shared key.
func pskChainConfigs(t *testing.T, n int) []Config {
	t.Helper()
	psk := filepath.Join(t.TempDir(), "psk")
	if err := secure.WritePSKFile(psk, false); err != nil {
		t.Fatal(err)
	}
	cfgs := tcpChainConfigs(t, n)
	for i := range cfgs {
		o := secure.Options{PSKFile: psk, SelfName: cfgs[i].Name}
		if i > 0 {
			o.PrevName = cfgs[i-1].Name
		}
		if i < len(cfgs)-1 {
			o.NextName = cfgs[i+1].Name
		}
		cfgs[i].Secure = mustLoad(t, o)
	}
	return cfgs
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A refused would-be predecessor (no certificate, another CA's
// certificate, plaintext) is logged, gets no protocol line, and does not
// disturb the round: the authenticated predecessor then completes it.
func TestRefusedPredecessorsDoNotDisturbTLS(t *testing.T) {
	gen := genCerts(t, 3)
	other := genCerts(t, 1)
	cfgs := tcpChainConfigs(t, 3)
	var logs syncBuffer
	for i := range cfgs {
		cfgs[i].Secure = mustLoad(t, secure.Options{CertFile: gen[i].CertFile, KeyFile: gen[i].KeyFile, CAFile: gen[i].CAFile})
	}
	cfgs[1].Logger = slog.New(slog.NewTextHandler(&logs, nil))
	nodes := startAll(t, cfgs[1:], []int{0, 1})
	nodes[0].Ready("")
	nodes[1].Ready("")
	addr := cfgs[1].Listen

	attack := func(name string, dial func() (net.Conn, error)) {
		c, err := dial()
		if err != nil {
			return // refused during the handshake: fine
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("READY\n"))
		got, _ := io.ReadAll(c)
		if bytes.Contains(got, []byte("START")) || bytes.Contains(got, []byte("READY")) {
			t.Errorf("%s: got a protocol line: %q", name, got)
		}
	}
	attack("plaintext", func() (net.Conn, error) { return net.Dial("tcp", addr) })
	attack("no client certificate", func() (net.Conn, error) {
		return tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	})
	attack("certificate from another CA", func() (net.Conn, error) {
		cert, err := tls.LoadX509KeyPair(other[0].CertFile, other[0].KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	})
	var st protocol.State
	nodes[0].call(func() { st, _ = nodes[0].d.view.State("") })
	if st != protocol.StateSync {
		t.Fatalf("middle node moved to %v after refused peers", st)
	}
	// Now the real, authenticated predecessor.
	head, err := Start(cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer head.Close()
	runChain(t, []*Node{head, nodes[0], nodes[1]})
	out := logs.String()
	for _, want := range []string{"refused would-be predecessor", "not TLS", "certificate"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// A successor whose certificate the CA did not sign is refused before any
// protocol line: no READY may reach it.
func TestUntrustedSuccessorGetsNoReady(t *testing.T) {
	gen := genCerts(t, 2)
	other := genCerts(t, 2)
	cert, err := tls.LoadX509KeyPair(other[1].CertFile, other[1].KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Every connection the node makes is read to its end; got has what
	// each carried, once the node has closed it.
	got := make(chan []byte, 64)
	var accepted atomic.Int64
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				b, _ := io.ReadAll(c)
				got <- b
			}()
		}
	}()
	var logs syncBuffer
	head, err := Start(Config{
		Next:       ln.Addr().String(),
		Secure:     mustLoad(t, secure.Options{CertFile: gen[0].CertFile, KeyFile: gen[0].KeyFile, CAFile: gen[0].CAFile}),
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
		BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	head.Ready("")
	waitCond(t, 10*time.Second, "several refused attempts", func() bool {
		return strings.Count(logs.String(), "successor refused or failed authentication") >= 3
	})
	head.Close()
	ln.Close()
	<-acceptDone
	for i := range accepted.Load() {
		b := recvWithin(t, got, 15*time.Second, fmt.Sprintf("connection %d of %d to end", i+1, accepted.Load()))
		if bytes.Contains(b, []byte("READY")) {
			t.Fatalf("untrusted successor received %q", b)
		}
	}
	if !strings.Contains(logs.String(), "successor refused or failed authentication") {
		t.Errorf("no refusal logged:\n%s", logs.String())
	}
}

// TestTLSLinksWriteAtOnce checks that both links of a node secured with
// TLS (a pre-shared key; the draft's Security Considerations) can be
// written from the goroutine that ran the turn (writenow.go): the socket
// under each is found through every wrapper on the way (the handshake's
// recorder, the admission's activity mark), so that a quiet link sends a
// round's line without waking its writer.
func TestTLSLinksWriteAtOnce(t *testing.T) {
	nodes := startAll(t, pskChainConfigs(t, 3), []int{0, 1, 2})
	runChain(t, nodes)
	var pred, succ bool
	if !nodes[1].call(func() {
		lk := nodes[1].d.links
		pred = lk.pred != nil && rawio.NewWriter(lk.pred.c).OverTLS()
		succ = lk.succ != nil && rawio.NewWriter(lk.succ.c).OverTLS()
	}) {
		t.Fatal("the middle node's loop ended")
	}
	if !pred || !succ {
		t.Fatalf("the middle node's links written at once: predecessor %v, successor %v; want both", pred, succ)
	}
}
