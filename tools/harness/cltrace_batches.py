#!/usr/bin/env python3
"""cltrace_batches.py TRACE MARKS -- where each batch's time goes.

TRACE is cltrace.c's file, MARKS batchfit's stderr with BATCHFIT_MARKS=1
("batch K call_us return_us" lines; other lines are skipped).  For every
batch, in µs from its call: the first command enqueued, the first copy in
and first kernel on the card, the card's kernels (each one's start and end,
and the time between one's end and the next's start, the card idle), the
last read's end, and the return.  Then the median of each figure over the
batches, which is what README.md's figures quote.
"""
import statistics
import sys


def load(trace_path, marks_path):
    cmds = []
    with open(trace_path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            p = line.split()
            times = [None if x == "-" else float(x) for x in p[5:9]]
            cmds.append({"what": p[0], "queue": int(p[1]), "size": int(p[2]), "call": float(p[3]),
                         "ret": float(p[4]), "queued": times[0], "start": times[2], "end": times[3]})
    batches = []
    with open(marks_path) as f:
        for line in f:
            p = line.split()
            if len(p) == 4 and p[0] == "batch":
                batches.append((int(p[1]), float(p[2]), float(p[3])))
    return cmds, batches


def offset(mine):
    """The card's clock against the host's for one batch: a command is
    queued during its enqueue call, so each kernel, copy in and read bounds
    the offset from both sides; the middle of what every one allows (the
    median of the calls' middles if they disagree)."""
    timed = [c for c in mine if c["queued"] is not None and c["what"] in ("kernel", "write", "read")]
    if not timed:
        return None
    lo = max(c["call"] - c["queued"] for c in timed)
    hi = min(c["ret"] - c["queued"] for c in timed)
    if lo <= hi:
        return (lo + hi) / 2
    return statistics.median((c["call"] + c["ret"]) / 2 - c["queued"] for c in timed)


def one(cmds, k, call, ret):
    mine = [c for c in cmds if call <= c["call"] <= ret]
    off = offset(mine)
    if off is None:
        return None
    on_card = [dict(c, start=c["start"] + off, end=c["end"] + off) for c in mine if c["start"] is not None]
    kernels = sorted((c for c in on_card if c["what"] == "kernel"), key=lambda c: c["start"])
    writes = [c for c in on_card if c["what"] == "write"]
    reads = [c for c in on_card if c["what"] == "read"]
    waits = [c for c in mine if c["what"] == "wait"]
    if not kernels:
        return None
    busy, idle, end = 0.0, 0.0, kernels[0]["start"]
    for c in kernels:  # the union of the kernels' times, and the card's idle gaps between them
        if c["start"] > end:
            idle += c["start"] - end
        busy += max(0.0, c["end"] - max(c["start"], end))
        end = max(end, c["end"])
    nan = float("nan")
    return {
        "products": k,
        "launches": len(kernels),
        "first command enqueued": min(c["call"] for c in mine) - call,
        "first copy in started": (min(c["start"] for c in writes) - call) if writes else nan,
        "first kernel enqueued": min(c["call"] for c in mine if c["what"] == "kernel") - call,
        "first kernel started": kernels[0]["start"] - call,
        "last command enqueued": max(c["ret"] for c in mine if c["queue"] >= 0 and c["what"] != "flush") - call,
        "kernels busy": busy,
        "card idle between kernels": idle,
        "last kernel ended": end - call,
        "last read ended": (max(c["end"] for c in reads) - call) if reads else nan,
        "last wait returned": (max(c["ret"] for c in waits) - call) if waits else nan,
        "returned": ret - call,
    }


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cmds, batches = load(sys.argv[1], sys.argv[2])
    rows = [r for r in (one(cmds, *b) for b in batches) if r]
    if not rows:
        sys.exit("cltrace_batches: no batch with a kernel on the card in the trace")
    keys = list(rows[0].keys())
    print("%-28s %s" % ("µs from the call", "median (min, max) over %d batches" % len(rows)))
    for key in keys:
        vals = [r[key] for r in rows]
        print("%-28s %9.1f (%.1f, %.1f)" % (key, statistics.median(vals), min(vals), max(vals)))


if __name__ == "__main__":
    main()
