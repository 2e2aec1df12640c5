#!/usr/bin/env python3
"""night.csv and night2.csv (scripts/cpu/fit-seeds.sh, 15 seeds) into night.svg beside this file:
per seed, a fitted generation's time over an unfitted one's, for cdeb3dd and this session's
build, with the issue's 10x; and the fitting time of this session's build over cdeb3dd's."""
import csv
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
passes = [("night.csv", "now", "f060c3f"), ("night2.csv", "final", "5caac89")]
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
for ax, (name, new, label) in zip(axes, passes):
    rows = list(csv.DictReader(open(os.path.join(here, name))))
    by = {(r["build"], int(r["seed"]), r["iterations"]): r for r in rows}
    seeds = sorted({int(r["seed"]) for r in rows})
    for build, colour, text in [("base", "tab:grey", "cdeb3dd"), (new, "tab:blue", label)]:
        ratio = [float(by[(build, s, "10")]["ms_per_generation"]) / float(by[(build, s, "0")]["ms_per_generation"]) for s in seeds]
        ax.plot(seeds, ratio, "o-", color=colour, label=text)
    ax.axhline(10, color="black", lw=0.8, ls="--")
    ax.set_title(f"{name}: fitted / unfitted generation", fontsize=10)
    ax.set_xlabel("seed")
    ax.set_ylim(0, 12)
    ax.legend(fontsize=8)
    paired = [float(by[(new, s, "10")]["fit_s"]) / float(by[("base", s, "10")]["fit_s"]) for s in seeds]
    axes[2].plot(seeds, paired, "o-", label=f"{label} / cdeb3dd ({name})")
axes[0].set_ylabel("x")
axes[2].set_title("fitting time, paired by seed", fontsize=10)
axes[2].set_xlabel("seed")
axes[2].set_ylim(0.8, 1.0)
axes[2].legend(fontsize=8)
fig.suptitle("Friedman-1, 1,000 cases, population 1000, 10 generations, 2-core CPU (median of 3 runs a seed)")
fig.tight_layout()
fig.savefig(os.path.join(here, "night.svg"))
