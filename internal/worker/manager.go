package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Version is the version of the worker protocol this package speaks.
const Version = 1

// MaxLine bounds a line of the worker's standard output, its newline
// included. A longer line is the worker's error: the requests it holds
// fail and it is started again.
const MaxLine = 64 << 10

// Defaults for Config's durations left zero.
const (
	// DefaultHelloTimeout is how long a worker has to answer hello when
	// the node has no --task-timeout: it may load a model first.
	DefaultHelloTimeout = 5 * time.Minute
	// DefaultCancelGrace is how long a cancelled request has to be
	// answered before the worker's process group is stopped.
	DefaultCancelGrace = 5 * time.Second
	// MinBackoff and MaxBackoff bound the wait before a worker is started
	// again: it doubles with each worker that ends without having
	// answered a request, from MinBackoff up to MaxBackoff.
	MinBackoff = 100 * time.Millisecond
	MaxBackoff = 10 * time.Second
)

// Spawn runs one worker process to its end and returns how it ended:
// nil for exit status 0, else an error naming the status or signal. Its
// standard input and output are stdin and stdout (the ends of the pipes
// the process gets); started is called with its pid (its process group)
// once it runs. ctx ending stops it: its process group gets the node's
// stop signal, then SIGKILL after a grace. Spawn returns only once the
// process and everything left in its group are gone.
type Spawn func(ctx context.Context, stdin, stdout *os.File, started func(pid int), env ...string) error

// Config configures a Manager.
type Config struct {
	Command    string // the worker's command, for messages (its program)
	Node, Role string // said in hello
	Spawn      Spawn
	// HelloTimeout bounds the wait for the answer to hello (0:
	// DefaultHelloTimeout).
	HelloTimeout time.Duration
	// CancelGrace is the time between a cancel and stopping the worker
	// (0: DefaultCancelGrace).
	CancelGrace time.Duration
	// MinBackoff and MaxBackoff override the package's (tests).
	MinBackoff, MaxBackoff time.Duration
	Log                    *slog.Logger // nil: silent
}

// Status is where the worker stands, for status displays.
type Status struct {
	Command     string    `json:"command"`
	PID         int       `json:"pid,omitempty"`      // the worker up now; 0 while none is
	Since       time.Time `json:"since,omitzero"`     // when it answered hello
	Starts      int       `json:"starts"`             // workers started, the first included
	LastEnd     string    `json:"last_end,omitempty"` // how the last worker ended, or why a start failed
	LastEndAt   time.Time `json:"last_end_at,omitzero"`
	NextStart   time.Time `json:"next_start,omitzero"` // while none is up: when the next start is due
	Outstanding int       `json:"outstanding"`         // requests written and not yet answered
}

// Text is the status in one line: "pid 4242 up since 10:02:03, 2 starts
// (last ended: exited with status 3)".
func (s Status) Text() string {
	var b []byte
	if s.PID != 0 {
		b = fmt.Appendf(b, "pid %d, up since %s", s.PID, s.Since.Format(time.TimeOnly))
	} else {
		b = append(b, "not up"...)
		if !s.NextStart.IsZero() {
			b = fmt.Appendf(b, ", starting again at %s", s.NextStart.Format(time.TimeOnly))
		}
	}
	b = fmt.Appendf(b, ", %d start", s.Starts)
	if s.Starts != 1 {
		b = append(b, 's')
	}
	if s.Outstanding > 0 {
		b = fmt.Appendf(b, ", %d request(s) outstanding", s.Outstanding)
	}
	if s.LastEnd != "" {
		b = fmt.Appendf(b, " (last ended %s: %s)", s.LastEndAt.Format(time.TimeOnly), s.LastEnd)
	}
	return string(b)
}

// Manager keeps one worker running and turns tasks into its requests.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	up      chan struct{} // closed once the first worker answered hello
	failed  chan error    // the first worker could not start
	done    chan struct{} // the supervisor ended
	nextID  atomic.Uint64
	started atomic.Bool

	mu  sync.Mutex
	gen *generation // the worker requests go to, or the start they wait for
	st  Status
}

// generation is one start of the worker: ready is closed once it answered
// hello (p) or could not start (err).
type generation struct {
	ready chan struct{}
	p     *proc
	err   error
}

func newGeneration() *generation { return &generation{ready: make(chan struct{})} }

