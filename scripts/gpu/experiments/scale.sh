#!/usr/bin/env bash
# Generations at scale on the GPU host (`gpfarm bench --scale`): keijzer6-style runs over 1,024
# cases at populations 10^3 to 10^6, stage by stage. Env: SIZES, GENERATIONS, CASES, EVAL (auto),
# THREADS, NAME (scale), TIMEOUT (540 s).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
name=${NAME:-scale}
args=(bench --scale --out "$r/$name" --eval "${EVAL:-auto}")
[[ -n "${SIZES:-}" ]] && args+=(--sizes "$SIZES")
[[ -n "${GENERATIONS:-}" ]] && args+=(--generations "$GENERATIONS")
[[ -n "${CASES:-}" ]] && args+=(--cases "$CASES")
[[ -n "${THREADS:-}" ]] && args+=(--threads "$THREADS")
timeout "${TIMEOUT:-540}" "$bin" "${args[@]}" > "$r/$name.log" 2>&1
echo "$name: rc=$?"
tail -20 "$r/$name.log"
