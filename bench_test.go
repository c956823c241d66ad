//go:build unix

package chainsync

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/rawio"
)

// procCost is what the process has spent so far: CPU time, user and
// system, and goroutines created.
type procCost struct {
	user, sys  time.Duration
	goroutines uint64
}

func readProcCost() procCost {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	c := procCost{user: time.Duration(ru.Utime.Nano()), sys: time.Duration(ru.Stime.Nano())}
	if s[0].Value.Kind() == metrics.KindUint64 {
		c.goroutines = s[0].Value.Uint64()
	}
	return c
}

// minus is c less d.
func (c procCost) minus(d procCost) procCost {
	return procCost{user: c.user - d.user, sys: c.sys - d.sys, goroutines: c.goroutines - d.goroutines}
}

// reportCost reports what the process spent since c0, less what the
// floor's blocks spent meanwhile (other), per round: CPU time (user and
// system, milliseconds) and goroutines created. Unlike the latency, CPU
// time per round changes little with the machine's load.
func reportCost(b *testing.B, c0, other procCost, rounds int) {
	c := readProcCost().minus(other)
	per := func(d time.Duration) float64 { return float64(d) / float64(rounds) / 1e6 }
	b.ReportMetric(per(c.user-c0.user), "user-ms/round")
	b.ReportMetric(per(c.sys-c0.sys), "sys-ms/round")
	b.ReportMetric(float64(c.goroutines-c0.goroutines)/float64(rounds), "goroutines/round")
}

// pingPong is a raw TCP line ping-pong on loopback: its one-way latency
// is the floor every protocol hop pays at least once. It reads and
// writes as the nodes' links do (internal/rawio). The benchmarks measure
// it in turns with what they measure (a block of hops every floorEvery
// iterations, floor.add), so that both see the machine as it is that
// minute: its speed moves by a fifth from one minute to the next here.
// Blocks, not a few hops before each round: hops measured right after a
// round find the caches cold and come out 7-8% slower, which would
// flatter the ratio.
type pingPong struct {
	b *testing.B
	r *bufio.Reader
	w *rawio.Writer
}

// newPingPong connects a ping-pong on loopback and warms it up.
func newPingPong(b *testing.B) *pingPong {
	c, echo := loopbackPair(b)
	go relayLines(echo, echo)
	p := &pingPong{b: b, r: bufio.NewReader(rawio.NewReader(c)), w: rawio.NewWriter(c)}
	p.hops(4000) // warm up
	return p
}

// loopbackPair returns the two ends of a TCP connection on loopback,
// closed when b ends.
func loopbackPair(b testing.TB) (dialed, accepted net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); ch <- c }()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	accepted = <-ch
	if accepted == nil {
		b.Fatal("loopback accept failed")
	}
	b.Cleanup(func() { dialed.Close(); accepted.Close() })
	return dialed, accepted
}

// relayLines writes each line read from in on to out, as the nodes'
// links read and write (internal/rawio), until either fails.
func relayLines(in, out net.Conn) {
	r, w := bufio.NewReader(rawio.NewReader(in)), rawio.NewWriter(out)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		if _, err := w.Write(line); err != nil {
			return
		}
	}
}

// hops sends a line back and forth until it has made k one-way hops (k
// even) and returns the time that took.
func (p *pingPong) hops(k int) time.Duration {
	msg := []byte("READY:r1\n")
	t0 := time.Now()
	for range k / 2 {
		p.w.Write(msg)
		if _, err := p.r.ReadSlice('\n'); err != nil {
			p.b.Fatal(err)
		}
	}
	return time.Since(t0)
}

// floorEvery is how many benchmark iterations run between two blocks of
// the floor's hops; a block has at least minFloorBlock hops, so that
// its first few (cold) count little.
const (
	floorEvery    = 20
	minFloorBlock = 2000
)

// floor is the ping-pong floor measured in turns with a benchmark whose
// iterations make hops one-way hops each.
type floor struct {
	pp         *pingPong
	hops       int
	spent      time.Duration // in the floor's hops
	cost       procCost      // what the process spent in them
	done, iter int           // the floor's hops so far; iterations seen
}

// add measures a block of the floor's hops before every floorEvery-th
// iteration (the first included). Call it before each iteration.
func (f *floor) add() {
	if f.iter%floorEvery == 0 {
		k := max(floorEvery*f.hops, minFloorBlock)
		c0 := readProcCost()
		f.spent += f.pp.hops(k)
		c := readProcCost().minus(c0)
		f.cost.user, f.cost.sys = f.cost.user+c.user, f.cost.sys+c.sys
		f.done += k
	}
	f.iter++
}

// report reports the hop floor and x-floor: spent, the time the rounds
// of hops took, against the floor's time for as many hops.
func (f *floor) report(b *testing.B, spent time.Duration, rounds int) {
	perHop := float64(f.spent) / float64(f.done)
	b.ReportMetric(perHop/1e3, "us/hop-floor")
	b.ReportMetric(float64(spent)/(perHop*float64(rounds*f.hops)), "x-floor")
}

// BenchmarkRound measures one round's latency on an n-node chain in one
// process over real loopback TCP, with empty tasks. x-floor is that
// latency divided by that of 4(n-1) one-way raw TCP hops (pingPong),
// measured in turns with the rounds; the CPU time and goroutines the
// process spent per round are reported too. The task=goroutine cases run
// each task on a goroutine of its own (the default, for tasks that may
// block); task=quick sets Config.QuickTask.
func BenchmarkRound(b *testing.B) {
	for _, quick := range []bool{false, true} {
		mode := "task=goroutine"
		if quick {
			mode = "task=quick"
		}
		for _, n := range []int{2, 4, 16, 64} {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) { benchRound(b, n, quick) })
		}
	}
}

