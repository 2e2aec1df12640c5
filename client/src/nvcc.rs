//! The command-line compiler: `nvcc -cubin` on a temporary file per unit, one process per unit,
//! as the paper's baseline did.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use gpfarm_protocol::{
    CompileMode, CompileOptions, Failure, FailureKind, Language, Unit, UnitOutcome, UnitResult, UnitTimings,
};
use gpfarm_toolchain::Toolchain;
use thiserror::Error;

use crate::compiler::{Batch, BatchStats, Compiler, CompilerError, WorkerStats};

/// NVRTC options nvcc does not accept; they are left out of nvcc's command line.
const NVRTC_ONLY: &[&str] =
    &["-default-device", "--device-as-default-execution-space", "-minimal", "--minimal"];

/// What a PTX unit gets from the nvcc baseline.
const PTX_REFUSED: &str = "the nvcc baseline compiles CUDA C only; a PTX unit is linked with the math \
     library by nvJitLink in the farm, threads and inprocess compilers";

/// What the nvcc baseline fails with.
#[derive(Debug, Error)]
pub enum NvccError {
    /// The toolchain lacks nvcc, which the `nvcc` baseline needs.
    #[error("the toolchain in {} has no nvcc; {}", lib_dir.display(), gpfarm_toolchain::INSTALL_HINT)]
    NoNvcc {
        /// The toolchain's library directory.
        lib_dir: PathBuf,
    },
    /// A file or directory the compiler needs could not be written or made.
    #[error("cannot write {}", path.display())]
    File {
        /// The file or directory.
        path: PathBuf,
        /// The OS's reason.
        #[source]
        source: std::io::Error,
    },
}

impl From<NvccError> for CompilerError {
    fn from(e: NvccError) -> CompilerError {
        CompilerError::new(e)
    }
}

/// `nvcc -cubin`, one process per unit.
pub struct Nvcc {
    nvcc: PathBuf,
}

impl Nvcc {
    /// Uses the toolchain's nvcc.
    pub fn new(toolchain: &Toolchain) -> Result<Self, NvccError> {
        let nvcc =
            toolchain.nvcc.clone().ok_or_else(|| NvccError::NoNvcc { lib_dir: toolchain.lib_dir.clone() })?;
        Ok(Nvcc { nvcc })
    }
}

impl Compiler for Nvcc {
    fn name(&self) -> String {
        "nvcc".into()
    }

    fn toolchain(&self) -> String {
        crate::cache::toolchain_identity("nvcc", &self.nvcc)
    }

    fn compile(&mut self, units: &[Unit], options: &CompileOptions) -> Result<Batch, CompilerError> {
        let start = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("gpfarm-nvcc-")
            .tempdir()
            .map_err(|source| NvccError::File { path: std::env::temp_dir(), source })?;
        let mut results = Vec::with_capacity(units.len());
        for (i, unit) in units.iter().enumerate() {
            if unit.language == Language::Ptx {
                results.push(UnitResult::failed(FailureKind::InvalidSource, PTX_REFUSED));
                continue;
            }
            if options.mode == CompileMode::PtxJit {
                results.push(UnitResult::failed(FailureKind::Jit, "nvcc baseline compiles to CUBIN only"));
                continue;
            }
            let src = dir.path().join(format!("unit{i}.cu"));
            let out = dir.path().join(format!("unit{i}.cubin"));
            std::fs::write(&src, &unit.source)
                .map_err(|source| NvccError::File { path: src.clone(), source })?;
            let t = Instant::now();
            let mut cmd = Command::new(&self.nvcc);
            cmd.arg("-cubin").arg(options.arch.cubin_option());
            cmd.args(options.flags.iter().filter(|f| !NVRTC_ONLY.contains(&f.as_str())));
            cmd.arg("-o").arg(&out).arg(&src);
            let run = cmd.output();
            let compile_us = t.elapsed().as_micros() as u64;
            let timings = UnitTimings { compile_us, ..Default::default() };
            let result = match run {
                Err(e) => UnitResult {
                    outcome: UnitOutcome::Failed(Failure {
                        kind: FailureKind::Internal,
                        message: format!("cannot run {}: {e}", self.nvcc.display()),
                    }),
                    log: String::new(),
                    timings,
                },
                Ok(o) => {
                    let log = String::from_utf8_lossy(&o.stderr).into_owned();
                    match (o.status.success(), std::fs::read(&out)) {
                        (true, Ok(cubin)) if !cubin.is_empty() => {
                            UnitResult { outcome: UnitOutcome::Cubin(cubin), log, timings }
                        }
                        _ => {
                            let first = log
                                .lines()
                                .find(|l| l.contains("error"))
                                .unwrap_or("nvcc failed")
                                .trim()
                                .to_owned();
                            UnitResult {
                                outcome: UnitOutcome::Failed(Failure {
                                    kind: FailureKind::Compilation,
                                    message: format!("{} ({}): {first}", unit.name, o.status),
                                }),
                                log,
                                timings,
                            }
                        }
                    }
                }
            };
            results.push(result);
        }
        let wall_us = start.elapsed().as_micros() as u64;
        let worker = WorkerStats { units: units.len(), busy_us: wall_us, ..Default::default() };
        Ok(Batch {
            results,
            stats: BatchStats { wall_us, wait_us: wall_us, workers: vec![worker], ..Default::default() },
        })
    }
}
