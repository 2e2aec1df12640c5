#!/usr/bin/env bash
# The break-even benchmark (gpfarm bench --break-even): every route on the same populations, the
# built-in problems and regressions of 64 to 10^7 cases at three program sizes, 16 daemons; the interpreter also at one case per thread.
# Expects .carry/ from scripts/gpu/harness/pack.sh; writes $OUT/breakeven.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
timeout 540 "$bin" bench --break-even --out "$r/breakeven" --cases "${CASES:-64,1000,10000,100000,1000000,10000000}" \
  --depths "${DEPTHS:-6,10,14}" --tunings "${TUNINGS:-4,1}" --repeats 5 2> "$r/breakeven.log"
echo "bench rc=$?"
grep -E "differ|error|Error" "$r/breakeven.log" | head
cat "$r/breakeven/breakeven.md"
tar czf "$out/breakeven.tgz" -C "$r" . && rm -rf "$r"
