#!/usr/bin/env bash
# Installs Open MPI (mpirun, mpicc, its headers) and libclang from the distribution's packages,
# which a build with `--features mpi` needs (the mpi crate generates its bindings with libclang
# and finds MPI through mpicc). Does nothing if they are there.
set -euo pipefail
if command -v mpicc > /dev/null && command -v mpirun > /dev/null \
  && compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" > /dev/null; then
  exit 0
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "installing Open MPI and libclang (Debian: openmpi-bin libopenmpi-dev libclang-dev)" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq > /dev/null
$sudo apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev libclang-dev > /dev/null
