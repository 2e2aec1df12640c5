//! What a run is asked to do besides the problem: the GP parameters, where fitness is computed,
//! how individuals are compiled, and which caches are used. Plain data with defaults; the
//! command line fills it from its flags, and a Rust or Python caller fills it directly.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use gpfarm_gp::EvolutionConfig;
use gpfarm_protocol::{Route, Shape, SmArch};

use crate::route::{FitKernels, problem_loops};

/// Where fitness is computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EvalMode {
    /// The GPU if there is one, else the CPU, saying so in a one-line notice.
    #[default]
    Auto,
    /// The CPU reference evaluator.
    Cpu,
    /// The GPU (an error without one).
    Gpu,
}

impl std::fmt::Display for EvalMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EvalMode::Auto => "auto",
            EvalMode::Cpu => "cpu",
            EvalMode::Gpu => "gpu",
        })
    }
}

impl std::str::FromStr for EvalMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        <EvalMode as clap::ValueEnum>::from_str(s, false)
            .map_err(|_| format!("unknown evaluator {s:?}: use auto, cpu or gpu"))
    }
}

/// How a run treats its individuals. Every combination gives the same fitness values in every
/// generation, bit for bit; they change only what is compiled and when.
#[derive(Debug, Clone)]
pub struct Options {
    /// Population, generations, seed, operators.
    pub evolution: EvolutionConfig,
    /// Where fitness is computed.
    pub eval: EvalMode,
    /// Target of the CUBIN (default: the GPU's when evaluating on it, else `sm_90`).
    pub arch: Option<SmArch>,
    /// Extra NVRTC options.
    pub flags: Vec<String>,
    /// Let NVRTC contract `a * b + c` into one fused multiply-add (`--fmad=true`, NVRTC's own
    /// default). Off by default: every floating-point operation is rounded on its own, as C and
    /// the CPU evaluator round it, and as the PTX route does, so both routes give the same bits.
    pub fmad: bool,
    /// How individuals get their fitness: compiled by NVRTC from CUDA C, compiled from PTX
    /// emitted from the phenotype, interpreted on the GPU, or evaluated by the CPU reference
    /// evaluator with nothing compiled ([`Route::Cpu`], for quick experiments with the GP
    /// engine). `None` (the default) lets the engine choose from the problem and the options
    /// alone, never from timings, so that a seed fixes the run on every machine
    /// ([`crate::route`]); [`crate::Engine::route`] says which and why. The interpreter without
    /// a GPU becomes the CPU route.
    pub route: Option<Route>,
    /// Which kernels fit free parameters on the GPU: the interpreter's, kernels compiled for each
    /// program's structure, or (the default) compiled where that pays ([`crate::route::FitKernels`]).
    pub fit_kernels: FitKernels,
    /// nvJitLink options for the PTX route; empty (the default): the level the run's first
    /// generation calls for ([`crate::route::run_link_level`]: `-O3` where programs loop or read
    /// free parameters over more than about 2.2e7 / (parameters per program) cases, else `-O0`).
    pub link_flags: Vec<String>,
    /// How a unit holds its individuals: a kernel each, or one switch kernel per unit that one
    /// launch runs for all of them. `None` (the default) takes [`DEFAULT_SHAPE`];
    /// [`crate::Engine::shape`] says which. Either gives the same fitness.
    pub shape: Option<Shape>,
    /// Reuse fitness known from earlier generations and merge identical individuals.
    pub cache: bool,
    /// Evaluate each unit as soon as it is compiled, and breed the next generation's pairs as
    /// soon as their tournaments' contestants are evaluated.
    pub overlap: bool,
    /// Fixed individuals per unit, instead of chunks guided by estimated compile cost.
    pub per_unit: Option<usize>,
    /// Keep CUBIN on disk in this directory and use it in later runs.
    pub disk_cache: Option<PathBuf>,
    /// Write one JSON line per compiled unit to this file.
    pub trace_units: Option<PathBuf>,
    /// The GPU worker executable (default: [`gpfarm_client::gpu_worker_executable`]).
    pub gpu_worker: Option<PathBuf>,
    /// How long the GPU may take to evaluate a unit of work, and, while a culprit is sought, one
    /// kernel: past it the GPU worker is killed and restarted and the kernel that does not end
    /// gets the worst fitness with the reason `timeout` (the records count it). Default
    /// [`gpfarm_client::DEFAULT_GPU_DEADLINE`].
    pub gpu_deadline: std::time::Duration,
    /// Loop iterations a program may take in one case before it fails, on every route, instead
    /// of the problem's own (`max_steps` in `problem.toml`, default
    /// [`gpfarm_gp::program::DEFAULT_MAX_STEPS`]). At least 1.
    pub max_steps: Option<u64>,
    /// The run's wall time, counted from [`Options::started`]: after each generation the run
    /// ends if the next one is expected to end further past this limit than the current one
    /// ends before it (the next generation taken to last as long as the one just completed),
    /// so it ends within half a generation of the limit; generation 0 always completes. The
    /// summary says after which generation ([`crate::Summary::stopped_after`]). One island
    /// only. Default: none.
    pub max_time: Option<std::time::Duration>,
    /// The instant [`Options::max_time`] counts from: when the caller began (the command
    /// line's start, a Python call's), so that loading the problem and starting the evaluator
    /// count; default (`None`): when the run itself begins ([`crate::Engine::run_islands`]).
    pub started: Option<std::time::Instant>,
    /// Threads that evaluate and fit on the CPU, over all islands (default: one per core).
    pub threads: Option<NonZeroUsize>,
    /// NVRTC options an individual that crashes NVRTC (its unit is lost twice, alone) is
    /// compiled again with, once, in a daemon of its own; empty: no retry, it gets the worst
    /// fitness. The default, [`CRASH_RETRY_FLAGS`], avoids every crash of NVRTC 13.0 found so far.
    pub crash_retry_flags: Vec<String>,
    /// Whether the GPU evaluates the retry's code (default: yes). The default retry flags give
    /// bit-identical fitness on the GPU for every random individual of every built-in problem
    /// tried (tests/gpu.rs); with other flags, turn this off unless they are shown to do the
    /// same: the individual then gets the worst fitness on the GPU. The CPU evaluator's fitness
    /// does not depend on the compiled code, so there the retry's fitness is always used.
    pub crash_retry_on_gpu: bool,
    /// Where the unit of an individual that did not compile is written, for reproducing it with
    /// `gpfarm compile --source FILE`. Default: a folder of the run's own, made on the first failure
    /// under the temporary directory with an unpredictable name (`gpfarm-crashes-XXXXXX`, mode
    /// 0700) and kept after the run. Units are written 0600 and never through a link.
    pub crash_dir: Option<PathBuf>,
    /// Sub-populations evolved side by side, each of `evolution.population` individuals, each
    /// with its own evaluator (GPUs taken round-robin), sharing the compiler; migrants move
    /// along a ring ([`crate::islands`]). 1 (the default): one population.
    pub islands: usize,
    /// Individuals the first generation starts with (a warm start), in its first slots, on
    /// every island: for example the front of an earlier run's summary
    /// ([`crate::FrontModel::seed`]). Empty (the default): all drawn from the seed.
    pub start: Vec<gpfarm_gp::Seed>,
    /// Keep the GPU worker process when the run ends, for the next run of this process to take
    /// over (it loads the next problem without starting a process:
    /// [`gpfarm_client::GpuWorker::park`]); one unused for
    /// [`gpfarm_client::IDLE_WORKER_TIMEOUT`] is ended. For a process that runs again and again
    /// (a fit after a fit in Python). Default: off, the worker ends with the run.
    pub keep_gpu_worker: bool,
    /// Generations between migrations (after generations M - 1, 2M - 1, ...).
    pub migrate_every: usize,
    /// How many of its best individuals an island sends to the next at each migration; they
    /// replace that island's worst.
    pub migrants: usize,
}

