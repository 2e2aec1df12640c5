#!/usr/bin/env bash
# Unit forming on the GPU host: the compile benchmark (population 300, 16 daemons, no
# contraction, switch units, PTX at -O0) in the paper's fixed units of 10 and 30 against the
# engine's guided units (`bench --guided 16`: heaviest first, each route's own cost estimate,
# each unit taken by the next free daemon); then whole runs with the defaults (GPU evaluation,
# seed 1; keijzer6 50 generations, the others 20) and NVRTC in kernels as the reference
# trajectory. Expects .carry/ from scripts/gpu/harness/pack.sh; writes $OUT/balance.tgz.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
b=(bench --problems search,keijzer6,multiplier5 --sizes 300 --runs 2 --generations 2 --methods farm:16
   --flag=--fmad=false --routes nvrtc,ptx --shapes switch --link-flag=-O0)
for mode in "per-unit 10" "per-unit 30" "guided 16"; do
  set -- $mode
  d="$r/bench-$1-$2"
  timeout 150 "$bin" "${b[@]}" "--$1" "$2" --out "$d" > "$d.log" 2>&1
  echo "bench --$1 $2 rc=$?"
  grep -E "^\| farm" "$d/tables.md" | head -4 | cut -d'|' -f1-6
done
python3 - "$r" <<'PY' | tee "$r/bench.txt"
import csv, sys, pathlib, collections
r = pathlib.Path(sys.argv[1])
print("| units | problem | route | units per sample | ms per individual (mean of 4) | compile ms per individual |")
print("| --- | --- | --- | ---: | ---: | ---: |")
for d in sorted(r.glob("bench-*/bench.csv")):
    rows = collections.defaultdict(list)
    for x in csv.DictReader(open(d)):
        rows[(x["problem"], x["route"])].append(x)
    for (p, route), xs in sorted(rows.items()):
        mean = lambda k: sum(float(x[k]) for x in xs) / len(xs)
        per = sum(float(x["compile_ms"]) / int(x["individuals"]) for x in xs) / len(xs)
        print(f"| {d.parent.name[6:]} | {p} | {route} | {mean('units'):.1f} | {mean('ms_per_individual'):.3f} | {per:.3f} |")
PY
for spec in "keijzer6 50" "search 20" "multiplier5 20"; do
  set -- $spec
  for v in "nvrtc kernels" "default"; do
    read -r route shape <<< "$v"
    args=()
    [ "$route" != default ] && args+=(--route "$route" --shape "$shape")
    f="$r/evolve_${1}_$(echo "$v" | tr ' ' '_').jsonl"
    timeout 150 "$bin" evolve --problem "$1" --population 300 --generations "$2" --daemons 16 --eval gpu --seed 1 \
      "${args[@]}" --json > "$f" 2> "${f%.jsonl}.err"
    echo "$1 $v rc=$? $(python3 "$here/../harness/summary.py" "$f")"
  done
  python3 - "$r/evolve_${1}_nvrtc_kernels.jsonl" "$r/evolve_${1}_default.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if '"summary"' not in l] for p in sys.argv[1:])
key = lambda g: (g["best"], g["mean"], g["median"])
print(f"  generations equal to nvrtc kernels: {sum(key(x) == key(y) for x, y in zip(a, b))} of {len(a)}")
PY
done
tar czf "$out/balance.tgz" -C "$r" . && rm -rf "$r"
