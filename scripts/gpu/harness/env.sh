# Sourced by the scripts run on the GPU host: puts the carried binaries where the carried test
# executables expect them, sets $r (results folder), $bin (gpfarm), GPFARMD and GPFARM_GPU_WORKER,
# and describes the machine in $r/machine.txt.
# shellcheck shell=bash disable=SC2034
out=${OUT:-out}; mkdir -p "$out/r"; r="$out/r"
carry=.carry
built=$(cat $carry/target_dir)
mkdir -p "$built" && cp $carry/gpfarm $carry/gpfarmd $carry/gpfarm-gpu-worker "$built/"
export GPFARMD=$built/gpfarmd GPFARM_GPU_WORKER=$built/gpfarm-gpu-worker
bin=$built/gpfarm
{
  echo "host: $(nproc) cores, $(lscpu | sed -n 's/^Model name:\s*//p')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} > "$r/machine.txt"
cat "$r/machine.txt"
