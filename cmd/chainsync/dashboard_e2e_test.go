//go:build unix

package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// chainsync dashboard refuses to serve the chain to other machines
// without HTTPS and client certificates: a --listen off loopback without
// them exits 2 and names the fix, before it binds anything. (The draft's
// Security Considerations: "Production deployments SHOULD use mutual
// TLS"; a page that can steer a node is part of the chain's security.)
func TestDashboardOffLoopbackNeedsTLS(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:0", "[::]:0", "10.1.2.3:3100"} {
		p := startProc(t, "dashboard", nil, "dashboard", "--listen", listen, "127.0.0.1:9")
		if code := p.wait(t, 20*time.Second); code != 2 {
			t.Fatalf("--listen %s without TLS: exit %d, want 2\n%s", listen, code, p.err.String())
		}
		if e := p.err.String(); !strings.Contains(e, "--tls-cert and --tls-key, and --tls-ca or --page-pin") || !strings.Contains(e, "is not loopback") {
			t.Fatalf("--listen %s: the error does not name the fix:\n%s", listen, e)
		}
	}
	// --node without --control steers nothing: a usage error.
	p := startProc(t, "dashboard", nil, "dashboard", "--node", "C", "127.0.0.1:9,127.0.0.1:10")
	if code := p.wait(t, 20*time.Second); code != 2 || !strings.Contains(p.err.String(), "give --control too") {
		t.Fatalf("--node without --control: exit %d\n%s", code, p.err.String())
	}
}

// --listen :PORT is loopback, and the dashboard prints its URL; a node
// that does not answer is on the page as such.
func TestDashboardListenPortIsLoopback(t *testing.T) {
	t.Parallel()
	p := startProc(t, "dashboard", nil, "dashboard", "--listen", ":0", "127.0.0.1:9")
	var url string
	waitFor(t, 20*time.Second, "URL on stdout", func() bool {
		out := p.out.String()
		i := strings.Index(out, "http://127.0.0.1:")
		if i < 0 {
			return false
		}
		url = strings.Fields(out[i:])[0]
		return true
	})
	var body string
	waitFor(t, 20*time.Second, "a view saying the node does not answer", func() bool {
		resp, err := http.Get(url + "view")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200 && strings.Contains(body, `"answers":false`)
	})
	if !strings.Contains(body, `"addr":"127.0.0.1:9"`) {
		t.Fatalf("view: %s", body)
	}
}

// chainsync approve --reason: the reason goes with who approved into the
// node's log (and its status, which the dashboard shows), as hold, deny
// and pause record theirs (docs/STEERING.md).
func TestApproveReasonE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	procs, _ := steerChain(t, dir, []string{"A", "B", "C"}, func(n string) []string {
		if n == "C" {
			return []string{"--approve", "--control", controlOf(dir, "C"), "--on-hold", `echo "$CHAINSYNC_HOLD" >> "$DIR/hook"`}
		}
		return nil
	})
	waitFile(t, filepath.Join(dir, "hook"), 20*time.Second)
	if code, _, errOut := steerCmd(t, "approve", "--control", controlOf(dir, "C"), "--by", "ann", "--reason", "row counts checked"); code != 0 {
		t.Fatalf("approve --reason exited %d: %s", code, errOut)
	}
	for _, n := range []string{"A", "B", "C"} {
		if code := procs[n].wait(t, 20*time.Second); code != 0 {
			t.Fatalf("%s exited %d", n, code)
		}
	}
	procs["C"].waitLog(t, time.Second, "approved by ann with the reason", containsAll("approved: the task starts", "by=ann", `reason="row counts checked"`))
}

