"""Joins the multi-GPU CSVs (host/benches/multi_gpu.rs's p2p.csv and collectives.csv,
tools `symmem` and `cuda`; nccl_collectives.py's nccl.csv, tools `nccl` and `torch_symm`), all with the
header `tool,op,world,bytes,batch,median_us,algbw_gbs,busbw_gbs`, into a summary of
ratios against goals and a PNG of bus bandwidth against size.

Summary:
  (a) point to point (the world-2 rows): per size, symmem put GB/s, cuMemcpyPeerAsync
      (`cuda` memcpy_peer_put) GB/s and their ratio, the same for get. GB/s counts each
      byte once (algbw = busbw). Goal: ratio >= 0.95 at sizes >= 64 MiB.
  (b) per world size, per size: all_gather and reduce_scatter (symmem vs nccl: bus GB/s,
      ratio, median us per op), all_reduce (symmem 1shot and 2shot vs nccl all_reduce and
      vs torch_symm 1shot/2shot; the ratio against NCCL takes the better of symmem's
      1shot/2shot, in bus GB/s and in us). Goals: bus GB/s >= NCCL's at sizes >= 256 MiB;
      latency (us) below NCCL's at sizes below 1 MiB.
  (c) small messages, per world size, per size (8 B to 1 MiB), microseconds per call, every
      call graph-replayed: the floors (barrier, empty kernel), symmem one_shot and lamport
      (host/benches/small_messages.rs's small.csv), nccl and torch_one_shot
      (nccl_collectives.py --small's small_nccl.csv), and lamport/nccl and
      lamport/torch_one_shot (below 1: the barrier-free all-reduce is faster). These CSVs
      have the header `world,line,bytes,us,floor_ratio`; without them the table is skipped.
  '!' marks a miss; each goal closes with a `goal ...: met at all N sizes` / `missed at
  ...` / `not measured` line, per op and world; a missing row prints as '-'.
PNG (matplotlib, Agg): one panel per family (point to point, all_gather, all_reduce,
reduce_scatter), bus GB/s against bytes on a log2 axis, one line per (tool, op, world).
Without matplotlib the PNG is skipped with a message; the summary is still written.

Usage: python3 plot_multi_gpu.py --summary summary.txt --png multi_gpu.png FILE.csv...
"""
import argparse
import csv
import math
import sys

from units import MIB, human  # this folder

COLUMNS = ["tool", "op", "world", "bytes", "batch", "median_us", "algbw_gbs", "busbw_gbs"]
SMALL_COLUMNS = ["world", "line", "bytes", "us"]
# The small-message table's columns after the size: (heading, line, bytes); bytes None = the row's size.
SMALL_TABLE = [
    ("barrier", "barrier", 0),
    ("empty", "empty", 0),
    ("one_shot", "one_shot", None),
    ("lamport", "lamport", None),
    ("nccl", "nccl", None),
    ("torch_one_shot", "torch_one_shot", None),
]
P2P_GOAL, P2P_FROM = 0.95, 64 * MIB
BW_GOAL, BW_FROM = 1.0, 256 * MIB
LAT_BELOW = MIB
FAMILIES = [
    ("point to point (world 2; GB/s = bytes / time)", {"put", "get", "memcpy_peer_put", "memcpy_peer_get"}),
    ("all_gather", {"all_gather"}),
    ("all_reduce", {"all_reduce", "all_reduce_1shot", "all_reduce_2shot"}),
    ("reduce_scatter", {"reduce_scatter"}),
]
COLLECTIVE_OPS = {"all_gather", "all_reduce", "all_reduce_1shot", "all_reduce_2shot", "reduce_scatter"}


def number(text):
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) or math.isinf(v) else v


def load_small(path, reader, small):
    """Rows of a small-message CSV into small: {(world, line, bytes): us or None}."""
    n = 0
    for r in reader:
        try:
            key = (int(r["world"]), r["line"].strip(), int(r["bytes"]))
        except (AttributeError, TypeError, ValueError):
            continue  # not a row (a `skipped: ...` line)
        if key in small:
            print(f"plot_multi_gpu.py: {path}: {key} repeats an earlier row; the later one is kept")
        small[key] = number(r["us"])
        n += 1
    print(f"plot_multi_gpu.py: {path}: {n} small-message rows")


