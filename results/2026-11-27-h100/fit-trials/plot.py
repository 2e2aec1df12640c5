#!/usr/bin/env python3
"""Generation times of the A/B runs (from each folder's log.txt, as generations.py printed them)
into generations.csv and generations.svg beside this file."""
import csv
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
rows = []
for folder in ["pred-stop", "plain-first"]:
    label = None
    for line in open(os.path.join(here, folder, "log.txt")):
        m = re.match(r"(?:ab_)?(base|new)(?: seed \d+)?(?: run |_)(\d+)", line)
        if m:
            label = f"{m.group(1)} {m.group(2)}"
            continue
        if not line.startswith(" "):
            label = None
        m = re.match(r"\s+(generation_ms|fit_worker_ms): (.*)", line)
        if m and label:
            for g, v in enumerate(m.group(2).split()):
                rows.append({"folder": folder, "run": label, "key": m.group(1), "generation": g, "ms": float(v)})
with open(os.path.join(here, "generations.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["folder", "run", "key", "generation", "ms"])
    w.writeheader()
    w.writerows(rows)
fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
for ax, folder, title in zip(axes, ["pred-stop", "plain-first"], ["base against 632e0d7 (predicted-gain stop)", "base against af47b06 (and plain trials)"]):
    for run in dict.fromkeys(r["run"] for r in rows if r["folder"] == folder):
        pts = [(r["generation"], r["ms"]) for r in rows if r["folder"] == folder and r["run"] == run and r["key"] == "generation_ms"]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-" if run.startswith("new") else "s--", label=run)
    ax.axhline(50, color="grey", lw=0.8)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("generation")
    ax.legend(fontsize=8)
axes[0].set_ylabel("generation ms (H100, Friedman-1, 100,000 cases, population 1000)")
fig.tight_layout()
fig.savefig(os.path.join(here, "generations.svg"))
