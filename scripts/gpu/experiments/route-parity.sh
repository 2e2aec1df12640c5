#!/usr/bin/env bash
# Seeded runs of every route on the GPU by two builds, compared generation by generation: the
# build under test ($bin) and a reference build carried in .carry/old/ (gpfarm, gpfarmd,
# gpfarm-gpu-worker, built from the commit the comparison is against). Each problem and route:
# population 300, 10 generations, seed 1, one JSON file per build under $r/parity/, and one line
# of parity.md saying whether best, mean, median, invalid and unique agree bit for bit in every
# generation and the summaries name the same best program.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
old=$carry/old
mkdir -p "$r/parity"
for problem in ${PROBLEMS:-keijzer6 search multiplier5}; do
  for route in ${ROUTES:-nvrtc ptx interpreter auto}; do
    args=(evolve --problem "$problem" --route "$route" --population 300 --generations 10 --seed 1 --json)
    GPFARMD=$old/gpfarmd GPFARM_GPU_WORKER=$old/gpfarm-gpu-worker timeout 300 "$old/gpfarm" "${args[@]}" \
      > "$r/parity/old_${problem}_${route}.jsonl" 2> "$r/parity/old_${problem}_${route}.err"
    timeout 300 "$bin" "${args[@]}" > "$r/parity/new_${problem}_${route}.jsonl" 2> "$r/parity/new_${problem}_${route}.err"
  done
done
python3 - "$r/parity" <<'PY' | tee "$r/parity.md"
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
print("| problem | route | generations | identical | old route | new route | old ms/gen | new ms/gen |")
print("| --- | --- | ---: | --- | --- | --- | ---: | ---: |")
for old in sorted(d.glob("old_*.jsonl")):
    new = d / old.name.replace("old_", "new_", 1)
    problem, route = old.stem.split("_", 2)[1:]
    load = lambda p: [json.loads(l) for l in p.read_text().splitlines() if l.strip()]
    a, b = load(old), (load(new) if new.exists() else [])
    if not a or not b or not a[-1].get("summary") or not b[-1].get("summary"):
        print(f"| {problem} | {route} | - | run failed | | | | |")
        continue
    key = lambda g: (g["island"], g["generation"], g["best"], g["mean"], g["median"], g["invalid"], g["unique"])
    same = [key(g) for g in a[:-1]] == [key(g) for g in b[:-1]]
    same = same and a[-1]["best_fitness"] == b[-1]["best_fitness"] and a[-1]["best_phenotype"] == b[-1]["best_phenotype"]
    print(f"| {problem} | {route} | {len(a) - 1} | {'yes' if same else 'NO'} | {a[-1]['route']} | {b[-1]['route']} "
          f"| {a[-1]['mean_generation_ms']:.1f} | {b[-1]['mean_generation_ms']:.1f} |")
PY
