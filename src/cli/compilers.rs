//! Building the compiler a command asked for: its `--compiler` spec ([`CompilerSpec`]: `farm`,
//! `farm:K`, `farm-jit[:K]`, `threads[:K]`, `inprocess`, `nvcc`) plus the command's `-n` and
//! farm settings, through the one builder in the client library ([`CompilerSpec::build`]). This
//! file only translates the command line's settings; it must never construct a compiler itself.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use gpfarm_client::{BuildConfig, Compiler, CompilerSpec, Workers};
use gpfarm_protocol::{CompileOptions, FarmName};

/// Where a farm's daemons come from, and how long a request may take.
#[derive(Debug, Clone, Default)]
pub struct FarmSource {
    /// Attach to daemons already running (`gpfarm daemons start`), optionally a named farm.
    pub attach: Option<Option<FarmName>>,
    /// Seconds a daemon may spend on one unit before it is declared hung.
    pub deadline_s: Option<u64>,
}

/// Builds the compiler `spec` names, warm, through the engine's one builder
/// ([`gpfarm_evolve::plan::build_compiler`]); `workers` (daemons or threads, the command's `-n`)
/// fills a spec that left its count open (`farm`, `threads`; none leaves one per core), and an
/// explicit count (`farm:4`) stays. A count of 0 is an error.
pub fn build(
    spec: CompilerSpec,
    workers: Option<usize>,
    cuda: Option<&Path>,
    options: &CompileOptions,
    source: &FarmSource,
) -> Result<Box<dyn Compiler + Send>> {
    let workers = workers.map(Workers::exactly).transpose()?.map(Workers::count);
    let config = BuildConfig {
        cuda: cuda.map(Path::to_path_buf),
        attach: source.attach.clone(),
        unit_deadline: source.deadline_s.map_or(gpfarm_client::DEFAULT_UNIT_DEADLINE, Duration::from_secs),
    };
    Ok(gpfarm_evolve::plan::build_compiler(spec, workers, options, &config)?)
}
