#!/usr/bin/env python3
"""gpfarm's SymbolicRegressor against gplearn 0.4.3 and pyoperon 0.6.2 at equal wall-clock budgets.

Thirteen data sets: nine ground-truth formulas (Feynman, Nguyen, Strogatz; generated here, 1,000
rows, no noise) and four black-box sets that ship inside packages (scikit-learn's diabetes;
statsmodels' engel, grunfeld and fair), nothing downloaded. Each set is split once (75% train,
25% test, seeded by the set's name); each tool fits it with seeds 1..S within the budget, one
thread each. Recorded per fit: test and train R², wall time, the tool's own model size, a common
size (nodes of the model's SymPy expression tree, after SymPy's automatic simplification), and for
ground-truth sets whether the formula was recovered exactly (SRBench's rule: with constants
rounded to 3 decimals, truth - model or truth / model simplifies to a constant).

    pip install gplearn==0.4.3 pyoperon==0.6.2 statsmodels sympy matplotlib ./python
    python scripts/compare/sr.py --budget 10 --seeds 5 --out results/compare-cpu
    python scripts/compare/sr.py --replot results/compare-cpu

`--tools gpfarm` runs gpfarm alone (on a machine without the peers); `--eval gpu` fits gpfarm on
the GPU. Writes runs.csv (one row per fit, appended as it goes: an interrupted run resumes),
summary.md (tables) and r2.svg/png, size.svg/png.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import signal
import sys
import time
import zlib
from pathlib import Path

import numpy as np

FIELDS = [
    "dataset", "kind", "held_out", "tool", "seed", "budget_s", "wall_s", "r2_train", "r2_test",
    "size_native", "size_sympy", "exact", "model",
]


# ---------------------------------------------------------------------------------------------
# Data sets

def _formula(name, ranges, f, truth, n=1000):
    """A ground-truth set: `n` rows drawn uniformly from `ranges` (one (lo, hi) per variable)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    X = np.column_stack([rng.uniform(lo, hi, n) for lo, hi in ranges])
    return dict(name=name, kind="formula", X=X, y=f(*X.T), truth=truth)


