#!/usr/bin/env bash
# Fitting on the CPU, two builds alternately on this machine: `gpfarm evolve` on Friedman-1
# (1,000 cases), population 200, 10 generations, seed 1, with fitting off, 10 iterations, and
# 10 iterations on 100 cases; ROUNDS rounds (default 3). One JSON log per run and log.txt in OUT.
# Usage: scripts/cpu/fit-ab.sh BASE_GPFARM NEW_GPFARM OUT
set -euo pipefail
base=$1 new=$2 out=$3
mkdir -p "$out"
: > "$out/log.txt"
for round in $(seq 1 "${ROUNDS:-3}"); do
  for build in base new; do
    if [[ $build == base ]]; then b=$base; else b=$new; fi
    for mode in "0" "10" "10 --fit-cases 100"; do
      tag="${build}_it${mode// --fit-cases /_cases}_$round"
      # shellcheck disable=SC2086
      "$b" evolve --problem-dir examples/friedman1 --route cpu --population 200 --generations 10 \
        --seed 1 --fit-iterations $mode --json > "$out/$tag.jsonl"
      tail -1 "$out/$tag.jsonl" | python3 -c 'import json,sys; s=json.load(sys.stdin); print("'"$build round $round iters $mode"'", s["best_fitness"], "ms/gen", round(s["mean_generation_ms"], 1), "fit_s", round(s["totals"].get("fit_s", 0), 2))' | tee -a "$out/log.txt"
    done
  done
done
