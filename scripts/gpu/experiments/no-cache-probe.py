#!/usr/bin/env python3
"""Is NVRTC slower than its own trace says where a driver is installed, even with
CUDA_CACHE_DISABLE=1? Compiles units of 8 random expression kernels and trivial one-kernel units
in process, in fresh processes, with NVRTC's `-no-cache` option or without, with the driver's
cache switched off through the environment or not, and says whether libcuda was loaded.

usage: no-cache-probe.py LIBNVRTC [UNITS [DIR_WITH_AN_EMPTY_libcuda.so.1]]
"""
import ctypes
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvrtc_units import compile_ms, unit

TRIVIAL = 'extern "C" __global__ void k(float* o) { o[threadIdx.x] = %d.0f; }\n'


def worker(lib, option, first_seed, units):
    nvrtc = ctypes.CDLL(lib)
    opts = [b"-arch=sm_90"] + ([option.encode()] if option else [])
    out = {}
    for kind in ("trivial", "unit8"):
        sources = (TRIVIAL % s if kind == "trivial" else unit(s) for s in range(first_seed, first_seed + units + 1))
        times = [compile_ms(nvrtc, src, opts) for src in sources]
        out[kind] = statistics.median(times[1:])
    maps = open("/proc/self/maps").read()
    print("%.1f %.1f %s" % (out["trivial"], out["unit8"], "libcuda" if "libcuda" in maps else "-"))


def main():
    if sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    lib, units = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8
    fakecuda = sys.argv[3] if len(sys.argv) > 3 else None
    seed = 1  # the same units in every variant: a cache that is not off shows as a fast repeat
    for rep in range(2):
        for disable, option, fake in (("1", "", None), ("1", "-no-cache", None), (None, "-no-cache", None),
                                      ("1", "", fakecuda)):
            env = dict(os.environ)
            if fake:  # an empty libcuda.so.1 first on the search path: NVRTC finds no driver
                env["LD_LIBRARY_PATH"] = fake + ":" + env.get("LD_LIBRARY_PATH", "")
            env.pop("CUDA_CACHE_DISABLE", None)
            if disable:
                env["CUDA_CACHE_DISABLE"] = disable
            r = subprocess.run([sys.executable, __file__, "--worker", lib, option, str(seed), str(units)],
                               env=env, capture_output=True, text=True)
            print("CUDA_CACHE_DISABLE=%-5s option=%-10s fake driver=%-3s trivial / unit8 ms: %s %s"
                  % (disable, option or "-", "yes" if fake else "no", r.stdout.strip(), r.stderr.strip()[-200:]), flush=True)


if __name__ == "__main__":
    main()
