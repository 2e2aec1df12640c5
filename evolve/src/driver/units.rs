//! Forming units and taking them back: pooled individuals are put into units when they are
//! sent (heaviest first, in chunks that shrink towards the end of a generation so that the
//! workers finish together, each capped in weight), and a unit that failed to compile is
//! compiled again one individual per unit, so that only the ones at fault get the worst fitness.
//! Must never send an individual in two units at once, nor lose one whose unit failed.

use std::io::Write;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use gpfarm_client::cubin::missing_kernel;
use gpfarm_client::partition::{UnitPlan, plan};
use gpfarm_client::{
    BuildConfig, CacheKey, CompileOptions, Compiler, CompilerSpec, Failure, FailureKind, Finished, Job,
    Submitter, UnitOutcome, Workers,
};
use gpfarm_gp::Fitness;
use gpfarm_gp::KernelName;
use gpfarm_kernels::unit::{self, Rendered, kernel_name};
use gpfarm_protocol::{Language, Shape};

use super::{Driver, Evaluator, JobInfo, Member, Ready};
use crate::account::Chain;
use crate::error::EvolveError;

/// The compiler of crash retries: one daemon of its own, so that a retry that crashes too costs
/// nothing but that daemon. Started at the first crash of a run, which most runs never see.
pub(super) enum Retry {
    /// No crash yet.
    NotStarted,
    /// Started, compiling with the run's flags and the retry's.
    Running(Box<dyn Compiler + Send>, CompileOptions),
    /// Could not be started, or compiles with another NVRTC than the run's: no retries.
    Unavailable,
}

/// What became of an individual's crash retry.
enum Retried {
    /// Not a crash, or no retry flags.
    NotTried,
    /// The retry compiler could not be started.
    Unavailable,
    /// Compiled; its code is evaluated.
    Used(Ready),
    /// Compiled, but the GPU would evaluate code compiled with other flags than the run's.
    NotUsedOnGpu,
    /// Failed again.
    Failed(String),
}

impl Retried {
    /// The end of the individual's warning.
    fn says(&self, flags: &[String]) -> String {
        let flags = flags.join(" ");
        match self {
            Retried::NotTried => "it gets the worst fitness".into(),
            Retried::Unavailable => {
                "no daemon could be started to compile it again; it gets the worst fitness".into()
            }
            Retried::Used(_) => format!("compiled again with {flags}: its fitness is used"),
            Retried::NotUsedOnGpu => format!(
                "compiled again with {flags}, but crash retries are not evaluated on the GPU in this run \
                 (--no-crash-retry-on-gpu); it gets the worst fitness"
            ),
            Retried::Failed(why) => {
                format!("compiled again with {flags}, it failed too ({why}); it gets the worst fitness")
            }
        }
    }
}

