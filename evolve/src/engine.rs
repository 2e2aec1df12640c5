//! Setting a run up and running it: the evaluator is chosen when the [`Engine`] is made (so the
//! caller knows which architecture to build its compiler for), and everything that needs the
//! compiler, the fitness kernel and the GPU worker, when the run starts. Must never print: what
//! a person should see is returned ([`Engine::notice`], the records), or logged as a warning.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};

use gpfarm_client::{
    Compiler, DiskCache, FailureKind, GpuWorker, ProblemRef, UnitOutcome, cache::DEFAULT_CACHE_LIMIT,
};
use gpfarm_gp::{Pipeline, Problem};
use gpfarm_kernels::gpu;
use gpfarm_kernels::worker::LoadProblem;
use gpfarm_protocol::{CompileMode, CompileOptions, SmArch, Unit};
use gpfarm_protocol::{Route, Shape};

use crate::driver::{CrashSettings, Driver, Evaluator, Settings};
use crate::error::EvolveError;
use crate::options::{EvalMode, EvalRoute, LINK_FLAGS, NO_FMAD, Options, default_crash_dir, default_shape};
use crate::record::{EvaluatorKind, GenerationRecord, Summary};

/// What a per-generation callback may fail with; the run stops and returns it as
/// [`EvolveError::Callback`].
pub type CallbackError = Box<dyn std::error::Error + Send + Sync>;

/// A run of one problem, ready to start: see the crate documentation for an example.
pub struct Engine {
    problem: Problem,
    /// How a GPU worker process loads the same problem.
    source: Option<ProblemRef>,
    options: Options,
    arch: SmArch,
    /// The GPU's name, when it evaluates.
    gpu: Option<String>,
    notice: Option<String>,
    route: EvalRoute,
    /// Why the route was taken.
    route_why: String,
    shape: Shape,
    /// The run's own compile options were accepted ([`Engine::check_options`]).
    options_checked: AtomicBool,
}

impl Engine {
    /// Loads a built-in problem or a problem directory and chooses the evaluator.
    pub fn new(problem: ProblemRef, options: Options) -> Result<Engine, EvolveError> {
        let loaded = problem.load()?;
        Engine::with_problem(loaded, Some(problem), options)
    }

    /// A run of a problem already in memory. `source` tells a GPU worker process how to load
    /// the same problem; without it the GPU cannot evaluate ([`EvalMode::Auto`] falls back to
    /// the CPU with a notice).
    pub fn with_problem(
        problem: Problem,
        source: Option<ProblemRef>,
        options: Options,
    ) -> Result<Engine, EvolveError> {
        let (gpu, notice) = choose_gpu(options.eval, options.compile, source.is_some())?;
        let arch = options.arch.or(gpu.as_ref().map(|g| g.1)).unwrap_or(SmArch::SM_90);
        let (route, route_why) = match options.route {
            Some(route) => (route, "asked for".to_owned()),
            None => crate::route::choose(&problem, &options.evolution),
        };
        let shape = options.shape.unwrap_or_else(|| default_shape(route.compiled().unwrap_or(Route::Nvrtc)));
        let mut engine = Engine {
            problem,
            source,
            options,
            arch,
            gpu: gpu.map(|g| g.0),
            notice,
            route,
            route_why,
            shape,
            options_checked: AtomicBool::new(false),
        };
        // Refuse bad GP parameters and a route the problem cannot take now, before a compiler is
        // built for them.
        engine.pipeline()?;
        if engine.options.compile && engine.route == EvalRoute::Ptx {
            gpfarm_kernels::ptx_supported(&engine.problem)?;
        }
        if engine.options.compile && engine.route == EvalRoute::Interpreter {
            gpfarm_kernels::interp::interp_supported(&engine.problem)?;
        }
        if engine.options.compile
            && engine.shape == Shape::Switch
            && engine.route == EvalRoute::Nvrtc
            && let Err(why) = engine.problem.template().switch_ready()
        {
            match engine.options.shape {
                Some(_) => return Err(EvolveError::Shape { problem: engine.problem.name().to_owned(), why }),
                // The default falls back to what every template supports.
                None => engine.shape = Shape::Kernels,
            }
        }
        engine.options.arch = Some(arch);
        Ok(engine)
    }

