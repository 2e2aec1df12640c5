"""Shared by the in-process NVRTC probes (allocator-probe.py, no-cache-probe.py,
no-cache-paired.py): seeded units of random expression kernels, and one timed compile."""
import ctypes
import random
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
    """The source of a unit of `kernels` random expression kernels, the same for the same seed."""
    rng = random.Random(seed)
    return "".join(
        'extern "C" __global__ void k%d(const float* __restrict__ X, float* __restrict__ Y, int n)\n'
        "{ int c = blockIdx.x * blockDim.x + threadIdx.x; if (c >= n) return; float x = X[c]; Y[c] = %s; }\n"
        % (i, expr(rng, 6))
        for i in range(kernels)
    )


def compile_ms(nvrtc, source, options):
    """Compiles `source` (str) with `options` (list of bytes) through the loaded NVRTC library;
    returns the milliseconds from creating the program to destroying it."""
    opts = (ctypes.c_char_p * len(options))(*options)
    prog = ctypes.c_void_p()
    t = time.perf_counter()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"u.cu", 0, None, None) == 0
    rc = nvrtc.nvrtcCompileProgram(prog, len(options), opts)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    assert rc == 0, f"compile failed: {rc}"
    return (time.perf_counter() - t) * 1000
