#!/usr/bin/env bash
# GPU evaluation and reliability on the GPU host, in one call: the GPU and fault tests, the
# 50-generation keijzer6 run, 20-generation runs of the other problems, and a run whose kernels
# trap on large outputs so that faulting individuals are isolated for real. Expects .carry/ from
# scripts/gpu/harness/pack.sh; writes logs under $OUT/r.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"

bash "$(dirname "${BASH_SOURCE[0]}")/../harness/tests.sh"

if [ -z "${TRAP_ONLY:-}" ]; then
echo "== evolve keijzer6 300x50, 16 daemons, gpu"
timeout 300 "$bin" evolve --problem keijzer6 --population 300 --generations 50 --daemons 16 --eval gpu --seed 1 --json \
  > "$r/evolve_k6_gpu.jsonl" 2> "$r/evolve_k6_gpu.err"; echo "rc=$?"
tail -n 1 "$r/evolve_k6_gpu.jsonl" | cut -c1-400
for p in search multiplier5; do
  timeout 150 "$bin" evolve --problem "$p" --population 300 --generations 20 --daemons 16 --eval gpu --seed 1 --json \
    > "$r/evolve_${p}_gpu.jsonl" 2> "$r/evolve_${p}_gpu.err"
  echo "$p rc=$? $(tail -n 1 "$r/evolve_${p}_gpu.jsonl" | cut -c1-300)"
done

fi
echo "== keijzer6 with kernels that trap when an output exceeds 1000"
cp -r gp/problems/keijzer6 "$r/k6trap"
python3 - "$r/k6trap/template.cu" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
s = s.replace("out_y[c] = (float)({{PHENOTYPE}});",
              "const float v = (float)({{PHENOTYPE}});\n    if (v > 1000.0f) __trap();\n    out_y[c] = v;")
open(p, "w").write(s)
PY
timeout 200 "$bin" evolve --problem-dir "$r/k6trap" --population 300 --generations 10 --daemons 16 --eval gpu --seed 1 --json \
  > "$r/evolve_k6trap.jsonl" 2> "$r/evolve_k6trap.err"; echo "rc=$?"
python3 - "$r" <<'PY'
import json, sys, os
r = sys.argv[1]
for f in ["evolve_k6_gpu", "evolve_search_gpu", "evolve_multiplier5_gpu", "evolve_k6trap"]:
    try: recs = [json.loads(l) for l in open(os.path.join(r, f + ".jsonl")) if l.strip()]
    except Exception as e: print(f, "unreadable", e); continue
    gens = [x for x in recs if "generation" in x]
    faults = sum(g["eval_split"]["faults"] for g in gens)
    fell = [g["generation"] for g in gens if g["eval_split"].get("fell_back_to_cpu")]
    rest = max([g["eval_split"].get("gpu_worker_restarts", 0) for g in gens] or [0])
    print(f"{f}: {len(gens)} generations, faults {faults}, worker restarts {rest}, cpu fallback at {fell}, last {json.dumps(gens[-1])[:300] if gens else None}")
PY
grep -h "warning\|error" "$r"/evolve_*.err | cut -c1-200 | sort | uniq -c | head -20
rm -rf "$r/k6trap"
tar czf "$out/logs.tgz" -C "$r" . && find "$r" -name '*.log' -delete
