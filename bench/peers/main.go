// Command peers measures ChainSync rounds against other ways to run the
// same rounds, each as a ratio measured in one run on one machine:
//
//   - etcd, embedded in this process (a single member, write-ahead log
//     fsynced), with its DoubleBarrier recipe and with a hand-written
//     ordered barrier, one client per participant; compared with
//     ChainSync in one process;
//   - the draft author's Python reference implementation, one process per
//     node, where python3 and a checkout of it are given; compared with
//     ChainSync with one process per node.
//
// A round is the same everywhere: n participants, every one ready, then
// the (empty) tasks in order 0..n-1, then every one done; participant 0
// is ready last and times the round. It lives in its own module so that
// the chainsync library keeps no dependencies.
//
// Usage (from bench/peers):
//
//	go run . --n 16 --rounds 30
//	go run . --n 4,16 --reference /path/to/ChainSync --markdown --json peers.json --svg peers.svg
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/internal/bench"
)

// row is one system's figures at one n.
type row struct {
	N       int         `json:"n"`
	System  string      `json:"system"`
	Stats   bench.Stats `json:"latency"`
	Against string      `json:"against"` // the ChainSync row it is compared with
	Ratio   float64     `json:"ratio"`   // this median / that median
}

type report struct {
	Machine  bench.Machine     `json:"machine"`
	Versions map[string]string `json:"versions"`
	Rounds   int               `json:"rounds"`
	Warmup   int               `json:"warmup"`
	Command  string            `json:"command"`
	Rows     []row             `json:"rows"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agent" { // a ChainSync node of --mode procs
		os.Exit(bench.AgentMain(os.Stdin, os.Stdout, os.Stderr))
	}
	var (
		ns         = flag.String("n", "16", "chain lengths, `N,N,...`")
		rounds     = flag.Int("rounds", 30, "measured rounds per system")
		warmup     = flag.Int("warmup", 3, "unmeasured rounds first")
		reference  = flag.String("reference", os.Getenv("CHAINSYNC_REFERENCE"), "a checkout of the Python reference implementation (`DIR` holding python3/chainsync.py); env CHAINSYNC_REFERENCE")
		python     = flag.String("python", "python3", "the Python interpreter for the reference")
		skipEtcd   = flag.Bool("no-etcd", false, "skip etcd")
		noFsync    = flag.Bool("etcd-no-fsync", false, "run etcd without fsync (unsafe; shows what the disk costs)")
		jsonOut    = flag.String("json", "", "also write the figures as JSON into `FILE`")
		markdown   = flag.Bool("markdown", false, "print a Markdown table")
		svgFile    = flag.String("svg", "", "plot median latency per system against n into `FILE`")
		timeoutOpt = flag.Duration("timeout", 10*time.Minute, "give up after this long")
		from       = flag.String("from", "", "measure nothing: read the figures from a JSON `FILE` written by --json and print or plot them")
	)
	flag.Parse()
	if *from != "" {
		b, err := os.ReadFile(*from)
		if err != nil {
			fatalf("--from: %v", err)
		}
		var rep report
		if err := json.Unmarshal(b, &rep); err != nil {
			fatalf("--from %s: %v", *from, err)
		}
		var nlist []int
		for _, x := range rep.Rows {
			if !slices.Contains(nlist, x.N) {
				nlist = append(nlist, x.N)
			}
		}
		output(rep, nlist, *markdown, "", *svgFile)
		return
	}
	var nlist []int
	for f := range strings.SplitSeq(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			fatalf("--n %q: want chain lengths of at least 2, e.g. --n 4,16", *ns)
		}
		nlist = append(nlist, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeoutOpt)
	defer cancel()

	rep := report{Machine: bench.ThisMachine(), Versions: versions(), Rounds: *rounds, Warmup: *warmup,
		Command: "cd bench/peers && go run . " + strings.Join(os.Args[1:], " ")}
	var refDir string
	if *reference != "" {
		var err error
		if refDir, err = findReference(*reference); err != nil {
			fatalf("%v", err)
		}
		rep.Versions["python"] = pythonVersion(*python)
		rep.Versions["reference chainsync.py sha256"] = fileHash(filepath.Join(refDir, "chainsync.py"))
	}
	exe, err := os.Executable()
	if err != nil {
		fatalf("%v", err)
	}
	var srv *etcdServer
	if !*skipEtcd {
		if srv, err = startEtcd(*noFsync); err != nil {
			fatalf("%v", err)
		}
		defer srv.close()
	}
	for _, n := range nlist {
		opts := bench.Options{Ns: []int{n}, Mode: bench.ModeInproc, Rounds: *rounds, Warmup: *warmup, Concurrent: 1}
		progress("n=%d: ChainSync, one process", n)
		inproc, err := bench.Execute(ctx, opts)
		if err != nil {
			fatalf("ChainSync inproc n=%d: %v", n, err)
		}
		csIn := inproc.Results[0].Chain
		rep.Rows = append(rep.Rows, row{N: n, System: "ChainSync, one process", Stats: csIn, Against: "ChainSync, one process", Ratio: 1})
		rep.Rows = append(rep.Rows, row{N: n, System: "raw-TCP relay floor, one process", Stats: inproc.Results[0].Floor,
			Against: "ChainSync, one process", Ratio: inproc.Results[0].Floor.Median / csIn.Median})
		if srv != nil {
			for _, db := range []bool{false, true} {
				name := "etcd, hand-written ordered barrier"
				if db {
					name = "etcd, DoubleBarrier recipe + ordered hand-off"
				}
				progress("n=%d: %s", n, name)
				lat, err := etcdRounds(ctx, srv.url, n, *warmup, *rounds, db)
				if err != nil {
					fatalf("%s n=%d: %v", name, n, err)
				}
				st := bench.Summarise(lat)
				rep.Rows = append(rep.Rows, row{N: n, System: name, Stats: st, Against: "ChainSync, one process", Ratio: st.Median / csIn.Median})
			}
		}
		if refDir != "" {
			progress("n=%d: ChainSync, one process per node", n)
			opts.Mode, opts.AgentCmd = bench.ModeProcs, []string{exe, "agent"}
			procs, err := bench.Execute(ctx, opts)
			if err != nil {
				fatalf("ChainSync procs n=%d: %v", n, err)
			}
			csPr := procs.Results[0].Chain
			rep.Rows = append(rep.Rows, row{N: n, System: "ChainSync, process per node", Stats: csPr, Against: "ChainSync, process per node", Ratio: 1})
			progress("n=%d: Python reference, one process per node", n)
			lat, err := pythonRounds(ctx, *python, refDir, n, *warmup, *rounds)
			if err != nil {
				fatalf("Python reference n=%d: %v", n, err)
			}
			st := bench.Summarise(lat)
			rep.Rows = append(rep.Rows, row{N: n, System: "Python reference, process per node", Stats: st, Against: "ChainSync, process per node", Ratio: st.Median / csPr.Median})
		}
	}
	output(rep, nlist, *markdown, *jsonOut, *svgFile)
}

// output prints the table and writes the JSON and SVG files asked for.
func output(rep report, nlist []int, markdown bool, jsonFile, svgFile string) {
	if jsonFile != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(jsonFile, append(b, '\n'), 0o644); err != nil {
			fatalf("--json: %v", err)
		}
	}
	if markdown {
		writeMarkdown(os.Stdout, rep)
	} else {
		writeText(os.Stdout, rep)
	}
	if svgFile != "" {
		f, err := os.Create(svgFile)
		if err != nil {
			fatalf("--svg: %v", err)
		}
		if err := writeSVG(f, rep, nlist); err != nil {
			fatalf("--svg: %v", err)
		}
		if err := f.Close(); err != nil {
			fatalf("--svg: %v", err)
		}
	}
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "peers: "+format+"\n", a...)
	os.Exit(1)
}

func progress(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }

// versions names the modules this binary was built with.
func versions() map[string]string {
	v := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/client/v3", "go.etcd.io/bbolt", "go.etcd.io/raft/v3", "google.golang.org/grpc":
				v[d.Path] = d.Version
			}
		}
	}
	return v
}

func findReference(dir string) (string, error) {
	for _, d := range []string{filepath.Join(dir, "python3"), dir} {
		if _, err := os.Stat(filepath.Join(d, "chainsync.py")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("--reference %s: no chainsync.py there or in its python3/ folder; give a checkout of the reference implementation", dir)
}

func pythonVersion(py string) string {
	out, err := exec.Command(py, "--version").CombinedOutput()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

func fileHash(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unreadable"
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))[:16]
}

func freePorts(k int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range k {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// pythonRounds runs an n-node chain of the reference implementation, one
// process per node (pyref_driver.py beside this file), and returns the
// Head's round latencies.
func pythonRounds(ctx context.Context, py, refDir string, n, warmup, rounds int) ([]time.Duration, error) {
	driver, err := driverPath()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}()
	var headOut io.Reader
	var headErr strings.Builder
	for i := n - 1; i >= 0; i-- { // the Tail first: each node dials its successor
		args := []string{driver, "--reference", refDir, "--id", "N" + strconv.Itoa(i),
			"--warmup", strconv.Itoa(warmup), "--rounds", strconv.Itoa(rounds)}
		if i > 0 {
			args = append(args, "--listen-port", strconv.Itoa(ports[i]))
		}
		if i < n-1 {
			args = append(args, "--succ-port", strconv.Itoa(ports[i+1]))
		}
		c := exec.CommandContext(ctx, py, args...)
		if i == 0 {
			out, err := c.StdoutPipe()
			if err != nil {
				return nil, err
			}
			headOut = out
			c.Stderr = &headErr
		}
		if err := c.Start(); err != nil {
			return nil, err
		}
		cmds = append(cmds, c)
	}
	line, err := bufio.NewReader(headOut).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("the Head said nothing: %v; stderr: %s", err, headErr.String())
	}
	var res struct {
		Latencies []float64 `json:"latencies"`
		Error     string    `json:"error"`
	}
	if err := json.Unmarshal(line, &res); err != nil {
		return nil, fmt.Errorf("the Head's output %q: %v", line, err)
	}
	if res.Error != "" {
		return nil, errors.New(res.Error)
	}
	var lat []time.Duration
	for _, s := range res.Latencies {
		lat = append(lat, time.Duration(s*1e9))
	}
	if len(lat) != rounds {
		return nil, fmt.Errorf("the Head measured %d rounds, want %d", len(lat), rounds)
	}
	return lat, nil
}

// driverPath finds pyref_driver.py: beside the source (go run from
// bench/peers) or beside the binary.
func driverPath() (string, error) {
	cands := []string{"pyref_driver.py"}
	if exe, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(exe), "pyref_driver.py"))
	}
	for _, c := range cands {
		if _, err := os.Stat(c); err == nil {
			return filepath.Abs(c)
		}
	}
	return "", errors.New("pyref_driver.py not found: run from bench/peers (go run .)")
}
