package protocol_test

import (
	"errors"
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
)

// fuzzRounds are the round ids FuzzMachine's events name: a few legal ones
// and two a peer could not put on the wire (invalid ids).
var fuzzRounds = [8]string{"", "r1", "r2", "r3", "x.y-z_0", "r1", "bad id", "\x00"}

// decodeFuzzEvent turns two fuzz bytes into an event: the low 3 bits of b0
// pick the kind, b1 the command (low 2 bits) and round (next 3 bits).
func decodeFuzzEvent(b0, b1 byte) protocol.Event {
	cmd := protocol.Command(b1 & 3) // 0 is invalid on purpose
	round := fuzzRounds[(b1>>2)&7]
	switch b0 & 7 {
	case 0:
		return protocol.Recv(protocol.Pred, protocol.Message{Cmd: cmd, Round: round})
	case 1:
		return protocol.Recv(protocol.Succ, protocol.Message{Cmd: cmd, Round: round})
	case 2:
		return protocol.LocalReady(round)
	case 3:
		return protocol.TaskDone(round, false)
	case 4:
		return protocol.TaskDone(round, b1&0x80 != 0)
	case 5:
		return protocol.LinkUp(protocol.Pred)
	case 6:
		return protocol.LinkUp(protocol.Succ)
	}
	return protocol.Abort(round)
}

// fuzzRef is what the fuzz harness has seen accepted for one round.
type fuzzRef struct {
	localReady, readyPred, startSucc, completePred bool
	ran                                            bool
}

