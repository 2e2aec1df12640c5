#!/usr/bin/env bash
# Issue-2 timings on the GPU host: `gpfarm compile` with every compiler on a seeded random
# population of 300, 16 workers. Writes JSON per run and a summary table to $OUT (or ./out).
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
bin=${BIN:-target/release}
export GPFARMD="$bin/gpfarmd"
{
  echo "host: $(nproc) cores, $(lscpu | sed -n 's/^Model name:\s*//p')"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  /usr/local/cuda/bin/nvcc --version | tail -n 2
} | tee "$out/machine.txt"
run() { # label, args...
  local label=$1; shift
  "$bin/gpfarm" compile --random 300 "$@" --json > "$out/$label.json" 2> "$out/$label.err" \
    || { echo "$label FAILED"; tail -n 5 "$out/$label.err"; }
}
for seed in 1 2 3; do run farm16_s$seed --compiler farm --daemons 16 --seed $seed; done
for seed in 1 2 3; do run threads16_s$seed --compiler threads --threads 16 --seed $seed; done
run farm8_s1 --compiler farm --daemons 8 --seed 1
run threads8_s1 --compiler threads --threads 8 --seed 1
run inprocess_s1 --compiler inprocess --seed 1
run farm16_jit_s1 --compiler farm --daemons 16 --seed 1 --mode ptx-jit
run farm16_fused_s1 --compiler farm --daemons 16 --seed 1 --per-unit 19
run farm16_ofast_s1 --compiler farm --daemons 16 --seed 1 --flag=--Ofast-compile=max --flag=-default-device
run nvcc_s1 --compiler nvcc --seed 1
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, sys, glob, os
print(f"{'run':<22}{'ok':>5}{'wall ms':>10}{'ms/ind':>9}{'compile ms':>12}{'jit ms':>9}{'busiest ms':>11}")
for f in sorted(glob.glob(os.path.join(sys.argv[1], '*.json'))):
    try: d = json.load(open(f))
    except Exception as e: print(os.path.basename(f), 'unreadable', e); continue
    s = d['stats']; busiest = max((w['busy_us'] for w in s['workers']), default=0) / 1000
    print(f"{os.path.basename(f)[:-5]:<22}{d['ok']:>5}{d['wall_ms']:>10.1f}{d['ms_per_individual']:>9.3f}"
          f"{d['stage_ms']['compile']:>12.1f}{d['stage_ms']['jit']:>9.1f}{busiest:>11.1f}")
PY
