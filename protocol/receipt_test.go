package protocol_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
)

// rchain is a chain of Machines with receipts on, joined by FIFO links,
// driven as docs/RECEIPTS.md says a driver must: it keeps each node's
// journal (ActSave), signs what ActSignReceipt asks (a made-up envelope
// whose digest is its SHA-256), hands lines to up links, and reports
// Delivered and ReceiptHanded for what it handed to a live link. It
// checks, as it goes, the rules the receipts add: a node's envelope is
// journalled before any line carries it or its digest; a sign action
// binds the digest of the predecessor's receipt; a task (without undo)
// starts only after its predecessor's digest arrived; and no node is
// asked to sign a round twice.
type rchain struct {
	t       *testing.T
	names   []string
	cfgs    []protocol.Config
	ms      []*protocol.Machine
	journal []map[string]protocol.Record
	links   [][]protocol.Message // 2p: p to p+1; 2p+1: p+1 to p
	up      []bool               // the links between p and p+1
	tasks   []rjob
	undos   []rjob
	signs   []rsign
	envs    map[string]string // node/round -> the envelope signed
	asked   map[string]int    // node/round -> sign actions
	digest  map[string]bool   // node/round -> its predecessor's RDIGEST arrived
	bundle  map[string]bool   // node/round -> ActReceipts
	done    map[string]protocol.Outcome
	orders  map[int]protocol.ReceiptOrder // the last order each node was asked to sign
	noticed bool                          // report a failed task as a fault notice (no undo)
	deny    map[int]bool                  // nodes whose approval gate denies (else approves)
	log     []string
}

type rjob struct {
	node  int
	round string
}

type rsign struct {
	node  int
	round string
	order protocol.ReceiptOrder
}

func newRChain(t *testing.T, n int, cfg func(i int, c *protocol.Config)) *rchain {
	c := &rchain{t: t, envs: map[string]string{}, asked: map[string]int{}, digest: map[string]bool{},
		bundle: map[string]bool{}, done: map[string]protocol.Outcome{}, orders: map[int]protocol.ReceiptOrder{}}
	for i := range n {
		c.names = append(c.names, string(rune('A'+i)))
	}
	for i := range n {
		pc := protocol.Config{Role: protocol.RoleOf(i > 0, i < n-1), Durable: true, Extensions: true, Ordered: true,
			Name: c.names[i], Receipts: true, Chain: c.names}
		if cfg != nil {
			cfg(i, &pc)
		}
		c.cfgs = append(c.cfgs, pc)
		c.ms = append(c.ms, protocol.New(pc))
		c.journal = append(c.journal, map[string]protocol.Record{})
	}
	c.links = make([][]protocol.Message, 2*(n-1))
	c.up = make([]bool, n-1)
	for p := range n - 1 {
		c.up[p] = true
		c.step(p, protocol.LinkUp(protocol.Succ))
		c.step(p+1, protocol.LinkUp(protocol.Pred))
	}
	return c
}

func key(i int, round string) string { return fmt.Sprint(i, "/", round) }

// step feeds ev to node i and carries out the actions; an error fails
// the test.
func (c *rchain) step(i int, ev protocol.Event) {
	c.t.Helper()
	if err := c.try(i, ev); err != nil {
		c.t.Fatalf("%s: %v", c.names[i], err)
	}
}

