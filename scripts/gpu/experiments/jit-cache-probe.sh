#!/usr/bin/env bash
# Does a repeated compile hit a cache outside gpfarm (the CUDA driver's compute cache)? Compiles
# new and repeated random populations in process, with and without CUDA_CACHE_DISABLE=1, and
# lists what a compile writes. (gpfarm now switches that cache off unless CUDA_CACHE_DISABLE is set,
# so this script sets it either way.)
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh"
probe() { env CUDA_CACHE_DISABLE=0 "$@" "$bin" compile --compiler inprocess --random 96 --per-unit 8 --seed "$seed" 2>&1 | grep -E "wall" | tr -s ' '; }
echo "HOME=$HOME; ~/.nv: $(ls -la ~/.nv 2>&1 | tr '\n' ' ')"
du -sh ~/.nv/ComputeCache 2>&1
touch /tmp/mark; sleep 1
seed=11; echo "seed 11, first:  $(probe)"
echo "files written by it: $(find / -xdev -newer /tmp/mark -type f 2>/dev/null | grep -vE '^/(proc|sys|tmp/mark)' | head -8 | tr '\n' ' ')"
du -sh ~/.nv/ComputeCache 2>&1
echo "seed 11, again:  $(probe)"
seed=12; echo "seed 12, CUDA_CACHE_DISABLE=1, first: $(probe CUDA_CACHE_DISABLE=1)"
echo "seed 12, CUDA_CACHE_DISABLE=1, again: $(probe CUDA_CACHE_DISABLE=1)"
echo "seed 12, cache on, third: $(probe)"
echo "seed 12, cache on, fourth: $(probe)"
for run in off1 off2 on1 on2; do
  envs=CUDA_CACHE_DISABLE=0; [[ $run == off* ]] && envs=CUDA_CACHE_DISABLE=1
  env $envs timeout -s INT 120 "$bin" evolve --problem keijzer6 --population 300 --generations 50 --eval gpu --seed 3 --json \
    --no-cache --daemons 16 > "$r/ev_$run.jsonl" 2> "$r/ev_$run.err"
  echo "evolve seed 3 plain $envs ($run): $(python3 "$here/../harness/summary.py" "$r/ev_$run.jsonl")"
done
du -sh ~/.nv/ComputeCache 2>&1
tar czf "$out/jit.tgz" -C "$r" .