// The page steers the Head through the dashboard (docs/STEERING.md, and
// docs/SERVE.md for open): a round opened from it runs, a pause names
// who paused and why on every node, a round cannot be opened while
// paused (the page is told why), resume, and a cancel or retry the Head
// refuses comes back with the Head's reason. Every request carries the
// page's token from its own origin, as the page's script sends it. The
// dashboard is given the Head's --control alone, with every node's
// address: it asks the socket which node it is (no --node).
func TestDashboardSteersTheHeadE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := []string{"A", "B", "C"}
	statuses := freeAddrs(t, len(names))
	servedChain(t, dir, names, func(n string) []string {
		return []string{"--status-addr", statuses[strings.Index("ABC", n)]}
	})
	dash := startProc(t, "dashboard", nil, "dashboard", "--listen", "127.0.0.1:0", "--control", controlOf(dir, "A"),
		"--user", "ann", strings.Join(statuses, ","))
	var url string
	waitFor(t, 20*time.Second, "the dashboard's URL", func() bool {
		out := dash.out.String()
		i := strings.Index(out, "http://")
		if i >= 0 {
			url = strings.Fields(out[i:])[0]
		}
		return i >= 0
	})
	get := func(path string) string {
		resp, err := http.Get(url + path)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor(t, 20*time.Second, "the Head's steering panel", func() bool {
		return strings.Contains(get("view"), `"ops":["hold","release","approve","deny","pause","resume","cancel","open","retry"]`)
	})
	page := get("")
	i := strings.Index(page, `name="chainsync-token" content="`)
	if i < 0 {
		t.Fatalf("no token on the page:\n%s", page)
	}
	token := page[i+len(`name="chainsync-token" content="`):]
	token = token[:strings.IndexByte(token, '"')]
	steer := func(body string, want int) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url+"steer", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Chainsync-Token", token)
		req.Header.Set("Origin", strings.TrimSuffix(url, "/"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %d %s, want %d", body, resp.StatusCode, b, want)
		}
		return string(b)
	}
	if out := steer(`{"op":"open","round":"h1"}`, 200); !strings.Contains(out, "opened round h1") {
		t.Fatalf("open: %s", out)
	}
	waitFor(t, 20*time.Second, "round h1 at C", func() bool { return slices.Contains(ranRounds(t, dir, "C"), "h1") })
	steer(`{"op":"pause","reason":"incident 4711"}`, 200)
	waitFor(t, 20*time.Second, "the pause, who and why, on the page", func() bool {
		v := get("view")
		return strings.Contains(v, `"what":"pause"`) && strings.Contains(v, `"by":"ann","reason":"incident 4711"`)
	})
	if out := steer(`{"op":"open","round":"h2"}`, 409); !strings.Contains(out, "paused") {
		t.Fatalf("open while paused: %s", out)
	}
	steer(`{"op":"resume"}`, 200)
	if out := steer(`{"op":"cancel","round":"nope","has_round":true}`, 409); !strings.Contains(out, "refused: ") {
		t.Fatalf("cancel of an unknown round: %s", out)
	}
	if out := steer(`{"op":"retry","round":"h1","has_round":true}`, 409); !strings.Contains(out, "done already") {
		t.Fatalf("retry of a round done: %s", out)
	}
}

// Off loopback, with --tls-cert, --tls-key and --tls-ca, the page is
// served over HTTPS to people with a certificate from the CA only (the
// draft's Security Considerations: mutual TLS); a node given as
// http://HOST:PORT is still read over plain HTTP.
func TestDashboardOffLoopbackOverMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, stderr := runBin(t, "certs", "--dir", dir, "--nodes", "dash,ann"); code != 0 {
		t.Fatalf("certs: %s", stderr)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	dash := startProc(t, "dashboard", nil, "dashboard", "--listen", "0.0.0.0:0", "--tls-cert", f("dash.pem"),
		"--tls-key", f("dash-key.pem"), "--tls-ca", f("ca.pem"), "http://127.0.0.1:9")
	var port string
	waitFor(t, 20*time.Second, "the dashboard's https URL", func() bool {
		out := dash.out.String()
		i := strings.Index(out, "https://")
		if i < 0 {
			return false
		}
		u := strings.TrimSuffix(strings.Fields(out[i:])[0], "/")
		port = u[strings.LastIndexByte(u, ':')+1:]
		return true
	})
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(f("ca.pem"))
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("ca.pem: %v", err)
	}
	ann, err := tls.LoadX509KeyPair(f("ann.pem"), f("ann-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, ServerName: "127.0.0.1"}}}
	}
	url := "https://127.0.0.1:" + port + "/view"
	waitFor(t, 20*time.Second, "the view over HTTPS with ann's certificate", func() bool {
		resp, err := client(ann).Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(b), `"addr":"http://127.0.0.1:9"`)
	})
	if resp, err := client().Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("a browser without a client certificate got %s", resp.Status)
	}
}
