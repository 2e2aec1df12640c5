//! NVRTC in the calling process: one unit after another ([`InProcess`]), or from k threads
//! ([`Threads`]). These are the baselines the farm is measured against.
//!
//! Both compile through the toolchain's one compile layer ([`WarmNvrtc`]), exactly as a daemon
//! does; this file only schedules units onto threads and must never map NVRTC's outcome itself.
//!
//! NVRTC 13 crashes (SIGSEGV) on about 1 in 900 valid random Search programs, and here that kills
//! the calling process. It must never die silently: each compile thread notes which unit it is
//! compiling, and a crash handler ([`crash`]) prints that note as a one-line error, naming the
//! unit and its individuals and pointing to the farm, before the process dies of the signal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpfarm_protocol::{CompileMode, CompileOptions, FailureKind, Unit, UnitResult};
use gpfarm_toolchain::nvrtc::LoadError;
use gpfarm_toolchain::{Allocator, StartError, Toolchain, WarmNvrtc};
use thiserror::Error;

use crate::compiler::{Batch, BatchStats, Compiler, CompilerError, WorkerStats};
use crate::partition::balanced;

/// What the in-process compilers ([`InProcess`], [`Threads`]) fail with.
#[derive(Debug, Error)]
pub enum InProcessError {
    /// NVRTC could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// NVRTC loaded but its warm-up compile failed: it cannot compile here.
    #[error(transparent)]
    Warmup(StartError),
    /// The compile thread could not be started.
    #[error("cannot start the compile thread")]
    Thread(#[source] std::io::Error),
    /// The compile thread panicked (inside NVRTC).
    #[error("the compile thread panicked")]
    ThreadPanicked,
}

impl From<InProcessError> for CompilerError {
    fn from(e: InProcessError) -> CompilerError {
        CompilerError::new(e)
    }
}

fn us(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

/// Tunes the allocator, loads NVRTC and pays its first-compile cost now, as a warm daemon has,
/// so no measured call includes it; from now on a crash inside NVRTC is reported before the
/// process dies of it.
///
/// Warmed once per process for each toolchain directory and architecture: a later compiler of
/// the same (the next run of a process that runs again and again, a fit after a fit in Python)
/// takes the same warm NVRTC instead of paying the first compile again.
fn start(toolchain: &Toolchain, options: &CompileOptions) -> Result<Arc<WarmNvrtc>, InProcessError> {
    type Warm = std::collections::HashMap<(std::path::PathBuf, u32), Arc<WarmNvrtc>>;
    static WARM: std::sync::Mutex<Option<Warm>> = std::sync::Mutex::new(None);
    crash::install_handler();
    let key = (toolchain.lib_dir.clone(), options.arch.0);
    let mut warm = WARM.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(nvrtc) = warm.as_ref().and_then(|w| w.get(&key)) {
        return Ok(nvrtc.clone());
    }
    match WarmNvrtc::start(toolchain, options.arch, Allocator::Tuned) {
        Ok(nvrtc) => {
            let nvrtc = Arc::new(nvrtc);
            warm.get_or_insert_with(Warm::new).insert(key, nvrtc.clone());
            Ok(nvrtc)
        }
        Err(StartError::Load(e)) => Err(InProcessError::Load(e)),
        Err(e @ StartError::Warmup { .. }) => Err(InProcessError::Warmup(e)),
    }
}

/// Compiles one unit in this process: CUBIN only, for a ptx-jit unit needs a CUDA context's
/// linker, which only a daemon holds. A PTX unit goes to nvJitLink, as in a daemon.
fn compile_one(nvrtc: &WarmNvrtc, unit: &Unit, options: &CompileOptions) -> UnitResult {
    if options.mode == CompileMode::PtxJit {
        return UnitResult::failed(
            FailureKind::Jit,
            "ptx-jit mode is served by the farm's daemons only; use --compiler farm",
        );
    }
    let _noted = crash::Noting::new(&crash::describe(unit));
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
    pub fn new(toolchain: &Toolchain, options: &CompileOptions) -> Result<Self, InProcessError> {
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
                    let _stack = crash::AltStack::new();
                    units.iter().map(|u| compile_one(nvrtc, u, options)).collect::<Vec<_>>()
                })
                .map_err(InProcessError::Thread)?
                .join()
                .map_err(|_| InProcessError::ThreadPanicked)
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
    ) -> Result<Self, InProcessError> {
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
                    let _stack = crash::AltStack::new();
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

/// Reporting a crash inside NVRTC before the process dies of it.
///
/// A compile thread notes what it compiles ([`Noting`]) in a fixed buffer of its own; the handler
/// of SIGSEGV, SIGBUS, SIGABRT, SIGILL and SIGFPE runs on that thread (the signal is the
/// thread's own fault), on an alternate stack ([`AltStack`]), and only reads the buffer,
/// write(2)s one line to stderr, restores the default action and re-raises: no allocation, no
/// locks, nothing that is not async-signal-safe. A thread with no note (a crash outside NVRTC)
/// gets the action that was there before, unchanged.
pub(crate) mod crash {
    use std::cell::Cell;
    use std::sync::{Once, OnceLock};

    /// The most a note holds; a longer one is cut, keeping its end (what to do about it).
    const NOTE_CAP: usize = 1024;
    /// Room for the handler's own stack frame and the message it assembles there.
    const ALT_STACK: usize = 64 * 1024;
    /// The signals a crash inside NVRTC ends in, with their names.
    const SIGNALS: [(libc::c_int, &str); 5] = [
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGFPE, "SIGFPE"),
    ];
    /// What the handler prints before the signal's name and the note.
    const PREFIX: &[u8] = b"error: NVRTC crashed (";

    thread_local! {
        // Const-initialised and without a destructor: a plain TLS slot, read from the handler
        // with no lazy initialisation (which could allocate).
        static NOTE_LEN: Cell<usize> = const { Cell::new(0) };
        static NOTE: Cell<[u8; NOTE_CAP]> = const { Cell::new([0; NOTE_CAP]) };
    }

    /// The actions that were installed before ours, in [`SIGNALS`]' order.
    static PREVIOUS: OnceLock<[libc::sigaction; SIGNALS.len()]> = OnceLock::new();

    /// What the handler prints after the signal's name when `unit` crashes NVRTC: the unit, its
    /// individuals (kernels the engine names `g<generation>_i<individual>`), and what to do.
    pub(crate) fn describe(unit: &gpfarm_protocol::Unit) -> String {
        let kernels = kernel_names(&unit.source);
        let individuals: Option<Vec<(usize, usize)>> = kernels.iter().map(|k| individual_of(k)).collect();
        let what = match individuals {
            Some(ids) if !ids.is_empty() && ids.iter().all(|(g, _)| *g == ids[0].0) => {
                let list: Vec<String> = ids.iter().map(|(_, i)| i.to_string()).collect();
                let noun = if ids.len() == 1 { "individual" } else { "individuals" };
                format!("{noun} {} of generation {}", shortened(&list), ids[0].0)
            }
            _ if kernels.is_empty() => "no kernel found".to_owned(),
            _ => format!("kernels {}", shortened(&kernels)),
        };
        format!(
            ") compiling {} ({what}); the in-process compilers die with NVRTC, \
             the farm (--compiler farm) runs it in daemons and isolates such crashes\n",
            unit.name
        )
    }

    /// At most eight items, then how many more.
    fn shortened(items: &[String]) -> String {
        const SHOWN: usize = 8;
        let mut s = items.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
        if items.len() > SHOWN {
            s.push_str(&format!(" and {} more", items.len() - SHOWN));
        }
        s
    }

    /// Names of the kernels in `source`, in order: its `__global__` functions (CUDA C) or its
    /// `.entry` functions (PTX); in a CUDA C switch unit, the individuals' device functions the
    /// switch kernel calls (`static __device__ __forceinline__`).
    fn kernel_names(source: &[u8]) -> Vec<String> {
        let text = String::from_utf8_lossy(source);
        let names_after = |marker: &str| -> Vec<String> {
            let mut names = Vec::new();
            for part in text.split(marker).skip(1) {
                let head = part.split('(').next().unwrap_or("");
                if let Some(name) = head.split_whitespace().last() {
                    names.push(name.trim_start_matches('*').to_owned());
                }
            }
            names
        };
        let members = names_after("__device__ __forceinline__");
        if !members.is_empty() {
            return members;
        }
        names_after(if text.contains("__global__") { "__global__" } else { ".entry" })
    }

    /// `(generation, individual)` of a kernel named `g<generation>_i<individual>`.
    fn individual_of(kernel: &str) -> Option<(usize, usize)> {
        let (g, i) = kernel.strip_prefix('g')?.split_once("_i")?;
        Some((g.parse().ok()?, i.parse().ok()?))
    }

    /// This thread's note, set while it lives: what the handler prints if NVRTC crashes meanwhile.
    pub(crate) struct Noting(());

    impl Noting {
        /// Notes `text` (cut to the buffer, ending in a newline) for this thread.
        pub(crate) fn new(text: &str) -> Noting {
            let mut buf = [0u8; NOTE_CAP];
            let bytes = text.as_bytes();
            let n = bytes.len().min(NOTE_CAP);
            buf[..n].copy_from_slice(&bytes[bytes.len() - n..]);
            NOTE.with(|b| b.set(buf));
            NOTE_LEN.with(|l| l.set(n));
            Noting(())
        }
    }

    impl Drop for Noting {
        fn drop(&mut self) {
            NOTE_LEN.with(|l| l.set(0));
        }
    }

    /// An alternate signal stack for this thread while it lives, so the handler runs even when
    /// NVRTC's fault is a blown stack. The one it replaces (Rust's own, if any) comes back on
    /// drop, before the thread's exit frees that one.
    pub(crate) struct AltStack {
        _stack: Box<[u8]>,
        previous: Option<libc::stack_t>,
    }

    impl AltStack {
        /// Installs a fresh alternate stack; without one (sigaltstack failed) the handler runs
        /// on the thread's stack, which NVRTC's usual faults leave usable.
        pub(crate) fn new() -> AltStack {
            let mut stack = vec![0u8; ALT_STACK].into_boxed_slice();
            let new = libc::stack_t { ss_sp: stack.as_mut_ptr().cast(), ss_flags: 0, ss_size: stack.len() };
            let mut old = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: 0, ss_size: 0 };
            // SAFETY: `new` describes memory owned by the returned value, which restores `old`
            // before that memory is freed; `old` is a valid out-pointer.
            let ok = unsafe { libc::sigaltstack(&new, &mut old) } == 0;
            AltStack { _stack: stack, previous: ok.then_some(old) }
        }
    }

