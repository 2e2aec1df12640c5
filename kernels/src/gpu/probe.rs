//! Whether this process has a GPU: how many devices the driver sees, and the first one's name
//! and compute capability.
//!
//! Both answers are safe to ask on any machine: without a driver library they say so rather than
//! fail to load. Must never panic, and never keep the context it opens to ask.

use cudarc::driver::CudaContext;

use super::{GpuError, driver};

/// How many GPUs this process sees (0 without a driver). Never panics.
pub fn device_count() -> usize {
    // SAFETY: only dlopens the driver library to see whether it exists.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// The first GPU's name and compute capability, or why there is none. Never panics.
pub fn probe() -> Result<(String, (i32, i32)), GpuError> {
    // SAFETY: only dlopens the driver library to see whether it exists.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::NoGpu("the CUDA driver (libcuda.so) is not installed".into()));
    }
    let count = CudaContext::device_count().map_err(|e| GpuError::NoGpu(format!("{e:?}")))?;
    if count < 1 {
        return Err(GpuError::NoGpu("the CUDA driver sees no device".into()));
    }
    let ctx = CudaContext::new(0).map_err(|e| GpuError::NoGpu(format!("{e:?}")))?;
    Ok((ctx.name().map_err(driver)?, ctx.compute_capability().map_err(driver)?))
}
