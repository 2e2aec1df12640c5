//! The GPU evaluation worker's serving side, so that a faulting kernel costs one individual, not
//! the run.
//!
//! A kernel that faults while running (illegal address, trap) leaves a sticky error that poisons
//! every CUDA context of its process; no new context can be made there. So the evaluator lives in
//! a child process (the `gpfarm-gpu-worker` binary), driven over its stdin and stdout with the
//! frames of [`gpfarm_protocol::worker`]. Its parent side, which restarts it after a fault and
//! names the culprit, is `gpfarm_client::GpuWorker`.
//!
//! Must never outlive its parent (it asks for SIGKILL when the parent dies) and never answer
//! anything but one reply per request, after, in careful mode, one [`Reply::Started`] per
//! kernel launched (so that its parent's deadline names a kernel that does not end).

use std::io::{BufReader, BufWriter};

use gpfarm_gp::problem::ProblemSources;
use gpfarm_gp::{Problem, ProblemError};
use gpfarm_protocol::worker::{
    CasesFile, FrameError, ProblemRef, Reply, Request, read_frame_timed, write_frame,
};

use crate::gpu::variants::KernelBench;
use crate::gpu::{CompiledUnit, GpuError, GpuEvaluator, GpuGeneration, Kernels};

/// Loading the problem a [`ProblemRef`] names (the reference itself lives in `protocol`, which
/// knows no problems).
pub trait LoadProblem {
    /// Loads the problem.
    fn load(&self) -> Result<Problem, ProblemError>;
}

impl LoadProblem for ProblemRef {
    fn load(&self) -> Result<Problem, ProblemError> {
        match self {
            ProblemRef::Builtin(name) => Problem::builtin(name),
            ProblemRef::Dir(dir) => Problem::load(dir),
            ProblemRef::Memory(files) => {
                let sources = |cases| ProblemSources {
                    toml: &files.toml,
                    grammar: &files.grammar,
                    cases,
                    template: &files.template,
                };
                match &files.cases {
                    CasesFile::Json(text) => Problem::from_sources(&files.origin, &sources(text)),
                    CasesFile::Npy(bytes) => Problem::from_sources_npy(&files.origin, &sources(""), bytes),
                }
            }
            ProblemRef::Kernels => Err(ProblemError::Cases {
                file: "--kernels".into(),
                message: "a kernel worker serves no problem".into(),
            }),
        }
    }
}

/// Serves requests on stdin/stdout until stdin closes, for `problem` until an
/// [`Request::Init`] names another (with none, the first Init must name one: a problem in
/// memory, [`ProblemRef::Memory`]). Exits with its parent.
pub fn serve(problem: Option<&Problem>) -> Result<(), GpuError> {
    let mut problem = problem.cloned();
    let mut evaluator: Option<GpuEvaluator> = None;
    serve_frames(|request, output| {
        Ok(Some(match request {
            Request::Init { fitness_cubin, interpreter_cubin, fit_cubins, fit_cases, problem: other } => {
                if let Some(other) = other {
                    match other.load() {
                        Ok(p) => problem = Some(p),
                        Err(e) => {
                            evaluator = None;
                            return Ok(Some(Reply::Error(gpfarm_protocol::error_chain(&e))));
                        }
                    }
                }
                let Some(problem) = &problem else {
                    return Ok(Some(Reply::Error(
                        "init without a problem: this worker was started with none".into(),
                    )));
                };
                // The old evaluator is dropped after the new one is made.
                match GpuEvaluator::with_kernels(
                    problem,
                    &Kernels { fitness: fitness_cubin, interpreter: interpreter_cubin, fit: fit_cubins },
                )
                .and_then(|mut g| g.fit_on_cases(fit_cases as usize).map(|()| g))
                {
                    Ok(g) => {
                        let name = g.name.clone();
                        evaluator = Some(g);
                        Reply::Ready { name }
                    }
                    Err(e) => {
                        evaluator = None;
                        Reply::Error(gpfarm_protocol::error_chain(&e))
                    }
                }
            }
            Request::Evaluate { units, n, careful, skip, values, value_stride } => match &mut evaluator {
                None => Reply::Error("evaluate before init".into()),
                Some(g) => {
                    let members: Vec<Vec<usize>> =
                        units.iter().map(|u| u.members.iter().map(|&m| m as usize).collect()).collect();
                    let refs: Vec<CompiledUnit<'_>> = units
                        .iter()
                        .zip(&members)
                        .map(|(u, m)| CompiledUnit { cubin: &u.cubin, kernels: &u.kernels, members: m })
                        .collect();
                    let skip: Vec<usize> = skip.iter().map(|&i| i as usize).collect();
                    if let Err(e) = g.set_values(&values, value_stride as usize) {
                        return Ok(Some(Reply::Error(gpfarm_protocol::error_chain(&e))));
                    }
                    // A frame that cannot be written here fails again, and ends the worker, below.
                    let mut started = |i: usize| {
                        let _ = write_frame(output, &Reply::Started { individual: i as u64 });
                    };
                    reply(g.evaluate_watched(&refs, n as usize, careful, &skip, &mut started))
                }
            },
            Request::Interpret(population) => match &mut evaluator {
                None => Reply::Error("interpret before init".into()),
                Some(g) => reply(g.interpret(&population)),
            },
            Request::Fit { fit, iterations, code } => match &mut evaluator {
                None => Reply::Error("fit before init".into()),
                Some(g) => match g.load_fit_code(&code).and_then(|()| g.fit(&fit, iterations as usize)) {
                    Ok(fitted) => Reply::Fitted(fitted),
                    Err(GpuError::Fault(why)) => Reply::Fault { culprit: None, why },
                    Err(e) => Reply::Error(gpfarm_protocol::error_chain(&e)),
                },
            },
            Request::KernelInit(_) | Request::KernelRun { .. } => Reply::Error(
                "this worker evaluates a problem; kernels need one started with --kernels".into(),
            ),
            Request::Linearize(fit) => match &mut evaluator {
                None => Reply::Error("linearize before init".into()),
                Some(g) => match g.linearize(&fit) {
                    Ok((sums, took)) => Reply::Linearized { sums, launch_us: took.as_micros() as u64 },
                    Err(GpuError::Fault(why)) => Reply::Fault { culprit: None, why },
                    Err(e) => Reply::Error(gpfarm_protocol::error_chain(&e)),
                },
            },
        }))
    })
}

