#!/usr/bin/env python3
"""SVG of the loop break-even: for each case count, one panel of generation ms (compile + load +
one evaluation) against the loop count per case, one line per route, both axes logarithmic.

    loops-plot.py BREAKEVEN_DIR   (reads breakeven.csv, writes loops.svg beside it)
"""
import csv, math, pathlib, re, sys

d = pathlib.Path(sys.argv[1])
rows = [r for r in csv.DictReader(open(d / "breakeven.csv")) if re.match(r"loops\d+x\d+$", r["problem"])]
cases = sorted({int(r["cases"]) for r in rows})
routes = [("interpreter", "#d62728"), ("ptx", "#2ca02c"), ("nvrtc", "#bcbd22"), ("cpu", "#1f77b4")]
W, H, L, B, T = 300, 300, 60, 45, 40
ys = [math.log10(float(r["generation_ms"])) for r in rows]
ymin, ymax = math.floor(min(ys)), math.ceil(max(ys))
counts = sorted({int(r["loop_count"]) for r in rows})
xmin, xmax = math.log10(min(counts)), math.log10(max(counts))
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * len(cases) + 20}" height="{H + 30}" font-family="sans-serif" font-size="11">']
out.append(f'<text x="10" y="16" font-size="13">Loop workloads on the H100: generation ms against loop iterations per case (20 programs)</text>')
for k, n in enumerate(cases):
    ox = k * W
    X = lambda v: ox + L + (W - L - 15) * (math.log10(v) - xmin) / max(xmax - xmin, 1e-9)
    Y = lambda v: T + (H - T - B) * (1 - (math.log10(v) - ymin) / max(ymax - ymin, 1e-9))
    out.append(f'<text x="{ox + L}" y="{T - 8}">{n} cases</text>')
    out.append(f'<rect x="{ox + L}" y="{T}" width="{W - L - 15}" height="{H - T - B}" fill="none" stroke="#999"/>')
    for e in range(ymin, ymax + 1):
        out.append(f'<text x="{ox + L - 5}" y="{Y(10 ** e) + 4}" text-anchor="end">1e{e}</text>')
    for c in counts:
        out.append(f'<text x="{X(c)}" y="{H - B + 15}" text-anchor="middle">{c}</text>')
    out.append(f'<text x="{ox + L + (W - L) / 2}" y="{H - B + 30}" text-anchor="middle">iterations per case</text>')
    for j, (route, colour) in enumerate(routes):
        pts = sorted((int(r["loop_count"]), float(r["generation_ms"])) for r in rows if int(r["cases"]) == n and r["route"] == route)
        if pts:
            path = " ".join(f"{X(c):.1f},{Y(ms):.1f}" for c, ms in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        if k == 0:
            out.append(f'<text x="{ox + L + 8}" y="{T + 14 + 13 * j}" fill="{colour}">{route}</text>')
out.append("</svg>")
(d / "loops.svg").write_text("\n".join(out))
print(d / "loops.svg")
