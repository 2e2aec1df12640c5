#!/usr/bin/env python3
"""Does `tune_allocator` (toolchain/src/lib.rs) pay? Compiles random expression units in process
through NVRTC with glibc's default malloc settings and with the ones gpfarm sets, in fresh
processes, one at a time and 16 at once (as the farm runs), with the CUDA driver's compute cache
off. Prints one line per (variant, processes) with the median ms per unit.

usage: allocator-probe.py LIBNVRTC [UNITS_PER_PROCESS]
"""
import ctypes
import os
import random
import statistics
import subprocess
import sys
import time

FUNCS = ["sinf", "expf", "tanhf", "sqrtf(fabsf", "logf(fabsf"]
CLOSE = {"sqrtf(fabsf": "))", "logf(fabsf": ") + 1.0f)"}


def expr(rng, depth):
    if depth == 0 or rng.random() < 0.25:
        return "x" if rng.random() < 0.5 else "%.2ff" % rng.uniform(0, 10)
    k = rng.randrange(6)
    if k <= 3:
        return "(%s %s %s)" % (expr(rng, depth - 1), "+-*/"[rng.randrange(4)], expr(rng, depth - 1))
    f = FUNCS[rng.randrange(len(FUNCS))]
    return f + "(" + expr(rng, depth - 1) + CLOSE.get(f, ")")


def unit(seed, kernels=8):
    rng = random.Random(seed)
    return "".join(
        'extern "C" __global__ void k%d(const float* __restrict__ X, float* __restrict__ Y, int n)\n'
        "{ int c = blockIdx.x * blockDim.x + threadIdx.x; if (c >= n) return; float x = X[c]; Y[c] = %s; }\n"
        % (i, expr(rng, 6))
        for i in range(kernels)
    )


def worker(lib, tuned, first_seed, units):
    if tuned:
        libc = ctypes.CDLL("libc.so.6")
        # The values tune_allocator sets: M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_TOP_PAD.
        libc.mallopt(-3, 32 << 20)
        libc.mallopt(-1, 2**31 - 1)
        libc.mallopt(-2, 256 << 20)
    nvrtc = ctypes.CDLL(lib)
    opts = (ctypes.c_char_p * 1)(b"-arch=sm_90")
    times = []
    for s in range(first_seed, first_seed + units + 1):
        prog = ctypes.c_void_p()
        src = unit(s).encode()
        t = time.perf_counter()
        assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"u.cu", 0, None, None) == 0
        rc = nvrtc.nvrtcCompileProgram(prog, 1, opts)
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
        times.append((time.perf_counter() - t) * 1000)
        assert rc == 0 and size.value > 0, f"compile failed: {rc}"
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
