//! Setting a run up and running it: the evaluator is chosen when the [`Engine`] is made (so the
//! caller knows which architecture to build its compiler for), and everything that needs the
//! compiler, the fitness kernel and the GPU worker, when the run starts. Must never print: what
//! a person should see is returned ([`Engine::notice`], the records), or logged as a warning.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpfarm_client::{
    CacheKey, Compiler, DiskCache, FailureKind, GpuWorker, ProblemRef, UnitOutcome,
    cache::DEFAULT_CACHE_LIMIT,
};
use gpfarm_gp::{Pipeline, Problem};
use gpfarm_kernels::gpu;
use gpfarm_kernels::worker::LoadProblem;
use gpfarm_protocol::{CompileMode, CompileOptions, Language, Unit};
use gpfarm_protocol::{Route, Shape};

use crate::driver::{CrashSettings, Driver, Evaluator, Settings, with_queues};
use crate::error::EvolveError;
use crate::islands::{Link, island_seed, ring};
use crate::options::{NO_FMAD, Options};
use crate::record::{EvaluatorKind, FrontModel, GenerationRecord, Summary, Totals};
use crate::resolved::{Needs, Resolved};

/// What a per-generation callback may fail with; the run stops and returns it as
/// [`EvolveError::Callback`].
pub type CallbackError = Box<dyn std::error::Error + Send + Sync>;

/// A run of one problem, ready to start: see the crate documentation for an example.
pub struct Engine {
    problem: Problem,
    /// How a GPU worker process loads the same problem.
    source: Option<ProblemRef>,
    options: Options,
    /// Where fitness is computed, settled once ([`crate::resolved`]).
    resolved: Resolved,
    /// The run's own compile options were accepted ([`Engine::check_options`]).
    options_checked: AtomicBool,
    /// Set to stop the run ([`Engine::stopper`]).
    stop: Arc<AtomicBool>,
}

/// The islands a process runs, for a run spread over processes (MPI ranks): islands `first`,
/// `first + 1`, ... of the whole ring, one per link ([`crate::islands::ring_stretch`]). A run
/// in one process holds the whole ring ([`IslandPlace::whole`]).
pub struct IslandPlace {
    /// The ring index of the first island held here.
    pub first: usize,
    /// One per island held here, in ring order.
    pub links: Vec<Link>,
    /// The islands of the whole ring, in every process: with more than one, every island
    /// migrates, also a process's only one.
    pub ring: usize,
}

impl IslandPlace {
    /// All `n` islands of a ring, in this process.
    pub fn whole(n: usize) -> IslandPlace {
        IslandPlace { first: 0, links: ring(n), ring: n }
    }
}

/// The kernel of the unit the NVRTC route compiles before generation 0 to check the problem's
/// template around one program of its grammar ([`Engine::check_options`]).
pub const TEMPLATE_CHECK_KERNEL: &str = "gpfarm_template_check";

impl Engine {
    /// Loads a built-in problem or a problem directory and chooses the evaluator.
    pub fn new(problem: ProblemRef, options: Options) -> Result<Engine, EvolveError> {
        let loaded = problem.load()?;
        Engine::with_problem(loaded, Some(problem), options)
    }

