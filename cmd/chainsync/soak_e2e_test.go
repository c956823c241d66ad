//go:build unix

package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeSoak is a benchmark, not a CI test: a served chain of four
// processes, each with a --state-dir, runs rounds for CHAINSYNC_SOAK (for
// example 10m), the Head opening a round with a generated id whenever
// fewer than --max-open are in flight (--rounds-from - fed empty lines for
// ever). It reports each node's RSS and state directory size after one
// minute and at the end, and the sustained rounds per second, so that a
// chain that lives long is seen to stay flat.
//
//	CHAINSYNC_SOAK=10m go test -run TestServeSoak -v -timeout 15m ./cmd/chainsync
func TestServeSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("CHAINSYNC_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("a benchmark: set CHAINSYNC_SOAK=10m to run it")
	}
	dir := t.TempDir()
	names, addrs := nodeNames(4), freeAddrs(t, 4)
	statusAddr := freeAddrs(t, 1)[0]
	pids := make([]int, 4)
	for i := 3; i >= 0; i-- {
		args := append([]string{"run"}, placeArgs("prevnext", names, addrs, i)...)
		args = append(args, "--quiet", "--state-dir", filepath.Join(dir, names[i]))
		if i == 0 {
			args = append(args, "--rounds-from", "-", "--status-addr", statusAddr)
		} else {
			args = append(args, "--serve")
		}
		args = append(args, "--", "true")
		c := exec.Command(bin, args...)
		c.Env = cleanEnv()
		c.Stderr = os.Stderr
		if i == 0 {
			c.Stdin = endlessLines{}
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		pids[i] = c.Process.Pid
		t.Cleanup(func() { _ = c.Process.Signal(syscall.SIGTERM); _ = c.Wait() })
	}
	report := func(at string) float64 {
		done := headDone(t, statusAddr)
		var parts []string
		for i, pid := range pids {
			parts = append(parts, fmt.Sprintf("%s rss %.1f MiB state %.1f KiB", names[i], float64(rssKiB(t, pid))/1024, float64(dirSize(t, filepath.Join(dir, names[i])))/1024))
		}
		t.Logf("%s: %.0f rounds done; %s", at, done, strings.Join(parts, "; "))
		return done
	}
	// A soak runs for its duration: the minutes between reports are the
	// measurement, not a wait for something to happen. The rate counts
	// from the first report on, past the start-up.
	var start time.Time
	var n0 float64
	for m := 1; m == 1 || time.Duration(m)*time.Minute <= d; m++ {
		time.Sleep(time.Minute)
		at, n := time.Now(), report(fmt.Sprintf("after %d min", m))
		if m == 1 {
			start, n0 = at, n
		}
	}
	n1 := headDone(t, statusAddr)
	t.Logf("sustained %.0f rounds/s from 1 min on (4 processes, --state-dir on each, task `true`)", (n1-n0)/time.Since(start).Seconds())
}

// endlessLines is an endless stream of empty lines: a generated id each.
type endlessLines struct{}

func (endlessLines) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '\n'
	}
	return len(p), nil
}

var _ io.Reader = endlessLines{}

// headDone reads chainsync_rounds_total{outcome="done"} from a node's
// metrics.
func headDone(t *testing.T, addr string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `chainsync_rounds_total{outcome="done"} `); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func rssKiB(t *testing.T, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

func dirSize(t *testing.T, dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
