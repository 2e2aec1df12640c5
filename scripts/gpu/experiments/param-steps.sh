#!/usr/bin/env bash
# Parameter optimisation's workload on the GPU host (`gpfarm bench --param-steps`): expressions with
# free parameters, each structure prepared once, evaluated with new values at every step, by every
# route and the CPU, with the compute cache off. Env: EXPRESSIONS, POINTS, STEPS (as the flags;
# defaults the bench's), COMPILED_MAX (10000), TIMEOUT (540 s).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
args=(bench --param-steps --out "$r/param-steps" --compiled-max "${COMPILED_MAX:-10000}")
[[ -n "${EXPRESSIONS:-}" ]] && args+=(--expressions "$EXPRESSIONS")
[[ -n "${POINTS:-}" ]] && args+=(--points "$POINTS")
[[ -n "${STEPS:-}" ]] && args+=(--steps "$STEPS")
timeout "${TIMEOUT:-540}" "$bin" "${args[@]}" > "$r/param-steps.log" 2>&1
echo "param-steps: rc=$?"
tail -40 "$r/param-steps.log"
