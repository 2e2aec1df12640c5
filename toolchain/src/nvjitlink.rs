//! nvJitLink, loaded at run time from an absolute path, as NVRTC is ([`crate::nvrtc`]).
//!
//! nvJitLink assembles PTX (it carries its own ptxas) and links it with relocatable CUBINs into
//! one CUBIN, in this process, without a GPU, a driver or a CUDA context. The PTX route uses it
//! for every unit: the unit's PTX plus the math library's CUBIN ([`crate::compile`]).
//!
//! The library exports each function twice: under its plain name, kept for programs built
//! against nvJitLink 12.0, and under a name carrying the API version (`__nvJitLinkCreate_13_0`),
//! which is what a program compiled with CUDA 13's `nvJitLink.h` calls. The versioned names are
//! bound here, so a library of another API version fails to load instead of misbehaving.
//! Each link owns its handle; handles are never shared between threads.

use std::ffi::{CString, c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpfarm_protocol::FailureKind;
use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use thiserror::Error;

use crate::{NVRTC_MAJOR, Toolchain};

type Handle = *mut c_void;
type Status = c_int;
const NVJITLINK_SUCCESS: Status = 0;
const NVJITLINK_ERROR_INTERNAL: Status = 6;

/// What a missing or wrong nvJitLink should make the user do.
pub const NVJITLINK_HINT: &str = "the PTX route needs nvJitLink 13 (libnvJitLink.so.13) beside NVRTC: \
     run `scripts/install-toolchain.sh` (it adds the pinned nvidia-nvjitlink wheel), or use a CUDA 13 \
     toolkit, which ships it in lib64/";

/// The kind of one input of a link (`nvJitLinkInputType` in nvJitLink.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Input {
    /// A CUBIN (ELF), relocatable or not (`NVJITLINK_INPUT_CUBIN`).
    Cubin = 1,
    /// PTX text (`NVJITLINK_INPUT_PTX`).
    Ptx = 2,
}

/// `nvJitLinkResult` values, by name (nvJitLink.h, 13.0).
fn result_name(status: Status) -> &'static str {
    const NAMES: [&str; 20] = [
        "NVJITLINK_SUCCESS",
        "NVJITLINK_ERROR_UNRECOGNIZED_OPTION",
        "NVJITLINK_ERROR_MISSING_ARCH",
        "NVJITLINK_ERROR_INVALID_INPUT",
        "NVJITLINK_ERROR_PTX_COMPILE",
        "NVJITLINK_ERROR_NVVM_COMPILE",
        "NVJITLINK_ERROR_INTERNAL",
        "NVJITLINK_ERROR_THREADPOOL",
        "NVJITLINK_ERROR_UNRECOGNIZED_INPUT",
        "NVJITLINK_ERROR_FINALIZE",
        "NVJITLINK_ERROR_NULL_INPUT",
        "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS",
        "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE",
        "NVJITLINK_ERROR_ARCH_MISMATCH",
        "NVJITLINK_ERROR_OUTDATED_LIBRARY",
        "NVJITLINK_ERROR_MISSING_FATBIN",
        "NVJITLINK_ERROR_UNRECOGNIZED_ARCH",
        "NVJITLINK_ERROR_UNSUPPORTED_ARCH",
        "NVJITLINK_ERROR_LTO_NOT_ENABLED",
        "",
    ];
    usize::try_from(status)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .filter(|n| !n.is_empty())
        .unwrap_or("an unknown nvJitLink error")
}

/// What a failed status means for the unit: its PTX (or what it links against) is wrong, or
/// something else is (the options, the library, memory).
fn failure_kind(status: Status) -> FailureKind {
    match status {
        // INVALID_INPUT, PTX_COMPILE, UNRECOGNIZED_INPUT, FINALIZE (e.g. an undefined symbol),
        // INCORRECT_INPUT_TYPE, ARCH_MISMATCH (a `.target` other than the link's).
        3 | 4 | 8 | 9 | 12 | 13 => FailureKind::Compilation,
        _ => FailureKind::Internal,
    }
}

