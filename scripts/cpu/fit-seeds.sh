#!/usr/bin/env bash
# The cost of fitting on the CPU over several seeds: `gpfarm evolve` on Friedman-1 (1,000
# cases), population POP (default 200), 10 generations, with and without fitting (10 iterations), seeds 1 to
# SEEDS (default 5), for each build given, REPEATS times each (default 1; seeds.csv then holds the
# median of the repeats' ms per generation: a run of 2-7 ms generations varies by half from one
# repeat to the next); one JSON log per run and seeds.csv in OUT.
# Usage: scripts/cpu/fit-seeds.sh OUT NAME=GPFARM [NAME=GPFARM ...]
set -euo pipefail
out=$1; shift
mkdir -p "$out"
echo "build,seed,iterations,ms_per_generation,fit_s,best" > "$out/seeds.csv"
for seed in $(seq 1 "${SEEDS:-5}"); do
  for spec in "$@"; do
    name=${spec%%=*} b=${spec#*=}
    for it in 0 10; do
      for rep in $(seq 1 "${REPEATS:-1}"); do
        f="$out/${name}_it${it}_s${seed}_r$rep.jsonl"
        "$b" evolve --problem-dir examples/friedman1 --route cpu --population "${POP:-200}" --generations 10 \
          --seed "$seed" --fit-iterations "$it" --json > "$f"
      done
      python3 - "$out" "$name" "$seed" "$it" >> "$out/seeds.csv" <<'PY'
import glob, json, statistics, sys
out, name, seed, it = sys.argv[1:]
runs = [json.loads(open(f).read().splitlines()[-1]) for f in sorted(glob.glob(f"{out}/{name}_it{it}_s{seed}_r*.jsonl"))]
ms = statistics.median(s["mean_generation_ms"] for s in runs)
fit = statistics.median(s["totals"].get("fit_s", 0) for s in runs)
print(f"{name},{seed},{it},{ms:.2f},{fit:.3f},{runs[0]['best_fitness']!r}")
PY
    done
  done
done
python3 - "$out/seeds.csv" <<'PY'
import csv, sys, statistics
rows = list(csv.DictReader(open(sys.argv[1])))
for name in dict.fromkeys(r["build"] for r in rows):
    ratios, fitted, plain, best = [], [], [], []
    for seed in dict.fromkeys(r["seed"] for r in rows):
        by = {r["iterations"]: r for r in rows if r["build"] == name and r["seed"] == seed}
        f, p = float(by["10"]["ms_per_generation"]), float(by["0"]["ms_per_generation"])
        ratios.append(f / p); fitted.append(f); plain.append(p); best.append(float(by["10"]["best"]))
    print(f"{name}: fitted {min(fitted):.1f}-{max(fitted):.1f} ms/gen, unfitted {min(plain):.1f}-{max(plain):.1f}, "
          f"ratio {min(ratios):.1f}-{max(ratios):.1f} (median {statistics.median(ratios):.1f}), "
          f"best fitted RMSE median {statistics.median(best):.3f}")
PY
