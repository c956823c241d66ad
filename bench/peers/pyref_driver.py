"""Drive one node of the draft author's Python reference implementation
for the peers benchmark (one process per node).

The reference's own command line picks random readiness delays and task
durations; this driver imports its ChainSyncNode class instead (from the
checkout named by --reference) and runs it with empty tasks. Every node
but the Head is ready for every round at once; the Head runs the rounds
one at a time and times each from its ready to the COMPLETE coming back.
The Head prints one JSON line with the latencies (seconds) on stdout.
Nothing of the reference is copied here: it is imported where it lies.
"""

import argparse
import json
import os
import sys
import threading
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reference", required=True, help="directory holding the reference's chainsync.py")
    p.add_argument("--id", required=True)
    p.add_argument("--listen-port", type=int)
    p.add_argument("--succ-port", type=int)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=20)
    a = p.parse_args()

    sys.path.insert(0, a.reference)
    import chainsync  # the reference implementation

    out = sys.stdout
    sys.stdout = open(os.devnull, "w")  # the reference prints every step

    done = {}
    lock = threading.Lock()

    class Node(chainsync.ChainSyncNode):
        def handle_message(self, cmd, direction, round_id):
            super().handle_message(cmd, direction, round_id)
            if self.is_head and cmd == "COMPLETE" and direction == "succ":
                with lock:
                    ev = done.setdefault(round_id, threading.Event())
                ev.set()

    succ = ("127.0.0.1", a.succ_port) if a.succ_port else None
    node = Node(a.id, a.listen_port, succ, lambda r: None, True, False, None, None, None, True)
    node.start()
    ids = ["w%d" % i for i in range(a.warmup)] + ["r%d" % i for i in range(a.rounds)]
    if not node.is_head:
        for r in ids:
            node.become_locally_ready(r)
        while True:  # the benchmark ends this process
            time.sleep(60)
    time.sleep(1.0)  # let the others declare themselves ready (the reference has no locks)
    lat = []
    for r in ids:
        with lock:
            ev = done.setdefault(r, threading.Event())
        t0 = time.perf_counter()
        node.become_locally_ready(r)
        if not ev.wait(60):
            out.write(json.dumps({"error": "round %s did not complete within 60s" % r}) + "\n")
            out.flush()
            os._exit(1)
        if r.startswith("r"):
            lat.append(time.perf_counter() - t0)
    out.write(json.dumps({"latencies": lat}) + "\n")
    out.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
