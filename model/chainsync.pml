/*
 * ChainSync -- Promela model of one synchronization round on a chain of N
 * nodes, with the project's fault additions (docs: model/README.md,
 * spec: the ChainSync draft as read in docs/DESIGN.md).
 *
 *   spin -DN=4 -a chainsync.pml && gcc -O2 -DSAFETY -o pan pan.c && ./pan
 *
 * Macros:
 *   N         number of nodes, 2..5            (default 4)
 *   MAXDROPS  link drops allowed per run       (default 2)
 *   MAXCRASH  crash-restarts allowed per run   (default 0)
 *   BUG       0 = correct model; 1..7 = seeded bugs, each must be rejected:
 *     1  an intermediate node forwards READY before it is locally ready
 *     2  an intermediate node starts its task on START (skips WATCH)
 *     3  a finished node does not answer a duplicate COMPLETE from its
 *        predecessor (it "MAY terminate"), so a drop can lose the exit wave
 *     4  no duplicate suppression: a re-sent COMPLETE from the predecessor
 *        triggers the task again
 *     5  no re-send after a reconnect: a message lost in a drop is gone
 *     6  an intermediate node sends its backward COMPLETE (and is done) as
 *        soon as its own task finishes, without waiting for its successor
 *     7  the journal is written after the step's sends and task start
 *        instead of before them, so a crash in between restores a node
 *        to a state older than what its neighbours saw
 *   BUG 1, 2 and 6 need N >= 3; BUG 3, 4 and 5 need MAXDROPS >= 1;
 *   BUG 7 needs MAXCRASH >= 1.
 *
 * Crash-restart with a journal (docs/DESIGN.md, "Restarts and durable
 * state"): every node keeps a journal (jst, jlr, jgot, jlastF, jlastB) of
 * its durable state, written (fsynced) in the same step as the change and
 * so before the message or task the step causes. A crash (at most
 * MAXCRASH per run, at any node, at any time, finished nodes included)
 * loses the process's memory and its connections: its state is reloaded
 * from its journal, and both its links drop, losing what was in flight;
 * they come back like any dropped link, and the reconnect rule re-sends.
 * A task the crash interrupted (state RUN in the journal) is resolved by
 * the resume policy, done (the restart was the task) or rerun: either way
 * the node leaves RUN later by its "task done" step, and the interrupted
 * run and the re-run count as the task's one run, which the crash asserts
 * had not finished (nfin == i).
 *
 * Nodes: 0 = Head, 1..N-2 = intermediate, N-1 = Tail.
 * Link l joins node l (predecessor, dialer) and node l+1 (successor,
 * listener): fwd[l] carries l -> l+1 (READY, COMPLETE), bwd[l] carries
 * l+1 -> l (START, COMPLETE).
 *
 * Properties (pan -DSAFETY: assertions + invalid end states):
 *   (a) taskStart: every node was locally ready       assert(nlr == N)
 *   (b) taskStart: tasks 0..i-1 finished, i not yet run  (nfin == i, !started)
 *       headDone:  all N tasks ran                      (nfin == N)
 *   (c) only DONE nodes sit at end_* labels, so any reachable state where
 *       nothing can move and some node is not DONE is an "invalid end state";
 *       every run is finite (bounded drops, one-shot events), hence every
 *       run ends with all nodes DONE
 *   (d) headDone: all other nodes are already DONE     (ndone == N-1)
 *   messages: headDone asserts 4(N-1) distinct messages sent, and no
 *       re-transmissions at all when no link dropped and no node crashed
 *   no honest message is ever a protocol violation (VIOLATION never fires)
 *   every send finds room in its channel (assert(nfull(..)))
 *
 * Granularity: receiving a message, the state change and the messages it
 * causes are one atomic step (the implementation serializes sends per link;
 * a drop between receive and send is equivalent to a drop just after the
 * send, as the lost message is then re-sent on reconnect).
 */

#ifndef N
#define N 4
#endif
#ifndef MAXDROPS
#define MAXDROPS 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 0
#endif
#ifndef BUG
#define BUG 0
#endif

/* in flight per direction: 2 protocol messages + re-sends; checked by
 * assert(nfull(..)) on every send, so a too-small CAP cannot hide anything */
#define CAP 3

mtype = { READY, START, COMPLETE };

/* per-node protocol state (docs/DESIGN.md "State machine") */
#define SYNC     0
#define RDY      1
#define WATCH    2
#define RUN      3      /* the draft's START state: task executing   */
#define CMPL     4      /* the draft's COMPLETE state                */
#define DONE     5

