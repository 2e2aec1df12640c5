#!/usr/bin/env bash
# The scale round on the GPU host: the throughput workload at 127 nodes (every route) and at
# 255-1023 nodes (GPU routes), generations at scale with the interpreter, and the same with the
# base build in .carry/base (if carried) at two populations; results tarred into $OUT/scale.tgz.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
NAME=throughput NODES=127 SIZES=1000,10000,100000,500000 CASES=1024,4096,65536,1000000 \
  REPEATS=3 TIMEOUT=190 bash "$here/throughput.sh"
NAME=throughput-big NODES=255,511,1023 SIZES=1000,10000 CASES=1024,65536,1000000 \
  ROUTES=interpreter,ptx,nvrtc COMPILED_MAX=1000 REPEATS=3 TIMEOUT=130 bash "$here/throughput.sh"
NAME=scale SIZES=1000,10000,100000,500000,1000000 GENERATIONS=5 TIMEOUT=150 bash "$here/scale.sh"
if [[ -x .carry/base/gpfarm ]]; then
  timeout 80 .carry/base/gpfarm bench --scale --sizes 100000,500000 --generations 5 \
    --out "$r/scale-base" > "$r/scale-base.log" 2>&1
  echo "scale-base: rc=$?"; tail -6 "$r/scale-base.log"
fi
cd "$OUT" && tar czf scale.tgz r && rm -rf r
