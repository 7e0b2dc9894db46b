"""Plot the small-message benchmark (CSV `world,line,bytes,us,floor_ratio`) as an SVG.

Draws one panel per world size: microseconds per call (log scale) against
message size (log2 x axis), one polyline with markers per kernel (one_shot,
two_shot, all_gather, lamport) and the two floors (barrier, empty) as dashed
horizontal lines.  Several CSVs (repeats) are combined by the median per
(world, line, bytes); `host_call_us` rows are ignored.  Standard library only.

Usage: python3 host/benches/peers/plot_small.py OUT.svg CSV...
"""
import csv
import math
import statistics
import sys
from collections import defaultdict
from xml.sax.saxutils import escape

LINES = {"one_shot": "#1f77b4", "two_shot": "#ff7f0e", "all_gather": "#2ca02c", "lamport": "#d62728"}
FLOORS = {"barrier": "#7f7f7f", "empty": "#9467bd"}
TITLE = "symmem small messages on one H200, graph-replayed (µs per call)"
PW, PH = 320, 260             # plot area of one panel
ML, MR, MT, MB = 60, 20, 70, 70  # panel margins (left, right, top incl. title, bottom)
LEGEND_H = 30


def load(paths):
    """{(world, line, bytes): median us} over all CSVs."""
    samples = defaultdict(list)
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row["line"] in LINES or row["line"] in FLOORS:
                    key = (int(row["world"]), row["line"], int(row["bytes"]))
                    samples[key].append(float(row["us"]))
    return {k: statistics.median(v) for k, v in samples.items()}


def size_label(b):
    if b < 1024:
        return f"{b} B"
    if b < 1 << 20:
        return f"{b >> 10}K"
    return f"{b >> 20}M"


def log_ticks(bottom, top):
    """1, 2, 5 x 10^k ticks covering bottom..top (a log axis)."""
    ticks, mag = [], 10 ** math.floor(math.log10(bottom))
    while not ticks or ticks[-1] < top:
        ticks += [m * mag for m in (1, 2, 5) if m * mag >= bottom * 0.999]
        mag *= 10
    return ticks[: next(i for i, t in enumerate(ticks) if t >= top) + 1]


def fmt(v):
    return f"{v:g}"


def panel(out, x0, world, data, sizes):
    """Append SVG for one world size with plot area origin at (x0, MT)."""
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1])
    ys = [v for (w, _, _), v in data.items() if w == world]
    ticks = log_ticks(min(ys) * 0.9, max(ys) * 1.05)
    ymin, ymax = math.log10(ticks[0]), math.log10(ticks[-1])
    X = lambda b: x0 + (math.log2(b) - lo) / (hi - lo) * PW
    Y = lambda us: MT + PH - (math.log10(us) - ymin) / (ymax - ymin) * PH
    out.append(f'<text x="{x0 + PW / 2}" y="{MT - 12}" text-anchor="middle" '
               f'font-size="14" font-weight="bold">world {world}</text>')
    for t in ticks:  # y gridlines and labels
        out.append(f'<line x1="{x0}" x2="{x0 + PW}" y1="{Y(t):.1f}" y2="{Y(t):.1f}" stroke="#e0e0e0"/>')
        out.append(f'<text x="{x0 - 6}" y="{Y(t) + 4:.1f}" text-anchor="end" font-size="11">{fmt(t)}</text>')
    for b in sizes:  # x gridlines and rotated labels
        x = X(b)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{MT}" y2="{MT + PH}" stroke="#f0f0f0"/>')
        out.append(f'<text x="{x:.1f}" y="{MT + PH + 14}" text-anchor="end" font-size="11" '
                   f'transform="rotate(-45 {x:.1f} {MT + PH + 14})">{size_label(b)}</text>')
    out.append(f'<rect x="{x0}" y="{MT}" width="{PW}" height="{PH}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{x0 + PW / 2}" y="{MT + PH + 55}" text-anchor="middle" font-size="12">message size (bytes, log2)</text>')
    out.append(f'<text x="{x0 - 42}" y="{MT + PH / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 {x0 - 42} {MT + PH / 2})">µs per call (log)</text>')
    for line, colour in FLOORS.items():
        if (world, line, 0) in data:
            y = Y(data[(world, line, 0)])
            out.append(f'<line x1="{x0}" x2="{x0 + PW}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}" '
                       f'stroke-width="1.5" stroke-dasharray="6,4"/>')
    for line, colour in LINES.items():
        pts = sorted((b, v) for (w, l, b), v in data.items() if w == world and l == line)
        if not pts:
            continue
        coords = " ".join(f"{X(b):.1f},{Y(v):.1f}" for b, v in pts)
        out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for b, v in pts:
            out.append(f'<circle cx="{X(b):.1f}" cy="{Y(v):.1f}" r="3" fill="{colour}">'
                       f'<title>{line} {size_label(b)}: {v:.3f} µs</title></circle>')


def legend(out, width, y):
    items = [(l, c, False) for l, c in LINES.items()] + [(f"{l} (floor)", c, True) for l, c in FLOORS.items()]
    step = 130
    x = (width - step * len(items)) / 2
    for name, colour, dashed in items:
        dash = ' stroke-dasharray="6,4"' if dashed else ""
        out.append(f'<line x1="{x}" x2="{x + 28}" y1="{y}" y2="{y}" stroke="{colour}" stroke-width="2"{dash}/>')
        if not dashed:
            out.append(f'<circle cx="{x + 14}" cy="{y}" r="3" fill="{colour}"/>')
        out.append(f'<text x="{x + 34}" y="{y + 4}" font-size="12">{escape(name)}</text>')
        x += step


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    data = load(argv[2:])
    worlds = sorted({w for w, _, _ in data})
    sizes = sorted({b for (_, l, b) in data if l in LINES})
    width = len(worlds) * (ML + PW + MR) + 20
    height = MT + PH + MB + LEGEND_H + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="26" text-anchor="middle" font-size="17" font-weight="bold">{escape(TITLE)}</text>']
    for i, world in enumerate(worlds):
        panel(out, 10 + i * (ML + PW + MR) + ML, world, data, sizes)
    legend(out, width, MT + PH + MB + 12)
    out.append("</svg>")
    with open(argv[1], "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv)
