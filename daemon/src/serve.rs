//! The daemon's life: create the segment, load and warm NVRTC, then serve requests until told to
//! stop.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use gpfarm_protocol::event::{self, Wake};
use gpfarm_protocol::segment::{self, process_alive};
use gpfarm_protocol::{
    DaemonId, DaemonInfo, DaemonState, FarmName, Request, Response, Segment, SegmentError, SegmentName,
    SmArch,
};
use gpfarm_toolchain::{Allocator, Toolchain, WarmNvrtc};

use crate::compile::compile_units;
use crate::jit::Jit;

/// Set while the daemon is compiling, so that a stop signal ends it at once.
static BUSY: AtomicBool = AtomicBool::new(false);
/// Set once the daemon is warm and serving; before that a stop signal ends it at once.
static SERVING: AtomicBool = AtomicBool::new(false);

/// The signals that ask a daemon to stop: SIGTERM (its farm's shutdown, `gpfarm daemons stop`,
/// its parent's death), SIGINT and SIGHUP.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Blocks the stop signals in this thread, and so in every thread started after it (NVRTC's
/// included), and takes them on a thread of their own with `sigwait`. No signal handler ever
/// runs: NVRTC installs handlers of its own, and one that ran inside an interrupted `malloc` and
/// called `exit()` deadlocked a daemon for good. A stop signal removes the segment at once (a
/// SIGKILL may follow closely, as mpirun sends it, and must not find it there), then ends the
/// daemon at once if it is starting or compiling, or lets the serve loop end it within a poll.
/// Call before any other thread starts.
fn watch_stop_signals(name: SegmentName, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    // SAFETY: an empty signal set, filled with valid signal numbers, then used as the mask of
    // this thread; the sigset_t lives on the stack of the calls that use it.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in STOP_SIGNALS {
            libc::sigaddset(&mut set, sig);
        }
        let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if r != 0 {
            return Err(std::io::Error::from_raw_os_error(r));
        }
        set
    };
    std::thread::Builder::new().name("stop-signals".into()).spawn(move || {
        loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is a valid signal set blocked in every thread; `sig` is an out-param.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                continue;
            }
            stop.store(true, Ordering::SeqCst);
            // Both sides keep their mappings; only the name goes.
            segment::unlink(&name);
            if BUSY.load(Ordering::SeqCst) || !SERVING.load(Ordering::SeqCst) {
                // SAFETY: _exit ends the process without running destructors, which is what is
                // wanted while another thread is inside NVRTC or warming it up.
                unsafe { libc::_exit(0) };
            }
        }
    })?;
    Ok(())
}

/// How often a waiting daemon looks up from its event to check for signals and its parent.
const POLL: Duration = Duration::from_millis(100);
/// How long a daemon that failed to start keeps its segment so the client can read why.
const FAILED_LINGER: Duration = Duration::from_secs(5);

/// Command line of gpfarmd.
#[derive(Debug, Parser)]
#[command(name = "gpfarmd", version, about = "gpfarm's resident compile daemon (one per core)")]
pub struct Args {
    /// Farm this daemon belongs to (its segment is gpfarm-UID-FARM-ID in the user's directory of segments).
    #[arg(long)]
    pub farm: FarmName,
    /// This daemon's id within the farm.
    #[arg(long)]
    pub id: DaemonId,
    /// CUDA toolkit or wheel directory to take NVRTC from (default: discover).
    #[arg(long)]
    pub cuda: Option<PathBuf>,
    /// Exit when this process dies (set by a client that spawns its daemons).
    #[arg(long)]
    pub parent_pid: Option<u32>,
    /// Architecture of the warm-up compile.
    #[arg(long, default_value = "sm_90")]
    pub warmup_arch: SmArch,
    /// Hold a CUDA context for ptx-jit mode: auto (if a GPU is present) or off.
    #[arg(long, value_enum, default_value_t = GpuContext::Auto)]
    pub gpu_context: GpuContext,
    /// Allocator for NVRTC: tuned (keep freed memory, no page faults per compile) or default.
    #[arg(long, value_enum, default_value_t = Malloc::Tuned)]
    pub malloc: Malloc,
    /// More logging on stderr (-v: info, -vv: debug).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Whether a daemon holds a CUDA context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuContext {
    /// If a GPU is present.
    Auto,
    /// Never (CUBIN needs none).
    Off,
}

/// The allocator settings NVRTC runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Malloc {
    /// Keep freed memory ([`gpfarm_toolchain::tune_allocator`]).
    Tuned,
    /// glibc's defaults.
    Default,
}

