#!/usr/bin/env bash
# How far caching and overlap can shorten a keijzer6 generation, and whether tune_allocator pays:
# (1) allocator-probe.py against the host's NVRTC; (2) where NVRTC's time goes in units of 8
# random expression kernels (-fdevice-time-trace); (3) keijzer6 in modes plain, cache and both,
# REPEATS times interleaved (generation.sh). Expects .carry/ from scripts/gpu/harness/pack.sh.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh"
python3 "$here/allocator-probe.py" /usr/local/cuda/lib64/libnvrtc.so "${ALLOC_UNITS:-6}" 2>&1 | tee "$r/allocator.txt"
CUDA_CACHE_DISABLE=1 "$bin" compile --compiler inprocess --random 32 --per-unit 8 --json \
  --flag=-fdevice-time-trace="$r/trace.json" > "$r/trace-compile.json" 2> "$r/trace-compile.err"
echo "trace rc=$?"
REPEATS=${REPEATS:-2} PROBLEMS=keijzer6 MODES="plain cache both" bash "$here/generation.sh"
tar czf "$out/bound.tgz" -C "$r" allocator.txt trace.json.json trace-compile.json trace-compile.err machine.txt 2>/dev/null
