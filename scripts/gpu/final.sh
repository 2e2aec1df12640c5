#!/usr/bin/env bash
# The GPU tests on the final code, then keijzer6 runs with and without caching and overlap at 16
# and 8 daemons, interleaved, with the host's CPU accounting around each (see steal.sh).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
echo "== tests"
for name in gpu gpu_fault gpu_worker faults farm evolve; do
  timeout 300 "$carry/tests/$name" --test-threads=1 --nocapture > "$r/test_$name.log" 2>&1
  echo "$name: rc=$? $(grep -E '^test result' "$r/test_$name.log")"
done
grep -hE "distinct individuals|free device memory|worker_fault:|^(crash|hang|killed|chaos)" "$r"/test_*.log | cut -c1-250
echo "== runs"
bash "$(dirname "${BASH_SOURCE[0]}")/steal.sh" "$@"