chan fwd[N-1] = [CAP] of { mtype };
chan bwd[N-1] = [CAP] of { mtype };

byte  st[N];            /* state of each node                        */
bool  lr[N];            /* node is locally ready                     */
bool  gotReady[N];      /* READY from the predecessor was received   */
bool  started[N];       /* task of node i has been started           */
mtype lastF[N-1];       /* last message node l sent on link l (0: none) */
mtype lastB[N-1];       /* last message node l+1 sent on link l        */
bool  down[N-1];        /* link l is currently broken                */

byte nlr;               /* number of locally ready nodes             */
byte nfin;              /* number of finished tasks                  */
byte ndone;             /* number of nodes in DONE                   */
byte sent;              /* distinct protocol messages sent          */
byte sentF[N-1];        /* ghost: messages ever sent forward on link l  */
byte sentB[N-1];        /* ghost: messages ever sent backward on link l */
byte resent;            /* re-transmissions (reconnect, dup answers)  */
byte drops;             /* link drops so far                         */
byte crashes;           /* crash-restarts so far                     */
bool everlr[N];         /* ghost: node i was ever locally ready      */

/* each node's journal: its durable state as last written */
byte  jst[N];
bool  jlr[N];
bool  jgot[N];
mtype jlastF[N-1];      /* node l's journal: last message sent on link l   */
mtype jlastB[N-1];      /* node l+1's journal: last message sent on link l */
bool  jdirty[N];        /* BUG 7: node i acted on a change not yet written */

/* ---- sending: a message sent on a broken link is lost, but it is still
 * the sender's "last message on that link" and is re-sent on reconnect --- */
/* sent counts distinct messages (a ghost per link and direction), so a
 * node that repeats a step after a crash (BUG 7) is caught by what the
 * repeat does, not by the count */
inline first(mask, m) {
  if
  :: mask & (1 << m) -> resent++
  :: else -> mask = mask | (1 << m); sent++
  fi
}
inline sendF(l, m) {
  lastF[l] = m; first(sentF[l], m);
  if
  :: !down[l] -> assert(nfull(fwd[l])); fwd[l]!m
  :: else -> skip
  fi
}
inline sendB(l, m) {
  lastB[l] = m; first(sentB[l], m);
  if
  :: !down[l] -> assert(nfull(bwd[l])); bwd[l]!m
  :: else -> skip
  fi
}
inline resendB(l) {     /* done node answers a duplicate COMPLETE */
  assert(lastB[l] == COMPLETE); resent++;
  if
  :: !down[l] -> assert(nfull(bwd[l])); bwd[l]!COMPLETE
  :: else -> skip
  fi
}

/* ---- properties checked when a task starts / the Head finishes -------- */
inline taskStart(i) {
  assert(nlr == N);       /* (a) every node was locally ready          */
  assert(!started[i]);    /* (b) each task runs at most once           */
  assert(nfin == i);      /* (b) tasks 0..i-1 finished, none running   */
  started[i] = 1;
  st[i] = RUN
}
inline headDone() {
  assert(ndone == N-1);   /* (d) the Head is the last node to finish   */
  assert(nfin == N);      /* (b) every task ran                        */
  assert(sent == 4*(N-1));/* every protocol message originated once    */
  assert(drops > 0 || crashes > 0 || resent == 0); /* no faults: exactly 4(N-1) on the wire */
  st[0] = DONE; ndone++
}
#define VIOLATION assert(false)   /* honest peers never send this */

inline localReady(i) {
  lr[i] = 1;
  if
  :: !everlr[i] -> everlr[i] = 1; nlr++
  :: else -> skip
  fi
}

/* write node i's durable state to its journal (write + fsync) */
inline journal(i) {
  jst[i] = st[i]; jlr[i] = lr[i]; jgot[i] = gotReady[i];
  if
  :: i < N-1 -> jlastF[i] = lastF[i]
  :: else -> skip
  fi;
  if
  :: i > 0 -> jlastB[i-1] = lastB[i-1]
  :: else -> skip
  fi
}

/* SAVE ends every step of a node: the journal holds the step's changes
 * before anything the step sent or started can be seen (the step is
 * atomic). BUG 7 writes it in a later step, after the sends. */
#if BUG == 7
#define SAVE(i) jdirty[i] = 1
#define LATESAVE(i) :: atomic { jdirty[i] -> journal(i); jdirty[i] = 0 }
#else
#define SAVE(i) journal(i)
#define LATESAVE(i)
#endif

