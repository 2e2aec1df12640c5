#!/usr/bin/env bash
# The interpreter's GPU tests, then whole runs of every route on the three built-in problems and
# a 100,000-case regression (keijzer6's grammar, x over [1, 64], target ln x + 0.5772): the mean
# generation time of each fixed route and of auto, same seed, and whether the trajectories agree.
# Expects .carry/ from scripts/gpu/harness/pack.sh; writes $OUT/routes-auto.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
timeout 300 "$carry/tests/interpreter" --include-ignored --test-threads=1 --nocapture > "$r/test_interpreter.log" 2>&1
echo "interp tests: rc=$? $(grep -E '^test result' "$r/test_interpreter.log")"
grep -E "^test |individuals,|ms per generation|panicked" "$r/test_interpreter.log" | cut -c1-300
reg="$r/regression100k"
bash "$(dirname "${BASH_SOURCE[0]}")/../harness/regression100k.sh" "$reg"
echo "problem,route,chosen,mean_generation_ms,best" > "$r/routes.csv"
for p in keijzer6 search multiplier5 regression100k; do
  if [ "$p" = regression100k ]; then what=(--problem-dir "$reg"); else what=(--problem "$p"); fi
  for route in auto interpreter ptx nvrtc; do
    timeout 240 "$bin" evolve "${what[@]}" --population 300 --generations 30 --seed 1 --json --route "$route" \
      > "$r/run_${p}_$route.jsonl" 2> "$r/run_${p}_$route.err"
    rc=$?
    python3 - "$r/run_${p}_$route.jsonl" "$p" "$route" "$rc" >> "$r/routes.csv" <<'PY'
import json, sys
path, p, route, rc = sys.argv[1:]
lines = [json.loads(l) for l in open(path) if l.strip()]
s = lines[-1] if lines and lines[-1].get("summary") else {}
print(f'{p},{route},{s.get("route","rc="+rc)},{s.get("mean_generation_ms",float("nan")):.2f},{s.get("best_fitness","")}')
PY
  done
  python3 - "$r" "$p" <<'PY'
import json, sys
r, p = sys.argv[1:]
runs = {}
for route in ["auto", "interpreter", "ptx", "nvrtc"]:
    try:
        runs[route] = [(g["best"], g["mean"], g["median"]) for g in map(json.loads, open(f"{r}/run_{p}_{route}.jsonl")) if "generation" in g]
    except Exception as e:
        runs[route] = []
base = runs["ptx"]
for route, g in runs.items():
    print(f"  {p} {route}: {sum(a == b for a, b in zip(g, base))} of {len(base)} generations equal to ptx")
PY
done
column -s, -t "$r/routes.csv"
rm -rf "$reg"
tar czf "$out/routes-auto.tgz" -C "$r" . && rm -rf "$r"
