#!/usr/bin/env bash
# Installs NVRTC, nvJitLink and nvcc from NVIDIA's PyPI wheels into .toolchain/ of this checkout.
#
# Every wheel is pinned to the same 13.0 release: left unpinned, pip pulls a newer nvvm whose
# ptxas rejects the older PTX version ("Unsupported .version"). Needs only python3 with pip; no
# GPU, no CUDA, no root. Does nothing if the pinned set is already installed.
set -euo pipefail

version=13.0.88
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$root/.toolchain"
# The marker names the set: a new wheel in the set gets a new marker, so that an install made
# before it (which lacks the wheel) is redone.
marker="$dest/site/.gpfarm-cuda-$version-nvjitlink"

if [[ -f "$marker" ]]; then
    exit 0
fi
# --if-gpu: only where an NVIDIA GPU is (the CPU evaluator compiles nothing, so a machine without
# one needs no NVIDIA toolchain to evolve).
if [[ "${1:-}" == "--if-gpu" ]] && ! { [[ -e /dev/nvidiactl ]] || nvidia-smi -L >/dev/null 2>&1; }; then
    echo "no NVIDIA GPU here: nothing to install (the CPU evaluates; scripts/test.sh installs NVRTC for its compile tests)" >&2
    exit 0
fi
# A CUDA 13 toolkit on the machine (the GPU hosts have one) needs nothing installed.
for dir in "${GPFARM_CUDA:-}" "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    if [[ -n "$dir" && ( -f "$dir/lib64/libnvrtc.so.13" || -f "$dir/lib/libnvrtc.so.13" ) ]]; then
        echo "using the CUDA toolkit in $dir; nothing to install" >&2
        exit 0
    fi
done

echo "installing NVRTC, nvJitLink and nvcc $version wheels into $dest (about 230 MB download, 41 MB of it nvJitLink)" >&2
rm -rf "$dest/site.partial"
python3 -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
    --target "$dest/site.partial" \
    "nvidia-cuda-nvrtc==$version" \
    "nvidia-cuda-nvcc==$version" \
    "nvidia-nvvm==$version" \
    "nvidia-cuda-crt==$version" \
    "nvidia-cuda-runtime==$version" \
    "nvidia-nvjitlink==$version"
lib="$dest/site.partial/nvidia/cu13/lib"
for want in libnvrtc.so.13 libnvJitLink.so.13; do
    if [[ ! -f "$lib/$want" ]]; then
        echo "error: the wheels did not provide $lib/$want" >&2
        exit 1
    fi
done
rm -rf "$dest/site"
mv "$dest/site.partial" "$dest/site"
touch "$marker"
echo "installed: $dest/site/nvidia/cu13 (lib/libnvrtc.so.13, lib/libnvJitLink.so.13, bin/nvcc)" >&2