/// Runs a daemon until it is told to stop; the error says why it could not start.
pub fn run(args: Args) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let name = SegmentName::new(&args.farm, args.id);
    // Before the segment exists: a stop signal at any moment after it is created removes it.
    watch_stop_signals(name.clone(), Arc::clone(&stop)).context("taking over SIGTERM, SIGINT and SIGHUP")?;
    if let Some(parent) = args.parent_pid {
        // SAFETY: prctl(PR_SET_PDEATHSIG) only registers a signal for this process.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
        if !process_alive(parent) {
            bail!("parent process {parent} is already gone");
        }
    }
    let mut seg = match Segment::create(&name, args.id) {
        Err(SegmentError::Exists { .. }) => {
            segment::remove_stale_segments(Some(&args.farm));
            Segment::create(&name, args.id)
        }
        other => other,
    }
    .with_context(|| format!("creating segment {name}"))?;

    let started = Instant::now();
    let nvrtc = match load_and_warm(&args) {
        Ok(n) => n,
        Err(e) => {
            let msg = format!("gpfarmd {} could not start: {e:#}", args.id);
            let _ = seg.write_response(&Response::Error(msg.clone()));
            seg.set_state(DaemonState::Failed);
            event::signal(seg.done());
            linger_failed(&seg, &stop, args.parent_pid);
            bail!(msg);
        }
    };
    let jit = if args.gpu_context == GpuContext::Auto { Jit::open().ok() } else { None };
    let info = DaemonInfo {
        id: args.id,
        pid: std::process::id(),
        nvrtc_version: nvrtc.nvrtc().version(),
        nvrtc_path: nvrtc.nvrtc().path().display().to_string(),
        gpu: jit.as_ref().map(|j| j.gpu.clone()),
        warmup_us: started.elapsed().as_micros() as u64,
    };
    tracing::info!(id = %args.id, ?info, "available");
    // Read "go" before announcing availability: a client may signal the moment it sees the new
    // state, and that signal must count as new.
    let seen = seg.go().load(Ordering::Acquire);
    seg.set_state(DaemonState::Available);
    event::signal(seg.done());
    SERVING.store(true, Ordering::SeqCst);
    let served = serve(&mut seg, &nvrtc, jit.as_ref(), &info, &stop, args.parent_pid, seen);
    seg.set_state(DaemonState::Stopped);
    event::signal(seg.done());
    served
}

fn load_and_warm(args: &Args) -> Result<WarmNvrtc> {
    let toolchain = Toolchain::discover(args.cuda.as_deref())?;
    let allocator = match args.malloc {
        Malloc::Tuned => Allocator::Tuned,
        Malloc::Default => Allocator::Default,
    };
    Ok(WarmNvrtc::start(&toolchain, args.warmup_arch, allocator)?)
}

fn linger_failed(seg: &Segment, stop: &AtomicBool, parent: Option<u32>) {
    let seen = seg.go().load(Ordering::Acquire);
    let until = Instant::now() + FAILED_LINGER;
    while Instant::now() < until && !stop.load(Ordering::SeqCst) && parent.is_none_or(process_alive) {
        if let Wake::Signalled(_) = event::wait(seg.go(), seen, POLL) {
            break;
        }
    }
}

fn serve(
    seg: &mut Segment,
    nvrtc: &WarmNvrtc,
    jit: Option<&Jit>,
    info: &DaemonInfo,
    stop: &AtomicBool,
    parent: Option<u32>,
    mut seen: u32,
) -> Result<()> {
    loop {
        if stop.load(Ordering::SeqCst) {
            tracing::info!(id = %info.id, "signalled; exiting");
            return Ok(());
        }
        if parent.is_some_and(|p| !process_alive(p)) {
            tracing::info!(id = %info.id, "parent gone; exiting");
            return Ok(());
        }
        match event::wait(seg.go(), seen, POLL) {
            Wake::TimedOut => {
                // A resident daemon outlives its clients: free it when one dies holding it.
                if let Some(pid) = seg.release_dead_client() {
                    tracing::info!(id = %info.id, pid, "client died; available again");
                }
                continue;
            }
            Wake::Signalled(now) => seen = now,
        }
        BUSY.store(true, Ordering::SeqCst);
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let start = Instant::now();
        let request = seg.read_request();
        let decode_us = start.elapsed().as_micros() as u64;
        let (response, quit) = match request {
            Ok(Request::Hello) => (Response::Hello(info.clone()), false),
            Ok(Request::Compile { options, units }) => {
                seg.set_progress(0);
                let results = compile_units(nvrtc, jit, &options, &units, |k| seg.set_progress(k as u32));
                let daemon_us = start.elapsed().as_micros() as u64;
                (Response::Compiled { results, daemon_us, decode_us }, false)
            }
            Ok(Request::Shutdown) => (Response::Bye, true),
            Err(e) => (Response::Error(format!("bad request: {}", gpfarm_protocol::error_chain(&e))), false),
        };
        BUSY.store(false, Ordering::SeqCst);
        if let Err(e) = seg.write_response(&response) {
            // Too large even for the largest segment: say so in a response that fits.
            let why = gpfarm_protocol::error_chain(&e);
            let _ = seg.write_response(&Response::Error(format!("response not written: {why}")));
        }
        if quit {
            return Ok(());
        }
        seg.set_state(DaemonState::Available);
        event::signal(seg.done());
    }
}