// New returns a Manager; Start starts its worker.
func New(cfg Config) *Manager {
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = DefaultCancelGrace
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = MinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(MaxBackoff, cfg.MinBackoff)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{cfg: cfg, log: log, ctx: ctx, cancel: cancel,
		up: make(chan struct{}), failed: make(chan error, 1), done: make(chan struct{}),
		gen: newGeneration(), st: Status{Command: cfg.Command}}
}

// Start starts the worker and keeps it running until Close.
func (m *Manager) Start() {
	if !m.started.Swap(true) {
		go m.supervise()
	}
}

// Command is the worker's program, as Config gave it.
func (m *Manager) Command() string { return m.cfg.Command }

// Up is closed once the first worker has answered hello.
func (m *Manager) Up() <-chan struct{} { return m.up }

// Failed delivers the error of a first worker that could not start: it
// exited, answered hello with an error or another version, or did not
// answer within the hello timeout. The node cannot run without it. It is
// closed, with nothing, once the Manager is closed.
func (m *Manager) Failed() <-chan error { return m.failed }

// Status returns where the worker stands.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.st
	if p := m.gen.p; p != nil {
		p.mu.Lock()
		s.Outstanding = len(p.pending)
		p.mu.Unlock()
	}
	return s
}

// Close stops the worker (its process group gets the stop signal, then
// SIGKILL after a grace) and returns once it is gone. Requests still
// outstanding fail. A Manager never started just ends.
func (m *Manager) Close() {
	m.cancel()
	if m.started.Load() {
		<-m.done
	}
}

// supervise starts the worker, again each time it ends, until Close.
func (m *Manager) supervise() {
	defer close(m.done)
	defer close(m.failed)
	backoff := m.cfg.MinBackoff
	for first := true; ; first = false {
		p, err := m.startOne()
		m.mu.Lock()
		g := m.gen
		m.st.Starts++
		if err == nil && m.ctx.Err() != nil {
			err = errClosed
		}
		if err == nil {
			select {
			case <-p.dead: // ended right after its hello (life ran first)
				err = errors.New("the " + p.why + " right after it answered hello")
			default:
			}
		}
		if err != nil {
			g.err = err
			close(g.ready)
			m.gen = newGeneration() // later requests wait for the next start
			m.st.LastEnd, m.st.LastEndAt = err.Error(), time.Now()
			m.st.NextStart = time.Now().Add(backoff)
			m.mu.Unlock()
			if p != nil {
				p.kill(err.Error())
				<-p.dead
			}
			if m.ctx.Err() != nil {
				m.resolveClosed()
				return
			}
			if first {
				m.failed <- err
				m.resolveClosed()
				return
			}
			m.log.Error("cannot start the worker again; the requests waiting for it fail; trying again", "worker", m.cfg.Command, "err", err.Error(), "in", backoff)
			if !m.sleep(backoff) {
				m.resolveClosed()
				return
			}
			backoff = min(2*backoff, m.cfg.MaxBackoff)
			continue
		}
		g.p = p
		close(g.ready)
		m.st.PID, m.st.Since, m.st.NextStart = p.pid, time.Now(), time.Time{}
		m.mu.Unlock()
		if first {
			m.log.Info("worker up: it answered hello", "worker", m.cfg.Command, "pid", p.pid)
			close(m.up)
		} else {
			m.log.Warn("worker started again: it answered hello", "worker", m.cfg.Command, "pid", p.pid, "starts", m.Status().Starts)
		}
		<-p.dead
		if m.ctx.Err() != nil {
			m.resolveClosed()
			return
		}
		if p.answered.Load() > 0 {
			backoff = m.cfg.MinBackoff // it did its work: a fresh start
		}
		m.mu.Lock()
		m.st.NextStart = time.Now().Add(backoff)
		m.mu.Unlock()
		m.log.Warn("worker ended; starting it again (chainsync status shows it)", "worker", m.cfg.Command, "pid", p.pid, "how", p.why, "in", backoff)
		if !m.sleep(backoff) {
			m.resolveClosed()
			return
		}
		backoff = min(2*backoff, m.cfg.MaxBackoff)
	}
}

// errClosed fails what waits for a worker once the Manager is closed.
var errClosed = errors.New("the worker was stopped: the node is stopping")

