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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use gpfarm_protocol::event::{self, Wake};
use gpfarm_protocol::segment::{self, MAX_CAPACITY, list_segments, process_alive, remove_stale_segments};
use gpfarm_protocol::{
    CompileOptions, CompileRef, DaemonId, DaemonInfo, DaemonState, FailureKind, FarmName, Request, Response,
    Segment, SegmentError, SegmentName, SmArch, Unit, UnitResult,
};

use crate::compiler::{Batch, BatchStats, Compiler, CompilerError, WorkerStats};
use crate::partition::balanced;
use crate::queue::{Finished, Job, Queued, Worklist, job_queue};

/// How often a waiting client looks up to check that its daemons are alive.
const POLL: Duration = Duration::from_millis(50);

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
    pub detached: bool,
    /// Let daemons keep NVRTC's freed memory ([`gpfarm_toolchain::tune_allocator`]).
    pub tuned_allocator: bool,
    /// Extra environment variables for the daemons.
    pub env: Vec<(String, String)>,
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
            tuned_allocator: true,
            env: Vec::new(),
        }
    }
}

struct Daemon {
    id: u16,
    seg: Segment,
    child: Option<Child>,
    pid: u32,
    info: DaemonInfo,
}

/// Why a daemon did not answer.
enum Lost {
    /// It ended; `true` if by a crash of its own.
    Died(String, bool),
    Hung,
    Protocol(String),
}

impl Daemon {
    /// Ok while the daemon lives; otherwise how it ended and whether that was a crash of its own
    /// (a crash signal or an error exit) rather than a kill from outside.
    fn alive(&mut self) -> Result<(), (String, bool)> {
        use std::os::unix::process::ExitStatusExt;
        if let Some(child) = &mut self.child {
            if let Ok(Some(status)) = child.try_wait() {
                let crash = match status.signal() {
                    Some(sig) => [libc::SIGSEGV, libc::SIGABRT, libc::SIGBUS, libc::SIGILL, libc::SIGFPE]
                        .contains(&sig),
                    None => !status.success(),
                };
                return Err((format!("exited ({status})"), crash));
            }
        } else if !process_alive(self.pid) {
            return Err(("process is gone".into(), false));
        }
        Ok(())
    }

    /// Waits for "done"; `seen` is the done counter read before the request was written. The
    /// daemon is declared hung when `limit` passes without it finishing a unit (its progress
    /// counter), so a long part of many quick units is never mistaken for a hang.
    fn await_done(&mut self, seen: u32, limit: Duration) -> Result<(), Lost> {
        let mut progress = self.seg.progress();
        let mut since = Instant::now();
        loop {
            match event::wait(self.seg.done(), seen, POLL) {
                Wake::Signalled(_) => {
                    return match self.seg.state() {
                        Ok(DaemonState::Available) => Ok(()),
                        Ok(state) => Err(Lost::Died(format!("stopped while working ({state:?})"), false)),
                        Err(e) => Err(Lost::Protocol(e.to_string())),
                    };
                }
                Wake::TimedOut => {
                    self.alive().map_err(|(m, crash)| Lost::Died(m, crash))?;
                    let now = self.seg.progress();
                    if now != progress {
                        (progress, since) = (now, Instant::now());
                    } else if since.elapsed() > limit {
                        return Err(Lost::Hung);
                    }
                }
            }
        }
    }

    fn round_trip(&mut self, req: &Request, timeout: Duration) -> Result<Response, CompilerError> {
        let id = self.id;
        let seen = self.seg.done().load(Ordering::Acquire);
        self.seg.write_request(req)?;
        self.seg.set_state(DaemonState::Processing);
        event::signal(self.seg.go());
        match self.await_done(seen, timeout) {
            Ok(()) => Ok(self.seg.read_response()?),
            Err(Lost::Died(m, _)) | Err(Lost::Protocol(m)) => Err(CompilerError::Daemon { id, message: m }),
            Err(Lost::Hung) => {
                Err(CompilerError::Daemon { id, message: format!("no answer within {timeout:?}") })
            }
        }
    }
}

/// A running farm of compile daemons.
pub struct Farm {
    name: FarmName,
    daemons: Vec<Daemon>,
    config: FarmConfig,
    owns_daemons: bool,
}

