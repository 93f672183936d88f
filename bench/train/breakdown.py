#!/usr/bin/env python3
"""Per-step breakdown of a profiled training run (ACCELERATE_PROFILE=DIR, one trace per rank).

usage: breakdown.py DIR

For every training step of the main thread (a next_batch span up to the next one) it splits the
time into: data (next_batch), compute (the program's forward/backward: what no library span
covers before the gradient sync), grad sync (backward_sync), optimizer (optimizer_step) and rest.
With two or more ranks the gradient all-reduce of each step is split further into "waiting for
the peer" and "the all-reduce proper": the ranks' clocks are aligned on the ends of their
all-reduces (every rank leaves an all-reduce within microseconds of the others), then for each
step the all-reduce proper is the time from the last rank's entry to the exit, and a rank's wait
is the rest of its all-reduce span. Prints medians and means per step, per rank, in microseconds.
Only the training steps are counted (the evaluation's spans are not next_batch/backward pairs).
"""
import glob
import json
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        d = json.load(f)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    tids = {}
    for e in ev:
        tids[e["tid"]] = tids.get(e["tid"], 0) + (e["name"] == "backward_sync")
    main = max(tids, key=tids.get)
    ev = sorted((e for e in ev if e["tid"] == main), key=lambda e: e["ts"])
    steps = []  # one dict per training step
    cur = None
    for e in ev:
        n = e["name"]
        if n == "next_batch":
            if cur and "sync" in cur:
                cur["end"] = e["ts"]
                steps.append(cur)
            cur = {"start": e["ts"], "data": e["dur"], "data_end": e["ts"] + e["dur"]}
        elif cur is None:
            continue
        elif n == "backward_sync":
            cur["sync"] = e["dur"]
            cur["sync_t0"] = e["ts"]
        elif n == "all_reduce" and "sync" in cur and "ar_t0" not in cur:
            cur["ar_t0"], cur["ar_t1"] = e["ts"], e["ts"] + e["dur"]
        elif n == "optimizer_step" and "sync" in cur:
            cur["opt"] = e["dur"]
    for s in steps:
        s["step"] = s["end"] - s["start"]
        s["compute"] = s["sync_t0"] - s["data_end"]
        s.setdefault("opt", 0.0)
        s["rest"] = s["step"] - s["data"] - s["compute"] - s["sync"] - s["opt"]
    return steps


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    files = sorted(glob.glob(os.path.join(sys.argv[1], "trace.rank*.json")),
                   key=lambda p: int(p.rsplit("rank", 1)[1].split(".")[0]))
    if not files:
        sys.exit("breakdown.py: no trace.rank*.json in %s (run with ACCELERATE_PROFILE=%s)" %
                 (sys.argv[1], sys.argv[1]))
    ranks = [load(p) for p in files]
    n = min(len(r) for r in ranks)
    if n == 0:
        sys.exit("breakdown.py: no training step found in %s" % sys.argv[1])
    ranks = [r[:n] for r in ranks]
    if len(ranks) > 1:
        # align every rank's clock to rank 0's on the exits of the all-reduces
        for r in ranks[1:]:
            off = med([a["ar_t1"] - b["ar_t1"] for a, b in zip(ranks[0], r) if "ar_t1" in a and "ar_t1" in b])
            for s in r:
                if "ar_t0" in s:
                    s["ar_t0"] += off
                    s["ar_t1"] += off
        for i in range(n):
            ss = [r[i] for r in ranks]
            if not all("ar_t0" in s for s in ss):
                continue
            last_in = max(s["ar_t0"] for s in ss)
            for s in ss:
                s["proper"] = max(0.0, s["ar_t1"] - last_in)
                s["wait"] = max(0.0, (s["ar_t1"] - s["ar_t0"]) - s["proper"])
                s["sync_other"] = s["sync"] - (s["ar_t1"] - s["ar_t0"])
    keys = ["step", "data", "compute", "sync", "wait", "proper", "sync_other", "opt", "rest"]
    names = {"step": "whole step", "data": "data (next_batch)", "compute": "compute (fwd+bwd)",
             "sync": "grad sync (backward_sync)", "wait": "  waiting for the peer",
             "proper": "  all-reduce proper", "sync_other": "  scaling, bookkeeping",
             "opt": "optimizer step", "rest": "rest (loop, zero_grad)"}
    print("# %d training steps, %d rank(s); per step, microseconds: median (mean)" % (n, len(ranks)))
    print("%-28s" % "part" + "".join("%20s" % ("rank %d" % i) for i in range(len(ranks))))
    for k in keys:
        if not any(k in s for s in ranks[0]):
            continue
        row = "%-28s" % names[k]
        for r in ranks:
            xs = [s[k] for s in r if k in s]
            row += "%20s" % ("%.1f (%.1f)" % (med(xs), statistics.fmean(xs)))
        print(row)


if __name__ == "__main__":
    main()
