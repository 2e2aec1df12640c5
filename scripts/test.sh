#!/usr/bin/env bash
# The test suite, runnable on a fresh machine without GPU or CUDA: installs the pinned NVRTC
# wheels if no CUDA 13 toolkit is found, then runs every test. GPU tests skip with a printed
# reason when no GPU is present; NVRTC tests may not skip here (GPFARM_REQUIRE_NVRTC=1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-toolchain.sh
export GPFARM_REQUIRE_NVRTC=1
cargo test --workspace --release "$@"
