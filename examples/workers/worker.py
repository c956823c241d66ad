#!/usr/bin/env python3
"""A ChainSync persistent worker in Python (docs/WORKERS.md).

    chainsync run --worker ... -- python3 worker.py [FILE]

The node starts it once and writes one JSON request a line on its standard
input; it answers each with one JSON line on its standard output. Its log,
if any, goes to standard error. For every round it appends
"NODE ROUND PID ID" to FILE (if given), which it opens once: the stand-in
for what a real stage keeps between rounds (a model, a connection).
"""
import json
import os
import sys


def main():
    node = os.environ.get("CHAINSYNC_NODE", "")
    out = None
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            print("not JSON, ignored: %r" % line[:200], file=sys.stderr)
            continue
        op, rid = msg.get("op"), msg.get("id")
        if op == "hello":
            # The expensive start-up belongs here: until this answer the
            # node is not ready, and no task of any round starts anywhere.
            try:
                if len(sys.argv) > 1:
                    out = open(sys.argv[1], "a", buffering=1)
                reply = {"id": rid, "ok": True, "version": 1}
            except OSError as e:
                reply = {"id": rid, "ok": False, "error": str(e)}
        elif op == "run":
            try:
                if out is not None:
                    out.write("%s %s %d %d\n" % (node, msg.get("round", ""), os.getpid(), rid))
                reply = {"id": rid, "ok": True}
            except OSError as e:
                reply = {"id": rid, "ok": False, "error": str(e)}
        elif op == "cancel":
            continue  # each request is quick here: nothing to stop
        else:
            reply = {"id": rid, "ok": False, "error": "unknown op %r" % op}
        sys.stdout.write(json.dumps(reply, separators=(",", ":")) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
