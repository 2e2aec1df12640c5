#!/usr/bin/env bash
# auto against the fixed routes with repeats: for the three built-in problems and a 100,000-case
# regression, REPEATS (10) runs of each of auto and interpreter and PTX_REPEATS (3) of ptx, in turn,
# the order rotated each repeat (population 300, GENERATIONS (60) generations, seed 1). A run's
# figure is the median of its generations' times after the first (a run of 3 ms generations lasts
# a fifth of a second, so its mean swings with whatever else the host does); the table gives the
# median of those over repeats and the median of all generations pooled, for the 10% bar. Every
# generation's time is kept in generations.csv. NVRTC is left out: it is 20-100 times slower than
# either (routes-auto.sh).
# Expects .carry/ from scripts/gpu/harness/pack.sh; writes $OUT/routes-repeat.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
reg="$r/regression100k"
bash "$(dirname "${BASH_SOURCE[0]}")/../harness/regression100k.sh" "$reg"
echo "problem,route,repeat,chosen,mean_generation_ms,median_generation_ms" > "$r/repeats.csv"
echo "problem,route,repeat,generation,generation_ms" > "$r/generations.csv"
for p in ${PROBLEMS:-keijzer6 search multiplier5 regression100k}; do
  if [ "$p" = regression100k ]; then what=(--problem-dir "$reg"); else what=(--problem "$p"); fi
  for k in $(seq 1 "${REPEATS:-10}"); do
    routes=(auto interpreter ptx)
    for j in 0 1 2; do
      route=${routes[$(( (j + k) % 3 ))]}
      if [ "$route" = ptx ] && [ "$k" -gt "${PTX_REPEATS:-3}" ]; then continue; fi
      timeout 120 "$bin" evolve "${what[@]}" --population 300 --generations "${GENERATIONS:-60}" --seed 1 --json --route "$route" \
        > "$r/run.jsonl" 2> "$r/run.err"
      python3 - "$r/run.jsonl" "$p" "$route" "$k" "$r/generations.csv" >> "$r/repeats.csv" <<'PY'
import json, statistics, sys
path, p, route, k, every = sys.argv[1:]
lines = [json.loads(l) for l in open(path) if l.strip()]
s = lines[-1] if lines and lines[-1].get("summary") else {}
gens = [g["generation_ms"] for g in lines if g.get("generation", 0) >= 1 and "generation_ms" in g]
med = statistics.median(gens) if gens else float("nan")
with open(every, "a") as f:
    for g in lines:
        if g.get("generation", 0) >= 1 and "generation_ms" in g:
            f.write(f'{p},{route},{k},{g["generation"]},{g["generation_ms"]:.4f}\n')
print(f'{p},{route},{k},{s.get("route","failed")},{s.get("mean_generation_ms",float("nan")):.3f},{med:.3f}')
PY
    done
  done
done
python3 - "$r/repeats.csv" "$r/generations.csv" <<'PY' | tee "$r/repeats.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
gens = list(csv.DictReader(open(sys.argv[2])))
routes = ["auto", "interpreter", "ptx"]
print("Generation ms: median over repeats of each run's median generation / median of all generations pooled.\n")
print("| problem | auto (route) | interpreter | ptx | auto / best fixed |")
print("| --- | ---: | ---: | ---: | ---: |")
for p in dict.fromkeys(r["problem"] for r in rows):
    def median(xs):
        xs = list(xs)
        return statistics.median(xs) if xs else float("inf")
    med = {k: median(float(r["median_generation_ms"]) for r in rows if r["problem"] == p and r["route"] == k) for k in routes}
    pool = {k: median(float(g["generation_ms"]) for g in gens if g["problem"] == p and g["route"] == k) for k in routes}
    chosen = {r["chosen"] for r in rows if r["problem"] == p and r["route"] == "auto"}
    best = min(med["interpreter"], med["ptx"])
    best_pool = min(pool["interpreter"], pool["ptx"])
    cells = " | ".join(f'{med[k]:.2f} / {pool[k]:.2f}' if med[k] != float("inf") else "-" for k in routes[1:])
    print(f'| {p} | {med["auto"]:.2f} / {pool["auto"]:.2f} ({",".join(chosen)}) | {cells} | {med["auto"] / best:.3f} / {pool["auto"] / best_pool:.3f} |')
PY
rm -rf "$reg" "$r/run.jsonl" "$r/run.err"
tar czf "$out/routes-repeat.tgz" -C "$r" . && rm -rf "$r"
