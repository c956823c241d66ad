/*
 * ChainSync -- Promela model of one synchronization round on a chain of N
 * nodes, with the project's fault additions (docs: model/README.md,
 * spec: ../shared/spec/chainsync-draft.txt + DECISIONS.md).
 *
 *   spin -DN=4 -a chainsync.pml && gcc -O2 -DSAFETY -o pan pan.c && ./pan
 *
 * Macros:
 *   N         number of nodes, 2..5            (default 4)
 *   MAXDROPS  link drops allowed per run       (default 2)
 *   BUG       0 = correct model; 1..6 = seeded bugs, each must be rejected:
 *     1  an intermediate node forwards READY before it is locally ready
 *     2  an intermediate node starts its task on START (skips WATCH)
 *     3  a finished node does not answer a duplicate COMPLETE from its
 *        predecessor (it "MAY terminate"), so a drop can lose the exit wave
 *     4  no duplicate suppression: a re-sent COMPLETE from the predecessor
 *        triggers the task again
 *     5  no re-send after a reconnect: a message lost in a drop is gone
 *     6  an intermediate node sends its backward COMPLETE (and is done) as
 *        soon as its own task finishes, without waiting for its successor
 *   BUG 1, 2 and 6 need N >= 3; BUG 3, 4 and 5 need MAXDROPS >= 1.
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
 *   messages: headDone asserts 4(N-1) first transmissions, and no
 *       re-transmissions at all when no link dropped
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
#ifndef BUG
#define BUG 0
#endif

/* in flight per direction: 2 protocol messages + re-sends; checked by
 * assert(nfull(..)) on every send, so a too-small CAP cannot hide anything */
#define CAP 3

mtype = { READY, START, COMPLETE };

/* per-node protocol state (DECISIONS.md "State machine") */
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
byte sent;              /* first transmissions of protocol messages  */
byte resent;            /* re-transmissions (reconnect, dup answers)  */
byte drops;             /* link drops so far                         */

/* ---- sending: a message sent on a broken link is lost, but it is still
 * the sender's "last message on that link" and is re-sent on reconnect --- */
inline sendF(l, m) {
  lastF[l] = m; sent++;
  if
  :: !down[l] -> assert(nfull(fwd[l])); fwd[l]!m
  :: else -> skip
  fi
}
inline sendB(l, m) {
  lastB[l] = m; sent++;
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
  assert(drops > 0 || resent == 0); /* no drops: exactly 4(N-1) on the wire */
  st[0] = DONE; ndone++
}
#define VIOLATION assert(false)   /* honest peers never send this */

/* ======================================================================= */
proctype head() {
  do
  :: atomic { !lr[0] -> lr[0] = 1; nlr++; st[0] = RDY; sendF(0, READY) }
  :: atomic { st[0] == RUN -> nfin++; st[0] = CMPL; sendF(0, COMPLETE) }
  :: atomic { bwd[0]?START ->
       if
       :: st[0] == RDY -> taskStart(0)
       :: st[0] >= RUN -> skip                       /* duplicate */
       :: else -> VIOLATION
       fi }
  :: atomic { bwd[0]?COMPLETE ->
       if
       :: st[0] == CMPL -> headDone(); break
       :: else -> VIOLATION
       fi }
  :: bwd[0]?READY -> VIOLATION
  od;
end_done:
  do
  :: bwd[0]?COMPLETE -> skip                         /* duplicate */
  :: bwd[0]?START    -> skip                         /* duplicate */
  od
}

/* ======================================================================= */
proctype middle(byte i) {
  do
  :: atomic { !lr[i] -> lr[i] = 1; nlr++;
       if
       :: gotReady[i] && st[i] == SYNC -> st[i] = RDY; sendF(i, READY)
       :: else -> skip
       fi }
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
       fi }
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
       fi }
  :: atomic { fwd[i-1]?COMPLETE ->
       if
       :: st[i] == WATCH -> taskStart(i)
#if BUG == 4
       :: st[i] >= RUN -> taskStart(i)               /* BUG: no dedup */
#else
       :: st[i] >= RUN -> skip                       /* duplicate */
#endif
       :: else -> VIOLATION
       fi }
#if BUG == 6
  :: atomic { st[i] == RUN -> nfin++; st[i] = CMPL; sendF(i, COMPLETE);
       sendB(i-1, COMPLETE); st[i] = DONE; ndone++; break } /* BUG: early */
#else
  :: atomic { st[i] == RUN -> nfin++; st[i] = CMPL; sendF(i, COMPLETE) }
#endif
  :: atomic { bwd[i]?COMPLETE ->
       if
       :: st[i] == CMPL -> sendB(i-1, COMPLETE); st[i] = DONE; ndone++; break
       :: else -> VIOLATION
       fi }
  :: fwd[i-1]?START -> VIOLATION
  :: bwd[i]?READY   -> VIOLATION
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
  od
}

/* ======================================================================= */
#define T (N-1)
proctype tail() {
  do
  :: atomic { !lr[T] -> lr[T] = 1; nlr++;
       if   /* READY -> WATCH immediately, sending START */
       :: gotReady[T] && st[T] == SYNC -> sendB(T-1, START); st[T] = WATCH
       :: else -> skip
       fi }
  :: atomic { fwd[T-1]?READY ->
       if
       :: !gotReady[T] -> gotReady[T] = 1;
          if
          :: lr[T] -> sendB(T-1, START); st[T] = WATCH
          :: else -> skip
          fi
       :: else -> skip                               /* duplicate */
       fi }
  :: atomic { fwd[T-1]?COMPLETE ->
       if
       :: st[T] == WATCH -> taskStart(T)
#if BUG == 4
       :: st[T] >= RUN -> taskStart(T)               /* BUG: no dedup */
#else
       :: st[T] >= RUN -> skip                       /* duplicate */
#endif
       :: else -> VIOLATION
       fi }
  :: atomic { st[T] == RUN ->   /* task done: COMPLETE goes back, done */
       nfin++; st[T] = CMPL; sendB(T-1, COMPLETE); st[T] = DONE; ndone++;
       break }
  :: fwd[T-1]?START -> VIOLATION
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
