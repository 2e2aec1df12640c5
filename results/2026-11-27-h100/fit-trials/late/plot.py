#!/usr/bin/env python3
"""Generation times of final/ (e9a5751, the base, against a81df32, one run of each seed in turn)
into generations.csv and generations.svg beside this file: every generation's time and the GPU
worker's fitting time, with the issue's 50 ms."""
import csv
import glob
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
rows = []
for path in sorted(glob.glob(os.path.join(here, "final", "ab-final_*.jsonl"))):
    m = re.search(r"ab-final_(base|new)_s(\d+)_\d+\.jsonl", path)
    build, seed = m.group(1), int(m.group(2))
    for line in open(path):
        r = json.loads(line)
        if "generation" not in r or r.get("summary"):
            continue
        for key in ("generation_ms", "fit_worker_ms"):
            rows.append({"build": build, "seed": seed, "key": key, "generation": r["generation"], "ms": r[key]})
with open(os.path.join(here, "generations.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["build", "seed", "key", "generation", "ms"])
    w.writeheader()
    w.writerows(rows)
fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
for ax, key, title in [(axes[0], "generation_ms", "generation"), (axes[1], "fit_worker_ms", "GPU worker's fitting")]:
    for build, colour in [("base", "tab:grey"), ("new", "tab:blue")]:
        for seed in sorted({r["seed"] for r in rows}):
            pts = [(r["generation"], r["ms"]) for r in rows if r["build"] == build and r["seed"] == seed and r["key"] == key]
            ax.plot(*zip(*pts), color=colour, alpha=0.8, label=f"{'e9a5751' if build == 'base' else 'a81df32'}" if seed == 1 else None)
    ax.axhline(50, color="black", lw=0.8, ls="--")
    ax.set_title(f"{title} (ms), seeds 1-5")
    ax.set_xlabel("generation")
axes[0].set_ylabel("ms")
axes[0].legend()
fig.suptitle("Friedman-1, 100,000 cases, population 1000, fitted on the GPU (H100)")
fig.tight_layout()
fig.savefig(os.path.join(here, "generations.svg"))
