#!/usr/bin/env python3
"""Which model of a fit's size-error front to hand the user: the rules compared on the same fits.

Fits `SymbolicRegressor` at its defaults (given `max_time`, one thread, the seed) on the data sets
of `sr.py`, and records every model of each fit's front with its size (simplified, as shown), its
training RMSE and its test R². Each rule then picks one model per fit from the recorded front, so
the rules are compared on the very same runs:

- `best`: the lowest training error (`select_tolerance=0`, the default when this was written);
- `bic`: the lowest n·ln(MSE) + size·ln(n) on the training rows (Schwarz's criterion, each node
  counted as a parameter);
- `aic`: the lowest n·ln(MSE) + 2·size;
- `pysr`: PySR's "best": among the models whose training error is at most 1.5× the lowest, the
  one with the largest drop of ln(error) per node from the next smaller model of the front.

The held-out sets of `sr.py` are reported apart: a rule is chosen on the others.

    python scripts/compare/selection.py --budget 10 --seeds 5 --out results/selection
    python scripts/compare/selection.py --report results/selection

Writes fronts.csv (one row per model of each front; appended as it goes, so an interrupted run
resumes) and summary.md.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sr  # noqa: E402  (the data sets and the split)

FIELDS = ["dataset", "held_out", "seed", "wall_s", "n_train", "k", "size", "rmse_train", "r2_test", "chosen", "expression"]


def fronts(args):
    import gpfarm
    from gpfarm import _gpfarm
    from gpfarm.regression import compute

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "fronts.csv"
    done = set()
    if path.exists():
        done = {(r["dataset"], r["seed"]) for r in csv.DictReader(open(path))}
    else:
        with open(path, "w", newline="") as f:
            csv.DictWriter(f, FIELDS).writeheader()
    (out / "machine.txt").write_text(
        f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}\n"
        + " ".join(sys.argv) + "\n")
    for ds in sr.datasets():
        if args.datasets and ds["name"] not in args.datasets:
            continue
        Xtr, ytr, Xte, yte = sr.split(ds)
        for seed in range(1, args.seeds + 1):
            if (ds["name"], str(seed)) in done:
                continue
            start = time.monotonic()
            m = gpfarm.SymbolicRegressor(random_state=seed, max_time=args.budget, n_jobs=1).fit(Xtr, ytr)
            wall = time.monotonic() - start
            rows = []
            for k, entry in enumerate(m.front_):
                steps = _gpfarm.postfix(list(m.names_), entry["expression"], [])
                if steps is None:
                    continue
                test = compute(steps, Xte.astype(np.float32)).astype(np.float64)
                rows.append(dict(k=k, size=entry.get("simplified_size", entry["size"]), rmse_train=entry["fitness"],
                                 r2_test=sr.r2(yte, test), chosen=0, expression=entry["expression"]))
            # The model the user got (chosen and pruned), as a row of its own.
            rows.append(dict(k=-1, size=m.size_, rmse_train=m.fitness_, r2_test=sr.r2(yte, m.predict(Xte)), chosen=1,
                             expression=m.program_))
            with open(path, "a", newline="") as f:
                w = csv.DictWriter(f, FIELDS)
                for row in rows:
                    row.update(dataset=ds["name"], held_out=int(ds.get("held_out", False)), seed=seed,
                               wall_s=round(wall, 2), n_train=len(ytr))
                    w.writerow(row)
            print(f"{ds['name']:>18} seed {seed}: front of {len(rows) - 1}, chosen test R2 {rows[-1]['r2_test']:.4f} "
                  f"({wall:.1f} s)", flush=True)


def pick(front, n, rule):
    """The model `rule` picks from `front` (dicts with size, rmse_train), sorted by size."""
    front = [m for m in front if math.isfinite(m["rmse_train"])]
    if not front:
        return None
    floor = 1e-30  # an exact fit has MSE 0: ln needs a floor
    if rule == "best":
        return min(front, key=lambda m: (m["rmse_train"], m["size"]))
    if rule in ("bic", "aic"):
        # The estimator's own rule (`model_selection=`), on the recorded sizes as shown.
        from gpfarm.regression import choose_by_criterion

        chosen = choose_by_criterion([dict(size=m["size"], fitness=m["rmse_train"], row=m) for m in front], n, rule)
        return chosen["row"]
    if rule == "pysr":
        front = sorted(front, key=lambda m: m["size"])
        lowest = min(m["rmse_train"] for m in front)
        best, score = front[0], -math.inf
        for a, b in zip([None] + front[:-1], front):
            s = 0.0 if a is None else -(math.log(max(b["rmse_train"], floor)) - math.log(max(a["rmse_train"], floor))) / max(1, b["size"] - a["size"])
            if b["rmse_train"] <= 1.5 * lowest and s > score:
                best, score = b, s
        return best
    raise ValueError(rule)


RULES = ["best", "bic", "aic", "pysr"]


def report(out):
    out = Path(out)
    rows = list(csv.DictReader(open(out / "fronts.csv")))
    for r in rows:
        for f in ("size", "rmse_train", "r2_test"):
            r[f] = float(r[f]) if r[f] not in ("", "nan") else float("nan")
    fits = {}
    for r in rows:
        fits.setdefault((r["dataset"], r["held_out"], r["seed"]), []).append(r)
    sets = sorted({(d, h) for d, h, _ in fits}, key=lambda t: (t[1], t[0]))
    table = {}  # (dataset, rule) -> (median test R², median size)
    for d, h in sets:
        for rule in RULES + ["as given"]:
            r2s, sizes = [], []
            for (dd, hh, _), fit in fits.items():
                if (dd, hh) != (d, h):
                    continue
                if rule == "as given":
                    m = next(x for x in fit if x["chosen"] == "1")
                else:
                    m = pick([x for x in fit if x["chosen"] == "0"], int(fit[0]["n_train"]), rule)
                if m is not None:
                    r2s.append(m["r2_test"] if math.isfinite(m["r2_test"]) else -1e9)
                    sizes.append(m["size"])
            table[(d, rule)] = (float(np.median(r2s)), float(np.median(sizes)))
    cols = RULES + ["as given"]
    lines = ["# Choosing a model from the front: the rules on the same fits", "",
             "Median test R² over the seeds (median size of the model picked). `as given`: the model the",
             "estimator returned (the lowest training error, then pruned).", "",
             "| data set | held out | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
    for d, h in sets:
        lines.append(f"| {d} | {'yes' if h == '1' else ''} | "
                     + " | ".join(f"{table[(d, c)][0]:.4f} ({table[(d, c)][1]:.0f})" for c in cols) + " |")
    lines += ["", "| sets | rule | median of median test R² | median size | sets where it beats `best` | sets where it loses |",
              "|---|---|---:|---:|---:|---:|"]
    for label, keep in (("not held out", "0"), ("held out", "1"), ("all", None)):
        chosen = [(d, h) for d, h in sets if keep is None or h == keep]
        for c in cols:
            r2s = [table[(d, c)][0] for d, h in chosen]
            sizes = [table[(d, c)][1] for d, h in chosen]
            wins = sum(table[(d, c)][0] > table[(d, "best")][0] + 1e-4 for d, h in chosen)
            losses = sum(table[(d, c)][0] < table[(d, "best")][0] - 1e-4 for d, h in chosen)
            lines.append(f"| {label} ({len(chosen)}) | {c} | {np.median(r2s):.4f} | {np.median(sizes):.0f} | {wins} | {losses} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(out, sets, table)


def plot(out, sets, table):
    """r2.png: each set's median test R² under each rule (clipped at -1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 4.5))
    width = 0.8 / len(RULES)
    for i, rule in enumerate(RULES):
        ax.bar([k + i * width for k in range(len(sets))], [max(-1.0, table[(d, rule)][0]) for d, _ in sets],
               width, label=rule)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(sets))])
    ax.set_xticklabels([d + (" *" if h == "1" else "") for d, h in sets], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("median test R² (clipped at -1)")
    ax.set_ylim(-1.05, 1.05)
    ax.set_title("The model chosen from the same fits' fronts, by rule (* held out)")
    ax.legend(ncol=len(RULES), fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "r2.png", dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=10.0)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--datasets", nargs="*")
    p.add_argument("--out", default="results/selection")
    p.add_argument("--report", help="only write the report of this folder's fronts.csv")
    args = p.parse_args()
    if args.report:
        report(args.report)
        return
    fronts(args)
    report(args.out)


if __name__ == "__main__":
    main()
