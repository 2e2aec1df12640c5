"""How soon a fit reaches the GPU: for ROWS x 6 columns, fits at defaults with `max_time=BUDGET`
in this process, one after the other; per fit one JSON line: the time to build the problem in
memory (`gpfarm.memory_problem`), generation 0's completion after the run's start (`done_ms`),
the fit's wall time, the route and the chosen model's size. Usage: startup.py ROWS BUDGET FITS."""

import json
import sys
import time

import numpy as np

import gpfarm

rows, budget, fits = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(1)
X = rng.uniform(-1, 1, size=(rows, 6))
y = X[:, 0] * X[:, 1] + np.sin(2 * X[:, 2]) + 0.5 * X[:, 3] ** 2 - X[:, 4] + 0.1 * rng.normal(size=rows)
t = time.monotonic()
gpfarm.memory_problem(X, y)
memory_s = time.monotonic() - t
for k in range(fits):
    t = time.monotonic()
    model = gpfarm.SymbolicRegressor(max_time=budget, random_state=k + 1).fit(X, y)
    wall = time.monotonic() - t
    gen0 = model.history_[0]
    print(json.dumps({
        "rows": rows, "fit": k, "memory_problem_s": round(memory_s, 3), "gen0_done_s": gen0["done_ms"] / 1e3,
        "gen0_s": gen0["generation_ms"] / 1e3, "wall_s": round(wall, 3), "budget_s": budget, "route": model.route_,
        "evaluator": gen0["evaluator"], "generations": len(model.history_), "size": model.size_,
    }), flush=True)
