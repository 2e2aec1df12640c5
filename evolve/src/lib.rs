//! The generation engine of gpfarm: a problem, a compiler and an evaluator in; one typed record
//! per generation out.
//!
//! Each generation's individuals are bred by [`gpfarm_gp::Pipeline`], keyed by their compiled
//! code and looked up in the fitness memo and the disk cache, formed into units that go to the
//! compiler's queue ([`gpfarm_client::Compiler::serve`]: a farm of daemons, threads, in-process
//! NVRTC or nvcc), and evaluated on the GPU (in a worker process, so that a faulting kernel costs
//! one individual) or on the CPU reference evaluator. Every combination of caching, overlap and
//! unit forming gives the same fitness values, bit for bit.
//!
//! ```
//! use gpfarm_evolve::{Engine, EvalMode, Options, ProblemRef};
//! use gpfarm_gp::EvolutionConfig;
//!
//! let options = Options {
//!     evolution: EvolutionConfig { population: 50, generations: 3, seed: 1, max_size: 0, ..Default::default() },
//!     eval: EvalMode::Cpu,
//!     ..Options::default()
//! };
//! let engine = Engine::new(ProblemRef::Builtin("keijzer6".into()), options)?;
//! let mut best = Vec::new();
//! // Nothing is compiled here and the CPU evaluates; `engine.run(&mut compiler, …)` compiles
//! // every individual (below).
//! let summary = engine.run_without_compiling(|record| {
//!     best.push(record.best);
//!     Ok(())
//! })?;
//! assert_eq!(best.len(), 4);
//! // With elitism the best never gets worse (keijzer6 is an error: lower is better).
//! assert!(best.windows(2).all(|w| w[1] <= w[0]));
//! assert_eq!(summary.best_fitness, best[3]);
//! println!("{}", serde_json::to_string(&summary)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Compiling every individual on a farm of daemons, one per core, and evaluating on the GPU if
//! there is one:
//!
//! ```no_run
//! use gpfarm_client::CompilerSpec;
//! use gpfarm_evolve::{Engine, Options, ProblemRef};
//!
//! let engine = Engine::new(ProblemRef::Builtin("multiplier5".into()), Options::default())?;
//! if let Some(notice) = engine.notice() {
//!     eprintln!("note: {notice}");
//! }
//! // Any compiler: "farm:16", "threads:8", "inprocess", "nvcc"; "farm" is one daemon per core.
//! let spec: CompilerSpec = "farm".parse()?;
//! let mut compiler = spec.build(&engine.compile_options(), &Default::default())?;
//! let summary = engine.run(compiler.as_mut(), |record| {
//!     println!("{}", serde_json::to_string(record)?);
//!     Ok(())
//! })?;
//! println!("best {} after {:.1} s", summary.best_fitness, summary.totals.wall_s);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Must never print (the caller decides what a person sees) and never let caching, overlap or
//! the compiler change a fitness value.

mod account;
mod crash_dir;
mod driver;
mod engine;
mod error;
pub mod islands;
pub mod memo;
mod options;
pub mod plan;
pub mod record;
pub mod resolved;
pub mod route;
pub mod spec;

pub use driver::fit_code::FitUnits;
pub use engine::{CallbackError, Engine, IslandPlace, TEMPLATE_CHECK_KERNEL};
pub use error::EvolveError;
pub use gpfarm_client::ProblemRef;
pub use gpfarm_kernels::worker::LoadProblem;
pub use gpfarm_protocol::Route;
pub use gpfarm_protocol::worker::{CasesFile, ProblemFiles};
pub use options::{
    CRASH_RETRY_FLAGS, DEFAULT_SHAPE, EvalMode, LINK_FLAGS, LOOP_LINK_FLAGS, NO_FMAD, Options,
    default_link_flags,
};
pub use record::{
    CompileFigures, CriticalPath, EvalSplit, EvaluatorKind, FrontModel, GenerationRecord, Individuals,
    Summary, Totals,
};
pub use route::problem_loops;
pub use spec::{OptionError, RunSpec};
