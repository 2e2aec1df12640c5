//! The paper's second stage: PTX to CUBIN by the CUDA driver's linker, in the daemon's own
//! context. Present only where a GPU and its driver are; it is the daemon's [`PtxLinker`] for
//! the toolchain's compile layer. It must never be used from a thread other than the one that
//! opened it (the context is current there only).

use std::ffi::{CStr, c_char, c_uint, c_void};

use cudarc::driver::sys;
use gpfarm_toolchain::{LinkError, Linked, PtxLinker};
use thiserror::Error;

/// Why the driver could not give a context or a link.
#[derive(Debug, Error)]
pub enum JitError {
    /// `libcuda.so` is not on this machine.
    #[error("no CUDA driver (libcuda.so) on this machine")]
    NoDriver,
    /// The driver is there but sees no device.
    #[error("the CUDA driver sees no GPU")]
    NoGpu,
    /// A driver call returned an error.
    #[error("{call} failed: {result:?}")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// What it returned.
        result: sys::CUresult,
    },
    /// The linker reported success but handed back no CUBIN.
    #[error("cuLinkComplete returned no CUBIN")]
    NoCubin,
}

/// A CUDA context on device 0, held for the daemon's lifetime.
pub struct Jit {
    _ctx: sys::CUcontext,
    /// The GPU's name.
    pub gpu: String,
}

fn check(result: sys::CUresult, call: &'static str) -> Result<(), JitError> {
    if result == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(JitError::Driver { call, result }) }
}

impl Jit {
    /// Creates the context if a driver and a device are present.
    pub fn open() -> Result<Jit, JitError> {
        // SAFETY: probing for the driver library only dlopens it.
        if !unsafe { sys::is_culib_present() } {
            return Err(JitError::NoDriver);
        }
        // SAFETY: plain driver API calls with valid out-pointers, on this thread only.
        unsafe {
            check(sys::cuInit(0), "cuInit")?;
            let mut count = 0;
            check(sys::cuDeviceGetCount(&mut count), "cuDeviceGetCount")?;
            if count < 1 {
                return Err(JitError::NoGpu);
            }
            let mut dev = 0;
            check(sys::cuDeviceGet(&mut dev, 0), "cuDeviceGet")?;
            let mut name = [0 as c_char; 128];
            check(sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev), "cuDeviceGetName")?;
            let gpu = CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
            let mut ctx = std::ptr::null_mut();
            check(sys::cuDevicePrimaryCtxRetain(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
            check(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
            Ok(Jit { _ctx: ctx, gpu })
        }
    }

    /// Links PTX into a CUBIN for the context's device; the log comes back either way.
    fn link_ptx(&self, ptx: &[u8]) -> (Result<Vec<u8>, JitError>, String) {
        let mut ptx = ptx.to_vec();
        ptx.push(0);
        let mut log = vec![0u8; 16 * 1024];
        let mut opts = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut vals = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
        // SAFETY: the context is current on this (the daemon's only) thread; option arrays and
        // the log buffer outlive the link state, which is destroyed before returning; the CUBIN
        // the linker owns is copied out before cuLinkDestroy.
        let cubin = unsafe {
            let mut state = std::ptr::null_mut();
            let r =
                sys::cuLinkCreate_v2(opts.len() as c_uint, opts.as_mut_ptr(), vals.as_mut_ptr(), &mut state);
            if let Err(e) = check(r, "cuLinkCreate") {
                return (Err(e), String::new());
            }
            let added = check(
                sys::cuLinkAddData_v2(
                    state,
                    sys::CUjitInputType::CU_JIT_INPUT_PTX,
                    ptx.as_mut_ptr().cast(),
                    ptx.len(),
                    c"unit.ptx".as_ptr(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                ),
                "cuLinkAddData",
            );
            let cubin = added.and_then(|()| {
                let mut cubin = std::ptr::null_mut();
                let mut size = 0usize;
                check(sys::cuLinkComplete(state, &mut cubin, &mut size), "cuLinkComplete")?;
                if cubin.is_null() {
                    return Err(JitError::NoCubin);
                }
                Ok(std::slice::from_raw_parts(cubin as *const u8, size).to_vec())
            });
            sys::cuLinkDestroy(state);
            cubin
        };
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        (cubin, String::from_utf8_lossy(&log[..end]).into_owned())
    }
}

impl PtxLinker for Jit {
    fn link(&self, ptx: &[u8]) -> Result<Linked, LinkError> {
        match self.link_ptx(ptx) {
            (Ok(cubin), log) => Ok(Linked { cubin, log }),
            (Err(e), log) => Err(LinkError { cause: Box::new(e), log }),
        }
    }
}
