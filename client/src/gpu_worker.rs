//! The GPU evaluation worker seen from its parent: a GPU evaluator in a child process that
//! survives faulting kernels.
//!
//! A kernel that faults poisons every CUDA context of its process, so evaluation runs in the
//! `gpfarm-gpu-worker` binary (its serving side is `gpfarm_kernels::worker::serve`), started and
//! restarted through [`crate::supervisor`]. When a generation faults, the worker is replaced and
//! the generation run again in careful mode, one kernel at a time, which names the culprit; the
//! culprit gets no fitness (the caller gives it the worst) with the driver's error as the reason,
//! the worker is replaced once more, and the rest is evaluated.
//!
//! **The watchdog.** Every answer has a deadline ([`GpuWorker::set_deadline`], default
//! [`DEFAULT_GPU_DEADLINE`]): a kernel that never ends (a loop with no step limit) cannot hang
//! the run. Past the deadline the worker is killed (its context, and the kernel, go with it),
//! and the generation is run again in careful mode, where the worker names each kernel before
//! it launches it and each kernel gets the whole deadline: the one that does not end is the
//! culprit, reported with the reason `timeout` (and in [`GpuGeneration::timeouts`]), and the
//! rest is evaluated in a fresh worker.
//!
//! **Kept for the next run.** A run in a process that runs again (a fit after a fit in Python)
//! may [`GpuWorker::park`] its worker instead of ending it; the next run takes it back with
//! [`GpuWorker::reuse`], which loads the new problem and kernels in the same process (no process
//! start, no driver initialisation). A parked worker is ended after [`IDLE_WORKER_TIMEOUT`]
//! unused.
//!
//! Must never start the CLI binary, never wait for the worker without a deadline, and never
//! leave a worker process behind: it dies with this process (it is spawned from a thread that
//! lives as long as the process, [`ParentDeath::ProcessSignal`]) and is killed and reaped when
//! this handle drops or, parked, when its idle time is up.

use std::io::{BufReader, BufWriter};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use gpfarm_protocol::worker::{
    CompiledUnit, Fitted, FrameError, GpuGeneration, KernelJob, ProblemRef, Reply, Request, VariantRun,
    WireFit, WirePopulation, WireUnit, profiling, read_frame, read_frame_timed, write_frame,
};
use thiserror::Error;

use crate::supervisor::{Liveness, LocateError, ParentDeath, SpawnError, Supervised, locate_executable};

/// File name of the worker binary.
pub const GPU_WORKER_EXE: &str = "gpfarm-gpu-worker";
/// Environment variable that names the worker binary, overriding the search.
pub const GPU_WORKER_ENV: &str = "GPFARM_GPU_WORKER";
/// How long the worker may take to answer a request, or, in careful mode, to run one kernel,
/// unless [`GpuWorker::set_deadline`] says otherwise: far above any generation measured (the
/// slowest, loop programs interpreted to the step limit, took about a minute).
pub const DEFAULT_GPU_DEADLINE: Duration = Duration::from_secs(120);
/// How long a fresh worker may take to make its context and load its kernels.
const READY_DEADLINE: Duration = Duration::from_secs(120);
/// How long a parked worker ([`GpuWorker::park`]) waits for another run before it is ended.
pub const IDLE_WORKER_TIMEOUT: Duration = Duration::from_secs(60);

/// A parked worker, when it was parked and the process that parked it.
type Parked = (GpuWorker, Instant, u32);

/// Parked workers.
static IDLE: std::sync::Mutex<Vec<Parked>> = std::sync::Mutex::new(Vec::new());

/// Locks the parked workers and takes out those past their idle time or ended (returned, to be
/// dropped, and so ended, once the lock is released: ending one may wait for its exit). A process
/// forked from the one that parked them (Python's multiprocessing) sees them too: there they are
/// not its children, so they are forgotten, never signalled or reused.
fn idle() -> (std::sync::MutexGuard<'static, Vec<Parked>>, Vec<GpuWorker>) {
    let me = std::process::id();
    let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
    let mut ended = Vec::new();
    let mut k = 0;
    while k < idle.len() {
        let (w, since, owner) = &mut idle[k];
        if *owner != me {
            std::mem::forget(idle.swap_remove(k));
        } else if since.elapsed() >= IDLE_WORKER_TIMEOUT || !matches!(w.child.liveness(), Liveness::Alive) {
            ended.push(idle.swap_remove(k).0);
        } else {
            k += 1;
        }
    }
    (idle, ended)
}

