//go:build unix

package main

// End-to-end tests of what a running node tells people and tools: run
// --status-addr (GET /status, /healthz, /metrics), chainsync status on a
// stuck chain, run --trace and chainsync trace render, all on the built
// binary over real TCP.

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statusChain starts an n-node chain A, B, ... with --chain, each with a
// status endpoint and a trace file in dir; task(name) is each node's task.
// It returns the processes and the status addresses, in chain order.
func statusChain(t *testing.T, dir string, n int, task func(name string) string) ([]*proc, []string) {
	t.Helper()
	addrs := freeAddrs(t, 2*n)
	names := make([]string, n)
	var chain []string
	for i := range names {
		names[i] = string(rune('A' + i))
		chain = append(chain, names[i]+"="+addrs[i])
	}
	statusAddrs := addrs[n:]
	procs := make([]*proc, n)
	for i := n - 1; i >= 0; i-- {
		procs[i] = startProc(t, names[i], nil, "run", "--chain", strings.Join(chain, ","), "--name", names[i],
			"--status-addr", statusAddrs[i], "--trace", filepath.Join(dir, names[i]+".jsonl"),
			"--", "sh", "-c", task(names[i]))
	}
	return procs, statusAddrs
}

// runCLI runs the binary to completion and returns stdout, stderr and its
// exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	c := exec.Command(bin, args...)
	c.Env = cleanEnv()
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

// messageTotals sums chainsync_messages_total over nodes' /metrics, per
// "direction command". (internal/status tests the exposition with a
// strict parser; this reads the sample lines.)
func messageTotals(t *testing.T, addrs []string) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, a := range addrs {
		for _, line := range strings.Split(httpGet(t, "http://"+a+"/metrics"), "\n") {
			rest, ok := strings.CutPrefix(line, `chainsync_messages_total{direction="`)
			if !ok {
				continue
			}
			dir, rest, _ := strings.Cut(rest, `",command="`)
			cmd, val, _ := strings.Cut(rest, `"} `)
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			m[dir+" "+cmd] += v
		}
	}
	return m
}