/// Finds `gpfarmd`: `GPFARMD`, then beside the current executable (and one level up, where
/// test binaries live), then on `PATH`.
pub fn daemon_executable() -> Result<PathBuf, CompilerError> {
    if let Some(p) = std::env::var_os("GPFARMD").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| CompilerError::Io(e.to_string()))?;
    let mut candidates: Vec<PathBuf> = exe.ancestors().skip(1).take(2).map(|d| d.join("gpfarmd")).collect();
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("gpfarmd")));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        CompilerError::Io(format!(
            "gpfarmd not found beside {} or on PATH; build it with `cargo build --release` or set GPFARMD",
            exe.display()
        ))
    })
}

fn spawn_daemon(exe: &Path, farm: &FarmName, id: u16, config: &FarmConfig) -> Result<Child, CompilerError> {
    let mut cmd = Command::new(exe);
    cmd.arg("--farm").arg(farm.as_str()).arg("--id").arg(id.to_string());
    cmd.arg("--warmup-arch").arg(config.warmup_arch.to_string());
    cmd.arg("--gpu-context").arg(if config.gpu_context { "auto" } else { "off" });
    cmd.arg("--malloc").arg(if config.tuned_allocator { "tuned" } else { "default" });
    if let Some(cuda) = &config.cuda {
        cmd.arg("--cuda").arg(cuda);
    }
    if config.detached {
        use std::os::unix::process::CommandExt;
        // A new process group: a Ctrl-C meant for the starting terminal does not reach them.
        cmd.process_group(0);
    } else {
        cmd.arg("--parent-pid").arg(std::process::id().to_string());
    }
    cmd.envs(config.env.iter().map(|(k, v)| (k, v)));
    // A detached daemon must not hold its starter's terminal or pipes open: `$(gpfarm daemons
    // start --detach)` would never return. Why it failed to start still reaches the client
    // through its segment.
    let stderr = if config.detached { Stdio::null() } else { Stdio::inherit() };
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
    cmd.spawn()
        .map_err(|e| CompilerError::Daemon { id, message: format!("cannot start {}: {e}", exe.display()) })
}

