#!/usr/bin/env bash
# The interpreter kernel's tunings against each other (cases per thread at once, blocks per
# multiprocessor, variable slots in registers) on regressions of 10^5 and 10^6 cases at three
# program sizes and the built-in problems, every route on the same populations; the interpreter's
# GPU tests first. Expects .carry/ from scripts/gpu/harness/pack.sh; writes $OUT/tunings.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
timeout 300 "$carry/tests/interpreter" --include-ignored --test-threads=1 --nocapture > "$r/test_interpreter.log" 2>&1
echo "interpreter: rc=$? $(grep -E '^test result' "$r/test_interpreter.log")"
grep -E "panicked|differ" "$r/test_interpreter.log" | cut -c1-300
timeout 480 "$bin" bench --break-even --out "$r/tunings" --cases "${CASES:-100000,1000000}" \
  --depths "${DEPTHS:-6,10,14}" --tunings "${TUNINGS:-4,4s0,2,1}" --repeats 5 2> "$r/tunings.log"
echo "bench rc=$?"
grep -E "interpreter|differ|error|Error" "$r/tunings.log" | sed -E 's/ compile [0-9.]+ load [0-9.]+//' | cut -c1-160
tar czf "$out/tunings.tgz" -C "$r" . && rm -rf "$r"
