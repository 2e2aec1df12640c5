//! The one interface every compiler offers, and the statistics of one call.

use std::path::PathBuf;
use std::time::Instant;

use gpfarm_protocol::{CompileOptions, DaemonId, Unit, UnitResult};
use serde::Serialize;
use thiserror::Error;

use crate::queue::{Finished, Queued, Worklist};
use crate::supervisor::{LocateError, SpawnError};

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

/// A compiler could not do its job at all.
#[derive(Debug, Error)]
pub enum CompilerError {
    /// No usable NVRTC or nvcc.
    #[error(transparent)]
    Toolchain(#[from] gpfarm_toolchain::ToolchainError),
    /// NVRTC could not be loaded.
    #[error(transparent)]
    Load(#[from] gpfarm_toolchain::nvrtc::LoadError),
    /// A daemon could not be started or reached, or broke the protocol.
    #[error("daemon {id}: {message}")]
    Daemon {
        /// Which daemon.
        id: DaemonId,
        /// What went wrong and what to do.
        message: String,
    },
    /// A daemon was killed from outside (a signal it did not raise itself) before it was ready;
    /// starting it again may well work, and start-up does, a bounded number of times.
    #[error("daemon {id}: {message}")]
    Killed {
        /// Which daemon.
        id: DaemonId,
        /// How it ended.
        message: String,
    },
    /// Another process holds the daemon (one client at a time).
    #[error(
        "daemon {id}: in use by process {holder}; one client at a time (start another farm with `gpfarm daemons start`)"
    )]
    InUse {
        /// Which daemon.
        id: DaemonId,
        /// The process holding it.
        holder: u32,
    },
    /// The OS refused to start a daemon's process.
    #[error("daemon {id}")]
    Spawn {
        /// Which daemon.
        id: DaemonId,
        /// The executable and the OS's reason.
        #[source]
        source: SpawnError,
    },
    /// A farm of that many daemons cannot run on this machine.
    #[error(transparent)]
    FarmSize(#[from] crate::farm::FarmSizeError),
    /// A helper executable (`gpfarmd`) was not found.
    #[error(transparent)]
    Locate(#[from] LocateError),
    /// Shared memory failed.
    #[error(transparent)]
    Segment(#[from] gpfarm_protocol::SegmentError),
    /// A file or directory the compiler needs could not be written or made.
    #[error("cannot write {}", path.display())]
    File {
        /// The file or directory.
        path: PathBuf,
        /// The OS's reason.
        #[source]
        source: std::io::Error,
    },
    /// The toolchain lacks nvcc, which the `nvcc` baseline needs.
    #[error("the toolchain in {} has no nvcc; {}", lib_dir.display(), gpfarm_toolchain::INSTALL_HINT)]
    NoNvcc {
        /// The toolchain's library directory.
        lib_dir: PathBuf,
    },
    /// NVRTC loaded but its warm-up compile failed: it cannot compile here.
    #[error(transparent)]
    Warmup(gpfarm_toolchain::StartError),
    /// The in-process compiler's worker thread could not be started.
    #[error("cannot start the compile thread")]
    Thread(#[source] std::io::Error),
    /// The in-process compiler's worker thread panicked (inside NVRTC).
    #[error("the compile thread panicked")]
    ThreadPanicked,
}
