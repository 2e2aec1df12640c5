#!/usr/bin/env bash
# Whole-generation runs with the host's CPU accounting around each: how much of the time our
# virtual CPUs were runnable but not running (steal), which no change of ours can win back.
# Usage: steal.sh NAME:FLAGS... (each NAME a run, FLAGS its evolve flags, commas for spaces).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
cpu() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6, $9}' /proc/stat; }
for spec in "$@"; do
  name=${spec%%:*}; flags=${spec#*:}; flags=${flags//,/ }
  read -r b0 i0 s0 <<<"$(cpu)"; t0=$(date +%s.%N)
  timeout 150 "$bin" evolve --problem keijzer6 --population 300 --generations 50 --eval gpu --seed 1 \
    --json $flags --trace-units "$r/$name.units.jsonl" > "$r/$name.jsonl" 2> "$r/$name.err"
  rc=$?
  read -r b1 i1 s1 <<<"$(cpu)"; t1=$(date +%s.%N)
  python3 - "$r/$name.jsonl" "$name" "$rc" "$b0" "$i0" "$s0" "$b1" "$i1" "$s1" "$t0" "$t1" <<'PY'
import json, sys
f, name, rc, b0, i0, s0, b1, i1, s1, t0, t1 = sys.argv[1:]
busy, idle, steal = float(b1) - float(b0), float(i1) - float(i0), float(s1) - float(s0)
total = busy + idle + steal
s = json.loads(open(f).read().strip().splitlines()[-1])
print(f"{name} rc={rc} {s['mean_generation_ms']:.1f} ms/gen, compile busy {s['totals']['compile_busy_s']:.0f} s, "
      f"cpu busy {100*busy/total:.0f}% idle {100*idle/total:.0f}% steal {100*steal/total:.0f}%")
PY
done
tar czf "$out/steal.tgz" -C "$r" .
