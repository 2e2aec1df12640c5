#!/usr/bin/env python3
"""Does `tune_allocator` (toolchain/src/lib.rs) pay? Compiles random expression units in process
through NVRTC with glibc's default malloc settings and with the ones gpfarm sets, in fresh
processes, one at a time and 16 at once (as the farm runs), with the CUDA driver's compute cache
off. Prints one line per (variant, processes) with the median ms per unit.

usage: allocator-probe.py LIBNVRTC [UNITS_PER_PROCESS]
"""
import ctypes
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvrtc_units import compile_ms, unit


def worker(lib, tuned, first_seed, units):
    if tuned:
        libc = ctypes.CDLL("libc.so.6")
        # The values tune_allocator sets: M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_TOP_PAD.
        libc.mallopt(-3, 32 << 20)
        libc.mallopt(-1, 2**31 - 1)
        libc.mallopt(-2, 256 << 20)
    nvrtc = ctypes.CDLL(lib)
    times = [compile_ms(nvrtc, unit(s), [b"-arch=sm_90"]) for s in range(first_seed, first_seed + units + 1)]
    print(" ".join("%.1f" % x for x in times[1:]))  # the first compile of a process is a warm-up


def main():
    if sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3] == "tuned", int(sys.argv[4]), int(sys.argv[5]))
        return
    lib = sys.argv[1]
    units = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    env = dict(os.environ, CUDA_CACHE_DISABLE="1")
    for procs in (1, 16):
        for variant in ("default", "tuned", "default", "tuned"):
            t = time.perf_counter()
            ps = [
                subprocess.Popen(
                    [sys.executable, __file__, "--worker", lib, variant, str(1000 * p + 1), str(units)],
                    stdout=subprocess.PIPE, env=env, text=True)
                for p in range(procs)
            ]
            ms = [float(x) for p in ps for x in p.communicate()[0].split()]
            wall = time.perf_counter() - t
            print("%-8s processes=%-2d units=%-3d median %.1f ms/unit, mean %.1f, wall %.1f s"
                  % (variant, procs, len(ms), statistics.median(ms), statistics.mean(ms), wall), flush=True)


if __name__ == "__main__":
    main()
