//! NVRTC, loaded at run time from an absolute path.
//!
//! Three layers, as in cudarc: the raw function table (`Fns`), thin calls that turn status codes
//! into `Result`s, and the safe [`Nvrtc::compile`] that owns each `nvrtcProgram` for exactly one
//! compile. NVRTC is thread-safe; a program is never shared between threads.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpfarm_protocol::FailureKind;
use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
use thiserror::Error;

use crate::{INSTALL_HINT, NVRTC_MAJOR, Toolchain};

type Program = *mut c_void;
type Status = c_int;
const NVRTC_SUCCESS: Status = 0;
const NVRTC_ERROR_COMPILATION: Status = 6;

#[derive(Clone, Copy)]
struct Fns {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    destroy: unsafe extern "C" fn(*mut Program) -> Status,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    log: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    ptx_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    ptx: unsafe extern "C" fn(Program, *mut c_char) -> Status,
}

/// NVRTC could not be loaded or is the wrong version.
#[derive(Debug, Error)]
pub enum LoadError {
    /// `dlopen` or `dlsym` failed.
    #[error("cannot load {path}; {INSTALL_HINT}")]
    Library {
        /// The library.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: libloading::Error,
    },
    /// The library is not NVRTC 13.
    #[error("{path} is NVRTC {major}.{minor}, but gpfarm needs NVRTC {NVRTC_MAJOR}.x; {INSTALL_HINT}")]
    Version {
        /// The library.
        path: PathBuf,
        /// Its major version.
        major: u32,
        /// Its minor version.
        minor: u32,
    },
}

/// What to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Device code for a real architecture (`-arch=sm_XX` must be among the options).
    Cubin,
    /// PTX text (`-arch=compute_XX`).
    Ptx,
}

/// A successful compile.
#[derive(Debug)]
pub struct Compiled {
    /// CUBIN bytes, or PTX text without its trailing NUL.
    pub code: Vec<u8>,
    /// NVRTC's log (warnings), often empty.
    pub log: String,
    /// Time in `nvrtcCreateProgram` + `nvrtcCompileProgram`.
    pub compile: Duration,
    /// Time fetching the output and log.
    pub extract: Duration,
}

/// A failed compile.
#[derive(Debug, Error)]
#[error("{message}")]
pub struct NvrtcFailure {
    /// Category.
    pub kind: FailureKind,
    /// One line.
    pub message: String,
    /// NVRTC's log, if it produced one.
    pub log: String,
    /// Time spent before failing.
    pub compile: Duration,
}

/// A loaded NVRTC.
pub struct Nvrtc {
    fns: Fns,
    path: PathBuf,
    version: (u32, u32),
    // Kept loaded for the life of this value; the builtins library first so that NVRTC's own
    // `dlopen("libnvrtc-builtins.so.13.N")` finds it already loaded, whatever LD_LIBRARY_PATH is.
    _lib: Library,
    _builtins: Option<Library>,
}

fn open(path: &Path) -> Result<Library, LoadError> {
    // SAFETY: loading NVIDIA's NVRTC libraries runs only their ELF initialisers, which have no
    // preconditions.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
        .map_err(|source| LoadError::Library { path: path.to_path_buf(), source })
}

