"""Joins the bench CSVs (rust.csv from host/benches/cuda.rs, cpp.csv from copy.cu,
triton.csv from iris_put.py), prints the summary table (ratios vs goals), and draws
GB/s against size for every bandwidth line as a PNG.

Usage: python3 plot.py --png h200.png --summary summary.txt rust.csv cpp.csv triton.csv
       [--collectives collectives.txt --collectives-png collectives.png]
The collectives file is the output of host/benches/cuda_collectives.rs (its
`world,blocks,line,bytes,us,gbps` lines); its plot needs matplotlib.
matplotlib draws the PNG where it is installed; otherwise a small pure-Python (zlib +
struct) rasteriser draws the lines without text (the legend colours go to stdout).
"""
import csv
import math
import struct
import sys
import zlib

GOALS = {"put/copy": 0.99, "copy/memcpy": 0.97, "put/triton": 1.03, "put/cpp": 1.0}


def load(paths):
    data = {}
    for p in paths:
        try:
            with open(p) as f:
                for r in csv.DictReader(f):
                    data[(r["line"], int(r["bytes"]))] = r
        except OSError as e:
            print(f"plot.py: {p}: {e}")
    return data


def val(data, line, size, key="gbps"):
    r = data.get((line, size))
    if r is None:
        return None
    v = float(r[key])
    return None if math.isnan(v) else v


def human(n):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return str(n)


def summary(data):
    sizes = sorted({b for (l, b) in data if l == "put"})
    lines = []
    cols = ["size", "memcpy", "put", "copy", "put/copy", "copy/memcpy", "cpp/memcpy", "triton/memcpy",
            "tritonH/memcpy", "put/triton", "put/cpp", "xproc/local"]
    lines.append(" ".join(f"{c:>14}" if i else f"{c:>5}" for i, c in enumerate(cols)))
    misses = {k: [] for k in GOALS}
    seen = {k: 0 for k in GOALS}
    for s in sizes:
        m, p, c = val(data, "memcpy_dtod", s), val(data, "put", s), val(data, "copy", s)
        cpp, t0, t1 = val(data, "cpp_copy", s), val(data, "triton_iris_put", s), val(data, "triton_iris_put_hint", s)
        x, xl = val(data, "xproc_put", s), val(data, "xproc_local_put", s)
        tb = max([t for t in (t0, t1) if t is not None], default=None)

        def q(a, b, goal=None):
            if a is None or b is None:
                return "-"
            r = a / b
            if goal is not None:
                seen[goal] += 1
            if goal is not None and r < GOALS[goal]:
                misses[goal].append(human(s))
                return f"{r:.3f}!"
            return f"{r:.3f}"

        row = [human(s), f"{m:.0f}" if m else "-", f"{p:.0f}" if p else "-", f"{c:.0f}" if c else "-",
               q(p, c, "put/copy"), q(c, m, "copy/memcpy"), q(cpp, m), q(t0, m), q(t1, m),
               q(p, tb, "put/triton"), q(p, cpp, "put/cpp"), q(x, xl)]
        lines.append(" ".join(f"{v:>14}" if i else f"{v:>5}" for i, v in enumerate(row)))
    lines.append("GB/s = bytes read + written; memcpy = cuMemcpyDtoDAsync (Rust bench); "
                 "triton = Iris put, tritonH = with hint; put/triton vs the better of the two; '!' = below goal")
    for k, g in GOALS.items():
        miss = misses[k]
        verdict = "not measured" if not seen[k] else (
            f"met at all {seen[k]} sizes" if not miss else "missed at " + ", ".join(miss))
        lines.append(f"goal {k} >= {g}: {verdict}")
    a = val(data, "alloc_symmetric_us", 1 << 20, "median_us")
    ap = val(data, "alloc_free_pair_us", 1 << 20, "median_us")
    d = val(data, "alloc_d2h_syncs", 1 << 20, "median_us")
    t = val(data, "torch_symm_empty_rendezvous_us", 1 << 20, "median_us")
    lines.append(f"allocate_symmetric 1 MiB: median {a} us (alloc+free pair {ap} us), D2H syncs in 1000 pairs: {d} "
                 f"(goal < 20 us, 0 syncs); torch symm_mem empty+rendezvous 1 MiB: "
                 + (f"{t:.1f} us ({t / a:.0f}x ours)" if t and a else "not measured"))
    return "\n".join(lines)


