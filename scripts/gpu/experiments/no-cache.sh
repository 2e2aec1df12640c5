#!/usr/bin/env bash
# NVRTC's time with the driver present and its cache off: no-cache-probe.py in process, then
# 300 random individuals (10 per unit) on 16 daemons with and without NVRTC's -no-cache option.
# Expects .carry/ from scripts/gpu/harness/pack.sh, with .carry/fakecuda/libcuda.so.1 (an empty
# library).
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh"
python3 "$here/no-cache-probe.py" /usr/local/cuda/lib64/libnvrtc.so "${UNITS:-8}" "$PWD/.carry/fakecuda" 2>&1 | tee "$r/no-cache-probe.txt"
for rep in 1 2; do
  for f in "" "--flag=-no-cache"; do
    echo "farm:16 ${f:-default} #$rep: $("$bin" compile -n 16 --random 300 --per-unit 10 --seed $rep $f 2>&1 | grep -E 'wall')" | tee -a "$r/farm.txt"
  done
done
