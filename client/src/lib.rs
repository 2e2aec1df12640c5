//! Compiling many translation units fast: the [`Compiler`] trait and its implementations.
//!
//! - [`Farm`]: resident `gpfarmd` daemons, one per core, fed through shared memory (the paper's
//!   "parallelization with daemon processes").
//! - [`InProcess`]: NVRTC in the calling process, one unit after another (the paper's in-process
//!   compilation).
//! - [`Threads`]: NVRTC from k threads of the calling process.
//! - [`Nvcc`]: the command-line compiler on a temporary file per unit (the paper's baseline).
//!
//! All four take the same units and options and return one [`UnitResult`] per unit, in input
//! order. [`CompilerSpec`] names one (`farm:16`, `threads:8`, ...) and builds it. This crate knows
//! nothing of genetic programming.
//!
//! Every child process it starts (the daemons, and the GPU evaluation worker of [`GpuWorker`])
//! goes through one [`supervisor`]: parent-death signal, bounded liveness checks, kill, restart.

pub mod cache;
mod compiler;
pub mod cubin;
mod farm;
pub mod gpu_worker;
mod inprocess;
mod nvcc;
pub mod partition;
mod queue;
mod spec;
pub mod supervisor;

pub use cache::{CacheKey, DiskCache, KeyMap};
pub use compiler::{Batch, BatchStats, Compiler, CompilerError, WorkerStats};
pub use farm::{
    DAEMON_RSS, DEFAULT_UNIT_DEADLINE, DaemonStatus, Farm, FarmConfig, FarmError, FarmKind, FarmSizeError,
    FarmStatus, Healed, RETRY_FIRST, RETRY_MOST, RSS_FACTOR, Room, SEGMENT_BYTES, StopError,
    daemon_executable, farm_status, farms_to_stop, stop_farm,
};
pub use gpfarm_protocol::worker::{CompiledUnit, GpuGeneration, ProblemRef};
pub use gpfarm_protocol::{
    CompileMode, CompileOptions, DaemonInfo, Failure, FailureKind, SmArch, Unit, UnitOutcome, UnitResult,
    UnitTimings,
};
pub use gpu_worker::{
    DEFAULT_GPU_DEADLINE, GpuWorker, IDLE_WORKER_TIMEOUT, VariantOutcome, WorkerError, gpu_worker_executable,
    init_request,
};
pub use inprocess::{InProcess, InProcessError, Threads};
pub use nvcc::{Nvcc, NvccError};
pub use queue::{Finished, Job, Submitter, Worklist, job_queue, shared_job_queue};
pub use spec::{BuildConfig, BuildError, CompilerSpec, SpecError, Workers};
