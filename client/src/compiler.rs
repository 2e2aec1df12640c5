//! The one interface every compiler offers, the statistics of one call, and the error a call
//! through that interface fails with.
//!
//! Must never depend on an implementation (the farm, the in-process compilers, nvcc) or on what
//! they are built from: each of them depends on this file, never the other way round.

use std::error::Error;
use std::fmt;
use std::time::Instant;

use gpfarm_protocol::{CompileOptions, Unit, UnitResult};
use serde::Serialize;

use crate::queue::{Finished, Queued, Worklist};

/// Something that turns CUDA C units into CUBIN.
pub trait Compiler {
    /// Short name for tables and logs, e.g. `farm:16`, `threads:8`, `inprocess`, `nvcc`.
    fn name(&self) -> String;

    /// The exact compiler build that produces the code (see [`crate::cache::toolchain_identity`]),
    /// for keying what it compiled.
    fn toolchain(&self) -> String;

    /// How many units it can compile at once (daemons, threads).
    fn workers(&self) -> usize {
        1
    }

    /// Compiles every unit; returns one result per unit, in input order. A unit that fails to
    /// compile is a failed [`UnitResult`], not an error: `Err` means the compiler itself failed.
    fn compile(&mut self, units: &[Unit], options: &CompileOptions) -> Result<Batch, CompilerError>;

    /// Compiles the jobs of `work` as they come, each as soon as a worker is free, and sends
    /// each job's results back as soon as they are in; returns when the submitter has closed the
    /// queue and every job is answered (or the submitter is gone). The default takes one job at
    /// a time through [`Compiler::compile`]; the farm gives each job to the next free daemon.
    fn serve(&mut self, options: &CompileOptions, work: Worklist) -> Result<BatchStats, CompilerError> {
        let start = Instant::now();
        let mut stats = BatchStats::default();
        work.set_free(1);
        for Queued { job, queued } in work.jobs.iter() {
            if work.abandoned() {
                break;
            }
            work.set_free(0);
            let started = Instant::now();
            let batch = self.compile(&job.units, options)?;
            let busy_us = batch.stats.workers.iter().map(|w| w.busy_us).sum();
            stats.absorb(&batch.stats);
            let finished = Finished {
                id: job.id,
                results: batch.results,
                queued,
                started,
                ended: Instant::now(),
                busy_us,
            };
            if !work.finish(finished) {
                break;
            }
            work.set_free(usize::from(work.jobs.is_empty()));
        }
        work.set_free(0);
        stats.wall_us = start.elapsed().as_micros() as u64;
        Ok(stats)
    }
}

/// The results of one call.
#[derive(Debug)]
pub struct Batch {
    /// One per unit, in input order.
    pub results: Vec<UnitResult>,
    /// Where the time went.
    pub stats: BatchStats,
}

/// What one worker (daemon or thread) did during a call.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerStats {
    /// Units it compiled.
    pub units: usize,
    /// Time inside the compiler, microseconds.
    pub busy_us: u64,
    /// Request bytes written to its segment (farm only).
    pub request_bytes: u64,
    /// Response bytes read from its segment (farm only).
    pub response_bytes: u64,
}

/// Where the time of one call went, in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BatchStats {
    /// The whole call, as the caller saw it.
    pub wall_us: u64,
    /// Partitioning and writing requests into shared memory (farm only).
    pub write_us: u64,
    /// From signalling the first worker to the last one finishing.
    pub wait_us: u64,
    /// Reading and decoding responses (farm only).
    pub read_us: u64,
    /// Per worker.
    pub workers: Vec<WorkerStats>,
    /// Daemons that died or hung during the call.
    pub lost_daemons: usize,
    /// Daemons started again during the call.
    pub restarts: usize,
    /// Units sent again because their daemon was lost while they waited in its part.
    pub retried_units: usize,
    /// When, from the start of the call, the first lost daemon was noticed.
    pub first_loss_detected_us: Option<u64>,
}

impl BatchStats {
    /// Adds another call's figures to these (worker by worker).
    pub fn absorb(&mut self, other: &BatchStats) {
        self.write_us += other.write_us;
        self.wait_us += other.wait_us;
        self.read_us += other.read_us;
        if self.workers.len() < other.workers.len() {
            self.workers.resize(other.workers.len(), WorkerStats::default());
        }
        for (w, o) in self.workers.iter_mut().zip(&other.workers) {
            w.units += o.units;
            w.busy_us += o.busy_us;
            w.request_bytes += o.request_bytes;
            w.response_bytes += o.response_bytes;
        }
        self.lost_daemons += other.lost_daemons;
        self.restarts += other.restarts;
        self.retried_units += other.retried_units;
        if self.first_loss_detected_us.is_none() {
            self.first_loss_detected_us = other.first_loss_detected_us;
        }
    }

    /// The longest a worker was busy: the part of the wall time spent compiling.
    pub fn critical_busy_us(&self) -> u64 {
        self.workers.iter().map(|w| w.busy_us).max().unwrap_or(0)
    }
}

/// A compiler could not do its job at all (a unit that fails to compile is a failed
/// [`UnitResult`], not this).
///
/// Each implementation says what went wrong in an error type of its own, in its own module, and
/// converts it into this one with `From`; through the trait, that error travels boxed, so that
/// `dyn Compiler` serves every implementation alike. Its message and its chain of sources are the
/// implementation's error's, unchanged. A caller that knows which compiler it holds gets the
/// typed error back with [`CompilerError::downcast_ref`]. This type must never name an
/// implementation or its errors: the trait does not depend on what implements it.
pub struct CompilerError(Box<dyn Error + Send + Sync + 'static>);

impl CompilerError {
    /// Wraps an implementation's error.
    pub fn new(error: impl Error + Send + Sync + 'static) -> CompilerError {
        CompilerError(Box::new(error))
    }

    /// The implementation's error, if it is an `E`.
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }

    /// The implementation's error.
    pub fn into_inner(self) -> Box<dyn Error + Send + Sync + 'static> {
        self.0
    }
}

impl fmt::Debug for CompilerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for CompilerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Error for CompilerError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot do it")]
    struct Own(#[source] std::io::Error);

    #[test]
    fn an_implementations_error_keeps_its_message_sources_and_type() {
        let e = CompilerError::new(Own(std::io::Error::other("the reason")));
        assert_eq!(e.to_string(), "cannot do it");
        assert_eq!(e.source().map(|s| s.to_string()).as_deref(), Some("the reason"));
        assert_eq!(format!("{e:?}"), format!("{:?}", Own(std::io::Error::other("the reason"))));
        assert!(e.downcast_ref::<Own>().is_some());
        assert!(e.downcast_ref::<std::io::Error>().is_none());
        assert!(e.into_inner().downcast::<Own>().is_ok());
    }
}