// resolveClosed fails the requests waiting for a start.
func (m *Manager) resolveClosed() {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.gen.ready:
	default:
		m.gen.err = errClosed
		close(m.gen.ready)
	}
}

// sleep waits d, or until Close; false if closed.
func (m *Manager) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-m.ctx.Done():
		return false
	}
}

// startOne starts a worker and says hello. On an error after the process
// started, the process is returned too, for the caller to stop.
func (m *Manager) startOne() (*proc, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("cannot start the worker %s: %w", m.cfg.Command, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("cannot start the worker %s: %w", m.cfg.Command, err)
	}
	ctx, stop := context.WithCancel(m.ctx)
	p := &proc{m: m, stdin: inW, stop: stop, pending: map[uint64]chan answer{}, dead: make(chan struct{})}
	pids := make(chan int, 1)
	spawned := make(chan error, 1)
	go func() {
		spawned <- m.cfg.Spawn(ctx, inR, outW, func(pid int) { pids <- pid }, "CHAINSYNC_WORKER=1")
	}()
	select {
	case p.pid = <-pids:
	case err := <-spawned:
		stop()
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		if err == nil {
			err = errors.New("it did not start")
		}
		return nil, fmt.Errorf("worker: %w", err)
	}
	inR.Close() // the worker's ends
	outW.Close()
	read := make(chan error, 1)
	hello := make(chan answer, 1)
	p.pending[0] = hello
	go func() { read <- p.read(outR) }()
	go p.life(spawned, read, outR)
	_ = p.write(fmt.Appendf(nil, `{"id":0,"op":"hello","version":%d,"node":%s,"role":%s}`+"\n",
		Version, jsonString(m.cfg.Node), jsonString(m.cfg.Role)))
	t := time.NewTimer(m.cfg.HelloTimeout)
	defer t.Stop()
	select {
	case a := <-hello:
		switch {
		case a.gone:
			return p, fmt.Errorf("the %s before it answered hello", a.err)
		case a.err != "":
			return p, fmt.Errorf("the worker %s could not start: it answered hello: %s", m.cfg.Command, a.err)
		case a.version != Version:
			return p, fmt.Errorf("the worker %s speaks version %d of the worker protocol; this node speaks %d", m.cfg.Command, a.version, Version)
		}
		return p, nil
	case <-t.C:
		return p, fmt.Errorf("the worker %s did not answer hello within %v", m.cfg.Command, m.cfg.HelloTimeout)
	case <-m.ctx.Done():
		return p, errClosed
	}
}

// Run runs round's task as a request to the worker and returns its
// outcome: nil for ok, else the worker's error or why it did not answer.
// If ctx's deadline passes, the request is cancelled; unanswered after
// the cancel grace, the worker is stopped (and started again).
func (m *Manager) Run(ctx context.Context, round string) error {
	for {
		p, err := m.current(ctx)
		if err != nil {
			return err
		}
		id := m.nextID.Add(1)
		ch := p.add(id)
		if ch == nil {
			continue // ended meanwhile, the request unwritten: the next one takes it
		}
		_ = p.write(appendRun(nil, id, round))
		// A failed write means the worker is ending: its end fails ch.
		select {
		case a := <-ch:
			return a.error()
		case <-ctx.Done():
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ctx.Err() // the node is stopping: Close stops the worker
		}
		m.log.Warn("the task ran past its timeout: asked the worker to cancel the request; its process group is stopped unless it answers within the grace",
			"round", round, "id", id, "worker", m.cfg.Command, "pid", p.pid, "grace", m.cfg.CancelGrace)
		go func() { _ = p.write(fmt.Appendf(nil, `{"id":%d,"op":"cancel"}`+"\n", id)) }()
		t := time.NewTimer(m.cfg.CancelGrace)
		select {
		case a := <-ch:
			t.Stop()
			if a.err == "" {
				return errors.New("cancelled; the worker answered ok")
			}
			return fmt.Errorf("cancelled; the worker answered: %s", a.err)
		case <-t.C:
		}
		p.kill(fmt.Sprintf("request %d (round %s) was not answered within %v of its cancel, so the worker's process group was stopped", id, quoteRound(round), m.cfg.CancelGrace))
		return (<-ch).error()
	}
}

