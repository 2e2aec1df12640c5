//! Where NVRTC, nvJitLink and nvcc come from, and compiling CUDA C with NVRTC and PTX with
//! nvJitLink.
//!
//! [`Toolchain::discover`] looks, in order, at an explicit setting (a flag, or `GPFARM_CUDA`),
//! a CUDA toolkit on the machine (`CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda`), and the
//! project-local directory `.toolchain/` that `scripts/install-toolchain.sh` fills with NVIDIA's
//! PyPI wheels pinned to one 13.0 release. [`nvrtc::Nvrtc`] loads the library found there by
//! absolute path, with its builtins library first, so no `LD_LIBRARY_PATH` is needed and a
//! missing or mismatched library is an error that says what to install, never a panic.
//! [`nvjitlink::NvJitLink`] is loaded the same way, from beside NVRTC, for the PTX route.
//! [`compile::WarmNvrtc`] is the one compile layer above both: allocator tuned, NVRTC warmed, and
//! [`WarmNvrtc::compile_unit`] turning a unit into the wire's `UnitResult` for the daemon and the
//! in-process compilers alike.

pub mod compile;
pub mod locate;
pub mod nvjitlink;
pub mod nvrtc;

pub use compile::{
    Allocator, LinkError, Linked, NO_LINKER, PTX_IN_JIT_MODE, PtxLinker, StartError, WarmNvrtc,
    compile_math_library, library_options, link_options, nvrtc_options,
};
pub use locate::{Origin, PYTHON_WHEELS_VAR, Toolchain, ToolchainError};
pub use nvjitlink::{Input, JitLinkFailure, JitLinkLoadError, JitLinked, NVJITLINK_HINT, NvJitLink};
pub use nvrtc::{Compiled, LoadError, Nvrtc, NvrtcFailure, Output};

/// NVRTC major version this build speaks (the pinned wheels are 13.0.88).
pub const NVRTC_MAJOR: u32 = 13;

/// What to tell a user who has no usable CUDA 13 toolchain.
pub const INSTALL_HINT: &str = "install the pinned NVRTC 13.0 wheels with `scripts/install-toolchain.sh` \
     (no GPU or CUDA needed; from Python, `pip install 'gpfarm[cuda]'`), or point --cuda / GPFARM_CUDA at a \
     CUDA 13 toolkit; or evaluate without compiling: `--route cpu` (Python: `route=\"cpu\"`)";

/// The environment variable that switches the CUDA driver's compute cache on (`0`) or off (`1`).
pub const DRIVER_CACHE_VAR: &str = "CUDA_CACHE_DISABLE";

/// What [`DRIVER_CACHE_VAR`] should be set to, given its current value: `Some("1")` (switch the
/// driver's compute cache off) when the environment does not decide, `None` when it does.
pub fn driver_cache_setting(current: Option<&std::ffi::OsStr>) -> Option<&'static str> {
    current.is_none().then_some("1")
}

/// Switches the CUDA driver's compute cache off for this process and every process it starts,
/// unless the environment already sets [`DRIVER_CACHE_VAR`] (to anything). Returns whether it
/// did.
///
/// Where a CUDA driver is installed, NVRTC 13 keeps the machine code of every translation unit it
/// compiles in the driver's compute cache (`~/.nv/ComputeCache`, 256 MB by default) and serves a
/// byte-identical unit from there, several times faster than compiling it (docs/measured.md
/// gives the figure). Left on, a benchmark that compiles the same population twice, or a run
/// repeated with the same seed, measures that cache instead of the compiler, and a run's speed
/// depends on what earlier runs left behind. gpfarm has its own caches, keyed per individual: the
/// fitness memo and `--disk-cache`. `CUDA_CACHE_DISABLE=0` keeps the driver's cache.
///
/// # Safety
/// Sets an environment variable: call it before any other thread starts.
pub unsafe fn disable_driver_cache() -> bool {
    let Some(value) = driver_cache_setting(std::env::var_os(DRIVER_CACHE_VAR).as_deref()) else {
        return false;
    };
    // SAFETY: the caller guarantees that no other thread runs yet.
    unsafe { std::env::set_var(DRIVER_CACHE_VAR, value) };
    true
}

/// Keeps NVRTC's memory in this process between compiles.
///
/// NVRTC allocates and frees hundreds of MB per compile. With glibc's defaults, large blocks are
/// `mmap`ed and `munmap`ed each time and the heap top is trimmed back, so every compile faults all
/// of its memory in again. Raising the mmap threshold to its maximum, never trimming, and padding
/// heap growth lets freed memory be reused without faults. What it saved was measured with the
/// CUDA driver's cache on, which served repeated units in a few ms; with that cache off it makes
/// no measurable difference (docs/measured.md gives the figures). It costs nothing measurable
/// either, and it changes nothing NVRTC computes. Call it before the first compile; it affects
/// the whole process.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc malloc parameters; each value is in its documented range.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 256 << 20);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_driver_cache_is_switched_off_unless_the_environment_decides() {
        assert_eq!(driver_cache_setting(None), Some("1"));
        assert_eq!(driver_cache_setting(Some(OsStr::new("0"))), None);
        assert_eq!(driver_cache_setting(Some(OsStr::new("1"))), None);
        assert_eq!(driver_cache_setting(Some(OsStr::new(""))), None);
    }
}
