#!/usr/bin/env bash
# Nsight Compute on the fitting kernels of a late generation: Friedman-1 over 100,000 cases,
# population 1000, seed SEED (3), the defaults, interpreter route, with the GPU worker under `ncu`,
# profiling COUNT (4) launches of each width in WIDTHS ("32 64") after SKIP (120) launches of it;
# one report and its text per width in $r.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh" > /dev/null
dir=$(friedman1_dir 100000)
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[[ -n $ncu ]] || { echo "no ncu here"; exit 1; }
export CUDA_CACHE_DISABLE=1
for w in ${WIDTHS:-32 64}; do
  timeout 400 "$ncu" --target-processes all --kernel-name "regex:gpfarm_fit_${w}\$" \
    --launch-skip "${SKIP:-120}" --launch-count "${COUNT:-4}" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
    -o "$r/ncu_$w" -f "$bin" evolve --problem-dir "$dir" --population 1000 --generations 10 \
    --seed "${SEED:-3}" --route interpreter --json > "$r/ncu_$w.jsonl" 2> "$r/ncu_$w.err"
  echo "width $w: rc $?"
  "$ncu" --import "$r/ncu_$w.ncu-rep" --print-summary none > "$r/ncu_$w.txt" 2>&1
  grep -E "gpfarm_fit|Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers Per|Local|Stall|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc" "$r/ncu_$w.txt" | head -80
done
