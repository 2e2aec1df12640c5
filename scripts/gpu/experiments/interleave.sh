#!/usr/bin/env bash
# The interpreter's throughput against its cases per thread (1, 2, 4, 8 at once for programs
# without jumps) on regressions of 10^5 to 10^7 cases at three program sizes, every route on the
# same populations; with the GPU tests of the interpreter and the fitness kernel first.
# Expects .carry/ from scripts/gpu/harness/pack.sh; writes $OUT/interleave.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
for name in interpreter gpu; do
  timeout 300 "$carry/tests/$name" --include-ignored --test-threads=1 --nocapture > "$r/test_$name.log" 2>&1
  echo "$name: rc=$? $(grep -E '^test result' "$r/test_$name.log")"
  grep -E "^test |individuals,|ms per generation|panicked|differ" "$r/test_$name.log" | cut -c1-300
done
timeout 420 "$bin" bench --break-even --out "$r/interleave" --cases "${CASES:-100000,1000000,10000000}" \
  --depths "${DEPTHS:-6,10,14}" --tunings "${TUNINGS:-4,1,2,8}" --repeats 5 2> "$r/interleave.log"
echo "bench rc=$?"
grep -E "interpreter|differ|error|Error" "$r/interleave.log" | cut -c1-200
tar czf "$out/interleave.tgz" -C "$r" . && rm -rf "$r"
