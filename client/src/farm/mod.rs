//! A farm of resident `gpfarmd` daemons, fed through shared memory.
//!
//! The farm spawns its daemons (or attaches to ones started by `gpfarm daemons start`), waits for
//! each to become available and shake hands, and then serves a queue of jobs: each job goes to
//! the next free daemon as one request, written into its segment and signalled, and its results
//! go back as soon as they are in. One thread per daemon waits for its answer; one coordinating
//! thread hands out work, and restarts a daemon that was lost. Waits are bounded and check that
//! the daemon is still alive in between, so a dead or hung daemon costs its units a resend (or,
//! for the unit it crashed on, a second try and then a failure), never the call. A batch
//! ([`Compiler::compile`]) is one job per daemon: the paper's balanced contiguous parts. Dropping
//! a farm shuts down the daemons it spawned and releases the ones it attached to.

//!
//! One job per file: [`lifecycle`] starts, restarts and shuts down daemons (through
//! [`crate::supervisor`]); [`handshake`] waits for a new daemon and checks what it runs;
//! [`daemon`] is one daemon's request/answer round with bounded, liveness-checked waits;
//! [`dispatch`] is the thread that feeds one daemon; [`schedule`] hands out jobs and decides what
//! a lost daemon costs each unit; [`ops`] is what `gpfarm daemons status|stop` needs; [`size`]
//! says how many daemons this machine can hold; [`error`] is what starting or meeting daemons
//! fails with. This file holds the farm itself and its [`Compiler`] face.
//!
//! Must never leave a daemon it spawned running, or its segment behind, once it is dropped.

mod daemon;
mod dispatch;
mod error;
mod handshake;
mod lifecycle;
mod ops;
mod schedule;
mod size;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpfarm_protocol::{CompileOptions, DaemonInfo, FailureKind, FarmName, SmArch, Unit, UnitResult};

use crate::compiler::{Batch, BatchStats, Compiler, CompilerError};
use crate::partition::balanced;
use crate::queue::{Job, Worklist, job_queue};

use daemon::Daemon;
use dispatch::too_large;

pub use error::FarmError;
pub use lifecycle::{Healed, RETRY_FIRST, RETRY_MOST, RSS_FACTOR, daemon_executable};
pub use ops::{DaemonStatus, FarmKind, FarmStatus, StopError, farm_status, farms_to_stop, stop_farm};
pub use size::{DAEMON_RSS, FarmSizeError, Room, SEGMENT_BYTES};

/// How a farm is started.
#[derive(Debug, Clone)]
pub struct FarmConfig {
    /// Number of daemons (one per core is the usual choice).
    pub daemons: usize,
    /// The `gpfarmd` executable (default: [`daemon_executable`]).
    pub executable: Option<PathBuf>,
    /// CUDA toolkit or wheel directory for the daemons' NVRTC (default: they discover it).
    pub cuda: Option<PathBuf>,
    /// Architecture of each daemon's warm-up compile.
    pub warmup_arch: SmArch,
    /// Let daemons hold a CUDA context where a GPU is present: needed for ptx-jit mode only; for
    /// CUBIN it would only cost each daemon start-up time and host and device memory.
    pub gpu_context: bool,
    /// How long a daemon may take to load and warm NVRTC.
    pub start_timeout: Duration,
    /// How long a daemon may work on one unit before it is declared hung, killed and replaced.
    pub request_timeout: Duration,
    /// Detach spawned daemons from this process (they outlive it; for `gpfarm daemons start`).
    /// Implies `resident`.
    pub detached: bool,
    /// A farm for any client (`gpfarm daemons start`), not this process's own: `gpfarm daemons
    /// status|stop` list and stop it, and `--attach` without a name finds it.
    pub resident: bool,
    /// Let daemons keep NVRTC's freed memory ([`gpfarm_toolchain::tune_allocator`]).
    pub tuned_allocator: bool,
    /// Extra environment variables for the daemons.
    pub env: Vec<(String, String)>,
    /// Resident memory (bytes) a daemon may keep after a unit before it is replaced by a fresh
    /// one; `None`: [`RSS_FACTOR`] times its warm size. A hostile or huge unit can leave NVRTC's
    /// allocator holding gigabytes for good; this gives them back.
    pub max_rss: Option<u64>,
    /// Set by the farm's owner when it is told to stop (a keeper's SIGTERM): a daemon killed
    /// while it starts in place of a lost one is then given up, not started again.
    pub stop: Option<Arc<AtomicBool>>,
}

