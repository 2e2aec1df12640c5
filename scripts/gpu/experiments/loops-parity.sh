#!/usr/bin/env bash
# One step limit on every route, on the GPU host: the while-loop example (examples/while-search,
# whose loops may never end) and the built-in search, evolved by the cpu route (on the CPU), the
# interpreter, ptx and nvrtc, seed 1; loops.md says, per problem, whether every route's best,
# mean, median, invalid and unique agree bit for bit with the cpu route's in every generation,
# and what a generation cost. ROUTES="cpu nvrtc" runs only those (cpu must be among them).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
mkdir -p "$r/loops"
for problem in while-search search; do
  case $problem in
    while-search) where=(--problem-dir examples/while-search); size=(--population 50 --generations 3) ;;
    *) where=(--problem "$problem"); size=(--population 300 --generations 10) ;;
  esac
  for route in ${ROUTES:-cpu interpreter ptx nvrtc}; do
    eval_mode=(); [ "$route" = cpu ] && eval_mode=(--eval cpu)
    start=$(date +%s.%N)
    timeout 200 "$bin" evolve "${where[@]}" "${size[@]}" --route "$route" "${eval_mode[@]}" --seed 1 --json \
      > "$r/loops/${problem}_$route.jsonl" 2> "$r/loops/${problem}_$route.err"
    echo "$problem $route: rc=$? $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
  done
done
python3 - "$r/loops" <<'PY' | tee "$r/loops.md"
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
key = lambda g: (g["island"], g["generation"], g["best"], g["mean"], g["median"], g["invalid"], g["unique"])
print("| problem | route | generations | same as cpu | faults | ms/gen | best |")
print("| --- | --- | ---: | --- | ---: | ---: | ---: |")
for problem in ["while-search", "search"]:
    load = lambda route: [json.loads(l) for l in (d / f"{problem}_{route}.jsonl").read_text().splitlines() if l.strip()]
    cpu = load("cpu")
    for route in ["cpu", "interpreter", "ptx", "nvrtc"]:
        if not (d / f"{problem}_{route}.jsonl").exists():
            continue
        runs = load(route)
        if not runs or not runs[-1].get("summary"):
            print(f"| {problem} | {route} | - | run failed | | | |")
            continue
        same = [key(g) for g in runs[:-1]] == [key(g) for g in cpu[:-1]]
        faults = sum(g["eval_split"]["faults"] for g in runs[:-1])
        s = runs[-1]
        print(f"| {problem} | {s['route']} | {len(runs) - 1} | {'yes' if same else 'NO'} | {faults} "
              f"| {s['mean_generation_ms']:.1f} | {s['best_fitness']} |")
PY
