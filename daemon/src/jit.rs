//! The paper's second stage: PTX to CUBIN by the CUDA driver's linker, in the daemon's own
//! context. Present only where a GPU and its driver are.

use std::ffi::{CStr, c_char, c_uint, c_void};

use cudarc::driver::sys;

/// A CUDA context on device 0, held for the daemon's lifetime.
pub struct Jit {
    _ctx: sys::CUcontext,
    /// The GPU's name.
    pub gpu: String,
}

fn check(r: sys::CUresult, what: &str) -> Result<(), String> {
    if r == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(format!("{what} failed: {r:?}")) }
}

impl Jit {
    /// Creates the context if a driver and a device are present.
    pub fn open() -> Result<Jit, String> {
        // SAFETY: probing for the driver library only dlopens it.
        if !unsafe { sys::is_culib_present() } {
            return Err("no CUDA driver (libcuda.so) on this machine".into());
        }
        // SAFETY: plain driver API calls with valid out-pointers, on this thread only.
        unsafe {
            check(sys::cuInit(0), "cuInit")?;
            let mut count = 0;
            check(sys::cuDeviceGetCount(&mut count), "cuDeviceGetCount")?;
            if count < 1 {
                return Err("the CUDA driver sees no GPU".into());
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

    /// Links PTX into a CUBIN for the context's device; returns the CUBIN and the linker's log.
    pub fn link(&self, ptx: &[u8]) -> Result<(Vec<u8>, String), (String, String)> {
        let mut ptx = ptx.to_vec();
        ptx.push(0);
        let mut log = vec![0u8; 16 * 1024];
        let mut opts = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut vals = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
        let log_text = |log: &[u8]| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            String::from_utf8_lossy(&log[..end]).into_owned()
        };
        // SAFETY: the context is current on this (the daemon's only) thread; option arrays and
        // the log buffer outlive the link state, which is destroyed before returning; the CUBIN
        // the linker owns is copied out before cuLinkDestroy.
        unsafe {
            let mut state = std::ptr::null_mut();
            let r =
                sys::cuLinkCreate_v2(opts.len() as c_uint, opts.as_mut_ptr(), vals.as_mut_ptr(), &mut state);
            check(r, "cuLinkCreate").map_err(|e| (e, String::new()))?;
            let r = sys::cuLinkAddData_v2(
                state,
                sys::CUjitInputType::CU_JIT_INPUT_PTX,
                ptx.as_mut_ptr().cast(),
                ptx.len(),
                c"unit.ptx".as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            let mut out = Err((String::new(), String::new()));
            if r == sys::CUresult::CUDA_SUCCESS {
                let mut cubin = std::ptr::null_mut();
                let mut size = 0usize;
                let r = sys::cuLinkComplete(state, &mut cubin, &mut size);
                if r == sys::CUresult::CUDA_SUCCESS && !cubin.is_null() {
                    out = Ok(std::slice::from_raw_parts(cubin as *const u8, size).to_vec());
                } else {
                    out = Err((format!("cuLinkComplete failed: {r:?}"), String::new()));
                }
            } else {
                out = out.or(Err((format!("cuLinkAddData failed: {r:?}"), String::new())));
            }
            sys::cuLinkDestroy(state);
            let text = log_text(&log);
            out.map(|c| (c, text.clone())).map_err(|(e, _)| (e, text))
        }
    }
}
