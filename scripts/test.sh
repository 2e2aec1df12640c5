#!/usr/bin/env bash
# The test suite, runnable on a fresh machine without GPU or CUDA: installs the pinned NVRTC
# wheels if no CUDA 13 toolkit is found, then runs every test. GPU-only tests are ignored, with
# the reason "needs a GPU" (the GPU host runs them with --include-ignored); Open MPI is installed
# and the MPI build tested (`--features gpfarm/mpi`); NVRTC tests may not
# skip here (GPFARM_REQUIRE_NVRTC=1). After cargo's own output comes a summary over all test
# executables: how many passed, failed and were ignored, and which were ignored and why. Then the
# Python package is installed from python/ (maturin, pinned pytest) and its tests run. The exit
# status is cargo's if it failed, else pytest's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-toolchain.sh
# Open MPI and libclang for the islands-over-MPI build and its test (tests/mpi.rs).
scripts/install-mpi.sh
export GPFARM_REQUIRE_NVRTC=1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --release --features gpfarm/mpi "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

# libtest writes "test NAME ... ignored, REASON" and one "test result: ..." line per executable;
# cargo names the executable before it runs ("Running tests/gpu.rs (target/release/deps/gpu-HASH)",
# "Doc-tests CRATE").
awk '
  /^ *Running / {
    exe = $NF; gsub(/[()]/, "", exe); sub(/.*\//, "", exe); sub(/-[0-9a-f]+$/, "", exe)
  }
  /^ *Doc-tests / { exe = "doc-tests " $2 }
  /^test result: / {
    runs++
    for (i = 2; i <= NF; i++) {
      if ($i ~ /^passed;/) passed += $(i - 1)
      if ($i ~ /^failed;/) failed += $(i - 1)
      if ($i ~ /^ignored;/) ignored += $(i - 1)
    }
  }
  /^test .* \.\.\. ignored/ {
    name = $0; sub(/^test /, "", name); sub(/ \.\.\. ignored.*/, "", name)
    why = $0; sub(/.* \.\.\. ignored/, "", why); sub(/^, /, "", why)
    if (why == "") why = "no reason given"
    if (!(why in count)) order[++reasons] = why
    count[why]++
    names[why] = names[why] "\n    " exe ": " name
  }
  /^test .* \.\.\. FAILED$/ {
    name = $0; sub(/^test /, "", name); sub(/ \.\.\. FAILED$/, "", name)
    failures = failures "\n    " exe ": " name
  }
  END {
    printf "\n== summary of %d test executables: %d passed, %d failed, %d ignored\n", runs, passed, failed, ignored
    for (r = 1; r <= reasons; r++) printf "ignored, %s (%d):%s\n", order[r], count[order[r]], names[order[r]]
    if (failures != "") printf "failed:%s\n", failures
  }
' "$log"

# The Python package, built from this checkout (its build reuses cargo's release build above).
echo "== python package"
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
  "pytest==8.3.3" "numpy==2.4.6" "pandas==2.3.3" "scikit-learn==1.7.2" "sympy==1.14.0" ./python
set +e
python3 -m pytest -q -rs python/tests
pystatus=$?
set -e
if [ "$status" -ne 0 ]; then exit "$status"; fi
exit "$pystatus"