/// NVRTC 13.0.88 segfaults on about 1 in 900 valid random Search programs for sm_75/80/90, in
/// its optimiser; `--Ofast-compile=min` (like `-G`, at twice its cost) avoids every such crash
/// found, and `--dopt=off` is not an NVRTC 13.0 option. It gives bit-identical GPU fitness to
/// the default options, so a retried individual's GPU fitness is used as is (docs/failures.md,
/// "When NVRTC crashes", gives the check).
pub const CRASH_RETRY_FLAGS: &[&str] = &["--Ofast-compile=min"];

/// nvJitLink's options for the PTX route by default: ptxas at `-O0`. Over whole runs it is faster
/// end to end than the default `-O3`, or as fast: its slower kernels cost less than the compile
/// time it saves at these case counts (docs/routes.md gives the measurements).
pub const LINK_FLAGS: &[&str] = &["-O0"];

/// nvJitLink's options for the PTX route by default when the problem's programs can loop
/// ([`problem_loops`]): ptxas at `-O3`. Code that runs a loop many times pays for `-O0`'s slow
/// kernels in every iteration (docs/routes.md gives the while-loop example's measurements).
pub const LOOP_LINK_FLAGS: &[&str] = &["-O3"];

/// The PTX route's nvJitLink options for `problem` where nothing is known of its programs:
/// [`LOOP_LINK_FLAGS`] when they can loop, else [`LINK_FLAGS`]. A run takes the level its first
/// generation calls for instead ([`crate::route::run_link_level`]), which is the same for
/// programs without free parameters.
pub fn default_link_flags(problem: &gpfarm_gp::Problem) -> Vec<String> {
    let flags = if problem_loops(problem) { LOOP_LINK_FLAGS } else { LINK_FLAGS };
    flags.iter().map(|f| (*f).to_owned()).collect()
}

