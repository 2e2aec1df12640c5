#!/usr/bin/env bash
# Does --Ofast-compile=max -default-device change any fitness value? Runs each problem for 50
# generations (population 300, 16 daemons, GPU evaluation, seed 1) with those options; compare the
# trajectories with the default runs of results/2026-11-22-h100/driver-cache/runs/.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
for p in ${PROBLEMS:-keijzer6 search multiplier5}; do
  f="$r/evolve_${p}_ofast"
  timeout 150 "$bin" evolve --problem "$p" --population 300 --generations 50 --daemons 16 --eval gpu --seed 1 --json \
    --flag=--Ofast-compile=max --flag=-default-device > "$f.jsonl" 2> "$f.err"
  echo "$p ofast rc=$? $(python3 "$(dirname "${BASH_SOURCE[0]}")/../harness/summary.py" "$f.jsonl")"
done
