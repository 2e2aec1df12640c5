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
import collections, json, sys
tests = []
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        crate = m["package_id"].split("#")[-1].split("@")[0].split("/")[-1]
        tests.append((crate, m["target"]["name"], m["executable"]))
# A name two crates give their tests (ptx) is kept as the root crate'"'"'s, the other as NAME_CRATE.
count = collections.Counter(name for _, name, _ in tests)
for crate, name, exe in tests:
    shared = count[name] > 1 and crate != "gpfarm"
    print(name + "_" + crate.removeprefix("gpfarm-") if shared else name, exe)' \
  | while read -r name exe; do strip -o ".carry/tests/$name" "$exe"; done
du -sh .carry
