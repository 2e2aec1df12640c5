#!/usr/bin/env bash
# startup.py on the GPU host, the driver's compute cache off, gpfarm from the wheel in .carry-py/:
# three processes of FITS fits each at ROWS rows, the first with gpfarm's kernel cache emptied
# (a machine's first fit ever), the others with it as the first left it. GPFARM_FIT_PROFILE=1
# prints when the worker's kernels and the worker were ready; those lines go to startup.log.
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out/r"; r="$out/r"
export CUDA_CACHE_DISABLE=1
{
  echo "host: $(nproc) cores, $(lscpu | sed -n 's/^Model name:\s*//p')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 --version
} | tee "$r/machine.txt"
env=/tmp/gpfarm-startup
rm -rf "$env"
python3 -m pip install --quiet --no-index --no-deps --target "$env/site" --find-links .carry-py gpfarm 2>&1 | tail -3
export PYTHONPATH=$env/site GPFARMD=$env/site/bin/gpfarmd GPFARM_GPU_WORKER=$env/site/bin/gpfarm-gpu-worker
export GPFARM_CACHE_DIR=/tmp/gpfarm-startup-cache
rm -rf "$GPFARM_CACHE_DIR"
for p in 1 2 3; do
  echo "== process $p" | tee -a "$r/startup.log"
  GPFARM_FIT_PROFILE=1 PYTHONUNBUFFERED=1 timeout "${LIMIT:-150}" python3 scripts/gpu/experiments/startup.py \
    "${ROWS:-1000000}" "${BUDGET:-10}" "${FITS:-2}" 2> >(grep -E "start-up profile|Error|error" >> "$r/startup.log") \
    | tee -a "$r/startup.jsonl"
done
cat "$r/startup.log"
ls /dev/shm | grep -c gpfarm | sed 's/^/segments left: /'
