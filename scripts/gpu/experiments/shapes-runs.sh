#!/usr/bin/env bash
# Unit shapes on the GPU host, part 2: whole runs with GPU evaluation (population 300, 16
# daemons, seed 1; keijzer6 50 generations, the others 20), each route in each shape, PTX at
# ptxas -O0, -O1 and -O3, and the defaults; compile and evaluation time per generation, and
# whether every run's best, mean and median equal those of NVRTC in kernels. Expects .carry/
# from scripts/gpu/harness/pack.sh; writes $OUT/shapes-runs.tgz.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
variants=("nvrtc kernels" "nvrtc switch" "ptx kernels -O0" "ptx switch -O0" "ptx kernels -O3" "ptx switch -O3"
          "ptx switch -Xptxas=-O1" "default")
for spec in "keijzer6 50" "search 20" "multiplier5 20"; do
  set -- $spec
  for v in "${variants[@]}"; do
    read -r route shape opt <<< "$v"
    args=()
    [ "$route" != default ] && args+=(--route "$route" --shape "$shape")
    [ -n "${opt:-}" ] && args+=("--link-flag=$opt")
    f="$r/evolve_${1}_$(echo "$v" | tr ' =' '__').jsonl"
    timeout 150 "$bin" evolve --problem "$1" --population 300 --generations "$2" --daemons 16 --eval gpu --seed 1 \
      "${args[@]}" --json > "$f" 2> "${f%.jsonl}.err"
    echo "$1 $v rc=$? $(python3 "$here/../harness/summary.py" "$f")"
  done
done
python3 - "$r" <<'PY' | tee "$r/runs.txt"
import json, sys, pathlib
r = pathlib.Path(sys.argv[1])
def load(p):
    rows = [json.loads(l) for l in open(p)]
    return [x for x in rows if not x.get("summary")], rows[-1]
for problem in ["keijzer6", "search", "multiplier5"]:
    files = sorted(r.glob(f"evolve_{problem}_*.jsonl"))
    ref, _ = load(r / f"evolve_{problem}_nvrtc_kernels.jsonl")
    key = lambda g: (g["best"], g["mean"], g["median"])
    print(f"## {problem}: ms per generation, eval ms per generation, compile busy s, generations equal to nvrtc kernels")
    for f in files:
        g, s = load(f)
        same = sum(key(x) == key(y) for x, y in zip(ref, g))
        ev = sum(x["eval_ms"] for x in g) / len(g)
        print(f"{f.stem[len('evolve_' + problem) + 1:]:28s} {s['mean_generation_ms']:8.1f} {ev:8.2f} "
              f"{s['totals']['compile_busy_s']:7.2f}  {same}/{len(ref)}")
PY
tar czf "$out/shapes-runs.tgz" -C "$r" . && rm -rf "$r"