// Draft sections "Protocol Flow" and "Error Handling" (people handling
// faults): on a four-node chain held up by the Tail's task, chainsync
// status names the Tail and what it waits for, in text and JSON, and the
// metrics show exactly the 3(n-1) messages so far; after the round, the
// traces of all four nodes render as a ladder with 4(n-1) messages.
func TestStatusMetricsTraceE2E(t *testing.T) {
	const n = 4
	dir := t.TempDir()
	procs, saddrs := statusChain(t, dir, n, func(name string) string {
		if name != "D" {
			return "true"
		}
		// The Tail says it started, then waits to be let go.
		return fmt.Sprintf("touch %s/D-started; while [ ! -f %s/go ]; do sleep 0.05; done", dir, dir)
	})
	waitFile(t, filepath.Join(dir, "D-started"), 20*time.Second)

	out, stderr, code := runCLI(t, "status", strings.Join(saddrs, ","))
	if code != 0 || !strings.Contains(out, "stuck at D") || !strings.Contains(out, "D is running its task") {
		t.Errorf("chainsync status: exit %d, want 0 and the round held up at D running its task\n%s%s", code, out, stderr)
	}
	for _, name := range []string{"A", "B", "C", "D"} {
		if !strings.Contains(out, "\n"+name+" ") {
			t.Errorf("chainsync status does not list node %s:\n%s", name, out)
		}
	}
	out, _, code = runCLI(t, "status", strings.Join(saddrs, ","), "--json") // flags may follow the addresses
	var chainDoc struct {
		Nodes []struct {
			Addr   string
			Status map[string]any
		}
		Rounds []struct {
			Node       string `json:"stuck_at"`
			WaitingFor string `json:"waiting_for"`
			From       string
		}
	}
	if err := json.Unmarshal([]byte(out), &chainDoc); err != nil || code != 0 {
		t.Fatalf("status --json: exit %d, %v\n%s", code, err, out)
	}
	if len(chainDoc.Rounds) != 1 || chainDoc.Rounds[0].Node != "D" || chainDoc.Rounds[0].WaitingFor != "task" {
		t.Errorf("status --json rounds: %+v, want held up at D waiting for its task", chainDoc.Rounds)
	}
	for i, nd := range chainDoc.Nodes {
		for _, k := range []string{"name", "role", "links", "rounds", "faults"} {
			if _, ok := nd.Status[k]; !ok {
				t.Errorf("node %d's status has no %q: %v", i, k, nd.Status)
			}
		}
	}
	// One node: B waits for COMPLETE from C (the exit wave).
	out, _, code = runCLI(t, "status", saddrs[1])
	if code != 0 || !strings.Contains(out, "B (middle)") || !strings.Contains(out, "COMPLETE from succ C") {
		t.Errorf("chainsync status B: exit %d\n%s", code, out)
	}
	if h := httpGet(t, "http://"+saddrs[2]+"/healthz"); h != "ok\n" {
		t.Errorf("/healthz: %q", h)
	}

	m := messageTotals(t, saddrs)
	for _, dir := range []string{"sent", "received"} {
		for _, cmd := range []string{"READY", "START", "COMPLETE"} {
			if m[dir+" "+cmd] != n-1 {
				t.Errorf("while the Tail's task runs: %s %s = %v, want n-1 = %d (all: %v)", dir, cmd, m[dir+" "+cmd], n-1, m)
			}
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}

	files := []string{"C.jsonl", "A.jsonl", "D.jsonl", "B.jsonl"} // any order
	args := []string{"trace", "render"}
	for _, f := range files {
		args = append(args, filepath.Join(dir, f))
	}
	svgPath := filepath.Join(dir, "ladder.svg")
	out, stderr, code = runCLI(t, append(args, "-o", svgPath)...)
	if code != 0 {
		t.Fatalf("trace render: exit %d\n%s%s", code, out, stderr)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	lanes, msgs := svgLanesAndMessages(t, svg)
	if !slices.Equal(lanes, []string{"A", "B", "C", "D"}) {
		t.Errorf("lanes %v, want A B C D", lanes)
	}
	if msgs[""] != 4*(n-1) || len(msgs) != 1 {
		t.Errorf("msg elements per round %v, want 4(n-1) = %d for the unnamed round", msgs, 4*(n-1))
	}
}

// svgLanesAndMessages parses an SVG strictly and returns its lanes in
// document order and its msg elements per round.
func svgLanesAndMessages(t *testing.T, svg []byte) ([]string, map[string]int) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	dec.Strict = true
	var lanes []string
	msgs := map[string]int{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed SVG: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			attr := map[string]string{}
			for _, a := range se.Attr {
				attr[a.Name.Local] = a.Value
			}
			switch attr["class"] {
			case "lane":
				lanes = append(lanes, attr["data-node"])
			case "msg":
				msgs[attr["data-round"]]++
			}
		}
	}
	return lanes, msgs
}

// Draft section "Error Handling": a node killed during its task does not
// answer; chainsync status says so, names it (as its neighbours call it),
// still prints the others, and exits 1.
func TestStatusUnreachableNodeE2E(t *testing.T) {
	dir := t.TempDir()
	procs, saddrs := statusChain(t, dir, 3, func(name string) string {
		if name != "B" {
			return "true"
		}
		return fmt.Sprintf("touch %s/B-started; for i in $(seq 600); do [ -f %s/go ] && exit 0; sleep 0.05; done", dir, dir)
	})
	t.Cleanup(func() { os.WriteFile(filepath.Join(dir, "go"), nil, 0o644) })
	waitFile(t, filepath.Join(dir, "B-started"), 20*time.Second)
	procs[1].signal(t, os.Kill)
	procs[1].wait(t, 10*time.Second)

	out, stderr, code := runCLI(t, "status", "--timeout", "2s", strings.Join(saddrs, ","))
	if code != 1 {
		t.Errorf("exit %d, want 1 (a node does not answer)", code)
	}
	if !strings.Contains(stderr, saddrs[1]) || !strings.Contains(stderr, "does not answer") {
		t.Errorf("stderr does not name the silent node's address %s:\n%s", saddrs[1], stderr)
	}
	if !strings.Contains(out, "stuck at B") || !strings.Contains(out, "does not answer") || !strings.Contains(out, "\nA ") || !strings.Contains(out, "\nC ") {
		t.Errorf("output does not blame B and list A and C:\n%s", out)
	}
	out, _, code = runCLI(t, "status", "nonsense")
	if code != 2 || out != "" {
		t.Errorf("bad address: exit %d, want 2", code)
	}
}

