#!/usr/bin/env bash
# The fitting loop on the GPU (step kernel) against the host's loop between launches: the GPU
# tests of the carried build, then Friedman-1 over 100,000 cases, population 1000, GENS
# generations, seeds SEEDS (default 1), interpreter route, by the build in .carry/base and the
# carried build, alternately, ROUNDS times each; one JSON log per run in $r and, per run, its generation times,
# the GPU worker's fitting times and the best. Then one run of the carried build with
# GPFARM_FIT_PROFILE=1 (each launch waited for and timed) for GENS_PROFILE generations.
# Env: GENS (10), ROUNDS (2), SEEDS (1), TAG (in the log names), TESTS ("fit gpu_worker gpu_fault"; empty: none), EXTRA (more evolve flags),
# GENS_PROFILE (1; 0: no profiled run).
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
tests=${TESTS-"fit gpu_worker gpu_fault"}
[[ -z $tests ]] || TESTS=$tests bash "$here/../harness/tests.sh"
source "$here/../harness/env.sh" > /dev/null
mkdir -p "$built/base" && cp .carry/base/* "$built/base/"
dir=$(friedman1_dir 100000)
export CUDA_CACHE_DISABLE=1
show() { python3 scripts/gpu/harness/generations.py "$@"; }
n=0
for _ in $(seq "${ROUNDS:-2}"); do
  for seed in ${SEEDS:-1}; do
  for build in base new; do
    if [[ $build == base ]]; then b=$built/base; else b=$built; fi
    n=$((n + 1)); log="$r/ab${TAG:-}_${build}_s${seed}_$n"
    # shellcheck disable=SC2086
    GPFARMD=$b/gpfarmd GPFARM_GPU_WORKER=$b/gpfarm-gpu-worker timeout 300 "$b/gpfarm" evolve --problem-dir "$dir" \
      --population 1000 --generations "${GENS:-10}" --seed "$seed" --route interpreter --json ${EXTRA:-} > "$log.jsonl" 2> "$log.err"
    show "$log.jsonl" "$build seed $seed run $n (rc $?)"
  done
  done
done
[[ ${GENS_PROFILE:-1} == 0 ]] && exit 0
log="$r/profile_new"
GPFARM_FIT_PROFILE=1 timeout 300 "$bin" evolve --problem-dir "$dir" --population 1000 \
  --generations "${GENS_PROFILE:-1}" --seed 1 --route interpreter --json > "$log.jsonl" 2> "$log.err"
show "$log.jsonl" "profiled new build"
grep "iterations on the GPU" "$log.err"
