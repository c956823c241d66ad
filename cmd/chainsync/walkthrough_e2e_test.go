//go:build unix

package main

// The README's "Three machines with TLS" walkthrough, run verbatim: every
// shell block of that section is taken from README.md and run as it is,
// each in a fresh shell (so no block can lean on a variable set by an
// earlier one), with one machine playing the three, as the README says it
// can. Draft: "Security Considerations" (mutual TLS), "Protocol Operation"
// (the round the walkthrough runs); docs/DESIGN.md "Roles and connections".

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// walkBlock is one shell block of the walkthrough and the name its marker
// (<!-- walkthrough NAME -->) gives it.
type walkBlock struct {
	name, body string
}

var walkMarker = regexp.MustCompile("(?m)^<!-- walkthrough ([a-zA-Z-]+) -->\n\n?```sh\n")

// walkthroughBlocks returns the shell blocks of the README's "Three
// machines with TLS" section, in order, and fails if a shell block there has
// no marker (every block must be one the test runs).
func walkthroughBlocks(t *testing.T) []walkBlock {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n## Three machines with TLS\n")
	if i < 0 {
		t.Fatal(`README.md has no "## Three machines with TLS" section`)
	}
	sec := text[i+1:]
	if j := strings.Index(sec[3:], "\n## "); j >= 0 {
		sec = sec[:j+4]
	}
	var blocks []walkBlock
	for _, m := range walkMarker.FindAllStringSubmatchIndex(sec, -1) {
		start := m[1]
		end := strings.Index(sec[start:], "\n```")
		if end < 0 {
			t.Fatalf("walkthrough block %q does not end", sec[m[2]:m[3]])
		}
		blocks = append(blocks, walkBlock{name: sec[m[2]:m[3]], body: sec[start : start+end+1]})
	}
	// Every sh block of the section is a marked one.
	if n := len(regexp.MustCompile("(?m)^```sh\n").FindAllString(sec, -1)); n != len(blocks) {
		t.Fatalf("the walkthrough has %d sh blocks, %d of them marked <!-- walkthrough NAME -->: mark every one, so the test runs it", n, len(blocks))
	}
	return blocks
}

