#!/usr/bin/env python3
"""Registers, spills and shared memory of each fitting kernel of Friedman-1, as ptxas reports
them through NVRTC (no GPU needed): the source from `cargo run --release -p gpfarm-kernels
--example fit_source`, compiled for sm_90 by the pinned NVRTC in .toolchain (installed by
scripts/install-toolchain.sh). Prints ptxas's lines for each kernel.
Usage: python3 scripts/cpu/ptxas-report.py [ARCH, default 90]"""
import ctypes
import os
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
lib_dir = os.path.join(root, ".toolchain", "site", "nvidia", "cu13", "lib")
if not os.path.isdir(lib_dir):
    sys.exit(f"no NVRTC under {lib_dir}: run scripts/install-toolchain.sh first")
# NVRTC loads its builtins library by name: load it first from the same folder.
ctypes.CDLL(os.path.join(lib_dir, "libnvrtc-builtins.so.13.0"), mode=ctypes.RTLD_GLOBAL)
nvrtc = ctypes.CDLL(os.path.join(lib_dir, "libnvrtc.so.13"))
source = subprocess.run(
    ["cargo", "run", "--quiet", "--release", "-p", "gpfarm-kernels", "--example", "fit_source"],
    cwd=root, check=True, capture_output=True,
).stdout
arch = sys.argv[1] if len(sys.argv) > 1 else "90"
prog = ctypes.c_void_p()
if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source, b"fit.cu", 0, None, None) != 0:
    sys.exit("nvrtcCreateProgram failed")
opts = [f"--gpu-architecture=sm_{arch}".encode(), b"--ptxas-options=-v", b"-default-device", b"--std=c++17"]
rc = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
size = ctypes.c_size_t()
nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
log = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetProgramLog(prog, log)
for line in log.value.decode().splitlines():
    if "Compiling entry" in line or "registers" in line or "spill" in line or "error" in line:
        print(line)
sys.exit(0 if rc == 0 else f"NVRTC failed ({rc})")
