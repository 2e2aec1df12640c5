//! Evaluating compiled code, or phenotypes on the CPU, and handing each fitness to the pipeline.
//! A kernel that faults on the GPU costs its own individual the worst fitness; a fault that
//! cannot be pinned on one individual moves the rest of the run to the CPU evaluator, and the
//! records say so. Must never give an individual a fitness computed from another's code.

use std::time::Instant;

use gpfarm_client::{CompiledUnit, GpuWorker, WorkerError};
use gpfarm_gp::Fitness;
use gpfarm_gp::program::{evaluate, evaluate_phenotype};
use gpfarm_kernels::interpreter::PackedPopulation;
use rayon::prelude::*;

use super::{Driver, Member, Ready};
use crate::account::Chain;
use crate::error::EvolveError;
use crate::record::EvaluatorKind;

/// Members sent to the interpreter ([`Driver::send_uncompiled`]) and those the CPU evaluates.
pub(super) struct Uncompiled {
    sent: Option<Sent>,
    rest: Vec<Member>,
}

impl Uncompiled {
    /// Whether it holds no member.
    pub(super) fn is_empty(&self) -> bool {
        self.sent.is_none() && self.rest.is_empty()
    }
}

/// Members whose bytecode went to the GPU worker: the words sent, when packing began and how long
/// it took, and whether the send failed.
struct Sent {
    coded: Vec<Member>,
    words: usize,
    t: Instant,
    packed: std::time::Duration,
    sent: Result<(), WorkerError>,
}

/// Where fitness is computed.
pub(crate) enum Evaluator {
    /// The CPU reference evaluator.
    Cpu,
    /// A GPU worker process.
    Gpu(Box<GpuWorker>),
    /// A GPU worker process with the problem's interpreter.
    Interpreter(Box<GpuWorker>),
}

impl Evaluator {
    /// Which kind it is, for the records.
    pub(crate) fn kind(&self) -> EvaluatorKind {
        match self {
            Evaluator::Cpu => EvaluatorKind::Cpu,
            Evaluator::Gpu(_) | Evaluator::Interpreter(_) => EvaluatorKind::Gpu,
        }
    }

    /// The GPU worker, when there is one.
    pub(crate) fn worker(&mut self) -> Option<&mut GpuWorker> {
        match self {
            Evaluator::Cpu => None,
            Evaluator::Gpu(worker) | Evaluator::Interpreter(worker) => Some(worker),
        }
    }

    /// GPU workers replaced so far.
    pub(crate) fn restarts(&self) -> usize {
        match self {
            Evaluator::Cpu => 0,
            Evaluator::Gpu(worker) | Evaluator::Interpreter(worker) => worker.restarts,
        }
    }
}

