#!/usr/bin/env bash
# Whole-generation figures with and without reuse of known fitness: 50 generations of each
# problem, population 300, 16 daemons, GPU evaluation, seed 1. Writes evolve_<problem>_<mode>.jsonl
# and reuse.md to $OUT/r. Expects .carry/ from scripts/gpu/pack.sh.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
for p in keijzer6 search multiplier5; do
  for mode in reuse no-reuse; do
    flag=; [ $mode = no-reuse ] && flag=--no-reuse
    timeout 200 $bin evolve --problem $p --population 300 --generations 50 --daemons 16 --eval gpu --seed 1 --json $flag \
      > "$r/evolve_${p}_$mode.jsonl" 2> "$r/evolve_${p}_$mode.err"
    echo "$p $mode rc=$?"
  done
done
python3 - "$r" <<'PY' | tee "$r/reuse.md"
import json, sys, os
r = sys.argv[1]
print("| problem | mode | mean generation s | compile s | evaluate s | reused / distinct | trajectory |")
print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
for p in ["keijzer6", "search", "multiplier5"]:
    runs = {}
    for mode in ["no-reuse", "reuse"]:
        try: recs = [json.loads(l) for l in open(os.path.join(r, f"evolve_{p}_{mode}.jsonl")) if l.strip()]
        except Exception as e: print(f"| {p} | {mode} | unreadable: {e} |"); continue
        runs[mode] = recs
    if len(runs) < 2: continue
    traj = {m: [(g["best"], g["mean"]) for g in v if "generation" in g] for m, v in runs.items()}
    same = "identical" if traj["reuse"] == traj["no-reuse"] else "DIFFERENT"
    for mode, recs in runs.items():
        gens = [g for g in recs if "generation" in g]; s = recs[-1]
        reused = sum(g["reused"] for g in gens); uniq = sum(g["unique"] for g in gens)
        print(f"| {p} | {mode} | {s['wall_s']/len(gens):.3f} | {s['compile_s']:.1f} | {s['eval_s']:.2f} | {reused} / {uniq} | {same} |")
    a = runs["no-reuse"][-1]["wall_s"]; b = runs["reuse"][-1]["wall_s"]
    print(f"| {p} | speed-up | {a/b:.2f}x | | | | |")
PY
