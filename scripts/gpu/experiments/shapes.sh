#!/usr/bin/env bash
# Unit shapes on the GPU host, part 1: the agreement tests (both routes in both shapes against
# NVRTC in kernels, bit for bit: random populations, careful mode, and 20-generation runs), then
# the compile benchmark on the same populations (population 300, 16 daemons, no contraction):
# NVRTC and PTX, kernels and switch, PTX at ptxas -O0 to -O3 (nvJitLink takes -O0 and -O3 itself,
# -O1 and -O2 only as -Xptxas=-On), in units of 10 and of 30. SKIP_TESTS=1 runs the benchmark only.
# Part 2 (shapes-runs.sh) measures whole runs. Expects .carry/ from scripts/gpu/harness/pack.sh;
# writes $OUT/shapes.tgz.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
[ -n "${SKIP_TESTS:-}" ] || for t in the_ptx_route_gives_the_nvrtc_route_s_fitness_bit_for_bit runs_by_either_route_evolve_the_same_on_the_gpu; do
  timeout 280 "$carry/tests/gpu" --include-ignored --exact "$t" --test-threads=1 --nocapture > "$r/test_$t.log" 2>&1
  echo "$t: rc=$? $(grep -E '^test result' "$r/test_$t.log")"
  grep -E "differ|ms per generation|careful, .* compared" "$r/test_$t.log" | tail -8
done
b=(bench --problems search,keijzer6,multiplier5 --sizes 300 --runs 2 --generations 2 --methods farm:16
   --flag=--fmad=false --routes nvrtc,ptx --shapes kernels,switch)
timeout 200 "$bin" "${b[@]}" --link-flag-sets='-O0;-Xptxas=-O1;-Xptxas=-O2;-O3' --out "$r/bench-shapes" > "$r/bench-shapes.log" 2>&1
echo "bench shapes rc=$?"
timeout 120 "$bin" "${b[@]}" --link-flag-sets='-O0' --per-unit 30 --out "$r/bench-shapes-30" > "$r/bench-shapes-30.log" 2>&1
echo "bench shapes units of 30 rc=$?"
for d in bench-shapes bench-shapes-30; do
  grep -E "^### |^\| farm" "$r/$d/tables.md" | cut -d'|' -f1-4
done
tar czf "$out/shapes.tgz" -C "$r" . && rm -rf "$r"