    impl Drop for AltStack {
        fn drop(&mut self) {
            if let Some(old) = self.previous {
                // SAFETY: `old` is the stack that was installed before ours (or a disabled one);
                // ours stays allocated until after this call.
                unsafe { libc::sigaltstack(&old, std::ptr::null_mut()) };
            }
        }
    }

    /// Installs the crash handler once per process.
    pub(crate) fn install_handler() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let mut previous = [empty_action(); SIGNALS.len()];
            for (slot, (sig, _)) in previous.iter_mut().zip(SIGNALS) {
                // SAFETY: a null new action only reads the current one into a valid out-pointer.
                unsafe { libc::sigaction(sig, std::ptr::null(), slot) };
            }
            if PREVIOUS.set(previous).is_err() {
                return;
            }
            let mut action = empty_action();
            action.sa_sigaction = on_crash
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            for (sig, _) in SIGNALS {
                // SAFETY: `on_crash` is async-signal-safe (see the module documentation) and the
                // previous actions it falls back to were stored above.
                unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) };
            }
        });
    }

    fn empty_action() -> libc::sigaction {
        // SAFETY: sigaction is plain data for which all zeroes is a valid value (SIG_DFL, an
        // empty mask, no flags).
        unsafe { std::mem::zeroed() }
    }

    extern "C" fn on_crash(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
        let len = NOTE_LEN.try_with(Cell::get).unwrap_or(0);
        let index = SIGNALS.iter().position(|(s, _)| *s == sig);
        if len == 0 || index.is_none() {
            return fall_back(sig, index, info, context);
        }
        let note = NOTE.try_with(Cell::get).unwrap_or([0; NOTE_CAP]);
        let name = index.map_or("signal", |i| SIGNALS[i].1).as_bytes();
        let mut line = [0u8; PREFIX.len() + 16 + NOTE_CAP];
        let mut at = 0;
        for part in [PREFIX, name, &note[..len.min(NOTE_CAP)]] {
            line[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        // SAFETY: write(2), sigaction(2) and raise(3) are async-signal-safe; `line` and `dfl`
        // are valid for the calls. The signal is blocked while this handler runs, so the raised
        // one is delivered, with the default action, as soon as it returns.
        unsafe {
            libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), at);
            let dfl = empty_action();
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            libc::raise(sig);
        }
    }

    /// A crash outside NVRTC: what was there before ours handles it.
    fn fall_back(
        sig: libc::c_int,
        index: Option<usize>,
        info: *mut libc::siginfo_t,
        context: *mut libc::c_void,
    ) {
        let previous = index.and_then(|i| PREVIOUS.get().map(|p| p[i])).unwrap_or_else(empty_action);
        let handler = previous.sa_sigaction;
        if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
            if previous.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this
                // signature; it gets the same arguments the kernel gave us.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(handler) };
                return f(sig, info, context);
            }
            // SAFETY: without SA_SIGINFO the previous handler takes only the signal number.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            return f(sig);
        }
        // SAFETY: sigaction(2) and raise(3) are async-signal-safe; `previous` is a valid action.
        unsafe {
            libc::sigaction(sig, &previous, std::ptr::null_mut());
            libc::raise(sig);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_note_names_the_unit_and_the_individuals_its_kernels_belong_to() {
            let source = "extern \"C\" __global__ void g3_i14(int* o) {}\n\
                          extern \"C\" __global__ void g3_i7(int* o) {}\n";
            let note = describe(&gpfarm_protocol::Unit::new("g3_j12.cu", source));
            assert!(note.starts_with(") compiling g3_j12.cu (individuals 14, 7 of generation 3);"), "{note}");
            assert!(note.contains("--compiler farm") && note.ends_with('\n') && note.lines().count() == 1);
        }

        #[test]
        fn a_note_names_the_individuals_of_a_switch_unit() {
            let source = " static __device__ __forceinline__ void g3_i14(int* o) {}\n\
                           static __device__ __forceinline__ void g3_i7(int* o) {}\n\
                          extern \"C\" __global__ void g3_j12(int* o, int gpfarm_first) {}\n";
            let note = describe(&gpfarm_protocol::Unit::new("g3_j12.cu", source));
            assert!(note.starts_with(") compiling g3_j12.cu (individuals 14, 7 of generation 3);"), "{note}");
        }

        #[test]
        fn a_note_names_the_entries_of_a_ptx_unit() {
            let source = ".version 9.0\n.target sm_90\n.address_size 64\n\
                          .visible .entry g2_i5(.param .u64 o)\n{ ret; }\n.visible .entry g2_i9(.param .u64 o)\n{ ret; }\n";
            let note = describe(&gpfarm_protocol::Unit::ptx("g2_j0.ptx", source));
            assert!(note.starts_with(") compiling g2_j0.ptx (individuals 5, 9 of generation 2);"), "{note}");
        }

        #[test]
        fn a_note_lists_other_kernels_by_name_and_says_how_many_it_left_out() {
            let source: String = (0..10).map(|k| format!("__global__ void k{k}(float* y) {{}}\n")).collect();
            let note = describe(&gpfarm_protocol::Unit::new("mine.cu", source));
            assert!(note.contains("(kernels k0, k1, k2, k3, k4, k5, k6, k7 and 2 more)"), "{note}");
        }
    }
}