def datasets():
    e = np.exp
    sets = [
        _formula("feynman_I_6_2a", [(1, 3)], lambda t: e(-t**2 / 2) / np.sqrt(2 * np.pi),
                 "exp(-x0**2/2)/sqrt(2*pi)"),
        _formula("feynman_I_12_11", [(1, 5)] * 5, lambda q, ef, b, v, t: q * (ef + b * v * np.sin(t)),
                 "x0*(x1 + x2*x3*sin(x4))"),
        _formula("feynman_I_13_4", [(1, 5)] * 4, lambda m, v, u, w: 0.5 * m * (v**2 + u**2 + w**2),
                 "x0*(x1**2 + x2**2 + x3**2)/2"),
        _formula("feynman_I_29_4", [(1, 10)] * 2, lambda w, c: w / c, "x0/x1"),
        _formula("feynman_I_34_8", [(1, 5)] * 4, lambda q, v, b, p: q * v * b / p, "x0*x1*x2/x3"),
        _formula("feynman_II_3_24", [(1, 5)] * 2, lambda p, r: p / (4 * np.pi * r**2), "x0/(4*pi*x1**2)"),
        _formula("nguyen_7", [(0, 2)], lambda x: np.log(x + 1) + np.log(x**2 + 1), "log(x0 + 1) + log(x0**2 + 1)"),
        _formula("strogatz_bacres1", [(0, 10), (0, 10)], lambda x, y: 20 - x - x * y / (1 + 0.5 * x**2),
                 "20 - x0 - x0*x1/(1 + x0**2/2)"),
        _formula("strogatz_glider1", [(-5, 5), (-5, 5)], lambda x, y: -0.05 * x**2 - np.sin(y),
                 "-x0**2/20 - sin(x1)"),
    ]
    # Held out: chosen before any result on them was seen, and never used to choose a default.
    held = [
        _formula("feynman_I_10_7", [(1, 5), (1, 2), (3, 10)], lambda m, v, c: m / np.sqrt(1 - v**2 / c**2),
                 "x0/sqrt(1 - x1**2/x2**2)"),
        _formula("feynman_I_18_4", [(1, 5)] * 4, lambda m1, r1, m2, r2: (m1 * r1 + m2 * r2) / (m1 + m2),
                 "(x0*x1 + x2*x3)/(x0 + x2)"),
        _formula("nguyen_10", [(0, 1), (0, 1)], lambda x, y: 2 * np.sin(x) * np.cos(y), "2*sin(x0)*cos(x1)"),
        _formula("keijzer_14", [(-3, 3), (-3, 3)], lambda x, y: 8 / (2 + x**2 + y**2), "8/(2 + x0**2 + x1**2)"),
        _formula("strogatz_lv1", [(0, 5), (0, 5)], lambda x, y: 3 * x - 2 * x * y - x**2, "3*x0 - 2*x0*x1 - x0**2"),
        _formula("pagie_1", [(-5, 5), (-5, 5)], lambda x, y: 1 / (1 + x**-4) + 1 / (1 + y**-4),
                 "1/(1 + x0**-4) + 1/(1 + x1**-4)"),
    ]
    for d in held:
        d["held_out"] = True
    sets += held
    from sklearn.datasets import load_diabetes, make_friedman1

    d = load_diabetes()
    sets.append(dict(name="diabetes", kind="black-box", X=d.data, y=d.target, truth=None))
    import statsmodels.api as sm

    engel = sm.datasets.engel.load_pandas().data
    sets.append(dict(name="engel", kind="black-box", X=engel[["income"]].to_numpy(), y=engel["foodexp"].to_numpy(), truth=None))
    grunfeld = sm.datasets.grunfeld.load_pandas().data
    sets.append(dict(name="grunfeld", kind="black-box", X=grunfeld[["value", "capital"]].to_numpy(dtype=float),
                     y=grunfeld["invest"].to_numpy(dtype=float), truth=None))
    fair = sm.datasets.fair.load_pandas().data
    cols = ["rate_marriage", "age", "yrs_married", "children", "religious", "educ", "occupation", "occupation_husb"]
    sets.append(dict(name="fair", kind="black-box", X=fair[cols].to_numpy(dtype=float), y=fair["affairs"].to_numpy(dtype=float), truth=None))
    X, y = make_friedman1(n_samples=1000, n_features=10, noise=1.0, random_state=7)
    sets.append(dict(name="friedman1", kind="black-box", X=X, y=y, truth=None, held_out=True))
    for name, load, target, drop in [
        ("longley", sm.datasets.longley, "TOTEMP", []),
        ("stackloss", sm.datasets.stackloss, "STACKLOSS", []),
        ("statecrime", sm.datasets.statecrime, "murder", []),
        ("ccard", sm.datasets.ccard, "AVGEXP", []),
        ("macrodata", sm.datasets.macrodata, "realinv", ["year", "quarter"]),
    ]:
        frame = load.load_pandas().data.select_dtypes("number")
        cols = [c for c in frame.columns if c != target and c not in drop]
        sets.append(dict(name=name, kind="black-box", X=frame[cols].to_numpy(dtype=float),
                         y=frame[target].to_numpy(dtype=float), truth=None, held_out=True))
    return sets


def load_sets(path):
    """The data sets as `--export-data` wrote them (for a machine without scikit-learn and
    statsmodels)."""
    import json

    data = np.load(path)
    return [dict(m, X=data[m["name"] + "__X"], y=data[m["name"] + "__y"]) for m in json.loads(str(data["meta"]))]


def export_sets(path):
    import json

    sets = datasets()
    arrays = {f"{d['name']}__{k}": d[k] for d in sets for k in ("X", "y")}
    meta = [dict(name=d["name"], kind=d["kind"], truth=d["truth"]) for d in sets]
    np.savez_compressed(path, meta=json.dumps(meta), **arrays)


