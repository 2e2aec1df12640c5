//! The run loop: individuals flow from the breeding pipeline through the caches ([`admit`]),
//! into units on the compiler's queue ([`units`]), through evaluation ([`evaluate`]), and back
//! into the pipeline.
//!
//! - **Compile each phenotype once** (unless caching is off): an individual whose compiled code
//!   is known from an earlier generation keeps its fitness ([`FitnessMemo`]); one identical to an
//!   individual being compiled waits for that one's fitness; one whose CUBIN is in the disk cache
//!   is evaluated without compiling. Only the rest is compiled.
//! - **Overlap** (the default): each unit is evaluated as soon as its CUBIN is back, and the
//!   next generation's pairs are bred, rendered and compiled as soon as their parents are
//!   evaluated, filling daemons that would otherwise wait for the slowest units of this
//!   generation. Without overlap a generation is compiled whole, then evaluated whole, then bred.
//! - **Nothing to compile** (the interpreter on the GPU): a generation is admitted in parts,
//!   each while the GPU interprets the one before.
//!
//! Must never let caching or overlap change a fitness value: the same seed gives the same
//! generations with any combination of them.

mod admit;
mod evaluate;
mod fit;
pub(crate) mod fit_code;
mod structures;
mod units;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use gpfarm_client::{CacheKey, Compiler, DiskCache, KeyMap, Submitter, shared_job_queue};
use gpfarm_gp::{Born, Fitness, GenerationStats, Phenotype, Pipeline, Problem, Program};
use gpfarm_kernels::interpreter::Bytecode;
use gpfarm_protocol::{CompileOptions, Route, Shape};

use crate::account::{Account, Chain};
use crate::error::EvolveError;
use crate::islands::Link;
use crate::memo::{self, FitnessMemo};
use crate::record::{EvalSplit, GenerationRecord, Totals};

pub(crate) use evaluate::Evaluator;
use evaluate::Uncompiled;

/// The fewest individuals in each part of a generation admitted in parts, each while the GPU
/// interprets the one before; a generation of fewer than two parts' is admitted whole (another
/// request would cost more than it hides).
const PART_AT_LEAST: usize = 128;

/// The most parts a generation is admitted in.
const PARTS: usize = 4;

/// [`PARTS`], or `GPFARM_ADMIT_PARTS` where set to a number from 1 to 64 (1: whole; a diagnostic,
/// the values are the same either way).
fn parts() -> usize {
    static PARTS_SET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PARTS_SET.get_or_init(|| {
        std::env::var("GPFARM_ADMIT_PARTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| (1..=64).contains(n))
            .unwrap_or(PARTS)
    })
}

/// How the run treats its individuals.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Reuse known fitness, merge identical individuals (see the module documentation).
    pub cache: bool,
    /// Evaluate units as they come back and breed the next generation early.
    pub overlap: bool,
    /// Fixed individuals per unit instead of guided chunks.
    pub per_unit: Option<usize>,
    /// Workers (daemons or threads) the compiler has.
    pub workers: usize,
    /// What happens to an individual that crashes NVRTC or does not compile.
    pub crash: CrashSettings,
    /// How individuals get their fitness. On the interpreter and CPU routes members carry
    /// bytecode and nothing is compiled.
    pub route: Route,
    /// A kernel per individual, or one switch kernel per unit.
    pub shape: Shape,
    /// Which kernels fit free parameters on the GPU.
    pub fit_kernels: crate::route::FitKernels,
}

/// What happens to an individual that crashes NVRTC or does not compile (see
/// [`crate::Options::crash_retry_flags`] and the fields after it).
#[derive(Debug, Clone)]
pub(crate) struct CrashSettings {
    /// NVRTC options of the one retry of an individual that crashed NVRTC; empty: none.
    pub retry_flags: Vec<String>,
    /// Whether the GPU evaluates the retry's code.
    pub retry_on_gpu: bool,
    /// Where the units of individuals that did not compile are written.
    pub dir: crate::crash_dir::CrashDir,
}

/// What [`Driver::run_on`] calls with each generation's record.
pub(crate) type Report<'r> = dyn FnMut(GenerationRecord) -> Result<(), EvolveError> + 'r;