/// The unit shape every route takes when [`Options::shape`] is not set: the switch kernel.
/// One kernel per unit costs ptxas less than a kernel per individual (one prologue, one
/// function to allocate registers for) and the GPU one launch per unit instead of one per
/// individual. Whole runs on the PTX route are faster with it; on NVRTC the two shapes are about
/// even, the switch evaluating faster (docs/routes.md gives the measurements). The engine keeps
/// kernels for an NVRTC template that reads `blockIdx.y`.
/// (The interpreter and the CPU form no units; their shape is the same default.)
pub const DEFAULT_SHAPE: Shape = Shape::Switch;

/// The NVRTC option that keeps `a * b + c` two roundings (see [`Options::fmad`]).
pub const NO_FMAD: &str = "--fmad=false";

impl Default for Options {
    /// The run spec's defaults ([`crate::RunSpec`]: one default for each option, the command
    /// line's and Python's), with no warm start and `max_time` counted from the run's start.
    fn default() -> Self {
        crate::RunSpec::default().options(Vec::new(), None).expect("the run spec's defaults are in range")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpfarm_gp::Problem;

    #[test]
    fn problems_whose_grammar_loops_link_at_o3_and_the_others_at_o0() {
        let search = Problem::builtin("search").unwrap();
        let keijzer6 = Problem::builtin("keijzer6").unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/while-search");
        let while_search = Problem::load(&dir).unwrap();
        assert!(problem_loops(&search) && problem_loops(&while_search));
        assert!(!problem_loops(&keijzer6) && !problem_loops(&Problem::builtin("multiplier5").unwrap()));
        assert_eq!(default_link_flags(&while_search), vec!["-O3".to_owned()]);
        assert_eq!(default_link_flags(&keijzer6), vec!["-O0".to_owned()]);
    }
}
