#!/usr/bin/env bash
# The benchmark and GPU tests on the GPU host, in one call (see scripts/gpu/pack.sh).
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out/r"; r="$out/r"
carry=.carry
built=$(cat $carry/target_dir)
mkdir -p "$built" && cp $carry/gpfarm $carry/gpfarmd "$built/"
export GPFARMD=$built/gpfarmd
bin=$built/gpfarm
for t in gpu gpu_fault farm random_populations; do
  timeout 240 $carry/tests/$t --test-threads=1 --nocapture > "$r/test_$t.log" 2>&1
  echo "$t: rc=$? $(grep -E '^test result' "$r/test_$t.log")"
done
grep -hE "distinct individuals|free device|beyond|SKIPPED" $r/test_*.log | cut -c1-250
b() { local name=$1 limit=$2; shift 2; timeout "$limit" $bin bench --out "$r/$name" "$@" > "$r/$name.md" 2> "$r/$name.err"; echo "bench $name rc=$? $(tail -n 1 "$r/$name.err")"; }
b exact 300 --sizes 20,100,200,300 --runs 3 --generations 2 \
  --methods nvcc,inprocess,threads:1,threads:2,threads:4,threads:8,threads:16,farm:1,farm:2,farm:4,farm:8,farm:16,farm-jit:16
b fast 90 --sizes 100,300 --runs 2 --generations 2 --methods inprocess,farm:8,farm:16 --flag=--use_fast_math
b ofast 90 --sizes 100,300 --runs 2 --generations 2 --methods inprocess,farm:8,farm:16 --flag=--Ofast-compile=max --flag=-default-device
timeout 150 $bin evolve --problem keijzer6 --population 300 --generations 50 --daemons 16 --eval gpu --seed 1 --json > "$r/evolve_k6.jsonl" 2> "$r/evolve_k6.err"; echo "evolve rc=$? $(tail -n 1 "$r/evolve_k6.jsonl" | cut -c1-300)"
tar czf "$out/results.tgz" -C "$out" r
for f in exact fast ofast; do grep -A 20 "### .*population 300" "$r/$f.md" | grep -E "^\| (inprocess|nvcc|farm:8|farm:16|threads:16|farm-jit:16) " | sed "s/^/$f /"; done
