//! Naming a compiler in one string, and building it: `nvcc`, `inprocess`, `threads[:K]`,
//! `farm[:K]`, `farm-jit[:K]`.
//!
//! [`CompilerSpec`] is what the command line's `--compiler` and the benchmark's `--methods` parse,
//! and what a benchmark row records; [`CompilerSpec::build`] is the one place a spec becomes a
//! warm [`Compiler`]. A spec without a count (`farm`, `threads`) means one worker per core unless
//! the caller fills it in ([`CompilerSpec::or_workers`]). Parsing and printing round-trip exactly.
//! This file must never hold compiler logic of its own: it only chooses and configures.

use std::fmt;
use std::num::{NonZeroUsize, ParseIntError};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use gpfarm_protocol::{CompileMode, CompileOptions, FarmName};
use gpfarm_toolchain::{Toolchain, ToolchainError};
use thiserror::Error;

use crate::compiler::Compiler;
use crate::farm::{DEFAULT_UNIT_DEADLINE, Farm, FarmConfig, FarmError};
use crate::inprocess::{InProcess, InProcessError, Threads};
use crate::nvcc::{Nvcc, NvccError};

/// How many daemons or threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Workers {
    /// One per core of this machine.
    PerCore,
    /// Exactly this many.
    Exactly(NonZeroUsize),
}

impl Workers {
    /// Exactly `n` workers, as a command line's `-n` gives them; 0 is refused rather than read
    /// as "one per core" or "one".
    pub fn exactly(n: usize) -> Result<Workers, SpecError> {
        NonZeroUsize::new(n).map(Workers::Exactly).ok_or(SpecError::NoWorkers)
    }

    /// The number this machine gets.
    pub fn count(self) -> NonZeroUsize {
        match self {
            Workers::PerCore => std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN),
            Workers::Exactly(k) => k,
        }
    }
}

/// Which compiler, with how many workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompilerSpec {
    /// `nvcc -cubin`, one process per unit (the paper's baseline).
    Nvcc,
    /// NVRTC in this process, one unit after another.
    InProcess,
    /// NVRTC from k threads of this process.
    Threads(Workers),
    /// k resident daemons, NVRTC to CUBIN.
    Farm(Workers),
    /// k resident daemons, NVRTC to PTX, then the driver's linker in each daemon's CUDA context
    /// (the paper's two-stage path; needs a GPU).
    FarmJit(Workers),
}

/// A compiler name that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// Not one of the names.
    #[error("unknown compiler {0:?}: use nvcc, inprocess, threads[:K], farm[:K] or farm-jit[:K]")]
    Unknown(String),
    /// A worker count that is not a whole number of at least 1.
    #[error("{spec:?}: the worker count must be a whole number of at least 1")]
    BadCount {
        /// The spec as given.
        spec: String,
        /// Why the count did not parse.
        #[source]
        source: ParseIntError,
    },
    /// A worker count of 0.
    #[error("0 daemons or threads asked for: give at least 1, or leave the count out for one per core")]
    NoWorkers,
    /// A count given to a compiler that has exactly one worker.
    #[error("{0:?}: nvcc and inprocess compile one unit at a time and take no worker count")]
    CountNotTaken(String),
}

/// A spec that could not be built into a compiler: each compiler's own error, as it said it.
#[derive(Debug, Error)]
pub enum BuildError {
    /// No usable NVRTC or nvcc.
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    /// The daemons could not be started or attached to.
    #[error(transparent)]
    Farm(#[from] FarmError),
    /// NVRTC could not be loaded or warmed in this process.
    #[error(transparent)]
    InProcess(#[from] InProcessError),
    /// The nvcc baseline cannot run.
    #[error(transparent)]
    Nvcc(#[from] NvccError),
    /// farm-jit without a CUDA context to link in.
    #[error(
        "farm-jit links PTX in each daemon's CUDA context, but {without} of {daemons} daemons hold \
         none: this machine has no GPU or driver, or the daemons were started without --gpu-context"
    )]
    NoGpuContext {
        /// Daemons without a context.
        without: usize,
        /// Daemons in the farm.
        daemons: usize,
    },
}

/// What building needs beyond the spec and the compile options.
#[derive(Debug, Clone)]
pub struct BuildConfig {
    /// CUDA toolkit or wheel directory (default: [`Toolchain::discover`]'s search).
    pub cuda: Option<PathBuf>,
    /// Farm only: attach to daemons already running (`gpfarm daemons start`) instead of spawning
    /// them; `Some(None)` attaches to the only running farm.
    pub attach: Option<Option<FarmName>>,
    /// Farm only: how long a daemon may work on one unit before it is replaced.
    pub unit_deadline: Duration,
}

impl Default for BuildConfig {
    fn default() -> Self {
        BuildConfig { cuda: None, attach: None, unit_deadline: DEFAULT_UNIT_DEADLINE }
    }
}

impl CompilerSpec {
    /// Its workers, for the compilers that have a choice (threads and farms).
    pub fn workers(&self) -> Option<Workers> {
        match *self {
            CompilerSpec::Nvcc | CompilerSpec::InProcess => None,
            CompilerSpec::Threads(w) | CompilerSpec::Farm(w) | CompilerSpec::FarmJit(w) => Some(w),
        }
    }

