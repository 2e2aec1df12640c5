//! Building the compiler a command asked for: `farm`, `inprocess`, `threads`, `nvcc`.

use std::path::Path;
use std::str::FromStr;

use anyhow::{Context, Result};
use gpfarm_client::{Compiler, Farm, FarmConfig, InProcess, Nvcc, Threads};
use gpfarm_protocol::{CompileOptions, FarmName};
use gpfarm_toolchain::Toolchain;

/// Which implementation compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Resident daemons.
    Farm,
    /// NVRTC in this process.
    InProcess,
    /// NVRTC from threads of this process.
    Threads,
    /// nvcc on the command line.
    Nvcc,
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "farm" => Ok(Kind::Farm),
            "inprocess" => Ok(Kind::InProcess),
            "threads" => Ok(Kind::Threads),
            "nvcc" => Ok(Kind::Nvcc),
            _ => Err(format!("unknown compiler {s:?}: use farm, inprocess, threads or nvcc")),
        }
    }
}

/// Where a farm's daemons come from, and how long a request may take.
#[derive(Debug, Clone, Default)]
pub struct FarmSource {
    /// Attach to daemons already running (`gpfarm daemons start`), optionally a named farm.
    pub attach: Option<Option<FarmName>>,
    /// Seconds a daemon may spend on one unit before it is declared hung.
    pub deadline_s: Option<u64>,
}

/// Builds the compiler; `workers` is the number of daemons or threads.
pub fn build(
    kind: Kind,
    workers: usize,
    cuda: Option<&Path>,
    options: &CompileOptions,
    source: &FarmSource,
) -> Result<Box<dyn Compiler + Send>> {
    Ok(match kind {
        Kind::Farm => {
            let config = FarmConfig {
                daemons: workers,
                cuda: cuda.map(Path::to_path_buf),
                warmup_arch: options.arch,
                gpu_context: options.mode == gpfarm_protocol::CompileMode::PtxJit,
                request_timeout: source
                    .deadline_s
                    .map_or(gpfarm_client::DEFAULT_UNIT_DEADLINE, std::time::Duration::from_secs),
                ..FarmConfig::default()
            };
            let farm = match &source.attach {
                Some(name) => Farm::attach(name.as_ref(), config).context("attaching to running daemons")?,
                None => Farm::spawn(config).context("starting the compile daemons")?,
            };
            Box::new(farm)
        }
        Kind::InProcess => {
            gpfarm_toolchain::tune_allocator();
            Box::new(InProcess::new(&Toolchain::discover(cuda)?, options)?)
        }
        Kind::Threads => {
            gpfarm_toolchain::tune_allocator();
            Box::new(Threads::new(&Toolchain::discover(cuda)?, options, workers)?)
        }
        Kind::Nvcc => Box::new(Nvcc::new(&Toolchain::discover(cuda)?)?),
    })
}