func (c *rchain) try(i int, ev protocol.Event) error {
	acts, err := c.ms[i].Step(ev, nil)
	if err != nil {
		return err
	}
	var after []protocol.Event
	for _, a := range acts {
		k := key(i, a.Round)
		switch a.Kind {
		case protocol.ActSave:
			c.journal[i][a.Round] = *a.Record
		case protocol.ActSend:
			if n := a.Msg.Receipt; n != nil && n.Node == c.names[i] {
				rec := c.journal[i][a.Msg.Round].Receipt
				if rec.Digest != n.Digest || rec.Envelope == "" || c.envs[key(i, a.Msg.Round)] != rec.Envelope {
					return fmt.Errorf("sends %v before its receipt is journalled (%+v)", a.Msg, rec)
				}
			}
			l, p := 2*i, i
			if a.To == protocol.Pred {
				l, p = 2*(i-1)+1, i-1
			}
			if !c.up[p] {
				continue
			}
			c.links[l] = append(c.links[l], a.Msg)
			c.log = append(c.log, fmt.Sprintf("%s>%s %v", c.names[i], a.To, a.Msg))
			switch {
			case a.To == protocol.Pred && a.Msg.Cmd == protocol.Complete:
				after = append(after, protocol.Delivered(a.Msg.Round))
			case a.To == protocol.Pred && a.Msg.Cmd == protocol.ReceiptLine:
				after = append(after, protocol.ReceiptHanded(a.Msg.Round, a.Msg.Receipt.Node))
			}
		case protocol.ActRunTask:
			if c.cfgs[i].Receipts && !c.cfgs[i].Undo && i > 0 && !c.digest[k] {
				return fmt.Errorf("task of %s starts before the predecessor's digest arrived", a.Round)
			}
			c.log = append(c.log, fmt.Sprintf("%s run %s", c.names[i], a.Round))
			c.tasks = append(c.tasks, rjob{i, a.Round})
		case protocol.ActRunUndo:
			c.undos = append(c.undos, rjob{i, a.Round})
		case protocol.ActSignReceipt:
			c.asked[k]++
			if c.asked[k] > 1 {
				return fmt.Errorf("asked to sign %s a second time", a.Round)
			}
			if want := c.digestOf(i-1, a.Round); a.Sign.Pred != want {
				return fmt.Errorf("sign %s binds %q, not the predecessor's %q", a.Round, a.Sign.Pred, want)
			}
			c.log = append(c.log, fmt.Sprintf("%s sign %s %s", c.names[i], a.Round, a.Sign.Outcome))
			c.signs = append(c.signs, rsign{i, a.Round, *a.Sign})
			c.orders[i] = *a.Sign
		case protocol.ActReceipts:
			c.bundle[k] = true
		case protocol.ActGate:
			if c.deny[i] {
				after = append(after, protocol.Deny(a.Round))
			} else {
				after = append(after, protocol.Approve(a.Round))
			}
		case protocol.ActDone:
			c.done[k] = a.Outcome
			if a.Outcome == protocol.TaskFailed && c.noticed {
				after = append(after, protocol.Report(protocol.Notice{HasRound: true, Round: a.Round, Kind: protocol.KindTaskFailed, Origin: c.names[i]}))
			}
		}
	}
	for _, ev := range after {
		if err := c.try(i, ev); err != nil {
			return err
		}
	}
	return nil
}

// digestOf is the digest of node i's signed receipt ("" for none).
func (c *rchain) digestOf(i int, round string) string {
	if i < 0 {
		return ""
	}
	env, ok := c.envs[key(i, round)]
	if !ok {
		return ""
	}
	sum := sha256.Sum256([]byte(env))
	return hex.EncodeToString(sum[:])
}

// deliver hands link l's next line to its receiver.
func (c *rchain) deliver(l int) {
	c.t.Helper()
	msg := c.links[l][0]
	c.links[l] = c.links[l][1:]
	to, from := l/2+1, protocol.Pred
	if l%2 == 1 {
		to, from = l/2, protocol.Succ
	}
	if msg.Cmd == protocol.RDigestLine {
		c.digest[key(to, msg.Round)] = true
	}
	c.step(to, protocol.Recv(from, msg))
}

// sign signs the oldest asked receipt: a made-up envelope, different at
// each signing (as an ECDSA signature is).
func (c *rchain) sign(k int) {
	c.t.Helper()
	s := c.signs[k]
	c.signs = slices.Delete(c.signs, k, k+1)
	env := fmt.Sprintf(`{"node":%q,"round":%q,"outcome":%q,"pred":%q,"nonce":%d}`,
		c.names[s.node], s.round, s.order.Outcome, s.order.Pred, len(c.log))
	c.envs[key(s.node, s.round)] = env
	c.step(s.node, protocol.ReceiptSigned(s.round, env, c.digestOf(s.node, s.round)))
}

