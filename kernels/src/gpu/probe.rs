//! Whether this process has a GPU: how many devices the driver sees, and the first one's name
//! and compute capability.
//!
//! Both answers are safe to ask on any machine: without a driver library they say so rather than
//! fail to load. Must never panic, and never open a context to ask: creating one (and destroying
//! it) costs a few hundred milliseconds, paid on every run of a process that runs again and again
//! (a fit after a fit in Python) and at every start of a GPU worker.

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
    use cudarc::driver::result::device;
    use cudarc::driver::sys::CUdevice_attribute as A;
    let dev = device::get(0).map_err(driver)?;
    let name = device::get_name(dev).map_err(driver)?;
    // SAFETY: `dev` is the device the driver returned for ordinal 0 just above.
    let (major, minor) = unsafe {
        (
            device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(driver)?,
            device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(driver)?,
        )
    };
    Ok((name, (major, minor)))
}
