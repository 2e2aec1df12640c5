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
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module

unit = import_module("allocator-probe").unit


def worker(lib, first_seed, units):
    nvrtc = ctypes.CDLL(lib)

    def compile_ms(src, opts):
        arr = (ctypes.c_char_p * len(opts))(*opts)
        prog = ctypes.c_void_p()
        t = time.perf_counter()
        assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"u.cu", 0, None, None) == 0
        rc = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
        nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
        assert rc == 0, rc
        return (time.perf_counter() - t) * 1000

    plain, option = [b"-arch=sm_90"], [b"-arch=sm_90", b"-no-cache"]
    compile_ms(unit(0).encode(), plain)  # warm-up
    for i, s in enumerate(range(first_seed, first_seed + units)):
        src = unit(s).encode()
        if i % 2:
            b = compile_ms(src, option); a = compile_ms(src, plain)
        else:
            a = compile_ms(src, plain); b = compile_ms(src, option)
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
