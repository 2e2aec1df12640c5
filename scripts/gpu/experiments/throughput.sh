#!/usr/bin/env bash
# GPU tree-GP's throughput workload on the GPU host (`gpfarm bench --throughput`): random full
# trees over + - * pdivf, Pagie-1 cases, every route, compute cache off. Env: NODES, SIZES, CASES,
# ROUTES, MAX_WORK, COMPILED_MAX, REPEATS (as the flags; defaults the bench's), NAME (throughput),
# TIMEOUT (540 s).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
name=${NAME:-throughput}
args=(bench --throughput --out "$r/$name")
[[ -n "${NODES:-}" ]] && args+=(--nodes "$NODES")
[[ -n "${SIZES:-}" ]] && args+=(--sizes "$SIZES")
[[ -n "${CASES:-}" ]] && args+=(--cases "$CASES")
[[ -n "${ROUTES:-}" ]] && args+=(--routes "$ROUTES")
[[ -n "${MAX_WORK:-}" ]] && args+=(--max-work "$MAX_WORK")
[[ -n "${COMPILED_MAX:-}" ]] && args+=(--compiled-max "$COMPILED_MAX")
[[ -n "${REPEATS:-}" ]] && args+=(--repeats "$REPEATS")
timeout "${TIMEOUT:-540}" "$bin" "${args[@]}" > "$r/$name.log" 2>&1
echo "$name: rc=$?"
tail -30 "$r/$name.log"