#[derive(Clone, Copy)]
struct Fns {
    version: unsafe extern "C" fn(*mut c_uint, *mut c_uint) -> Status,
    create: unsafe extern "C" fn(*mut Handle, u32, *const *const c_char) -> Status,
    destroy: unsafe extern "C" fn(*mut Handle) -> Status,
    add_data: unsafe extern "C" fn(Handle, c_int, *const c_void, usize, *const c_char) -> Status,
    complete: unsafe extern "C" fn(Handle) -> Status,
    cubin_size: unsafe extern "C" fn(Handle, *mut usize) -> Status,
    cubin: unsafe extern "C" fn(Handle, *mut c_void) -> Status,
    error_log_size: unsafe extern "C" fn(Handle, *mut usize) -> Status,
    error_log: unsafe extern "C" fn(Handle, *mut c_char) -> Status,
    info_log_size: unsafe extern "C" fn(Handle, *mut usize) -> Status,
    info_log: unsafe extern "C" fn(Handle, *mut c_char) -> Status,
}

/// nvJitLink could not be loaded or is the wrong version.
#[derive(Debug, Error)]
pub enum JitLinkLoadError {
    /// The library is not where NVRTC is.
    #[error("{path} does not exist; {NVJITLINK_HINT}")]
    Missing {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// `dlopen` or `dlsym` failed.
    #[error("cannot load {path}; {NVJITLINK_HINT}")]
    Library {
        /// The library.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: libloading::Error,
    },
    /// The library is not nvJitLink 13.
    #[error(
        "{path} is nvJitLink {major}.{minor}, but gpfarm needs nvJitLink {NVRTC_MAJOR}.x; {NVJITLINK_HINT}"
    )]
    Version {
        /// The library.
        path: PathBuf,
        /// Its major version.
        major: u32,
        /// Its minor version.
        minor: u32,
    },
}

/// A successful link.
#[derive(Debug)]
pub struct JitLinked {
    /// The linked CUBIN.
    pub cubin: Vec<u8>,
    /// nvJitLink's info log (warnings), often empty.
    pub log: String,
    /// Time in `nvJitLinkCreate`, `nvJitLinkAddData` and `nvJitLinkComplete`: parsing,
    /// assembling (ptxas) and linking.
    pub link: Duration,
    /// Time fetching the CUBIN and the log.
    pub extract: Duration,
}

/// A failed link.
#[derive(Debug, Error)]
#[error("{message}")]
pub struct JitLinkFailure {
    /// Category: [`FailureKind::Compilation`] when the inputs are at fault.
    pub kind: FailureKind,
    /// One line: the failing call, its result and the error log's first error line.
    pub message: String,
    /// nvJitLink's error log, then its info log.
    pub log: String,
    /// Time spent before failing.
    pub link: Duration,
}

/// A loaded nvJitLink.
pub struct NvJitLink {
    fns: Fns,
    path: PathBuf,
    version: (u32, u32),
    _lib: Library,
}

impl NvJitLink {
    /// Loads `libnvJitLink.so.13` from the toolchain's library directory and checks that it is
    /// version 13.
    pub fn load(toolchain: &Toolchain) -> Result<NvJitLink, JitLinkLoadError> {
        NvJitLink::load_from(&toolchain.libnvjitlink())
    }

