#!/usr/bin/env python3
"""Paired test of NVRTC's -no-cache option with CUDA_CACHE_DISABLE=1: each process compiles each
of its units twice, with and without the option, in alternating order; PROCS processes at once.
Prints the median per-unit difference and each variant's median.

usage: no-cache-paired.py LIBNVRTC UNITS PROCS
"""
import ctypes
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvrtc_units import compile_ms, unit


def worker(lib, first_seed, units):
    nvrtc = ctypes.CDLL(lib)

    plain, option = [b"-arch=sm_90"], [b"-arch=sm_90", b"-no-cache"]
    compile_ms(nvrtc, unit(0), plain)  # warm-up
    for i, s in enumerate(range(first_seed, first_seed + units)):
        src = unit(s)
        if i % 2:
            b = compile_ms(nvrtc, src, option); a = compile_ms(nvrtc, src, plain)
        else:
            a = compile_ms(nvrtc, src, plain); b = compile_ms(nvrtc, src, option)
        print("%.2f %.2f" % (a, b))


def main():
    if sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    lib, units, procs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    env = dict(os.environ, CUDA_CACHE_DISABLE="1")
    ps = [subprocess.Popen([sys.executable, __file__, "--worker", lib, str(100 * p + 1), str(units)],
                           stdout=subprocess.PIPE, env=env, text=True) for p in range(procs)]
    pairs = [tuple(map(float, l.split())) for p in ps for l in p.communicate()[0].split("\n") if l]
    d = [b - a for a, b in pairs]
    print("processes=%d pairs=%d: without option median %.1f ms, with -no-cache %.1f ms, "
          "median difference %+.1f ms (%+.1f%%), with faster in %d of %d"
          % (procs, len(pairs), statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs),
             statistics.median(d), 100 * statistics.median(b / a - 1 for a, b in pairs),
             sum(b < a for a, b in pairs), len(pairs)), flush=True)


if __name__ == "__main__":
    main()
