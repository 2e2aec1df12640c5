//! Planning a run: the engine for a problem and options, and the compilers its route needs, per
//! island: none for the CPU route (or the interpreter without a GPU), one compiler without
//! daemons for the interpreter's one kernel, one farm shared by every island, or one farm per
//! island with the daemons divided between them ([`gpfarm_client::partition::shares`]). What
//! `gpfarm evolve` and the Python package both run; they only fill in [`CompilerRequest`].
//!
//! Must never print, and never build a compiler except through
//! [`CompilerSpec::build`](gpfarm_client::CompilerSpec::build).

use std::num::NonZeroUsize;

use gpfarm_client::partition::shares;
use gpfarm_client::{BuildConfig, Compiler, CompilerSpec, ProblemRef, Workers};
use gpfarm_protocol::{CompileOptions, Route};

use crate::engine::{CallbackError, Engine, IslandPlace};
use crate::error::EvolveError;
use crate::options::Options;
use crate::record::{GenerationRecord, Summary};
use crate::resolved::Needs;

/// Whether islands share one farm or split its daemons between them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum IslandFarm {
    /// One farm; every island's units go to its queue.
    #[default]
    Shared,
    /// A farm per island, the daemons divided between them.
    Split,
}

impl std::fmt::Display for IslandFarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IslandFarm::Shared => "shared",
            IslandFarm::Split => "split",
        })
    }
}

impl std::str::FromStr for IslandFarm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        <IslandFarm as clap::ValueEnum>::from_str(s, false).map_err(|_| format!("{s:?}: use shared or split"))
    }
}

/// Which compiler a run asks for, besides what its route needs.
#[derive(Debug, Clone)]
pub struct CompilerRequest {
    /// The compiler: `farm`, `threads`, `inprocess` or `nvcc` (with `farm` and `threads`, an
    /// open count is filled by `workers`).
    pub spec: CompilerSpec,
    /// Daemons or threads, for a spec that left its count open; `None`: one per core.
    pub workers: Option<NonZeroUsize>,
    /// Where the toolchain is, attaching to a resident farm, the unit deadline.
    pub build: BuildConfig,
    /// With several islands: one farm for all, or one each.
    pub island_farm: IslandFarm,
}

impl Default for CompilerRequest {
    fn default() -> Self {
        CompilerRequest {
            spec: CompilerSpec::Farm(Workers::PerCore),
            workers: None,
            build: BuildConfig::default(),
            island_farm: IslandFarm::Shared,
        }
    }
}

/// The compilers of a run: none, one (every island shares it), or one per island.
pub type Compilers = Vec<Box<dyn Compiler + Send>>;

/// The engine for `problem` and `options`, and the compilers its route needs, built (warm) and
/// checked against the run's compile options. A route left to the engine takes NVRTC when the
/// compiler is nvcc, which compiles nothing else. Settings that contradict each other give
/// [`EvolveError::Usage`].
pub fn prepare(
    problem: ProblemRef,
    mut options: Options,
    request: &CompilerRequest,
) -> Result<(Engine, Compilers), EvolveError> {
    if matches!(request.spec, CompilerSpec::FarmJit(_)) {
        return usage("evolve compiles CUBIN: use --compiler farm (farm-jit is for `compile` and `bench`)");
    }
    let attach = request.build.attach.is_some();
    if attach && !matches!(request.spec, CompilerSpec::Farm(_)) {
        return usage("--attach compiles on running daemons: use it with --compiler farm");
    }
    if options.route.is_none() && request.spec == CompilerSpec::Nvcc {
        options.route = Some(Route::Nvrtc);
    }
    let engine = Engine::new(problem, options)?;
    if attach && !engine.needs_daemons() {
        return usage(&format!(
            "--attach compiles on running daemons, and the {} route compiles no individual: add --route ptx or \
             --route nvrtc",
            engine.route()
        ));
    }
    let islands = engine.options().islands.max(1);
    let split = request.island_farm == IslandFarm::Split && islands > 1;
    if split && attach {
        return usage("--island-farm split starts its own farms: leave out --attach");
    }
    let options = engine.compile_options();
    let mut compilers: Compilers = match engine.resolved().needs {
        Needs::Nothing => Vec::new(),
        // Kernels compiled in this process (the interpreter's, and its fitting kernels'), a
        // thread each.
        Needs::Kernels(n) => {
            let spec = if n.get() > 1 {
                CompilerSpec::Threads(Workers::Exactly(n))
            } else {
                CompilerSpec::InProcess
            };
            vec![build_compiler(spec, None, &options, &request.build)?]
        }
        Needs::Daemons if split => {
            let total = request.workers.unwrap_or_else(cores).get();
            shares(total, islands)
                .into_iter()
                .map(|share| build_compiler(request.spec, NonZeroUsize::new(share), &options, &request.build))
                .collect::<Result<_, _>>()?
        }
        Needs::Daemons => vec![build_compiler(request.spec, request.workers, &options, &request.build)?],
    };
    // After the compilers are built: a configuration error is what a person should see first.
    if let Some(c) = compilers.first_mut() {
        engine.check_options(c.as_mut())?;
    }
    Ok((engine, compilers))
}