// current returns the worker that is up, waiting for a start if none is.
func (m *Manager) current(ctx context.Context) (*proc, error) {
	for {
		m.mu.Lock()
		g := m.gen
		m.mu.Unlock()
		select {
		case <-g.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if g.err != nil {
			return nil, g.err
		}
		select {
		case <-g.p.dead:
			// Ended: the supervisor's next generation replaces g (end
			// puts it in place before closing dead).
			m.mu.Lock()
			same := m.gen == g
			m.mu.Unlock()
			if same {
				return nil, errors.New("internal error: a worker ended without a successor")
			}
		default:
			return g.p, nil
		}
	}
}

// answer is a worker's response to one request, or why there is none.
type answer struct {
	err     string // "" for ok
	version int    // hello's
	gone    bool   // no response: the worker ended (err says how)
}

func (a answer) error() error {
	if a.err == "" {
		return nil
	}
	return errors.New(a.err)
}

// proc is one running worker.
type proc struct {
	m        *Manager
	pid      int
	stdin    *os.File
	wmu      sync.Mutex // one line at a time on stdin
	stop     context.CancelFunc
	answered atomic.Int64 // requests answered ok (hello not counted)
	junk     int          // lines that were not responses (read only)

	mu      sync.Mutex
	pending map[uint64]chan answer // by id; nil once the worker ended
	killed  string                 // why the node stopped it, if it did
	why     string                 // how it ended (set before dead is closed)
	dead    chan struct{}
}

// add registers request id; nil if the worker already ended.
func (p *proc) add(id uint64) chan answer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending == nil {
		return nil
	}
	ch := make(chan answer, 1)
	p.pending[id] = ch
	return ch
}

// write writes one line to the worker's standard input.
func (p *proc) write(line []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_, err := p.stdin.Write(line)
	return err
}

// kill stops the worker, saying why.
func (p *proc) kill(why string) {
	p.mu.Lock()
	if p.killed == "" {
		p.killed = why
	}
	p.mu.Unlock()
	p.stop()
}

// errLineTooLong ends the reading of a worker that wrote an overlong line.
var errLineTooLong = fmt.Errorf("the worker wrote a line longer than %d KiB to its standard output, so it was stopped", MaxLine>>10)

// read reads the worker's responses until its standard output ends, an
// overlong line, or an error.
func (p *proc) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, MaxLine)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return errLineTooLong
		}
		if len(line) > 0 {
			p.handle(line)
		}
		if err != nil {
			return err
		}
	}
}

// reply is a response line as the worker writes it.
type reply struct {
	ID      *uint64 `json:"id"`
	OK      *bool   `json:"ok"`
	Error   string  `json:"error"`
	Version *int    `json:"version"`
}

// handle takes one line of the worker's standard output.
func (p *proc) handle(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	var r reply
	if id, ok := parseOK(line); ok {
		r.ID, r.OK = &id, &okTrue
	} else if json.Unmarshal(line, &r) != nil || r.ID == nil || r.OK == nil {
		p.junk++
		if p.junk <= 10 || p.junk%1000 == 0 {
			p.m.log.Warn("the worker wrote a line that is not a response; ignored", "worker", p.m.cfg.Command, "pid", p.pid, "line", clip(line), "such_lines", p.junk)
		}
		return
	}
	p.mu.Lock()
	ch, ok := p.pending[*r.ID]
	delete(p.pending, *r.ID)
	p.mu.Unlock()
	if !ok {
		p.m.log.Error("worker protocol error: a response to an id that is not outstanding; ignored", "worker", p.m.cfg.Command, "pid", p.pid, "id", *r.ID, "line", clip(line))
		return
	}
	a := answer{version: Version}
	if r.Version != nil {
		a.version = *r.Version
	}
	if !*r.OK {
		a.err = r.Error
		if a.err == "" {
			a.err = "the worker answered ok:false without an error"
		}
	} else if *r.ID != 0 {
		p.answered.Add(1) // a request's answer: hello's is not one
	}
	ch <- a
}