// drain runs the chain until nothing is left to do, in an order rng
// picks: lines, tasks (fail says which fail), undos and signatures.
func (c *rchain) drain(rng *rand.Rand, fail func(i int, round string) bool) {
	c.t.Helper()
	for range 100000 {
		var busy []int
		for l, q := range c.links {
			if len(q) > 0 {
				busy = append(busy, l)
			}
		}
		n := len(busy) + len(c.tasks) + len(c.undos) + len(c.signs)
		if n == 0 {
			return
		}
		k := rng.IntN(n)
		switch {
		case k < len(busy):
			c.deliver(busy[k])
		case k < len(busy)+len(c.tasks):
			j := c.tasks[k-len(busy)]
			c.tasks = slices.Delete(c.tasks, k-len(busy), k-len(busy)+1)
			failed := fail != nil && fail(j.node, j.round)
			ev := protocol.TaskDone(j.round, failed)
			if failed {
				ev = protocol.TaskFailedWhy(j.round, protocol.Failure{Kind: protocol.KindTaskFailed, Code: 3})
			}
			c.step(j.node, ev)
		case k < len(busy)+len(c.tasks)+len(c.undos):
			k -= len(busy) + len(c.tasks)
			j := c.undos[k]
			c.undos = slices.Delete(c.undos, k, k+1)
			c.step(j.node, protocol.UndoDone(j.round, false, 0))
		default:
			c.sign(k - len(busy) - len(c.tasks) - len(c.undos))
		}
	}
	c.t.Fatal("the chain did not settle")
}

// setLink takes the links between p and p+1 down (what is on them is
// lost) or up again (LinkUp at both ends).
func (c *rchain) setLink(p int, up bool) {
	c.t.Helper()
	c.up[p] = up
	c.links[2*p], c.links[2*p+1] = nil, nil
	if up {
		c.step(p, protocol.LinkUp(protocol.Succ))
		c.step(p+1, protocol.LinkUp(protocol.Pred))
	}
}

// outcomes is what the receipts the Head holds for round say, by node.
func (c *rchain) outcomes(round string) []string {
	var out []string
	for _, n := range c.ms[0].Receipts(round) {
		o := n.Envelope[strings.Index(n.Envelope, `"outcome":`)+11:]
		out = append(out, n.Node+" "+o[:strings.IndexByte(o, '"')])
	}
	return out
}

// checkBundle checks that the Head holds every node's receipt for round,
// each the one its node signed, and reported them (ActReceipts).
func (c *rchain) checkBundle(round string, want ...string) {
	c.t.Helper()
	if !c.bundle[key(0, round)] {
		c.t.Errorf("the Head did not report the receipts of %s as held", round)
	}
	held := c.ms[0].Receipts(round)
	if len(held) != len(c.names) {
		c.t.Fatalf("the Head holds %d receipts of %s, want %d:\n%s", len(held), round, len(c.names), strings.Join(c.log, "\n"))
	}
	for i, n := range held {
		if n.Node != c.names[i] || n.Envelope != c.envs[key(i, round)] || n.Digest != c.digestOf(i, round) {
			c.t.Errorf("the Head's receipt %d of %s is %+v, not what %s signed", i, round, n, c.names[i])
		}
	}
	if got := c.outcomes(round); !slices.Equal(got, want) {
		c.t.Errorf("outcomes %q, want %q", got, want)
	}
}

func seeds(t *testing.T, f func(t *testing.T, rng *rand.Rand)) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			f(t, rand.New(rand.NewPCG(seed, 35)))
			if t.Failed() {
				t.Logf("seed %d", seed)
			}
		})
	}
}

// Draft section "Protocol Operation" (phase 3: the successor's task
// starts on its predecessor's COMPLETE) with receipts (docs/RECEIPTS.md):
// four nodes, every node signs ran-ok binding its predecessor's receipt,
// RDIGEST reaches each successor before its task starts (rchain checks),
// and the Head ends the round holding all four receipts.
func TestReceiptsHappyPath(t *testing.T) {
	seeds(t, func(t *testing.T, rng *rand.Rand) {
		c := newRChain(t, 4, nil)
		for i := range 4 {
			c.step(i, protocol.LocalReady("r1"))
		}
		c.drain(rng, nil)
		c.checkBundle("r1", "A ran-ok", "B ran-ok", "C ran-ok", "D ran-ok")
		for i := range 4 {
			if c.done[key(i, "r1")] != protocol.Done {
				t.Errorf("%s: round ended %v", c.names[i], c.done[key(i, "r1")])
			}
			if !c.bundle[key(i, "r1")] {
				t.Errorf("%s did not report the receipts it must hold", c.names[i])
			}
		}
		// Every node after the Head signed only after its task ended, and
		// its task started after its predecessor signed.
		order := strings.Join(c.log, "\n")
		for i := 1; i < 4; i++ {
			signPred := strings.Index(order, c.names[i-1]+" sign r1")
			run := strings.Index(order, c.names[i]+" run r1")
			if signPred < 0 || run < signPred {
				t.Errorf("%s's task ran before %s signed:\n%s", c.names[i], c.names[i-1], order)
			}
		}
	})
}