// FuzzMachine feeds one Machine random event sequences from both
// neighbours and the application, decoded from the fuzz input (the first
// byte picks the role and limits). Whatever the sequence:
//   - Step never panics;
//   - a task runs only once the draft's preconditions hold: locally ready,
//     READY and COMPLETE from the predecessor (unless Head), START from the
//     successor (unless Tail) (draft: Protocol Operation, Phases 1-3);
//   - a task runs at most once per round, and with Config.Ordered (bit 16
//     of the first byte) only while no other round's task runs;
//   - a rejected message is a *protocol.Violation, any other rejection one
//     of the documented local errors, and a rejection changes no state
//     and returns out as given (docs/DESIGN.md: "Bad input never ... moves
//     its state");
//   - READY never comes from the successor and START never from the
//     predecessor; every send goes to a neighbour the role has, in the
//     direction its command travels;
//   - every reported state change starts from the current state.
func FuzzMachine(f *testing.F) {
	// A few honest runs per role, so the fuzzer starts from deep states.
	// Pairs: (kind, cmd | round<<2).
	f.Add(byte(0), []byte{2, 0, 1, 2, 3, 0, 1, 3})                         // Head: ready, START, done, COMPLETE
	f.Add(byte(1), []byte{0, 1, 2, 0, 1, 2, 0, 3, 3, 0, 1, 3})             // Middle
	f.Add(byte(2), []byte{2, 4, 0, 5, 0, 7, 3, 4, 5, 0, 6, 0})             // Tail, round r1, link ups
	f.Add(byte(3), []byte{2, 8, 4, 0x88, 2, 8, 7, 8})                      // Single, round r2, fails
	f.Add(byte(1), []byte{0, 1, 1, 1, 0, 2, 0, 3, 1, 3, 0, 0, 1, 0, 7, 0}) // violations
	f.Add(byte(16), []byte{2, 0, 2, 4, 1, 0, 1, 4, 3, 0, 3, 4})            // Head, Ordered: two rounds
	f.Fuzz(func(t *testing.T, cfg byte, data []byte) {
		role := protocol.Role(cfg&3 + 1)
		pc := protocol.Config{Role: role}
		if cfg&4 != 0 {
			pc.MaxRounds, pc.KeepFinished = 2, 1
		}
		if cfg&8 != 0 {
			pc.AcceptRound = func(id string) bool { return id != "r3" }
		}
		pc.Ordered = cfg&16 != 0
		m := protocol.New(pc)
		refs := map[string]*fuzzRef{}
		ref := func(id string) *fuzzRef {
			if refs[id] == nil {
				refs[id] = &fuzzRef{}
			}
			return refs[id]
		}
		var out []protocol.Action
		for len(data) >= 2 {
			ev := decodeFuzzEvent(data[0], data[1])
			data = data[2:]

			var before [len(fuzzRounds)]protocol.State
			var known [len(fuzzRounds)]bool
			for k, id := range fuzzRounds {
				before[k], known[k] = m.State(id)
			}
			active := m.Active()
			in := append(out[:0], protocol.Action{Kind: protocol.ActRunTask, Round: "sentinel"})
			got, err := m.Step(ev, in)

			if err != nil {
				var v *protocol.Violation
				if ev.Kind == protocol.EvRecv {
					if !errors.As(err, &v) {
						t.Fatalf("rejected message %+v: %v is not a *Violation", ev, err)
					}
					if v.Msg != ev.Msg || v.From != ev.From || v.Reason == "" {
						t.Fatalf("violation %+v for %+v", v, ev)
					}
				} else if !errors.Is(err, protocol.ErrBadRound) && !errors.Is(err, protocol.ErrNotRunning) &&
					!errors.Is(err, protocol.ErrRoundFinished) && !errors.Is(err, protocol.ErrTooManyRounds) {
					t.Fatalf("event %+v: undocumented error %v", ev, err)
				}
				if len(got) != 1 || got[0].Round != "sentinel" {
					t.Fatalf("event %+v rejected, but out = %v", ev, got)
				}
				for k, id := range fuzzRounds {
					if st, ok := m.State(id); st != before[k] || ok != known[k] {
						t.Fatalf("event %+v rejected (%v), but round %q moved %v/%v -> %v/%v", ev, err, id, before[k], known[k], st, ok)
					}
				}
				if m.Active() != active {
					t.Fatalf("event %+v rejected, but Active %d -> %d", ev, active, m.Active())
				}
				out = got[:0]
				continue
			}
			if len(got) == 0 || got[0].Round != "sentinel" {
				t.Fatalf("Step dropped what out held: %v", got)
			}
			acts := got[1:]
			out = got[:0]

			// Forgotten rounds (KeepFinished) may be opened afresh.
			for k, id := range fuzzRounds {
				if !known[k] {
					delete(refs, id)
				}
			}
			if ev.Kind == protocol.EvRecv {
				if ev.From == protocol.Succ && ev.Msg.Cmd == protocol.Ready || ev.From == protocol.Pred && ev.Msg.Cmd == protocol.Start {
					t.Fatalf("accepted %v from %v", ev.Msg, ev.From)
				}
				r := ref(ev.Msg.Round)
				switch {
				case ev.From == protocol.Pred && ev.Msg.Cmd == protocol.Ready:
					r.readyPred = true
				case ev.From == protocol.Pred && ev.Msg.Cmd == protocol.Complete:
					r.completePred = true
				case ev.From == protocol.Succ && ev.Msg.Cmd == protocol.Start:
					r.startSucc = true
				}
			}
			if ev.Kind == protocol.EvLocalReady {
				ref(ev.Round).localReady = true
			}
			cur := before
			for _, a := range acts {
				switch a.Kind {
				case protocol.ActRunTask:
					r := ref(a.Round)
					switch {
					case r.ran:
						t.Fatalf("task of round %q ran twice", a.Round)
					case !r.localReady:
						t.Fatalf("task of %q ran before local readiness", a.Round)
					case role.HasPred() && !r.readyPred:
						t.Fatalf("task of %q ran without READY from the predecessor", a.Round)
					case role.HasPred() && !r.completePred:
						t.Fatalf("task of %q ran without COMPLETE from the predecessor", a.Round)
					case role.HasSucc() && !r.startSucc:
						t.Fatalf("task of %q ran without START from the successor", a.Round)
					}
					r.ran = true
					for k, id := range fuzzRounds {
						if pc.Ordered && id != a.Round && cur[k] == protocol.StateStart {
							t.Fatalf("Ordered: task of %q started while the task of %q runs", a.Round, id)
						}
					}
				case protocol.ActSend:
					if a.To == protocol.Pred && !role.HasPred() || a.To == protocol.Succ && !role.HasSucc() {
						t.Fatalf("%v sends to a missing %v", role, a.To)
					}
					if a.Msg.Cmd == protocol.Ready && a.To != protocol.Succ || a.Msg.Cmd == protocol.Start && a.To != protocol.Pred || !a.Msg.Cmd.Valid() || !protocol.ValidRound(a.Msg.Round) {
						t.Fatalf("bad send %+v", a)
					}
				case protocol.ActState:
					for k, id := range fuzzRounds {
						if id == a.Round {
							if a.From != cur[k] && !(cur[k] == 0 && a.From == protocol.StateSync) {
								t.Fatalf("round %q: change from %v, but it was %v", id, a.From, cur[k])
							}
							cur[k] = a.State
						}
					}
				case protocol.ActDone:
					if st, _ := m.State(a.Round); !st.Terminal() && st != 0 {
						t.Fatalf("round %q over in state %v", a.Round, st)
					}
				}
			}
		}
	})
}
