#!/usr/bin/env bash
# The fitting kernels of the carried build against those of .carry/base, same host, alternately:
# the profile of fit-profile.sh, then Friedman-1 over 100,000 cases, population 1000, 11
# generations, tournament 7, seed 1, twice each.
set -uo pipefail
CASES_LIST=100000 GENS=2 bash scripts/gpu/experiments/fit-profile.sh > /dev/null 2>&1
source scripts/gpu/harness/env.sh >/dev/null
mkdir -p "$built/base" && cp .carry/base/* "$built/base/"
dir=$(mktemp -d); cp examples/friedman1/{problem.toml,grammar.bnf,template.cu} "$dir/"; python3 examples/friedman1/make_cases.py 100000 "$dir" 1
export CUDA_CACHE_DISABLE=1; n=0
for build in base new base new; do
  if [[ $build == base ]]; then b=$built/base; else b=$built; fi
  n=$((n + 1))
  GPFARMD=$b/gpfarmd GPFARM_GPU_WORKER=$b/gpfarm-gpu-worker timeout 300 "$b/gpfarm" evolve --problem-dir "$dir" --population 1000 --generations 10 --seed 1 --route interpreter --tournament 7 --json > "$r/ab_${build}_$n.jsonl" 2> "$r/ab_${build}_$n.err"
  tail -1 "$r/ab_${build}_$n.jsonl" | python3 -c 'import json,sys; s=json.load(sys.stdin); print("'$build'", "best", s["best_fitness"], "ms/gen", round(s["mean_generation_ms"],1), "fit_s", round(s["totals"].get("fit_s",0),2))'
done
