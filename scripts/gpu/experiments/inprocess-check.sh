#!/usr/bin/env bash
# Does in-process NVRTC slow down right after a long nvcc phase? Same samples each time.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
vm() { grep -E "^(compact_stall|compact_fail|thp_fault_alloc|pgmajfault) " /proc/vmstat | tr '\n' ' '; echo; }
common="--sizes 20,100,200,300 --runs 2 --generations 2"
b() { local name=$1; shift; vm; local t=$(date +%s.%N); timeout 200 "$bin" bench --out "$r/$name" "$@" > /dev/null 2> "$r/$name.err"; echo "$name rc=$? $(echo "$(date +%s.%N) - $t" | bc) s: $(grep -E 'done in' "$r/$name.err" | tr '\n' ' ')"; }
b before $common --methods inprocess,threads:1
b nvcc --sizes 100,300 --runs 1 --generations 1 --methods nvcc --nvcc-samples 1
b after $common --methods inprocess,threads:1
b after2 $common --methods threads:1,inprocess
vm
tar czf "$out/results.tgz" -C "$out" r