/// The GPU worker failed.
#[derive(Debug, Error)]
pub enum WorkerError {
    /// The worker binary was not found.
    #[error(transparent)]
    Locate(#[from] LocateError),
    /// The OS refused to start it.
    #[error("the GPU worker could not start")]
    Spawn(#[from] SpawnError),
    /// It started but refused to serve (no GPU, an unknown problem, a fitness kernel that does
    /// not load), with its reason.
    #[error("the GPU worker could not start: {0}")]
    Refused(String),
    /// It ended or broke the pipe before it was ready.
    #[error("the GPU worker could not start ({status})")]
    Died {
        /// How it ended, as far as known.
        status: String,
        /// What the pipe said.
        #[source]
        source: FrameError,
    },
    /// It could not serve a request, with its reason.
    #[error("the GPU worker: {0}")]
    Remote(String),
    /// It answered out of turn.
    #[error("unexpected reply from the GPU worker")]
    Unexpected,
    /// The GPU faulted and the fault could not be pinned on one individual.
    #[error("a kernel faulted on the GPU ({0}); the GPU worker cannot evaluate this generation")]
    Fault(String),
}

/// Finds `gpfarm-gpu-worker`: `GPFARM_GPU_WORKER`, then beside the current executable (and one
/// level up, where test binaries live), then on `PATH`.
pub fn gpu_worker_executable() -> Result<PathBuf, LocateError> {
    locate_executable(GPU_WORKER_EXE, GPU_WORKER_ENV)
}

/// The parent's side: a GPU evaluator in a child process that survives faulting kernels.
pub struct GpuWorker {
    exe: PathBuf,
    problem: ProblemRef,
    /// The request that readies a fresh worker.
    init: Request,
    child: Supervised,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// GPU name.
    pub name: String,
    /// Workers started after the first, over the whole run.
    pub restarts: usize,
    /// Time spent replacing workers (waiting for a spare, or starting one), over the whole run.
    pub restart_time: Duration,
    /// Whether it served an earlier run ([`GpuWorker::reuse`]).
    pub reused: bool,
    /// The GPU it runs on, by ordinal among those this process sees (`None`: the first).
    device: Option<usize>,
    /// How long an answer, or a careful-mode kernel, may take.
    deadline: Duration,
    /// Fresh workers being readied in the background, taken by the next restarts
    /// ([`GpuWorker::keep_spares`]).
    spares: Vec<std::thread::JoinHandle<Result<(Supervised, Pipes), WorkerError>>>,
    /// How many spares to keep.
    spare_count: usize,
    /// When each request sent and not answered yet was sent, oldest first
    /// ([`GpuWorker::send_interpret`]); a replaced worker's are dropped.
    in_flight: std::collections::VecDeque<Instant>,
}

/// Why a request got no reply.
enum Unanswered {
    /// The worker ended or broke the pipe; why.
    Died(String),
    /// The deadline passed and the worker was killed; the individual whose kernel was running
    /// (careful mode), when known.
    Timeout(Option<usize>),
}

impl GpuWorker {
    /// Starts the worker binary `exe` (see [`gpu_worker_executable`]) for `problem`; it creates
    /// its context, uploads the cases and loads the fitness kernel. Its parent-death signal
    /// fires when the calling *thread* ends, so call this on the thread that owns the worker.
    pub fn spawn(exe: &Path, problem: ProblemRef, fitness_cubin: Vec<u8>) -> Result<GpuWorker, WorkerError> {
        GpuWorker::spawn_with(exe, problem, Some(fitness_cubin), None)
    }

    /// As [`GpuWorker::spawn`], loading the fitness kernel (to evaluate compiled individuals),
    /// the problem's interpreter (to interpret programs, [`GpuWorker::interpret`]), or both.
    pub fn spawn_with(
        exe: &Path,
        problem: ProblemRef,
        fitness_cubin: Option<Vec<u8>>,
        interpreter_cubin: Option<Vec<u8>>,
    ) -> Result<GpuWorker, WorkerError> {
        GpuWorker::spawn_on(exe, problem, fitness_cubin, interpreter_cubin, (Vec::new(), 0), None)
    }

    /// As [`GpuWorker::spawn_with`], also loading the fitting kernels `fit_cubins` (to fit free
    /// parameters, [`GpuWorker::linearize`]) that run on `fit_cases` evenly spaced cases (0: all),
    /// on GPU `device` (an ordinal among the GPUs this process sees): the worker is started with
    /// `CUDA_VISIBLE_DEVICES` naming that GPU alone.
    pub fn spawn_on(
        exe: &Path,
        problem: ProblemRef,
        fitness_cubin: Option<Vec<u8>>,
        interpreter_cubin: Option<Vec<u8>>,
        fit: (Vec<Vec<u8>>, usize),
        device: Option<usize>,
    ) -> Result<GpuWorker, WorkerError> {
        GpuWorker::start(exe, problem, init_request(fitness_cubin, interpreter_cubin, fit), device)
    }

    /// Starts a worker for `problem` with `init` ([`init_request`]).
    pub fn start(
        exe: &Path,
        problem: ProblemRef,
        init: Request,
        device: Option<usize>,
    ) -> Result<GpuWorker, WorkerError> {
        let command = worker_command(exe, &problem, device);
        let init = carrying(init, &problem);
        let mut child = Supervised::spawn(command, ParentDeath::ProcessSignal(libc::SIGKILL))?;
        let (stdin, stdout, name) = handshake(&mut child, &init)?;
        Ok(GpuWorker {
            exe: exe.to_path_buf(),
            problem,
            init,
            child,
            stdin,
            stdout,
            name,
            restarts: 0,
            restart_time: Duration::ZERO,
            reused: false,
            device,
            deadline: DEFAULT_GPU_DEADLINE,
            spares: Vec::new(),
            spare_count: 0,
            in_flight: std::collections::VecDeque::new(),
        })
    }

    /// Keeps this worker, idle, for another run of this process to take back with
    /// [`GpuWorker::reuse`]; it is ended after [`IDLE_WORKER_TIMEOUT`] unused, or with the
    /// process.
    pub fn park(self) {
        static REAPER: std::sync::Once = std::sync::Once::new();
        let (mut parked, ended) = idle();
        parked.push((self, Instant::now(), std::process::id()));
        drop(parked);
        drop(ended);
        // Ends the workers whose idle time is up even when no run comes to look.
        REAPER.call_once(|| {
            let _ = std::thread::Builder::new().name("gpfarm-idle-workers".into()).spawn(|| {
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                    let (parked, ended) = idle();
                    drop(parked);
                    drop(ended);
                }
            });
        });
    }

    /// A parked worker of the binary `exe` on GPU `device`, made to serve `problem` with
    /// `kernels` in the same process (`kernels` is the Init request [`GpuWorker::spawn_on`] sends,
    /// the problem left out): `None` when none is parked, or when the one found does not take
    /// them (it is then ended).
    pub fn reuse(
        exe: &Path,
        problem: ProblemRef,
        mut kernels: Request,
        device: Option<usize>,
    ) -> Option<GpuWorker> {
        let Request::Init { problem: wanted, .. } = &mut kernels else { return None };
        *wanted = Some(problem.clone());
        let init = kernels;
        let mut worker = {
            let (mut parked, ended) = idle();
            let found = parked.iter().position(|(w, ..)| w.exe == exe && w.device == device);
            let worker = found.map(|k| parked.swap_remove(k).0);
            drop(parked);
            drop(ended);
            worker?
        };
        worker.deadline = READY_DEADLINE;
        match worker.ask(&init) {
            Ok(Reply::Ready { name }) => {
                // A worker started again after a fault is given the problem on its command line,
                // or, held in memory, in its readying request.
                let init = carrying(init, &problem);
                (worker.problem, worker.init, worker.name) = (problem, init, name);
                worker.restarts = 0;
                worker.reused = true;
                worker.deadline = DEFAULT_GPU_DEADLINE;
                Some(worker)
            }
            _ => None,
        }
    }

    /// As [`GpuWorker::spawn`], with the worker binary found by [`gpu_worker_executable`].
    pub fn spawn_located(problem: ProblemRef, fitness_cubin: Vec<u8>) -> Result<GpuWorker, WorkerError> {
        GpuWorker::spawn(&gpu_worker_executable()?, problem, fitness_cubin)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Replaces the worker with a fresh one: a spare readied before, if one is kept.
    fn restart(&mut self) -> Result<(), WorkerError> {
        let started = Instant::now();
        if self.spares.is_empty() {
            self.child.restart(worker_command(&self.exe, &self.problem, self.device))?;
            let (stdin, stdout, _) = handshake(&mut self.child, &self.init)?;
            (self.stdin, self.stdout) = (stdin, stdout);
        } else {
            // The oldest first: it has had the longest to get ready.
            let spare = self.spares.remove(0).join().map_err(|_| WorkerError::Unexpected)?;
            let (child, (stdin, stdout, _)) = spare?;
            // The old one is ended before the spare goes on: a context whose kernel never ends
            // keeps the GPU busy until it is torn down, and would slow (and time out) the
            // spare's next kernels.
            self.child.kill();
            (self.child, self.stdin, self.stdout) = (child, stdin, stdout);
            self.fill_spares();
        }
        // The old worker's unanswered requests are never answered.
        self.in_flight.clear();
        self.restarts += 1;
        self.restart_time += started.elapsed();
        Ok(())
    }

    /// Keeps `n` fresh workers readied in the background (each started and sent the same
    /// readying request), so that replacing one after a fault or a timeout costs no start-up:
    /// for runs where faults are common (variants of a user's kernel). Each spare holds a CUDA
    /// context of its own.
    pub fn keep_spares(&mut self, n: usize) {
        self.spare_count = n;
        self.fill_spares();
    }

    fn fill_spares(&mut self) {
        while self.spares.len() < self.spare_count {
            let (command, init) = (worker_command(&self.exe, &self.problem, self.device), self.init.clone());
            self.spares.push(std::thread::spawn(move || {
                let mut child = Supervised::spawn(command, ParentDeath::ProcessSignal(libc::SIGKILL))?;
                let pipes = handshake(&mut child, &init)?;
                Ok((child, pipes))
            }));
        }
    }

    /// How long an answer, or in careful mode one kernel, may take before the worker is killed
    /// and the culprit sought (see the module documentation). At least a millisecond.
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline.max(Duration::from_millis(1));
    }

    /// Sends `request` and waits for its reply, each wait bounded by the deadline; a
    /// [`Reply::Started`] frame restarts the clock and names the kernel that runs.
    fn ask(&mut self, request: &Request) -> Result<Reply, Unanswered> {
        debug_assert!(
            self.in_flight.is_empty(),
            "a request asked before the populations in flight were answered"
        );
        let asked = self.send(request)?;
        self.answer(asked)
    }

    /// Sends `request` without waiting for its reply; returns when it was sent, for
    /// [`GpuWorker::answer`].
    fn send(&mut self, request: &Request) -> Result<Instant, Unanswered> {
        let asked = Instant::now();
        write_frame(&mut self.stdin, request).map_err(|e| Unanswered::Died(death(&mut self.child, &e)))?;
        Ok(asked)
    }

    /// Waits for the reply to the request sent at `asked` (the oldest one not answered yet: the
    /// worker answers in order), each wait bounded by the deadline.
    fn answer(&mut self, asked: Instant) -> Result<Reply, Unanswered> {
        let written = asked.elapsed();
        let mut running = None;
        loop {
            if !readable_within(&self.stdout, self.deadline) {
                self.child.kill();
                return Err(Unanswered::Timeout(running));
            }
            let readable = asked.elapsed();
            match read_frame_timed(&mut self.stdout) {
                Ok((Reply::Started { individual }, _, _)) => running = Some(individual as usize),
                Ok((reply, bytes, read)) => {
                    if profiling() {
                        eprintln!(
                            "gpfarm worker profile: asked: request written in {:.3} ms, a reply readable at {:.3} \
                             ms, its {bytes} bytes read in {:.3} ms, {:.3} ms in all",
                            written.as_secs_f64() * 1e3,
                            readable.as_secs_f64() * 1e3,
                            read.as_secs_f64() * 1e3,
                            asked.elapsed().as_secs_f64() * 1e3
                        );
                    }
                    return Ok(reply);
                }
                Err(e) => return Err(Unanswered::Died(death(&mut self.child, &e))),
            }
        }
    }

    /// Evaluates a generation like `GpuEvaluator::evaluate`. A kernel that faults is found
    /// (careful mode in a fresh worker), reported in `faults` with no fitness, and the rest of
    /// the generation is evaluated; the timings are those of the final, complete pass.
    pub fn evaluate(&mut self, units: &[CompiledUnit<'_>], n: usize) -> Result<GpuGeneration, WorkerError> {
        self.evaluate_with_values(units, n, &[], 0)
    }

    /// [`evaluate`](Self::evaluate) with the free parameters' values of the individuals,
    /// `stride` per individual by its index (`GpuEvaluator::set_values`).
    pub fn evaluate_with_values(
        &mut self,
        units: &[CompiledUnit<'_>],
        n: usize,
        values: &[f32],
        stride: usize,
    ) -> Result<GpuGeneration, WorkerError> {
        let wire: Vec<WireUnit> = units.iter().map(WireUnit::from).collect();
        let (mut careful, mut skip) = (false, Vec::new());
        let mut culprits: Vec<(usize, String)> = Vec::new();
        let mut timeouts = Vec::new();
        let mut request = Request::Evaluate {
            units: wire,
            n: n as u64,
            careful,
            skip: skip.clone(),
            values: values.to_vec(),
            value_stride: stride as u64,
        };
        // Each pass either finishes, names a new culprit, or switches to careful mode.
        for _ in 0..n + 2 {
            match self.ask(&request) {
                Ok(Reply::Done { fitness, faults, load_us, launch_us, readback_us }) => {
                    let mut faults: Vec<(usize, String)> =
                        faults.into_iter().map(|(i, w)| (i as usize, w)).collect();
                    faults.extend(culprits);
                    return Ok(GpuGeneration {
                        fitness,
                        faults,
                        timeouts,
                        load: Duration::from_micros(load_us),
                        launch: Duration::from_micros(launch_us),
                        readback: Duration::from_micros(readback_us),
                    });
                }
                Ok(Reply::Fault { culprit: Some(i), why }) => {
                    skip.push(i);
                    culprits.push((i as usize, format!("kernel faulted: {why}")));
                }
                Err(Unanswered::Timeout(running)) => match (careful, running) {
                    // Whole generations have no culprit: look again one kernel at a time.
                    (false, _) => careful = true,
                    (true, Some(i)) => {
                        skip.push(i as u64);
                        timeouts.push(i);
                        culprits
                            .push((i, format!("timeout: its kernel did not end within {:?}", self.deadline)));
                    }
                    (true, None) => {
                        return Err(WorkerError::Fault(format!(
                            "no answer within {:?} before any kernel ran, even one kernel at a time",
                            self.deadline
                        )));
                    }
                },
                Ok(Reply::Fault { culprit: None, why }) | Err(Unanswered::Died(why)) => {
                    if careful {
                        return Err(WorkerError::Fault(format!("{why}, even one kernel at a time")));
                    }
                    careful = true;
                }
                Ok(Reply::Error(e)) => return Err(WorkerError::Remote(e)),
                Ok(
                    Reply::Ready { .. }
                    | Reply::Started { .. }
                    | Reply::Linearized { .. }
                    | Reply::Fitted { .. }
                    | Reply::Variant { .. }
                    | Reply::VariantsDone,
                ) => {
                    return Err(WorkerError::Unexpected);
                }
            }
            if let Request::Evaluate { careful: c, skip: s, .. } = &mut request {
                (*c, *s) = (careful, skip.clone());
            }
            self.restart()?;
        }
        Err(WorkerError::Fault("the GPU worker kept faulting".into()))
    }
}

impl GpuWorker {
    /// Interprets a population (the worker must have the interpreter, [`GpuWorker::spawn_with`]).
    /// The interpreter cannot fault by design; if the GPU faults all the same, the worker is
    /// replaced and the error returned, for the caller to evaluate elsewhere.
    pub fn interpret(&mut self, population: &WirePopulation) -> Result<GpuGeneration, WorkerError> {
        self.send_interpret(population)?;
        self.interpreted()
    }

    /// Sends a population to be interpreted and returns at once; [`GpuWorker::interpreted`] waits
    /// for the answer. Several may be sent before their answers are read: the worker answers them
    /// one after another, in the order sent. A worker replaced meanwhile ([`GpuWorker::restarts`]
    /// grew) never answers what was sent to the one before it.
    pub fn send_interpret(&mut self, population: &WirePopulation) -> Result<(), WorkerError> {
        match self.send(&Request::Interpret(population.clone())) {
            Ok(asked) => {
                self.in_flight.push_back(asked);
                Ok(())
            }
            Err(e) => Err(self.not_served(Err(e), "the interpreter")),
        }
    }

    /// The answer to the oldest population sent by [`GpuWorker::send_interpret`] and not answered
    /// yet, as [`GpuWorker::interpret`] gives it.
    pub fn interpreted(&mut self) -> Result<GpuGeneration, WorkerError> {
        let Some(asked) = self.in_flight.pop_front() else {
            return Err(WorkerError::Unexpected);
        };
        match self.answer(asked) {
            Ok(Reply::Done { fitness, faults, load_us, launch_us, readback_us }) => Ok(GpuGeneration {
                fitness,
                faults: faults.into_iter().map(|(i, w)| (i as usize, w)).collect(),
                timeouts: Vec::new(),
                load: Duration::from_micros(load_us),
                launch: Duration::from_micros(launch_us),
                readback: Duration::from_micros(readback_us),
            }),
            other => Err(self.not_served(other, "the interpreter")),
        }
    }

    /// The least-squares sums of `fit`'s programs at its values, by the fitting kernel (the worker
    /// must have it, [`GpuWorker::spawn_on`]), and the worker's time for them. As
    /// [`GpuWorker::interpret`], a fault replaces the worker and returns the error, for the caller
    /// to fit elsewhere.
    pub fn linearize(&mut self, fit: &WireFit) -> Result<(Vec<f64>, Duration), WorkerError> {
        match self.ask(&Request::Linearize(fit.clone())) {
            Ok(Reply::Linearized { sums, launch_us }) => Ok((sums, Duration::from_micros(launch_us))),
            other => Err(self.not_served(other, "the fitting kernel")),
        }
    }

    /// Fits the free parameters of every start of `fit` by Levenberg–Marquardt in the worker,
    /// `iterations` iterations (one request, where [`GpuWorker::linearize`] takes one per
    /// iteration): per start, its best values (one after the other), their sums of squares and
    /// the sum of squares where it began ([`Fitted`]). A fault replaces the worker and
    /// returns the error, as [`GpuWorker::linearize`].
    pub fn fit(&mut self, fit: &WireFit, iterations: usize, code: &[Vec<u8>]) -> Result<Fitted, WorkerError> {
        let request = Request::Fit {
            fit: fit.clone(),
            iterations: iterations.min(u32::MAX as usize) as u32,
            code: code.to_vec(),
        };
        // The deadline bounds one launch; a fit makes one per iteration and one to begin.
        let deadline = self.deadline;
        self.deadline = deadline.saturating_mul(u32::try_from(iterations + 1).unwrap_or(u32::MAX));
        let answer = self.ask(&request);
        self.deadline = deadline;
        match answer {
            Ok(Reply::Fitted(fitted)) => Ok(fitted),
            other => Err(self.not_served(other, "the fitting kernel")),
        }
    }

    /// The error of an answer other than the one asked for, from the kernel `place`: the worker's
    /// own error, an unexpected reply, or a fault or silence, after which the worker is replaced.
    fn not_served(&mut self, answer: Result<Reply, Unanswered>, place: &str) -> WorkerError {
        let why = match answer {
            Ok(Reply::Error(e)) => return WorkerError::Remote(e),
            Ok(Reply::Fault { why, .. }) | Err(Unanswered::Died(why)) => why,
            Err(Unanswered::Timeout(_)) => format!("no answer within {:?}", self.deadline),
            Ok(_) => return WorkerError::Unexpected,
        };
        match self.restart() {
            Ok(()) => WorkerError::Fault(format!("{why}, in {place}")),
            Err(e) => e,
        }
    }
}

impl Drop for GpuWorker {
    /// Ends the spares with the worker (each once its start-up is over).
    fn drop(&mut self) {
        for spare in self.spares.drain(..) {
            drop(spare.join());
        }
    }
}

/// What one variant of a user's kernel did in a kernel worker ([`GpuWorker::run_variants`]).
#[derive(Debug, Clone, PartialEq)]
pub enum VariantOutcome {
    /// It ran (or the driver refused it, and nothing ran).
    Run(VariantRun),
    /// It faulted on the GPU (the driver's error); its worker was replaced.
    Fault(String),
    /// It did not end within the deadline; its worker was killed and replaced.
    Timeout,
}

impl GpuWorker {
    /// Starts a kernel worker (`exe --kernels`) for `job`: it uploads the inputs and runs the
    /// original once. Call it on the thread that owns the worker (see [`GpuWorker::spawn`]).
    pub fn kernels(exe: &Path, job: KernelJob) -> Result<GpuWorker, WorkerError> {
        GpuWorker::start(exe, ProblemRef::Kernels, Request::KernelInit(job), None)
    }

    /// Runs every variant (CUBIN of the job's kernel) in a kernel worker, each within the
    /// deadline ([`GpuWorker::set_deadline`]) from when the worker says it starts it. One that
    /// faults or does not end costs that variant alone: the worker is replaced and the rest run.
    pub fn run_variants(&mut self, cubins: &[Vec<u8>]) -> Result<Vec<VariantOutcome>, WorkerError> {
        let mut out: Vec<Option<VariantOutcome>> = vec![None; cubins.len()];
        let mut from = 0;
        while from < cubins.len() {
            let request = Request::KernelRun { cubins: cubins[from..].to_vec() };
            write_frame(&mut self.stdin, &request)
                .map_err(|e| WorkerError::Remote(death(&mut self.child, &e)))?;
            let mut running = None;
            let lost = loop {
                if !readable_within(&self.stdout, self.deadline) {
                    self.child.signal_kill();
                    break running.map(|k| (k, VariantOutcome::Timeout));
                }
                match read_frame(&mut self.stdout) {
                    Ok(Reply::Started { individual }) => running = Some(from + individual as usize),
                    Ok(Reply::Variant { index, run }) => {
                        if let Some(slot) = out.get_mut(from + index as usize) {
                            *slot = Some(VariantOutcome::Run(run));
                        }
                    }
                    Ok(Reply::VariantsDone) => {
                        from = cubins.len();
                        break None;
                    }
                    Ok(Reply::Fault { culprit: Some(k), why }) => {
                        break Some((from + k as usize, VariantOutcome::Fault(why)));
                    }
                    Ok(Reply::Error(e)) => return Err(WorkerError::Remote(e)),
                    Ok(_) => return Err(WorkerError::Unexpected),
                    Err(e) => {
                        let why = death(&mut self.child, &e);
                        break running.map(|k| (k, VariantOutcome::Fault(why)));
                    }
                }
            };
            if from == cubins.len() {
                break;
            }
            let Some((culprit, outcome)) = lost else {
                return Err(WorkerError::Fault("the kernel worker was lost between variants".into()));
            };
            out[culprit] = Some(outcome);
            from = culprit + 1;
            self.restart()?;
        }
        Ok(out.into_iter().map(|o| o.unwrap_or(VariantOutcome::Timeout)).collect())
    }
}

/// `init` made to ready a fresh worker for `problem`: naming it when it does not travel on the
/// worker's command line ([`ProblemRef::on_command_line`]), else naming none.
fn carrying(mut init: Request, problem: &ProblemRef) -> Request {
    if let Request::Init { problem: named, .. } = &mut init {
        *named = (!problem.on_command_line()).then(|| problem.clone());
    }
    init
}

/// The request that readies a worker: the fitness kernel, the interpreter, the fitting kernels
/// and the cases they fit on (0: all) (see [`GpuWorker::spawn_on`]), for the problem on its
/// command line.
pub fn init_request(
    fitness_cubin: Option<Vec<u8>>,
    interpreter_cubin: Option<Vec<u8>>,
    (fit_cubins, fit_cases): (Vec<Vec<u8>>, usize),
) -> Request {
    Request::Init { fitness_cubin, interpreter_cubin, fit_cubins, fit_cases: fit_cases as u64, problem: None }
}

/// Whether `stdout` has something to read (a frame, or the end of the pipe) within `limit`.
fn readable_within(stdout: &BufReader<ChildStdout>, limit: Duration) -> bool {
    if !stdout.buffer().is_empty() {
        return true;
    }
    let end = Instant::now() + limit;
    let mut fd = libc::pollfd { fd: stdout.get_ref().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    loop {
        let left = end.saturating_duration_since(Instant::now());
        // Rounded up, so that the deadline is never cut short.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: `fd` is one valid pollfd for the duration of the call, and its descriptor is
        // the open pipe `stdout` holds.
        let n = unsafe { libc::poll(&mut fd, 1, ms) };
        if n > 0 {
            return true;
        }
        if n == 0 && Instant::now() >= end {
            return false;
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // Let the read report what is wrong with the pipe.
            return true;
        }
    }
}

fn worker_command(exe: &Path, problem: &ProblemRef, device: Option<usize>) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args(problem.args()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    if let Some(d) = device {
        cmd.env(
            "CUDA_VISIBLE_DEVICES",
            visible_device(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(), d),
        );
    }
    cmd
}

/// What `CUDA_VISIBLE_DEVICES` names GPU `ordinal` by for a child, when this process sees the
/// GPUs that `visible` (its own `CUDA_VISIBLE_DEVICES`, if set) lists: that entry (an index or
/// a UUID), or the ordinal itself.
fn visible_device(visible: Option<&str>, ordinal: usize) -> String {
    visible
        .and_then(|v| v.split(',').map(str::trim).filter(|e| !e.is_empty()).nth(ordinal))
        .map_or_else(|| ordinal.to_string(), str::to_owned)
}

/// Why the worker stopped answering: how it ended if it did, else the pipe's error.
fn death(child: &mut Supervised, e: &FrameError) -> String {
    child.wait_exit(Duration::from_millis(10));
    match child.liveness() {
        Liveness::Ended { status, .. } => format!("the GPU worker ended ({status})"),
        Liveness::Alive => format!("the GPU worker stopped answering: {e}"),
    }
}

type Pipes = (BufWriter<ChildStdin>, BufReader<ChildStdout>, String);

/// The capacity asked for each pipe to and from a worker.
const PIPE_BYTES: libc::c_int = 1 << 20;

/// Takes a fresh worker's pipes and waits until it has made its context and loaded the fitness
/// kernel; a worker that refuses is killed and reaped.
fn handshake(child: &mut Supervised, init: &Request) -> Result<Pipes, WorkerError> {
    let (Some(stdin), Some(stdout)) = child.take_pipes() else {
        unreachable!("both pipes are requested in worker_command");
    };
    // A request of a late generation is a few hundred kilobytes: pipes of 1 MiB take it whole,
    // where the default 64 KiB would pass it in turns between the two processes. Where the
    // system refuses (a lower `pipe-max-size`), the pipe keeps its size; only speed differs.
    for fd in [stdin.as_raw_fd(), stdout.as_raw_fd()] {
        // SAFETY: F_SETPIPE_SZ on a pipe this process holds open changes only its capacity.
        unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BYTES) };
    }
    let (mut stdin, mut stdout) = (BufWriter::new(stdin), BufReader::new(stdout));
    let reply = write_frame(&mut stdin, init).and_then(|()| {
        if readable_within(&stdout, READY_DEADLINE) {
            read_frame::<Reply>(&mut stdout)
        } else {
            Err(FrameError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {READY_DEADLINE:?}"),
            )))
        }
    });
    let err = match reply {
        Ok(Reply::Ready { name }) => return Ok((stdin, stdout, name)),
        Ok(Reply::Error(e)) => WorkerError::Refused(e),
        Ok(_) => WorkerError::Unexpected,
        Err(source) => {
            child.wait_exit(Duration::from_millis(100));
            let status = match child.liveness() {
                Liveness::Ended { status, .. } => status.to_string(),
                Liveness::Alive => "still running".into(),
            };
            WorkerError::Died { status, source }
        }
    };
    child.kill();
    Err(err)
}

