//! GPU evaluation in a worker process, so that a faulting kernel costs one individual, not the run.
//!
//! A kernel that faults while running (illegal address, trap) leaves a sticky error that poisons
//! every CUDA context of its process; no new context can be made there. So the evaluator lives in
//! a child process (`gpfarm gpu-worker`), driven over its stdin and stdout. When a generation
//! faults, the worker is replaced and the generation run again in careful mode, one kernel at a
//! time, which names the culprit; the culprit gets no fitness (the caller gives it the worst) with
//! the driver's error as the reason, the worker is replaced once more, and the rest is evaluated.
//!
//! Frames are a little-endian u64 length and a bincode message.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use bincode::{Decode, Encode};
use gpfarm_gp::Problem;

use crate::gpu::{CompiledUnit, GpuError, GpuEvaluator, GpuGeneration};

/// Largest frame either side accepts.
const MAX_FRAME: u64 = 4 << 30;

/// Which problem a worker evaluates: one of the built-in ones, or a problem directory.
#[derive(Debug, Clone)]
pub enum ProblemRef {
    /// A built-in problem, by name.
    Builtin(String),
    /// A problem directory.
    Dir(PathBuf),
}

impl ProblemRef {
    /// Loads the problem.
    pub fn load(&self) -> Result<Problem, gpfarm_gp::ProblemError> {
        match self {
            ProblemRef::Builtin(name) => Problem::builtin(name),
            ProblemRef::Dir(dir) => Problem::load(dir),
        }
    }

    /// The worker's command-line arguments naming this problem.
    fn args(&self) -> Vec<std::ffi::OsString> {
        match self {
            ProblemRef::Builtin(name) => vec!["--problem".into(), name.into()],
            ProblemRef::Dir(dir) => vec!["--problem-dir".into(), dir.into()],
        }
    }
}

#[derive(Debug, Encode, Decode)]
enum Request {
    Init { fitness_cubin: Vec<u8> },
    Evaluate { units: Vec<WireUnit>, n: u64, careful: bool, skip: Vec<u64> },
}

#[derive(Debug, Encode, Decode)]
struct WireUnit {
    cubin: Vec<u8>,
    kernels: Vec<String>,
    members: Vec<u64>,
}

#[derive(Debug, Encode, Decode)]
enum Reply {
    Ready {
        name: String,
    },
    Done {
        fitness: Vec<Option<f64>>,
        faults: Vec<(u64, String)>,
        load_us: u64,
        launch_us: u64,
        readback_us: u64,
    },
    /// The generation faulted; `culprit` in careful mode.
    Fault {
        culprit: Option<u64>,
        why: String,
    },
    Error(String),
}

fn write_frame<T: Encode>(w: &mut impl Write, msg: &T) -> std::io::Result<()> {
    let bytes = bincode::encode_to_vec(msg, bincode::config::standard())
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    w.write_all(&(bytes.len() as u64).to_le_bytes())?;
    w.write_all(&bytes)?;
    w.flush()
}

fn read_frame<T: Decode<()>>(r: &mut impl Read) -> std::io::Result<T> {
    let mut len = [0u8; 8];
    r.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!("frame of {len} bytes")));
    }
    let mut bytes = vec![0u8; len as usize];
    r.read_exact(&mut bytes)?;
    let (msg, _) = bincode::decode_from_slice(&bytes, bincode::config::standard())
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(msg)
}

/// The worker's side: serves requests on stdin/stdout until stdin closes. Exits with its parent.
pub fn serve(problem: &Problem) -> Result<(), GpuError> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only registers a signal for this process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let io = |e: std::io::Error| GpuError::Driver(format!("worker pipe: {e}"));
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut output = BufWriter::new(std::io::stdout().lock());
    let mut evaluator: Option<GpuEvaluator> = None;
    loop {
        let request = match read_frame::<Request>(&mut input) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        let reply = match request {
            Request::Init { fitness_cubin } => match GpuEvaluator::new(problem, fitness_cubin) {
                Ok(g) => {
                    let name = g.name.clone();
                    evaluator = Some(g);
                    Reply::Ready { name }
                }
                Err(e) => Reply::Error(e.to_string()),
            },
            Request::Evaluate { units, n, careful, skip } => match &mut evaluator {
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
                    match g.evaluate_with(&refs, n as usize, careful, &skip) {
                        Ok(out) => Reply::Done {
                            fitness: out.fitness,
                            faults: out.faults.into_iter().map(|(i, w)| (i as u64, w)).collect(),
                            load_us: out.load.as_micros() as u64,
                            launch_us: out.launch.as_micros() as u64,
                            readback_us: out.readback.as_micros() as u64,
                        },
                        Err(GpuError::FaultAt { individual, why }) => {
                            Reply::Fault { culprit: Some(individual as u64), why }
                        }
                        Err(GpuError::Fault(why)) => Reply::Fault { culprit: None, why },
                        Err(e) => Reply::Error(e.to_string()),
                    }
                }
            },
        };
        write_frame(&mut output, &reply).map_err(io)?;
    }
}

/// The parent's side: a GPU evaluator in a child process that survives faulting kernels.
pub struct GpuWorker {
    exe: PathBuf,
    problem: ProblemRef,
    fitness_cubin: Vec<u8>,
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// GPU name.
    pub name: String,
    /// Workers started after the first, over the whole run.
    pub restarts: usize,
}

