#!/usr/bin/env bash
# The wide fitting kernels' products on the tensor cores against one sum per thread
# (GPFARM_FIT_MMA=0), one build, same host: the fitting and GPU worker tests, then Friedman-1 over
# 100,000 cases, population 1000, GENS (10) generations, seed 1, each setting in turn ROUNDS (2)
# times, then one profiled generation of each (every width's launch waited for and timed).
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
TESTS="fit gpu_worker" bash "$here/../harness/tests.sh"
CONFIGS="GPFARM_FIT_MMA=0 new" ROUNDS=${ROUNDS:-2} GENS=${GENS:-10} bash "$here/fit-tuning.sh"
CASES_LIST=100000 GENS=1 PROFILE=1 bash "$here/fit-profile.sh"
GPFARM_FIT_MMA=0 TAG=_nomma CASES_LIST=100000 GENS=1 PROFILE=1 bash "$here/fit-profile.sh"
