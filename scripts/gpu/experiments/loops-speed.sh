#!/usr/bin/env bash
# Loop programs on every route, on the GPU host (CUDA's compute cache off). Stages, as arguments:
#   tests  the GPU tests of loops: one fitness per route for a while-loop population, the
#          interpreter's, and the GPU worker's watchdog (tests.txt);
#   runs   the while-loop example evolved by cpu, interpreter, ptx, nvrtc and auto (population
#          100, GENS generations (default 3), seed 1) at its 32 cases and at 10^5 cases (while-cases.py);
#          runs.md: per run whether every generation's best, mean, median, invalid and unique
#          equal the cpu route's, and the time per generation;
#   breakeven  gpfarm bench --break-even with loop workloads: 32 to 10^6 cases, loops of 10 to
#          10^5 iterations per case (cases x loops up to 10^8), 50 programs each (breakeven/).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
here=$(dirname "${BASH_SOURCE[0]}")
for stage in "$@"; do
  case $stage in
    tests)
      { .carry/tests/gpu --include-ignored --test-threads 1 a_while_loop_population 2>&1
        .carry/tests/interpreter --include-ignored --test-threads 1 2>&1
        .carry/tests/gpu_worker --include-ignored --test-threads 1 2>&1; } | grep -v "^$" > "$r/tests.txt"
      grep -E "^test |test result|while loops:" "$r/tests.txt" ;;
    runs)
      mkdir -p "$r/runs"
      python3 "$here/while-cases.py" 100000 /tmp/while-100000
      for cases in ${CASES:-32 100000}; do
        where=(--problem-dir examples/while-search); [ "$cases" != 32 ] && where=(--problem-dir /tmp/while-$cases)
        for route in ${ROUTES:-cpu interpreter ptx nvrtc auto}; do
          eval_mode=(); [ "$route" = cpu ] && eval_mode=(--eval cpu)
          start=$(date +%s.%N)
          timeout "${RUN_TIMEOUT:-150}" "$bin" evolve "${where[@]}" --population 100 --generations "${GENS:-3}" --route "$route" \
            "${eval_mode[@]}" --seed 1 --json > "$r/runs/while${cases}_$route.jsonl" 2> "$r/runs/while${cases}_$route.err"
          echo "while $cases $route: rc=$? $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
        done
      done
      python3 - "$r/runs" <<'PY' | tee "$r/runs.md"
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
key = lambda g: (g["island"], g["generation"], g["best"], g["mean"], g["median"], g["invalid"], g["unique"])
print("| cases | route | generations | same as cpu | faults | timeouts | ms/gen | eval ms/gen | best |")
print("| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
for cases in [32, 100000]:
    load = lambda route: [json.loads(l) for l in (d / f"while{cases}_{route}.jsonl").read_text().splitlines() if l.strip()]
    try:
        cpu = load("cpu")
    except Exception:
        cpu = []
    for route in ["cpu", "interpreter", "ptx", "nvrtc", "auto"]:
        runs = load(route) if (d / f"while{cases}_{route}.jsonl").exists() else []
        if not runs or not runs[-1].get("summary"):
            print(f"| {cases} | {route} | - | run did not finish | | | | | |")
            continue
        gens = runs[:-1]
        same = "yes" if cpu and [key(g) for g in gens] == [key(g) for g in cpu[:-1]] else ("no cpu run" if not cpu or not cpu[-1].get("summary") else "NO")
        faults = sum(g["eval_split"]["faults"] for g in gens)
        timeouts = sum(g["eval_split"].get("timeouts", 0) for g in gens)
        s = runs[-1]
        name = s["route"] if route != "auto" else f"auto ({s['route']})"
        ev = sum(g["eval_ms"] for g in gens) / len(gens)
        print(f"| {cases} | {name} | {len(gens)} | {same} | {faults} | {timeouts} | {s['mean_generation_ms']:.1f} | {ev:.1f} | {s['best_fitness']} |")
PY
      ;;
    breakeven)
      "$bin" bench --break-even --no-builtins --cases "${BE_CASES:-32,1000,10000,100000,1000000}" --depths 4 \
        --loops "${BE_LOOPS:-10,100,1000,10000,100000}" --sizes 50 --repeats 3 --out "$r/breakeven" 2>&1 | tail -n 60 ;;
  esac
done