/// Waits for a daemon's segment to appear and its state to leave `Starting`.
fn await_available(
    name: &SegmentName,
    mut child: Option<&mut Child>,
    timeout: Duration,
) -> Result<Segment, CompilerError> {
    let id = name.id.0;
    let deadline = Instant::now() + timeout;
    let check_child = |child: &mut Option<&mut Child>| -> Result<(), CompilerError> {
        if let Some(c) = child.as_deref_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            return Err(CompilerError::Daemon {
                id,
                message: format!("exited during start-up ({status}); its message is above"),
            });
        }
        if Instant::now() > deadline {
            return Err(CompilerError::Daemon { id, message: format!("not available after {timeout:?}") });
        }
        Ok(())
    };
    let mut seg = loop {
        match Segment::open(name) {
            Ok(seg) => break seg,
            Err(SegmentError::Missing(_)) | Err(SegmentError::Invalid { .. }) => {
                check_child(&mut child)?;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let mut seen = 0;
    loop {
        match seg.state()? {
            DaemonState::Available => return Ok(seg),
            DaemonState::Failed => {
                let why = match seg.read_response() {
                    Ok(Response::Error(m)) => m,
                    _ => "failed to start".into(),
                };
                event::signal(seg.go());
                return Err(CompilerError::Daemon { id, message: why });
            }
            DaemonState::Stopped => {
                return Err(CompilerError::Daemon { id, message: "stopped during start-up".into() });
            }
            DaemonState::Starting | DaemonState::Processing => {
                check_child(&mut child)?;
                if let Wake::Signalled(v) = event::wait(seg.done(), seen, POLL) {
                    seen = v;
                }
            }
        }
    }
}

fn hello(seg: Segment, child: Option<Child>, config: &FarmConfig) -> Result<Daemon, CompilerError> {
    let id = seg.name().id.0;
    let pid = seg.daemon_pid();
    let me = std::process::id();
    if let Err(holder) = seg.lock_client(me) {
        return Err(CompilerError::Daemon {
            id,
            message: format!(
                "in use by process {holder}; one client at a time (start another farm with `gpfarm daemons start`)"
            ),
        });
    }
    let mut d = Daemon { id, seg, child, pid, info: DaemonInfo::default_for(id, pid) };
    let err = match d.round_trip(&Request::Hello, config.start_timeout) {
        Ok(Response::Hello(info)) => {
            d.info = info;
            return Ok(d);
        }
        Ok(other) => CompilerError::Daemon { id, message: format!("unexpected handshake answer {other:?}") },
        Err(e) => e,
    };
    d.seg.unlock_client(me);
    if let Some(child) = d.child.take() {
        kill_all(vec![(id, child)]);
    }
    Err(err)
}

trait DefaultInfo {
    fn default_for(id: u16, pid: u32) -> DaemonInfo;
}

impl DefaultInfo for DaemonInfo {
    fn default_for(id: u16, pid: u32) -> DaemonInfo {
        DaemonInfo { id, pid, nvrtc_version: (0, 0), nvrtc_path: String::new(), gpu: None, warmup_us: 0 }
    }
}

fn check_versions(daemons: &[Daemon]) -> Result<(), CompilerError> {
    let Some(first) = daemons.first() else { return Ok(()) };
    for d in daemons {
        if d.info.nvrtc_version != first.info.nvrtc_version {
            return Err(CompilerError::Daemon {
                id: d.id,
                message: format!(
                    "runs NVRTC {:?} from {}, but daemon {} runs {:?} from {}: one farm, one NVRTC",
                    d.info.nvrtc_version,
                    d.info.nvrtc_path,
                    first.id,
                    first.info.nvrtc_version,
                    first.info.nvrtc_path
                ),
            });
        }
    }
    Ok(())
}

impl Farm {
    /// Spawns `config.daemons` daemons and waits until every one is warm and has shaken hands.
    /// Stale segments of this user's crashed runs are removed first.
    pub fn spawn(config: FarmConfig) -> Result<Farm, CompilerError> {
        Farm::spawn_named(FarmName::random(), config)
    }

    /// As [`Farm::spawn`], with a chosen farm name.
    pub fn spawn_named(name: FarmName, config: FarmConfig) -> Result<Farm, CompilerError> {
        let removed = remove_stale_segments(None);
        if !removed.is_empty() {
            tracing::info!(count = removed.len(), "removed stale segments");
        }
        let exe = match &config.executable {
            Some(p) => p.clone(),
            None => daemon_executable()?,
        };
        let n = config.daemons.clamp(1, u16::MAX as usize) as u16;
        let mut farm =
            Farm { name: name.clone(), daemons: Vec::new(), config: config.clone(), owns_daemons: true };
        let mut children = Vec::new();
        for id in 0..n {
            match spawn_daemon(&exe, &name, id, &config) {
                Ok(c) => children.push((id, c)),
                Err(e) => {
                    kill_all(children);
                    return Err(e);
                }
            }
        }
        let mut pending = children.into_iter();
        while let Some((id, mut child)) = pending.next() {
            let seg_name = SegmentName::new(&name, DaemonId(id));
            let started = match await_available(&seg_name, Some(&mut child), config.start_timeout) {
                Ok(seg) => hello(seg, Some(child), &config),
                Err(e) => {
                    kill_all(vec![(id, child)]);
                    Err(e)
                }
            };
            match started {
                Ok(d) => farm.daemons.push(d),
                Err(e) => {
                    // `farm` drops its started daemons; the rest are killed here.
                    kill_all(pending.collect());
                    segment::unlink(&seg_name);
                    return Err(e);
                }
            }
        }
        check_versions(&farm.daemons)?;
        Ok(farm)
    }

    /// Attaches to the daemons of a farm started by `gpfarm daemons start`: the named farm, or
    /// the only farm of this user if no name is given.
    pub fn attach(name: Option<&FarmName>, config: FarmConfig) -> Result<Farm, CompilerError> {
        remove_stale_segments(None);
        let farms = group_by_farm(list_segments());
        let (farm_name, ids) = match name {
            Some(n) => farms.into_iter().find(|(f, _)| f == n).ok_or_else(|| CompilerError::Daemon {
                id: 0,
                message: format!("no running farm named {n}; start one with `gpfarm daemons start`"),
            })?,
            None => {
                let mut farms = farms.into_iter();
                match (farms.next(), farms.next()) {
                    (Some(f), None) => f,
                    (None, _) => {
                        return Err(CompilerError::Daemon {
                            id: 0,
                            message: "no running farm; start one with `gpfarm daemons start -n N`".into(),
                        });
                    }
                    (Some(_), Some(_)) => {
                        return Err(CompilerError::Daemon {
                            id: 0,
                            message: "several farms are running; name one (see `gpfarm daemons status`)"
                                .into(),
                        });
                    }
                }
            }
        };
        let mut farm = Farm {
            name: farm_name.clone(),
            daemons: Vec::new(),
            config: config.clone(),
            owns_daemons: false,
        };
        for id in ids {
            let seg = await_available(&SegmentName::new(&farm_name, id), None, config.start_timeout)?;
            farm.daemons.push(hello(seg, None, &config)?);
        }
        check_versions(&farm.daemons)?;
        Ok(farm)
    }

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
    /// ownership: dropping the farm still shuts spawned daemons down.
    pub fn release(&mut self) {
        let me = std::process::id();
        for d in &self.daemons {
            d.seg.unlock_client(me);
        }
    }

    /// Lets spawned daemons run on after this farm is dropped (for `gpfarm daemons start
    /// --detach`).
    pub fn detach(mut self) {
        self.release();
        self.owns_daemons = false;
        for d in &mut self.daemons {
            d.child = None;
        }
    }
}

/// Ends a daemon that stopped answering and starts a fresh one with the same id in its place.
/// Runs on the farm's own thread: a daemon's parent-death signal fires when the *thread* that
/// started it ends.
fn respawn(d: &mut Daemon, name: &FarmName, config: &FarmConfig) -> Result<(), CompilerError> {
    let exe = match &config.executable {
        Some(p) => p.clone(),
        None => daemon_executable()?,
    };
    let id = d.id;
    if let Some(mut child) = d.child.take() {
        let _ = child.kill();
        let _ = child.wait();
    } else if process_alive(d.pid) {
        // SAFETY: plain kill(2) of a daemon that stopped answering.
        unsafe { libc::kill(d.pid as libc::pid_t, libc::SIGKILL) };
    }
    let seg_name = SegmentName::new(name, DaemonId(id));
    segment::unlink(&seg_name);
    let mut child = spawn_daemon(&exe, name, id, config)?;
    let seg = await_available(&seg_name, Some(&mut child), config.start_timeout)?;
    let fresh = hello(seg, Some(child), config)?;
    // The old segment was unlinked above; dropping the stale mapping is all that is left.
    drop(std::mem::replace(d, fresh));
    Ok(())
}

fn kill_all(children: Vec<(u16, Child)>) {
    for (_, mut c) in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn group_by_farm(names: Vec<SegmentName>) -> BTreeMap<FarmName, Vec<DaemonId>> {
    let mut farms: BTreeMap<FarmName, Vec<DaemonId>> = BTreeMap::new();
    for n in names {
        farms.entry(n.farm).or_default().push(n.id);
    }
    for ids in farms.values_mut() {
        ids.sort();
    }
    farms
}

/// How long a daemon may work on one unit by default. A GP unit compiles in milliseconds to
/// seconds; two minutes without progress is a hang.
pub const DEFAULT_UNIT_DEADLINE: Duration = Duration::from_secs(120);
/// Starts of a replacement daemon before its slot is given up.
const RESPAWN_TRIES: usize = 3;
/// Room for the options and framing of a request around its units.
const REQUEST_OVERHEAD: usize = 64 << 10;
/// A unit its daemon crashed or hung on is tried this often before it fails.
const CULPRIT_TRIES: u8 = 2;
/// A unit lost with no culprit named is tried this often.
const MAX_ATTEMPTS: u8 = 3;
/// A unit is sent at most this often, whatever happens to its daemons (killed from outside
/// again and again costs a unit nothing else).
const MAX_SENDS: u8 = 32;

/// Why a unit cannot be sent at all, if it cannot: it does not fit in a segment on its own.
fn too_large(unit: &Unit) -> Option<UnitResult> {
    let bytes = unit.source.len() + unit.name.len();
    (bytes + REQUEST_OVERHEAD > MAX_CAPACITY).then(|| {
        let why = format!(
            "unit of {bytes} bytes is larger than the largest request a segment holds ({} MiB)",
            MAX_CAPACITY >> 20
        );
        UnitResult::failed(FailureKind::InvalidSource, why)
    })
}

/// Units of one job sent to one daemon in one request.
struct Assignment {
    job: usize,
    units: Arc<Vec<Unit>>,
    /// Indices into `units`, in request order.
    picks: Vec<usize>,
}

/// What became of an assignment.
enum Outcome {
    Compiled {
        results: Vec<UnitResult>,
        daemon_us: u64,
    },
    /// The daemon was lost; `culpable` when it crashed or hung by itself (rather than being killed
    /// from outside), `done` the units it had finished, so the one after them was being compiled.
    Lost {
        reason: String,
        culpable: bool,
        done: usize,
    },
    /// The request could not be written.
    NotSent(String),
}

struct Answer {
    daemon: usize,
    assignment: Assignment,
    outcome: Outcome,
    write_us: u64,
    read_us: u64,
    request_bytes: u64,
}

/// One daemon's side of [`Farm::serve`]: takes assignments, runs each as one request.
fn daemon_loop(
    k: usize,
    daemon: &Mutex<Daemon>,
    options: &CompileOptions,
    timeout: Duration,
    assignments: Receiver<Assignment>,
    answers: Sender<Answer>,
) {
    for assignment in assignments {
        let mut d = daemon.lock().unwrap_or_else(|e| e.into_inner());
        let t = Instant::now();
        let refs: Vec<&Unit> = assignment.picks.iter().map(|&i| &assignment.units[i]).collect();
        let seen = d.seg.done().load(Ordering::Acquire);
        let written = d.seg.write_request(&CompileRef { options, units: &refs });
        let write_us = t.elapsed().as_micros() as u64;
        let (mut read_us, mut request_bytes) = (0, 0);
        let outcome = match written {
            Err(e) => Outcome::NotSent(format!("request not sent: {e}")),
            Ok(bytes) => {
                request_bytes = bytes as u64;
                d.seg.set_progress(0);
                d.seg.set_state(DaemonState::Processing);
                event::signal(d.seg.go());
                let waited = d.await_done(seen, timeout);
                let t = Instant::now();
                let response =
                    waited.and_then(|()| d.seg.read_response().map_err(|e| Lost::Protocol(e.to_string())));
                read_us = t.elapsed().as_micros() as u64;
                let lost = |reason: String, culpable: bool| Outcome::Lost {
                    reason,
                    culpable,
                    done: d.seg.progress() as usize,
                };
                match response {
                    Ok(Response::Compiled { results, daemon_us, .. }) if results.len() == refs.len() => {
                        Outcome::Compiled { results, daemon_us }
                    }
                    Ok(Response::Compiled { results, .. }) => {
                        lost(format!("answered {} results for {} units", results.len(), refs.len()), false)
                    }
                    Ok(Response::Error(m)) => lost(m, false),
                    Ok(other) => lost(format!("unexpected answer {other:?}"), false),
                    Err(Lost::Died(m, crash)) => {
                        lost(format!("gpfarmd {k} died while compiling: {m}"), crash)
                    }
                    Err(Lost::Hung) => lost(format!("gpfarmd {k} gave no answer within {timeout:?}"), true),
                    Err(Lost::Protocol(m)) => lost(m, false),
                }
            }
        };
        drop(d);
        let answer = Answer { daemon: k, assignment, outcome, write_us, read_us, request_bytes };
        if answers.send(answer).is_err() {
            return;
        }
    }
}

/// A job being compiled: its units, what is known of each, and its times.
struct JobState {
    id: u64,
    units: Arc<Vec<Unit>>,
    results: Vec<Option<UnitResult>>,
    open: usize,
    queued: Instant,
    started: Option<Instant>,
    busy_us: u64,
    strikes: Vec<u8>,
    attempts: Vec<u8>,
    sends: Vec<u8>,
}

impl JobState {
    fn resolve(&mut self, i: usize, r: UnitResult) {
        if self.results[i].is_none() {
            self.open -= 1;
        }
        self.results[i] = Some(r);
    }
}

/// Work waiting for a daemon: some units of one job.
struct Item {
    job: usize,
    picks: Vec<usize>,
}

impl Farm {
    /// Serves a job queue (see [`Compiler::serve`]): each job goes to the next free daemon as
    /// one request, and its results go back as soon as they are in. A daemon that dies or hangs
    /// is restarted; the unit it crashed or hung on is tried once more on its own and then fails
    /// as `Lost` with the reason; the rest of its request is sent again at no cost to it.
    fn serve_queue(&mut self, options: &CompileOptions, work: Worklist) -> BatchStats {
        let start = Instant::now();
        let mut stats = BatchStats::default();
        let daemons: Vec<Mutex<Daemon>> =
            std::mem::take(&mut self.daemons).into_iter().map(Mutex::new).collect();
        stats.workers = vec![WorkerStats::default(); daemons.len()];
        let mut gone = vec![false; daemons.len()];
        let timeout = self.config.request_timeout;
        std::thread::scope(|scope| {
            let (answer_tx, answers) = crossbeam_channel::unbounded::<Answer>();
            let mut to_daemon: Vec<Option<Sender<Assignment>>> = Vec::with_capacity(daemons.len());
            for (k, d) in daemons.iter().enumerate() {
                let (tx, rx) = crossbeam_channel::unbounded();
                let answer_tx = answer_tx.clone();
                scope.spawn(move || daemon_loop(k, d, options, timeout, rx, answer_tx));
                to_daemon.push(Some(tx));
            }
            drop(answer_tx);
            let mut jobs: HashMap<usize, JobState> = HashMap::new();
            let mut next_job = 0usize;
            let mut pending: VecDeque<Item> = VecDeque::new();
            let mut idle: Vec<usize> = (0..daemons.len()).rev().collect();
            let mut busy = 0usize;
            let mut open = true;
            let never = crossbeam_channel::never();
            loop {
                while !pending.is_empty() && !idle.is_empty() {
                    let (Some(item), Some(k)) = (pending.pop_front(), idle.pop()) else { break };
                    let Some(job) = jobs.get_mut(&item.job) else { continue };
                    job.started.get_or_insert_with(Instant::now);
                    for &i in &item.picks {
                        job.sends[i] += 1;
                    }
                    let assignment =
                        Assignment { job: item.job, units: job.units.clone(), picks: item.picks };
                    if let Some(tx) = &to_daemon[k]
                        && tx.send(assignment).is_ok()
                    {
                        busy += 1;
                    }
                }
                let why = if to_daemon.iter().all(Option::is_none) {
                    Some("no daemon left to compile it")
                } else if work.abandoned() {
                    Some("abandoned: nobody waits for it")
                } else {
                    None
                };
                if let Some(why) = why {
                    for item in pending.drain(..) {
                        if let Some(job) = jobs.get_mut(&item.job) {
                            for i in item.picks {
                                job.resolve(i, UnitResult::failed(FailureKind::Lost, why));
                            }
                        }
                    }
                }
                // Room first, then results: whoever wakes on a result sees the room it left.
                work.set_free(if pending.is_empty() { idle.len() } else { 0 });
                self.finish_jobs(&mut jobs, &work);
                if !open && pending.is_empty() && busy == 0 {
                    break;
                }
                let incoming = if open { &work.jobs } else { &never };
                crossbeam_channel::select! {
                    recv(incoming) -> msg => match msg {
                        Ok(Queued { job, queued }) => {
                            let n = job.units.len();
                            let mut state = JobState {
                                id: job.id,
                                units: Arc::new(job.units),
                                results: vec![None; n],
                                open: n,
                                queued,
                                started: None,
                                busy_us: 0,
                                strikes: vec![0; n],
                                attempts: vec![0; n],
                                sends: vec![0; n],
                            };
                            let mut picks = Vec::with_capacity(n);
                            for i in 0..n {
                                match too_large(&state.units[i]) {
                                    Some(r) => state.resolve(i, r),
                                    None => picks.push(i),
                                }
                            }
                            if !picks.is_empty() {
                                pending.push_back(Item { job: next_job, picks });
                            }
                            jobs.insert(next_job, state);
                            next_job += 1;
                        }
                        Err(_) => open = false,
                    },
                    recv(answers) -> answer => {
                        let Ok(answer) = answer else { break };
                        busy -= 1;
                        let k = answer.daemon;
                        stats.write_us += answer.write_us;
                        stats.read_us += answer.read_us;
                        stats.workers[k].request_bytes += answer.request_bytes;
                        let Assignment { job: job_index, picks, .. } = answer.assignment;
                        let Some(job) = jobs.get_mut(&job_index) else { continue };
                        match answer.outcome {
                            Outcome::Compiled { results, daemon_us } => {
                                stats.workers[k].units += results.len();
                                stats.workers[k].busy_us += daemon_us;
                                job.busy_us += daemon_us;
                                for (i, r) in picks.into_iter().zip(results) {
                                    job.resolve(i, r);
                                }
                                idle.push(k);
                            }
                            Outcome::NotSent(why) => {
                                for i in picks {
                                    job.resolve(i, UnitResult::failed(FailureKind::Internal, why.clone()));
                                }
                                idle.push(k);
                            }
                            Outcome::Lost { reason, culpable, done } => {
                                stats.lost_daemons += 1;
                                stats.first_loss_detected_us.get_or_insert(start.elapsed().as_micros() as u64);
                                let named = culpable && done < picks.len();
                                let mut again = Vec::new();
                                for (pos, i) in picks.into_iter().enumerate() {
                                    if named && pos == done {
                                        job.strikes[i] += 1;
                                        let why = format!("{reason} (on this unit)");
                                        if job.strikes[i] >= CULPRIT_TRIES || job.sends[i] >= MAX_SENDS {
                                            job.resolve(i, UnitResult::failed(FailureKind::Lost, why));
                                        } else {
                                            // Alone, so that a second crash costs no one else.
                                            stats.retried_units += 1;
                                            pending.push_back(Item { job: job_index, picks: vec![i] });
                                        }
                                        continue;
                                    }
                                    job.attempts[i] += u8::from(culpable && !named);
                                    if job.attempts[i] >= MAX_ATTEMPTS || job.sends[i] >= MAX_SENDS {
                                        job.resolve(i, UnitResult::failed(FailureKind::Lost, reason.clone()));
                                    } else {
                                        again.push(i);
                                    }
                                }
                                if !again.is_empty() {
                                    // They waited through a loss that was not theirs: first in line.
                                    stats.retried_units += again.len();
                                    pending.push_front(Item { job: job_index, picks: again });
                                }
                                let mut d = daemons[k].lock().unwrap_or_else(|e| e.into_inner());
                                if self.recover(&mut d) {
                                    stats.restarts += 1;
                                    idle.push(k);
                                } else {
                                    gone[k] = true;
                                    to_daemon[k] = None;
                                }
                            }
                        }
                    },
                }
            }
            drop(to_daemon);
            for job in jobs.values_mut() {
                for i in 0..job.results.len() {
                    if job.results[i].is_none() {
                        job.resolve(i, UnitResult::failed(FailureKind::Lost, "no daemon left to compile it"));
                    }
                }
            }
            self.finish_jobs(&mut jobs, &work);
        });
        self.daemons = daemons
            .into_iter()
            .zip(gone)
            .filter_map(|(d, gone)| {
                let d = d.into_inner().unwrap_or_else(|e| e.into_inner());
                if gone {
                    d.seg.unlock_client(std::process::id());
                    None
                } else {
                    Some(d)
                }
            })
            .collect();
        work.set_free(0);
        stats.wait_us = start.elapsed().as_micros() as u64;
        stats.wall_us = stats.wait_us;
        stats
    }

    /// Sends back every job whose units all have a result.
    fn finish_jobs(&self, jobs: &mut HashMap<usize, JobState>, work: &Worklist) {
        let done: Vec<usize> = jobs.iter().filter(|(_, j)| j.open == 0).map(|(&k, _)| k).collect();
        for k in done {
            let Some(job) = jobs.remove(&k) else { continue };
            let now = Instant::now();
            let results = job
                .results
                .into_iter()
                .map(|r| r.unwrap_or_else(|| UnitResult::failed(FailureKind::Lost, "lost")))
                .collect();
            let _ = work.finished.send(Finished {
                id: job.id,
                results,
                queued: job.queued,
                started: job.started.unwrap_or(now),
                ended: now,
                busy_us: job.busy_us,
            });
        }
    }

    /// Brings a lost daemon back: restarts one this farm spawned; ends one it only attached to
    /// if it is stuck (it is no use to anyone) and gives it up. Returns whether it is back.
    fn recover(&self, d: &mut Daemon) -> bool {
        if self.owns_daemons {
            let mut last = None;
            for _ in 0..RESPAWN_TRIES {
                match respawn(d, &self.name, &self.config) {
                    Ok(()) => return true,
                    Err(e) => last = Some(e),
                }
            }
            if let Some(e) = last {
                tracing::warn!("daemon {} could not be restarted: {e}", d.id);
            }
            false
        } else {
            if segment::is_daemon_process(d.pid) {
                // SAFETY: plain kill(2) of a gpfarmd that stopped answering.
                unsafe { libc::kill(d.pid as libc::pid_t, libc::SIGKILL) };
                segment::unlink(&SegmentName::new(&self.name, DaemonId(d.id)));
            }
            false
        }
    }
}

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
    /// one request; see [`Farm::serve_queue`] for what happens when a daemon is lost.
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

impl Drop for Farm {
    fn drop(&mut self) {
        let me = std::process::id();
        if !self.owns_daemons {
            for d in &self.daemons {
                d.seg.unlock_client(me);
            }
            return;
        }
        for d in &mut self.daemons {
            if d.seg.write_request(&Request::Shutdown).is_ok() {
                d.seg.set_state(DaemonState::Processing);
                event::signal(d.seg.go());
            }
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for d in &mut self.daemons {
            if let Some(child) = &mut d.child {
                while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(2));
                }
                if matches!(child.try_wait(), Ok(None)) {
                    let _ = child.kill();
                }
                let _ = child.wait();
            }
            // A daemon removes its own segment on the way out; this covers one that was killed.
            segment::unlink(d.seg.name());
        }
    }
}

/// One daemon as seen from outside, for `gpfarm daemons status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DaemonStatus {
    /// Daemon id.
    pub id: u16,
    /// Its pid.
    pub pid: u32,
    /// Its state, or why it could not be read.
    pub state: String,
    /// The client holding it (0: none).
    pub client_pid: u32,
    /// Data capacity of its segment in bytes.
    pub capacity: usize,
}

/// One farm as seen from outside.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FarmStatus {
    /// The farm's name.
    pub name: String,
    /// Its daemons.
    pub daemons: Vec<DaemonStatus>,
}

