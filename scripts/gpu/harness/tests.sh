#!/usr/bin/env bash
# The end-to-end tests that need the GPU host (GPU, faults, farm, evolve), from the carried test
# executables, one log each under $r, with the tests ignored for needing a GPU included; prints each
# result line and the figures the tests print. TESTS="a b" runs only those.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
echo "== tests"
for name in ${TESTS:-gpu interpreter gpu_fault gpu_worker faults farm evolve crash fit improve}; do
  timeout 300 "$carry/tests/$name" --include-ignored --test-threads=1 --nocapture > "$r/test_$name.log" 2>&1
  echo "$name: rc=$? $(grep -E '^test result' "$r/test_$name.log")"
done
grep -hE "running on|worker_fault:|distinct individuals|free device memory|^(crash|hang|killed|chaos|daemon freed)" "$r"/test_*.log | cut -c1-300
