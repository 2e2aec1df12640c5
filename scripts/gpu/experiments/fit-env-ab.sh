#!/usr/bin/env bash
# One build under several environments, alternately: Friedman-1 over 100,000 cases, population
# 1000, GENS generations, seed SEED, interpreter route, ROUNDS runs per setting, then one run per
# setting with GPFARM_FIT_PROFILE=1 (each launch waited for and timed) of generation 0.
# SETTINGS: space-separated NAME:VAR=VALUE,VAR=VALUE (NAME: alone for none), e.g.
# "default: nomma:GPFARM_FIT_MMA=0". Env: GENS (2), ROUNDS (2), SEED (1), EXTRA.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh" > /dev/null
dir=$(friedman1_dir 100000)
export CUDA_CACHE_DISABLE=1
show() { python3 scripts/gpu/harness/generations.py "$1" "$2" generation_ms fit_worker_ms; }
run() { # name vars profile log
  local name=$1 vars=$2 profile=$3 log=$4
  # shellcheck disable=SC2086
  env ${vars//,/ } GPFARM_FIT_PROFILE=$profile timeout 300 "$bin" evolve --problem-dir "$dir" --population 1000 \
    --generations "$5" --seed "${SEED:-1}" --route interpreter --json ${EXTRA:-} > "$log.jsonl" 2> "$log.err"
  show "$log.jsonl" "$name (rc $?)"
}
for n in $(seq "${ROUNDS:-2}"); do
  for s in ${SETTINGS:-default:}; do
    run "${s%%:*} run $n" "${s#*:}" 0 "$r/env_${s%%:*}_$n" "${GENS:-2}"
  done
done
for s in ${SETTINGS:-default:}; do
  run "${s%%:*} profiled" "${s#*:}" 1 "$r/env_${s%%:*}_profile" 0
  grep -E "width|iterations" "$r/env_${s%%:*}_profile.err" | head -12
done