    /// How many units it compiles at once on this machine (1 for nvcc and in-process).
    pub fn worker_count(&self) -> NonZeroUsize {
        self.workers().map_or(NonZeroUsize::MIN, Workers::count)
    }

    /// The same compiler with `workers` where the spec left the count open (`farm` → `farm:K`);
    /// an explicit count stays.
    pub fn or_workers(self, workers: NonZeroUsize) -> Self {
        let fill = |w: Workers| if w == Workers::PerCore { Workers::Exactly(workers) } else { w };
        match self {
            CompilerSpec::Nvcc | CompilerSpec::InProcess => self,
            CompilerSpec::Threads(w) => CompilerSpec::Threads(fill(w)),
            CompilerSpec::Farm(w) => CompilerSpec::Farm(fill(w)),
            CompilerSpec::FarmJit(w) => CompilerSpec::FarmJit(fill(w)),
        }
    }

    /// The compile mode this compiler is for: ptx-jit for `farm-jit`, CUBIN for the rest.
    pub fn mode(&self) -> CompileMode {
        if matches!(self, CompilerSpec::FarmJit(_)) { CompileMode::PtxJit } else { CompileMode::Cubin }
    }

    /// Builds the compiler, warm: NVRTC loaded and warmed for `options.arch` (in-process and
    /// threads), daemons started or attached and answering (farms). A `farm-jit` whose daemons
    /// hold no CUDA context is an error here rather than a failure of every unit later; that is
    /// checked with the daemons' own handshake, so this crate needs no CUDA driver of its own.
    pub fn build(
        &self,
        options: &CompileOptions,
        config: &BuildConfig,
    ) -> Result<Box<dyn Compiler + Send>, BuildError> {
        let toolchain = || Toolchain::discover(config.cuda.as_deref());
        Ok(match *self {
            CompilerSpec::Nvcc => Box::new(Nvcc::new(&toolchain()?)?),
            CompilerSpec::InProcess => Box::new(InProcess::new(&toolchain()?, options)?),
            CompilerSpec::Threads(w) => Box::new(Threads::new(&toolchain()?, options, w.count().get())?),
            CompilerSpec::Farm(w) | CompilerSpec::FarmJit(w) => {
                let jit = self.mode() == CompileMode::PtxJit;
                let farm_config = FarmConfig {
                    daemons: w.count().get(),
                    cuda: config.cuda.clone(),
                    warmup_arch: options.arch,
                    gpu_context: jit || options.mode == CompileMode::PtxJit,
                    request_timeout: config.unit_deadline,
                    ..FarmConfig::default()
                };
                let farm = match &config.attach {
                    Some(name) => Farm::attach(name.as_ref(), farm_config)?,
                    None => {
                        // Before any daemon starts: a wrong toolchain directory is reported as
                        // what it is, not as daemons that failed to start.
                        toolchain()?;
                        Farm::spawn(farm_config)?
                    }
                };
                if jit {
                    let infos = farm.daemon_info();
                    let without = infos.iter().filter(|i| i.gpu.is_none()).count();
                    if without > 0 {
                        return Err(BuildError::NoGpuContext { without, daemons: infos.len() });
                    }
                }
                Box::new(farm)
            }
        })
    }
}

impl fmt::Display for CompilerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, workers) = match self {
            CompilerSpec::Nvcc => ("nvcc", None),
            CompilerSpec::InProcess => ("inprocess", None),
            CompilerSpec::Threads(w) => ("threads", Some(w)),
            CompilerSpec::Farm(w) => ("farm", Some(w)),
            CompilerSpec::FarmJit(w) => ("farm-jit", Some(w)),
        };
        match workers {
            Some(Workers::Exactly(k)) => write!(f, "{name}:{k}"),
            _ => f.write_str(name),
        }
    }
}

