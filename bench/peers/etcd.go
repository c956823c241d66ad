package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
	"go.etcd.io/etcd/server/v3/embed"
)

// etcdServer is a single-member etcd embedded in this process, with its
// data (and fsynced write-ahead log) in a temporary directory.
type etcdServer struct {
	e   *embed.Etcd
	dir string
	url string
}

func startEtcd(noFsync bool) (*etcdServer, error) {
	dir, err := os.MkdirTemp("", "chainsync-peers-etcd-")
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{os.DevNull} // its shutdown logs "errors" for closed listeners
	cfg.UnsafeNoFsync = noFsync
	// Loopback only, on ports of our own choosing.
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	cu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(ports[0]))
	pu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(ports[1]))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		os.RemoveAll(dir)
		return nil, errors.New("embedded etcd did not become ready within 60s")
	}
	return &etcdServer{e: e, dir: dir, url: cu.String()}, nil
}

func (s *etcdServer) close() {
	s.e.Close()
	os.RemoveAll(s.dir)
}

// etcdRounds runs rounds of n participants on etcd, one client (and
// connection) each, all in this process. A round is the same as a
// ChainSync round: every participant ready, then the tasks in order
// 0, 1, ..., n-1, then every participant done. Participant 0 plays the
// Head: the others are ready first, and the round's latency is from
// participant 0's ready to its seeing the round over.
//
// With doubleBarrier, "all ready" and "all done" are etcd's DoubleBarrier
// recipe (Enter, Leave); otherwise they are hand-written: each
// participant puts a ready key, and participant 0 starts once it sees all
// n, and the round is over when participant n-1's done key appears. In
// both, the task order is a hand-off: participant i waits for i-1's done
// key, runs its (empty) task, and puts its own.
func etcdRounds(ctx context.Context, endpoint string, n, warmup, rounds int, doubleBarrier bool) ([]time.Duration, error) {
	clients := make([]*clientv3.Client, n)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range clients {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second})
		if err != nil {
			return nil, err
		}
		clients[i] = c
	}
	var sessions []*concurrency.Session
	if doubleBarrier {
		for _, c := range clients {
			s, err := concurrency.NewSession(c, concurrency.WithTTL(60))
			if err != nil {
				return nil, err
			}
			defer s.Close()
			sessions = append(sessions, s)
		}
	}
	kind := "ordered"
	if doubleBarrier {
		kind = "double"
	}
	var lat []time.Duration
	for r := range warmup + rounds {
		prefix := fmt.Sprintf("/chainsync-peers/%s/%d/", kind, r)
		d, err := etcdRound(ctx, clients, sessions, prefix)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", r, err)
		}
		if r >= warmup {
			lat = append(lat, d)
		}
	}
	return lat, nil
}

func etcdRound(ctx context.Context, clients []*clientv3.Client, sessions []*concurrency.Session, prefix string) (time.Duration, error) {
	n := len(clients)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	done := func(i int) string { return prefix + "done/" + strconv.Itoa(i) }
	// Every participant watches the round's keys from before the round
	// starts, so that no wait pays for setting up a watch (or for a
	// watch that starts behind and is caught up only by etcd's periodic
	// sync of lagging watchers).
	watches := make([]*prefixWatch, n)
	for i, c := range clients {
		w, err := openWatch(ctx, c, prefix)
		if err != nil {
			return 0, err
		}
		watches[i] = w
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		firstEr error
		start   = make(chan struct{}) // participant 0 may become ready
		readyN  sync.WaitGroup        // the others have put their ready keys
		t0      time.Time
		elapsed time.Duration
	)
	fail := func(err error) {
		mu.Lock()
		if firstEr == nil {
			firstEr = err
		}
		mu.Unlock()
		cancel()
	}
	if sessions == nil {
		readyN.Add(n - 1)
	}
	for i := range n {
		wg.Go(func() {
			c, w := clients[i], watches[i]
			if i == 0 {
				<-start
				t0 = time.Now()
			}
			var b *recipe.DoubleBarrier
			if sessions != nil {
				b = recipe.NewDoubleBarrier(sessions[i], prefix+"barrier", n)
				if err := b.Enter(); err != nil {
					fail(fmt.Errorf("participant %d: Enter: %w", i, err))
					return
				}
			} else {
				if _, err := c.Put(ctx, prefix+"ready/"+strconv.Itoa(i), ""); err != nil {
					fail(err)
					return
				}
				if i > 0 {
					readyN.Done()
				} else if err := w.until(func() bool { return w.count(prefix+"ready/") >= n }); err != nil {
					fail(err)
					return
				}
			}
			if i > 0 { // the task order: after participant i-1's task
				if err := w.until(func() bool { return w.seen[done(i-1)] }); err != nil {
					fail(err)
					return
				}
			}
			if _, err := c.Put(ctx, done(i), ""); err != nil { // an empty task, then done
				fail(err)
				return
			}
			if b != nil {
				if err := b.Leave(); err != nil {
					fail(fmt.Errorf("participant %d: Leave: %w", i, err))
					return
				}
			} else if i == 0 {
				if err := w.until(func() bool { return w.seen[done(n-1)] }); err != nil {
					fail(err)
					return
				}
			}
			if i == 0 {
				elapsed = time.Since(t0)
			}
		})
	}
	// The others get ready first, as in the ChainSync runs.
	if sessions == nil {
		readyN.Wait()
	} else {
		// Enter blocks until all n have entered: wait until the other
		// n-1 have put their waiter keys.
		w := watches[0]
		if err := w.until(func() bool { return w.count(prefix+"barrier/waiters") >= n-1 }); err != nil {
			fail(err)
		}
	}
	close(start)
	wg.Wait()
	return elapsed, firstEr
}

// prefixWatch is one participant's watch on a round's keys.
type prefixWatch struct {
	ch   clientv3.WatchChan
	seen map[string]bool
}

func openWatch(ctx context.Context, c *clientv3.Client, prefix string) (*prefixWatch, error) {
	ch := c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	wr, ok := <-ch
	if !ok || !wr.Created {
		return nil, fmt.Errorf("watch on %s was not created: %v", prefix, wr.Err())
	}
	return &prefixWatch{ch: ch, seen: map[string]bool{}}, nil
}

// until consumes events until cond holds.
func (w *prefixWatch) until(cond func() bool) error {
	for !cond() {
		wr, ok := <-w.ch
		if !ok {
			return fmt.Errorf("watch closed")
		}
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypePut {
				w.seen[string(ev.Kv.Key)] = true
			}
		}
	}
	return nil
}

func (w *prefixWatch) count(prefix string) int {
	k := 0
	for key := range w.seen {
		if strings.HasPrefix(key, prefix) {
			k++
		}
	}
	return k
}