/// An individual waiting for its fitness.
#[derive(Debug, Clone)]
struct Member {
    generation: usize,
    slot: usize,
    /// Its phenotype: on the compiled routes with its free parameters as `p[k]`, on the others
    /// with their values written in.
    phenotype: Phenotype,
    /// The values of its free parameters its compiled code reads (empty: none, or written in).
    params: Arc<[f32]>,
    /// Its typed tree, on every route but NVRTC (parsed once, when it is admitted).
    program: Option<Arc<Program>>,
    /// Its bytecode, on the interpreter and CPU routes.
    code: Option<Arc<Bytecode>>,
    /// What it is, for the memo and the merging of identical individuals: its code's key, and
    /// its values when it has any.
    key: Option<CacheKey>,
    /// Its code's key, for the caches of compiled code: its values play no part.
    code_key: Option<CacheKey>,
    born: Instant,
}

impl Member {
    /// The phenotype with its values written in, as the CPU evaluator runs it.
    fn instantiated(&self) -> Phenotype {
        if self.params.is_empty() {
            self.phenotype.clone()
        } else {
            gpfarm_gp::program::instantiate(&self.phenotype, &self.params)
        }
    }
}

/// A unit on the compiler's queue.
struct JobInfo {
    generation: usize,
    members: Vec<Member>,
    kernels: Vec<String>,
    isolation: bool,
}

/// Code ready to evaluate: compiled, or found on disk.
struct Ready {
    /// Compiled with the crash retry's flags, not the run's: kept out of the disk cache.
    retried: bool,
    cubin: Vec<u8>,
    kernels: Vec<String>,
    members: Vec<Member>,
    queued: Instant,
    started: Instant,
    ended: Instant,
}

/// See the module documentation.
pub(crate) struct Driver<'a> {
    problem: &'a Problem,
    options: &'a CompileOptions,
    toolchain: String,
    settings: Settings,
    pipeline: Pipeline,
    memo: Option<FitnessMemo>,
    disk: Option<DiskCache>,
    evaluator: Evaluator,
    fell_back: Option<String>,
    eval_threads: NonZeroUsize,
    /// When the run is to end ([`crate::Options::max_time`]).
    deadline: Option<Instant>,
    /// How long the last generation completed took (from the one before it, or the run's start).
    last_generation: Duration,
    /// Park the GPU worker when the run ends ([`crate::Options::keep_gpu_worker`]).
    keep_worker: bool,
    /// Threads for breeding, preparing, the CPU's evaluation and fitting: `eval_threads` of
    /// them, built at first use (`Some(None)`: none could be started; the driver's thread works).
    pool: Option<Option<Arc<rayon::ThreadPool>>>,
    /// Values fitted before, by [`fit::fit_key`] (`None`: the fit moved nothing).
    fit_memo: HashMap<blake3::Hash, Option<Vec<f32>>>,
    /// Whether the GPU worker fits free parameters (it has the fitting kernel).
    gpu_fit: bool,
    /// The problem on the cases fitting uses ([`gpfarm_gp::FitConfig::cases`]).
    fit_problem: Option<Problem>,
    /// Compiled fitting kernels by structure.
    fit_code: fit_code::FitCode,
    /// The NVRTC that compiled the GPU worker's fitting kernels.
    fit_toolchain: String,
    /// Individuals identical to one being compiled, by key, waiting for its fitness.
    waiting: KeyMap<Vec<Member>>,
    /// Members whose fitness is known, to be freed by [`Driver::discard`].
    trash: Vec<Vec<Member>>,
    /// Structures compiled (or being compiled) for individuals with free parameters.
    structures: structures::Structures,
    /// Bred individuals not yet in a unit, by generation.
    pools: BTreeMap<usize, Vec<Member>>,
    jobs: HashMap<u64, JobInfo>,
    next_job: u64,
    /// The compiler of crash retries, started at the first crash.
    retry: units::Retry,
    /// Without overlap: code of a generation waiting for the rest of it.
    held: BTreeMap<usize, Vec<Ready>>,
    accounts: BTreeMap<usize, Account>,
    /// One JSON line per compiled unit, and where it goes.
    trace: Option<(BufWriter<File>, PathBuf)>,
    start: Instant,
    previous_done: Instant,
    totals: Totals,
    /// Its island, in the records.
    island: usize,
    /// Its ends of the ring of islands and the migrants it sends, if it migrates.
    link: Option<(Link, usize)>,
    /// Set when the run must end (another island failed, the caller stopped it).
    stop: Arc<AtomicBool>,
}

