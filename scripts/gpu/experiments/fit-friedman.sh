#!/usr/bin/env bash
# Friedman-1 with fitted free parameters on the GPU host: the fitting tests, then runs of
# population POP for GENS generations on CASES cases (make_cases.py), fitted on the GPU by the
# interpreter route's fitting kernel, unfitted, and fitted on the CPU; one JSON log per run.
# Env: CASES (100000), POP (1000), GENS (10), SEEDS ("1 2"), EXTRA (more evolve flags), TAG (in
# the log names), MODES ("gpu-fit unfitted"; also ptx-fit and nvrtc-fit: fitted on the GPU, evaluated
# by compiled code that takes the values as an argument; fit-interpreter and fit-compiled: fitted by
# the interpreter's fitting kernels only, or by kernels compiled for each structure;
# ptx-fit-compiled: the PTX route, fitted by its own PTX linked with the fitting template), STAGES
# ("tests runs").
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
CASES=${CASES:-100000} POP=${POP:-1000} GENS=${GENS:-10} SEEDS=${SEEDS:-"1 2"} EXTRA=${EXTRA:-}
dir=$(mktemp -d)
cp examples/friedman1/{problem.toml,grammar.bnf,template.cu} "$dir/"
python3 examples/friedman1/make_cases.py "$CASES" "$dir" 1
export CUDA_CACHE_DISABLE=1
if [[ " ${STAGES:-tests runs} " == *" tests "* ]]; then
  TESTS=fit bash "$(dirname "${BASH_SOURCE[0]}")/../harness/tests.sh"
fi
if [[ " ${STAGES:-tests runs} " == *" runs "* ]]; then
  for seed in $SEEDS; do
    for mode in ${MODES:-gpu-fit unfitted}; do
      case $mode in
        gpu-fit) flags="--route interpreter" ;;
        fit-interpreter) flags="--route interpreter --fit-kernels interpreter" ;;
        fit-compiled) flags="--route interpreter --fit-kernels compiled" ;;
        unfitted) flags="--route interpreter --fit-iterations 0" ;;
        ptx-fit) flags="--route ptx" ;;
        ptx-fit-compiled) flags="--route ptx --fit-kernels compiled" ;;
        nvrtc-fit) flags="--route nvrtc" ;;
      esac
      # shellcheck disable=SC2086
      timeout ${RUN_TIMEOUT:-300} "$bin" evolve --problem-dir "$dir" --population "$POP" --generations "$GENS" \
        --seed "$seed" --json $flags $EXTRA > "$r/run_${mode}${TAG:-}_s$seed.jsonl" 2> "$r/run_${mode}${TAG:-}_s$seed.err"
      echo "$mode${TAG:-} seed $seed: rc=$? $(tail -1 "$r/run_${mode}${TAG:-}_s$seed.jsonl" | python3 -c 'import json,sys; s=json.load(sys.stdin); print("best", s["best_fitness"], "ms/gen", round(s["mean_generation_ms"],1), "fit_s", round(s["totals"].get("fit_s",0),2))' 2>/dev/null)"
    done
  done
fi