def split(ds):
    rng = np.random.default_rng(zlib.crc32(("split " + ds["name"]).encode()))
    order = rng.permutation(len(ds["y"]))
    cut = int(0.75 * len(order))
    tr, te = order[:cut], order[cut:]
    return ds["X"][tr], ds["y"][tr], ds["X"][te], ds["y"][te]


# ---------------------------------------------------------------------------------------------
# Tools: each returns (fitted predictor, native size, SymPy expression over x0.. or None)

def fit_gpfarm(X, y, seed, budget, args):
    import gpfarm

    # Defaults, given the budget: max_time, one thread, the seed (and the evaluator asked for).
    m = gpfarm.SymbolicRegressor(random_state=seed, eval=args.eval, max_time=budget, n_jobs=1).fit(X, y)
    return m.predict, m.size_, m.sympy(), m.formula_


def fit_gplearn(X, y, seed, budget, args):
    from gplearn.genetic import SymbolicRegressor

    # Defaults (population 1000, + - * /, parsimony 0.001), one generation at a time until the
    # budget is spent (gplearn has no time limit).
    m = SymbolicRegressor(generations=1, warm_start=True, random_state=seed, n_jobs=1)
    start = time.monotonic()
    m.fit(X, y)
    while time.monotonic() - start < budget:
        m.set_params(generations=m.generations + 1)
        m.fit(X, y)
    program = str(m._program)
    return m.predict, m._program.length_, gplearn_sympy(program, X.shape[1]), program


def fit_operon(X, y, seed, budget, args):
    from pyoperon.sklearn import SymbolicRegressor

    # Defaults, given the budget: max_time, one thread, the seed; its generation and evaluation
    # limits raised so that the time limit is the one that ends the run (as for gpfarm).
    m = SymbolicRegressor(
        generations=1_000_000, max_evaluations=10**12,
        max_time=max(1, int(round(budget))), n_threads=1, random_state=seed,
    )
    m.fit(X, y)
    text = m.get_model_string(m.model_, 8)
    return m.predict, m.model_.Length, operon_sympy(text, X.shape[1]), text


TOOLS = {"gpfarm": fit_gpfarm, "gplearn": fit_gplearn, "operon": fit_operon}


# ---------------------------------------------------------------------------------------------
# Models as SymPy, sizes, exact recovery

def symbols(n):
    import sympy

    return {f"x{j}": sympy.Symbol(f"x{j}") for j in range(n)}


def gplearn_sympy(program, n):
    import sympy

    local = {f"X{j}": sympy.Symbol(f"x{j}") for j in range(n)}
    local.update(
        add=lambda a, b: a + b, sub=lambda a, b: a - b, mul=lambda a, b: a * b, div=lambda a, b: a / b,
        sqrt=lambda a: sympy.sqrt(sympy.Abs(a)), log=lambda a: sympy.log(sympy.Abs(a)),
        sin=sympy.sin, cos=sympy.cos, neg=lambda a: -a, inv=lambda a: 1 / a,
    )
    return eval(program, {"__builtins__": {}}, local)  # gplearn's own prefix text of its model


def operon_sympy(text, n):
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    local = {f"X{j + 1}": sympy.Symbol(f"x{j}") for j in range(n)}
    return parse_expr(text.replace("^", "**"), local_dict=local)


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def with_deadline(seconds, f, *a):
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        return f(*a)
    except Timeout:
        return None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def sympy_size(expr):
    import sympy

    return sum(1 for _ in sympy.preorder_traversal(expr))


def recovered(expr, truth, n):
    """SRBench's rule: constants rounded to 3 decimals, truth - model or truth / model simplifies
    to a constant (None when SymPy takes over 20 s)."""
    import sympy

    model = expr.xreplace({f: sympy.Float(round(float(f), 3)) for f in expr.atoms(sympy.Float)})
    t = sympy.sympify(truth, locals=symbols(n))

    def check():
        d = sympy.simplify(t - model)
        if not d.free_symbols:
            return True
        r = sympy.simplify(t / model)
        return bool(not r.free_symbols and r != 0)

    return with_deadline(20, check)