    /// A run of a problem already in memory. `source` tells a GPU worker process how to load
    /// the same problem; without it the GPU cannot evaluate ([`crate::EvalMode::Auto`] falls back to
    /// the CPU with a notice).
    pub fn with_problem(
        problem: Problem,
        source: Option<ProblemRef>,
        options: Options,
    ) -> Result<Engine, EvolveError> {
        gpfarm_gp::program::check_problem(&problem)?;
        let problem = match options.max_steps {
            None => problem,
            Some(n) => problem
                .with_max_steps(n)
                .ok_or_else(|| EvolveError::Usage("the step limit (max_steps) must be at least 1".into()))?,
        };
        let resolved = crate::resolved::resolve(&problem, &options, source.is_some())?;
        let mut engine = Engine {
            problem,
            source,
            options,
            resolved,
            options_checked: AtomicBool::new(false),
            stop: Arc::new(AtomicBool::new(false)),
        };
        // Refuse bad GP parameters before a compiler is built for them.
        Pipeline::check(&engine.problem, &engine.options.evolution, &engine.options.start)?;
        engine.check_islands()?;
        engine.options.arch = Some(engine.resolved.arch);
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
            arch: self.resolved.arch,
            mode: CompileMode::Cubin,
            flags,
            link_flags: self.resolved.link_flags.clone(),
        }
    }

    /// How individuals get their fitness in this run (see [`Options::route`]).
    pub fn route(&self) -> Route {
        self.resolved.route
    }

    /// The language of what this run compiles: its individuals' units on a compile route, or
    /// the interpreter's one kernel (CUDA C).
    fn compiled_language(&self) -> Language {
        self.resolved.route.language().unwrap_or(Language::CudaC)
    }

    /// Why the run takes its route: "asked for", or the automatic choice's reason.
    pub fn route_reason(&self) -> &str {
        &self.resolved.why
    }

    /// Where fitness is computed, and what the run compiles: settled when the engine was made.
    pub fn resolved(&self) -> &Resolved {
        &self.resolved
    }

    /// Whether the run needs compile daemons: it compiles individuals (the interpreter needs
    /// one kernel compiled once, which a compiler without daemons does as well).
    pub fn needs_daemons(&self) -> bool {
        self.resolved.needs == Needs::Daemons
    }

    /// How units hold their individuals in this run (see [`Options::shape`]).
    pub fn shape(&self) -> Shape {
        self.resolved.shape
    }

    /// Who will compute fitness when the run is given a compiler.
    pub fn evaluator(&self) -> EvaluatorKind {
        self.resolved.evaluator()
    }

    /// The GPU that evaluates, by name.
    pub fn gpu_name(&self) -> Option<&str> {
        self.resolved.gpu.as_deref()
    }

    /// One line a person should see before the run: why the GPU is not used under
    /// [`crate::EvalMode::Auto`].
    pub fn notice(&self) -> Option<&str> {
        self.resolved.notice.as_deref()
    }

    /// Compiles a unit holding nothing but an empty kernel with the run's options when the run
    /// adds options of its own (NVRTC's on the NVRTC route, nvJitLink's other than the default
    /// on the PTX route): an option the compiler refuses would fail every individual, one
    /// warning each, so the run is refused at once instead. On the NVRTC route it also compiles
    /// the template around one program of the grammar, for the same reason. [`Engine::run`]
    /// checks once; a caller may check earlier, before it prints anything about the run.
    pub fn check_options(&self, compiler: &mut dyn Compiler) -> Result<(), EvolveError> {
        if self.options_checked.load(Ordering::Relaxed) {
            return Ok(());
        }
        let options = &self.compile_options();
        let language = self.compiled_language();
        let (flags, unit, hint) = match language {
            Language::CudaC => (
                &self.options.flags,
                Unit::new(
                    "gpfarm_option_check.cu",
                    "extern \"C\" __global__ void gpfarm_option_check() {}\n",
                ),
                "",
            ),
            Language::Ptx => (
                &self.options.link_flags,
                Unit::ptx(
                    "gpfarm_option_check.ptx",
                    format!(
                        "// gpfarm option check\n.version {}\n.target sm_{}\n.address_size 64\n\n\
                         .visible .entry gpfarm_option_check()\n{{\n\tret;\n}}\n",
                        gpfarm_kernels::ptx::PTX_VERSION,
                        self.resolved.arch.0
                    ),
                ),
                " (nvJitLink takes -O0 and -O3 itself, ptxas's other levels as -Xptxas=-O1 or -Xptxas=-O2)",
            ),
        };
        if !flags.is_empty() {
            let batch = compiler.compile(std::slice::from_ref(&unit), options)?;
            if let Some(UnitOutcome::Failed(failure)) = batch.results.into_iter().next().map(|r| r.outcome)
                && failure.kind != FailureKind::Lost
            {
                return Err(EvolveError::Options { language, flags: flags.clone(), failure, hint });
            }
        }
        if self.resolved.route == Route::Nvrtc {
            self.check_template(compiler, options)?;
        }
        self.options_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Compiles the template around one program its grammar writes: a template that does not
    /// compile would fail every individual, so the run is refused before generation 0.
    fn check_template(
        &self,
        compiler: &mut dyn Compiler,
        options: &CompileOptions,
    ) -> Result<(), EvolveError> {
        let Ok(Some((phenotype, program))) = gpfarm_gp::program::sample_program(&self.problem) else {
            return Ok(()); // the grammar's own check speaks for it
        };
        let Some(kernel) = gpfarm_gp::KernelName::new(TEMPLATE_CHECK_KERNEL) else { return Ok(()) };
        let member =
            gpfarm_kernels::unit::Member { kernel: &kernel, phenotype: &phenotype, program: Some(&program) };
        let rendered = gpfarm_kernels::unit::render(
            &self.problem,
            Language::CudaC,
            Shape::Kernels,
            self.resolved.arch,
            &kernel,
            std::slice::from_ref(&member),
        );
        let batch = compiler.compile(std::slice::from_ref(&rendered.unit), options)?;
        let Some(result) = batch.results.into_iter().next() else { return Ok(()) };
        match result.outcome {
            UnitOutcome::Failed(failure) if failure.kind == FailureKind::Compilation => {
                let first = result
                    .log
                    .lines()
                    .find(|l| l.contains("error"))
                    .map(|l| l.trim().to_owned())
                    .unwrap_or_else(|| failure.message.clone());
                let program: String = phenotype.as_str().chars().take(60).collect();
                Err(EvolveError::Template { program, first })
            }
            _ => Ok(()),
        }
    }

    /// The pipeline of island `island` (the run's own for island 0).
    fn pipeline(&self, island: usize) -> Result<Pipeline, EvolveError> {
        let depth = if self.options.overlap { 2 } else { 1 };
        let depth = NonZeroUsize::new(depth).unwrap_or(NonZeroUsize::MIN);
        let mut config = self.options.evolution.clone();
        config.seed = island_seed(config.seed, island);
        Ok(Pipeline::starting_from(&self.problem, config, depth, &self.options.start)?)
    }

    fn check_islands(&self) -> Result<(), EvolveError> {
        let o = &self.options;
        let most = gpfarm_gp::limits::MAX_ISLANDS;
        if o.islands > most {
            return Err(EvolveError::Islands(format!("--islands {} is more than {most}", o.islands)));
        }
        let e = &o.evolution;
        let bytes = gpfarm_gp::limits::population_bytes(e.population, e.init_max_len) * o.islands as u128;
        let what = format!("{} islands of {} individuals", o.islands, e.population);
        gpfarm_gp::limits::fits(&what, bytes).map_err(EvolveError::Islands)?;
        let why = if o.islands == 0 {
            "--islands must be at least 1"
        } else if o.islands > 1 && o.max_time.is_some() {
            "--max-time ends one island's run; with several islands it is not supported"
        } else if o.islands > 1 && o.migrate_every == 0 {
            "--migrate-every must be at least 1"
        } else if o.islands > 1 && o.migrants >= o.evolution.population {
            "--migrants must be fewer than the population"
        } else {
            return Ok(());
        };
        Err(EvolveError::Islands(why.to_owned()))
    }

    /// A flag that stops the run when set: it ends at its next step (a unit compiled, a
    /// generation evaluated, 50 ms of waiting for migrants) with [`EvolveError::Stopped`], every
    /// island of it. Setting it before the run makes the run stop at once.
    pub fn stopper(&self) -> Arc<AtomicBool> {
        self.stop.clone()
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

    /// [`Engine::run`] with a compiler, [`Engine::run_without_compiling`] without one. With
    /// [`Options::islands`] above 1, every island runs here, sharing the compiler.
    pub fn run_with(
        &self,
        compiler: Option<&mut (dyn Compiler + Send + '_)>,
        on_generation: impl FnMut(&GenerationRecord) -> Result<(), CallbackError>,
    ) -> Result<Summary, EvolveError> {
        let place = IslandPlace::whole(self.options.islands.max(1));
        self.run_islands(compiler.into_iter().collect(), place, on_generation)
    }

    /// Runs the islands `place` holds, each on a thread of its own with its own pipeline and
    /// evaluator (GPUs taken round-robin by ring index), compiling on `compilers`: none (nothing
    /// is compiled), one that every island shares, or one per island. `on_generation` gets every
    /// island's records, on this thread, as they complete (their `island` says whose). The
    /// summary's best is the best of these islands.
    pub fn run_islands(
        &self,
        mut compilers: Vec<&mut (dyn Compiler + Send + '_)>,
        place: IslandPlace,
        mut on_generation: impl FnMut(&GenerationRecord) -> Result<(), CallbackError>,
    ) -> Result<Summary, EvolveError> {
        let started = self.options.started.unwrap_or_else(Instant::now);
        let n = place.links.len();
        if n == 0 || (compilers.len() > 1 && compilers.len() != n) {
            return Err(EvolveError::Islands(format!("{} compilers for {n} islands", compilers.len())));
        }
        let options = self.compile_options();
        for c in compilers.iter_mut() {
            self.check_options(&mut **c)?;
        }
        // The evaluator's kernel (and the fitting kernel, where the GPU fits free parameters) is
        // compiled once, here, in one batch; each island's worker loads it.
        let (kernel, fit_kernel) = match (&self.resolved.gpu, compilers.first_mut()) {
            (None, _) => (None, Vec::new()),
            (Some(_), None) => {
                return Err(EvolveError::NoGpu("individuals must be compiled to run on it".into()));
            }
            (Some(_), Some(c)) => {
                let t = Instant::now();
                let (kernel, fit) = self.worker_kernels(&mut **c, &options)?;
                if gpfarm_kernels::gpu::fit_profiling() {
                    eprintln!(
                        "gpfarm start-up profile: the worker's kernels ready {:.1} ms after the run's start, in {:.1} ms",
                        started.elapsed().as_secs_f64() * 1e3,
                        t.elapsed().as_secs_f64() * 1e3
                    );
                }
                (Some(kernel), fit)
            }
        };
        let fit_toolchain = compilers.first().map_or_else(|| "none".into(), |c| c.toolchain());
        // The interpreter's kernel is compiled; individuals are not.
        if !self.needs_daemons() {
            compilers.clear();
        }
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        let shared = IslandShared {
            options: &options,
            kernel: kernel.as_deref(),
            fit_kernels: &fit_kernel,
            fit_toolchain,
            settings: self.settings(compilers.first().map_or(1, |c| c.workers())),
            toolchain: compilers.first().map_or_else(|| "none".into(), |c| c.toolchain()),
            compiling: !compilers.is_empty(),
            devices: if self.resolved.gpu.is_some() { gpu::device_count().max(1) } else { 1 },
            eval_threads: NonZeroUsize::new(self.options.threads.map_or(cores, NonZeroUsize::get) / n)
                .unwrap_or(NonZeroUsize::MIN),
            several: place.ring > 1,
            started,
        };
        let stop = &self.stop;
        let (records_tx, records_rx) = crossbeam_channel::unbounded::<GenerationRecord>();
        let outcomes = with_queues(compilers, &options, n, |submitters| {
            let (outcomes, callback) = std::thread::scope(|scope| {
                let islands: Vec<_> = place
                    .links
                    .into_iter()
                    .enumerate()
                    .map(|(k, link)| {
                        let island = place.first + k;
                        let submitter = submitters.get(if submitters.len() == 1 { 0 } else { k });
                        let records = records_tx.clone();
                        let link = shared.several.then_some((link, self.options.migrants));
                        let shared = &shared;
                        scope.spawn(move || {
                            let outcome = self.run_island(shared, island, link, submitter, records);
                            if outcome.is_err() {
                                stop.store(true, Ordering::Relaxed);
                            }
                            outcome
                        })
                    })
                    .collect();
                drop(records_tx);
                // Records reach the caller here, on its own thread, as they come.
                let mut callback = None;
                for record in records_rx.iter() {
                    if callback.is_none()
                        && let Err(e) = on_generation(&record)
                    {
                        callback = Some(e);
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                let outcomes: Vec<Result<(Totals, Pipeline), EvolveError>> = islands
                    .into_iter()
                    .map(|h| h.join().unwrap_or(Err(EvolveError::CompilerStopped)))
                    .collect();
                (outcomes, callback)
            });
            match callback {
                Some(e) => Err(EvolveError::Callback(e)),
                None => first_failure(outcomes, place.first, place.ring > 1),
            }
        })?;
        Ok(self.summary(&outcomes))
    }

    /// How the drivers of this run treat individuals, for compilers of `workers` workers.
    fn settings(&self, workers: usize) -> Settings {
        let o = &self.options;
        Settings {
            cache: o.cache,
            overlap: o.overlap,
            per_unit: o.per_unit,
            workers,
            route: self.resolved.route,
            shape: self.resolved.shape,
            fit_kernels: o.fit_kernels,
            crash: CrashSettings {
                retry_flags: o.crash_retry_flags.clone(),
                retry_on_gpu: o.crash_retry_on_gpu,
                dir: crate::crash_dir::CrashDir::new(o.crash_dir.clone()),
            },
        }
    }

    /// Runs island `island` to its last generation on the calling thread: its evaluator (a GPU
    /// worker on GPU `island % devices`, or the CPU), its pipeline and its driver, sending each
    /// record to `records`.
    fn run_island(
        &self,
        shared: &IslandShared<'_>,
        island: usize,
        link: Option<(Link, usize)>,
        submitter: Option<&gpfarm_client::Submitter>,
        records: crossbeam_channel::Sender<GenerationRecord>,
    ) -> Result<(Totals, Pipeline), EvolveError> {
        let o = &self.options;
        let evaluator = match shared.kernel {
            None => Evaluator::Cpu,
            Some(cubin) => {
                let fit = shared.fit_kernels.to_vec();
                let t = Instant::now();
                let worker = Box::new(self.spawn_worker(cubin.to_vec(), fit, island % shared.devices)?);
                if gpfarm_kernels::gpu::fit_profiling() {
                    eprintln!(
                        "gpfarm start-up profile: island {island}'s GPU worker ready {:.1} ms after the run's start, \
                         in {:.1} ms ({})",
                        shared.started.elapsed().as_secs_f64() * 1e3,
                        t.elapsed().as_secs_f64() * 1e3,
                        if worker.reused { "kept from a run before" } else { "started" }
                    );
                }
                match self.resolved.route {
                    Route::Interpreter => Evaluator::Interpreter(worker),
                    _ => Evaluator::Gpu(worker),
                }
            }
        };
        let mut pipeline = self.pipeline(island)?;
        if link.is_some() {
            pipeline.migrate_every(o.migrate_every);
        }
        let mut driver = Driver::new(
            &self.problem,
            shared.options,
            shared.toolchain.clone(),
            shared.settings.clone(),
            pipeline,
            evaluator,
        );
        driver.island(island, link, self.stop.clone());
        driver.eval_threads(shared.eval_threads);
        driver.deadline(o.max_time.map(|t| shared.started + t));
        driver.keep_gpu_worker(o.keep_gpu_worker);
        if !shared.fit_kernels.is_empty() {
            driver.fit_on_gpu(shared.fit_toolchain.clone());
        }
        if let (Some(dir), true, true) = (&o.disk_cache, o.cache, shared.compiling) {
            let disk = DiskCache::open(dir, DEFAULT_CACHE_LIMIT)
                .map_err(|source| EvolveError::DiskCache { dir: dir.clone(), source })?;
            driver.disk_cache(disk);
        }
        if let Some(path) = &o.trace_units {
            let path = if shared.several {
                let mut p = path.clone().into_os_string();
                p.push(format!(".island{island}"));
                p.into()
            } else {
                path.clone()
            };
            let file = std::fs::File::create(&path)
                .map_err(|source| EvolveError::Trace { path: path.clone(), source })?;
            driver.trace_units(file, path);
        }
        let mut report = |r: GenerationRecord| records.send(r).map_err(|_| EvolveError::Stopped);
        driver.run_on(submitter, &mut report)
    }

    /// The run's summary from its islands' totals and pipelines: the best of them all.
    fn summary(&self, outcomes: &[(Totals, Pipeline)]) -> Summary {
        let (o, e) = (&self.options, &self.options.evolution);
        let mut totals = Totals::default();
        let mut best: Option<(&gpfarm_gp::Individual, gpfarm_gp::Fitness)> = None;
        let mut island_best = Vec::new();
        let mut front = Vec::new();
        for (t, pipeline) in outcomes {
            front.extend(pipeline.front().iter().filter_map(|p| {
                let mut model = FrontModel::new(
                    self.problem.spec(),
                    p.size,
                    p.fitness.value(),
                    p.individual.expression()?.as_str().to_owned(),
                );
                model.seed = Some(gpfarm_gp::Seed {
                    genome: p.individual.genome.codons().to_vec(),
                    params: p.individual.evaluated_params().to_vec(),
                });
                Some(model)
            }));
            totals.add(t);
            let b = pipeline.best_ever();
            island_best.push(b.map_or(f64::NAN, |(_, f)| f.value()));
            if let Some((i, f)) = b
                && best.is_none_or(|(_, g)| f.is_better_than(&g))
            {
                best = Some((i, f));
            }
        }
        let mut summary = Summary {
            summary: true,
            problem: self.problem.name().to_owned(),
            generations: e.generations,
            population: e.population,
            seed: e.seed,
            cache: o.cache,
            overlap: o.overlap,
            best_fitness: best.map_or(f64::NAN, |(_, f)| f.value()),
            best_phenotype: best.and_then(|(i, _)| i.expression()).map(|p| p.as_str().to_owned()),
            route: self.resolved.route.as_str().to_owned(),
            route_reason: self.resolved.why.clone(),
            mean_generation_ms: totals.wall_s * 1000.0
                / (outcomes.iter().filter_map(|(_, p)| p.stopped_after()).max().unwrap_or(e.generations) + 1)
                    as f64,
            totals,
            islands: outcomes.len(),
            island_best,
            stopped_after: outcomes.iter().filter_map(|(_, p)| p.stopped_after()).max(),
            front: Vec::new(),
            chosen: None,
            direction: Some(self.problem.direction()),
            select_tolerance: e.select_tolerance,
        };
        summary.merge_front(&front);
        summary
    }

    /// Compiles the problem's fitness kernel, or its interpreter (once; no daemon is needed for
    /// it), for the GPU workers to load; with it, in the same batch (so a compiler with several
    /// workers builds both at once), the fitting kernel ([`gpfarm_kernels::interpreter::fit_source`])
    /// when the GPU fits free parameters: the grammar has `#param#`, fitting is on and the
    /// problem's programs can be fitted on the GPU. Without it the CPU fits; a fitting kernel that
    /// does not compile is a warning, and the CPU fits.
    fn worker_kernels(
        &self,
        compiler: &mut (dyn Compiler + Send + '_),
        options: &CompileOptions,
    ) -> Result<(Vec<u8>, Vec<Vec<u8>>), EvolveError> {
        let interpreter = self.resolved.route == Route::Interpreter;
        let (name, kernel) = if interpreter {
            ("gpfarm_interpreter.cu", gpfarm_kernels::interpreter::interpreter_source(&self.problem)?)
        } else {
            ("gpfarm_fitness.cu", gpu::fitness_source(&self.problem)?)
        };
        let mut units = vec![Unit::new(name, kernel)];
        let fit = &self.options.evolution.fit;
        if self.problem.grammar().has_params() && fit.iterations > 0 {
            // One unit per width, so that several compile threads build them at once.
            for w in gpfarm_kernels::interpreter::FIT_WIDTHS {
                match gpfarm_kernels::interpreter::fit_source_for(&self.problem, &[w]) {
                    Ok(source) => units.push(Unit::new(format!("gpfarm_fit_{w}.cu"), source)),
                    Err(e) => {
                        tracing::info!("free parameters are fitted on the CPU: {e}");
                        units.truncate(1);
                        break;
                    }
                }
            }
        }
        let results = cached_compile(compiler, &units, options, self.options.cache)?;
        let mut results = results.into_iter();
        let (outcome, log) = results.next().ok_or(EvolveError::CompilerStopped)?;
        let kernel = match (outcome, interpreter) {
            (UnitOutcome::Cubin(c), _) => c,
            (UnitOutcome::Failed(failure), false) => {
                return Err(EvolveError::FitnessKernel { failure, log });
            }
            (UnitOutcome::Failed(failure), true) => {
                return Err(EvolveError::InterpreterKernel { failure, log });
            }
        };
        let mut fit = Vec::new();
        for (outcome, log) in results {
            match outcome {
                UnitOutcome::Cubin(c) => fit.push(c),
                UnitOutcome::Failed(failure) => {
                    tracing::warn!("a fitting kernel did not compile ({failure:?}); the CPU fits: {log}");
                    return Ok((kernel, Vec::new()));
                }
            }
        }
        Ok((kernel, fit))
    }

    /// Starts a GPU worker process on GPU `device` with the kernel [`Engine::worker_kernels`]
    /// compiled (and the fitting kernel `fit`, when there is one), on the calling thread (the
    /// worker ends with it).
    fn spawn_worker(
        &self,
        cubin: Vec<u8>,
        fit: Vec<Vec<u8>>,
        device: usize,
    ) -> Result<GpuWorker, EvolveError> {
        let source =
            self.source.clone().ok_or_else(|| EvolveError::NoGpu("the problem has no source".into()))?;
        let exe = match &self.options.gpu_worker {
            Some(exe) => exe.clone(),
            None => gpfarm_client::gpu_worker_executable().map_err(gpfarm_client::WorkerError::from)?,
        };
        let (fitness, interpreter) =
            if self.resolved.route == Route::Interpreter { (None, Some(cubin)) } else { (Some(cubin), None) };
        // The GPU fits on at most --fit-cases evenly spaced cases (0: all of them).
        let fit_cases = self.options.evolution.fit.cases;
        let init = gpfarm_client::init_request(fitness, interpreter, (fit, fit_cases));
        let kept = if self.options.keep_gpu_worker {
            GpuWorker::reuse(&exe, source.clone(), init.clone(), Some(device))
        } else {
            None
        };
        let mut worker = match kept {
            Some(w) => w,
            None => GpuWorker::start(&exe, source, init, Some(device))?,
        };
        worker.set_deadline(self.options.gpu_deadline);
        Ok(worker)
    }
}

/// The GPU worker's kernels compiled before, by [`CacheKey`] (source, options, toolchain), in
/// this process: a second run on the same problem (another fit of the same estimator, a grid
/// search) starts without compiling them.
static WORKER_KERNELS: std::sync::Mutex<Option<HashMap<String, Vec<u8>>>> = std::sync::Mutex::new(None);

/// `units` compiled on `compiler`, each outcome with its log; with `cache`, those compiled
/// before come from this process's memory or from the disk cache in
/// [`DiskCache::default_dir`]`/kernels` (other processes' runs), and what is compiled here goes
/// to both. A disk cache that cannot be opened is only a note in the log.
fn cached_compile(
    compiler: &mut (dyn Compiler + Send + '_),
    units: &[Unit],
    options: &CompileOptions,
    cache: bool,
) -> Result<Vec<(UnitOutcome, String)>, EvolveError> {
    let toolchain = compiler.toolchain();
    // A unit's libraries are part of what it compiles to (none for the kernels compiled here).
    let keys: Vec<CacheKey> =
        units.iter().map(|u| CacheKey::linked(&u.source, &u.libraries, options, &toolchain)).collect();
    let disk = cache.then(DiskCache::default_dir).flatten().and_then(|dir| {
        match DiskCache::open(&dir.join("kernels"), DEFAULT_CACHE_LIMIT) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::info!("no kernel cache in {}: {e}", dir.display());
                None
            }
        }
    });
    let mut out: Vec<Option<(UnitOutcome, String)>> = keys
        .iter()
        .map(|k| {
            if !cache {
                return None;
            }
            let memory = WORKER_KERNELS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .and_then(|m| m.get(&k.hex()).cloned());
            let cubin = memory.or_else(|| disk.as_ref()?.get(k).map(|c| c.cubin))?;
            Some((UnitOutcome::Cubin(cubin), String::new()))
        })
        .collect();
    let missing: Vec<usize> = (0..units.len()).filter(|&i| out[i].is_none()).collect();
    if !missing.is_empty() {
        let todo: Vec<Unit> = missing.iter().map(|&i| units[i].clone()).collect();
        let batch = compiler.compile(&todo, options)?;
        if batch.results.len() != todo.len() {
            return Err(EvolveError::CompilerStopped);
        }
        for (&i, r) in missing.iter().zip(batch.results) {
            if let (true, UnitOutcome::Cubin(c)) = (cache, &r.outcome) {
                let mut memory = WORKER_KERNELS.lock().unwrap_or_else(|e| e.into_inner());
                memory.get_or_insert_with(HashMap::new).insert(keys[i].hex(), c.clone());
                if let Some(d) = &disk
                    && let Err(e) = d.put(c, &[(keys[i], units[i].name.as_str())])
                {
                    tracing::info!("a kernel was not cached on disk: {e}");
                }
            }
            out[i] = Some((r.outcome, r.log));
        }
    }
    Ok(out.into_iter().map(|o| o.expect("every unit compiled or cached")).collect())
}

/// What every island of a run shares: the compile options, the evaluator's kernel, the drivers'
/// settings and the machine's share for each.
struct IslandShared<'a> {
    options: &'a CompileOptions,
    /// The GPU worker's kernel (fitness kernel or interpreter), when the GPU evaluates.
    kernel: Option<&'a [u8]>,
    /// The fitting kernels, when the GPU fits free parameters (else empty).
    fit_kernels: &'a [Vec<u8>],
    /// The NVRTC that built them: compiled fitting kernels must come from the same one.
    fit_toolchain: String,
    settings: Settings,
    toolchain: String,
    /// Individuals are compiled (so the disk cache applies).
    compiling: bool,
    /// GPUs to place islands on, round-robin.
    devices: usize,
    /// CPU evaluation threads per island.
    eval_threads: NonZeroUsize,
    /// Whether this run is one of several islands (records and traces name the island).
    several: bool,
    /// When the run's `max_time` counts from ([`Options::started`]).
    started: Instant,
}

/// Every island's outcome, or the error that ended the run: the first island's own failure
/// (not one that only followed from it: stopped, or a neighbour gone), named by its island when
/// there are several.
fn first_failure<T>(
    outcomes: Vec<Result<T, EvolveError>>,
    first: usize,
    several: bool,
) -> Result<Vec<T>, EvolveError> {
    let mut failures: Vec<(usize, EvolveError)> = Vec::new();
    let mut done = Vec::new();
    for (k, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(v) => done.push(v),
            Err(e) => failures.push((first + k, e)),
        }
    }
    let secondary = |e: &EvolveError| matches!(e, EvolveError::Stopped | EvolveError::Migration { .. });
    let pick = failures.iter().position(|(_, e)| !secondary(e)).unwrap_or(0);
    match failures.into_iter().nth(pick) {
        None => Ok(done),
        Some((island, e)) if several && !matches!(e, EvolveError::Stopped) => {
            Err(EvolveError::Island { island, source: Box::new(e) })
        }
        Some((_, e)) => Err(e),
    }
}