/* link l breaks: what is in flight in both directions is lost */
inline cut(l) {
  down[l] = 1;
  do :: nempty(fwd[l]) -> fwd[l]?_ :: empty(fwd[l]) -> break od;
  do :: nempty(bwd[l]) -> bwd[l]?_ :: empty(bwd[l]) -> break od
}

/* node i crashes and restarts: its memory is gone, its journal is not,
 * and its connections die with it */
inline crash(i) {
  crashes++;
  st[i] = jst[i]; lr[i] = jlr[i]; gotReady[i] = jgot[i];
  if
  :: i < N-1 -> lastF[i] = jlastF[i]; cut(i)
  :: else -> skip
  fi;
  if
  :: i > 0 -> lastB[i-1] = jlastB[i-1]; cut(i-1)
  :: else -> skip
  fi;
  jdirty[i] = 0;
  /* an interrupted task (resume policy done or rerun) has not finished */
  if
  :: st[i] == RUN -> assert(nfin == i)
  :: else -> skip
  fi
}
#define CRASH(i) :: atomic { crashes < MAXCRASH -> crash(i) }
/* in a finished node's loop: a crash that restores an unfinished state
 * (only with BUG 7) resumes the node's main loop */
#define CRASHDONE(i) :: atomic { crashes < MAXCRASH -> crash(i) }; \
  if :: st[i] != DONE -> goto alive :: else -> skip fi

/* ======================================================================= */
proctype head() {
alive:
  do
  :: atomic { !lr[0] -> localReady(0); st[0] = RDY; sendF(0, READY); SAVE(0) }
  :: atomic { st[0] == RUN -> nfin++; st[0] = CMPL; sendF(0, COMPLETE); SAVE(0) }
  :: atomic { bwd[0]?START ->
       if
       :: st[0] == RDY -> taskStart(0)
       :: st[0] >= RUN -> skip                       /* duplicate */
       :: else -> VIOLATION
       fi; SAVE(0) }
  :: atomic { bwd[0]?COMPLETE ->
       if
       :: st[0] == CMPL -> headDone(); SAVE(0); break
       :: else -> VIOLATION
       fi }
  :: bwd[0]?READY -> VIOLATION
  CRASH(0)
  LATESAVE(0)
  od;
end_done:
  do
  :: bwd[0]?COMPLETE -> skip                         /* duplicate */
  :: bwd[0]?START    -> skip                         /* duplicate */
  CRASHDONE(0)
  LATESAVE(0)
  od
}

/* ======================================================================= */
proctype middle(byte i) {
alive:
  do
  :: atomic { !lr[i] -> localReady(i);
       if
       :: gotReady[i] && st[i] == SYNC -> st[i] = RDY; sendF(i, READY)
       :: else -> skip
       fi; SAVE(i) }
  :: atomic { fwd[i-1]?READY ->
       if
       :: !gotReady[i] -> gotReady[i] = 1;
          if
#if BUG == 1
          :: true  -> st[i] = RDY; sendF(i, READY)   /* BUG: ignores lr */
#else
          :: lr[i] -> st[i] = RDY; sendF(i, READY)
#endif
          :: else -> skip
          fi
       :: else -> skip                               /* duplicate */
       fi; SAVE(i) }
  :: atomic { bwd[i]?START ->
       if
       :: st[i] == RDY -> sendB(i-1, START); st[i] = WATCH;
#if BUG == 2
          taskStart(i)                                /* BUG: no WATCH */
#else
          skip
#endif
       :: st[i] >= WATCH -> skip                     /* duplicate */
       :: else -> VIOLATION
       fi; SAVE(i) }
  :: atomic { fwd[i-1]?COMPLETE ->
       if
       :: st[i] == WATCH -> taskStart(i)
#if BUG == 4
       :: st[i] >= RUN -> taskStart(i)               /* BUG: no dedup */
#else
       :: st[i] >= RUN -> skip                       /* duplicate */
#endif
       :: else -> VIOLATION
       fi; SAVE(i) }
#if BUG == 6
  :: atomic { st[i] == RUN -> nfin++; st[i] = CMPL; sendF(i, COMPLETE);
       sendB(i-1, COMPLETE); st[i] = DONE; ndone++; SAVE(i); break } /* BUG: early */
#else
  :: atomic { st[i] == RUN -> nfin++; st[i] = CMPL; sendF(i, COMPLETE); SAVE(i) }
#endif
  :: atomic { bwd[i]?COMPLETE ->
       if
       :: st[i] == CMPL -> sendB(i-1, COMPLETE); st[i] = DONE; ndone++; SAVE(i); break
       :: else -> VIOLATION
       fi }
  :: fwd[i-1]?START -> VIOLATION
  :: bwd[i]?READY   -> VIOLATION
  CRASH(i)
  LATESAVE(i)
  od;
end_done:
  do
  :: atomic { fwd[i-1]?COMPLETE ->                  /* duplicate */
#if BUG == 3
       skip             /* BUG: finished node ignores it (has exited) */
#elif BUG == 4
       taskStart(i)     /* BUG: no dedup */
#else
       resendB(i-1)     /* re-send the final backward COMPLETE */
#endif
     }
  :: fwd[i-1]?READY  -> skip                         /* duplicate */
  :: bwd[i]?START    -> skip                         /* duplicate */
  :: bwd[i]?COMPLETE -> skip                         /* duplicate */
  CRASHDONE(i)
  LATESAVE(i)
  od
}

