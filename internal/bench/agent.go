package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/rawio"
	"github.com/chainsync-go/chainsync/secure"
)

// Spec is what one agent (one chain node plus one relay hop) must know.
type Spec struct {
	Index      int           `json:"index"`      // position in the chain, 0 = Head
	N          int           `json:"n"`          // chain length
	Warmup     int           `json:"warmup"`     // rounds run first and not measured
	Rounds     int           `json:"rounds"`     // measured rounds
	Concurrent int           `json:"concurrent"` // rounds the Head keeps in flight (1: one at a time)
	TaskSleep  time.Duration `json:"task_sleep"` // each task sleeps this long (0: empty task)
	QuickTask  bool          `json:"quick_task"` // Config.QuickTask: run the empty task inline
	// ParallelTasks is Config.MaxParallelTasks (0: the default, one task
	// at a time, in the order the rounds were opened).
	ParallelTasks int           `json:"parallel_tasks,omitempty"`
	Timeout       time.Duration `json:"timeout"` // the whole run must end within this
	// StateDir, if set, makes the nodes durable: node i keeps its journal
	// in StateDir/node-i (Config.StateDir), which must not exist yet.
	StateDir string `json:"state_dir,omitempty"`
	// PSKFile, if set, secures the nodes' links with TLS and this
	// pre-shared key (package secure), and the relay's links too (the
	// floor is then a relay over TLS); node i is named "i".
	PSKFile string `json:"psk_file,omitempty"`
}

// Addrs are where an agent listens: its chain node for its predecessor,
// and its relay hop for the previous relay hop. Empty on the Head.
type Addrs struct {
	Chain string `json:"chain"`
	Relay string `json:"relay"`
}

// TaskRecord is one task run: its round and wall-clock start and end
// (Unix nanoseconds, comparable across processes on one machine).
type TaskRecord struct {
	Round string `json:"r"`
	Start int64  `json:"s"`
	End   int64  `json:"e"`
}

// Report is what an agent hands back after its run. Only the Head's has
// latencies.
type Report struct {
	Index int          `json:"index"`
	Tasks []TaskRecord `json:"tasks"`
	// Head only: per-round latencies of the measured rounds, and the
	// wall time of each measured block (for rounds/s).
	Chain        []time.Duration `json:"chain,omitempty"`
	Relay        []time.Duration `json:"relay,omitempty"`
	ChainElapsed time.Duration   `json:"chain_elapsed,omitempty"`
	RelayElapsed time.Duration   `json:"relay_elapsed,omitempty"`
	// Setup is how long this agent took to start its node and connect
	// its relay (process mode).
	Setup time.Duration `json:"setup_ns,omitempty"`
	// Syncs is how many fsyncs the node's state journal made during the
	// rounds (warm-up included; durable runs only).
	Syncs uint64 `json:"syncs,omitempty"`
	Err   string `json:"err,omitempty"`
}

// roundIDs returns the ids of the warm-up rounds and of the measured ones.
func (s Spec) roundIDs() (warm, measured []string) {
	for i := range s.Warmup {
		warm = append(warm, "w"+strconv.Itoa(i))
	}
	for i := range s.Rounds {
		measured = append(measured, "r"+strconv.Itoa(i))
	}
	return warm, measured
}

func (s Spec) validate() error {
	switch {
	case s.N < 2:
		return fmt.Errorf("a chain needs at least 2 nodes to have hops to measure (got %d)", s.N)
	case s.Index < 0 || s.Index >= s.N:
		return fmt.Errorf("agent index %d is outside a %d-node chain", s.Index, s.N)
	case s.Rounds < 1:
		return fmt.Errorf("rounds must be at least 1 (got %d)", s.Rounds)
	case s.Warmup < 0:
		return fmt.Errorf("warm-up rounds must not be negative (got %d)", s.Warmup)
	case s.Concurrent < 1:
		return fmt.Errorf("concurrent rounds must be at least 1 (got %d)", s.Concurrent)
	case s.TaskSleep < 0:
		return fmt.Errorf("task sleep must not be negative (got %v)", s.TaskSleep)
	case s.ParallelTasks < 0:
		return fmt.Errorf("parallel tasks must not be negative (got %d)", s.ParallelTasks)
	case s.QuickTask && s.TaskSleep > 0:
		return fmt.Errorf("a quick task must never block: use it with empty tasks, not with a task sleep of %v", s.TaskSleep)
	}
	return nil
}