impl Default for FarmConfig {
    fn default() -> Self {
        FarmConfig {
            daemons: std::thread::available_parallelism().map_or(1, |n| n.get()),
            executable: None,
            cuda: None,
            warmup_arch: SmArch::SM_90,
            gpu_context: false,
            start_timeout: Duration::from_secs(120),
            request_timeout: DEFAULT_UNIT_DEADLINE,
            detached: false,
            resident: false,
            tuned_allocator: true,
            env: Vec::new(),
            max_rss: None,
            stop: None,
        }
    }
}

impl FarmConfig {
    /// Whether the farm's owner was told to stop ([`FarmConfig::stop`]).
    pub(crate) fn stopping(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst))
    }
}

/// A running farm of compile daemons.
pub struct Farm {
    name: FarmName,
    daemons: Vec<Daemon>,
    config: FarmConfig,
    owns_daemons: bool,
    /// For a keeper: the daemons whose replacement failed, when to try again and the wait after
    /// that ([`Farm::heal`]).
    backoff: std::collections::HashMap<gpfarm_protocol::DaemonId, (Instant, Duration)>,
}

impl Farm {
    /// The farm's name.
    pub fn name(&self) -> &FarmName {
        &self.name
    }

    /// Number of daemons.
    pub fn len(&self) -> usize {
        self.daemons.len()
    }

    /// Whether the farm has no daemons.
    pub fn is_empty(&self) -> bool {
        self.daemons.is_empty()
    }

    /// What each daemon said in its handshake.
    pub fn daemon_info(&self) -> Vec<DaemonInfo> {
        self.daemons.iter().map(|d| d.info.clone()).collect()
    }

    /// Process ids of the daemons.
    pub fn pids(&self) -> Vec<u32> {
        self.daemons.iter().map(|d| d.pid).collect()
    }

    /// Releases the client lock of every daemon (so other clients may attach) but keeps
    /// ownership: dropping the farm still shuts spawned daemons down. From then on the farm
    /// shares its daemons: each request waits its turn as an attached client's does.
    pub fn release(&mut self) {
        for d in &mut self.daemons {
            d.share();
        }
    }

    /// Lets spawned daemons run on after this farm is dropped (for `gpfarm daemons start
    /// --detach`).
    pub fn detach(mut self) {
        self.release();
        self.owns_daemons = false;
        for d in &mut self.daemons {
            if let Some(child) = d.child.take() {
                child.detach();
            }
        }
    }
}

/// How long a daemon may work on one unit by default. A GP unit compiles in milliseconds to
/// seconds; two minutes without progress is a hang.
pub const DEFAULT_UNIT_DEADLINE: Duration = Duration::from_secs(120);

impl Compiler for Farm {
    fn name(&self) -> String {
        format!("farm:{}", self.daemons.len())
    }

    fn workers(&self) -> usize {
        self.daemons.len()
    }

    fn toolchain(&self) -> String {
        // Every daemon runs the same NVRTC (checked at start).
        self.daemons.first().map_or_else(
            || "no daemon".into(),
            |d| {
                crate::cache::toolchain_identity(
                    &crate::cache::nvrtc_name(d.info.nvrtc_version),
                    Path::new(&d.info.nvrtc_path),
                )
            },
        )
    }

    /// Compiles in one balanced contiguous part per daemon (the paper's partition), each part
    /// one request; see `Farm::serve_queue` for what happens when a daemon is lost.
    fn compile(&mut self, units: &[Unit], options: &CompileOptions) -> Result<Batch, CompilerError> {
        let start = Instant::now();
        let mut results: Vec<Option<UnitResult>> = units.iter().map(too_large).collect();
        let sendable: Vec<usize> = (0..units.len()).filter(|&i| results[i].is_none()).collect();
        let (mut submitter, work) = job_queue();
        let parts = balanced(sendable.len(), self.daemons.len().max(1));
        for (k, range) in parts.iter().enumerate() {
            let picked = sendable[range.clone()].iter().map(|&i| units[i].clone()).collect();
            submitter.submit(Job { id: k as u64, units: picked });
        }
        submitter.close();
        let mut stats = self.serve_queue(options, work);
        for finished in submitter.finished().try_iter() {
            let range = parts[finished.id as usize].clone();
            for (&i, r) in sendable[range].iter().zip(finished.results) {
                results[i] = Some(r);
            }
        }
        stats.wall_us = start.elapsed().as_micros() as u64;
        let results = results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| UnitResult::failed(FailureKind::Lost, "no daemon left to compile it"))
            })
            .collect();
        Ok(Batch { results, stats })
    }

    fn serve(&mut self, options: &CompileOptions, work: Worklist) -> Result<BatchStats, CompilerError> {
        Ok(self.serve_queue(options, work))
    }
}
