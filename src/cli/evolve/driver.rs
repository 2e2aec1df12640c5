//! The run loop of `gpfarm evolve`: individuals flow from the breeding pipeline through the
//! caches, into units on the compiler's queue, through evaluation, and back into the pipeline.
//!
//! - **Compile each phenotype once** (unless `--no-cache`): an individual whose compiled code is
//!   known from an earlier generation keeps its fitness ([`FitnessMemo`]); one identical to an
//!   individual being compiled waits for that one's fitness; one whose CUBIN is in the disk cache
//!   is evaluated without compiling. Only the rest is compiled.
//! - **Overlap** (the default): each unit is evaluated as soon as its CUBIN is back, and the
//!   next generation's pairs are bred, rendered and compiled as soon as their parents are
//!   evaluated, filling daemons that would otherwise wait for the slowest units of this
//!   generation. With `--no-overlap` a generation is compiled whole, then evaluated whole, then
//!   bred.
//!
//! Units are formed when they are sent: the oldest incomplete generation's individuals at once,
//! in guided chunks (heaviest first, shrinking so the daemons finish together); the next
//! generation's early individuals only while a daemon has nothing to do.
//!
//! Must never let caching or overlap change a fitness value: the same seed gives the same
//! generations with any combination of them.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use gpfarm_client::partition::guided;
use gpfarm_client::{
    CacheKey, Compiler, DiskCache, FailureKind, Finished, Job, Submitter, Unit, UnitOutcome, job_queue,
};
use gpfarm_client::{GpuWorker, WorkerError};
use gpfarm_gp::{Born, Fitness, Phenotype, Pipeline, Problem, evaluate_all};
use gpfarm_kernels::gpu::CompiledUnit;
use gpfarm_kernels::{UNIT_WEIGHT, compile_weight, kernel_name, keyed_source, render_unit};
use gpfarm_protocol::CompileOptions;

use super::memo::{self, FitnessMemo};
use super::report::{Account, Chain, EvalSplit, GenerationRecord};

/// The least estimated weight of a unit ([`compile_weight`]): NVRTC's fixed cost per unit stays
/// under a fifth of it.
const CHUNK_FLOOR: f64 = 4.0 * UNIT_WEIGHT;
/// The most: units of many heavy kernels cost more than their weights say (a unit of eight
/// bloated keijzer6 individuals took 3.6 s on the GPU host while the rest of its generation took
/// 1 s), and one such unit holds up its whole generation.
const CHUNK_CAP: f64 = 8.0 * UNIT_WEIGHT;

/// Where fitness is computed.
pub enum Evaluator {
    /// The CPU reference evaluator.
    Cpu,
    /// A GPU worker process.
    Gpu(Box<GpuWorker>),
}

impl Evaluator {
    fn name(&self) -> &'static str {
        match self {
            Evaluator::Cpu => "cpu",
            Evaluator::Gpu(_) => "gpu",
        }
    }
}

/// How the run treats its individuals.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Reuse known fitness, merge identical individuals (see the module documentation).
    pub cache: bool,
    /// Evaluate units as they come back and breed the next generation early.
    pub overlap: bool,
    /// Fixed individuals per unit instead of guided chunks.
    pub per_unit: Option<usize>,
    /// Workers (daemons or threads) the compiler has.
    pub workers: usize,
}

/// Totals of a run.
#[derive(Debug, Default, serde::Serialize)]
pub struct Totals {
    pub individuals_evaluated: usize,
    pub reused: usize,
    pub duplicates: usize,
    pub disk_hits: usize,
    pub compiled: usize,
    pub units: usize,
    pub compile_busy_s: f64,
    pub eval_s: f64,
    pub breed_s: f64,
    pub wall_s: f64,
    /// Fitness values remembered at the end (bounded).
    pub memo_entries: usize,
}

