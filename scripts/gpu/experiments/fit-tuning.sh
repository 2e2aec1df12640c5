#!/usr/bin/env bash
# Trial settings of the fitting kernels (GPFARM_FIT_* in the environment), each run in turn
# ROUNDS times on the same host: Friedman-1 over CASES (100000) cases, population 1000, GENS (2)
# generations, seed 1, the interpreter route, fitted on the GPU. Per run: the best, each
# generation's time and its GPU fitting time. SEED (1) picks the seed. Env: CONFIGS (space-separated; each a comma-separated
# list of VAR=VALUE for the carried build, "new" for it as it is, or "base" for the build in
# .carry/base), ROUNDS (2). Logs: $r/tune_CONFIG_sSEED_ROUND.jsonl.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh" > /dev/null
dir=$(mktemp -d); cp examples/friedman1/{problem.toml,grammar.bnf,template.cu} "$dir/"
python3 examples/friedman1/make_cases.py "${CASES:-100000}" "$dir" 1
export CUDA_CACHE_DISABLE=1
if [[ -x .carry/base/gpfarm ]]; then mkdir -p "$built/base" && cp .carry/base/* "$built/base/"; fi
for round in $(seq "${ROUNDS:-2}"); do
  for config in ${CONFIGS:-base}; do
    vars=() b=$built
    [[ $config != base && $config != new ]] && IFS=, read -ra vars <<< "$config"
    [[ $config == base ]] && b=$built/base
    log="$r/tune_${config//[,=]/_}_s${SEED:-1}_$round"
    env "${vars[@]}" GPFARMD=$b/gpfarmd GPFARM_GPU_WORKER=$b/gpfarm-gpu-worker timeout 300 "$b/gpfarm" evolve --problem-dir "$dir" --population 1000 \
      --generations "${GENS:-2}" --seed "${SEED:-1}" --route interpreter --json > "$log.jsonl" 2> "$log.err"
    python3 - "$log.jsonl" "$config" <<'PY'
import json, sys
gens = [json.loads(l) for l in open(sys.argv[1]) if '"generation"' in l]
print(sys.argv[2], "best", gens[-1]["best"] if gens else None,
      "gen ms", [round(g["generation_ms"], 1) for g in gens],
      "fit worker ms", [round(g["fit_worker_ms"], 1) for g in gens])
PY
  done
done