// A taken --status-addr or an unwritable --trace stops chainsync run
// before the node starts (exit 1, the reason on stderr); a malformed
// --status-addr is a usage error (exit 2).
func TestRunObserverErrorsE2E(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--status-addr", ln.Addr().String()}, 1, "--status-addr " + ln.Addr().String()},
		{[]string{"--trace", filepath.Join(t.TempDir(), "no", "dir", "t.jsonl")}, 1, "--trace"},
		{[]string{"--status-addr", "9000"}, 2, "want HOST:PORT"},
	} {
		args := append(append([]string{"run", "--next", "127.0.0.1:1"}, tc.args...), "--", "true")
		_, stderr, code := runCLI(t, args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d mentioning %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// TestStatusEscapesHostileNode (issue: chainsync status printed what a
// node sent, raw): a status endpoint whose name, peer, round, fault and
// error texts hold ESC sequences, BEL, CR/LF, a C1 CSI and a bidi override
// cannot write any of them to the terminal: the text output holds no
// control character but its own newlines, and no line of it starts with
// the forged text. --json is valid JSON that decodes to exactly what the
// node sent. Two hostile nodes that are a chain (the chain view) as well
// as one; the same address twice is refused (it is no chain), and the
// refusal, which quotes what the node sent, is escaped as well.
func TestStatusEscapesHostileNode(t *testing.T) {
	evil := func(s string) string { return s + "\x1b[2J\x1b]0;pwned\x07\r\nFORGED line\u009b31m\u202e\xff" }
	serve := func(name, pred, succ string) string {
		doc := map[string]any{
			"name": evil(name), "role": "middle", "version": evil("v"), "time": time.Now(),
			"links": map[string]any{
				"pred": map[string]any{"exists": true, "up": false, "peer": evil(pred)},
				"succ": map[string]any{"exists": true, "up": true, "peer": evil(succ)},
			},
			"rounds": []any{map[string]any{"round": evil("r"), "state": evil("READY"), "waiting_for": evil("START"),
				"from": "pred", "since": time.Now(), "doing": evil("d")}},
			"faults": []any{map[string]any{"kind": evil("k"), "peer": evil("P"), "side": "pred", "round": evil("r"),
				"time": time.Now(), "error": evil("e")}},
			"finished": []any{},
		}
		body, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	addr := serve("A", "P", "B")
	addrB := serve("B", "A", "S")
	noControl := func(what, out string) {
		t.Helper()
		for i, c := range []byte(out) {
			if c < 0x20 && c != '\n' || c == 0x7f {
				t.Fatalf("%s wrote control byte %#x at %d:\n%q", what, c, i, out)
			}
		}
		for _, bad := range []string{"\u009b", "\u202e", "\xff"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s wrote %q unescaped", what, bad)
			}
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "FORGED") {
				t.Errorf("%s printed a forged line: %q", what, l)
			}
		}
	}
	if _, stderr, code := runCLI(t, "status", addr+","+addr); code != 2 || !strings.Contains(stderr, "given twice") {
		t.Errorf("status with one address twice: exit %d, stderr %q; want 2 saying it is given twice", code, stderr)
	} else {
		noControl("status's refusal", stderr)
	}
	for _, addrs := range []string{addr, addr + "," + addrB} {
		out, stderr, code := runCLI(t, "status", addrs)
		if code != 0 {
			t.Fatalf("status %s: exit %d: %s", addrs, code, stderr)
		}
		noControl("status "+addrs, out)
		if !strings.Contains(out, `A\x1b[2J\x1b]0;pwned\x07\r\nFORGED line\u009b31m\u202e\ufffd`) {
			t.Errorf("status %s does not show the name escaped:\n%s", addrs, out)
		}
		jout, stderr, code := runCLI(t, "status", "--json", addrs)
		if code != 0 || !json.Valid([]byte(jout)) {
			t.Fatalf("status --json %s: exit %d, valid %v: %s\n%s", addrs, code, json.Valid([]byte(jout)), stderr, jout)
		}
		var one struct{ Name string }
		if addrs == addr {
			if err := json.Unmarshal([]byte(jout), &one); err != nil {
				t.Fatal(err)
			}
			// encoding/json (the sender here) sent the byte that is not UTF-8 as U+FFFD.
			if want := strings.ToValidUTF8(evil("A"), "\ufffd"); one.Name != want {
				t.Errorf("--json name %q, want %q", one.Name, want)
			}
		}
	}
}

// TestStatusOverMutualTLS (issue 16, status across organisations): a node
// with --tls-cert serves --status-addr over HTTPS and answers only a
// client whose certificate is from its --tls-ca or whose key is in its
// --status-pin; chainsync status takes --tls-cert/--tls-key and --tls-ca
// or --pin. Without a client certificate, with plain HTTP or with a key
// nobody listed, it is refused; a node with a certificate but neither
// --tls-ca nor --status-pin refuses to start (exit 2).
func TestStatusOverMutualTLS(t *testing.T) {
	t.Parallel()
	ours := makeCerts(t, "A,B")   // one organisation's CA: A is the node, B a colleague
	theirs := makeCerts(t, "X,Y") // another organisation: X is pinned, Y is not
	dir := t.TempDir()
	addr := freeAddrs(t, 1)[0]
	c := func(d, n string) []string {
		return []string{"--tls-cert", filepath.Join(d, n+".pem"), "--tls-key", filepath.Join(d, n+"-key.pem")}
	}
	pinA, pinX := pinOf(t, filepath.Join(ours, "A.pem")), pinOf(t, filepath.Join(theirs, "X.pem"))
	task := []string{"--", "sh", "-c", "while [ ! -e " + filepath.Join(dir, "go") + " ]; do sleep 0.05; done"}
	t.Cleanup(func() { os.WriteFile(filepath.Join(dir, "go"), nil, 0o644) })

	noReaders := startProc(t, "A", nil, append(append([]string{"run", "--name", "A", "--status-addr", addr}, c(ours, "A")...), task...)...)
	if code := noReaders.wait(t, 10*time.Second); code != 2 || !strings.Contains(noReaders.err.String(), "--status-pin") {
		t.Errorf("a certificate without --tls-ca or --status-pin: exit %d, want 2 naming --status-pin:\n%s", code, noReaders.err.String())
	}
	node := startProc(t, "A", nil, append(append([]string{"run", "--name", "A", "--status-addr", addr,
		"--tls-ca", filepath.Join(ours, "ca.pem"), "--status-pin", pinX}, c(ours, "A")...), task...)...)
	node.waitLog(t, 10*time.Second, "status endpoint up (https)", containsAll("status endpoint up", "https://"))

	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"colleague, same CA", append(c(ours, "B"), "--tls-ca", filepath.Join(ours, "ca.pem")), 0},
		{"other organisation, pinned both ways", append(c(theirs, "X"), "--pin", pinA), 0},
		{"plain HTTP", nil, 1},
		{"no client certificate", []string{"--tls-ca", filepath.Join(ours, "ca.pem")}, 1},
		{"a key nobody listed", append(c(theirs, "Y"), "--pin", pinA), 1},
		{"the node's key not the pinned one", append(c(theirs, "X"), "--pin", pinX), 1},
	} {
		out, stderr, code := runCLI(t, append(append([]string{"status", "--timeout", "3s"}, tc.args...), addr)...)
		if code != tc.want {
			t.Errorf("%s: exit %d, want %d:\n%s%s", tc.name, code, tc.want, out, stderr)
		}
		if tc.want == 0 && !strings.Contains(out, "A (single)") {
			t.Errorf("%s: no status of node A:\n%s", tc.name, out)
		}
		if tc.name == "plain HTTP" && !strings.Contains(stderr, "HTTPS") {
			t.Errorf("plain HTTP: the error does not say the node serves HTTPS:\n%s", stderr)
		}
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	if code := node.wait(t, 10*time.Second); code != 0 {
		t.Errorf("node exited %d", code)
	}
}