impl Driver<'_> {
    /// Evaluates compiled code and hands the fitness values to the pipeline.
    pub(super) fn evaluate(&mut self, ready: Vec<Ready>) -> Result<(), EvolveError> {
        let t = Instant::now();
        let n: usize = ready.iter().map(|r| r.members.len()).sum();
        let gpu = match &mut self.evaluator {
            Evaluator::Cpu | Evaluator::Interpreter(_) => None,
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
                // Free parameters: each individual's values, in rows as long as the longest.
                let stride = ready.iter().flat_map(|r| &r.members).map(|m| m.params.len()).max().unwrap_or(0);
                let mut values = vec![0.0f32; n * stride];
                for (i, m) in ready.iter().flat_map(|r| &r.members).enumerate() {
                    values[i * stride..i * stride + m.params.len()].copy_from_slice(&m.params);
                }
                Some(worker.evaluate_with_values(&units, n, &values, stride))
            }
        };
        let members: Vec<(&Member, &Ready)> =
            ready.iter().flat_map(|r| r.members.iter().map(move |m| (m, r))).collect();
        let worst = Fitness::worst(self.problem.direction());
        let mut timed_out = vec![false; n];
        let (values, faulted, split): (Vec<Fitness>, Vec<bool>, Option<_>) = match gpu {
            None => (self.cpu_fitness(members.iter().map(|(m, _)| *m)), vec![false; n], None),
            Some(Ok(out)) => {
                for &i in &out.timeouts {
                    timed_out[i] = true;
                }
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
                tracing::warn!(
                    "the GPU faulted and the fault could not be pinned on one individual ({why}); \
                     falling back to the CPU evaluator for the rest of the run"
                );
                self.evaluator = Evaluator::Cpu;
                self.fell_back = Some(why);
                (self.cpu_fitness(members.iter().map(|(m, _)| *m)), vec![false; n], None)
            }
            Some(Err(e)) => return Err(e.into()),
        };
        let took = t.elapsed();
        self.totals.eval_s += took.as_secs_f64();
        let evaluated = Instant::now();
        for ((((m, r), f), faulted), timed_out) in members.iter().zip(values).zip(faulted).zip(timed_out) {
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
            if timed_out {
                a.timeouts += 1;
            }
            let chain =
                Chain { born: m.born, queued: r.queued, started: r.started, ended: r.ended, evaluated };
            self.resolve(m, f, !faulted, chain)?;
        }
        Ok(())
    }

    /// The CPU evaluator's fitness of `members`, with their values written in, on the run's
    /// threads: a member's tree where it has one and no values apart (it is its phenotype's),
    /// else its phenotype parsed again with the values written in.
    fn cpu_fitness<'m>(&mut self, members: impl Iterator<Item = &'m Member>) -> Vec<Fitness> {
        let members: Vec<&Member> = members.collect();
        let problem = self.problem;
        let one = |m: &&Member| match &m.program {
            Some(program) if m.params.is_empty() => evaluate(problem, program).fitness,
            _ => evaluate_phenotype(problem, &m.instantiated()).fitness,
        };
        match self.pool() {
            Some(pool) => pool.install(|| members.par_iter().map(one).collect()),
            None => members.iter().map(one).collect(),
        }
    }

    /// Evaluates members that were not compiled: by the interpreter on the GPU when the run has
    /// it (members without bytecode, and all of them after a fault, on the CPU), else on the CPU.
    pub(super) fn evaluate_uncompiled(&mut self, members: Vec<Member>) -> Result<(), EvolveError> {
        let sent = self.send_uncompiled(members)?;
        self.finish_uncompiled(sent)
    }

    /// Sends the members with bytecode to the interpreter on the GPU, where the run has it, and
    /// returns without waiting, for [`Driver::finish_uncompiled`] to take the answer: what runs
    /// on the CPU meanwhile (admitting more) overlaps the GPU's evaluation. The sends'
    /// answers must be finished in the order sent.
    pub(super) fn send_uncompiled(&mut self, members: Vec<Member>) -> Result<Uncompiled, EvolveError> {
        let Evaluator::Interpreter(worker) = &mut self.evaluator else {
            return Ok(Uncompiled { sent: None, rest: members });
        };
        let (coded, rest): (Vec<Member>, Vec<Member>) = members.into_iter().partition(|m| m.code.is_some());
        if coded.is_empty() {
            return Ok(Uncompiled { sent: None, rest });
        }
        let t = Instant::now();
        let wire = PackedPopulation::new(coded.iter().filter_map(|m| m.code.as_deref()))
            .into_wire(self.problem.max_steps());
        let packed = t.elapsed();
        let sent = worker.send_interpret(&wire);
        Ok(Uncompiled { sent: Some(Sent { coded, words: wire.words.len(), t, packed, sent }), rest })
    }

    /// Takes the answer to what [`Driver::send_uncompiled`] sent and hands the fitness values to
    /// the pipeline; evaluates the rest on the CPU. Where the send failed, or an earlier answer
    /// faulted (which replaced the worker, losing this answer, and moved the run to the CPU), it
    /// is evaluated as a fault is.
    pub(super) fn finish_uncompiled(&mut self, sent: Uncompiled) -> Result<(), EvolveError> {
        let Uncompiled { sent, rest } = sent;
        if let Some(Sent { coded, words, t, packed, sent }) = sent {
            let answer = match (sent, &mut self.evaluator) {
                (Ok(()), Evaluator::Interpreter(worker)) => worker.interpreted(),
                (Ok(()), _) => Err(WorkerError::Fault(
                    self.fell_back.clone().unwrap_or_else(|| "the GPU worker was replaced".into()),
                )),
                (Err(e), _) => Err(e),
            };
            if gpfarm_kernels::gpu::fit_profiling() {
                eprintln!(
                    "gpfarm eval profile: {} programs of {words} words packed in {:.3} ms, interpreted in {:.3} ms",
                    coded.len(),
                    packed.as_secs_f64() * 1e3,
                    (t.elapsed() - packed).as_secs_f64() * 1e3
                );
            }
            self.take_interpreted(coded, answer, t)?;
        }
        if rest.is_empty() { Ok(()) } else { self.evaluate_on_cpu(rest) }
    }

    /// Hands the interpreter's `answer` for `coded` (sent at `t`) to the pipeline: the fitness
    /// values, or, after a fault, the CPU's for the rest of the run.
    fn take_interpreted(
        &mut self,
        coded: Vec<Member>,
        answer: Result<gpfarm_client::GpuGeneration, WorkerError>,
        t: Instant,
    ) -> Result<(), EvolveError> {
        match answer {
            Ok(out) => {
                let took = t.elapsed();
                self.totals.eval_s += took.as_secs_f64();
                let now = Instant::now();
                let n = coded.len() as u32;
                let worst = Fitness::worst(self.problem.direction());
                for (m, v) in coded.iter().zip(out.fitness) {
                    let f = match v {
                        Some(v) if v.is_finite() => Fitness::new(v, self.problem.direction()),
                        _ => worst,
                    };
                    let a = self.account(m.generation);
                    a.eval += took / n;
                    a.launch += out.launch / n;
                    a.readback += out.readback / n;
                    self.resolve(m, f, true, Chain::without_compile(m.born, now))?;
                }
                self.discard(coded);
            }
            Err(WorkerError::Fault(why)) => {
                if self.fell_back.is_none() {
                    tracing::warn!(
                        "the GPU faulted in the interpreter ({why}); falling back to the CPU evaluator for \
                         the rest of the run"
                    );
                    self.fell_back = Some(why);
                }
                self.evaluator = Evaluator::Cpu;
                self.evaluate_on_cpu(coded)?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    pub(super) fn evaluate_on_cpu(&mut self, members: Vec<Member>) -> Result<(), EvolveError> {
        let t = Instant::now();
        let values = self.cpu_fitness(members.iter());
        let took = t.elapsed();
        self.totals.eval_s += took.as_secs_f64();
        let now = Instant::now();
        for (m, f) in members.iter().zip(values) {
            self.account(m.generation).eval += took / members.len() as u32;
            self.resolve(m, f, true, Chain::without_compile(m.born, now))?;
        }
        self.discard(members);
        Ok(())
    }
}
