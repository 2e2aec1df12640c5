#!/usr/bin/env bash
# Nsight Compute on the fitting kernels: one Friedman-1 generation of population POP over CASES
# cases, the first LAUNCHES fitting launches profiled (launch statistics, occupancy, throughput,
# warp stalls). Env: CASES (100000), POP (1000), LAUNCHES (4).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
CASES=${CASES:-100000} POP=${POP:-1000}
dir=$(mktemp -d)
cp examples/friedman1/{problem.toml,grammar.bnf,template.cu} "$dir/"
python3 examples/friedman1/make_cases.py "$CASES" "$dir" 1
export CUDA_CACHE_DISABLE=1
timeout ${RUN_TIMEOUT:-400} /usr/local/cuda/bin/ncu --target-processes all -k regex:gpfarm_fit_[0-9] \
  --launch-count "${LAUNCHES:-4}" --section LaunchStats --section Occupancy --section SpeedOfLight \
  --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters \
  "$bin" evolve --problem-dir "$dir" --population "$POP" --generations 0 --seed 1 --route interpreter \
  --deadline 600 --gpu-deadline 600 > "$r/ncu.txt" 2> "$r/ncu.err"
echo "ncu rc=$?"
grep -E "gpfarm_fit|Registers Per|Achieved Occupancy|Theoretical Occupancy|Duration|Compute \(SM\) Throughput|Memory Throughput|Local Memory|Stall|Block Limit|Waves Per SM|L1/TEX Hit" "$r/ncu.txt" | head -120
tail -5 "$r/ncu.err"
