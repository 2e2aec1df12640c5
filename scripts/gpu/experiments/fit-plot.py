#!/usr/bin/env python3
"""SVG of Friedman-1 runs with and without fitted parameters: best RMSE (log scale) against the
generation, and ms per generation, one line per run.

    fit-plot.py DIR   (reads generations.csv, writes fit.svg beside it)
"""
import csv, math, pathlib, sys

d = pathlib.Path(sys.argv[1])
rows = list(csv.DictReader(open(d / "generations.csv")))
runs = sorted({r["run"] for r in rows})
colours = ["#d62728", "#2ca02c", "#1f77b4", "#ff7f0e", "#9467bd", "#8c564b"]
W, H, L, B, T = 380, 300, 60, 45, 40
gens = sorted({int(r["generation"]) for r in rows})
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W + 160}" height="{H + 30}" font-family="sans-serif" font-size="11">']
out.append('<text x="10" y="16" font-size="13">Friedman-1, 100,000 cases, population 1000, on the H100: fitted parameters against none</text>')
for panel, (key, label) in enumerate([("best_rmse", "best RMSE"), ("generation_ms", "ms per generation")]):
    ox = panel * W
    ys = [math.log10(max(float(r[key]), 1e-9)) for r in rows]
    ymin, ymax = math.floor(min(ys)), math.ceil(max(ys))
    X = lambda g: ox + L + (W - L - 15) * (g - gens[0]) / max(gens[-1] - gens[0], 1)
    Y = lambda v: T + (H - T - B) * (1 - (math.log10(max(v, 1e-9)) - ymin) / max(ymax - ymin, 1e-9))
    out.append(f'<text x="{ox + L}" y="{T - 8}">{label}</text>')
    out.append(f'<rect x="{ox + L}" y="{T}" width="{W - L - 15}" height="{H - T - B}" fill="none" stroke="#999"/>')
    for e in range(ymin, ymax + 1):
        out.append(f'<text x="{ox + L - 5}" y="{Y(10 ** e) + 4}" text-anchor="end">1e{e}</text>')
    for g in gens:
        out.append(f'<text x="{X(g)}" y="{H - B + 15}" text-anchor="middle">{g}</text>')
    out.append(f'<text x="{ox + L + (W - L) / 2}" y="{H - B + 30}" text-anchor="middle">generation</text>')
    for k, run in enumerate(runs):
        pts = sorted((int(r["generation"]), float(r[key])) for r in rows if r["run"] == run)
        path = " ".join(f"{X(g):.1f},{Y(v):.1f}" for g, v in pts)
        out.append(f'<polyline fill="none" stroke="{colours[k % len(colours)]}" stroke-width="1.5" points="{path}"/>')
for k, run in enumerate(runs):
    out.append(f'<text x="{2 * W + 5}" y="{T + 15 * k + 10}" fill="{colours[k % len(colours)]}">{run}</text>')
out.append("</svg>")
(d / "fit.svg").write_text("\n".join(out) + "\n")
