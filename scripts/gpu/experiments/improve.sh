#!/usr/bin/env bash
# `gpfarm improve` on the example kernels on the GPU host, one results folder each under
# $r/improve/. Env: EXAMPLES (all five), TIME_LIMIT (seconds of search per kernel, 90),
# POPULATION (64), GENERATIONS (1000: the time limit ends the search), SEED (1).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
mkdir -p "$r/improve"
for k in ${EXAMPLES:-matmul stencil bfs nn reduction}; do
  timeout 400 "$bin" improve "examples/kernels/$k" --out "$r/improve/$k" \
    --time-limit "${TIME_LIMIT:-90}" --population "${POPULATION:-64}" \
    --generations "${GENERATIONS:-1000}" --seed "${SEED:-1}" > "$r/improve/$k.log" 2>&1
  echo "$k: rc=$?"
  grep -E "^gen +0:" "$r/improve/$k.log" | head -1
  tail -8 "$r/improve/$k.log"
done
