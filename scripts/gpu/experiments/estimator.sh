#!/usr/bin/env bash
# SymbolicRegressor on the GPU host, from the wheel in .carry-py/ (with sympy's and mpmath's;
# build with `python3 -m pip wheel --no-deps -w .carry-py ./python sympy==1.14.0 mpmath`):
# estimator.py twice, in two processes sharing one kernel cache (the second finds the kernels
# on disk), then the comparison script's gpfarm runs on the GPU at BUDGET seconds per fit from
# the exported data sets (.carry-py/sets.npz).
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out/r"; r="$out/r"
unset GPFARMD GPFARM_GPU_WORKER
export CUDA_CACHE_DISABLE=1 GPFARM_CACHE_DIR=/tmp/gpfarm-estimator-cache
[ -n "${KEEP_CACHE:-}" ] || rm -rf "$GPFARM_CACHE_DIR"
{
  echo "host: $(nproc) cores, $(lscpu | sed -n 's/^Model name:\s*//p')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} | tee "$r/machine.txt"
env=/tmp/gpfarm-est
rm -rf "$env"
python3 -m venv --system-site-packages "$env"
py=$env/bin/python
$py -c 'import numpy' 2>/dev/null || $py -m pip install --quiet --no-index --find-links .carry-py numpy 2>&1 | tail -3
$py -m pip install --quiet --no-index --find-links .carry-py gpfarm sympy 2>&1 | tail -3
here=$(dirname "${BASH_SOURCE[0]}")
if [ -z "${SKIP_ESTIMATOR:-}" ]; then
timeout 200 $py "$here/estimator.py" "$r" first 2>&1 | tee "$r/estimator-first.log"
SIZES=1000 timeout 100 $py "$here/estimator.py" "$r" second 2>&1 | tee "$r/estimator-second.log"
fi
if [ -n "${BUDGET:-}" ]; then
  timeout "${SR_TIMEOUT:-300}" $py scripts/compare/sr.py --tools gpfarm --eval gpu --budget "$BUDGET" \
    --seeds "${SEEDS:-5}" --data .carry-py/sets.npz --out "$r/compare-gpu" 2>&1 | tail -40
fi
ls /dev/shm | grep -c gpfarm | sed 's/^/segments left: /'
