"""Plots DIR/fit_sizes.csv (from the `fit_sizes` example, a `build` and `round` column added):
CPU fit time by number of parameters, base against new (best of five fits per round, every
round shown), into DIR/fit_sizes.svg and .png.

Usage: python3 scripts/cpu/plot-fit-sizes.py DIR"""
import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = Path(sys.argv[1])
rows = list(csv.DictReader(open(here / "fit_sizes.csv")))
fig, ax = plt.subplots(figsize=(6, 4))
for build, marker in (("base", "o"), ("new", "s")):
    pts = [(int(r["params"]), float(r["ms"])) for r in rows if r["build"] == build]
    ax.scatter([p for p, _ in pts], [m for _, m in pts], marker=marker, label=build)
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("free parameters")
ax.set_ylabel("ms per fit (10 iterations, 4,096 cases)")
ax.set_title("CPU fits, 2-core machine")
ax.legend()
fig.tight_layout()
fig.savefig(here / "fit_sizes.svg")
fig.savefig(here / "fit_sizes.png", dpi=100)