// TestWalkthroughThreeMachinesTLS runs the walkthrough: install with go
// install, certificates, the files for each machine with their modes,
// check on the three machines side by side, run on the three, and status
// while the round runs. As root it runs in a network namespace of its own,
// so the fixed ports of the README (7000, 9000 on 127.0.0.1-3) cannot
// collide with anything else on the machine; otherwise on the machine's
// loopback, if those ports are free.
func TestWalkthroughThreeMachinesTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command with go install and runs a 3-node round: not in -short")
	}
	blocks := walkthroughBlocks(t)
	byName := map[string]string{}
	var order []string
	for _, b := range blocks {
		if _, dup := byName[b.name]; dup {
			t.Fatalf("two walkthrough blocks are named %q", b.name)
		}
		byName[b.name] = b.body
		order = append(order, b.name)
	}
	want := []string{"install", "certs", "files", "copy", "check-A", "check-B", "check-C", "run-A", "run-B", "run-C", "status"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Fatalf("walkthrough blocks %v, want %v in that order", order, want)
	}

	// Where the blocks run: a namespace of our own as root, else the host.
	var prefix []string
	if os.Geteuid() == 0 {
		if tp := tryNamespace(t); tp != nil {
			prefix = []string{tp.ip, "netns", "exec", tp.ns["W"]}
		}
	}
	if prefix == nil {
		for _, host := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
			for _, port := range []string{"7000", "9000"} {
				ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
				if err != nil {
					t.Skipf("the walkthrough's address %s:%s is not free here (and no network namespace of our own): %v", host, port, err)
				}
				ln.Close()
			}
		}
	}

	home := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	// A fresh HOME, as on a new machine; the build cache stays the
	// machine's, so that go install does not rebuild the standard library.
	env := []string{"HOME=" + home, "GOCACHE=" + strings.TrimSpace(string(gocache)), "GOPATH=", "GOBIN="}
	// run executes a block to its end and returns its stdout; a failing
	// block fails the test with its output.
	run := func(name, dir string, d time.Duration, extra ...string) string {
		t.Helper()
		args := append(append([]string{}, prefix...), "bash", "-e", "-c", byName[name])
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(append(cleanEnv(), env...), extra...)
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(d):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("block %q did not finish within %v:\n%s", name, d, out)
		}
		if err != nil {
			t.Fatalf("block %q failed: %v\n%s\n---- the block:\n%s", name, err, out, byName[name])
		}
		return string(out)
	}

	// 1. Install: go install puts the binary in $(go env GOPATH)/bin, that
	// is $HOME/go/bin here; the README's PATH line is what later shells get.
	out := run("install", repo, 5*time.Minute)
	if !strings.Contains(out, "chainsync") {
		t.Errorf("chainsync version printed %q", out)
	}
	gobin := filepath.Join(home, "go", "bin")
	if _, err := os.Stat(filepath.Join(gobin, "chainsync")); err != nil {
		t.Fatalf("go install did not put chainsync where the README's PATH line looks: %v", err)
	}
	path := "PATH=" + gobin + string(os.PathListSeparator) + os.Getenv("PATH")

	// 2, 3. Certificates, and each machine's files with their modes.
	run("certs", home, time.Minute, path)
	run("files", home, time.Minute, path)
	for _, n := range []string{"A", "B", "C"} {
		dir := filepath.Join(home, "chainsync-ca", "for-"+n)
		checkMode(t, filepath.Join(dir, "ca.pem"), 0o644)
		checkMode(t, filepath.Join(dir, n+".pem"), 0o644)
		checkMode(t, filepath.Join(dir, n+"-key.pem"), 0o600)
		if entries, _ := os.ReadDir(dir); len(entries) != 3 {
			t.Errorf("%s holds %d files, want exactly ca.pem, %s.pem, %s-key.pem", dir, len(entries), n, n)
		}
	}
	run("copy", home, time.Minute, path)
	checkMode(t, filepath.Join(home, "chainsync"), os.ModeDir|0o700)

	// 4. check on the three machines at once: every link checks out.
	checks := map[string]chan string{}
	for _, n := range []string{"A", "B", "C"} {
		c := make(chan string, 1)
		checks[n] = c
		go func() {
			args := append(append([]string{}, prefix...), "bash", "-e", "-c", byName["check-"+n])
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir = home
			cmd.Env = append(append(cleanEnv(), env...), path)
			b, err := cmd.CombinedOutput()
			if err != nil {
				c <- "FAILED (" + err.Error() + "):\n" + string(b)
				return
			}
			c <- string(b)
		}()
	}
	for _, n := range []string{"A", "B", "C"} {
		select {
		case got := <-checks[n]:
			if strings.HasPrefix(got, "FAILED") || strings.Contains(got, "FAIL") {
				t.Fatalf("check on %s: %s", n, got)
			}
			if !strings.Contains(got, "mutual TLS 1.3") {
				t.Errorf("check on %s does not report mutual TLS 1.3:\n%s", n, got)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("check on %s did not finish", n)
		}
	}

	// 5. run on the three machines, in the README's order of blocks.
	procs := map[string]*proc{}
	for _, n := range []string{"A", "B", "C"} {
		args := append(append([]string{}, prefix...), "bash", "-e", "-c", byName["run-"+n])
		procs[n] = launch(t, n, append(append([]string{}, env...), path), "block run-"+n, true, args[0], args[1:]...)
	}
	for _, n := range []string{"A", "B", "C"} {
		procs[n].waitLog(t, time.Minute, "status endpoint up", containsAll("status endpoint up"))
	}
	for _, n := range []string{"A", "B", "C"} {
		procs[n].waitLog(t, time.Minute, "link up", containsAll("link up"))
	}

	// 6. status while the round runs (the tasks take 2 s each).
	out = run("status", home, time.Minute, path)
	if !strings.Contains(out, "chain A -> B -> C: 3 node(s) asked, 3 answered") {
		t.Errorf("status:\n%s", out)
	}

	for _, n := range []string{"A", "B", "C"} {
		if code := procs[n].wait(t, 2*time.Minute); code != 0 {
			t.Errorf("node %s exited %d, want 0", n, code)
		}
		if got := procs[n].out.String(); !strings.Contains(got, n+" upgrading") {
			t.Errorf("node %s's task printed %q", n, got)
		}
	}
}

// tryNamespace makes a network namespace with its loopback up, or returns
// nil where this machine cannot.
func tryNamespace(t *testing.T) *netnsTopo {
	t.Helper()
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil
	}
	tp := &netnsTopo{ip: ip, ns: map[string]string{}}
	name := fmt.Sprintf("cswalk%d-%d", os.Getpid(), netnsSeq.Add(1))
	if _, err := tp.runIP("netns", "add", name); err != nil {
		t.Logf("no network namespace (%v): running on the machine's loopback", err)
		return nil
	}
	t.Cleanup(func() { _, _ = tp.runIP("netns", "del", name) })
	tp.ns["W"] = name
	if _, err := tp.runIP("-n", name, "link", "set", "lo", "up"); err != nil {
		t.Fatal(err)
	}
	return tp
}

// checkMode fails the test unless path has exactly mode (type and
// permission bits).
func checkMode(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	if got := fi.Mode() & (os.ModeDir | os.ModePerm); got != mode {
		t.Errorf("%s has mode %v, want %v", path, got, mode)
	}
}
