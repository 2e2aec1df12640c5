#!/usr/bin/env bash
# The small-stack fitting kernels' forward switch over straight-line float ops only, against every
# op (GPFARM_FIT_STRAIGHT=0), one build, same host: Friedman-1 over 100,000 cases, population
# 1000, GENS (3) generations, seed 1, each setting in turn ROUNDS (2) times; one profiled
# generation of each; then the GPU-only test suites TESTS ("fit gpu_worker interpreter gpu").
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
CONFIGS="GPFARM_FIT_STRAIGHT=0 new" ROUNDS=${ROUNDS:-2} GENS=${GENS:-3} bash "$here/fit-tuning.sh"
CASES_LIST=100000 GENS=1 PROFILE=1 bash "$here/fit-profile.sh" | grep -v "^host\|^NVIDIA"
GPFARM_FIT_STRAIGHT=0 TAG=_wide CASES_LIST=100000 GENS=1 PROFILE=1 bash "$here/fit-profile.sh" | grep -v "^host\|^NVIDIA"
grep -h "width 4, small" "${OUT:-out}"/r/profile_new_100000_p1.err | head -4
grep -h "width 4, small" "${OUT:-out}"/r/profile_new_100000_p1_wide.err | head -4
TESTS=${TESTS:-"fit gpu_worker interpreter gpu"} bash "$here/../harness/tests.sh"
