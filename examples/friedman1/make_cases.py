#!/usr/bin/env python3
"""Writes Friedman-1 cases: y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 (no noise),
x1..x5 uniform in [0, 1), drawn by numpy's PCG64 from SEED, as float32 values; the target is
computed in double and rounded once to float.

    python3 make_cases.py [N=1000] [DIR=.] [SEED=1]
"""
import json
import sys

import numpy as np

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
out = sys.argv[2] if len(sys.argv) > 2 else "."
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
x = np.random.default_rng(seed).random((n, 5)).astype(np.float32)
d = x.astype(np.float64)
y = (10 * np.sin(np.pi * d[:, 0] * d[:, 1]) + 20 * (d[:, 2] - 0.5) ** 2 + 10 * d[:, 3] + 5 * d[:, 4]).astype(np.float32)
with open(f"{out}/cases.json", "w") as f:
    f.write("[\n")
    for k in range(n):
        row = {f"x{j + 1}": float(x[k, j]) for j in range(5)}
        row["target"] = float(y[k])
        f.write("  " + json.dumps(row) + (",\n" if k + 1 < n else "\n"))
    f.write("]\n")