// The exit wave (draft phase 4) carries the receipts ahead of it: in a
// lockstep run the Head holds all four receipts when the exit wave's
// COMPLETE reaches it, so ActReceipts comes no later than ActDone.
func TestReceiptsAheadOfTheExitWave(t *testing.T) {
	c := newRChain(t, 4, nil)
	for i := range 4 {
		c.step(i, protocol.LocalReady("r1"))
	}
	for range 1000 {
		if c.done[key(0, "r1")] != 0 {
			break
		}
		switch {
		case len(c.signs) > 0:
			c.sign(0)
		case len(c.tasks) > 0:
			j := c.tasks[0]
			c.tasks = c.tasks[1:]
			c.step(j.node, protocol.TaskDone(j.round, false))
		default:
			for l := range c.links {
				if len(c.links[l]) > 0 {
					c.deliver(l)
					break
				}
			}
		}
	}
	if c.done[key(0, "r1")] != protocol.Done || !c.bundle[key(0, "r1")] {
		t.Fatalf("the Head ended r1 %v holding its receipts %v", c.done[key(0, "r1")], c.bundle[key(0, "r1")])
	}
}

// docs/UNDO.md with receipts: C's task fails, B and A undo their work;
// the receipts are signed after the round, Head first, and say A and B
// undone, C failed with its status, D not reached.
func TestReceiptsUndo(t *testing.T) {
	seeds(t, func(t *testing.T, rng *rand.Rand) {
		c := newRChain(t, 4, func(i int, pc *protocol.Config) { pc.Undo = true })
		for i := range 4 {
			c.step(i, protocol.LocalReady("u1"))
		}
		c.drain(rng, func(i int, _ string) bool { return i == 2 })
		c.checkBundle("u1", "A undone", "B undone", "C failed", "D not-reached")
		for _, s := range c.log {
			if strings.Contains(s, "sign u1") && !strings.HasPrefix(s, "A ") && c.asked[key(0, "u1")] == 0 {
				t.Errorf("%q before the Head signed", s)
			}
		}
		if c.ms[2].Receipts("u1")[0].Envelope != c.envs[key(2, "u1")] {
			t.Error("C does not hold its own receipt")
		}
	})
}

// Without undo, a failed task ends the round early (a fault notice
// halts the nodes): the nodes after it sign "not-reached", binding the
// failed node's receipt, and every receipt still reaches the Head.
func TestReceiptsNotReached(t *testing.T) {
	seeds(t, func(t *testing.T, rng *rand.Rand) {
		c := newRChain(t, 4, nil)
		c.noticed = true
		for i := range 4 {
			c.step(i, protocol.LocalReady("r1"))
		}
		c.drain(rng, func(i int, _ string) bool { return i == 1 })
		c.checkBundle("r1", "A ran-ok", "B failed", "C not-reached", "D not-reached")
		if o := c.signsOf(1); o.Status != 3 {
			t.Errorf("B's receipt says status %d, want 3", o.Status)
		}
	})
}

// signsOf is the last order node i was asked to sign.
func (c *rchain) signsOf(i int) protocol.ReceiptOrder {
	return c.orders[i]
}

// A round the Head ended before the READY wave reached the others: the
// nodes that never heard of it learn it from the predecessor's digest,
// end it there, and sign "not-reached".
func TestReceiptsRoundNeverReached(t *testing.T) {
	c := newRChain(t, 3, nil)
	c.setLink(0, false)
	c.step(0, protocol.LocalReady("r9"))
	c.step(0, protocol.Abort("r9"))
	c.sign(0)
	c.setLink(0, true)
	c.drain(rand.New(rand.NewPCG(1, 1)), nil)
	c.checkBundle("r9", "A not-reached", "B not-reached", "C not-reached")
	if c.done[key(2, "r9")] != protocol.Aborted {
		t.Errorf("C ended r9 %v, want aborted", c.done[key(2, "r9")])
	}
}

