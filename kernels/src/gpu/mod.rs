//! Evaluating compiled individuals on the GPU.
//!
//! The context is created once and the problem's test cases are uploaded once; each generation
//! loads its CUBINs, launches every individual over all cases (one thread per case, outputs in a
//! slab per individual), reduces fitness on the GPU (one block per tile of cases and individual,
//! then one per individual, [`TILE`]) so that only one `double` per individual is read back. Its
//! modules stay loaded, keyed by their CUBIN, until they fill the module cache (`modules`): code
//! evaluated again (a structure with new values of its free parameters, [`GpuEvaluator::set_values`])
//! is not loaded again.
//!
//! A program whose loop runs past the step limit sets its failure flag
//! ([`gpfarm_gp::program::FAILED_FLAGS`], one per member of its unit's module) and ends; after
//! the launches the evaluator reads each module's flags and gives a flagged individual a NaN
//! fitness, which the engine scores as the worst, as the CPU evaluator fails the program.
//!
//! Faults: a launch the driver refuses (too many resources, ...) fails only that individual, with
//! the reason. A kernel that faults while running (illegal address, trap) leaves a sticky error,
//! and on the GPU host that poisons every CUDA context of the process: a fresh context created
//! afterwards fails with the same error (docs/failures.md says where this was seen). The
//! evaluator then returns [`GpuError::Fault`] and refuses further work; recovering on the GPU
//! needs a new process. `gpfarm evolve` continues on the CPU evaluator.
//!
//! One job per file: `probe` says whether there is a GPU at all; `fitness` writes the fitness
//! reduction's CUDA C; `buffers` holds the context and what lives in it; `modules` loads CUBIN
//! into it; `launch` launches compiled individuals and the reduction; `interpreter` launches the
//! interpreter, by the kernel names and offset flags that `contract` sets for its kernels. This
//! file holds the evaluator's public face ([`GpuEvaluator`], [`GpuError`], [`Kernels`]).
//!
//! Must never use a context after a kernel faulted in it: a poisoned evaluator refuses all
//! further work.

mod buffers;
pub(crate) mod contract;
mod fit;
mod fitness;
mod interpreter;
mod launch;
mod modules;
mod probe;
pub mod variants;

use std::time::Instant;

use cudarc::driver::DriverError;
use gpfarm_gp::Problem;
use thiserror::Error;

// Defined with the worker's wire, so that the GPU worker's parent (in `gpfarm-client`) speaks the
// same types as this evaluator.
pub use gpfarm_protocol::worker::{CompiledUnit, Fitted, GpuGeneration, KernelRef, WireFit, WirePopulation};

pub use fit::profiling as fit_profiling;
pub use fitness::{BLOCK, FITNESS_KERNEL, ROWS, TILE, TILES_KERNEL, fitness_source};
pub(crate) use fitness::{block_sum, fitness_term, tiles_source};
pub use probe::{device_count, probe};

use buffers::Device;

use modules::load_units;

/// The GPU could not be used at all.
#[derive(Debug, Error)]
pub enum GpuError {
    /// No driver or no device.
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// A driver call failed outside any individual's kernel.
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// The problem cannot be evaluated on the GPU as declared.
    #[error("{0}")]
    Problem(String),
    /// The pipe to the parent failed (worker side).
    #[error("GPU worker pipe")]
    Pipe(#[from] gpfarm_protocol::worker::FrameError),
    /// A kernel faulted while running; this process can no longer use the GPU.
    #[error("a kernel faulted on the GPU ({0}); the CUDA context of this process is unusable")]
    Fault(String),
    /// In careful mode: individual `individual`'s kernel faulted; the context is unusable.
    #[error("individual {individual}'s kernel faulted on the GPU ({why})")]
    FaultAt {
        /// Index of the individual among the generation's.
        individual: usize,
        /// The driver's error.
        why: String,
    },
}

fn driver(e: DriverError) -> GpuError {
    GpuError::Driver(format!("{e:?}"))
}

fn no_kernel(what: &str) -> GpuError {
    GpuError::Problem(format!("{what} was not loaded into the GPU evaluator"))
}

/// The kernels a [`GpuEvaluator`] loads: CUBIN of the fitness kernel ([`fitness_source`]) to
/// evaluate compiled individuals, of the interpreter (`interpreter::interpreter_source`) to
/// interpret programs; at least one.
#[derive(Debug, Clone, Default)]
pub struct Kernels {
    /// The fitness kernel's CUBIN.
    pub fitness: Option<Vec<u8>>,
    /// The interpreter's CUBIN.
    pub interpreter: Option<Vec<u8>>,
    /// The fitting kernels' CUBIN (`interpreter::fit_source`), to fit free parameters: one
    /// module with every width, or one module per width; empty: none.
    pub fit: Vec<Vec<u8>>,
}

/// Evaluates compiled individuals of one problem on GPU 0.
pub struct GpuEvaluator {
    problem: Problem,
    device: Device,
    ncases: usize,
    poisoned: Option<String>,
    /// GPU name.
    pub name: String,
}

impl GpuEvaluator {
    /// Creates the context on GPU 0, uploads the problem's cases and loads the fitness kernel
    /// (compiled from [`fitness_source`] for this GPU).
    pub fn new(problem: &Problem, fitness_cubin: Vec<u8>) -> Result<GpuEvaluator, GpuError> {
        GpuEvaluator::with_kernels(problem, &Kernels { fitness: Some(fitness_cubin), ..Kernels::default() })
    }

