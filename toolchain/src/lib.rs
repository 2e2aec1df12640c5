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
