#!/usr/bin/env python3
"""Generation times of the night's calls (first/ to fifth/) into generations.csv and
generations.svg beside this file: every run's generation times, this session's builds (f060c3f,
5caac89) against cdeb3dd, one panel per call, with the issue's 50 ms."""
import csv
import glob
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
calls = {
    "first": "first: host A, fresh (f060c3f)",
    "third": "third: host A, after its tests (f060c3f)",
    "fourth": "fourth: host B, fresh (f060c3f, 14-16 threads)",
    "fifth": "fifth: host C, fresh (5caac89)",
}
rows = []
for call in calls:
    for path in sorted(glob.glob(os.path.join(here, call, "*.jsonl"))):
        name = os.path.basename(path)
        m = re.match(r"ab\w*?_(base|new)_s(\d+)_(\d+)\.jsonl", name) or re.match(r"thr(\d+)_s(\d+)_(\d+)\.jsonl", name)
        build = "base" if m.group(1) == "base" else "new"
        for line in open(path):
            r = json.loads(line)
            if "generation" not in r or r.get("summary"):
                continue
            rows.append({"call": call, "run": name[:-6], "build": build, "seed": int(m.group(2)),
                         "generation": r["generation"], "generation_ms": r["generation_ms"],
                         "fit_worker_ms": r["fit_worker_ms"]})
with open(os.path.join(here, "generations.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
fig, axes = plt.subplots(1, len(calls), figsize=(16, 4), sharey=True)
for ax, (call, title) in zip(axes, calls.items()):
    labelled = set()
    for run in sorted({r["run"] for r in rows if r["call"] == call}):
        pts = [r for r in rows if r["run"] == run and r["call"] == call]
        build = pts[0]["build"]
        colour = "tab:grey" if build == "base" else "tab:blue"
        label = ("cdeb3dd" if build == "base" else "this session") if build not in labelled else None
        labelled.add(build)
        ax.plot([p["generation"] for p in pts], [p["generation_ms"] for p in pts], color=colour, alpha=0.6, lw=1, label=label)
    ax.axhline(50, color="black", lw=0.8, ls="--")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("generation")
    ax.set_ylim(0, 70)
axes[0].set_ylabel("generation (ms; one above 70 cut)")
axes[0].legend(fontsize=8)
fig.suptitle("Friedman-1, 100,000 cases, population 1000, fitted on the GPU (H100), every run of the night's calls")
fig.tight_layout()
fig.savefig(os.path.join(here, "generations.svg"))
