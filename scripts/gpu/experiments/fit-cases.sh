#!/usr/bin/env bash
# Fitting on fewer cases than the fitness uses: Friedman-1 over 100,000 cases, population 1000,
# GENS generations, interpreter route, fitted on the GPU on each of FIT_CASES evenly spaced cases
# (0: all), for each seed of SEEDS, with FLAGS. One JSON log per run in $r; per run its generation
# times and best.
# Env: FIT_CASES ("0 16384"), SEEDS ("1 2"), GENS (10), FLAGS ("--tournament 7"), TAG (in the log
# names).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh" > /dev/null
dir=$(friedman1_dir 100000)
export CUDA_CACHE_DISABLE=1
for seed in ${SEEDS:-1 2}; do
  for fc in ${FIT_CASES:-0 16384}; do
    log="$r/cases${TAG:-}_${fc}_s$seed"
    # shellcheck disable=SC2086
    timeout 300 "$bin" evolve --problem-dir "$dir" --population 1000 --generations "${GENS:-10}" --seed "$seed" \
      --route interpreter --fit-cases "$fc" --json ${FLAGS---tournament 7} > "$log.jsonl" 2> "$log.err"
    python3 scripts/gpu/harness/generations.py "$log.jsonl" "fit cases $fc, seed $seed (rc $?)" generation_ms
  done
done