SERIES = ["put", "copy", "memcpy_dtod", "xproc_put", "xproc_local_put", "cpp_copy", "cuda_memcpy",
          "triton_iris_put", "triton_iris_put_hint", "torch_copy"]
COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
          (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]


def series(data):
    out = []
    for name in SERIES:
        pts = sorted((b, float(r["gbps"])) for (l, b), r in data.items() if l == name and r["gbps"] != "nan")
        if pts:
            out.append((name, pts))
    return out


def plot_matplotlib(data, png, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6), dpi=110)
    for name, pts in series(data):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per operation")
    ax.set_ylabel("GB/s (bytes read + written)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png)


def plot_raw(data, png, w=800, h=480):
    px = [[(255, 255, 255)] * w for _ in range(h)]
    ss = series(data)
    xs = [math.log2(b) for _, pts in ss for b, _ in pts]
    ymax = max(g for _, pts in ss for _, g in pts) * 1.05
    x0, x1 = min(xs), max(xs)

    def to(b, g):
        return int(40 + (math.log2(b) - x0) / (x1 - x0) * (w - 60)), int(h - 30 - g / ymax * (h - 50))

    for x in range(40, w - 20):
        px[h - 30][x] = (0, 0, 0)
    for y in range(20, h - 30):
        px[y][40] = (0, 0, 0)
    for (name, pts), col in zip(ss, COLORS):
        print(f"plot.py: {name} drawn in rgb{col}")
        for (b0, g0), (b1, g1) in zip(pts, pts[1:]):
            (ax, ay), (bx, by) = to(b0, g0), to(b1, g1)
            n = max(abs(bx - ax), abs(by - ay), 1)
            for i in range(n + 1):
                x, y = ax + (bx - ax) * i // n, ay + (by - ay) * i // n
                for dy in (0, 1):
                    if 0 <= y + dy < h:
                        px[y + dy][x] = col
    raw = b"".join(b"\x00" + bytes(c for p in row for c in p) for row in px)

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    with open(png, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def load_collectives(path):
    """{(world, blocks, line): [(bytes, gbps)]} from the bench's CSV lines."""
    rows = {}
    with open(path) as f:
        for text in f:
            parts = text.strip().split(",")
            if len(parts) != 6 or not parts[0].isdigit():
                continue
            world, blocks, line, size, _us, gbps = parts
            rows.setdefault((int(world), int(blocks), line), []).append((int(size), float(gbps)))
    return rows


def plot_collectives(path, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load_collectives(path)
    worlds = sorted({w for w, _, _ in rows})
    fig, axes = plt.subplots(1, len(worlds), figsize=(12, 5), dpi=110, squeeze=False)
    for ax, world in zip(axes[0], worlds):
        grids = sorted({b for w, b, _ in rows if w == world})
        for (w, blocks, line), pts in sorted(rows.items()):
            if w != world:
                continue
            style = "-" if blocks == grids[-1] else ":"
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=3,
                    label=f"{line} ({blocks} blocks)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("GB/s (all-gather: bytes landing per rank; all-reduce: result bytes)")
        ax.set_title(f"world {world} on one H200 (ranks as threads)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png)
    print(f"plot.py: wrote {png}")


def main(argv):
    png, out, title, paths = None, None, "symmem on one H200: GB/s vs size", []
    coll, coll_png = None, None
    it = iter(argv)
    for a in it:
        if a == "--png":
            png = next(it)
        elif a == "--summary":
            out = next(it)
        elif a == "--title":
            title = next(it)
        elif a == "--collectives":
            coll = next(it)
        elif a == "--collectives-png":
            coll_png = next(it)
        else:
            paths.append(a)
    data = load(paths)
    text = summary(data)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    if png:
        try:
            plot_matplotlib(data, png, title)
            print(f"plot.py: wrote {png} with matplotlib")
        except ImportError:
            plot_raw(data, png)
            print(f"plot.py: wrote {png} with the built-in rasteriser (no matplotlib)")
    if coll and coll_png:
        try:
            plot_collectives(coll, coll_png)
        except ImportError:
            print("plot.py: the collectives plot needs matplotlib")


if __name__ == "__main__":
    main(sys.argv[1:])
