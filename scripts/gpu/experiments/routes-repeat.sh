#!/usr/bin/env bash
# auto against the fixed routes with repeats: for the three built-in problems and a 100,000-case
# regression, REPEATS (5) runs of each of auto, interpreter and ptx in turn (population 300, 30
# generations, seed 1); the median generation time of each, for the 10% bar. NVRTC is left out:
# it is 20-100 times slower than either (routes-auto.sh).
# Expects .carry/ from scripts/gpu/harness/pack.sh; writes $OUT/routes-repeat.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
reg="$r/regression100k"
bash "$(dirname "${BASH_SOURCE[0]}")/../harness/regression100k.sh" "$reg"
echo "problem,route,repeat,chosen,mean_generation_ms" > "$r/repeats.csv"
for p in keijzer6 search multiplier5 regression100k; do
  if [ "$p" = regression100k ]; then what=(--problem-dir "$reg"); else what=(--problem "$p"); fi
  for k in $(seq 1 "${REPEATS:-5}"); do
    for route in auto interpreter ptx; do
      timeout 120 "$bin" evolve "${what[@]}" --population 300 --generations 30 --seed 1 --json --route "$route" \
        > "$r/run.jsonl" 2> "$r/run.err"
      python3 - "$r/run.jsonl" "$p" "$route" "$k" >> "$r/repeats.csv" <<'PY'
import json, sys
path, p, route, k = sys.argv[1:]
lines = [json.loads(l) for l in open(path) if l.strip()]
s = lines[-1] if lines and lines[-1].get("summary") else {}
print(f'{p},{route},{k},{s.get("route","failed")},{s.get("mean_generation_ms",float("nan")):.3f}')
PY
    done
  done
done
python3 - "$r/repeats.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("| problem | auto (route) | interpreter | ptx | auto / best fixed |")
print("| --- | ---: | ---: | ---: | ---: |")
for p in dict.fromkeys(r["problem"] for r in rows):
    med = {k: statistics.median(float(r["mean_generation_ms"]) for r in rows if r["problem"] == p and r["route"] == k) for k in ["auto", "interpreter", "ptx"]}
    chosen = {r["chosen"] for r in rows if r["problem"] == p and r["route"] == "auto"}
    best = min(med["interpreter"], med["ptx"])
    print(f'| {p} | {med["auto"]:.2f} ({",".join(chosen)}) | {med["interpreter"]:.2f} | {med["ptx"]:.2f} | {med["auto"] / best:.3f} |')
PY
rm -rf "$reg" "$r/run.jsonl" "$r/run.err"
tar czf "$out/routes-repeat.tgz" -C "$r" . && rm -rf "$r"
