#!/usr/bin/env bash
# Does NVRTC slow down when every core is busy? Compile the same random population with
# different numbers of daemons, then run evolve with fewer daemons than cores.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
for n in 16 8 12 16 4; do
  $bin compile --daemons $n --random 1600 --per-unit 4 --seed 1 --json > "$r/compile_$n.json" 2>/dev/null
  python3 - "$r/compile_$n.json" $n <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); n = sys.argv[2]
us = [u["timings_us"]["compile_us"] for u in d["units"]]
print(f"compile {n} daemons: wall {d['wall_ms']:.0f} ms, mean unit {sum(us)/len(us)/1000:.1f} ms")
PY
done
for spec in "$@"; do
  name=${spec%%:*}; flags=${spec#*:}; flags=${flags//,/ }
  timeout 150 $bin evolve --problem keijzer6 --population 300 --generations 50 --eval gpu --seed 1 --json $flags > "$r/$name.jsonl" 2> "$r/$name.err"
  echo "$name [$flags]: $(tail -n1 $r/$name.jsonl | python3 -c 'import json,sys; s=json.load(sys.stdin); print("%.1f ms/gen busy %.0f s" % (s["mean_generation_ms"], s["totals"]["compile_busy_s"]))')"
done