// life waits for the worker's end, from either side: the process ends
// (its output then ends too, or is cut after a second: something that
// left the group may hold it), or its output ends or breaks (the process
// is stopped, after a second for one that is exiting anyway). Then it
// fails every request still outstanding, saying how the worker ended.
func (p *proc) life(spawned <-chan error, read <-chan error, out *os.File) {
	var exit, rerr error
	closedFirst := false
	select {
	case exit = <-spawned:
		t := time.NewTimer(time.Second)
		select {
		case rerr = <-read:
		case <-t.C:
			out.Close()
			rerr = <-read
		}
		t.Stop()
	case rerr = <-read:
		closedFirst = true
		if errors.Is(rerr, errLineTooLong) {
			p.kill(rerr.Error())
		}
		t := time.NewTimer(time.Second)
		select {
		case exit = <-spawned:
		case <-t.C:
			p.kill("it closed its standard output")
			exit = <-spawned
		}
		t.Stop()
	}
	out.Close()
	p.stdin.Close()
	p.stop()
	how := exitWords(exit, p.m.cfg.Command)
	p.mu.Lock()
	switch {
	case p.killed != "":
		how = p.killed + " (" + how + ")"
	case closedFirst && !errors.Is(rerr, io.EOF) && rerr != nil:
		how = "reading the worker's output failed: " + rerr.Error() + " (" + how + ")"
	}
	p.why = how
	pending := p.pending
	p.pending = nil
	p.mu.Unlock()
	for _, ch := range pending {
		ch <- answer{err: how, gone: true}
	}
	// Under m.mu, so that the supervisor sees either a live worker that
	// this will replace or a dead one.
	m := p.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen.p == p {
		m.gen = newGeneration() // before dead closes: see current
	}
	m.st.PID, m.st.LastEnd, m.st.LastEndAt = 0, how, time.Now()
	close(p.dead)
}

// clip returns line for a log: at most 200 bytes, quoted with every
// control character and invalid byte escaped.
func clip(line []byte) string {
	const most = 200
	if len(line) > most {
		return strconv.Quote(string(line[:most])) + fmt.Sprintf("... (%d bytes)", len(line))
	}
	return strconv.Quote(string(line))
}

// quoteRound names a round in a message ("" is the unnamed round).
func quoteRound(round string) string {
	if round == "" {
		return `""`
	}
	return strconv.Quote(round)
}

// jsonString returns s as a JSON string.
func jsonString(s string) []byte {
	return appendJSONString(nil, s)
}

// appendJSONString appends s as a JSON string, as json.Marshal writes it.
// A round id is nearly always printable ASCII with nothing to escape: that
// takes no reflection and no allocation (the request is on every round's
// path); anything else goes to json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendRun appends the line of request id: round's task.
func appendRun(b []byte, id uint64, round string) []byte {
	b = strconv.AppendUint(append(b, `{"id":`...), id, 10)
	b = appendJSONString(append(b, `,"op":"run","round":`...), round)
	return append(b, "}\n"...)
}

// okTrue is the OK of a reply parseOK read.
var okTrue = true

// parseOK reads the answer nearly every request gets, {"id":N,"ok":true}
// exactly as package worker and the examples write it, without
// reflection; ok is false for any other line, which json.Unmarshal reads.
func parseOK(line []byte) (id uint64, ok bool) {
	const pre, post = `{"id":`, `,"ok":true}`
	if len(line) < len(pre)+1+len(post) || string(line[:len(pre)]) != pre || string(line[len(line)-len(post):]) != post {
		return 0, false
	}
	digits := line[len(pre) : len(line)-len(post)]
	if len(digits) > 1 && digits[0] == '0' { // not JSON
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseUint(string(digits), 10, 64)
	if err != nil { // above 64 bits
		return 0, false
	}
	return id, true
}

// exitWords says how the worker command ended, as the round it failed
// reports it: "worker exited with status 3 (sh)", "worker killed by
// signal 9 (killed; sh)" (from Config.Spawn's error: an ExitCode or a
// Signal and SignalName method, as internal/taskrun's errors have), or
// the error of a run that did not end so.
func exitWords(exit error, command string) string {
	var st interface{ ExitCode() int }
	var sig interface {
		Signal() int
		SignalName() string
	}
	switch {
	case exit == nil:
		return "worker exited with status 0 (" + command + ")"
	case errors.As(exit, &st):
		return fmt.Sprintf("worker exited with status %d (%s)", st.ExitCode(), command)
	case errors.As(exit, &sig):
		return fmt.Sprintf("worker killed by signal %d (%s; %s)", sig.Signal(), sig.SignalName(), command)
	}
	return "worker " + exit.Error()
}
