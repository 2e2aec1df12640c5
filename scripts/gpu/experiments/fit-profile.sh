#!/usr/bin/env bash
# Where a generation's GPU fitting goes: Friedman-1 runs of population POP for GENS generations
# on each of CASES_LIST, with GPFARM_FIT_PROFILE=1 (every width's launch waited for and timed,
# and each fit's time in launches against the host's Levenberg–Marquardt steps), by the carried
# build and, when .carry/base holds one, by that build too, alternately. Logs in $r.
# Env: CASES_LIST ("1000 100000"), POP (1000), GENS (2), SEED (1), EXTRA (more evolve flags),
# PROFILE (1; 0 runs without the profile, whose waits keep the widths from running side by side).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
CASES_LIST=${CASES_LIST:-"1000 100000"} POP=${POP:-1000} GENS=${GENS:-2} SEED=${SEED:-1} EXTRA=${EXTRA:-}
export CUDA_CACHE_DISABLE=1
builds="new"
if [[ -x .carry/base/gpfarm ]]; then
  builds="base new"
  mkdir -p "$built/base" && cp .carry/base/* "$built/base/"
fi
for cases in $CASES_LIST; do
  dir=$(mktemp -d)
  cp examples/friedman1/{problem.toml,grammar.bnf,template.cu} "$dir/"
  python3 examples/friedman1/make_cases.py "$cases" "$dir" 1
  for build in $builds; do
    if [[ $build == base ]]; then b=$built/base; else b=$built; fi
    log="$r/profile_${build}_${cases}_p${PROFILE:-1}${TAG:-}"
    # shellcheck disable=SC2086
    GPFARMD=$b/gpfarmd GPFARM_GPU_WORKER=$b/gpfarm-gpu-worker GPFARM_FIT_PROFILE=${PROFILE:-1} timeout ${RUN_TIMEOUT:-240} \
      "$b/gpfarm" evolve --problem-dir "$dir" --population "$POP" --generations "$GENS" --seed "$SEED" \
      --route interpreter --json $EXTRA > "$log.jsonl" 2> "$log.err"
    echo "== $build $cases cases: rc=$?"
    python3 - "$log.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    g = json.loads(line)
    if "generation" in g:
        print(f"gen {g['generation']}: best {g['best']:.6g} gen_ms {g['generation_ms']:.1f} fit_ms {g.get('fit_ms',0):.1f} "
              f"fit_gpu_ms {g.get('fit_gpu_ms',0):.1f} worker_ms {g.get('fit_worker_ms',0):.1f} on_gpu {g.get('fitted_on_gpu',0)}")
PY
    grep "programs, .* iterations" "$log.err" | head -5
  done
done
