//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Draft "Protocol Operation", with the project's reconnect rule: on a
// fault-free chain started Head first, so that each node's READY waits for
// a successor that is not running yet, nothing is a re-send: no log line
// says resend=true, chainsync_messages_resent_total stays 0 on every node,
// no trace record is marked resend and chainsync trace render draws no
// dashed (re-sent) arrow.
func TestFaultFreeChainHasNoResendsE2E(t *testing.T) {
	dir := t.TempDir()
	addrs := freeAddrs(t, 6)
	names := []string{"A", "B", "C"}
	chain := chainOf(names, addrs)
	statusAddrs := addrs[3:]
	procs := make([]*proc, len(names))
	for i, nm := range names {
		task := "true"
		if i == len(names)-1 {
			task = fmt.Sprintf("touch %s/C-started; while [ ! -f %s/go ]; do sleep 0.05; done", dir, dir)
		}
		procs[i] = startProc(t, nm, nil, "run", "--chain", chain, "--name", nm,
			"--status-addr", statusAddrs[i], "--trace", filepath.Join(dir, nm+".jsonl"), "--", "sh", "-c", task)
		if i < len(names)-1 {
			// Its READY waits for the successor, which is started next.
			procs[i].waitLog(t, 20*time.Second, "queueing READY for the successor",
				containsAll("message will be sent on reconnect", "READY"))
		}
	}
	waitFile(t, filepath.Join(dir, "C-started"), 20*time.Second)

	// READY went A->B->C, START back, COMPLETE A->B->C: all on the wire
	// now, each counted once, none as a re-send.
	m := messageTotals(t, statusAddrs)
	for _, cmd := range []string{"READY", "START", "COMPLETE"} {
		if m["sent "+cmd] != 2 {
			t.Errorf("sent %s = %v, want 2 (all: %v)", cmd, m["sent "+cmd], m)
		}
	}
	for i, a := range statusAddrs {
		found := 0
		for _, line := range strings.Split(httpGet(t, "http://"+a+"/metrics"), "\n") {
			if strings.HasPrefix(line, "chainsync_messages_resent_total{") {
				found++
				if !strings.HasSuffix(line, "} 0") {
					t.Errorf("%s: %s, want 0 on a fault-free chain", names[i], line)
				}
			}
		}
		if found != 3 {
			t.Errorf("%s: %d chainsync_messages_resent_total samples, want one per command", names[i], found)
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
	args := []string{"trace", "render"}
	sent, received := 0, 0
	for i, p := range procs {
		if strings.Contains(p.err.String(), "resend=") {
			t.Errorf("%s logged a re-send on a fault-free chain:\n%s", p.name, p.err.String())
		}
		trace := filepath.Join(dir, names[i]+".jsonl")
		b, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"resend"`) {
			t.Errorf("%s's trace marks a re-send on a fault-free chain:\n%s", names[i], b)
		}
		if !strings.Contains(string(b), `"kind":"queued"`) && i < len(names)-1 {
			t.Errorf("%s's trace shows no message queued for a link not yet up:\n%s", names[i], b)
		}
		sent += strings.Count(string(b), `"kind":"sent"`)
		received += strings.Count(string(b), `"kind":"received"`)
		args = append(args, trace)
	}
	if sent != received {
		t.Errorf("the traces hold %d sent records for %d received: a queued message has one sent record, when it goes out", sent, received)
	}
	svgPath := filepath.Join(dir, "ladder.svg")
	out, stderr, code := runCLI(t, append(args, "-o", svgPath)...)
	if code != 0 {
		t.Fatalf("trace render: exit %d\n%s%s", code, out, stderr)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, msgs := svgLanesAndMessages(t, svg); msgs[""] != 8 {
		t.Errorf("ladder has %d messages, want 4(n-1) = 8", msgs[""])
	}
	if strings.Contains(string(svg), `data-resend="true"`) || strings.Contains(string(svg), "re-send") {
		t.Error("trace render draws a re-sent message on a fault-free chain")
	}
}