    /// As [`GpuEvaluator::new`], loading the fitness kernel, the interpreter, the fitting kernel,
    /// or several of them.
    pub fn with_kernels(problem: &Problem, kernels: &Kernels) -> Result<GpuEvaluator, GpuError> {
        if kernels.fitness.is_none() && kernels.interpreter.is_none() && kernels.fit.is_empty() {
            return Err(GpuError::Problem(
                "no kernel to load: a fitness kernel, an interpreter or a fitting kernel".into(),
            ));
        }
        let (name, _) = probe()?;
        let mut device = Device::new(problem, kernels)?;
        if device.fit.is_some() {
            // What each fitting kernel's first launch costs is paid here, not in the first fit.
            // A kernel that cannot be launched fails the fits that need it, not the evaluator.
            if let Err(e) = device.warm_fit(problem, problem.cases().len()) {
                eprintln!(
                    "gpfarm: the fitting kernels' first launch failed ({e}); fits will launch them again"
                );
            }
            device.stream.synchronize().map_err(driver)?;
        }
        Ok(GpuEvaluator {
            problem: problem.clone(),
            device,
            ncases: problem.cases().len(),
            poisoned: None,
            name,
        })
    }

    /// Evaluates a generation of `n` individuals, of which `units` hold the compiled ones.
    pub fn evaluate(&mut self, units: &[CompiledUnit<'_>], n: usize) -> Result<GpuGeneration, GpuError> {
        self.evaluate_with(units, n, false, &[])
    }

    /// As [`evaluate`](Self::evaluate), leaving out the individuals in `skip`. `careful` waits for
    /// each kernel before launching the next, so a fault names its individual
    /// ([`GpuError::FaultAt`]); it is slower and meant for finding a culprit.
    pub fn evaluate_with(
        &mut self,
        units: &[CompiledUnit<'_>],
        n: usize,
        careful: bool,
        skip: &[usize],
    ) -> Result<GpuGeneration, GpuError> {
        self.evaluate_watched(units, n, careful, skip, &mut |_| {})
    }

    /// As [`evaluate_with`](Self::evaluate_with), calling `started(individual)` in careful mode
    /// before each launch, so that a watcher knows whose kernel runs while the device works.
    pub fn evaluate_watched(
        &mut self,
        units: &[CompiledUnit<'_>],
        n: usize,
        careful: bool,
        skip: &[usize],
        started: &mut dyn FnMut(usize),
    ) -> Result<GpuGeneration, GpuError> {
        if let Some(why) = &self.poisoned {
            return Err(GpuError::Fault(why.clone()));
        }
        let mut outcome = GpuGeneration { fitness: vec![None; n], ..Default::default() };
        if n == 0 {
            return Ok(outcome);
        }
        if self.device.value_stride > 0 && self.device.values_len < n * self.device.value_stride {
            return Err(GpuError::Problem(format!(
                "{} parameter values for {n} individuals of {} each",
                self.device.values_len, self.device.value_stride
            )));
        }
        self.device.ensure_capacity(&self.problem, n, self.ncases).map_err(driver)?;
        let t = Instant::now();
        let (modules, runs) =
            load_units(&self.device.ctx, &mut self.device.modules, units, n, careful, skip)?;
        // A module loaded before keeps its step-limit flags from then: they start at zero.
        for m in &modules {
            if let Ok(mut flags) = m.get_global(gpfarm_gp::program::FAILED_FLAGS, &self.device.stream) {
                self.device.stream.memset_zeros(&mut flags).map_err(driver)?;
            }
        }
        outcome.load = t.elapsed();
        let t = Instant::now();
        let mut launched = Vec::with_capacity(n);
        // Outside careful mode the launches are spread over the side streams, so that kernels
        // that loop long run side by side rather than one after another; the main stream then
        // waits for all of them.
        let side = if careful || runs.len() < 2 {
            Vec::new()
        } else {
            self.device.side_streams().map_err(driver)?.to_vec()
        };
        for (k, run) in runs.iter().enumerate() {
            if careful {
                started(run.slot);
            }
            let stream = side.get(k % side.len().max(1)).unwrap_or(&self.device.stream);
            // A refused launch is not sticky: only this run's individuals fail.
            match self.device.launch(&self.problem, run, self.ncases, stream) {
                Ok(()) => launched.extend(run.slot..run.slot + run.len),
                Err(e) => outcome
                    .faults
                    .extend((run.slot..run.slot + run.len).map(|i| (i, format!("launch refused: {e:?}")))),
            }
            if careful && let Err(e) = self.device.stream.synchronize() {
                let why = format!("{e:?}");
                self.poisoned = Some(why.clone());
                return Err(GpuError::FaultAt { individual: run.slot, why });
            }
        }
        for s in &side {
            if let Err(e) = self.device.stream.join(s) {
                let why = format!("{e:?}");
                self.poisoned = Some(why.clone());
                return Err(GpuError::Fault(why));
            }
        }
        self.wait()?;
        outcome.launch = t.elapsed();
        let t = Instant::now();
        let values = self.device.reduce(n, self.ncases)?;
        let failed = self.device.read_failures(units, &modules, n)?;
        outcome.readback = t.elapsed();
        for i in launched {
            outcome.fitness[i] = if failed[i] { Some(f64::NAN) } else { values.get(i).copied() };
        }
        // The modules stay in the cache (`modules::ModuleCache`) until it is full.
        drop(runs);
        drop(modules);
        Ok(outcome)
    }

    /// The free parameters' values the compiled individuals of the next evaluations read:
    /// `stride` values per individual, by its index in the generation (`stride` at least each
    /// one's count of parameters; 0 and no values: none, for individuals with their values
    /// written in). A structure compiled once runs with any values: nothing is recompiled.
    pub fn set_values(&mut self, values: &[f32], stride: usize) -> Result<(), GpuError> {
        if stride == 0 && !values.is_empty() || stride > 0 && !values.len().is_multiple_of(stride) {
            return Err(GpuError::Problem(format!("{} parameter values in rows of {stride}", values.len())));
        }
        buffers::grow_copy(&self.device.stream, values, &mut self.device.values).map_err(driver)?;
        self.device.value_stride = stride;
        self.device.values_len = values.len();
        Ok(())
    }

    /// Interprets a population: one program per individual, all over every case in one launch,
    /// fitness reduced on the device. `launch` is the upload of the bytecode and both kernels
    /// (the interpreter's and the sum of its tiles) until they end, `readback` the copy of the
    /// fitness values. A program that fails (its loop ran past the step limit) has a NaN
    /// fitness.
    pub fn interpret(&mut self, population: &WirePopulation) -> Result<GpuGeneration, GpuError> {
        if let Some(why) = &self.poisoned {
            return Err(GpuError::Fault(why.clone()));
        }
        let n = population.offsets.len();
        let mut outcome = GpuGeneration { fitness: vec![None; n], ..Default::default() };
        if n == 0 {
            return Ok(outcome);
        }
        let t = Instant::now();
        let order = self.device.launch_interpreter(&self.problem, population, self.ncases)?;
        let (_, _, sum) = self.device.interpret.clone().ok_or_else(|| no_kernel("the interpreter"))?;
        self.device.launch_tiles(&sum, n, self.ncases)?;
        self.wait()?;
        outcome.launch = t.elapsed();
        let t = Instant::now();
        let all = self.device.read_fitness(n)?;
        outcome.readback = t.elapsed();
        for (k, v) in order.into_iter().zip(all) {
            outcome.fitness[k] = Some(v);
        }
        Ok(outcome)
    }

    /// Fits on `n` evenly spaced cases ([`Problem::strided`]) from now on, or on all of them
    /// (`n` 0 or at least the case count): the fitting kernels' cases are uploaded once, beside
    /// the evaluation's.
    pub fn fit_on_cases(&mut self, n: usize) -> Result<(), GpuError> {
        self.device.fit_cases = None;
        if n == 0 || n >= self.ncases {
            return Ok(());
        }
        let strided = self.problem.strided(n);
        let data = buffers::CaseData::upload(&self.device.stream, &strided)?;
        self.device.fit_cases = Some((data, strided.cases().len()));
        Ok(())
    }

    /// The least-squares sums of `fit`'s programs at its parameter values, by the fitting kernel:
    /// per program, one after the other, its sum of squared residuals, `Jᵀr` and the lower
    /// triangle of `JᵀJ` row by row (`contract::sums_of` its parameters); and the time from
    /// upload to the sums' copy back.
    pub fn linearize(&mut self, fit: &WireFit) -> Result<(Vec<f64>, std::time::Duration), GpuError> {
        if let Some(why) = &self.poisoned {
            return Err(GpuError::Fault(why.clone()));
        }
        let t = Instant::now();
        if fit.offsets.is_empty() {
            return Ok((Vec::new(), t.elapsed()));
        }
        let plan = self.device.launch_fit(&self.problem, fit, self.ncases)?;
        self.wait()?;
        let sums = self.device.read_fit(&plan)?;
        Ok((sums, t.elapsed()))
    }

    /// Loads the compiled fitting units (`interpreter::fit_code_source`, CUBIN) the programs of
    /// the next fits name by their index here ([`WireFit::unit`]), in place of those loaded
    /// before; modules of CUBIN loaded before are not loaded again.
    pub fn load_fit_code(&mut self, cubins: &[Vec<u8>]) -> Result<(), GpuError> {
        if let Some(why) = &self.poisoned {
            return Err(GpuError::Fault(why.clone()));
        }
        self.device.load_fit_code(cubins)
    }

    /// Fits every start of `fit` (a program with its starting values) by Levenberg–Marquardt,
    /// `iterations` iterations of [`gpfarm_gp::LmStart`], all on the GPU: one launch of the
    /// fitting kernels at the starting values and the step kernel
    /// ([`contract::FIT_STEP_KERNEL`], a warp per start) to begin each start and solve for its
    /// first trial; then two rounds per iteration (one fewer in all: the last trial needs no
    /// derivatives) of one launch of the starts marked and the
    /// step kernel again: a trial runs plain first (the sum of squares alone), a start whose plain
    /// run is lower runs it again with derivatives and takes it (or, where the start ends with it,
    /// its last trial or one that gains no more than a millionth, takes it without:
    /// [`gpfarm_gp::LmStart::judge_plain`]), one whose plain run is not lower refuses it, and a
    /// start with trials left and nothing to run again solves for its next trial. The host waits only for the end. Each start takes the values
    /// [`gpfarm_gp::LmStart`] on the host would from the sums [`linearize`](Self::linearize)
    /// gives, bit for bit (the step kernel's double operations are the host's, in its order; a
    /// plain run's sum of squares is the same bits as one with derivatives). Per start, in
    /// order: its best values, their sum of squares, and the sum of squares where it began
    /// (infinite where it is not finite, as on the host).
    pub fn fit(&mut self, fit: &WireFit, iterations: usize) -> Result<Fitted, GpuError> {
        if let Some(why) = &self.poisoned {
            return Err(GpuError::Fault(why.clone()));
        }
        let t = Instant::now();
        if fit.offsets.is_empty() {
            return Ok(Fitted::default());
        }
        let plan = self.device.launch_fit(&self.problem, fit, self.ncases)?;
        let (begin, judge) = (contract::FIT_STEP_BEGIN, contract::FIT_STEP_JUDGE);
        self.device.fit_step(&plan, begin | contract::FIT_STEP_TRIAL, iterations)?;
        // A trial runs plain, then again with its derivatives where it is lower and the start
        // goes on: at most two launches a trial, and one for the last (taken from its plain run).
        for _ in 0..(2 * iterations).saturating_sub(1) {
            self.device.run_fit(&self.problem, fit, &plan, fit::Counts::Loop)?;
            self.device.fit_step(&plan, judge | contract::FIT_STEP_TRIAL, iterations)?;
        }
        let queued = t.elapsed();
        self.wait()?;
        let fitted = self.device.read_loop(&plan)?;
        if fit::profiling() {
            eprintln!(
                "gpfarm fit profile: {} programs, {iterations} iterations on the GPU: {:.3} ms to queue, {:.3} ms in all",
                fit.offsets.len(),
                queued.as_secs_f64() * 1e3,
                t.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(Fitted { took_us: t.elapsed().as_micros().min(u128::from(u64::MAX)) as u64, ..fitted })
    }

    /// Waits for the stream; a fault poisons the evaluator.
    fn wait(&mut self) -> Result<(), GpuError> {
        self.device.stream.synchronize().map_err(|e| {
            let why = format!("{e:?}");
            self.poisoned = Some(why.clone());
            GpuError::Fault(why)
        })
    }
}
