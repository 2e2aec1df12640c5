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

# A Friedman-1 problem directory of $1 cases (make_cases.py, seed 1) in a fresh temporary folder;
# prints its path.
friedman1_dir() {
  local d
  d=$(mktemp -d)
  cp examples/friedman1/{problem.toml,grammar.bnf,template.cu} "$d/"
  python3 examples/friedman1/make_cases.py "$1" "$d" 1 >&2
  echo "$d"
}