// agent is one chain node plus one relay hop.
type agent struct {
	spec    Spec
	chainLn net.Listener // nil on the Head
	relayLn net.Listener // nil on the Head
	node    *chainsync.Node

	relayPred, relayNext net.Conn      // nil at the ends
	relayR               *bufio.Reader // the Head's reader of relayNext
	relayW               *rawio.Writer // the Head's writer of relayNext
	// relayTLS, with a pre-shared key, is the TLS handshake of relayNext
	// under way (its result); relayUp waits for it.
	relayTLS chan relayConn

	mu     sync.Mutex
	tasks  []TaskRecord
	wg     sync.WaitGroup // relay goroutines
	syncs0 uint64         // the journal's fsyncs once the node started
}

// newAgent validates spec and opens the agent's listeners on loopback.
func newAgent(spec Spec) (*agent, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	a := &agent{spec: spec, tasks: make([]TaskRecord, 0, spec.Warmup+spec.Rounds)}
	if spec.Index > 0 {
		var err error
		if a.chainLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("node %d: chain listener: %w", spec.Index, err)
		}
		if a.relayLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			a.chainLn.Close()
			return nil, fmt.Errorf("node %d: relay listener: %w", spec.Index, err)
		}
	}
	return a, nil
}

func (a *agent) addrs() Addrs {
	if a.chainLn == nil {
		return Addrs{}
	}
	return Addrs{Chain: a.chainLn.Addr().String(), Relay: a.relayLn.Addr().String()}
}

func (a *agent) head() bool { return a.spec.Index == 0 }
func (a *agent) tail() bool { return a.spec.Index == a.spec.N-1 }

// task is the chain node's task: it records when it ran.
func (a *agent) task(ctx context.Context, round string) error {
	start := time.Now().UnixNano()
	if d := a.spec.TaskSleep; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	end := time.Now().UnixNano()
	a.mu.Lock()
	a.tasks = append(a.tasks, TaskRecord{Round: round, Start: start, End: end})
	a.mu.Unlock()
	return nil
}

// connect starts the chain node (which dials next.Chain) and connects the
// relay: it dials next.Relay and accepts its predecessor's relay
// connection. Dials complete on the listener's backlog, so agents may
// connect in any order as long as every listener exists.
func (a *agent) connect(next Addrs) error {
	cfg := chainsync.Config{
		Name:      strconv.Itoa(a.spec.Index),
		Task:      a.task,
		QuickTask: a.spec.QuickTask,
		MaxRounds: a.spec.Warmup + a.spec.Rounds + 16,
		// Config.MaxParallelTasks: 0 is the default.
		MaxParallelTasks: a.spec.ParallelTasks,
		BackoffMin:       time.Millisecond,
		BackoffMax:       50 * time.Millisecond,
	}
	if a.chainLn != nil {
		cfg.Listener = a.chainLn
	}
	var sec *secure.Config
	if a.spec.PSKFile != "" {
		var err error
		if sec, err = a.secure(); err != nil {
			return fmt.Errorf("node %d: %w", a.spec.Index, err)
		}
		cfg.Secure = sec
	}
	if !a.tail() {
		if next.Chain == "" || next.Relay == "" {
			return fmt.Errorf("node %d: no successor address", a.spec.Index)
		}
		cfg.Next = next.Chain
	}
	if a.spec.StateDir != "" {
		cfg.StateDir = filepath.Join(a.spec.StateDir, "node-"+strconv.Itoa(a.spec.Index))
		if _, err := os.Stat(cfg.StateDir); err == nil {
			return fmt.Errorf("node %d: state directory %s exists already: a durable run needs fresh journals", a.spec.Index, cfg.StateDir)
		}
	}
	nd, err := chainsync.Start(cfg)
	if err != nil {
		return fmt.Errorf("node %d: %w", a.spec.Index, err)
	}
	a.node = nd
	a.syncs0 = nd.Snapshot().JournalSyncs
	a.chainLn = nil // the node owns it now
	if !a.tail() {
		c, err := net.DialTimeout("tcp", next.Relay, 10*time.Second)
		if err != nil {
			return fmt.Errorf("node %d: relay dial %s: %w", a.spec.Index, next.Relay, err)
		}
		a.relayNext = c
		if sec != nil {
			// The successor's agent may not accept it yet (in one
			// process the agents connect one after another): relayUp
			// waits for the handshake.
			a.relayTLS = make(chan relayConn, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), relayHandshake)
				defer cancel()
				tc, err := sec.Client(ctx, c, next.Relay)
				a.relayTLS <- relayConn{tc, err}
			}()
		}
	}
	if a.relayLn != nil {
		if tl, ok := a.relayLn.(*net.TCPListener); ok {
			tl.SetDeadline(time.Now().Add(30 * time.Second))
		}
		c, err := a.relayLn.Accept()
		a.relayLn.Close()
		if err != nil {
			return fmt.Errorf("node %d: relay accept: %w", a.spec.Index, err)
		}
		a.relayPred = c
		if sec != nil {
			ctx, cancel := context.WithTimeout(context.Background(), relayHandshake)
			defer cancel()
			tc, err := sec.Server(ctx, c)
			if err != nil {
				return fmt.Errorf("node %d: relay TLS handshake with the predecessor: %w", a.spec.Index, err)
			}
			a.relayPred = tc
		}
	}
	return nil
}

