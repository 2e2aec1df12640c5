#!/usr/bin/env bash
# Nsight Compute on the interpreter's kernel: one timed launch of 10^5 cases at three program
# sizes (depth 6, 10, 14), the full section set, as text. Expects .carry/ from
# scripts/gpu/harness/pack.sh; writes $OUT/profile.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/nsight-compute*/ncu 2>/dev/null | head -1)
echo "ncu: ${ncu:-none}"
for d in ${DEPTHS:-6 14}; do
  for k in ${KERNELS:-gpfarm_interpret_small}; do
    timeout 240 "$ncu" --target-processes all -k "regex:$k" --launch-skip 1 --launch-count 1 --set full \
      -o "$r/prof_${k}_d$d" "$bin" bench --break-even --no-builtins --cases "${CASES:-100000}" --depths "$d" \
      --repeats 1 --out "$r/b$d" > "$r/ncu_${k}_d$d.log" 2>&1
    echo "ncu d$d $k rc=$?"; grep -E "ERR|error|==PROF==|==WARNING==" "$r/ncu_${k}_d$d.log" | head -5
    "$ncu" --import "$r/prof_${k}_d$d.ncu-rep" --page details > "$r/prof_${k}_d$d.txt" 2>&1
    grep -E "Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Executed Ipc A|Issue Slots Busy|Local|One or More Eligible|Warp Cycles Per Issued|Block Limit" "$r/prof_${k}_d$d.txt" | head -40
    "$ncu" --import "$r/prof_${k}_d$d.ncu-rep" --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) > 2:
    for name, unit, value in zip(rows[0], rows[1], rows[2]):
        if name.startswith("smsp__average_warp") or name.startswith("smsp__pcsamp_warps_issue_stalled") and not name.endswith("not_issued"):
            print(name, value, unit)' | sort -k2 -g -r | head -25
  done
done
tar czf "$out/profile.tgz" -C "$r" . && rm -rf "$r"