// Draft "Reconnects" with receipts: the link between B and C drops while
// the exit wave and its receipts are on it; when it comes back C sends
// again the receipts not handed over, and the Head still gets all four.
func TestReceiptsLinkDropMidExitWave(t *testing.T) {
	c := newRChain(t, 4, nil)
	for i := range 4 {
		c.step(i, protocol.LocalReady("r1"))
	}
	rng := rand.New(rand.NewPCG(5, 5))
	// Run until D's receipt is on the link from C to B.
	for range 10000 {
		if slices.ContainsFunc(c.links[2*1+1], func(m protocol.Message) bool {
			return m.Cmd == protocol.ReceiptLine && m.Receipt.Node == "D"
		}) {
			break
		}
		c.stepOnce(rng, func(l int, m protocol.Message) bool { return l == 3 && m.Cmd == protocol.ReceiptLine })
	}
	if !slices.ContainsFunc(c.links[3], func(m protocol.Message) bool { return m.Cmd == protocol.ReceiptLine }) {
		t.Fatalf("D's receipt never reached the link from C to B:\n%s", strings.Join(c.log, "\n"))
	}
	// Handed to the link, but the connection dies before B reads it.
	c.up[1] = false
	c.links[2], c.links[3] = nil, nil
	c.step(1, protocol.LinkDown(protocol.Succ, 0))
	c.step(2, protocol.LinkDown(protocol.Pred, 0))
	before := len(c.log)
	c.setLink(1, true)
	c.drain(rng, nil)
	resent := strings.Join(c.log[before:], "\n")
	if !strings.Contains(resent, "C>pred RECEIPT r1: D") {
		t.Errorf("C did not send D's receipt again when the link came back:\n%s", resent)
	}
	c.checkBundle("r1", "A ran-ok", "B ran-ok", "C ran-ok", "D ran-ok")
}

// stepOnce does one thing of drain's, never delivering a line that hold
// (if set) holds back.
func (c *rchain) stepOnce(rng *rand.Rand, hold func(l int, m protocol.Message) bool) {
	c.t.Helper()
	var busy []int
	for l, q := range c.links {
		if len(q) > 0 && (hold == nil || !hold(l, q[0])) {
			busy = append(busy, l)
		}
	}
	n := len(busy) + len(c.tasks) + len(c.signs)
	if n == 0 {
		return
	}
	switch k := rng.IntN(n); {
	case k < len(busy):
		c.deliver(busy[k])
	case k < len(busy)+len(c.tasks):
		j := c.tasks[k-len(busy)]
		c.tasks = slices.Delete(c.tasks, k-len(busy), k-len(busy)+1)
		c.step(j.node, protocol.TaskDone(j.round, false))
	default:
		c.sign(k - len(busy) - len(c.tasks))
	}
}

// restart replaces node i's Machine with one restored from its journal,
// as a node killed and started again on its state directory: what was
// on its links is lost, and they come back.
func (c *rchain) restart(i int) []string {
	c.t.Helper()
	m := protocol.New(c.cfgs[i])
	var interrupted []string
	for _, rec := range c.journal[i] {
		if err := m.Restore(rec); err != nil {
			c.t.Fatal(err)
		}
		if rec.State == protocol.StateStart {
			interrupted = append(interrupted, rec.Round)
		}
	}
	c.ms[i] = m
	c.tasks = slices.DeleteFunc(c.tasks, func(j rjob) bool { return j.node == i })
	c.signs = slices.DeleteFunc(c.signs, func(s rsign) bool { return s.node == i })
	for _, p := range []int{i - 1, i} {
		if p >= 0 && p < len(c.up) {
			c.up[p] = false
			c.links[2*p], c.links[2*p+1] = nil, nil
		}
	}
	c.step(i, protocol.Event{Kind: protocol.EvTick}) // nothing: a restarted node's first step
	return interrupted
}