def r2(y, p):
    p = np.asarray(p, dtype=float)
    if not np.all(np.isfinite(p)):
        return float("nan")
    return 1.0 - float(np.sum((y - p) ** 2)) / float(np.sum((y - np.mean(y)) ** 2))


# ---------------------------------------------------------------------------------------------

def run(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "runs.csv"
    done = set()
    if path.exists():
        with open(path) as f:
            done = {(r["dataset"], r["tool"], r["seed"]) for r in csv.DictReader(f)}
    else:
        with open(path, "w", newline="") as f:
            csv.DictWriter(f, FIELDS).writeheader()
    machine = f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    (out / "machine.txt").write_text(machine + "\n" + " ".join(sys.argv) + "\n")
    for ds in load_sets(args.data) if args.data else datasets():
        if args.datasets and ds["name"] not in args.datasets:
            continue
        Xtr, ytr, Xte, yte = split(ds)
        n = Xtr.shape[1]
        for seed in range(1, args.seeds + 1):
            for tool in args.tools:
                if (ds["name"], tool, str(seed)) in done:
                    continue
                start = time.monotonic()
                try:
                    predict, native, expr, text = TOOLS[tool](Xtr, ytr, seed, args.budget, args)
                    wall = time.monotonic() - start
                    row = dict(r2_train=r2(ytr, predict(Xtr)), r2_test=r2(yte, predict(Xte)), size_native=native)
                    row["size_sympy"] = sympy_size(expr) if expr is not None else ""
                    exact = recovered(expr, ds["truth"], n) if ds["truth"] and expr is not None else None
                    row["exact"] = "" if exact is None else int(exact)
                    row["model"] = text
                except Exception as e:  # a tool's failure is a result too
                    wall = time.monotonic() - start
                    row = dict(r2_train="", r2_test="", size_native="", size_sympy="", exact="", model=f"error: {e!r}"[:300])
                row.update(dataset=ds["name"], kind=ds["kind"], held_out=int(ds.get("held_out", False)), tool=tool, seed=seed, budget_s=args.budget, wall_s=round(wall, 2))
                with open(path, "a", newline="") as f:
                    csv.DictWriter(f, FIELDS).writerow(row)
                print(f"{ds['name']:>18} {tool:>8} seed {seed}: test R2 {row['r2_test']!s:.8} size {row['size_sympy']} "
                      f"exact {row['exact']} ({wall:.1f} s)", flush=True)
    report(out)


def report(out):
    rows = list(csv.DictReader(open(out / "runs.csv")))
    tools = [t for t in TOOLS if any(r["tool"] == t for r in rows)]
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    kinds = {r["dataset"]: r["kind"] for r in rows}

    def values(ds, tool, field):
        return [float(r[field]) for r in rows if r["dataset"] == ds and r["tool"] == tool and r[field] not in ("", "nan")]

    def med(v):
        return float(np.median(v)) if v else float("nan")

    lines = [f"# Symbolic regression: {', '.join(tools)}", ""]
    machine = (out / "machine.txt").read_text().splitlines() if (out / "machine.txt").exists() else ["?"]
    lines += [f"Machine: {machine[0]}. Command: `{machine[-1]}`.", ""]
    lines += ["Median test R² (seeds), median size (nodes of the SymPy tree), exact recoveries / seeds:", ""]
    head = "| data set | kind | " + " | ".join(f"{t} R² | {t} size | {t} exact" for t in tools) + " |"
    lines += [head, "|" + "---|" * (2 + 3 * len(tools))]
    wins = {t: 0 for t in tools}
    for ds in names:
        cells = [ds, kinds[ds]]
        meds = {}
        for t in tools:
            r2v = values(ds, t, "r2_test")
            meds[t] = med(r2v)
            ex = [int(float(r["exact"])) for r in rows if r["dataset"] == ds and r["tool"] == t and r["exact"] != ""]
            cells += [f"{med(r2v):.4f}", f"{med(values(ds, t, 'size_sympy')):.0f}",
                      f"{sum(ex)}/{len([r for r in rows if r['dataset'] == ds and r['tool'] == t])}" if kinds[ds] == "formula" else "–"]
        top = max((m for m in meds.values() if not math.isnan(m)), default=math.nan)
        for t in tools:  # ties (within 1e-4) count for each
            if not math.isnan(meds[t]) and meds[t] >= top - 1e-4:
                wins[t] += 1
        lines.append("| " + " | ".join(cells) + " |")
    held = {r["dataset"] for r in rows if r.get("held_out") == "1"}
    best = {}
    for ds in names:
        meds = {t: med(values(ds, t, "r2_test")) for t in tools}
        top = max((m for m in meds.values() if not math.isnan(m)), default=math.nan)
        best[ds] = {t for t in tools if not math.isnan(meds[t]) and meds[t] >= top - 1e-4}
    groups = [("all data sets", names)]
    if held and len(held) < len(names):
        groups += [("the held-out sets only (never used to choose a default)", [n for n in names if n in held]),
                   ("the other sets", [n for n in names if n not in held])]
    for title, group in groups:
        lines += ["", f"Over {title} ({len(group)}):", "",
                  "| tool | median of median test R² | median size | exact recoveries | sets best (ties each) | median wall s | max wall s |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for t in tools:
            per = [med(values(ds, t, "r2_test")) for ds in group]
            sizes = [med(values(ds, t, "size_sympy")) for ds in group]
            mine = [r for r in rows if r["tool"] == t and r["dataset"] in group]
            ex = [int(float(r["exact"])) for r in mine if r["exact"] != ""]
            formula_fits = len([r for r in mine if kinds[r["dataset"]] == "formula"])
            walls = [float(r["wall_s"]) for r in mine]
            lines.append(f"| {t} | {med([p for p in per if not math.isnan(p)]):.4f} | {med([s for s in sizes if not math.isnan(s)]):.0f} | "
                         f"{sum(ex)}/{formula_fits} | {sum(1 for ds in group if t in best[ds])} | {med(walls):.1f} | {max(walls):.1f} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    for field, label, fname in [("r2_test", "test R² (median over seeds)", "r2"), ("size_sympy", "model size (median, nodes)", "size")]:
        fig, ax = plt.subplots(figsize=(10, 4))
        width = 0.8 / len(tools)
        for k, t in enumerate(tools):
            v = [med(values(ds, t, field)) for ds in names]
            if field == "r2_test":
                v = [max(x, -0.1) if not math.isnan(x) else np.nan for x in v]
            ax.bar(np.arange(len(names)) + k * width, v, width, label=t)
        ax.set_xticks(np.arange(len(names)) + width * (len(tools) - 1) / 2)
        ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.legend()
        fig.tight_layout()
        for ext in ("svg", "png"):
            fig.savefig(out / f"{fname}.{ext}")
        plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=10.0, help="seconds of wall time per fit")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--tools", default="gpfarm,gplearn,operon")
    p.add_argument("--datasets", default="", help="comma-separated names (default: all)")
    p.add_argument("--eval", default="cpu", help="gpfarm's evaluator: cpu, gpu or auto")
    p.add_argument("--gpfarm-population", type=int, default=200)
    p.add_argument("--gpfarm-tournament", type=int, default=5)
    p.add_argument("--out", default="results/compare")
    p.add_argument("--replot", default=None, help="only redo summary.md and the plots of this directory")
    p.add_argument("--export-data", default=None, help="write the data sets to this .npz and stop")
    p.add_argument("--data", default=None, help="read the data sets from an --export-data file")
    args = p.parse_args()
    if args.export_data:
        export_sets(args.export_data)
        return
    if args.replot:
        report(Path(args.replot))
        return
    args.tools = [t for t in args.tools.split(",") if t]
    args.datasets = [d for d in args.datasets.split(",") if d]
    run(args)


if __name__ == "__main__":
    main()
