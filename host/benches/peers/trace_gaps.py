#!/usr/bin/env python3
"""Where a staged put's time goes, from a proxy trace of the engine bench
(SYMMEM_LOG=symmem::transport::proxy=trace, run_h200.sh engine-ab's engine-trace.txt.xz).

Per request size, the median of each stage of a put from rank 0 to rank 1, in microseconds:
  sent->received      origin's proxy sends it, the target's proxy has received it
  received->applied   the target's copy into device memory and its event
  applied->completed  the reply crosses back, the origin's proxy completes the ticket
  completed->sent     the device's part: the kernel sees the completion, runs its loop,
                      stages and posts the next request, and the origin's proxy notices it
Usage: trace_gaps.py engine-trace.txt[.xz]
"""
import lzma
import re
import statistics
import sys
from datetime import datetime

LINE = re.compile(r"^(\S+)Z TRACE symmem::transport::proxy: (.*)$")


def stamp(s):
    return datetime.fromisoformat(s).timestamp() * 1e6


def main(path):
    opener = lzma.open if path.endswith(".xz") else open
    events = []
    with opener(path, "rt") as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m:
                continue
            try:
                t = stamp(m.group(1))
            except ValueError:  # two ranks' lines written into one another
                continue
            what = m.group(2)
            for kind in ("sent", "received", "applied", "completed"):
                if what.startswith(("a request " + kind, "a peer's request " + kind)):
                    size = re.search(r"len=(\d+)", what)
                    events.append((t, kind, int(size.group(1)) if size else None))
    events.sort()
    # One request in flight at a time (the latency rows): each request's events follow
    # one another in time; a request with an event lost to a garbled line is skipped.
    order = ["sent", "received", "applied", "completed"]
    gaps, at, times, size, last_completed = {}, 0, [], None, None
    for t, kind, sz in events:
        if kind == "sent":
            at, times, size = 1, [t], sz
            if last_completed is not None and sz == last_completed[1]:
                gaps.setdefault(sz, {}).setdefault("completed->sent", []).append(
                    t - last_completed[0])
            last_completed = None
        elif at and kind == order[at]:
            times.append(t)
            at += 1
            if at == 4:
                g = gaps.setdefault(size, {})
                for i in range(3):
                    g.setdefault(f"{order[i]}->{order[i + 1]}", []).append(
                        times[i + 1] - times[i])
                last_completed, at = (t, size), 0
        else:
            at, last_completed = 0, None
    names = ["sent->received", "received->applied", "applied->completed", "completed->sent"]
    for size, g in sorted(gaps.items()):
        cols = "  ".join(f"{k} {statistics.median(g[k]):6.1f}" for k in names if g.get(k))
        print(f"{size:>8} B ({len(g.get('sent->received', []))} requests): {cols}")


if __name__ == "__main__":
    main(sys.argv[1])