func benchRound(b *testing.B, n int, quick bool) {
	pp := newPingPong(b)
	cfgs := tcpChainConfigs(b, n)
	for i := range cfgs {
		cfgs[i].MaxRounds = 1 << 20
		cfgs[i].QuickTask = quick
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	nodes := startAll(b, cfgs, order)
	ctx := context.Background()
	run := func(id string) time.Duration {
		for i := n - 1; i > 0; i-- {
			nodes[i].Ready(id)
		}
		t0 := time.Now()
		nodes[0].Ready(id)
		if res, err := nodes[0].Wait(ctx, id); err != nil || res.Status != StatusDone {
			b.Fatalf("round %s: %+v %v", id, res, err)
		}
		return time.Since(t0)
	}
	for i := range 50 { // warm up: links up, code paths hot
		run(fmt.Sprint("w", i))
	}
	fl := floor{pp: pp, hops: 4 * (n - 1)}
	var total time.Duration
	b.ResetTimer()
	c0 := readProcCost()
	for i := 0; b.Loop(); i++ {
		fl.add()
		total += run(fmt.Sprint("r", i))
	}
	reportCost(b, c0, fl.cost, b.N)
	per := total / time.Duration(b.N)
	b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/round")
	fl.report(b, total, b.N)
}

// BenchmarkRelay is a reference, not ChainSync: a line relayed through 60
// raw TCP hops (goroutines that read a line and write it on, as the
// nodes' links read and write: internal/rawio), reported against the
// same ping-pong floor, measured in turns with it. It shows what a chain
// of hops costs before any protocol work: x-floor here is the best
// BenchmarkRound could do, and its CPU time per round what a round's
// hops cost before the nodes do anything.
func BenchmarkRelay(b *testing.B) {
	const hops = 60 // 4(n-1) for n=16
	pp := newPingPong(b)
	ins := make([]net.Conn, hops)  // where hop i reads
	outs := make([]net.Conn, hops) // where hop i-1 writes
	for i := range hops {
		outs[i], ins[i] = loopbackPair(b)
	}
	for i := 0; i < hops-1; i++ {
		go relayLines(ins[i], outs[i+1])
	}
	last := bufio.NewReader(rawio.NewReader(ins[hops-1]))
	first := rawio.NewWriter(outs[0])
	msg := []byte("READY:r1\n")
	fl := floor{pp: pp, hops: hops}
	var total time.Duration
	c0 := readProcCost()
	for b.Loop() {
		fl.add()
		t0 := time.Now()
		first.Write(msg)
		if _, err := last.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
	}
	reportCost(b, c0, fl.cost, b.N)
	fl.report(b, total, b.N)
}

// BenchmarkPipelined measures throughput on a 4-node chain that keeps 64
// rounds in flight (a new round starts as soon as one ends at the Head),
// with empty tasks, one task at a time per node, each checked to run
// exactly once and in chain order. task=quick sets Config.QuickTask.
func BenchmarkPipelined(b *testing.B) {
	for _, quick := range []bool{false, true} {
		mode := "task=goroutine"
		if quick {
			mode = "task=quick"
		}
		b.Run(mode, func(b *testing.B) { benchPipelined(b, quick) })
	}
}

func benchPipelined(b *testing.B, quick bool) {
	const n, inFlight = 4, 64
	var (
		mu    sync.Mutex
		next  = map[string]int{} // round -> the node whose task runs next
		wrong atomic.Int64
		done  = make(chan struct{}, inFlight)
	)
	cfgs := tcpChainConfigs(b, n)
	for i := range cfgs {
		cfgs[i].MaxRounds = 1 << 20
		cfgs[i].QuickTask = quick
		cfgs[i].Task = func(_ context.Context, round string) error {
			mu.Lock()
			if next[round] != i {
				wrong.Add(1)
			}
			next[round] = i + 1
			mu.Unlock()
			return nil
		}
	}
	cfgs[0].Trace = func(ev TraceEvent) {
		if ev.Kind == TraceRoundDone {
			done <- struct{}{}
		}
	}
	nodes := make([]*Node, n)
	for i, c := range cfgs {
		nd, err := Start(c)
		if err != nil {
			b.Fatal(err)
		}
		nodes[i] = nd
		defer nd.Close()
	}
	start := func(k int) {
		id := "p" + strconv.Itoa(k)
		for i := n - 1; i >= 0; i-- {
			nodes[i].Ready(id)
		}
	}
	rounds := 0
	for ; rounds < inFlight; rounds++ {
		start(rounds)
	}
	t0 := time.Now()
	finished := 0
	for b.Loop() {
		<-done
		finished++
		start(rounds)
		rounds++
	}
	elapsed := time.Since(t0)
	for ; finished < rounds; finished++ {
		<-done
	}
	mu.Lock()
	defer mu.Unlock()
	for id, k := range next {
		if k != n {
			b.Fatalf("round %s: %d of %d tasks ran", id, k, n)
		}
	}
	if wrong.Load() != 0 || len(next) != rounds {
		b.Fatalf("%d tasks out of order; %d of %d rounds ran", wrong.Load(), len(next), rounds)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rounds/s")
}