#[cfg(test)]
mod tests {
    use super::{readable_within, visible_device};
    use std::io::BufReader;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn a_silent_worker_is_given_up_on_at_the_deadline_and_an_answer_is_seen_at_once() {
        let mut silent = Command::new("sleep").arg("30").stdout(Stdio::piped()).spawn().unwrap();
        let out = BufReader::new(silent.stdout.take().unwrap());
        let t = Instant::now();
        assert!(!readable_within(&out, Duration::from_millis(200)));
        let waited = t.elapsed();
        assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(5), "{waited:?}");
        silent.kill().unwrap();
        silent.wait().unwrap();
        // Killed, its pipe ends: that is something to read (the end), not a timeout.
        assert!(readable_within(&out, Duration::from_secs(5)));
        let mut talking = Command::new("echo").arg("ready").stdout(Stdio::piped()).spawn().unwrap();
        let out = BufReader::new(talking.stdout.take().unwrap());
        let t = Instant::now();
        assert!(readable_within(&out, Duration::from_secs(30)));
        assert!(t.elapsed() < Duration::from_secs(5));
        talking.wait().unwrap();
    }

    #[test]
    fn a_worker_sees_the_one_gpu_it_was_given() {
        assert_eq!(visible_device(None, 1), "1");
        assert_eq!(visible_device(Some("2,3"), 1), "3");
        assert_eq!(visible_device(Some("GPU-ab12, GPU-cd34"), 0), "GPU-ab12");
        // More GPUs asked for than listed: the ordinal, which the driver then refuses.
        assert_eq!(visible_device(Some("5"), 2), "2");
    }
}
