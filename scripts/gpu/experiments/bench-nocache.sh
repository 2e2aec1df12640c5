#!/usr/bin/env bash
# The benchmark's population-300 rows again, with the CUDA driver's compute cache off (gpfarm's
# default since it was found to serve repeated units): every method compiles the same bytes, so
# with the cache on, every NVRTC method after the first was measuring the cache.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
b() { local name=$1 limit=$2; shift 2; timeout "$limit" "$bin" bench --out "$r/$name" "$@" > "$r/$name.md" 2> "$r/$name.err"; echo "bench $name rc=$? $(tail -n 1 "$r/$name.err")"; }
b exact 330 --sizes 300 --runs 2 --generations 2 --methods nvcc,inprocess,threads:16,farm:1,farm:8,farm:16,farm-jit:16
b fast 90 --sizes 300 --runs 2 --generations 2 --methods inprocess,farm:16 --flag=--use_fast_math
b ofast 90 --sizes 300 --runs 2 --generations 2 --methods inprocess,farm:16 --flag=--Ofast-compile=max --flag=-default-device
ls ~/.nv/ComputeCache 2>&1 | head -1
tar czf "$out/results.tgz" -C "$out" r
for f in exact fast ofast; do grep -A 20 "### .*population 300" "$r/$f.md" | grep -E "^\| (inprocess|nvcc|threads:16|farm:1|farm:8|farm:16|farm-jit:16) " | sed "s/^/$f /"; done
