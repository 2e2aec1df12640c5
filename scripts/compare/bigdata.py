#!/usr/bin/env python3
"""gpfarm's SymbolicRegressor at its defaults (on the GPU where there is one) against pyoperon
0.6.2 on all the host's cores, at 10^5 and 10^6 rows, equal wall-clock budgets.

Two data sets, chosen before any result on them and never used to choose a default: a physics
formula (Feynman I.32.5, x0^2 x1^2 / (6 pi x2 x3^3), on [1, 5]) and Friedman-1 (10 variables, 5
of them unused, noise 1.0). Each is drawn at ROWS + 10,000 rows; the last 10,000 are the test
set. gpfarm gets `max_time`, the seed and nothing else; pyoperon gets `max_time`, the seed,
`n_threads` = the host's cores, and generation and evaluation limits raised so that the time
ends its run. Recorded per fit: wall time from the call to return, the time until gpfarm's
generation 0 was done, test R², the SymPy size (nodes of the model's SymPy expression tree, as in
sr.py) and the model.

    python scripts/compare/bigdata.py OUT [ROWS=100000,1000000] [BUDGET=15] [SEEDS=3]

Writes OUT/bigdata.csv (appended as it goes), OUT/bigdata.md (medians over seeds) and
OUT/bigdata.png; `--report OUT` redoes the last two.
"""

from __future__ import annotations

import csv
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sr import operon_sympy, r2, sympy_size, with_deadline  # noqa: E402

FIELDS = ["dataset", "rows", "tool", "seed", "budget_s", "wall_s", "generation0_done_s", "generations",
          "r2_test", "size_sympy", "model"]
TEST_ROWS = 10_000


def feynman_I_32_5(n, rng):
    X = rng.uniform(1, 5, size=(n, 4))
    return X, X[:, 0] ** 2 * X[:, 1] ** 2 / (6 * np.pi * X[:, 2] * X[:, 3] ** 3)


def friedman1(n, rng):
    X = rng.uniform(0, 1, size=(n, 10))
    y = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, y + rng.normal(0, 1.0, n)


SETS = {"feynman_I_32_5": feynman_I_32_5, "friedman1": friedman1}


def fit_gpfarm(X, y, seed, budget):
    import gpfarm

    seen = []
    # When each generation's record arrives (verbose's hook), from the call of fit.
    gpfarm.regression._progress = lambda _g: (lambda record: seen.append(time.monotonic()))
    start = time.monotonic()
    m = gpfarm.SymbolicRegressor(random_state=seed, max_time=budget, verbose=1).fit(X, y)
    wall = time.monotonic() - start
    return m.predict, wall, round(seen[0] - start, 3) if seen else "", len(m.history_), m.sympy(), m.formula_


def fit_operon(X, y, seed, budget):
    from pyoperon.sklearn import SymbolicRegressor

    start = time.monotonic()
    m = SymbolicRegressor(generations=1_000_000, max_evaluations=10**12, max_time=max(1, int(round(budget))),
                          n_threads=os.cpu_count(), random_state=seed).fit(X, y)
    wall = time.monotonic() - start
    text = m.get_model_string(m.model_, 8)
    return m.predict, wall, "", "", operon_sympy(text, X.shape[1]), text


TOOLS = {"gpfarm": fit_gpfarm, "operon": fit_operon}


def main():
    out = Path(sys.argv[1])
    rows_list = [int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "100000,1000000").split(",")]
    budget = float(sys.argv[3]) if len(sys.argv) > 3 else 15.0
    seeds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bigdata.csv"
    if not path.exists():
        with open(path, "w", newline="") as f:
            csv.DictWriter(f, FIELDS).writeheader()
    for rows in rows_list:
        for name, make in SETS.items():
            X, y = make(rows + TEST_ROWS, np.random.default_rng(rows))
            Xtr, ytr, Xte, yte = X[:rows], y[:rows], X[rows:], y[rows:]
            for seed in range(1, seeds + 1):
                for tool, fit in TOOLS.items():
                    try:
                        predict, wall, first, gens, expr, model = fit(Xtr, ytr, seed, budget)
                        size = with_deadline(10, sympy_size, expr) if expr is not None else None
                        row = dict(r2_test=round(r2(yte, predict(Xte)), 6), size_sympy=size if size is not None else "",
                                   wall_s=round(wall, 3), generation0_done_s=first, generations=gens, model=str(model)[:300])
                    except Exception as e:  # a failure is a result too
                        row = dict(r2_test="", size_sympy="", wall_s="", generation0_done_s="", generations="",
                                   model=f"error: {e!r}"[:300])
                    row.update(dataset=name, rows=rows, tool=tool, seed=seed, budget_s=budget)
                    with open(path, "a", newline="") as f:
                        csv.DictWriter(f, FIELDS).writerow(row)
                    print({k: row[k] for k in FIELDS if k != "model"}, flush=True)
    report(out)


def report(out):
    with open(out / "bigdata.csv") as f:
        rows = list(csv.DictReader(f))
    keys = sorted({(r["dataset"], int(r["rows"])) for r in rows}, key=lambda k: (k[1], k[0]))
    tools = sorted({r["tool"] for r in rows})

    def med(ds, n, tool, field):
        v = [float(r[field]) for r in rows if (r["dataset"], int(r["rows"]), r["tool"]) == (ds, n, tool) and r[field] != ""]
        return statistics.median(v) if v else float("nan")

    lines = ["| data set | rows | " + " | ".join(f"{t} test R² | {t} size | {t} wall s" for t in tools) + " |",
             "|---|---:|" + "---:|" * (3 * len(tools))]
    for ds, n in keys:
        cells = []
        for t in tools:
            cells += [f"{med(ds, n, t, 'r2_test'):.4f}", f"{med(ds, n, t, 'size_sympy'):.0f}", f"{med(ds, n, t, 'wall_s'):.1f}"]
        lines.append(f"| {ds} | {n:,} | " + " | ".join(cells) + " |")
    first = [float(r["generation0_done_s"]) for r in rows if r["tool"] == "gpfarm" and r["generation0_done_s"] != ""]
    walls = [float(r["wall_s"]) for r in rows if r["tool"] == "gpfarm" and r["wall_s"] != ""]
    if first:
        lines += ["", f"gpfarm: generation 0 done {min(first):.2f}-{max(first):.2f} s after the call; "
                      f"wall {min(walls):.2f}-{max(walls):.2f} s for a budget of {rows[0]['budget_s']} s."]
    (out / "bigdata.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    labels = [f"{ds}\n{n:,} rows" for ds, n in keys]
    width = 0.8 / len(tools)
    for i, t in enumerate(tools):
        xs = [k + (i - (len(tools) - 1) / 2) * width for k in range(len(keys))]
        axes[0].bar(xs, [med(ds, n, t, "r2_test") for ds, n in keys], width, label=t)
        axes[1].bar(xs, [med(ds, n, t, "wall_s") for ds, n in keys], width, label=t)
    axes[0].set_ylabel("median test R²")
    axes[1].set_ylabel("median wall s (fit, call to return)")
    axes[1].axhline(float(rows[0]["budget_s"]), color="grey", lw=0.8, ls="--")
    for ax in axes:
        ax.set_xticks(range(len(keys)), labels, fontsize=8)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "bigdata.png", dpi=90)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--report":
        report(Path(sys.argv[2]))
    else:
        main()