impl FromStr for CompilerSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let (name, count) = match s.split_once(':') {
            Some((name, k)) => {
                let k = k
                    .parse::<NonZeroUsize>()
                    .map_err(|source| SpecError::BadCount { spec: s.to_owned(), source })?;
                (name, Workers::Exactly(k))
            }
            None => (s, Workers::PerCore),
        };
        let spec = match name {
            "nvcc" => CompilerSpec::Nvcc,
            "inprocess" => CompilerSpec::InProcess,
            "threads" => CompilerSpec::Threads(count),
            "farm" => CompilerSpec::Farm(count),
            "farm-jit" => CompilerSpec::FarmJit(count),
            _ => return Err(SpecError::Unknown(s.to_owned())),
        };
        if spec.workers().is_none() && count != Workers::PerCore {
            return Err(SpecError::CountNotTaken(s.to_owned()));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(n: usize) -> Workers {
        Workers::Exactly(NonZeroUsize::new(n).expect("a test count is at least 1"))
    }

    fn any_workers() -> impl Strategy<Value = Workers> {
        prop_oneof![Just(Workers::PerCore), (1usize..4096).prop_map(k)]
    }

    fn any_spec() -> impl Strategy<Value = CompilerSpec> {
        prop_oneof![
            Just(CompilerSpec::Nvcc),
            Just(CompilerSpec::InProcess),
            any_workers().prop_map(CompilerSpec::Threads),
            any_workers().prop_map(CompilerSpec::Farm),
            any_workers().prop_map(CompilerSpec::FarmJit),
        ]
    }

    proptest! {
        #[test]
        fn every_spec_round_trips_through_its_name(spec in any_spec()) {
            prop_assert_eq!(spec.to_string().parse::<CompilerSpec>(), Ok(spec));
        }
    }

    #[test]
    fn names_read_as_documented() {
        let parse = |s: &str| s.parse::<CompilerSpec>();
        assert_eq!(parse("nvcc"), Ok(CompilerSpec::Nvcc));
        assert_eq!(parse("inprocess"), Ok(CompilerSpec::InProcess));
        assert_eq!(parse("threads:8"), Ok(CompilerSpec::Threads(k(8))));
        assert_eq!(parse("farm:16"), Ok(CompilerSpec::Farm(k(16))));
        assert_eq!(parse("farm-jit:2"), Ok(CompilerSpec::FarmJit(k(2))));
        assert_eq!(parse("farm"), Ok(CompilerSpec::Farm(Workers::PerCore)));
        assert_eq!(parse("threads"), Ok(CompilerSpec::Threads(Workers::PerCore)));
    }

    #[test]
    fn bad_names_and_counts_are_errors_that_say_which() {
        let parse = |s: &str| s.parse::<CompilerSpec>();
        assert_eq!(parse("gcc"), Err(SpecError::Unknown("gcc".into())));
        assert!(matches!(parse("farm:0"), Err(SpecError::BadCount { .. })));
        assert!(matches!(parse("threads:two"), Err(SpecError::BadCount { .. })));
        assert!(matches!(parse("farm:"), Err(SpecError::BadCount { .. })));
        assert_eq!(parse("nvcc:4"), Err(SpecError::CountNotTaken("nvcc:4".into())));
        let e = parse("farm:0").unwrap_err();
        assert!(std::error::Error::source(&e).is_some(), "the integer error is kept as the source");
    }

    #[test]
    fn a_zero_count_is_refused_not_read_as_one_per_core() {
        assert_eq!(Workers::exactly(0), Err(SpecError::NoWorkers));
        assert_eq!(Workers::exactly(3), Ok(k(3)));
    }

    #[test]
    fn a_count_fills_only_a_spec_that_left_it_open() {
        let four = NonZeroUsize::new(4).expect("4 > 0");
        assert_eq!(CompilerSpec::Farm(Workers::PerCore).or_workers(four), CompilerSpec::Farm(k(4)));
        assert_eq!(CompilerSpec::Farm(k(2)).or_workers(four), CompilerSpec::Farm(k(2)));
        assert_eq!(CompilerSpec::InProcess.or_workers(four), CompilerSpec::InProcess);
        assert_eq!(CompilerSpec::Threads(k(3)).worker_count().get(), 3);
        assert_eq!(CompilerSpec::Nvcc.worker_count().get(), 1);
    }

    #[test]
    fn only_farm_jit_asks_for_ptx_jit() {
        assert_eq!(CompilerSpec::FarmJit(k(1)).mode(), CompileMode::PtxJit);
        for spec in [
            CompilerSpec::Nvcc,
            CompilerSpec::InProcess,
            CompilerSpec::Threads(k(1)),
            CompilerSpec::Farm(k(1)),
        ] {
            assert_eq!(spec.mode(), CompileMode::Cubin, "{spec}");
        }
    }
}
