import json, glob, os
import sys
d = sys.argv[1]
W, H, L, B = 720, 420, 70, 50
series = []
colors = {"1": "#1f77b4", "2": "#ff7f0e", "4": "#2ca02c"}
for route, dash in [("interpreter", ""), ("ptx", "6,3")]:
    for n in ["1", "2", "4"]:
        recs = [json.loads(l) for l in open(f"{d}/runs/{route}-shared-{n}.jsonl") if '"summary":true' not in l]
        recs.sort(key=lambda r: r["done_ms"])
        best, pts = float("inf"), []
        for r in recs:
            best = min(best, r["best"])
            pts.append((r["done_ms"] / 1000, best))
        series.append((route, n, dash, pts))
xmax = max(p[0] for s in series for p in s[3])
import math
ys = [math.log10(p[1]) for s in series for p in s[3]]
ymin, ymax = min(ys), max(ys)
X = lambda x: L + (W - L - 20) * math.log10(1 + 1000 * x) / math.log10(1 + 1000 * xmax)
Y = lambda y: 20 + (H - B - 20) * (ymax - math.log10(y)) / (ymax - ymin)
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<line x1="{L}" y1="{H-B}" x2="{W-20}" y2="{H-B}" stroke="black"/><line x1="{L}" y1="20" x2="{L}" y2="{H-B}" stroke="black"/>',
       f'<text x="{W/2}" y="{H-10}" text-anchor="middle">wall time, s (log scale from 1 ms)</text>',
       f'<text x="15" y="{H/2}" transform="rotate(-90 15 {H/2})" text-anchor="middle">best RMSE so far (log)</text>',
       f'<text x="{L+10}" y="15">keijzer6, population 300 per island, H100, islands share the farm</text>']
for t in [0.01, 0.1, 1, 4]:
    if t <= xmax:
        out.append(f'<text x="{X(t)}" y="{H-B+15}" text-anchor="middle">{t:g}</text>')
for v in [10 ** k for k in range(int(math.floor(ymin)), int(math.ceil(ymax)) + 1)] + [0.005]:
    if ymin <= math.log10(v) <= ymax:
        out.append(f'<text x="{L-5}" y="{Y(v)+4}" text-anchor="end">{v:g}</text>')
for i, (route, n, dash, pts) in enumerate(series):
    path = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in pts)
    out.append(f'<polyline points="{path}" fill="none" stroke="{colors[n]}" stroke-width="1.5" stroke-dasharray="{dash}"/>')
    out.append(f'<text x="{W-200}" y="{40+16*i}" fill="{colors[n]}">{route}, {n} island{"s" if n != "1" else ""}{" (dashed)" if dash else ""}</text>')
out.append("</svg>")
open(f"{d}/best-vs-wall.svg", "w").write("\n".join(out))