// docs/RESTARTS.md with receipts: C is killed after it signed (its
// RDIGEST and COMPLETE lost on the link) and restarted from its journal:
// it sends the same envelope again, and is never asked to sign again.
func TestReceiptsRestartSendsTheSameReceipt(t *testing.T) {
	c := newRChain(t, 4, nil)
	for i := range 4 {
		c.step(i, protocol.LocalReady("r1"))
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for k := 0; c.envs[key(2, "r1")] == ""; k++ {
		if k > 10000 {
			t.Fatalf("C never signed:\n%s", strings.Join(c.log, "\n"))
		}
		c.stepOnce(rng, func(l int, m protocol.Message) bool { return l == 4 && m.Cmd != protocol.Ready }) // C's digest and COMPLETE not delivered
	}
	env := c.envs[key(2, "r1")]
	c.restart(2)
	c.setLink(1, true)
	c.setLink(2, true)
	c.drain(rng, nil)
	c.checkBundle("r1", "A ran-ok", "B ran-ok", "C ran-ok", "D ran-ok")
	if t.Failed() {
		t.Logf("%q\n%s", c.outcomes("r1"), strings.Join(c.log, "\n"))
	}
	if c.envs[key(2, "r1")] != env || c.asked[key(2, "r1")] != 1 {
		t.Errorf("C signed again after its restart (%d sign actions)", c.asked[key(2, "r1")])
	}
}

// A node killed after its outcome settled but before it signed (its task
// succeeded; the driver had not signed yet) is asked to sign once more
// after the restart (ReceiptsToSign): nothing carried a receipt yet.
func TestReceiptsRestartBeforeSigning(t *testing.T) {
	c := newRChain(t, 3, nil)
	for i := range 3 {
		c.step(i, protocol.LocalReady("r1"))
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for k := 0; !slices.ContainsFunc(c.signs, func(s rsign) bool { return s.node == 1 }); k++ {
		if k > 10000 {
			t.Fatalf("B was never asked to sign:\n%s", strings.Join(c.log, "\n"))
		}
		c.stepOnce(rng, nil)
	}
	c.restart(1)
	delete(c.asked, key(1, "r1"))
	acts := c.ms[1].ReceiptsToSign(nil)
	if len(acts) != 1 || acts[0].Kind != protocol.ActSignReceipt || acts[0].Sign.Outcome != protocol.ReceiptRanOK {
		t.Fatalf("ReceiptsToSign after the restart: %+v", acts)
	}
	c.asked[key(1, "r1")] = 1
	c.signs = append(c.signs, rsign{1, "r1", *acts[0].Sign})
	for p := range 2 {
		c.setLink(p, true)
	}
	c.drain(rng, nil)
	c.checkBundle("r1", "A ran-ok", "B ran-ok", "C ran-ok")
}

// A chain setting differs: a node without receipts gets a receipt line,
// or a node with receipts gets the COMPLETE of a predecessor that sent
// no RDIGEST. Both are configuration mismatches naming the setting.
func TestReceiptsMismatch(t *testing.T) {
	off := protocol.New(protocol.Config{Role: protocol.Tail, Extensions: true, Name: "B"})
	off.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Ready, Round: "r1"}), nil)
	_, err := off.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.RDigestLine, Round: "r1",
		Receipt: &protocol.ReceiptNote{Node: "A", Digest: strings.Repeat("a", 64)}}), nil)
	var v *protocol.Violation
	if !errors.As(err, &v) || !v.Mismatch || v.Setting != "receipts" {
		t.Errorf("a receipt line at a node without receipts: %v", err)
	}

	on := protocol.New(protocol.Config{Role: protocol.Tail, Extensions: true, Name: "B", Receipts: true, Chain: []string{"A", "B"}})
	for _, ev := range []protocol.Event{
		protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Ready, Round: "r1"}),
		protocol.LocalReady("r1"),
	} {
		if _, err := on.Step(ev, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err = on.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Complete, Round: "r1"}), nil)
	if !errors.As(err, &v) || !v.Mismatch || v.Setting != "receipts" {
		t.Errorf("COMPLETE without RDIGEST at a node with receipts: %v", err)
	}
	if st, _ := on.State("r1"); st != protocol.StateWatch {
		t.Errorf("the refused COMPLETE moved the round to %v", st)
	}
}

