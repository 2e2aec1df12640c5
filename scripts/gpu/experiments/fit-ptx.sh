#!/usr/bin/env bash
# The PTX route's own fitting kernels on the GPU host: the fitting tests (TESTS, default "fit"),
# then fitting's steps (`gpfarm bench --param-steps --fit`: the interpreter's fitting kernels,
# NVRTC-compiled ones and the PTX route's, EXPRESSIONS and POINTS), with the compute cache off.
# STAGES ("tests steps") picks what runs.
set -uo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
source "$here/../harness/env.sh"
export CUDA_CACHE_DISABLE=1
if [[ " ${STAGES:-tests steps} " == *" tests "* ]]; then
  TESTS=${TESTS:-fit} bash "$here/../harness/tests.sh"
fi
if [[ " ${STAGES:-tests steps} " == *" steps "* ]]; then
  FIT=1 EXPRESSIONS=${EXPRESSIONS:-100,1000} POINTS=${POINTS:-100000,1000000} STEPS=${STEPS:-20} \
    TIMEOUT=${TIMEOUT:-400} bash "$here/param-steps.sh"
fi
