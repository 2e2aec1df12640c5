#!/usr/bin/env bash
# Generations at scale, this build against the one in .carry/base (same runs, same host, one
# after the other, twice): SIZES (100000,500000,1000000), GENERATIONS (5). Results tarred into
# $OUT/scale-ab.tgz.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
sizes=${SIZES:-100000,500000,1000000}
for round in 1 2; do
  for which in new base; do
    exe=$bin; [[ $which == base ]] && exe=.carry/base/gpfarm
    [[ -x $exe ]] || continue
    timeout "${TIMEOUT:-120}" "$exe" bench --scale --sizes "$sizes" --generations "${GENERATIONS:-5}" \
      --out "$r/scale-$which-$round" > "$r/scale-$which-$round.log" 2>&1
    echo "$which round $round: rc=$?"
    grep -E '^\| [0-9]' "$r/scale-$which-$round/scale.md" 2>/dev/null
  done
done
cd "$OUT" && tar czf scale-ab.tgz r && rm -rf r
