#!/usr/bin/env bash
# scripts/compare/bigdata.py on the GPU host: gpfarm from the wheel in .carry-py/ (build it with
# `python3 -m pip wheel --no-deps -w .carry-py ./python`), pyoperon from the wheel in .whl/, both
# installed into a fresh folder beside the host's NumPy and scikit-learn. The driver's
# compute cache is off. ROWS, BUDGET and SEEDS pass bigdata.py's arguments.
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out/r"; r="$out/r"
export CUDA_CACHE_DISABLE=1
{
  echo "host: $(nproc) cores, $(lscpu | sed -n 's/^Model name:\s*//p')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 --version
} | tee "$r/machine.txt"
# The host's python3 is itself a virtual environment: the packages go beside it (--target).
env=/tmp/gpfarm-bigdata
rm -rf "$env"
python3 -m pip install --quiet --no-index --no-deps --target "$env/site" --find-links .carry-py gpfarm .whl/pyoperon-*.whl 2>&1 | tail -3
export PYTHONPATH=$env/site
# gpfarm looks for its commands beside the interpreter, else by these.
export GPFARMD=$env/site/bin/gpfarmd GPFARM_GPU_WORKER=$env/site/bin/gpfarm-gpu-worker
py=python3
$py -c 'import gpfarm, pyoperon, sklearn; print("gpfarm", gpfarm.__file__, "sklearn", sklearn.__version__)'
PYTHONUNBUFFERED=1 timeout "${LIMIT:-560}" $py scripts/compare/bigdata.py "$r" "${ROWS:-100000,1000000}" \
  "${BUDGET:-15}" "${SEEDS:-3}" 2>&1 | tee "$r/bigdata.log"
ls /dev/shm | grep -c gpfarm | sed 's/^/segments left: /'
