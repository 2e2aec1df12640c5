#!/usr/bin/env bash
# Islands on the GPU host: 1, 2 and 4 islands of 300 (one process; every island's GPU worker on
# the GPUs present, round-robin), on the interpreter and on the PTX and NVRTC routes with the farm
# shared or split between islands. One JSON stream per run under $r/islands/, and islands.csv:
# wall time, island-generations per second, best fitness.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
mkdir -p "$r/islands"
gens=${GENERATIONS:-30}
echo "route,farm,islands,generations,population,wall_s,island_generations_per_s,best_fitness,island_best" > "$r/islands.csv"
for route in interpreter ptx nvrtc; do
  for islands in 1 2 4; do
    for farm in shared split; do
      [[ $route == interpreter && $farm == split ]] && continue
      [[ $islands == 1 && $farm == split ]] && continue
      f="$r/islands/$route-$farm-$islands.jsonl"
      timeout 300 $bin evolve --problem keijzer6 --route $route --eval gpu --population 300 --generations $gens \
        --seed 1 --islands $islands --migrate-every 5 --migrants 2 --island-farm $farm --json > "$f" 2> "$f.err"
      echo "$route $farm $islands: rc=$?"
      python3 - "$f" "$route" "$farm" "$islands" "$gens" >> "$r/islands.csv" <<'PY'
import json, sys
f, route, farm, islands, gens = sys.argv[1:]
s = [json.loads(l) for l in open(f) if '"summary":true' in l][0]
wall = s["totals"]["wall_s"]
print(f'{route},{farm},{islands},{gens},300,{wall:.3f},{int(islands) * (int(gens) + 1) / wall:.1f},{s["best_fitness"]!r},"{" ".join(repr(b) for b in s["island_best"])}"')
PY
    done
  done
done
cat "$r/islands.csv"
