"""SymbolicRegressor's fit time on the GPU host: eval="cpu" (16 threads) against eval="gpu" at
100 to 100,000 rows (population 1000, 10 generations, fitted constants), the GPU fit three times
in this process (the first builds its kernels or finds them on disk; the others find them in
memory, and take over the GPU worker the fit before kept). Writes estimator-<tag>.csv; one line
per fit: its wall time (fit_s), the time of its generations alone (generations_s), the rest
being the run's start and end."""

import csv
import sys
import time

import numpy as np

import gpfarm

out, tag = sys.argv[1], sys.argv[2]
rows = []


def data(n, seed=7):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    return X, X[:, 0] ** 2 + 0.5 * X[:, 1] - X[:, 0] * X[:, 1] / 3.0


import os

for n in [int(v) for v in os.environ.get("SIZES", "100,1000,10000,100000").split(",")]:
    X, y = data(n)
    for mode, repeat in [("cpu", 1), ("gpu", 3), ("auto", 1)]:
        for k in range(repeat):
            m = gpfarm.SymbolicRegressor(population=1000, generations=10, random_state=1, eval=mode)
            t = time.perf_counter()
            m.fit(X, y)
            took = time.perf_counter() - t
            t = time.perf_counter()
            m.predict(X)
            pred = time.perf_counter() - t
            row = dict(tag=tag, rows=n, eval=mode, repeat=k, evaluator=m.history_[0]["evaluator"], route=m.route_,
                       fit_s=round(took, 3), gen0_ms=round(m.history_[0]["generation_ms"], 1),
                       median_gen_ms=round(float(np.median([r["generation_ms"] for r in m.history_])), 1),
                       generations_s=round(sum(r["generation_ms"] for r in m.history_) / 1000, 3),
                       predict_ms=round(pred * 1000, 2), fitness=m.fitness_, size=m.size_)
            rows.append(row)
            print(row, flush=True)
with open(f"{out}/estimator-{tag}.csv", "w", newline="") as f:
    w = csv.DictWriter(f, list(rows[0]))
    w.writeheader()
    w.writerows(rows)
