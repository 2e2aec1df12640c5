"""The Python package on the GPU host: a fitted regression evaluated on the GPU (and the same fit
on the CPU where that is affordable, to compare), an evolve on the NVRTC route compiled by the
package's own daemons, and a farm compile. Plain lists, so numpy is not needed. Writes
python-gpu.csv and prints one line per run."""

import csv
import math
import os
import random
import sys
import time

import gpfarm

out = sys.argv[1]
rows_out = []


def data(n, seed=7):
    rng = random.Random(seed)
    X = [[rng.uniform(-3, 3), rng.uniform(-3, 3)] for _ in range(n)]
    y = [a * a + 0.5 * b - a * b / 3.0 for a, b in X]
    return X, y


def fit(n, eval_mode, generations):
    X, y = data(n)
    model = gpfarm.SymbolicRegressor(population=300, generations=generations, random_state=1, eval=eval_mode)
    start = time.perf_counter()
    model.fit(X, y)
    took = time.perf_counter() - start
    # predict runs on the CPU evaluator: its RMSE on the training data is the training fitness.
    pred = model.predict(X[:1000])
    rmse_1000 = math.sqrt(sum((p - t) ** 2 for p, t in zip(pred, y[:1000])) / 1000)
    evaluators = sorted({r["evaluator"] for r in model.history_})
    gen_ms = sorted(r["generation_ms"] for r in model.history_)
    row = dict(
        kind="fit", rows=n, eval=eval_mode, evaluators="/".join(evaluators), route=model.route_,
        generations=generations, population=300, fit_s=round(took, 3),
        median_generation_ms=round(gen_ms[len(gen_ms) // 2], 3), fitness=repr(model.fitness_),
        rmse_first_1000=round(rmse_1000, 6), program=model.program_,
    )
    rows_out.append(row)
    print(row, flush=True)
    return model


print("gpfarm", gpfarm.__version__, "python", sys.version.split()[0], "wheels", gpfarm._WHEELS, flush=True)
SIZES = [(1_000, 30), (100_000, 30), (1_000_000, 30)] if len(sys.argv) < 3 else [(1_000, 3)]
GPU = "gpu" if len(sys.argv) < 3 else sys.argv[2]
for n, gens in SIZES:
    g = fit(n, GPU, gens)
    if n <= 100_000:
        c = fit(n, "cpu", gens)
        same = g.fitness_ == c.fitness_ and g.program_ == c.program_
        print(f"rows {n}: GPU and CPU runs identical (fitness bits and program): {same}", flush=True)
        rows_out.append(dict(kind="gpu_equals_cpu", rows=n, fitness=str(same)))

# A compiling route from Python: NVRTC from /usr/local/cuda, the package's daemons (gpfarmd beside
# the interpreter), GPU evaluation.
for route in ["nvrtc", "ptx", "interpreter"]:
    start = time.perf_counter()
    result = gpfarm.evolve("keijzer6", population=300, generations=10, seed=1, route=route, eval=GPU)
    took = time.perf_counter() - start
    row = dict(kind="evolve", rows=0, eval=GPU, route=result.route, generations=10, population=300,
               fit_s=round(took, 3), fitness=repr(result.best_fitness),
               median_generation_ms=round(sorted(r["generation_ms"] for r in result.history)[5], 3),
               program=result.best_phenotype)
    rows_out.append(row)
    print(row, flush=True)

units = [f'extern "C" __global__ void k{i}(float* a) {{ a[threadIdx.x] = a[threadIdx.x] * {i}.5f + 1.0f; }}'
         for i in range(256)]
with gpfarm.Farm(workers=16) as farm:
    farm.compile(units[:16])
    start = time.perf_counter()
    results = farm.compile(units)
    took = time.perf_counter() - start
row = dict(kind="farm_compile", rows=len(units), eval="", route="nvrtc", fit_s=round(took, 3),
           fitness=str(sum(r["ok"] for r in results)), program="")
rows_out.append(row)
print(row, flush=True)

keys = []
for r in rows_out:
    keys += [k for k in r if k not in keys]
with open(os.path.join(out, "python-gpu.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=keys)
    w.writeheader()
    w.writerows(rows_out)
