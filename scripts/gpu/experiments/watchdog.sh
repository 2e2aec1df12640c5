#!/usr/bin/env bash
# The GPU watchdog on the GPU host: the worker test with an endless and a trapping kernel, then
# the while-loop example (examples/while-search, whose loops may never end) evolved by every GPU
# route, population 50, 2 generations, seed 1; the compiled routes with a 1 s GPU deadline, the
# interpreter (which has a step limit) with the default. One JSON file per route under $r and a
# table, watchdog.md, of what each generation cost and how many kernels timed out.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
timeout 200 "$carry/tests/gpu_worker" --include-ignored --test-threads=1 --nocapture > "$r/test_gpu_worker.log" 2>&1
echo "gpu_worker: rc=$? $(grep -E '^test result' "$r/test_gpu_worker.log")"
grep -E "^worker_(timeout|fault):" "$r/test_gpu_worker.log"
for route in ptx nvrtc interpreter; do
  deadline=()
  [ "$route" != interpreter ] && deadline=(--gpu-deadline 1)
  start=$(date +%s.%N)
  timeout 240 "$bin" evolve --problem-dir examples/while-search --route "$route" --population 50 --generations 2 \
    --seed 1 "${deadline[@]}" --json > "$r/while_$route.jsonl" 2> "$r/while_$route.err"
  echo "$route: rc=$? $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
done
python3 - "$r" <<'PY' | tee "$r/watchdog.md"
import json, pathlib, sys
r = pathlib.Path(sys.argv[1])
print("| route | generation | best | invalid | faults | timeouts | eval ms | gen ms | worker restarts |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for route in ["ptx", "nvrtc", "interpreter"]:
    lines = [json.loads(l) for l in (r / f"while_{route}.jsonl").read_text().splitlines() if l.strip()]
    for g in lines:
        if g.get("summary"):
            continue
        e = g["eval_split"]
        print(f"| {route} | {g['generation']} | {g['best']} | {g['invalid']} | {e['faults']} | {e.get('timeouts', '-')} "
              f"| {g['eval_ms']:.0f} | {g['generation_ms']:.0f} | {e['gpu_worker_restarts']} |")
PY