/// The worker's loop: asks the parent-death signal, then reads requests from stdin until it
/// closes and writes each one's reply to stdout; `answer` may write frames of its own before it,
/// and returns `None` to end the worker (having written its last frame itself).
fn serve_frames(
    mut answer: impl FnMut(Request, &mut dyn std::io::Write) -> Result<Option<Reply>, GpuError>,
) -> Result<(), GpuError> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only registers a signal for this process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut output = BufWriter::new(std::io::stdout().lock());
    let profile = gpfarm_protocol::worker::profiling();
    loop {
        let (request, bytes, read) = match read_frame_timed::<Request>(&mut input) {
            Ok(r) => r,
            Err(FrameError::Closed) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let t = std::time::Instant::now();
        match answer(request, &mut output)? {
            Some(reply) => {
                let answered = t.elapsed();
                write_frame(&mut output, &reply)?;
                if profile {
                    eprintln!(
                        "gpfarm worker profile: a request of {bytes} bytes: read {:.3} ms, answered in {:.3} ms, \
                         the reply written in {:.3} ms",
                        read.as_secs_f64() * 1e3,
                        answered.as_secs_f64() * 1e3,
                        (t.elapsed() - answered).as_secs_f64() * 1e3
                    );
                }
            }
            None => return Ok(()),
        }
    }
}

/// Serves [`Request::KernelInit`] and [`Request::KernelRun`] on stdin/stdout until stdin
/// closes: a worker started with [`ProblemRef::Kernels`]. Exits with its parent; after a variant
/// faults it answers [`Reply::Fault`] and ends, its context being unusable.
pub fn serve_kernels() -> Result<(), GpuError> {
    let mut bench: Option<KernelBench> = None;
    serve_frames(|request, output| {
        Ok(Some(match request {
            Request::KernelInit(job) => {
                bench = None;
                match KernelBench::new(job) {
                    Ok(b) => {
                        let name = b.device_name();
                        bench = Some(b);
                        Reply::Ready { name }
                    }
                    Err(e) => Reply::Error(gpfarm_protocol::error_chain(&e)),
                }
            }
            Request::KernelRun { cubins } => match &mut bench {
                None => Reply::Error("kernel run before init".into()),
                Some(b) => {
                    for (k, cubin) in cubins.iter().enumerate() {
                        write_frame(output, &Reply::Started { individual: k as u64 })?;
                        match b.run(cubin) {
                            Ok(run) => write_frame(output, &Reply::Variant { index: k as u64, run })?,
                            Err(GpuError::Fault(why)) => {
                                // The context is unusable: the worker says who and ends.
                                write_frame(output, &Reply::Fault { culprit: Some(k as u64), why })?;
                                return Ok(None);
                            }
                            Err(e) => return Ok(Some(Reply::Error(gpfarm_protocol::error_chain(&e)))),
                        }
                    }
                    Reply::VariantsDone
                }
            },
            _ => Reply::Error("a kernel worker runs kernels only".into()),
        }))
    })
}

/// The reply to an evaluation.
fn reply(result: Result<GpuGeneration, GpuError>) -> Reply {
    match result {
        Ok(out) => Reply::Done {
            fitness: out.fitness,
            faults: out.faults.into_iter().map(|(i, w)| (i as u64, w)).collect(),
            load_us: out.load.as_micros() as u64,
            launch_us: out.launch.as_micros() as u64,
            readback_us: out.readback.as_micros() as u64,
        },
        Err(GpuError::FaultAt { individual, why }) => Reply::Fault { culprit: Some(individual as u64), why },
        Err(GpuError::Fault(why)) => Reply::Fault { culprit: None, why },
        Err(e) => Reply::Error(gpfarm_protocol::error_chain(&e)),
    }
}