/* ======================================================================= */
#define T (N-1)
proctype tail() {
alive:
  do
  :: atomic { !lr[T] -> localReady(T);
       if   /* READY -> WATCH immediately, sending START */
       :: gotReady[T] && st[T] == SYNC -> sendB(T-1, START); st[T] = WATCH
       :: else -> skip
       fi; SAVE(T) }
  :: atomic { fwd[T-1]?READY ->
       if
       :: !gotReady[T] -> gotReady[T] = 1;
          if
          :: lr[T] -> sendB(T-1, START); st[T] = WATCH
          :: else -> skip
          fi
       :: else -> skip                               /* duplicate */
       fi; SAVE(T) }
  :: atomic { fwd[T-1]?COMPLETE ->
       if
       :: st[T] == WATCH -> taskStart(T)
#if BUG == 4
       :: st[T] >= RUN -> taskStart(T)               /* BUG: no dedup */
#else
       :: st[T] >= RUN -> skip                       /* duplicate */
#endif
       :: else -> VIOLATION
       fi; SAVE(T) }
  :: atomic { st[T] == RUN ->   /* task done: COMPLETE goes back, done */
       nfin++; st[T] = CMPL; sendB(T-1, COMPLETE); st[T] = DONE; ndone++;
       SAVE(T); break }
  :: fwd[T-1]?START -> VIOLATION
  CRASH(T)
  LATESAVE(T)
  od;
end_done:
  do
  :: atomic { fwd[T-1]?COMPLETE ->                  /* duplicate */
#if BUG == 3
       skip             /* BUG: finished node ignores it (has exited) */
#elif BUG == 4
       taskStart(T)     /* BUG: no dedup */
#else
       resendB(T-1)     /* re-send the final backward COMPLETE */
#endif
     }
  :: fwd[T-1]?READY -> skip                          /* duplicate */
  CRASHDONE(T)
  LATESAVE(T)
  od
}

/* ======================================================================= */
/* A link may break (in-flight messages on both directions are lost) and is
 * later re-established; then each side re-sends the last message it sent
 * on the link unless its round is finished (DONE). */
proctype link(byte l) {
end_up:
  do
  :: d_step { drops < MAXDROPS && !down[l] ->
       drops++; down[l] = 1;
       do :: nempty(fwd[l]) -> fwd[l]?_ :: empty(fwd[l]) -> break od;
       do :: nempty(bwd[l]) -> bwd[l]?_ :: empty(bwd[l]) -> break od }
  :: atomic { down[l] -> down[l] = 0;
       /* The listener (node l+1) only adopts the new connection after the
        * dialer (node l) sent a line on it, so the listener's re-send must
        * never be needed while the dialer has nothing to re-send. */
       assert(lastB[l] == 0 || st[l+1] == DONE ||
              (lastF[l] != 0 && st[l] != DONE));
#if BUG != 5
       if
       :: lastF[l] != 0 && st[l] != DONE ->
          assert(nfull(fwd[l])); fwd[l]!lastF[l]; resent++
       :: else -> skip
       fi;
       if
       :: lastB[l] != 0 && st[l+1] != DONE ->
          assert(nfull(bwd[l])); bwd[l]!lastB[l]; resent++
       :: else -> skip
       fi
#endif
     }
  od
}

init {
  byte k;
  atomic {
    run head();
    k = 1;
    do
    :: k < N-1 -> run middle(k); k++
    :: else -> break
    od;
    run tail();
    k = 0;
    do
    :: k < N-1 -> run link(k); k++
    :: else -> break
    od;
    k = 0
  }
}