impl GpuWorker {
    /// Starts `exe gpu-worker` for `problem`, which creates its context, uploads the cases and
    /// loads the fitness kernel.
    pub fn spawn(exe: &Path, problem: ProblemRef, fitness_cubin: Vec<u8>) -> Result<GpuWorker, GpuError> {
        let (child, stdin, stdout, name) = start(exe, &problem, &fitness_cubin)?;
        Ok(GpuWorker {
            exe: exe.to_path_buf(),
            problem,
            fitness_cubin,
            child,
            stdin,
            stdout,
            name,
            restarts: 0,
        })
    }

    /// Replaces the worker with a fresh one.
    fn restart(&mut self) -> Result<(), GpuError> {
        self.stop();
        let (child, stdin, stdout, _) = start(&self.exe, &self.problem, &self.fitness_cubin)?;
        (self.child, self.stdin, self.stdout) = (child, stdin, stdout);
        self.restarts += 1;
        Ok(())
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn ask(&mut self, request: &Request) -> Result<Reply, String> {
        write_frame(&mut self.stdin, request).map_err(|e| self.death(e))?;
        read_frame(&mut self.stdout).map_err(|e| self.death(e))
    }

    /// Why the worker stopped answering.
    fn death(&mut self, e: std::io::Error) -> String {
        std::thread::sleep(Duration::from_millis(10));
        match self.child.try_wait() {
            Ok(Some(status)) => format!("the GPU worker ended ({status})"),
            _ => format!("the GPU worker stopped answering: {e}"),
        }
    }

    /// Evaluates a generation like [`GpuEvaluator::evaluate`]. A kernel that faults is found
    /// (careful mode in a fresh worker), reported in `faults` with no fitness, and the rest of
    /// the generation is evaluated; the timings are those of the final, complete pass.
    pub fn evaluate(&mut self, units: &[CompiledUnit<'_>], n: usize) -> Result<GpuGeneration, GpuError> {
        let wire: Vec<WireUnit> = units
            .iter()
            .map(|u| WireUnit {
                cubin: u.cubin.to_vec(),
                kernels: u.kernels.to_vec(),
                members: u.members.iter().map(|&m| m as u64).collect(),
            })
            .collect();
        let mut request = Request::Evaluate { units: wire, n: n as u64, careful: false, skip: Vec::new() };
        let mut culprits: Vec<(usize, String)> = Vec::new();
        // Each pass either finishes, names a new culprit, or switches to careful mode.
        for _ in 0..n + 2 {
            let reply = self.ask(&request);
            let Request::Evaluate { careful, skip, .. } = &mut request else { unreachable!() };
            match reply {
                Ok(Reply::Done { fitness, faults, load_us, launch_us, readback_us }) => {
                    let mut faults: Vec<(usize, String)> =
                        faults.into_iter().map(|(i, w)| (i as usize, w)).collect();
                    faults.extend(culprits);
                    return Ok(GpuGeneration {
                        fitness,
                        faults,
                        load: Duration::from_micros(load_us),
                        launch: Duration::from_micros(launch_us),
                        readback: Duration::from_micros(readback_us),
                    });
                }
                Ok(Reply::Fault { culprit: Some(i), why }) => {
                    skip.push(i);
                    culprits.push((i as usize, format!("kernel faulted: {why}")));
                }
                Ok(Reply::Fault { culprit: None, why }) | Err(why) => {
                    if *careful {
                        return Err(GpuError::Fault(format!("{why}, even one kernel at a time")));
                    }
                    *careful = true;
                }
                Ok(Reply::Error(e)) => return Err(GpuError::Driver(e)),
                Ok(Reply::Ready { .. }) => {
                    return Err(GpuError::Driver("unexpected reply from the GPU worker".into()));
                }
            }
            self.restart()?;
        }
        Err(GpuError::Fault("the GPU worker kept faulting".into()))
    }
}

impl Drop for GpuWorker {
    fn drop(&mut self) {
        self.stop();
    }
}

type Started = (Child, BufWriter<ChildStdin>, BufReader<ChildStdout>, String);

/// Starts a worker and waits until it has made its context and loaded the fitness kernel. Its
/// PR_SET_PDEATHSIG fires when the spawning *thread* ends, so this runs on the thread that owns
/// the [`GpuWorker`].
fn start(exe: &Path, problem: &ProblemRef, fitness_cubin: &[u8]) -> Result<Started, GpuError> {
    let mut child = Command::new(exe)
        .arg("gpu-worker")
        .args(problem.args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| GpuError::Driver(format!("cannot start the GPU worker {}: {e}", exe.display())))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        unreachable!("both pipes were requested");
    };
    let (mut stdin, mut stdout) = (BufWriter::new(stdin), BufReader::new(stdout));
    let init = Request::Init { fitness_cubin: fitness_cubin.to_vec() };
    let reply = write_frame(&mut stdin, &init).and_then(|()| read_frame::<Reply>(&mut stdout));
    if let Ok(Reply::Ready { name }) = reply {
        return Ok((child, stdin, stdout, name));
    }
    let _ = child.kill();
    let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
    Err(GpuError::Driver(match reply {
        Ok(Reply::Error(e)) => format!("the GPU worker could not start: {e}"),
        other => format!("the GPU worker could not start ({status}): {other:?}"),
    }))
}
