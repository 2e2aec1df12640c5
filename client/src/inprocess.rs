//! NVRTC in the calling process: one unit after another ([`InProcess`]), or from k threads
//! ([`Threads`]). These are the baselines the farm is measured against.
//!
//! Both compile through the toolchain's one compile layer ([`WarmNvrtc`]), exactly as a daemon
//! does; this file only schedules units onto threads and must never map NVRTC's outcome itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpfarm_protocol::{CompileMode, CompileOptions, FailureKind, Unit, UnitResult};
use gpfarm_toolchain::{Allocator, StartError, Toolchain, WarmNvrtc};

use crate::compiler::{Batch, BatchStats, Compiler, CompilerError, WorkerStats};
use crate::partition::balanced;

fn us(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

/// Tunes the allocator, loads NVRTC and pays its first-compile cost now, as a warm daemon has,
/// so no measured call includes it.
fn start(toolchain: &Toolchain, options: &CompileOptions) -> Result<Arc<WarmNvrtc>, CompilerError> {
    match WarmNvrtc::start(toolchain, options.arch, Allocator::Tuned) {
        Ok(nvrtc) => Ok(Arc::new(nvrtc)),
        Err(StartError::Load(e)) => Err(CompilerError::Load(e)),
        Err(e @ StartError::Warmup { .. }) => Err(CompilerError::Warmup(e)),
    }
}

/// Compiles one unit in this process: CUBIN only, for a ptx-jit unit needs a CUDA context's
/// linker, which only a daemon holds.
fn compile_one(nvrtc: &WarmNvrtc, unit: &Unit, options: &CompileOptions) -> UnitResult {
    if options.mode == CompileMode::PtxJit {
        return UnitResult::failed(
            FailureKind::Jit,
            "ptx-jit mode is served by the farm's daemons only; use --compiler farm",
        );
    }
    nvrtc.compile_unit(unit, options, None)
}

fn identity(nvrtc: &WarmNvrtc) -> String {
    let nvrtc = nvrtc.nvrtc();
    crate::cache::toolchain_identity(&crate::cache::nvrtc_name(nvrtc.version()), nvrtc.path())
}

/// NVRTC in the calling process, one unit after another.
///
/// Compiles run on one worker thread of this process, not on the caller's thread: on the GPU
/// host, NVRTC called from the main thread of a process that had already done other work ran 8x
/// slower than from a fresh thread of the same process (139.9 s against 17.9 s for the same 1104
/// units), an effect of the main thread's allocator heap, not of NVRTC. A worker thread gets an
/// allocator arena of its own, as a daemon does.
pub struct InProcess {
    nvrtc: Arc<WarmNvrtc>,
}

impl InProcess {
    /// Tunes the allocator, then loads and warms NVRTC from `toolchain` for `options.arch`.
    pub fn new(toolchain: &Toolchain, options: &CompileOptions) -> Result<Self, CompilerError> {
        Ok(InProcess { nvrtc: start(toolchain, options)? })
    }
}

impl Compiler for InProcess {
    fn name(&self) -> String {
        "inprocess".into()
    }

    fn toolchain(&self) -> String {
        identity(&self.nvrtc)
    }

    fn compile(&mut self, units: &[Unit], options: &CompileOptions) -> Result<Batch, CompilerError> {
        let start = Instant::now();
        let nvrtc = &self.nvrtc;
        let results: Vec<UnitResult> = std::thread::scope(|scope| {
            compile_thread()
                .spawn_scoped(scope, || {
                    units.iter().map(|u| compile_one(nvrtc, u, options)).collect::<Vec<_>>()
                })
                .map_err(CompilerError::Thread)?
                .join()
                .map_err(|_| CompilerError::ThreadPanicked)
        })?;
        let wall_us = us(start.elapsed());
        let worker = WorkerStats { units: units.len(), busy_us: wall_us, ..Default::default() };
        Ok(Batch {
            results,
            stats: BatchStats { wall_us, wait_us: wall_us, workers: vec![worker], ..Default::default() },
        })
    }
}

/// NVRTC from `k` threads of the calling process, each compiling a balanced contiguous part.
pub struct Threads {
    nvrtc: Arc<WarmNvrtc>,
    threads: usize,
}

impl Threads {
    /// Tunes the allocator, then loads and warms NVRTC; calls will use `threads` threads.
    pub fn new(
        toolchain: &Toolchain,
        options: &CompileOptions,
        threads: usize,
    ) -> Result<Self, CompilerError> {
        Ok(Threads { nvrtc: start(toolchain, options)?, threads: threads.max(1) })
    }
}

impl Compiler for Threads {
    fn name(&self) -> String {
        format!("threads:{}", self.threads)
    }

    fn workers(&self) -> usize {
        self.threads
    }

    fn toolchain(&self) -> String {
        identity(&self.nvrtc)
    }

    fn compile(&mut self, units: &[Unit], options: &CompileOptions) -> Result<Batch, CompilerError> {
        let start = Instant::now();
        let parts = balanced(units.len(), self.threads);
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut results: Vec<Option<UnitResult>> = vec![None; units.len()];
        let mut workers = vec![WorkerStats::default(); parts.len()];
        std::thread::scope(|scope| {
            for (k, range) in parts.iter().cloned().enumerate() {
                // Kept for answering with failures if the thread cannot start.
                let (part, failed_tx) = (range.clone(), tx.clone());
                let tx = tx.clone();
                let nvrtc = &self.nvrtc;
                let spawned = compile_thread().spawn_scoped(scope, move || {
                    let t = Instant::now();
                    let got: Vec<UnitResult> =
                        units[range.clone()].iter().map(|u| compile_one(nvrtc, u, options)).collect();
                    let _ = tx.send((k, range, got, us(t.elapsed())));
                });
                if let Err(e) = spawned {
                    let why = format!("cannot start compile thread {k}: {e}");
                    let failed = vec![UnitResult::failed(FailureKind::Internal, why); part.len()];
                    let _ = failed_tx.send((k, part, failed, 0));
                }
            }
            drop(tx);
            for (k, range, got, busy) in rx {
                workers[k] = WorkerStats { units: got.len(), busy_us: busy, ..Default::default() };
                for (i, r) in range.zip(got) {
                    results[i] = Some(r);
                }
            }
        });
        let wall_us = us(start.elapsed());
        let results = results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| UnitResult::failed(FailureKind::Lost, "worker thread panicked")))
            .collect();
        Ok(Batch { results, stats: BatchStats { wall_us, wait_us: wall_us, workers, ..Default::default() } })
    }
}

/// A thread with room for NVRTC's recursion: a 200,000-deep parenthesised expression overflows
/// 256 MiB of thread stack (a daemon compiles it in 0.4 s). The stack is address space; pages
/// are committed only when used.
fn compile_thread() -> std::thread::Builder {
    std::thread::Builder::new().stack_size(COMPILE_STACK)
}

/// Stack of a compile thread.
const COMPILE_STACK: usize = 1 << 30;