impl Driver<'_> {
    /// Writes the unit of `m` alone into the crash directory; says where, or why not.
    fn save_failed(&mut self, m: &Member) -> String {
        let name = kernel_name(m.generation, m.slot);
        let rendered = self.render(std::slice::from_ref(m), &name, Shape::Kernels);
        match self.settings.crash.dir.write(&rendered.unit.name, &rendered.unit.source) {
            Ok((dir, path)) => {
                self.totals.failed_units_dir = Some(dir);
                format!(
                    "its unit is in {} (reproduce: gpfarm compile --source {} --compiler farm -n 1)",
                    path.display(),
                    path.display()
                )
            }
            Err(e) => format!("its unit could not be written: {e}"),
        }
    }

    /// Compiles an individual that crashed NVRTC once more, with the retry flags, in a daemon of
    /// its own (this thread waits for it: crashes are rare).
    fn retry_crashed(&mut self, m: &Member, queued: Instant, started: Instant) -> Retried {
        let crash = &self.settings.crash;
        // The retry flags are NVRTC's: a PTX unit is not compiled by NVRTC.
        if crash.retry_flags.is_empty() || self.language() != Language::CudaC {
            return Retried::NotTried;
        }
        if matches!(self.retry, Retry::NotStarted) {
            self.retry = self.start_retry();
        }
        let stem = KernelName::new(format!("g{}_i{}_retry", m.generation, m.slot))
            .expect("g<digits>_i<digits>_retry is a C identifier");
        let Rendered { unit, kernels } = self.render(std::slice::from_ref(m), &stem, Shape::Kernels);
        let Retry::Running(compiler, options) = &mut self.retry else { return Retried::Unavailable };
        let retry_started = Instant::now();
        let result = match compiler.compile(&[unit], options) {
            Ok(batch) => batch.results.into_iter().next(),
            Err(e) => return Retried::Failed(e.to_string()),
        };
        let busy = retry_started.elapsed();
        self.totals.compile_busy_s += busy.as_secs_f64();
        let a = self.account(m.generation);
        a.busy += busy;
        a.crash_retried += 1;
        self.totals.crash_retried += 1;
        let cubin = match result.map(|r| r.outcome) {
            Some(UnitOutcome::Cubin(cubin)) => cubin,
            Some(UnitOutcome::Failed(f)) => return Retried::Failed(f.to_string()),
            None => return Retried::Failed("no result".into()),
        };
        if matches!(self.evaluator, Evaluator::Gpu(_)) && !self.settings.crash.retry_on_gpu {
            return Retried::NotUsedOnGpu;
        }
        self.account(m.generation).crash_retry_used += 1;
        self.totals.crash_retry_used += 1;
        Retried::Used(Ready {
            retried: true,
            cubin,
            kernels,
            members: vec![m.clone()],
            queued,
            started,
            ended: Instant::now(),
        })
    }

    /// Starts the retry compiler: one daemon of the run's NVRTC, warm for the run's target.
    fn start_retry(&self) -> Retry {
        let options = CompileOptions {
            flags: self.options.flags.iter().chain(&self.settings.crash.retry_flags).cloned().collect(),
            ..self.options.clone()
        };
        let spec = CompilerSpec::Farm(Workers::Exactly(NonZeroUsize::MIN));
        match spec.build(&options, &BuildConfig::default()) {
            Ok(compiler) if compiler.toolchain() == self.toolchain => Retry::Running(compiler, options),
            Ok(compiler) => {
                tracing::warn!(
                    "individuals that crash NVRTC are not compiled again: a daemon would compile them with {}, \
                     the run compiles with {}",
                    compiler.toolchain(),
                    self.toolchain
                );
                Retry::Unavailable
            }
            Err(e) => {
                tracing::warn!(
                    "individuals that crash NVRTC are not compiled again: no daemon started ({e})"
                );
                Retry::Unavailable
            }
        }
    }

    /// Puts pooled individuals into units and onto the queue: the oldest incomplete generation's
    /// at once; a later one's only while some worker has nothing to do.
    pub(super) fn dispatch(&mut self, submitter: &Submitter) -> Result<(), EvolveError> {
        let critical = self.pipeline.oldest_open();
        let generations: Vec<usize> = self.pools.keys().copied().collect();
        for g in generations {
            let now = !self.settings.overlap || Some(g) == critical || self.jobs.is_empty();
            if !now && submitter.free_workers() == 0 {
                continue;
            }
            let pool = self.pools.remove(&g).unwrap_or_default();
            let weights: Vec<f64> = pool.iter().map(|m| self.weight(m)).collect();
            let units =
                UnitPlan::new(self.settings.per_unit, self.settings.workers, unit::bounds(self.language()));
            let chunks = plan(&weights, units);
            let mut pool: Vec<Option<Member>> = pool.into_iter().map(Some).collect();
            for chunk in chunks {
                let members: Vec<Member> = chunk.into_iter().filter_map(|i| pool[i].take()).collect();
                self.submit(submitter, g, members, false)?;
            }
        }
        Ok(())
    }

    /// The language of the run's units (units are formed only on the routes that compile
    /// individuals).
    fn language(&self) -> Language {
        self.settings.route.language().expect("units are formed only on the routes that compile individuals")
    }

    /// `m`'s estimated compile cost on the run's route.
    fn weight(&self, m: &Member) -> f64 {
        unit::weight(self.problem, self.language(), &m.phenotype, m.program.as_deref())
    }

    /// The unit of `members` in the run's language and `shape`, named after `stem`
    /// ([`unit::render`]).
    fn render(&self, members: &[Member], stem: &KernelName, shape: Shape) -> Rendered {
        let names: Vec<KernelName> = members.iter().map(|m| kernel_name(m.generation, m.slot)).collect();
        let members: Vec<unit::Member<'_>> = members
            .iter()
            .zip(&names)
            .map(|(m, kernel)| unit::Member {
                kernel,
                phenotype: &m.phenotype,
                program: m.program.as_deref(),
            })
            .collect();
        unit::render(self.problem, self.language(), shape, self.options.arch, stem, &members)
    }

    fn submit(
        &mut self,
        submitter: &Submitter,
        generation: usize,
        members: Vec<Member>,
        isolation: bool,
    ) -> Result<(), EvolveError> {
        let id = self.next_job;
        self.next_job += 1;
        let stem =
            KernelName::new(format!("g{generation}_j{id}")).expect("g<digits>_j<digits> is a C identifier");
        let Rendered { unit, kernels } = self.render(&members, &stem, self.settings.shape);
        if !submitter.submit(Job { id, units: vec![unit] }) {
            return Err(EvolveError::CompilerStopped);
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
    pub(super) fn on_finished(
        &mut self,
        finished: Finished,
        submitter: &Submitter,
    ) -> Result<Vec<Ready>, EvolveError> {
        let info = self.jobs.remove(&finished.id).ok_or(EvolveError::UnknownUnit { id: finished.id })?;
        let busy = Duration::from_micros(finished.busy_us);
        self.totals.compile_busy_s += busy.as_secs_f64();
        let a = self.account(info.generation);
        a.busy += busy;
        let mut ready = Vec::new();
        for mut r in finished.results {
            self.account(info.generation).nvrtc += Duration::from_micros(r.timings.compile_us);
            // A CUBIN without a kernel the unit named is a failed unit, not fitness from elsewhere.
            if let Some(why) = r.cubin().and_then(|c| missing_kernel(c, &info.kernels)) {
                r.outcome = UnitOutcome::Failed(Failure { kind: FailureKind::Internal, message: why });
            }
            match r.outcome {
                UnitOutcome::Cubin(cubin) => ready.push(Ready {
                    retried: false,
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
                        let saved = self.save_failed(m);
                        let retried = match (f.kind, &info.members[..]) {
                            (FailureKind::Lost, [_]) => {
                                self.retry_crashed(m, finished.queued, finished.started)
                            }
                            _ => Retried::NotTried,
                        };
                        let log = if r.log.is_empty() { String::new() } else { format!("\n{}", r.log) };
                        tracing::warn!(
                            "individual {} of generation {} did not compile: {f}; phenotype: {}; {saved}; {}{log}",
                            m.slot,
                            m.generation,
                            m.phenotype.as_str(),
                            retried.says(&self.settings.crash.retry_flags),
                        );
                        match retried {
                            Retried::Used(r) => ready.push(r),
                            _ => {
                                self.account(m.generation).failed += 1;
                                self.totals.failed += 1;
                                let worst = Fitness::worst(self.problem.direction());
                                self.resolve(m, worst, false, chain(m))?;
                                self.fail_structure(m, chain(m))?;
                            }
                        }
                    }
                }
            }
        }
        if let Some(disk) = &self.disk {
            for r in ready.iter().filter(|r| !r.retried) {
                let entries: Vec<(CacheKey, &str)> = r
                    .members
                    .iter()
                    .zip(&r.kernels)
                    .filter_map(|(m, k)| Some((m.code_key?, k.as_str())))
                    .collect();
                if let Err(e) = disk.put(&r.cubin, &entries) {
                    tracing::warn!("the disk cache in {} refused a unit: {e}", disk.dir().display());
                }
            }
        }
        // Individuals waiting for these structures run on their code with their own values.
        let joined = self.on_structures(&ready);
        ready.extend(joined);
        // Estimated only for the trace: on the PTX route it emits each member's kernel again.
        let weight: f64 =
            if self.trace.is_some() { info.members.iter().map(|m| self.weight(m)).sum() } else { 0.0 };
        if let Some((trace, path)) = &mut self.trace {
            let at = |t: Instant| t.saturating_duration_since(self.start).as_secs_f64() * 1000.0;
            let record = serde_json::json!({
                "generation": info.generation,
                "unit": finished.id,
                "individuals": info.members.len(),
                "weight": weight,
                "isolation": info.isolation,
                "compiled": !ready.is_empty(),
                "queued_ms": at(finished.queued),
                "started_ms": at(finished.started),
                "ended_ms": at(finished.ended),
                "busy_ms": busy.as_secs_f64() * 1000.0,
            });
            writeln!(trace, "{record}")
                .map_err(|source| EvolveError::Trace { path: path.clone(), source })?;
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
    pub(super) fn release_held(&mut self) -> Result<bool, EvolveError> {
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
}
