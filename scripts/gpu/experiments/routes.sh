#!/usr/bin/env bash
# The NVRTC and PTX routes on the GPU host, on the same populations: the benchmark (population
# 300, 16 daemons, no contraction; PTX at nvJitLink's -O3 and -O0, and ptxas -O1, in units of 10
# and 30), then 50-generation keijzer6 runs and 20-generation runs of the other problems by each
# route with GPU evaluation, whose best, mean and median must agree generation by generation.
# Expects .carry/ from scripts/gpu/harness/pack.sh; writes under $OUT/r.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
b=(bench --problems search,keijzer6,multiplier5 --sizes 300 --runs 2 --generations 2 --methods farm:16 --flag=--fmad=false)
timeout 200 "$bin" "${b[@]}" --routes nvrtc,ptx --out "$r/bench-routes" > "$r/bench-routes.log" 2>&1
echo "bench routes rc=$?"
timeout 100 "$bin" "${b[@]}" --routes ptx --link-flag=-O0 --out "$r/bench-ptx-O0" > "$r/bench-ptx-O0.log" 2>&1
echo "bench ptx -O0 rc=$?"
timeout 100 "$bin" "${b[@]}" --routes ptx --link-flag=-Xptxas=-O1 --out "$r/bench-ptx-O1" > "$r/bench-ptx-O1.log" 2>&1
echo "bench ptx -O1 rc=$?"
timeout 100 "$bin" "${b[@]}" --routes nvrtc,ptx --per-unit 30 --out "$r/bench-units30" > "$r/bench-units30.log" 2>&1
echo "bench units of 30 rc=$?"
for spec in "keijzer6 50" "search 20" "multiplier5 20"; do
  set -- $spec
  for route in nvrtc ptx; do
    f="$r/evolve_${1}_${route}.jsonl"
    timeout 150 "$bin" evolve --problem "$1" --population 300 --generations "$2" --daemons 16 --eval gpu --seed 1 \
      --route "$route" --json > "$f" 2> "${f%.jsonl}.err"
    echo "$1 $route rc=$? $(python3 "$here/../harness/summary.py" "$f")"
  done
  f="$r/evolve_${1}_ptx_O0.jsonl"
  timeout 150 "$bin" evolve --problem "$1" --population 300 --generations "$2" --daemons 16 --eval gpu --seed 1 \
    --route ptx --link-flag=-O0 --json > "$f" 2> "${f%.jsonl}.err"
  echo "$1 ptx -O0 rc=$? $(python3 "$here/../harness/summary.py" "$f")"
done
python3 - "$r" <<'PY' | tee "$r/routes.txt"
import json, sys, pathlib
r = pathlib.Path(sys.argv[1])
def load(p):
    rows = [json.loads(l) for l in open(p)]
    return [x for x in rows if not x.get("summary")], rows[-1]
for problem in ["keijzer6", "search", "multiplier5"]:
    (a, sa), (b, sb), (c, sc) = (load(r / f"evolve_{problem}_{x}.jsonl") for x in ["nvrtc", "ptx", "ptx_O0"])
    key = lambda g: (g["best"], g["mean"], g["median"])
    same = sum(key(x) == key(y) for x, y in zip(a, b))
    same0 = sum(key(x) == key(y) for x, y in zip(a, c))
    ev = lambda g: sum(x["eval_ms"] for x in g) / len(g)
    print(f"{problem}: {len(a)} generations; ptx equal to nvrtc in {same}, ptx -O0 in {same0}; "
          f"ms per generation nvrtc {sa['mean_generation_ms']:.1f}, ptx {sb['mean_generation_ms']:.1f}, "
          f"ptx -O0 {sc['mean_generation_ms']:.1f}; eval ms per generation {ev(a):.2f} / {ev(b):.2f} / {ev(c):.2f}; "
          f"compile s {sa['totals']['compile_busy_s']:.1f} / {sb['totals']['compile_busy_s']:.1f} / {sc['totals']['compile_busy_s']:.1f}")
PY
# One archive: the device tool brings back only a few files.
tar czf "$out/routes.tgz" -C "$r" . && rm -rf "$r"