/// Every farm of this user with a segment in `/dev/shm` (stale ones are removed first).
pub fn farm_status() -> Vec<FarmStatus> {
    remove_stale_segments(None);
    group_by_farm(list_segments())
        .into_iter()
        .map(|(farm, ids)| FarmStatus {
            name: farm.to_string(),
            daemons: ids
                .into_iter()
                .map(|id| match Segment::open(&SegmentName::new(&farm, id)) {
                    Ok(seg) => DaemonStatus {
                        id: id.0,
                        pid: seg.daemon_pid(),
                        state: seg
                            .state()
                            .map_or_else(|e| e.to_string(), |s| format!("{s:?}").to_lowercase()),
                        client_pid: seg.client_pid(),
                        capacity: seg.capacity(),
                    },
                    Err(e) => {
                        DaemonStatus { id: id.0, pid: 0, state: e.to_string(), client_pid: 0, capacity: 0 }
                    }
                })
                .collect(),
        })
        .collect()
}

/// Stops every daemon of a farm (SIGTERM, then SIGKILL after `grace`) and removes its segments.
/// Returns how many daemons were stopped.
pub fn stop_farm(name: &FarmName, grace: Duration) -> usize {
    let names: Vec<SegmentName> = list_segments().into_iter().filter(|n| &n.farm == name).collect();
    let pids: Vec<(SegmentName, u32)> = names
        .into_iter()
        .map(|n| {
            let pid = Segment::open(&n).map(|s| s.daemon_pid()).unwrap_or(0);
            (n, pid)
        })
        .collect();
    for (_, pid) in &pids {
        if process_alive(*pid) {
            // SAFETY: kill(2) with a plain signal.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGTERM) };
        }
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && pids.iter().any(|(_, p)| process_alive(*p)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    for (n, pid) in &pids {
        if process_alive(*pid) {
            // SAFETY: as above.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
        segment::unlink(n);
    }
    pids.len()
}