/// An individual waiting for its fitness.
#[derive(Debug, Clone)]
struct Member {
    generation: usize,
    slot: usize,
    phenotype: Phenotype,
    key: Option<CacheKey>,
    born: Instant,
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
    cubin: Vec<u8>,
    kernels: Vec<String>,
    members: Vec<Member>,
    queued: Instant,
    started: Instant,
    ended: Instant,
}

/// See the module documentation.
pub struct Driver<'a> {
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
    /// Individuals identical to one being compiled, by key, waiting for its fitness.
    waiting: HashMap<CacheKey, Vec<Member>>,
    /// Bred individuals not yet in a unit, by generation.
    pools: BTreeMap<usize, Vec<Member>>,
    jobs: HashMap<u64, JobInfo>,
    next_job: u64,
    /// Without overlap: code of a generation waiting for the rest of it.
    held: BTreeMap<usize, Vec<Ready>>,
    accounts: BTreeMap<usize, Account>,
    /// One JSON line per compiled unit (`--trace-units`).
    trace: Option<BufWriter<File>>,
    start: Instant,
    previous_done: Instant,
    totals: Totals,
}

impl<'a> Driver<'a> {
    /// A run of `pipeline` on `problem`, compiling with `options` by the compiler `toolchain`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        problem: &'a Problem,
        options: &'a CompileOptions,
        toolchain: String,
        settings: Settings,
        pipeline: Pipeline,
        disk: Option<DiskCache>,
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
            disk,
            evaluator,
            fell_back: None,
            eval_threads: std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN),
            waiting: HashMap::new(),
            pools: BTreeMap::new(),
            jobs: HashMap::new(),
            next_job: 0,
            held: BTreeMap::new(),
            accounts: BTreeMap::new(),
            trace: None,
            start: now,
            previous_done: now,
            totals: Totals::default(),
        }
    }

    /// Runs to the last generation, compiling on `compiler` (or, without one, evaluating on the
    /// CPU only), calling `report` with each generation's record as it completes.
    pub fn run(
        mut self,
        compiler: Option<&mut (dyn Compiler + Send + '_)>,
        mut report: impl FnMut(GenerationRecord) -> Result<()>,
    ) -> Result<(Totals, Pipeline)> {
        self.start = Instant::now();
        self.previous_done = self.start;
        let Some(compiler) = compiler else {
            self.drive(None, &mut report)?;
            return Ok(self.finish());
        };
        let (submitter, work) = job_queue();
        let mut submitter = Some(submitter);
        let options = self.options;
        let outcome = std::thread::scope(|scope| {
            let serving = scope.spawn(move || compiler.serve(options, work));
            let driven = self.drive(submitter.as_ref(), &mut report);
            // On success there is nothing left to compile; on an error, dropping the queue
            // lets the compiler drop what is left.
            match (&driven, &mut submitter) {
                (Ok(()), Some(s)) => s.close(),
                _ => submitter = None,
            }
            let served = serving.join().map_err(|_| anyhow!("the compile thread panicked"))?;
            driven?;
            served.context("compiling")?;
            Ok::<(), anyhow::Error>(())
        });
        outcome?;
        Ok(self.finish())
    }

    /// Writes one JSON line per compiled unit to `file`: its generation, individuals, estimated
    /// weight, and when it was queued, started and ended (ms from the start of the run).
    pub fn trace_units(&mut self, file: File) {
        self.trace = Some(BufWriter::new(file));
    }

    fn finish(mut self) -> (Totals, Pipeline) {
        if let Some(trace) = &mut self.trace
            && let Err(e) = trace.flush()
        {
            eprintln!("warning: the unit trace is incomplete: {e}");
        }
        self.totals.wall_s = self.start.elapsed().as_secs_f64();
        self.totals.memo_entries = self.memo.as_ref().map_or(0, FitnessMemo::len);
        (self.totals, self.pipeline)
    }

    fn account(&mut self, generation: usize) -> &mut Account {
        self.accounts.entry(generation).or_default()
    }

    fn drive(
        &mut self,
        submitter: Option<&Submitter>,
        report: &mut impl FnMut(GenerationRecord) -> Result<()>,
    ) -> Result<()> {
        loop {
            let bred_at = Instant::now();
            let completed = self.pipeline.advance();
            let born = self.pipeline.take_born();
            self.charge_breeding(&born, bred_at.elapsed());
            for stats in completed {
                self.complete(&stats, report)?;
            }
            if self.pipeline.is_finished() {
                return Ok(());
            }
            let progress = self.admit(born)?;
            let Some(submitter) = submitter else {
                // No compiler: everything in the pools is evaluated on the CPU right away.
                let pools = std::mem::take(&mut self.pools);
                let members: Vec<Member> = pools.into_values().flatten().collect();
                if members.is_empty() && !progress {
                    bail!("nothing to evaluate and the generation is not complete");
                }
                self.evaluate_on_cpu(members)?;
                continue;
            };
            self.dispatch(submitter)?;
            if progress || self.release_held()? {
                continue;
            }
            if self.jobs.is_empty() {
                bail!("the run stalled: no unit is compiling and no generation can complete");
            }
            let first = submitter
                .finished()
                .recv()
                .map_err(|_| anyhow!("the compiler stopped before every unit was compiled"))?;
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

    /// Takes newly bred individuals: reused, merged, found on disk, or put in a pool to compile.
    /// Returns whether any fitness became known.
    fn admit(&mut self, born: Vec<Born>) -> Result<bool> {
        let mut progress = false;
        let mut from_disk: BTreeMap<String, Ready> = BTreeMap::new();
        let now = Instant::now();
        for b in born {
            self.account(b.generation).born += 1;
            self.totals.individuals_evaluated += 1;
            let member = Member {
                generation: b.generation,
                slot: b.slot,
                key: self.settings.cache.then(|| {
                    CacheKey::new(
                        keyed_source(self.problem.template(), &b.phenotype).as_bytes(),
                        self.options,
                        &self.toolchain,
                    )
                }),
                phenotype: b.phenotype,
                born: now,
            };
            let Some(key) = member.key else {
                self.pools.entry(member.generation).or_default().push(member);
                continue;
            };
            if let Some(f) = self.memo.as_mut().and_then(|m| m.get(&key, member.generation)) {
                self.pipeline.set_fitness(member.generation, member.slot, f)?;
                let a = self.account(member.generation);
                a.reused += 1;
                a.known(Chain::without_compile(now, now));
                self.totals.reused += 1;
                progress = true;
            } else if let Some(w) = self.waiting.get_mut(&key) {
                let generation = member.generation;
                w.push(member);
                self.account(generation).duplicates += 1;
                self.totals.duplicates += 1;
            } else if let Some(hit) = self.disk.as_ref().and_then(|d| d.get(&key)) {
                self.waiting.insert(key, Vec::new());
                self.account(member.generation).disk_hits += 1;
                self.totals.disk_hits += 1;
                let ready = from_disk.entry(hit.object).or_insert_with(|| Ready {
                    cubin: hit.cubin,
                    kernels: Vec::new(),
                    members: Vec::new(),
                    queued: now,
                    started: now,
                    ended: now,
                });
                ready.kernels.push(hit.kernel);
                ready.members.push(member);
            } else {
                self.waiting.insert(key, Vec::new());
                self.pools.entry(member.generation).or_default().push(member);
            }
        }
        let ready: Vec<Ready> = from_disk.into_values().collect();
        if self.settings.overlap && !ready.is_empty() {
            self.evaluate(ready)?;
            progress = true;
        } else {
            // Evaluated with the rest of their generation (see `release_held`).
            for r in ready {
                self.held.entry(r.members[0].generation).or_default().push(r);
            }
        }
        Ok(progress)
    }

    /// Puts pooled individuals into units and onto the queue: the oldest incomplete generation's
    /// at once; a later one's only while some worker has nothing to do.
    fn dispatch(&mut self, submitter: &Submitter) -> Result<()> {
        let critical = self.pipeline.oldest_open();
        let generations: Vec<usize> = self.pools.keys().copied().collect();
        for g in generations {
            let now = !self.settings.overlap || Some(g) == critical || self.jobs.is_empty();
            if !now && submitter.free_workers() == 0 {
                continue;
            }
            let pool = self.pools.remove(&g).unwrap_or_default();
            let chunks: Vec<Vec<usize>> = match self.settings.per_unit {
                Some(k) => {
                    let mut order: Vec<usize> = (0..pool.len()).collect();
                    order.sort_by(|&a, &b| {
                        pool[b].phenotype.as_str().len().cmp(&pool[a].phenotype.as_str().len())
                    });
                    order.chunks(k.max(1)).map(<[usize]>::to_vec).collect()
                }
                None => {
                    let weights: Vec<f64> = pool.iter().map(|m| compile_weight(&m.phenotype)).collect();
                    guided(&weights, self.settings.workers, CHUNK_FLOOR, CHUNK_CAP)
                }
            };
            let mut pool: Vec<Option<Member>> = pool.into_iter().map(Some).collect();
            for chunk in chunks {
                let members: Vec<Member> = chunk.into_iter().filter_map(|i| pool[i].take()).collect();
                self.submit(submitter, g, members, false)?;
            }
        }
        Ok(())
    }

    fn submit(
        &mut self,
        submitter: &Submitter,
        generation: usize,
        members: Vec<Member>,
        isolation: bool,
    ) -> Result<()> {
        let named: Vec<_> =
            members.iter().map(|m| (kernel_name(m.generation, m.slot), &m.phenotype)).collect();
        let source = render_unit(self.problem.template(), &named);
        let kernels = named.iter().map(|(k, _)| k.as_str().to_owned()).collect();
        let id = self.next_job;
        self.next_job += 1;
        let unit = Unit::new(format!("g{generation}_j{id}.cu"), source);
        if !submitter.submit(Job { id, units: vec![unit] }) {
            bail!("the compiler stopped taking work");
        }
        let a = self.account(generation);
        a.units += 1;
        if isolation {
            a.isolation_units += 1;
        } else {
            a.compiled += members.len();
            self.totals.compiled += members.len();
        }
        self.totals.units += 1;
        self.jobs.insert(id, JobInfo { generation, members, kernels, isolation });
        Ok(())
    }

    /// Takes a compiled unit: its CUBIN is returned to be evaluated (or, without overlap, held
    /// until its generation is compiled); a unit that failed is split to find who broke it.
    fn on_finished(&mut self, finished: Finished, submitter: &Submitter) -> Result<Vec<Ready>> {
        let info = self.jobs.remove(&finished.id).context("a result for a unit never sent")?;
        let busy = Duration::from_micros(finished.busy_us);
        self.totals.compile_busy_s += busy.as_secs_f64();
        let a = self.account(info.generation);
        a.busy += busy;
        let mut ready = Vec::new();
        for r in finished.results {
            self.account(info.generation).nvrtc += Duration::from_micros(r.timings.compile_us);
            match r.outcome {
                UnitOutcome::Cubin(cubin) => ready.push(Ready {
                    cubin,
                    kernels: info.kernels.clone(),
                    members: info.members.clone(),
                    queued: finished.queued,
                    started: finished.started,
                    ended: finished.ended,
                }),
                UnitOutcome::Failed(f)
                    if !info.isolation && (info.members.len() > 1 || f.kind == FailureKind::Lost) =>
                {
                    // Find who broke the unit: each alone.
                    for m in info.members.clone() {
                        self.submit(submitter, info.generation, vec![m], true)?;
                    }
                }
                UnitOutcome::Failed(f) => {
                    let chain = |m: &Member| Chain {
                        born: m.born,
                        queued: finished.queued,
                        started: finished.started,
                        ended: finished.ended,
                        evaluated: finished.ended,
                    };
                    for m in &info.members {
                        tracing::warn!(
                            "individual {} of generation {} did not compile: {f}\n{}",
                            m.slot,
                            m.generation,
                            r.log
                        );
                        self.account(m.generation).failed += 1;
                        let worst = Fitness::worst(self.problem.direction());
                        self.resolve(m, worst, false, chain(m))?;
                    }
                }
            }
        }
        if let Some(disk) = &self.disk {
            for r in &ready {
                let entries: Vec<(CacheKey, &str)> = r
                    .members
                    .iter()
                    .zip(&r.kernels)
                    .filter_map(|(m, k)| Some((m.key?, k.as_str())))
                    .collect();
                if let Err(e) = disk.put(&r.cubin, &entries) {
                    tracing::warn!("the disk cache in {} refused a unit: {e}", disk.dir().display());
                }
            }
        }
        if let Some(trace) = &mut self.trace {
            let at = |t: Instant| t.saturating_duration_since(self.start).as_secs_f64() * 1000.0;
            let record = serde_json::json!({
                "generation": info.generation,
                "unit": finished.id,
                "individuals": info.members.len(),
                "weight": info.members.iter().map(|m| compile_weight(&m.phenotype)).sum::<f64>(),
                "isolation": info.isolation,
                "compiled": !ready.is_empty(),
                "queued_ms": at(finished.queued),
                "started_ms": at(finished.started),
                "ended_ms": at(finished.ended),
                "busy_ms": busy.as_secs_f64() * 1000.0,
            });
            writeln!(trace, "{record}").context("writing the unit trace")?;
        }
        if self.settings.overlap {
            Ok(ready)
        } else {
            self.held.entry(info.generation).or_default().extend(ready);
            Ok(Vec::new())
        }
    }

    /// Without overlap: evaluates a generation once none of it is pooled or compiling. Returns
    /// whether anything was evaluated.
    fn release_held(&mut self) -> Result<bool> {
        let busy: Vec<usize> =
            self.jobs.values().map(|j| j.generation).chain(self.pools.keys().copied()).collect();
        let done: Vec<usize> = self.held.keys().copied().filter(|g| !busy.contains(g)).collect();
        let mut any = false;
        for g in done {
            if let Some(ready) = self.held.remove(&g) {
                self.evaluate(ready)?;
                any = true;
            }
        }
        Ok(any)
    }

    /// Evaluates compiled code and hands the fitness values to the pipeline.
    fn evaluate(&mut self, ready: Vec<Ready>) -> Result<()> {
        let t = Instant::now();
        let n: usize = ready.iter().map(|r| r.members.len()).sum();
        let gpu = match &mut self.evaluator {
            Evaluator::Cpu => None,
            Evaluator::Gpu(worker) => {
                let mut first = 0;
                let indices: Vec<Vec<usize>> = ready
                    .iter()
                    .map(|r| {
                        first += r.members.len();
                        (first - r.members.len()..first).collect()
                    })
                    .collect();
                let units: Vec<CompiledUnit<'_>> = ready
                    .iter()
                    .zip(&indices)
                    .map(|(r, members)| CompiledUnit { cubin: &r.cubin, kernels: &r.kernels, members })
                    .collect();
                Some(worker.evaluate(&units, n))
            }
        };
        let members: Vec<(&Member, &Ready)> =
            ready.iter().flat_map(|r| r.members.iter().map(move |m| (m, r))).collect();
        let worst = Fitness::worst(self.problem.direction());
        let (values, faulted, split): (Vec<Fitness>, Vec<bool>, Option<_>) = match gpu {
            None => (self.cpu_fitness(members.iter().map(|(m, _)| &m.phenotype)), vec![false; n], None),
            Some(Ok(out)) => {
                let mut faulted = vec![false; n];
                for (i, why) in &out.faults {
                    let m = members[*i].0;
                    tracing::warn!(
                        "individual {} of generation {} failed on the GPU: {why}",
                        m.slot,
                        m.generation
                    );
                    faulted[*i] = true;
                }
                let values = out
                    .fitness
                    .iter()
                    .map(|v| match v {
                        Some(v) if v.is_finite() => Fitness::new(*v, self.problem.direction()),
                        _ => worst,
                    })
                    .collect();
                (values, faulted, Some((out.load, out.launch, out.readback)))
            }
            Some(Err(WorkerError::Fault(why))) => {
                eprintln!(
                    "warning: the GPU faulted and the fault could not be pinned on one individual ({why}); \
                     falling back to the CPU evaluator for the rest of the run"
                );
                self.evaluator = Evaluator::Cpu;
                self.fell_back = Some(why);
                (self.cpu_fitness(members.iter().map(|(m, _)| &m.phenotype)), vec![false; n], None)
            }
            Some(Err(e)) => return Err(e.into()),
        };
        let took = t.elapsed();
        self.totals.eval_s += took.as_secs_f64();
        let evaluated = Instant::now();
        for (((m, r), f), faulted) in members.iter().zip(values).zip(faulted) {
            let a = self.account(m.generation);
            a.eval += took / n.max(1) as u32;
            if let Some((load, launch, readback)) = split {
                a.load += load / n.max(1) as u32;
                a.launch += launch / n.max(1) as u32;
                a.readback += readback / n.max(1) as u32;
            }
            if faulted {
                a.faults += 1;
            }
            let chain =
                Chain { born: m.born, queued: r.queued, started: r.started, ended: r.ended, evaluated };
            self.resolve(m, f, !faulted, chain)?;
        }
        Ok(())
    }

    fn cpu_fitness<'p>(&self, phenotypes: impl Iterator<Item = &'p Phenotype>) -> Vec<Fitness> {
        let phenotypes: Vec<Phenotype> = phenotypes.cloned().collect();
        evaluate_all(self.problem, &phenotypes, self.eval_threads).into_iter().map(|e| e.fitness).collect()
    }

    fn evaluate_on_cpu(&mut self, members: Vec<Member>) -> Result<()> {
        let t = Instant::now();
        let values = self.cpu_fitness(members.iter().map(|m| &m.phenotype));
        let took = t.elapsed();
        self.totals.eval_s += took.as_secs_f64();
        let now = Instant::now();
        for (m, f) in members.iter().zip(values) {
            self.account(m.generation).eval += took / members.len() as u32;
            self.resolve(m, f, true, Chain::without_compile(m.born, now))?;
        }
        Ok(())
    }

    /// Hands a fitness to the pipeline, for the individual and every identical one waiting for
    /// it; remembers it unless it comes from a failure that says nothing of the phenotype.
    fn resolve(&mut self, m: &Member, f: Fitness, remember: bool, chain: Chain) -> Result<()> {
        self.pipeline.set_fitness(m.generation, m.slot, f)?;
        self.account(m.generation).known(chain);
        let Some(key) = m.key else { return Ok(()) };
        if remember && let Some(memo) = &mut self.memo {
            memo.insert(key, f, m.generation);
        }
        for w in self.waiting.remove(&key).unwrap_or_default() {
            self.pipeline.set_fitness(w.generation, w.slot, f)?;
            self.account(w.generation).known(Chain { born: w.born.max(chain.born), ..chain });
        }
        Ok(())
    }

    fn complete(
        &mut self,
        stats: &gpfarm_gp::GenerationStats,
        report: &mut impl FnMut(GenerationRecord) -> Result<()>,
    ) -> Result<()> {
        let done = Instant::now();
        let account = self.accounts.remove(&stats.generation).unwrap_or_default();
        let split = EvalSplit {
            gpu_worker_restarts: match &self.evaluator {
                Evaluator::Gpu(g) => g.restarts,
                Evaluator::Cpu => 0,
            },
            fell_back_to_cpu: self.fell_back.clone(),
            ..EvalSplit::default()
        };
        let record = GenerationRecord::new(
            stats,
            &account,
            split,
            self.start,
            self.previous_done,
            done,
            self.evaluator.name(),
        );
        self.previous_done = done;
        report(record)
    }
}
