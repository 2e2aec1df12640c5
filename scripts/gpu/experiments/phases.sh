#!/usr/bin/env bash
# Where a generation's time goes outside the GPU's kernels: Friedman-1 over 100,000 cases,
# population 1000, generations 0-GENS, interpreter route, the defaults, for each seed of SEEDS,
# RUNS times plainly and with GPFARM_FIT_PROFILE=1 (whose stderr has the driver's phases, the
# pipe's and the worker's times; it waits for every fitting launch). Logs in $r (or $1).
# Env: SEEDS ("3"), RUNS (1), GENS (10), BIN (the gpfarm to run; default the carried one).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh" > /dev/null
out=${1:-$r}; mkdir -p "$out"
bin=${BIN:-$bin}
dir=$(friedman1_dir 100000)
export CUDA_CACHE_DISABLE=1
for seed in ${SEEDS:-3}; do
  for k in $(seq 1 "${RUNS:-1}"); do
    for prof in 0 1; do
      log="$out/s${seed}_prof${prof}_r$k"
      GPFARM_FIT_PROFILE=$prof timeout 300 "$bin" evolve --problem-dir "$dir" --population 1000 \
        --generations "${GENS:-10}" --seed "$seed" --route interpreter --json > "$log.jsonl" 2> "$log.err"
      python3 scripts/gpu/harness/generations.py "$log.jsonl" "seed $seed, profile $prof, run $k (rc $?)" generation_ms
    done
  done
done