// relayConn is a relay connection's TLS handshake's result.
type relayConn struct {
	c   net.Conn
	err error
}

// relayHandshake bounds a relay link's TLS handshake.
const relayHandshake = 30 * time.Second

// relayUp waits until the relay link to the successor is up: at once
// over plain TCP; over TLS, once its handshake is over.
func (a *agent) relayUp() error {
	if a.relayTLS == nil {
		return nil
	}
	r := <-a.relayTLS
	a.relayTLS = nil
	if r.err != nil {
		return fmt.Errorf("node %d: relay TLS handshake with the successor: %w", a.spec.Index, r.err)
	}
	a.relayNext = r.c
	return nil
}

// secure loads the TLS settings of the agent's node: the run's
// pre-shared key, and the names of the node and its neighbours (their
// indexes).
func (a *agent) secure() (*secure.Config, error) {
	o := secure.Options{PSKFile: a.spec.PSKFile, SelfName: strconv.Itoa(a.spec.Index)}
	if !a.head() {
		o.PrevName = strconv.Itoa(a.spec.Index - 1)
	}
	if !a.tail() {
		o.NextName = strconv.Itoa(a.spec.Index + 1)
	}
	return secure.Load(o)
}

// relayHops starts the relay goroutines of a non-Head agent: lines from
// the predecessor go on to the successor (the Tail sends them back), lines
// from the successor go back to the predecessor. A line of the second lap
// (it starts with '2') going forward is where the chain runs its tasks, so
// the hop sleeps the task time there first. Every complete line that has
// arrived goes on in one write, as the chain's readers hand all the lines
// of one read to their node at once: with many rounds in flight the floor
// is what the links allow, not one write per line.
func (a *agent) relayHops() {
	sleep := a.spec.TaskSleep
	forward := func(in, out net.Conn, tasks bool) {
		defer a.wg.Done()
		r, w := bufio.NewReaderSize(rawio.NewReader(in), 64<<10), rawio.NewWriter(out)
		var batch []byte
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			batch = batch[:0]
			for {
				if tasks && sleep > 0 && line[0] == '2' {
					time.Sleep(sleep)
				}
				batch = append(batch, line...)
				if !lineBuffered(r) {
					break
				}
				line, _ = r.ReadSlice('\n')
			}
			if _, err := w.Write(batch); err != nil {
				return
			}
		}
	}
	out := a.relayNext
	if a.tail() {
		out = a.relayPred
	}
	a.wg.Add(1)
	go forward(a.relayPred, out, true)
	if !a.tail() {
		a.wg.Add(1)
		go forward(a.relayNext, a.relayPred, false)
	}
}

// lineBuffered says whether r holds a complete line it has already read.
func lineBuffered(r *bufio.Reader) bool {
	b, _ := r.Peek(r.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// relay runs total relay rounds from the Head with k in flight, and
// returns each one's latency and the time for all of them. A relay round
// is a line sent to the Tail and back twice: 4(n-1) hops. What the lines
// that arrived together cause leaves in one write.
func (a *agent) relay(total, k int, deadline time.Time) ([]time.Duration, time.Duration, error) {
	c := a.relayNext
	c.SetReadDeadline(deadline)
	if a.relayR == nil {
		a.relayR = bufio.NewReaderSize(rawio.NewReader(c), 64<<10)
		a.relayW = rawio.NewWriter(c)
	}
	r := a.relayR
	starts := make([]time.Time, total)
	lat := make([]time.Duration, total)
	buf := make([]byte, 0, 1024)
	queue := func(lap byte, i int) {
		buf = append(buf, lap, ':')
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, '\n')
	}
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		_, err := a.relayW.Write(buf)
		buf = buf[:0]
		return err
	}
	t0 := time.Now()
	next := 0
	for ; next < k && next < total; next++ {
		starts[next] = time.Now()
		queue('1', next)
	}
	if err := flush(); err != nil {
		return nil, 0, err
	}
	for done := 0; done < total; {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, 0, fmt.Errorf("relay: %w", err)
		}
		i, ok := parseToken(line)
		if !ok || i >= total {
			return nil, 0, fmt.Errorf("relay: unexpected line %q", line)
		}
		if line[0] == '1' {
			if d := a.spec.TaskSleep; d > 0 {
				time.Sleep(d) // the Head's task
			}
			queue('2', i)
		} else {
			lat[i] = time.Since(starts[i])
			done++
			if next < total {
				starts[next] = time.Now()
				queue('1', next)
				next++
			}
		}
		if !lineBuffered(r) {
			if err := flush(); err != nil {
				return nil, 0, err
			}
		}
	}
	return lat, time.Since(t0), nil
}