    /// The problem.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// The options, with the target architecture settled.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// What the compiler must be built for: the GPU's architecture when it evaluates, and
    /// `--fmad=false` unless [`Options::fmad`] is set, before the run's own flags.
    pub fn compile_options(&self) -> CompileOptions {
        let contraction = (!self.options.fmad).then(|| NO_FMAD.to_owned());
        let flags = contraction.into_iter().chain(self.options.flags.iter().cloned()).collect();
        CompileOptions {
            arch: self.arch,
            mode: CompileMode::Cubin,
            flags,
            link_flags: self.options.link_flags.clone(),
        }
    }

    /// How individuals get their fitness in this run (see [`Options::route`]).
    pub fn route(&self) -> EvalRoute {
        self.route
    }

    /// Why the run takes its route: "asked for", or the automatic choice's reason.
    pub fn route_reason(&self) -> &str {
        &self.route_why
    }

    /// Whether the run needs compile daemons: it compiles individuals (the interpreter needs
    /// one kernel compiled once, which a compiler without daemons does as well).
    pub fn needs_daemons(&self) -> bool {
        self.options.compile && self.route != EvalRoute::Interpreter
    }

    /// How units hold their individuals in this run (see [`Options::shape`]).
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Who will compute fitness when the run is given a compiler.
    pub fn evaluator(&self) -> EvaluatorKind {
        if self.gpu.is_some() { EvaluatorKind::Gpu } else { EvaluatorKind::Cpu }
    }

    /// The GPU that evaluates, by name.
    pub fn gpu_name(&self) -> Option<&str> {
        self.gpu.as_deref()
    }