// Bad receipt lines from a peer are violations that change nothing: a
// digest of a node that is not the predecessor, a receipt out of the
// chain's order, a second different receipt of one node, lines the wrong
// way.
func TestReceiptsBadLines(t *testing.T) {
	d := func(c byte) string { return strings.Repeat(string(c), 64) }
	m := protocol.New(protocol.Config{Role: protocol.Middle, Extensions: true, Name: "B", Receipts: true, Chain: []string{"A", "B", "C", "D"}})
	step(t, m, protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.Ready, Round: "r1"}))
	for _, tc := range []struct {
		from protocol.Side
		msg  protocol.Message
	}{
		{protocol.Pred, protocol.Message{Cmd: protocol.RDigestLine, Round: "r1", Receipt: &protocol.ReceiptNote{Node: "C", Digest: d('a')}}},
		{protocol.Succ, protocol.Message{Cmd: protocol.RDigestLine, Round: "r1", Receipt: &protocol.ReceiptNote{Node: "A", Digest: d('a')}}},
		{protocol.Pred, protocol.Message{Cmd: protocol.RDigestLine, Round: "r1", Receipt: &protocol.ReceiptNote{Node: "A", Digest: "xyz"}}},
		{protocol.Succ, protocol.Message{Cmd: protocol.ReceiptLine, Round: "r1", Receipt: &protocol.ReceiptNote{Node: "D", Digest: d('d'), Envelope: "{}"}}},
		{protocol.Pred, protocol.Message{Cmd: protocol.ReceiptLine, Round: "r1", Receipt: &protocol.ReceiptNote{Node: "C", Digest: d('c'), Envelope: "{}"}}},
		{protocol.Succ, protocol.Message{Cmd: protocol.ReceiptLine, Round: "r1", Receipt: &protocol.ReceiptNote{Node: "C", Digest: d('c'), Envelope: "a b"}}},
	} {
		before, _ := m.State("r1")
		_, err := m.Step(protocol.Recv(tc.from, tc.msg), nil)
		var v *protocol.Violation
		if !errors.As(err, &v) {
			t.Errorf("%v from %v: %v, want a violation", tc.msg, tc.from, err)
		}
		if st, _ := m.State("r1"); st != before || m.Receipts("r1") != nil {
			t.Errorf("%v from %v changed the round", tc.msg, tc.from)
		}
	}
	// The predecessor's digest, twice (a re-send), then another: refused.
	step(t, m, protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.RDigestLine, Round: "r1", Receipt: &protocol.ReceiptNote{Node: "A", Digest: d('a')}}))
	step(t, m, protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.RDigestLine, Round: "r1", Receipt: &protocol.ReceiptNote{Node: "A", Digest: d('a')}}))
	if _, err := m.Step(protocol.Recv(protocol.Pred, protocol.Message{Cmd: protocol.RDigestLine, Round: "r1", Receipt: &protocol.ReceiptNote{Node: "A", Digest: d('b')}}), nil); err == nil {
		t.Error("a second, different digest of A was taken")
	}
	// Signing what was not asked for is the driver's misuse.
	if _, err := m.Step(protocol.ReceiptSigned("r1", "{}", d('e')), nil); !errors.Is(err, protocol.ErrNotAsked) {
		t.Errorf("ReceiptSigned not asked for: %v", err)
	}
}

// Receipts off: the machine's lines and actions are what they were (the
// golden traces check it too); here, a chain without receipts is never
// asked to sign and sends no receipt line.
func TestReceiptsOffSignNothing(t *testing.T) {
	c := newRChain(t, 3, func(i int, pc *protocol.Config) { pc.Receipts = false })
	for i := range 3 {
		c.step(i, protocol.LocalReady("r1"))
	}
	c.drain(rand.New(rand.NewPCG(2, 2)), nil)
	for _, s := range c.log {
		if strings.Contains(s, "sign") || strings.Contains(s, "RDIGEST") || strings.Contains(s, "RECEIPT") {
			t.Errorf("receipts off: %q", s)
		}
	}
	if c.done[key(0, "r1")] != protocol.Done {
		t.Errorf("the round ended %v", c.done[key(0, "r1")])
	}
}

// docs/STEERING.md's approval gate with receipts: C's task is denied; C's
// receipt says denied, D's not-reached, and A's and B's ran-ok.
func TestReceiptsDenied(t *testing.T) {
	seeds(t, func(t *testing.T, rng *rand.Rand) {
		c := newRChain(t, 4, func(i int, pc *protocol.Config) { pc.Approve = i == 2 })
		c.noticed, c.deny = true, map[int]bool{2: true}
		for i := range 4 {
			c.step(i, protocol.LocalReady("r1"))
		}
		c.drain(rng, nil)
		c.checkBundle("r1", "A ran-ok", "B ran-ok", "C denied", "D not-reached")
	})
}
