//! Why a run could not start or could not go on. Each variant keeps its cause as a source, so a
//! caller can print the whole chain (`{:#}` with anyhow) or match on what went wrong.

use std::path::PathBuf;

use gpfarm_client::CompilerError;
use gpfarm_gp::{EvolutionError, ProblemError};
use gpfarm_kernels::gpu::GpuError;
use gpfarm_protocol::{Failure, Language};

/// See the module documentation.
#[derive(Debug, thiserror::Error)]
pub enum EvolveError {
    /// The run's settings contradict each other (e.g. attaching to resident daemons on a route
    /// that compiles nothing).
    #[error("{0}")]
    Usage(String),
    /// The compiler could not be built (no toolchain, daemons that did not start).
    #[error("{what}")]
    Build {
        /// What was being done: starting which compiler, or attaching.
        what: String,
        /// Why it failed.
        source: gpfarm_client::BuildError,
    },
    /// The problem could not be loaded.
    #[error(transparent)]
    Problem(#[from] ProblemError),
    /// The GP parameters are out of range, or the engine was fed inconsistent fitness.
    #[error(transparent)]
    Evolution(#[from] EvolutionError),
    /// `EvalMode::Gpu` without a GPU, or without a compiler to put individuals onto it.
    #[error("evaluating on the GPU: {0}")]
    NoGpu(String),
    /// The problem cannot be evaluated on the GPU as declared.
    #[error("evaluating on the GPU")]
    Gpu(#[from] GpuError),
    /// The GPU worker process failed outside any individual's kernel.
    #[error("the GPU worker")]
    Worker(#[from] gpfarm_client::WorkerError),
    /// The compiler itself failed (not a unit: a unit that fails gives its individuals the worst
    /// fitness).
    #[error("compiling")]
    Compiler(#[from] CompilerError),
    /// The problem's fitness kernel did not compile, so the GPU cannot score anything.
    #[error("the fitness kernel did not compile: {failure}\n{log}")]
    FitnessKernel {
        /// What NVRTC said.
        failure: Failure,
        /// Its log.
        log: String,
    },
    /// The problem cannot take the PTX route (its template is not the standard harness).
    #[error(transparent)]
    PtxRoute(#[from] gpfarm_kernels::PtxUnsupported),
    /// The problem cannot be interpreted.
    #[error(transparent)]
    Interpreter(#[from] gpfarm_kernels::interpreter::InterpUnsupported),
    /// The interpreter kernel did not compile.
    #[error("the interpreter kernel did not compile: {failure}\n{log}")]
    InterpreterKernel {
        /// Why.
        failure: Failure,
        /// The compiler's log.
        log: String,
    },
    /// The problem's template cannot be rendered into a switch kernel on the NVRTC route.
    #[error(
        "problem `{problem}` cannot take the switch unit shape on the NVRTC route: {why}; use --shape kernels"
    )]
    Shape {
        /// The problem's name.
        problem: String,
        /// What its template does that the switch kernel cannot.
        why: String,
    },
    /// The problem's template does not compile around a program its grammar writes: every
    /// individual would fail the same way.
    #[error("template.cu does not compile around a program of its grammar (`{program}`): {first}")]
    Template {
        /// The program rendered into the template.
        program: String,
        /// The compiler's first error line (or its one-line reason).
        first: String,
    },
    /// The run's own compile options fail a unit that holds nothing else: every individual
    /// would fail the same way.
    #[error("{} refuses the options {flags:?}: {failure}{hint}", compiler_of(*language))]
    Options {
        /// The language compiled.
        language: Language,
        /// The options the run added.
        flags: Vec<String>,
        /// What the compiler said.
        failure: Failure,
        /// A pointer to what works, or nothing.
        hint: &'static str,
    },
    /// The disk cache's directory could not be opened.
    #[error("opening the disk cache in {}", dir.display())]
    DiskCache {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The unit trace could not be written.
    #[error("writing the unit trace {}", path.display())]
    Trace {
        /// The trace file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The compiler thread ended before answering every unit, or panicked.
    #[error("the compiler stopped before every unit was compiled")]
    CompilerStopped,
    /// The compiler answered a unit it was never given.
    #[error("the compiler answered unit {id}, which was never sent")]
    UnknownUnit {
        /// The unit's job id.
        id: u64,
    },
    /// No unit is compiling and no generation can complete (a bug, reported rather than hung on).
    #[error("the run stalled: no unit is compiling and no generation can complete")]
    Stalled,
    /// The run was stopped: by its caller ([`crate::Engine::stopper`]), or because another
    /// island of it failed.
    #[error("the run was stopped")]
    Stopped,
    /// Migrants could not be sent or did not come.
    #[error("island {island}, migration after generation {generation}: {why}")]
    Migration {
        /// The island that could not migrate.
        island: usize,
        /// The generation it migrated after.
        generation: usize,
        /// What went wrong.
        why: String,
    },
    /// Island settings that cannot work.
    #[error("{0}")]
    Islands(String),
    /// An island of a run with several failed; the others were stopped.
    #[error("island {island}")]
    Island {
        /// Which.
        island: usize,
        /// Why.
        #[source]
        source: Box<EvolveError>,
    },
    /// The caller's per-generation callback returned an error; the run stopped there.
    #[error("the per-generation callback stopped the run")]
    Callback(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// The compiler that takes units of `language`, in words.
fn compiler_of(language: Language) -> &'static str {
    match language {
        Language::CudaC => "NVRTC",
        Language::Ptx => "nvJitLink",
    }
}
