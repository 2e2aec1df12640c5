#!/usr/bin/env bash
# The benchmark on the GPU host, in one call (see scripts/gpu/harness/pack.sh). Plots are redrawn
# on the development machine with `gpfarm bench --replot DIR` (the GPU host has no fonts).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
b() { local name=$1 limit=$2; shift 2; timeout "$limit" "$bin" bench --out "$r/$name" "$@" > "$r/$name.md" 2> "$r/$name.err"; echo "bench $name rc=$? $(tail -n 1 "$r/$name.err")"; }
b exact 400 --sizes 20,100,200,300 --runs 2 --generations 2 \
  --methods nvcc,inprocess,threads:1,threads:2,threads:4,threads:8,threads:16,farm:1,farm:2,farm:4,farm:8,farm:16,farm-jit:16
b fast 80 --sizes 100,300 --runs 2 --generations 2 --methods inprocess,farm:8,farm:16 --flag=--use_fast_math
b ofast 80 --sizes 100,300 --runs 2 --generations 2 --methods inprocess,farm:8,farm:16 --flag=--Ofast-compile=max --flag=-default-device
tar czf "$out/results.tgz" -C "$out" r
cat "$r/exact.err"
for f in exact fast ofast; do grep -A 20 "### .*population 300" "$r/$f.md" | grep -E "^\| (inprocess|nvcc|threads:16|farm:8|farm:16|farm-jit:16) " | sed "s/^/$f /"; done
