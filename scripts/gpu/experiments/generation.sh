#!/usr/bin/env bash
# Whole-generation figures: 50 generations, population 300, 16 daemons, GPU evaluation, seed 1,
# in every combination of caching and overlap, for the problems named (default: all three).
# Modes: plain (--no-cache --no-overlap), cache (--no-overlap), overlap (--no-cache), both (the default).
# gpfarm switches the CUDA driver's compute cache off, so every run compiles for real.
# Each run's records go to $OUT/r/evolve_<problem>_<mode>[_<repeat>].jsonl, all of them into
# $OUT/generation.tgz. Expects .carry/ from scripts/gpu/harness/pack.sh. REPEATS=n runs each n
# times, the modes interleaved so that a slow spell of the host does not land on one mode.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
problems=${PROBLEMS:-keijzer6 search multiplier5}
for rep in $(seq 1 "${REPEATS:-1}"); do
  for p in $problems; do
    for mode in ${MODES:-plain cache overlap both}; do
      case $mode in
        plain) flags="--no-cache --no-overlap" ;; cache) flags="--no-overlap" ;;
        overlap) flags="--no-cache" ;; both) flags="" ;;
      esac
      f="$r/evolve_${p}_${mode}_${rep}"
      timeout 150 "$bin" evolve --problem "$p" --population 300 --generations 50 --daemons 16 --eval gpu --seed 1 \
        --json $flags --trace-units "$f.units.jsonl" > "$f.jsonl" 2> "$f.err"
      echo "$p $mode #$rep rc=$? $(tail -n 1 "$f.jsonl" | python3 -c 'import json,sys; s=json.load(sys.stdin); print("%.1f ms/gen, compiled %d of %d" % (s["mean_generation_ms"], s["totals"]["compiled"], s["totals"]["individuals_evaluated"]))' 2>&1)"
    done
  done
done
tar czf "$out/generation.tgz" -C "$r" .