impl Nvrtc {
    /// Loads NVRTC from a located toolchain and checks that it is version 13.
    pub fn load(toolchain: &Toolchain) -> Result<Nvrtc, LoadError> {
        let builtins = toolchain.builtins().map(|p| open(&p)).transpose()?;
        let path = toolchain.libnvrtc();
        let lib = open(&path)?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is NVRTC's C function of the signature declared in `Fns`
                // (from nvrtc.h, stable across NVRTC 11-13).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|source| LoadError::Library { path: path.clone(), source })?
            };
        }
        let fns = Fns {
            version: sym!("nvrtcVersion"),
            error_string: sym!("nvrtcGetErrorString"),
            create: sym!("nvrtcCreateProgram"),
            destroy: sym!("nvrtcDestroyProgram"),
            compile: sym!("nvrtcCompileProgram"),
            log_size: sym!("nvrtcGetProgramLogSize"),
            log: sym!("nvrtcGetProgramLog"),
            cubin_size: sym!("nvrtcGetCUBINSize"),
            cubin: sym!("nvrtcGetCUBIN"),
            ptx_size: sym!("nvrtcGetPTXSize"),
            ptx: sym!("nvrtcGetPTX"),
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        unsafe { (fns.version)(&mut major, &mut minor) };
        let version = (major.max(0) as u32, minor.max(0) as u32);
        if version.0 != NVRTC_MAJOR {
            return Err(LoadError::Version { path, major: version.0, minor: version.1 });
        }
        Ok(Nvrtc { fns, path, version, _lib: lib, _builtins: builtins })
    }

    /// (major, minor) of the loaded library.
    pub fn version(&self) -> (u32, u32) {
        self.version
    }

    /// Path of the loaded library.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn describe(&self, status: Status) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string for any status value.
        let p = unsafe { (self.fns.error_string)(status) };
        if p.is_null() {
            return format!("NVRTC error {status}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Compiles one translation unit with the given options.
    pub fn compile(
        &self,
        name: &str,
        source: &[u8],
        options: &[String],
        output: Output,
    ) -> Result<Compiled, NvrtcFailure> {
        let start = Instant::now();
        let fail = |kind, message: String, log: String| NvrtcFailure {
            kind,
            message,
            log,
            compile: start.elapsed(),
        };
        // NVRTC reads C strings and stops at what it cannot take: a byte that is not UTF-8 would
        // silently drop the rest of the unit (its later kernels), so it is refused here.
        if let Err(e) = std::str::from_utf8(source) {
            return Err(fail(
                FailureKind::InvalidSource,
                format!("source is not valid UTF-8 at byte offset {}", e.valid_up_to()),
                String::new(),
            ));
        }
        let source = CString::new(source).map_err(|e| {
            fail(
                FailureKind::InvalidSource,
                format!("source contains a NUL byte at offset {}", e.nul_position()),
                String::new(),
            )
        })?;
        let name = CString::new(name.replace('\0', "?")).unwrap_or_default();
        let options: Vec<CString> =
            options.iter().map(|o| CString::new(o.replace('\0', "")).unwrap_or_default()).collect();
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();

        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: valid out-pointer, NUL-terminated source and name, no headers.
        let status = unsafe {
            (self.fns.create)(
                &mut prog,
                source.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if status != NVRTC_SUCCESS {
            return Err(fail(FailureKind::Internal, self.describe(status), String::new()));
        }
        let prog = ProgramGuard { prog, destroy: self.fns.destroy };
        // SAFETY: `prog` is a live program used by this thread only; the option pointers outlive
        // the call.
        let status =
            unsafe { (self.fns.compile)(prog.prog, option_ptrs.len() as c_int, option_ptrs.as_ptr()) };
        let compile = start.elapsed();
        let extract_start = Instant::now();
        let log = self.read_log(prog.prog);
        if status != NVRTC_SUCCESS {
            let kind = if status == NVRTC_ERROR_COMPILATION {
                FailureKind::Compilation
            } else {
                FailureKind::Internal
            };
            let first = log.lines().find(|l| l.contains("error")).unwrap_or("").trim();
            let message = if first.is_empty() {
                self.describe(status)
            } else {
                format!("{}: {first}", self.describe(status))
            };
            return Err(NvrtcFailure { kind, message, log, compile });
        }
        let (size_fn, get_fn) = match output {
            Output::Cubin => (self.fns.cubin_size, self.fns.cubin),
            Output::Ptx => (self.fns.ptx_size, self.fns.ptx),
        };
        let code = self.read_bytes(prog.prog, size_fn, get_fn).map_err(|s| NvrtcFailure {
            kind: FailureKind::Internal,
            message: self.describe(s),
            log: log.clone(),
            compile,
        })?;
        let mut code = code;
        if output == Output::Ptx {
            while code.last() == Some(&0) {
                code.pop();
            }
        }
        if code.is_empty() {
            return Err(NvrtcFailure {
                kind: FailureKind::Internal,
                message:
                    "NVRTC produced no code: CUBIN needs a real architecture (-arch=sm_XX), not compute_XX"
                        .into(),
                log,
                compile,
            });
        }
        Ok(Compiled { code, log, compile, extract: extract_start.elapsed() })
    }

    fn read_log(&self, prog: Program) -> String {
        self.read_bytes(prog, self.fns.log_size, self.fns.log)
            .map(|mut b| {
                while b.last() == Some(&0) {
                    b.pop();
                }
                String::from_utf8_lossy(&b).into_owned()
            })
            .unwrap_or_default()
    }

    fn read_bytes(
        &self,
        prog: Program,
        size_fn: unsafe extern "C" fn(Program, *mut usize) -> Status,
        get_fn: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    ) -> Result<Vec<u8>, Status> {
        let mut size = 0usize;
        // SAFETY: live program, valid out-pointer.
        let s = unsafe { size_fn(prog, &mut size) };
        if s != NVRTC_SUCCESS {
            return Err(s);
        }
        let mut buf = vec![0u8; size];
        if size > 0 {
            // SAFETY: `buf` holds exactly the `size` bytes NVRTC reported it will write.
            let s = unsafe { get_fn(prog, buf.as_mut_ptr().cast()) };
            if s != NVRTC_SUCCESS {
                return Err(s);
            }
        }
        Ok(buf)
    }
}

struct ProgramGuard {
    prog: Program,
    destroy: unsafe extern "C" fn(*mut Program) -> Status,
}

impl Drop for ProgramGuard {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed exactly once.
        unsafe { (self.destroy)(&mut self.prog) };
    }
}
