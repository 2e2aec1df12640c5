//! Finding a CUDA 13 toolchain: NVRTC's libraries and, where present, nvcc.

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::INSTALL_HINT;

/// Where a toolchain was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Given by a flag or `GPFARM_CUDA`.
    Explicit,
    /// `CUDA_HOME` or `CUDA_PATH`.
    CudaHome,
    /// `/usr/local/cuda`.
    System,
    /// The project-local pinned wheels (`.toolchain/`), or the wheels of the Python environment
    /// that loaded gpfarm (`GPFARM_PYTHON_CUDA`, set by the Python package).
    Wheels,
}

/// A located toolchain.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// Directory holding `libnvrtc.so.13` and its builtins library.
    pub lib_dir: PathBuf,
    /// `nvcc`, if the toolchain has one.
    pub nvcc: Option<PathBuf>,
    /// How it was found.
    pub origin: Origin,
}

/// No usable toolchain.
#[derive(Debug, Error)]
pub enum ToolchainError {
    /// Nothing found anywhere.
    #[error("no NVRTC found (looked in: {looked}); {INSTALL_HINT}")]
    NotFound {
        /// The places searched, in order.
        looked: String,
    },
    /// An explicit setting points at something that does not exist.
    #[error("{path} does not exist; {INSTALL_HINT}")]
    ExplicitMissing {
        /// The path given.
        path: PathBuf,
    },
    /// An explicit setting points at a directory that is not a CUDA 13 toolchain.
    #[error("{path} has no libnvrtc.so.13 (in lib64/ or lib/); {INSTALL_HINT}")]
    BadExplicit {
        /// The path given.
        path: PathBuf,
    },
}

const WHEEL_SUBDIR: &str = "site/nvidia/cu13";

/// The Python environment's `nvidia/cu13` directory, looked at last.
pub const PYTHON_WHEELS_VAR: &str = "GPFARM_PYTHON_CUDA";

impl Toolchain {
    /// Finds a toolchain, trying `explicit` first, then the environment and the usual places.
    pub fn discover(explicit: Option<&Path>) -> Result<Toolchain, ToolchainError> {
        if let Some(path) = explicit.map(Path::to_path_buf).or_else(|| env_path("GPFARM_CUDA")) {
            if !path.exists() {
                return Err(ToolchainError::ExplicitMissing { path });
            }
            return Toolchain::at(&path, Origin::Explicit)
                .or_else(|| Toolchain::at(&path.join(WHEEL_SUBDIR), Origin::Explicit))
                .ok_or(ToolchainError::BadExplicit { path });
        }
        let mut looked = Vec::new();
        let mut candidates: Vec<(PathBuf, Origin)> = Vec::new();
        for var in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(p) = env_path(var) {
                candidates.push((p, Origin::CudaHome));
            }
        }
        candidates.push((PathBuf::from("/usr/local/cuda"), Origin::System));
        for dir in project_dirs() {
            candidates.push((dir.join(".toolchain").join(WHEEL_SUBDIR), Origin::Wheels));
        }
        // `pip install gpfarm[cuda]` puts NVIDIA's wheels into the environment's site-packages;
        // the Python package names their directory here, for itself and the daemons it starts.
        if let Some(p) = env_path(PYTHON_WHEELS_VAR) {
            candidates.push((p, Origin::Wheels));
        }
        for (path, origin) in candidates {
            if let Some(tc) = Toolchain::at(&path, origin) {
                return Ok(tc);
            }
            looked.push(path.display().to_string());
        }
        Err(ToolchainError::NotFound { looked: looked.join(", ") })
    }

    /// The toolchain rooted at `root`, if it has NVRTC 13.
    fn at(root: &Path, origin: Origin) -> Option<Toolchain> {
        let lib_dir = ["lib64", "lib", "targets/x86_64-linux/lib", "."]
            .iter()
            .map(|sub| root.join(sub))
            .find(|dir| dir.join("libnvrtc.so.13").is_file())?;
        let nvcc = Some(root.join("bin/nvcc")).filter(|p| p.is_file());
        Some(Toolchain { lib_dir, nvcc, origin })
    }

    /// Absolute path of `libnvrtc.so.13`.
    pub fn libnvrtc(&self) -> PathBuf {
        self.lib_dir.join("libnvrtc.so.13")
    }

    /// Absolute path of `libnvJitLink.so.13` (the PTX route's assembler and linker), which a
    /// CUDA 13 toolkit and the pinned wheels put beside NVRTC. It may be missing: only the PTX
    /// route needs it, and it says so when it is not there.
    pub fn libnvjitlink(&self) -> PathBuf {
        self.lib_dir.join("libnvJitLink.so.13")
    }

    /// Absolute path of NVRTC's builtins library (`libnvrtc-builtins.so.13.N`), if present.
    pub fn builtins(&self) -> Option<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&self.lib_dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libnvrtc-builtins.so.13"))
            })
            .collect();
        found.sort();
        found.into_iter().next()
    }
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The current directory, the executable's directory and their ancestors: where a checkout's
/// `.toolchain/` may be.
fn project_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let starts = [std::env::current_dir().ok(), std::env::current_exe().ok()];
    for start in starts.into_iter().flatten() {
        for dir in start.ancestors() {
            if !dirs.iter().any(|d: &PathBuf| d == dir) {
                dirs.push(dir.to_path_buf());
            }
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_path_without_nvrtc_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("gpfarm-no-cuda-here-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = Toolchain::discover(Some(&dir)).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        let msg = err.to_string();
        assert!(msg.contains("libnvrtc.so.13") && msg.contains("install-toolchain"), "{msg}");
    }

    #[test]
    fn an_explicit_path_that_does_not_exist_is_called_that() {
        let dir = std::env::temp_dir().join("gpfarm-no-such-cuda-dir");
        let err = Toolchain::discover(Some(&dir)).unwrap_err();
        assert!(matches!(err, ToolchainError::ExplicitMissing { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.starts_with(&format!("{} does not exist", dir.display())), "{msg}");
        assert!(msg.contains("install-toolchain") && !msg.contains("libnvrtc.so.13"), "{msg}");
    }

    #[test]
    fn a_wheel_layout_is_recognised() {
        let root = std::env::temp_dir().join(format!("gpfarm-wheel-{}", std::process::id()));
        let lib = root.join(WHEEL_SUBDIR).join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libnvrtc.so.13"), b"").unwrap();
        std::fs::write(lib.join("libnvrtc-builtins.so.13.0"), b"").unwrap();
        let tc = Toolchain::discover(Some(&root)).unwrap();
        assert_eq!(tc.lib_dir, lib);
        assert_eq!(tc.builtins().unwrap(), lib.join("libnvrtc-builtins.so.13.0"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
