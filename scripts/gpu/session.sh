#!/usr/bin/env bash
# Everything that needs the GPU host, in one call: the GPU tests, evolve runs on the GPU, and
# compile-speed experiments. Expects stripped binaries and test executables in .carry/ (see
# scripts/gpu/pack.sh) and writes results.tgz plus summary.txt to $OUT.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
{
  echo "host: $(nproc) cores, $(lscpu | sed -n 's/^Model name:\s*//p')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  /usr/local/cuda/bin/nvcc --version | tail -n 1
} > "$r/machine.txt"
cat "$r/machine.txt"

echo "== GPU tests"
for t in $carry/tests/*; do
  name=$(basename "$t")
  timeout 300 "$t" --test-threads=1 --nocapture > "$r/test_$name.log" 2>&1
  echo "$name: rc=$? $(grep -E '^test result' "$r/test_$name.log")"
done
grep -hE "running on|distinct individuals|free device memory|^(search|keijzer6|multiplier5): \{" $r/test_gpu.log | cut -c1-300

echo "== evolve keijzer6 300x50, 16 daemons, gpu"
timeout 400 $bin evolve --problem keijzer6 --population 300 --generations 50 --daemons 16 --eval gpu --seed 1 --json > "$r/evolve_k6_gpu.jsonl" 2> "$r/evolve_k6_gpu.err"; echo "rc=$?"
tail -n 1 "$r/evolve_k6_gpu.jsonl" | cut -c1-400
for p in search multiplier5; do
  for e in gpu cpu; do
    timeout 200 $bin evolve --problem $p --population 300 --generations 20 --daemons 16 --eval $e --seed 1 --json > "$r/evolve_${p}_$e.jsonl" 2> "$r/evolve_${p}_$e.err"
    echo "$p $e rc=$? $(tail -n 1 "$r/evolve_${p}_$e.jsonl" | cut -c1-200)"
  done
done

echo "== compile experiments (random 300)"
c() { local label=$1; shift; timeout 120 $bin compile --random 300 --seed 1 --json "$@" > "$r/c_$label.json" 2>"$r/c_$label.err" || echo "$label failed"; }
c fresh16 --daemons 16
MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=268435456 c malloc16 --daemons 16
$bin daemons start -n 16 --name warm --detach > "$r/warm_start.txt" 2>&1
for i in 1 2 3; do c warm16_$i --attach --farm warm; done
for k in 4 10 19; do c warm16_pu$k --attach --farm warm --per-unit $k; done
for k in 4 10 19; do c warm16_pu${k}_ofast --attach --farm warm --per-unit $k --flag=--Ofast-compile=max --flag=-default-device; done
$bin daemons stop warm > /dev/null
MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=268435456 $bin daemons start -n 16 --name warmm --detach > /dev/null 2>&1
for i in 1 2 3; do c warmm16_$i --attach --farm warmm; done
c warmm16_pu10 --attach --farm warmm --per-unit 10
$bin daemons stop warmm > /dev/null
c inproc --compiler inprocess
c threads16 --compiler threads --threads 16
MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=268435456 c threads16_malloc --compiler threads --threads 16
python3 - "$r" <<'PY' | tee "$r/compile_summary.txt"
import json, sys, glob, os
print(f"{'run':<24}{'ok':>5}{'indiv':>6}{'wall ms':>10}{'ms/ind':>9}{'nvrtc ms':>11}")
for f in sorted(glob.glob(os.path.join(sys.argv[1], 'c_*.json'))):
    try: d = json.load(open(f))
    except Exception as e: print(os.path.basename(f), 'unreadable'); continue
    print(f"{os.path.basename(f)[2:-5]:<24}{d['ok']:>5}{d['individuals']:>6}{d['wall_ms']:>10.1f}{d['ms_per_individual']:>9.3f}{d['stage_ms']['compile']:>11.1f}")
PY
tar czf "$out/results.tgz" -C "$out" r