    /// One line a person should see before the run: why the GPU is not used under
    /// [`EvalMode::Auto`].
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// Compiles a unit holding nothing but an empty kernel with the run's options when the run
    /// adds options of its own (NVRTC's on the NVRTC route, nvJitLink's other than the default
    /// on the PTX route): an option the compiler refuses would fail every individual, one
    /// warning each, so the run is refused at once instead. [`Engine::run`] checks once; a
    /// caller may check earlier, before it prints anything about the run.
    pub fn check_options(&self, compiler: &mut dyn Compiler) -> Result<(), EvolveError> {
        if self.options_checked.load(Ordering::Relaxed) {
            return Ok(());
        }
        let options = &self.compile_options();
        let (flags, unit, hint) = match self.route.compiled().unwrap_or(Route::Nvrtc) {
            Route::Nvrtc => (
                &self.options.flags,
                Unit::new(
                    "gpfarm_option_check.cu",
                    "extern \"C\" __global__ void gpfarm_option_check() {}\n",
                ),
                "",
            ),
            Route::Ptx => (
                &self.options.link_flags,
                Unit::ptx(
                    "gpfarm_option_check.ptx",
                    format!(
                        "// gpfarm option check\n.version {}\n.target sm_{}\n.address_size 64\n\n\
                         .visible .entry gpfarm_option_check()\n{{\n\tret;\n}}\n",
                        gpfarm_kernels::ptx::PTX_VERSION,
                        self.arch.0
                    ),
                ),
                " (nvJitLink takes -O0 and -O3 itself, ptxas's other levels as -Xptxas=-O1 or -Xptxas=-O2)",
            ),
        };
        let default_link =
            self.route == EvalRoute::Ptx && flags.iter().map(String::as_str).eq(LINK_FLAGS.iter().copied());
        if !flags.is_empty() && !default_link {
            let batch = compiler.compile(std::slice::from_ref(&unit), options)?;
            if let Some(UnitOutcome::Failed(failure)) = batch.results.into_iter().next().map(|r| r.outcome)
                && failure.kind != FailureKind::Lost
            {
                let route = self.route.compiled().unwrap_or(Route::Nvrtc);
                return Err(EvolveError::Options { route, flags: flags.clone(), failure, hint });
            }
        }
        self.options_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    fn pipeline(&self) -> Result<Pipeline, EvolveError> {
        let depth = if self.options.overlap { 2 } else { 1 };
        let depth = NonZeroUsize::new(depth).unwrap_or(NonZeroUsize::MIN);
        Ok(Pipeline::new(&self.problem, self.options.evolution.clone(), depth)?)
    }

    /// Runs every generation, compiling individuals on `compiler` (its `serve` runs on a thread
    /// of this call) and evaluating them on the chosen evaluator. `on_generation` gets each
    /// generation's record as soon as the generation is complete; an error from it stops the run.
    pub fn run(
        &self,
        compiler: &mut (dyn Compiler + Send + '_),
        on_generation: impl FnMut(&GenerationRecord) -> Result<(), CallbackError>,
    ) -> Result<Summary, EvolveError> {
        self.run_with(Some(compiler), on_generation)
    }

    /// Runs every generation without compiling anything: the CPU evaluates the phenotypes (for
    /// quick experiments with the GP engine).
    pub fn run_without_compiling(
        &self,
        on_generation: impl FnMut(&GenerationRecord) -> Result<(), CallbackError>,
    ) -> Result<Summary, EvolveError> {
        self.run_with(None, on_generation)
    }

    /// [`Engine::run`] with a compiler, [`Engine::run_without_compiling`] without one.
    pub fn run_with(
        &self,
        mut compiler: Option<&mut (dyn Compiler + Send + '_)>,
        mut on_generation: impl FnMut(&GenerationRecord) -> Result<(), CallbackError>,
    ) -> Result<Summary, EvolveError> {
        let options = self.compile_options();
        if let Some(c) = compiler.as_deref_mut() {
            self.check_options(c)?;
        }
        let interpret = self.route == EvalRoute::Interpreter;
        let evaluator = match (&self.gpu, compiler.as_deref_mut()) {
            (None, _) => Evaluator::Cpu,
            (Some(_), None) => {
                return Err(EvolveError::NoGpu("individuals must be compiled to run on it".into()));
            }
            (Some(_), Some(c)) if interpret => {
                Evaluator::Interpreter(Box::new(self.start_worker(c, &options, true)?))
            }
            (Some(_), Some(c)) => Evaluator::Gpu(Box::new(self.start_worker(c, &options, false)?)),
        };
        // The interpreter's kernel is compiled; individuals are not.
        if interpret {
            compiler = None;
        }
        let o = &self.options;
        let settings = Settings {
            cache: o.cache,
            overlap: o.overlap,
            per_unit: o.per_unit,
            workers: compiler.as_ref().map_or(1, |c| c.workers()),
            route: self.route.compiled().unwrap_or(Route::Nvrtc),
            interpret,
            shape: self.shape,
            crash: CrashSettings {
                retry_flags: o.crash_retry_flags.clone(),
                retry_on_gpu: o.crash_retry_on_gpu,
                dir: o.crash_dir.clone().unwrap_or_else(default_crash_dir),
            },
        };
        let toolchain = compiler.as_ref().map_or_else(|| "none".into(), |c| c.toolchain());
        let mut driver =
            Driver::new(&self.problem, &options, toolchain, settings, self.pipeline()?, evaluator);
        if let (Some(dir), true, Some(_)) = (&o.disk_cache, o.cache, &compiler) {
            let disk = DiskCache::open(dir, DEFAULT_CACHE_LIMIT)
                .map_err(|source| EvolveError::DiskCache { dir: dir.clone(), source })?;
            driver.disk_cache(disk);
        }
        if let Some(path) = &o.trace_units {
            let file = std::fs::File::create(path)
                .map_err(|source| EvolveError::Trace { path: path.clone(), source })?;
            driver.trace_units(file, path.clone());
        }
        let mut report = |r: GenerationRecord| on_generation(&r).map_err(EvolveError::Callback);
        let (totals, pipeline) = driver.run(compiler, &mut report)?;
        let best = pipeline.best_ever();
        let e = &o.evolution;
        Ok(Summary {
            summary: true,
            problem: self.problem.name().to_owned(),
            generations: e.generations,
            population: e.population,
            seed: e.seed,
            cache: o.cache,
            overlap: o.overlap,
            best_fitness: best.map_or(f64::NAN, |(_, f)| f.value()),
            best_phenotype: best.and_then(|(i, _)| i.phenotype()).map(|p| p.as_str().to_owned()),
            route: self.route.as_str().to_owned(),
            route_reason: self.route_why.clone(),
            mean_generation_ms: totals.wall_s * 1000.0 / (e.generations + 1) as f64,
            totals,
        })
    }

    /// Compiles the problem's fitness kernel, or its interpreter (once; no daemon is needed for
    /// it), and starts a GPU worker process with it.
    fn start_worker(
        &self,
        compiler: &mut (dyn Compiler + Send + '_),
        options: &CompileOptions,
        interpreter: bool,
    ) -> Result<GpuWorker, EvolveError> {
        let source =
            self.source.clone().ok_or_else(|| EvolveError::NoGpu("the problem has no source".into()))?;
        let (name, kernel) = if interpreter {
            ("gpfarm_interpreter.cu", gpfarm_kernels::interp::interpreter_source(&self.problem)?)
        } else {
            ("gpfarm_fitness.cu", gpu::fitness_source(&self.problem)?)
        };
        let batch = compiler.compile(&[Unit::new(name, kernel)], options)?;
        let result = batch.results.into_iter().next().ok_or(EvolveError::CompilerStopped)?;
        let cubin = match (result.outcome, interpreter) {
            (UnitOutcome::Cubin(c), _) => c,
            (UnitOutcome::Failed(failure), false) => {
                return Err(EvolveError::FitnessKernel { failure, log: result.log });
            }
            (UnitOutcome::Failed(failure), true) => {
                return Err(EvolveError::InterpreterKernel { failure, log: result.log });
            }
        };
        let exe = match &self.options.gpu_worker {
            Some(exe) => exe.clone(),
            None => gpfarm_client::gpu_worker_executable().map_err(gpfarm_client::WorkerError::from)?,
        };
        let (fitness, interpreter) = if interpreter { (None, Some(cubin)) } else { (Some(cubin), None) };
        Ok(GpuWorker::spawn_with(&exe, source, fitness, interpreter)?)
    }
}

/// A GPU's name and architecture.
type Gpu = (String, SmArch);

/// The GPU to evaluate on, if `mode` asks for it and one is there, and the notice to show when
/// [`EvalMode::Auto`] goes without it.
fn choose_gpu(
    mode: EvalMode,
    compile: bool,
    loadable: bool,
) -> Result<(Option<Gpu>, Option<String>), EvolveError> {
    if mode == EvalMode::Cpu {
        return Ok((None, None));
    }
    let why = match gpu::probe() {
        Ok(_) if !compile => "individuals are not compiled".to_string(),
        Ok(_) if !loadable => "the problem was not loaded from a built-in name or a directory".to_string(),
        Ok((name, (major, minor))) => return Ok((Some((name, SmArch((major * 10 + minor) as u32))), None)),
        Err(e) => e.to_string(),
    };
    if mode == EvalMode::Gpu {
        return Err(EvolveError::NoGpu(why));
    }
    Ok((None, Some(format!("{why}; evaluating on the CPU (the reference evaluator)"))))
}
