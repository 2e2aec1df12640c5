#!/usr/bin/env bash
# Parameter optimisation's workload on the GPU host (`gpfarm bench --param-steps`): expressions with
# free parameters, each structure prepared once, evaluated with new values at every step, by every
# route and the CPU, with the compute cache off. Env: EXPRESSIONS, POINTS, STEPS (as the flags;
# defaults the bench's), LINKS (--link-flag-sets, e.g. '-O0;-O3'), COMPILED_MAX (10000), TIMEOUT
# (540 s); FIT=1: fitting's steps (--fit),
# the interpreter's fitting kernels against compiled ones, into fit-steps/.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
name=param-steps
[[ -n "${FIT:-}" ]] && name=fit-steps
args=(bench --param-steps --out "$r/$name" --compiled-max "${COMPILED_MAX:-10000}")
[[ -n "${FIT:-}" ]] && args+=(--fit)
[[ -n "${EXPRESSIONS:-}" ]] && args+=(--expressions "$EXPRESSIONS")
[[ -n "${POINTS:-}" ]] && args+=(--points "$POINTS")
[[ -n "${STEPS:-}" ]] && args+=(--steps "$STEPS")
[[ -n "${LINKS:-}" ]] && args+=(--link-flag-sets="$LINKS")
timeout "${TIMEOUT:-540}" "$bin" "${args[@]}" > "$r/$name.log" 2>&1
echo "$name: rc=$?"
tail -40 "$r/$name.log"