/// Builds the compiler `spec` names, warm; `workers` fills a spec that left its count open
/// (`farm`, `threads`), an explicit count (`farm:4`) stays.
pub fn build_compiler(
    spec: CompilerSpec,
    workers: Option<NonZeroUsize>,
    options: &CompileOptions,
    config: &BuildConfig,
) -> Result<Box<dyn Compiler + Send>, EvolveError> {
    let spec = match workers {
        Some(n) => spec.or_workers(n),
        None => spec,
    };
    let attaching =
        config.attach.is_some() && matches!(spec, CompilerSpec::Farm(_) | CompilerSpec::FarmJit(_));
    let what = if attaching { "attaching to running daemons".to_owned() } else { format!("starting {spec}") };
    spec.build(options, config).map_err(|source| EvolveError::Build { what, source })
}

/// Runs `engine` on `compilers` (see [`prepare`]), every island in this process.
pub fn run(
    engine: &Engine,
    compilers: &mut Compilers,
    on_generation: impl FnMut(&GenerationRecord) -> Result<(), CallbackError>,
) -> Result<Summary, EvolveError> {
    let place = IslandPlace::whole(engine.options().islands.max(1));
    let compilers = compilers.iter_mut().map(|c| c.as_mut() as &mut (dyn Compiler + Send)).collect();
    engine.run_islands(compilers, place, on_generation)
}

fn usage<T>(why: &str) -> Result<T, EvolveError> {
    Err(EvolveError::Usage(why.to_owned()))
}

fn cores() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpfarm_gp::EvolutionConfig;

    fn options(route: Option<Route>) -> Options {
        Options {
            evolution: EvolutionConfig {
                population: 20,
                generations: 1,
                seed: 0,
                max_size: 0,
                ..Default::default()
            },
            eval: crate::EvalMode::Cpu,
            route,
            ..Options::default()
        }
    }

    #[test]
    fn the_cpu_route_needs_no_compiler() {
        let (engine, compilers) = prepare(
            ProblemRef::Builtin("keijzer6".into()),
            options(Some(Route::Cpu)),
            &CompilerRequest::default(),
        )
        .unwrap();
        assert_eq!(engine.route(), Route::Cpu);
        assert!(compilers.is_empty());
    }

    #[test]
    fn the_interpreter_without_a_gpu_is_the_cpu_route_and_says_so() {
        let (engine, compilers) = prepare(
            ProblemRef::Builtin("keijzer6".into()),
            options(Some(Route::Interpreter)),
            &CompilerRequest::default(),
        )
        .unwrap();
        assert_eq!(engine.route(), Route::Cpu);
        assert!(engine.route_reason().contains("CPU reference evaluator"), "{}", engine.route_reason());
        assert!(compilers.is_empty());
    }

    #[test]
    fn contradicting_settings_are_usage_errors() {
        let farm_jit = CompilerRequest { spec: "farm-jit".parse().unwrap(), ..CompilerRequest::default() };
        let e = prepare(ProblemRef::Builtin("keijzer6".into()), options(None), &farm_jit).err().unwrap();
        assert!(matches!(e, EvolveError::Usage(_)), "{e}");
        let attach = CompilerRequest {
            build: BuildConfig { attach: Some(None), ..BuildConfig::default() },
            ..CompilerRequest::default()
        };
        let e = prepare(ProblemRef::Builtin("keijzer6".into()), options(Some(Route::Cpu)), &attach)
            .err()
            .unwrap();
        assert!(matches!(&e, EvolveError::Usage(why) if why.contains("cpu route")), "{e}");
    }
}