// parseToken reads "L:INDEX\n".
func parseToken(line []byte) (int, bool) {
	if len(line) < 4 || line[1] != ':' || (line[0] != '1' && line[0] != '2') {
		return 0, false
	}
	i := 0
	for _, b := range line[2 : len(line)-1] {
		if b < '0' || b > '9' {
			return 0, false
		}
		i = i*10 + int(b-'0')
	}
	return i, true
}

// chain runs the rounds ids from the Head with k in flight, and returns
// each one's latency (from the Head's Ready to its result) and the time
// for all of them.
func (a *agent) chain(ctx context.Context, ids []string, k int) ([]time.Duration, time.Duration, error) {
	starts := make([]time.Time, len(ids))
	lat := make([]time.Duration, len(ids))
	t0 := time.Now()
	next := 0
	ready := func() error {
		starts[next] = time.Now()
		err := a.node.Ready(ids[next])
		next++
		return err
	}
	for next < k && next < len(ids) {
		if err := ready(); err != nil {
			return nil, 0, err
		}
	}
	for j, id := range ids {
		res, err := a.node.Wait(ctx, id)
		if err != nil {
			return nil, 0, fmt.Errorf("round %s: %w", id, err)
		}
		if res.Status != chainsync.StatusDone {
			return nil, 0, fmt.Errorf("round %s ended %s at the Head: %v", id, res.Status, res.Err)
		}
		lat[j] = time.Since(starts[j])
		if next < len(ids) {
			if err := ready(); err != nil {
				return nil, 0, err
			}
		}
	}
	return lat, time.Since(t0), nil
}

// run does the agent's part once every agent is connected: the Head
// measures, the others take part in every round and relay.
func (a *agent) run(ctx context.Context) Report {
	rep := Report{Index: a.spec.Index}
	err := a.measure(ctx, &rep)
	rep.Syncs = a.node.Snapshot().JournalSyncs - a.syncs0
	a.mu.Lock()
	rep.Tasks = append([]TaskRecord(nil), a.tasks...)
	a.mu.Unlock()
	if err != nil {
		rep.Err = fmt.Sprintf("node %d: %v", a.spec.Index, err)
	}
	return rep
}

func (a *agent) measure(ctx context.Context, rep *Report) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Hour)
	}
	warm, ids := a.spec.roundIDs()
	if err := a.relayUp(); err != nil {
		return err
	}
	if !a.head() {
		// Every round is opened here before this agent's relay hops
		// start: the Head's first relay line gets through only once every
		// hop runs, so no node is still opening rounds while the Head
		// measures the relay floor (which would lower it).
		all := append(warm, ids...)
		for _, id := range all {
			if err := a.node.Ready(id); err != nil {
				return err
			}
		}
		a.relayHops()
		for _, id := range all {
			res, err := a.node.Wait(ctx, id)
			if err != nil {
				return fmt.Errorf("round %s: %w", id, err)
			}
			if res.Status != chainsync.StatusDone {
				return fmt.Errorf("round %s ended %s: %v", id, res.Status, res.Err)
			}
		}
		return nil
	}
	for _, id := range warm {
		if _, _, err := a.relay(1, 1, deadline); err != nil {
			return err
		}
		if _, _, err := a.chain(ctx, []string{id}, 1); err != nil {
			return err
		}
	}
	if k := a.spec.Concurrent; k > 1 {
		var err error
		if rep.Relay, rep.RelayElapsed, err = a.relay(len(ids), k, deadline); err != nil {
			return err
		}
		rep.Chain, rep.ChainElapsed, err = a.chain(ctx, ids, k)
		return err
	}
	// One at a time: alternate relay and chain rounds so that both meet
	// the same machine.
	for _, id := range ids {
		rl, re, err := a.relay(1, 1, deadline)
		if err != nil {
			return err
		}
		cl, ce, err := a.chain(ctx, []string{id}, 1)
		if err != nil {
			return err
		}
		rep.Relay = append(rep.Relay, rl[0])
		rep.Chain = append(rep.Chain, cl[0])
		rep.RelayElapsed += re
		rep.ChainElapsed += ce
	}
	return nil
}

// close stops the node and the relay. Call it only once every agent has
// reported, so that no node leaves while a neighbour still needs it.
func (a *agent) close() error {
	var errs []error
	if a.node != nil {
		errs = append(errs, a.node.Close())
	}
	for _, c := range []net.Conn{a.relayPred, a.relayNext} {
		if c != nil {
			c.Close()
		}
	}
	for _, l := range []net.Listener{a.chainLn, a.relayLn} {
		if l != nil {
			l.Close()
		}
	}
	a.wg.Wait()
	return errors.Join(errs...)
}