/// Runs `body` with one submitter per island (`islands` of them) whose jobs `compilers` serve,
/// each on a thread of its own: one compiler shared by every island, or one per island. No
/// compiler: no submitters. On success every submitter is closed and the compilers finish; on an
/// error they are dropped unclosed, and the compilers drop what is queued.
pub(crate) fn with_queues<T>(
    compilers: Vec<&mut (dyn Compiler + Send + '_)>,
    options: &CompileOptions,
    islands: usize,
    body: impl FnOnce(&[Submitter]) -> Result<T, EvolveError>,
) -> Result<T, EvolveError> {
    if compilers.is_empty() {
        return body(&[]);
    }
    let shared = compilers.len() == 1;
    let (mut submitters, worklists) = if shared {
        let (submitters, work) = shared_job_queue(islands);
        (submitters, vec![work])
    } else {
        (0..compilers.len()).map(|_| shared_job_queue(1)).map(|(mut s, w)| (s.remove(0), w)).unzip()
    };
    std::thread::scope(|scope| {
        let serving: Vec<_> = compilers
            .into_iter()
            .zip(worklists)
            .map(|(compiler, work)| scope.spawn(move || compiler.serve(options, work)))
            .collect();
        let outcome = body(&submitters);
        if outcome.is_ok() {
            submitters.iter_mut().for_each(Submitter::close);
        }
        drop(submitters);
        let mut served = Ok(());
        for s in serving {
            let result = s
                .join()
                .map_err(|_| EvolveError::CompilerStopped)
                .and_then(|r| r.map(|_| ()).map_err(EvolveError::from));
            served = served.and(result);
        }
        let value = outcome?;
        served?;
        Ok(value)
    })
}

impl<'a> Driver<'a> {
    /// A run of `pipeline` on `problem`, compiling with `options` by the compiler `toolchain`,
    /// evaluating with `evaluator`.
    pub fn new(
        problem: &'a Problem,
        options: &'a CompileOptions,
        toolchain: String,
        settings: Settings,
        pipeline: Pipeline,
        evaluator: Evaluator,
    ) -> Driver<'a> {
        let now = Instant::now();
        Driver {
            problem,
            options,
            toolchain,
            memo: settings.cache.then(|| FitnessMemo::new(memo::CAPACITY)),
            settings,
            pipeline,
            disk: None,
            evaluator,
            fell_back: None,
            eval_threads: std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN),
            deadline: None,
            last_generation: Duration::ZERO,
            keep_worker: false,
            pool: None,
            fit_memo: HashMap::new(),
            fit_problem: None,
            fit_code: fit_code::FitCode::default(),
            fit_toolchain: String::new(),
            gpu_fit: false,
            waiting: KeyMap::default(),
            trash: Vec::new(),
            structures: structures::Structures::default(),
            pools: BTreeMap::new(),
            jobs: HashMap::new(),
            next_job: 0,
            retry: units::Retry::NotStarted,
            held: BTreeMap::new(),
            accounts: BTreeMap::new(),
            trace: None,
            start: now,
            previous_done: now,
            totals: Totals::default(),
            island: 0,
            link: None,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Makes this run island `island` of a ring: it sends its best `migrants` along `link`
    /// whenever its pipeline waits for immigrants, and takes what arrives. It ends with
    /// [`EvolveError::Stopped`] once `stop` is set.
    pub fn island(&mut self, island: usize, link: Option<(Link, usize)>, stop: Arc<AtomicBool>) {
        (self.island, self.link, self.stop) = (island, link, stop);
    }

    /// Evaluates on the CPU with at most `threads` threads (default: one per core).
    pub fn eval_threads(&mut self, threads: NonZeroUsize) {
        self.eval_threads = threads;
    }

    /// Ends the run near `deadline`: after the generation that completes when the next one
    /// would end further past it than this one ends before it ([`crate::Options::max_time`]).
    pub fn deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// Parks the GPU worker for another run of this process when the run ends.
    pub fn keep_gpu_worker(&mut self, keep: bool) {
        self.keep_worker = keep;
    }

    /// Fits free parameters on the GPU worker, whose fitting kernels `toolchain` compiled and
    /// loaded (compiled fitting kernels are compiled by the same NVRTC).
    pub fn fit_on_gpu(&mut self, toolchain: String) {
        self.gpu_fit = self.evaluator.worker().is_some();
        self.fit_toolchain = toolchain;
    }

    /// Looks up and stores CUBIN in `disk`.
    pub fn disk_cache(&mut self, disk: DiskCache) {
        self.disk = Some(disk);
    }

    /// Runs to the last generation, submitting units through `submitter` (or, without one,
    /// evaluating on the CPU or the interpreter only), calling `report` with each generation's
    /// record as it completes.
    pub fn run_on(
        mut self,
        submitter: Option<&Submitter>,
        report: &mut Report<'_>,
    ) -> Result<(Totals, Pipeline), EvolveError> {
        self.start = Instant::now();
        self.previous_done = self.start;
        self.drive(submitter, report)?;
        Ok(self.finish())
    }

    /// Writes one JSON line per compiled unit to `file` (at `path`): its generation,
    /// individuals, estimated weight, and when it was queued, started and ended (ms from the
    /// start of the run).
    pub fn trace_units(&mut self, file: File, path: PathBuf) {
        self.trace = Some((BufWriter::new(file), path));
    }

    fn finish(mut self) -> (Totals, Pipeline) {
        if let Some((trace, path)) = &mut self.trace
            && let Err(e) = trace.flush()
        {
            tracing::warn!("the unit trace {} is incomplete: {e}", path.display());
        }
        self.totals.wall_s = self.start.elapsed().as_secs_f64();
        self.totals.memo_entries = self.memo.as_ref().map_or(0, FitnessMemo::len);
        if let Some(w) = self.evaluator.worker() {
            self.totals.gpu_workers_reused = usize::from(w.reused);
        }
        if self.keep_worker
            && let Evaluator::Gpu(worker) | Evaluator::Interpreter(worker) =
                std::mem::replace(&mut self.evaluator, Evaluator::Cpu)
        {
            worker.park();
        }
        (self.totals, self.pipeline)
    }

    /// The run's threads (see `pool`), built at first use.
    fn pool(&mut self) -> Option<Arc<rayon::ThreadPool>> {
        if self.pool.is_none() {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(self.eval_threads.get())
                .stack_size(gpfarm_gp::pipeline::PARSE_STACK)
                .thread_name(|k| format!("gpfarm-{k}"))
                .build();
            self.pool = Some(pool.ok().map(Arc::new));
        }
        self.pool.clone().flatten()
    }

    fn account(&mut self, generation: usize) -> &mut Account {
        self.accounts.entry(generation).or_default()
    }

    fn drive(&mut self, submitter: Option<&Submitter>, report: &mut Report<'_>) -> Result<(), EvolveError> {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Err(EvolveError::Stopped);
            }
            let bred_at = Instant::now();
            let completed = match self.pool() {
                Some(pool) => pool.install(|| self.pipeline.advance()),
                None => self.pipeline.advance(),
            };
            let born = self.pipeline.take_born();
            self.charge_breeding(&born, bred_at.elapsed());
            let last = completed.last().map(|s| s.generation);
            for stats in completed {
                self.complete(&stats, report)?;
            }
            if let (Some(deadline), Some(g)) = (self.deadline, last)
                && Instant::now() + self.last_generation / 2 >= deadline
                && !self.pipeline.is_finished()
            {
                // What is bred, compiling or queued beyond it is dropped with the pipeline's
                // open generations.
                self.pipeline.stop_after(g);
            }
            if self.pipeline.is_finished() {
                return Ok(());
            }
            let born = self.fit(born)?;
            let parts = (born.len() / PART_AT_LEAST).min(parts());
            if submitter.is_none()
                && self.link.is_none()
                && matches!(self.evaluator, Evaluator::Interpreter(_))
                && parts >= 2
            {
                // Nothing to compile and the interpreter on the GPU: each part is admitted while
                // the GPU evaluates the one before. Each part in the order bred, each member's
                // fitness its own: the same values, given in the same order.
                let size = born.len().div_ceil(parts);
                let mut born = born.into_iter();
                let mut progress = false;
                let mut sent = Vec::with_capacity(parts);
                for _ in 0..parts {
                    progress |= self.admit(born.by_ref().take(size).collect())?;
                    let pools = std::mem::take(&mut self.pools);
                    sent.push(self.send_uncompiled(pools.into_values().flatten().collect())?);
                }
                let none = sent.iter().all(Uncompiled::is_empty);
                for s in sent {
                    self.finish_uncompiled(s)?;
                }
                if none && !progress {
                    return Err(EvolveError::Stalled);
                }
                continue;
            }
            let progress = self.admit(born)?;
            if let Some(generation) = self.pipeline.awaiting_migration() {
                self.migrate(generation)?;
                continue;
            }
            let Some(submitter) = submitter else {
                // Nothing to compile: everything in the pools is interpreted, or evaluated on the
                // CPU, right away.
                let pools = std::mem::take(&mut self.pools);
                let members: Vec<Member> = pools.into_values().flatten().collect();
                if members.is_empty() && !progress {
                    return Err(EvolveError::Stalled);
                }
                self.evaluate_uncompiled(members)?;
                continue;
            };
            self.dispatch(submitter)?;
            if progress || self.release_held()? {
                continue;
            }
            if self.jobs.is_empty() {
                return Err(EvolveError::Stalled);
            }
            let first = submitter.finished().recv().map_err(|_| EvolveError::CompilerStopped)?;
            // Whatever else has come back meanwhile is evaluated with it, in one call.
            let mut ready = Vec::new();
            for finished in std::iter::once(first).chain(submitter.finished().try_iter()) {
                ready.extend(self.on_finished(finished, submitter)?);
            }
            if !ready.is_empty() {
                self.evaluate(ready)?;
            }
        }
    }

    /// Sends the best of `generation` to the next island and puts what the previous one sent
    /// in place of the worst; waits for it (the stop flag is looked at every 50 ms).
    fn migrate(&mut self, generation: usize) -> Result<(), EvolveError> {
        let island = self.island;
        let Some((link, count)) = &self.link else {
            return Err(EvolveError::Stalled);
        };
        let emigrants = self.pipeline.emigrants(generation, *count).ok_or(EvolveError::Stalled)?;
        let gone = |why: &str| EvolveError::Migration { island, generation, why: why.to_owned() };
        link.to_next.send((generation, emigrants)).map_err(|_| gone("the next island has ended"))?;
        let (sent_for, immigrants) = loop {
            match link.from_previous.recv_timeout(Duration::from_millis(50)) {
                Ok(parcel) => break parcel,
                Err(RecvTimeoutError::Timeout) if self.stop.load(Ordering::Relaxed) => {
                    return Err(EvolveError::Stopped);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(gone("the previous island has ended")),
            }
        };
        if sent_for != generation {
            return Err(gone(&format!("the previous island sent migrants of generation {sent_for}")));
        }
        self.pipeline.immigrate(generation, immigrants)?;
        Ok(())
    }

    /// Breeding time goes to the generations bred, by their share of the individuals.
    fn charge_breeding(&mut self, born: &[Born], took: Duration) {
        if born.is_empty() {
            return;
        }
        let share = took / born.len() as u32;
        for b in born {
            self.account(b.generation).breed += share;
        }
        self.totals.breed_s += took.as_secs_f64();
    }

    /// Hands a fitness to the pipeline, for the individual and every identical one waiting for
    /// it; remembers it unless it comes from a failure that says nothing of the phenotype.
    fn resolve(&mut self, m: &Member, f: Fitness, remember: bool, chain: Chain) -> Result<(), EvolveError> {
        self.pipeline.set_fitness(m.generation, m.slot, f)?;
        self.account(m.generation).known(chain);
        let Some(key) = m.key else { return Ok(()) };
        if remember && let Some(memo) = &mut self.memo {
            memo.insert(key, f, m.generation);
        }
        let Some(waiting) = self.waiting.remove(&key) else { return Ok(()) };
        for w in &waiting {
            self.pipeline.set_fitness(w.generation, w.slot, f)?;
            self.account(w.generation).known(Chain { born: w.born.max(chain.born), ..chain });
        }
        if !waiting.is_empty() {
            self.trash.push(waiting);
        }
        Ok(())
    }

    /// Frees `members` (their trees and code), and the members [`Driver::resolve`] set aside, on
    /// the run's threads rather than this one: a generation holds up to 10^6.
    fn discard(&mut self, members: Vec<Member>) {
        let trash = std::mem::take(&mut self.trash);
        match self.pool() {
            Some(pool) => pool.spawn(move || drop((members, trash))),
            None => drop((members, trash)),
        }
    }

    fn complete(&mut self, stats: &GenerationStats, report: &mut Report<'_>) -> Result<(), EvolveError> {
        let done = Instant::now();
        let account = self.accounts.remove(&stats.generation).unwrap_or_default();
        let split = EvalSplit {
            gpu_worker_restarts: self.evaluator.restarts(),
            fell_back_to_cpu: self.fell_back.clone(),
            ..EvalSplit::default()
        };
        let mut record = GenerationRecord::new(
            stats,
            &account,
            split,
            self.start,
            self.previous_done,
            done,
            self.evaluator.kind(),
        );
        record.island = self.island;
        self.last_generation = done.saturating_duration_since(self.previous_done);
        self.previous_done = done;
        report(record)
    }
}