def load(paths):
    """{(tool, op, world, bytes): {"us": .., "algbw": .., "busbw": .., "batch": ..}} and, from
    the small-message CSVs, {(world, line, bytes): us}."""
    data, small = {}, {}
    for path in paths:
        try:
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                if all(c in (reader.fieldnames or []) for c in SMALL_COLUMNS):
                    load_small(path, reader, small)
                    continue
                missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
                if missing:
                    print(f"plot_multi_gpu.py: {path}: no column(s) {', '.join(missing)}; skipped")
                    continue
                n = 0
                for r in reader:
                    try:
                        key = (r["tool"].strip(), r["op"].strip(), int(r["world"]), int(r["bytes"]))
                    except (TypeError, ValueError):
                        continue
                    if key in data:
                        print(f"plot_multi_gpu.py: {path}: {key} repeats an earlier row; the later one is kept")
                    data[key] = {"us": number(r["median_us"]), "algbw": number(r["algbw_gbs"]),
                                 "busbw": number(r["busbw_gbs"]), "batch": r["batch"]}
                    n += 1
                print(f"plot_multi_gpu.py: {path}: {n} rows")
        except OSError as e:
            print(f"plot_multi_gpu.py: {path}: {e}")
    return data, small


def get(data, tool, op, world, size, key="busbw"):
    r = data.get((tool, op, world, size))
    return None if r is None else r[key]


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def table(header, rows):
    """Right-aligned columns, widths from the widest cell."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    return [" ".join(str(c).rjust(w) for c, w in zip(line, widths)) for line in [header] + rows]


class Goal:
    """One goal over sizes: which sizes it was measured at and which it missed."""

    def __init__(self, text):
        self.text, self.seen, self.missed = text, 0, []

    def check(self, size, ok):
        """ok: True (met), False (missed), None (not measurable). Returns the mark."""
        if ok is None:
            return ""
        self.seen += 1
        if not ok:
            self.missed.append(human(size))
            return "!"
        return ""

    def line(self):
        if not self.seen:
            verdict = "not measured"
        elif not self.missed:
            verdict = f"met at all {self.seen} sizes"
        else:
            verdict = f"missed at {', '.join(self.missed)} ({len(self.missed)} of {self.seen})"
        return f"goal {self.text}: {verdict}"


def p2p_summary(data):
    out, goals = [], []
    p2p_ops = FAMILIES[0][1]
    worlds = sorted({w for (t, o, w, b) in data if o in p2p_ops})
    if not worlds:
        return ["== point to point: no rows (symmem put/get, cuda memcpy_peer_put/get)"]
    for world in worlds:
        sizes = sorted({b for (t, o, w, b) in data if o in p2p_ops and w == world})
        g_put = Goal(f"put/memcpy_peer_put >= {P2P_GOAL} at >= {human(P2P_FROM)} (world {world})")
        g_get = Goal(f"get/memcpy_peer_get >= {P2P_GOAL} at >= {human(P2P_FROM)} (world {world})")
        rows = []
        for s in sizes:
            cells = [human(s)]
            for op, goal in (("put", g_put), ("get", g_get)):
                ours = get(data, "symmem", op, world, s)
                peer = get(data, "cuda", f"memcpy_peer_{op}", world, s)
                r = ratio(ours, peer)
                mark = goal.check(s, None if r is None or s < P2P_FROM else r >= P2P_GOAL)
                cells += [fmt(ours, ".1f"), fmt(peer, ".1f"), fmt(r, ".3f") + mark]
            rows.append(cells)
        out.append(f"== point to point, world {world}: GB/s (bytes / time, each byte once), "
                   "symmem kernel vs cuMemcpyPeerAsync")
        out += table(["size", "put", "memcpy_peer_put", "put/memcpy", "get", "memcpy_peer_get", "get/memcpy"], rows)
        goals += [g_put, g_get]
    out += [g.line() for g in goals]
    return out


def pair_summary(data, op, world, sizes):
    """all_gather / reduce_scatter: symmem against nccl."""
    g_bw = Goal(f"{op} world {world}: busbw >= nccl at >= {human(BW_FROM)}")
    g_lat = Goal(f"{op} world {world}: us < nccl below {human(LAT_BELOW)}")
    rows = []
    for s in sizes:
        sb, nb = get(data, "symmem", op, world, s), get(data, "nccl", op, world, s)
        su, nu = get(data, "symmem", op, world, s, "us"), get(data, "nccl", op, world, s, "us")
        r = ratio(sb, nb)
        bw_mark = g_bw.check(s, None if r is None or s < BW_FROM else r >= BW_GOAL)
        lat_mark = g_lat.check(s, None if su is None or nu is None or s >= LAT_BELOW else su < nu)
        rows.append([human(s), fmt(sb, ".1f"), fmt(nb, ".1f"), fmt(r, ".3f") + bw_mark,
                     fmt(su, ".2f") + lat_mark, fmt(nu, ".2f")])
    lines = [f"-- {op}, world {world}: bus GB/s and median us per op"]
    lines += table(["size", "symmem", "nccl", "symmem/nccl", "symmem us", "nccl us"], rows)
    return lines, [g_bw, g_lat]


def all_reduce_summary(data, world, sizes):
    g_bw = Goal(f"all_reduce world {world}: best of symmem 1shot/2shot busbw >= nccl at >= {human(BW_FROM)}")
    g_lat = Goal(f"all_reduce world {world}: best of symmem 1shot/2shot us < nccl below {human(LAT_BELOW)}")
    rows = []
    for s in sizes:
        b1, b2 = (get(data, "symmem", f"all_reduce_{k}", world, s) for k in ("1shot", "2shot"))
        u1, u2 = (get(data, "symmem", f"all_reduce_{k}", world, s, "us") for k in ("1shot", "2shot"))
        nb, nu = get(data, "nccl", "all_reduce", world, s), get(data, "nccl", "all_reduce", world, s, "us")
        t1, t2 = (get(data, "torch_symm", f"all_reduce_{k}", world, s) for k in ("1shot", "2shot"))
        tu1, tu2 = (get(data, "torch_symm", f"all_reduce_{k}", world, s, "us") for k in ("1shot", "2shot"))
        best_b = max([b for b in (b1, b2) if b is not None], default=None)
        best_u = min([u for u in (u1, u2) if u is not None], default=None)
        r = ratio(best_b, nb)
        bw_mark = g_bw.check(s, None if r is None or s < BW_FROM else r >= BW_GOAL)
        lat_mark = g_lat.check(s, None if best_u is None or nu is None or s >= LAT_BELOW else best_u < nu)
        # the latency mark goes on the better (smaller) of the two symmem times
        m1 = lat_mark if lat_mark and u1 is not None and u1 == best_u else ""
        m2 = lat_mark if lat_mark and not m1 else ""
        rows.append([human(s), fmt(b1, ".1f"), fmt(b2, ".1f"), fmt(nb, ".1f"), fmt(r, ".3f") + bw_mark,
                     fmt(t1, ".1f"), fmt(t2, ".1f"), fmt(ratio(b1, t1), ".3f"), fmt(ratio(b2, t2), ".3f"),
                     fmt(u1, ".2f") + m1, fmt(u2, ".2f") + m2, fmt(nu, ".2f"), fmt(tu1, ".2f"), fmt(tu2, ".2f")])
    lines = [f"-- all_reduce, world {world}: bus GB/s and median us per op "
             "(best = the better of symmem 1shot/2shot; t = torch_symm)"]
    lines += table(["size", "1shot", "2shot", "nccl", "best/nccl", "t1shot", "t2shot", "1s/t1s", "2s/t2s",
                    "1shot us", "2shot us", "nccl us", "t1shot us", "t2shot us"], rows)
    return lines, [g_bw, g_lat]


def collectives_summary(data):
    out = []
    worlds = sorted({w for (t, o, w, b) in data if o in COLLECTIVE_OPS})
    if not worlds:
        return ["== collectives: no rows"]
    for world in worlds:
        goals = []
        out.append(f"== collectives, world {world} (bus GB/s: nccl-tests' convention, 1 GB = 1e9 B; "
                   "us: median per op on rank 0)")
        for op in ("all_gather", "all_reduce", "reduce_scatter"):
            ops = {"all_reduce", "all_reduce_1shot", "all_reduce_2shot"} if op == "all_reduce" else {op}
            sizes = sorted({b for (t, o, w, b) in data if w == world and o in ops})
            if not sizes:
                out.append(f"-- {op}, world {world}: no rows")
                continue
            if op == "all_reduce":
                lines, g = all_reduce_summary(data, world, sizes)
            else:
                lines, g = pair_summary(data, op, world, sizes)
            out += lines
            goals += g
        out += [g.line() for g in goals]
    return out


def small_summary(small):
    """Per world: us per call at each size, the floors beside them, lamport against the peers."""
    worlds = sorted({w for (w, line, b) in small})
    if not worlds:
        return ["== small messages: no rows (small.csv, small_nccl.csv)"]
    out = []
    for world in worlds:
        sizes = sorted({b for (w, line, b) in small if w == world and b > 0 and line != "host_call_us"})
        out.append(f"== small messages, world {world}: us per call, graph-replayed (slowest rank, median "
                   "of 5 trials; floors: one barrier, one empty kernel)")
        if not sizes:
            out.append(f"-- world {world}: no sized rows")
            continue
        rows = []
        for s in sizes:
            us = [small.get((world, line, s if b is None else b)) for _, line, b in SMALL_TABLE]
            lamport, nccl, torch1 = us[3], us[4], us[5]
            rows.append([human(s)] + [fmt(u, ".2f") for u in us]
                        + [fmt(ratio(lamport, nccl), ".3f"), fmt(ratio(lamport, torch1), ".3f")])
        out += table(["size"] + [h for h, _, _ in SMALL_TABLE] + ["lamport/nccl", "lamport/torch_one_shot"], rows)
        host = small.get((world, "host_call_us", 8))
        if host is not None:
            out.append(f"host time per call (rank 0, 8 B barrier-free all_reduce, no graph): {host:.2f} us")
    out.append("ratios below 1: the barrier-free all-reduce (lamport) is faster")
    return out


def summary(data, small):
    lines = p2p_summary(data) + [""] + collectives_summary(data) + [""] + small_summary(small)
    lines.append("'!' = below goal; '-' = no row (or NaN)")
    return "\n".join(lines)


def plot(data, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"symmem": "-", "nccl": "--", "torch_symm": ":", "cuda": "-."}
    markers = {1: "x", 2: "o", 4: "s", 8: "^"}
    colors = plt.get_cmap("tab20").colors  # 20 distinct colours: no repeats within a panel
    fig, axes = plt.subplots(2, 2, figsize=(14, 10), dpi=110)
    for ax, (title, ops) in zip(axes.flat, FAMILIES):
        keys = sorted({(t, o, w) for (t, o, w, b) in data if o in ops})
        drawn = 0
        for i, (tool, op, world) in enumerate(keys):
            pts = sorted((b, r["busbw"]) for (t, o, w, b), r in data.items()
                         if (t, o, w) == (tool, op, world) and r["busbw"] is not None)
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], styles.get(tool, "-"), color=colors[i % len(colors)],
                    marker=markers.get(world, "d"), ms=4, label=f"{tool} {op} w{world}")
            drawn += 1
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes (nccl-tests convention)")
        ax.set_ylabel("bus GB/s (1e9 B/s)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle("symmem vs NCCL / torch symmetric memory / cuMemcpyPeer: bus bandwidth")
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--summary", help="write the summary text here (it is printed too)")
    ap.add_argument("--png", help="write the plot here (needs matplotlib)")
    ap.add_argument("csv", nargs="+")
    a = ap.parse_args(argv)
    data, small = load(a.csv)
    text = summary(data, small)
    print(text)
    if a.summary:
        with open(a.summary, "w") as f:
            f.write(text + "\n")
        print(f"plot_multi_gpu.py: wrote {a.summary}")
    if a.png:
        try:
            plot(data, a.png)
            print(f"plot_multi_gpu.py: wrote {a.png}")
        except ImportError as e:
            print(f"plot_multi_gpu.py: no PNG: matplotlib is not available ({e}); the summary is written")
        except Exception as e:
            print(f"plot_multi_gpu.py: the PNG failed: {type(e).__name__}: {e}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
