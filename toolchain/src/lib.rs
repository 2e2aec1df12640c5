//! Where NVRTC and nvcc come from, and compiling CUDA C with NVRTC.
//!
//! [`Toolchain::discover`] looks, in order, at an explicit setting (a flag, or `GPFARM_CUDA`),
//! a CUDA toolkit on the machine (`CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda`), and the
//! project-local directory `.toolchain/` that `scripts/install-toolchain.sh` fills with NVIDIA's
//! PyPI wheels pinned to one 13.0 release. [`nvrtc::Nvrtc`] loads the library found there by
//! absolute path, with its builtins library first, so no `LD_LIBRARY_PATH` is needed and a
//! missing or mismatched library is an error that says what to install, never a panic.

pub mod locate;
pub mod nvrtc;

pub use locate::{Origin, Toolchain, ToolchainError};
pub use nvrtc::{Compiled, Nvrtc, NvrtcFailure, Output};

/// NVRTC major version this build speaks (the pinned wheels are 13.0.88).
pub const NVRTC_MAJOR: u32 = 13;

/// What to tell a user who has no usable CUDA 13 toolchain.
pub const INSTALL_HINT: &str = "install the pinned NVRTC 13.0 wheels with `scripts/install-toolchain.sh` \
     (no GPU or CUDA needed), or point --cuda / GPFARM_CUDA at a CUDA 13 toolkit";

/// Keeps NVRTC's memory in this process between compiles.
///
/// NVRTC allocates and frees hundreds of MB per compile. With glibc's defaults, large blocks are
/// `mmap`ed and `munmap`ed each time and the heap top is trimmed back, so every compile faults all
/// of its memory in again; on the GPU host (a virtual machine) that made a compile of ten
/// kernels 13x slower (see `benches/results/2026-11-22-h100/`). Raising the mmap threshold to its
/// maximum, never trimming, and padding heap growth lets freed memory be reused without faults.
/// It changes nothing NVRTC computes. Call it before the first compile; it affects the whole
/// process.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc malloc parameters; each value is in its documented range.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 256 << 20);
    }
}
