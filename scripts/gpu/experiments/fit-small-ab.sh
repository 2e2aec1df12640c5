#!/usr/bin/env bash
# The carried build against .carry/base (gpfarm, gpfarmd, gpfarm-gpu-worker of another build), same
# host, alternately: Friedman-1 over CASES (100000) cases, population 1000, GENS (10) generations,
# seed 1, fitted on the GPU by the interpreter route; one JSON log per run, and per run the best,
# generation 0's time and the mean generation.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh" > /dev/null
mkdir -p "$built/base" && cp .carry/base/* "$built/base/"
dir=$(mktemp -d); cp examples/friedman1/{problem.toml,grammar.bnf,template.cu} "$dir/"
python3 examples/friedman1/make_cases.py "${CASES:-100000}" "$dir" 1
export CUDA_CACHE_DISABLE=1; n=0
for build in base new base new; do
  if [[ $build == base ]]; then b=$built/base; else b=$built; fi
  n=$((n + 1))
  GPFARMD=$b/gpfarmd GPFARM_GPU_WORKER=$b/gpfarm-gpu-worker timeout 300 "$b/gpfarm" evolve --problem-dir "$dir" \
    --population 1000 --generations "${GENS:-10}" --seed 1 --route interpreter --json \
    > "$r/ab_${build}_$n.jsonl" 2> "$r/ab_${build}_$n.err"
  python3 - "$r/ab_${build}_$n.jsonl" "$build" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
gens = [l for l in lines if "generation" in l]
s = lines[-1]
print(sys.argv[2], "best", s["best_fitness"], "gen0 ms", round(gens[0]["generation_ms"], 1),
      "gen0 fit ms", round(gens[0]["fit_ms"], 1), "ms/gen", round(s["mean_generation_ms"], 1))
PY
done
