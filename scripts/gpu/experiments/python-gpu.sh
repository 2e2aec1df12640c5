#!/usr/bin/env bash
# The Python package on the GPU host, installed from the wheel in .carry-py/ (build it with
# `python3 -m pip wheel --no-deps -w .carry-py ./python`) into a fresh environment: no build, no
# checkout binaries; the package's own gpfarmd and gpfarm-gpu-worker serve. Then python-gpu.py.
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out/r"; r="$out/r"
unset GPFARMD GPFARM_GPU_WORKER
export CUDA_CACHE_DISABLE=1
{
  echo "host: $(nproc) cores, $(lscpu | sed -n 's/^Model name:\s*//p')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 --version
} | tee "$r/machine.txt"
env=/tmp/gpfarm-py
rm -rf "$env"
if python3 -m venv "$env" 2>"$r/venv.log"; then
  py=$env/bin/python
  $py -m pip install --quiet --no-index --find-links .carry-py gpfarm 2>&1 | tail -3
else
  echo "no venv ($(tail -1 "$r/venv.log")); installing with --target"
  python3 -m pip install --quiet --no-index --target "$env/site" --find-links .carry-py gpfarm 2>&1 | tail -3
  export PYTHONPATH=$env/site PATH=$env/site/bin:$PATH
  py=python3
  # gpfarm looks for its commands beside the interpreter, else by these.
  export GPFARMD=$env/site/bin/gpfarmd GPFARM_GPU_WORKER=$env/site/bin/gpfarm-gpu-worker
fi
timeout 540 $py "$(dirname "${BASH_SOURCE[0]}")/python-gpu.py" "$r" 2>&1 | tee "$r/python-gpu.log"
ls /dev/shm | grep -c gpfarm | sed 's/^/segments left: /'
echo "gpfarmd processes left: $(pgrep -c -x gpfarmd)"
