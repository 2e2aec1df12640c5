#!/usr/bin/env bash
# The generation engine as a library, on the GPU host: the GPU tests (ignored elsewhere), then
# keijzer6 300x50 with 16 daemons and GPU evaluation, seed 1, with the defaults, whose best and
# mean per generation must equal, bit for bit, the committed run of those defaults (PTX route,
# -O0, no contraction: results/2026-11-23-h100/routes/evolve_keijzer6_ptx_O0.jsonl; the
# run before the default changed, with contraction, is ../../2026-11-22-h100/ceiling/runs/). Expects .carry/
# from scripts/gpu/harness/pack.sh; writes $OUT/r/engine-check.txt and the run's records.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh"
bash "$here/../harness/tests.sh"
f="$r/evolve_keijzer6_gpu_1.jsonl"
timeout 300 "$bin" evolve --problem keijzer6 --population 300 --generations 50 --daemons 16 --eval gpu \
  --seed 1 --json > "$f" 2> "${f%.jsonl}.err"
echo "evolve rc=$?"
python3 - "$f" results/2026-11-23-h100/routes/evolve_keijzer6_ptx_O0.jsonl <<'PY' | tee "$r/engine-check.txt"
import json, sys
def trajectory(path):
    rows = [json.loads(l) for l in open(path)]
    return [(r["best"], r["mean"]) for r in rows if not r.get("summary")], rows[-1]
new, summary = trajectory(sys.argv[1])
old, _ = trajectory(sys.argv[2])
same = sum(a == b for a, b in zip(new, old))
print(f"generations {len(new)} (recorded {len(old)}), identical best and mean: {same}")
print(f"evaluator {set(json.loads(l)['evaluator'] for l in open(sys.argv[1]) if 'evaluator' in l)}, "
      f"{summary['mean_generation_ms']:.1f} ms per generation")
sys.exit(0 if same == len(old) == len(new) else 1)
PY
# One archive: the device tool brings back only a few files.
tar czf "$out/engine-check.tgz" -C "$r" . && rm -rf "$r"