    /// Loads nvJitLink from `path`.
    pub fn load_from(path: &Path) -> Result<NvJitLink, JitLinkLoadError> {
        let path = path.to_path_buf();
        if !path.is_file() {
            return Err(JitLinkLoadError::Missing { path });
        }
        // SAFETY: loading NVIDIA's nvJitLink runs only its ELF initialisers, which have no
        // preconditions. RTLD_LOCAL: its symbols must not interpose on NVRTC's.
        let lib = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) }
            .map_err(|source| JitLinkLoadError::Library { path: path.clone(), source })?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is nvJitLink's C function of the signature declared in
                // `Fns` (nvJitLink.h of CUDA 13.0, API version 13_0).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|source| JitLinkLoadError::Library { path: path.clone(), source })?
            };
        }
        let fns = Fns {
            version: sym!("nvJitLinkVersion"),
            create: sym!("__nvJitLinkCreate_13_0"),
            destroy: sym!("__nvJitLinkDestroy_13_0"),
            add_data: sym!("__nvJitLinkAddData_13_0"),
            complete: sym!("__nvJitLinkComplete_13_0"),
            cubin_size: sym!("__nvJitLinkGetLinkedCubinSize_13_0"),
            cubin: sym!("__nvJitLinkGetLinkedCubin_13_0"),
            error_log_size: sym!("__nvJitLinkGetErrorLogSize_13_0"),
            error_log: sym!("__nvJitLinkGetErrorLog_13_0"),
            info_log_size: sym!("__nvJitLinkGetInfoLogSize_13_0"),
            info_log: sym!("__nvJitLinkGetInfoLog_13_0"),
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        unsafe { (fns.version)(&mut major, &mut minor) };
        if major != NVRTC_MAJOR {
            return Err(JitLinkLoadError::Version { path, major, minor });
        }
        Ok(NvJitLink { fns, path, version: (major, minor), _lib: lib })
    }

    /// (major, minor) of the loaded library.
    pub fn version(&self) -> (u32, u32) {
        self.version
    }

    /// Path of the loaded library.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Links `inputs` (name, kind, bytes; PTX without a trailing NUL) into one CUBIN with
    /// `options` (`-arch=sm_XX` among them). Every failure carries nvJitLink's error log.
    pub fn link(
        &self,
        options: &[String],
        inputs: &[(&str, Input, &[u8])],
    ) -> Result<JitLinked, JitLinkFailure> {
        let start = Instant::now();
        let fail =
            |kind, message: String, log: String| JitLinkFailure { kind, message, log, link: start.elapsed() };
        let options: Vec<CString> =
            options.iter().map(|o| CString::new(o.replace('\0', "")).unwrap_or_default()).collect();
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        // nvJitLink keeps the input names' pointers (its messages name inputs by them until the
        // handle is destroyed): they must outlive the handle (declared before it, so dropped after it).
        let names: Vec<CString> = inputs
            .iter()
            .map(|(name, _, _)| CString::new(name.replace('\0', "?")).unwrap_or_default())
            .collect();
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the option strings outlive the call.
        let status =
            unsafe { (self.fns.create)(&mut handle, option_ptrs.len() as u32, option_ptrs.as_ptr()) };
        if status != NVJITLINK_SUCCESS {
            // A handle that failed to be created may still hold the reason in its error log.
            let log = if handle.is_null() { String::new() } else { self.error_log(handle) };
            if !handle.is_null() {
                // SAFETY: created above, destroyed once.
                unsafe { (self.fns.destroy)(&mut handle) };
            }
            return Err(fail(failure_kind(status), self.message("nvJitLinkCreate", status, &log), log));
        }
        let handle = HandleGuard { handle, destroy: self.fns.destroy };
        for ((name, kind, data), cname) in inputs.iter().zip(&names) {
            let mut owned;
            let data: &[u8] = if *kind == Input::Ptx {
                if let Err(e) = std::str::from_utf8(data) {
                    return Err(fail(
                        FailureKind::InvalidSource,
                        format!("{name}: PTX is not valid UTF-8 at byte offset {}", e.valid_up_to()),
                        String::new(),
                    ));
                }
                if let Some(at) = data.iter().position(|&b| b == 0) {
                    return Err(fail(
                        FailureKind::InvalidSource,
                        format!("{name}: PTX contains a NUL byte at offset {at}"),
                        String::new(),
                    ));
                }
                owned = Vec::with_capacity(data.len() + 1);
                owned.extend_from_slice(data);
                owned.push(0);
                &owned
            } else {
                data
            };
            // SAFETY: live handle used by this thread only; `data` outlives the call (nvJitLink
            // copies the input), `cname` the handle.
            let status = unsafe {
                (self.fns.add_data)(
                    handle.handle,
                    *kind as c_int,
                    data.as_ptr().cast(),
                    data.len(),
                    cname.as_ptr(),
                )
            };
            if status != NVJITLINK_SUCCESS {
                let log = self.logs(handle.handle);
                let message = format!("{name}: {}", self.message("nvJitLinkAddData", status, &log));
                return Err(fail(failure_kind(status), message, log));
            }
        }
        // SAFETY: live handle with its inputs added.
        let status = unsafe { (self.fns.complete)(handle.handle) };
        let link = start.elapsed();
        let extract_start = Instant::now();
        if status != NVJITLINK_SUCCESS {
            let log = self.logs(handle.handle);
            // An undefined reference comes back as NVJITLINK_ERROR_INTERNAL (13.0.88), with the
            // input that made it in the log: that is the input's fault.
            let names_an_input = inputs.iter().any(|(name, _, _)| log.contains(&format!("in '{name}'")));
            let kind = if status == NVJITLINK_ERROR_INTERNAL && names_an_input {
                FailureKind::Compilation
            } else {
                failure_kind(status)
            };
            return Err(JitLinkFailure {
                kind,
                message: self.message("nvJitLinkComplete", status, &log),
                log,
                link,
            });
        }
        let mut size = 0usize;
        // SAFETY: completed handle, valid out-pointer.
        let status = unsafe { (self.fns.cubin_size)(handle.handle, &mut size) };
        let mut cubin = vec![0u8; size];
        let status = if status == NVJITLINK_SUCCESS && size > 0 {
            // SAFETY: `cubin` holds exactly the `size` bytes nvJitLink reported.
            unsafe { (self.fns.cubin)(handle.handle, cubin.as_mut_ptr().cast()) }
        } else {
            status
        };
        let log = self.info_log(handle.handle);
        if status != NVJITLINK_SUCCESS || cubin.is_empty() {
            let message = if status == NVJITLINK_SUCCESS {
                "nvJitLink produced an empty CUBIN".to_owned()
            } else {
                self.message("nvJitLinkGetLinkedCubin", status, "")
            };
            return Err(JitLinkFailure { kind: FailureKind::Internal, message, log, link });
        }
        Ok(JitLinked { cubin, log, link, extract: extract_start.elapsed() })
    }

    /// `call: RESULT_NAME: first error line of the log`.
    fn message(&self, call: &str, status: Status, log: &str) -> String {
        let first = log.lines().find(|l| l.to_ascii_lowercase().contains("error")).unwrap_or("").trim();
        if first.is_empty() {
            format!("{call} failed: {}", result_name(status))
        } else {
            format!("{call} failed: {}: {first}", result_name(status))
        }
    }

    /// The error log, then the info log if it says anything.
    fn logs(&self, handle: Handle) -> String {
        let mut log = self.error_log(handle);
        let info = self.info_log(handle);
        if !info.is_empty() {
            if !log.is_empty() && !log.ends_with('\n') {
                log.push('\n');
            }
            log.push_str(&info);
        }
        log
    }

    fn error_log(&self, handle: Handle) -> String {
        read_log(handle, self.fns.error_log_size, self.fns.error_log)
    }

    fn info_log(&self, handle: Handle) -> String {
        read_log(handle, self.fns.info_log_size, self.fns.info_log)
    }
}

