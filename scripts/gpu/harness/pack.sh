#!/usr/bin/env bash
# Builds release binaries and test executables here and strips them into .carry/ for the GPU
# host (both machines are x86-64 Linux).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
cargo build --release --bins
rm -rf .carry && mkdir -p .carry/tests
strip -o .carry/gpfarm target/release/gpfarm
strip -o .carry/gpfarmd target/release/gpfarmd
strip -o .carry/gpfarm-gpu-worker target/release/gpfarm-gpu-worker
echo "$PWD/target/release" > .carry/target_dir
# An empty libcuda.so.1, for experiments/no-cache-probe.py to show NVRTC a driver that is not
# there.
mkdir -p .carry/fakecuda
echo 'int gpfarm_no_driver_here;' | cc -shared -fPIC -x c - -Wl,-soname,libcuda.so.1 -o .carry/fakecuda/libcuda.so.1
cargo test --release --workspace --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])' \
  | while read -r name exe; do strip -o ".carry/tests/$name" "$exe"; done
du -sh .carry