fn read_log(
    handle: Handle,
    size_fn: unsafe extern "C" fn(Handle, *mut usize) -> Status,
    get_fn: unsafe extern "C" fn(Handle, *mut c_char) -> Status,
) -> String {
    let mut size = 0usize;
    // SAFETY: live handle, valid out-pointer.
    if unsafe { size_fn(handle, &mut size) } != NVJITLINK_SUCCESS || size == 0 {
        return String::new();
    }
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` holds exactly the `size` bytes nvJitLink reported it will write.
    if unsafe { get_fn(handle, buf.as_mut_ptr().cast()) } != NVJITLINK_SUCCESS {
        return String::new();
    }
    while buf.last() == Some(&0) {
        buf.pop();
    }
    String::from_utf8_lossy(&buf).into_owned()
}

struct HandleGuard {
    handle: Handle,
    destroy: unsafe extern "C" fn(*mut Handle) -> Status,
}

impl Drop for HandleGuard {
    fn drop(&mut self) {
        // SAFETY: the handle was created by nvJitLinkCreate and is destroyed exactly once.
        unsafe { (self.destroy)(&mut self.handle) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_what_to_install() {
        let err = NvJitLink::load_from(Path::new("/nonexistent/libnvJitLink.so.13")).err().unwrap();
        let msg = err.to_string();
        assert!(msg.contains("libnvJitLink.so.13") && msg.contains("install-toolchain"), "{msg}");
        assert!(msg.contains("CUDA 13 toolkit"), "{msg}");
    }

    #[test]
    fn results_have_their_header_names() {
        assert_eq!(result_name(4), "NVJITLINK_ERROR_PTX_COMPILE");
        assert_eq!(result_name(18), "NVJITLINK_ERROR_LTO_NOT_ENABLED");
        assert_eq!(result_name(99), "an unknown nvJitLink error");
        assert_eq!(result_name(-1), "an unknown nvJitLink error");
        assert_eq!(failure_kind(4), FailureKind::Compilation);
        assert_eq!(failure_kind(1), FailureKind::Internal);
    }
}
