//! The GPU evaluation worker's wire: what its parent asks, what it answers, and the frames both
//! are carried in over the worker's stdin and stdout.
//!
//! A frame is a little-endian u64 length and a bincode message. Reading never trusts the peer:
//! a frame longer than [`MAX_WORKER_FRAME`] is refused before anything is allocated, decoding is
//! bounded the same way, and malformed bytes are an error, never a panic. This module knows no
//! process and no GPU; it is shared by the worker (`gpfarm-kernels`) and its parent
//! (`gpfarm-client`).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bincode::config::{self, Configuration, Limit, LittleEndian, Varint};
use bincode::{Decode, Encode};
use thiserror::Error;

use crate::message::MessageError;
use crate::raw::raw_message;

pub use crate::limits::MAX_WORKER_FRAME;

type Config = Configuration<LittleEndian, Varint, Limit<{ MAX_WORKER_FRAME as usize }>>;

fn config() -> Config {
    config::standard().with_limit::<{ MAX_WORKER_FRAME as usize }>()
}

/// Which problem a worker evaluates: one of the built-in ones, a problem directory, or a
/// problem held in memory. The first two travel on the worker's command line; a problem in
/// memory travels in every [`Request::Init`] the worker is sent.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum ProblemRef {
    /// A built-in problem, by name.
    Builtin(String),
    /// A problem directory.
    Dir(PathBuf),
    /// A problem's files held in memory (a fit's arrays, no directory written).
    Memory(Arc<ProblemFiles>),
    /// No problem: the worker runs a user's kernel and its variants ([`Request::KernelInit`]).
    Kernels,
}

impl ProblemRef {
    /// The worker's command-line arguments naming this problem (`--problem NAME`,
    /// `--problem-dir DIR`, or `--problem-in-init` for a problem in memory).
    pub fn args(&self) -> Vec<OsString> {
        match self {
            ProblemRef::Builtin(name) => vec!["--problem".into(), name.into()],
            ProblemRef::Dir(dir) => vec!["--problem-dir".into(), dir.into()],
            ProblemRef::Memory(_) => vec!["--problem-in-init".into()],
            ProblemRef::Kernels => vec!["--kernels".into()],
        }
    }

    /// Whether the worker learns this problem from its command line; else every
    /// [`Request::Init`] it is sent must carry it.
    pub fn on_command_line(&self) -> bool {
        !matches!(self, ProblemRef::Memory(_))
    }
}

/// The files of a problem directory, held in memory: what `Problem::load` would read, with
/// the cases as `cases.json`'s text or `cases.npy`'s bytes. `origin` stands for the directory
/// in error messages.
#[derive(Clone, PartialEq, Eq, Encode, Decode)]
pub struct ProblemFiles {
    /// What error messages name the problem by (e.g. `memory:regression`).
    pub origin: String,
    /// `problem.toml`.
    pub toml: String,
    /// `grammar.bnf`.
    pub grammar: String,
    /// `template.cu`.
    pub template: String,
    /// The cases.
    pub cases: CasesFile,
}

/// A problem's cases as one of the two files that hold them.
#[derive(Clone, PartialEq, Eq, Encode, Decode)]
pub enum CasesFile {
    /// `cases.json`'s text.
    Json(String),
    /// `cases.npy`'s bytes.
    Npy(Vec<u8>),
}

impl std::fmt::Debug for ProblemFiles {
    /// The origin and the sizes: the cases may be many megabytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, bytes) = match &self.cases {
            CasesFile::Json(text) => ("cases.json", text.len()),
            CasesFile::Npy(bytes) => ("cases.npy", bytes.len()),
        };
        write!(f, "ProblemFiles({}, {kind} of {bytes} bytes)", self.origin)
    }
}

/// What the parent asks of the worker.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub enum Request {
    /// Make the CUDA context, upload the cases and load the fitness kernel and the interpreter,
    /// those of the two the run uses.
    Init {
        /// CUBIN of the problem's fitness reduction (for compiled individuals).
        fitness_cubin: Option<Vec<u8>>,
        /// CUBIN of the problem's interpreter.
        interpreter_cubin: Option<Vec<u8>>,
        /// CUBIN of the problem's fitting kernels (free parameters fitted on the GPU), one module
        /// per kernel width or one for all; empty: none.
        fit_cubins: Vec<Vec<u8>>,
        /// The fitting kernels run on this many evenly spaced cases (0: all).
        fit_cases: u64,
        /// Another problem than the one on the worker's command line, for a worker kept for
        /// another run: it drops what it had and loads this one in the same process.
        problem: Option<ProblemRef>,
    },
    /// Evaluate one generation.
    Evaluate {
        /// Its compiled units.
        units: Vec<WireUnit>,
        /// Number of individuals in the generation.
        n: u64,
        /// One kernel at a time, synchronising after each, so that a fault names its culprit.
        careful: bool,
        /// Individuals not to launch (culprits found earlier).
        skip: Vec<u64>,
        /// The free parameters' values, `value_stride` per individual (empty: none).
        values: Vec<f32>,
        /// Values per individual (0: none).
        value_stride: u64,
    },
    /// Interpret one population: one program per individual, in order.
    Interpret(WirePopulation),
    /// The least-squares sums of programs with free parameters at the given values (the
    /// worker must have the fitting kernel).
    Linearize(WireFit),
    /// Fit the free parameters of every start of `fit` (a program and its starting values) by
    /// Levenberg–Marquardt in the worker, `iterations` iterations, each one launch of the
    /// fitting kernel for every start still going: one request where [`Request::Linearize`]
    /// takes one per iteration.
    Fit {
        /// The starts.
        fit: WireFit,
        /// Iterations per start.
        iterations: u32,
        /// CUBIN of the compiled fitting units the starts name ([`WireFit::unit`]), in order.
        code: Vec<Vec<u8>>,
    },
    /// Readies a worker started with [`ProblemRef::Kernels`]: uploads the job's inputs, loads
    /// and runs the original once for its reference outputs. Answered by [`Reply::Ready`].
    KernelInit(KernelJob),
    /// Runs, checks and times each variant (CUBIN of the same kernel): one [`Reply::Started`]
    /// before each, one [`Reply::Variant`] after it, then [`Reply::VariantsDone`]. A variant that
    /// faults gets [`Reply::Fault`] naming it, and the worker can do no more.
    KernelRun {
        /// The variants' CUBINs.
        cubins: Vec<Vec<u8>>,
    },
}

/// The element type of a kernel's buffer or scalar argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Encode, Decode, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElemType {
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// `int`.
    I32,
    /// `unsigned int`.
    U32,
    /// `long long`.
    I64,
    /// `unsigned char`.
    U8,
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::F32 | ElemType::I32 | ElemType::U32 => 4,
            ElemType::F64 | ElemType::I64 => 8,
            ElemType::U8 => 1,
        }
    }
}

/// One argument of a kernel, in the kernel's order.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum WireArg {
    /// A device buffer (the kernel gets its address), filled with `data` before every launch.
    Buffer {
        /// Its elements' type.
        elem: ElemType,
        /// Its contents, little-endian.
        data: Vec<u8>,
        /// Whether it is compared with the original's after a variant ran.
        output: bool,
    },
    /// A value passed as it is.
    Scalar {
        /// Its type.
        elem: ElemType,
        /// Its bits, little-endian, in the low bytes.
        bits: u64,
    },
}

/// How a variant's outputs are compared with the original's: the error it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Encode, Decode, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorMeasure {
    /// The share of output elements whose bits differ (0 when every bit is the original's).
    Exact,
    /// The largest absolute difference (integers compared as numbers).
    MaxAbs,
    /// The largest difference relative to the original's value (`|v - o| / max(|o|, 1e-30)`).
    MaxRel,
}

/// A kernel to run with its variants: the original's CUBIN, the kernel's name, its arguments and
/// launch, for [`Request::KernelInit`].
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct KernelJob {
    /// The original's CUBIN; its outputs are the reference.
    pub original: Vec<u8>,
    /// The kernel's name (the same in every variant).
    pub entry: String,
    /// Its arguments.
    pub args: Vec<WireArg>,
    /// Blocks in the grid.
    pub grid: [u32; 3],
    /// Threads per block.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
    /// How outputs are compared.
    pub measure: ErrorMeasure,
    /// Timed launches of each variant, each beside one of the original.
    pub repeats: u32,
}

/// What became of one variant on the GPU.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub enum VariantRun {
    /// It ran.
    Ran {
        /// Its error against the original's outputs (the job's measure); infinite where an
        /// output is NaN in one and not the other.
        error: f64,
        /// Whether it wrote into the guard bytes after one of its buffers.
        out_of_bounds: bool,
        /// Its timed launches, milliseconds.
        variant_ms: Vec<f32>,
        /// The original's, each launched just before the variant's of the same index.
        original_ms: Vec<f32>,
    },
    /// The driver refused its module or its launch (nothing ran; the context is fine).
    Refused(String),
}

/// Programs with free parameters and their values, for the fitting kernel: each program's
/// bytecode as the interpreter's fitting kernel reads it (parameters marked), one after the other.
#[derive(Debug, Clone, PartialEq)]
pub struct WireFit {
    /// All programs' words.
    pub words: Vec<u32>,
    /// The first word of each program.
    pub offsets: Vec<u32>,
    /// All programs' parameter values.
    pub params: Vec<f32>,
    /// The first value of each program.
    pub param_offsets: Vec<u32>,
    /// Each program's number of parameters.
    pub nparams: Vec<i32>,
    /// Loop iterations allowed per case before a program fails.
    pub max_steps: u64,
    /// Each program's compiled fitting kernel: the index of its unit among the compiled fitting
    /// units loaded for this fit, or -1 where the interpreter's fitting kernels run its words.
    pub unit: Vec<i32>,
    /// Each program's member of its compiled unit (0 where it has none).
    pub member: Vec<u32>,
    /// Whether each program runs in its width's small-stack fitting kernel (the one that pushed
    /// it checked that it fits there: `gpfarm_kernels::interpreter::fits_small`).
    pub small: Vec<bool>,
}

impl WireFit {
    /// No programs yet, `max_steps` loop iterations allowed per case.
    pub fn new(max_steps: u64) -> WireFit {
        WireFit {
            words: Vec::new(),
            offsets: Vec::new(),
            params: Vec::new(),
            param_offsets: Vec::new(),
            nparams: Vec::new(),
            max_steps,
            unit: Vec::new(),
            member: Vec::new(),
            small: Vec::new(),
        }
    }

    /// Adds a program the interpreter's fitting kernels run: its `words` and its parameters'
    /// `values`.
    pub fn push(&mut self, words: &[u32], values: &[f32]) {
        self.push_with(words, values, false, None);
    }

    /// Adds a program: its `words`, its parameters' `values`, whether the interpreter's
    /// small-stack kernel runs it ([`WireFit::small`]), and its compiled fitting kernel where it
    /// has one (its unit's index and its member there; `None`: the interpreter's).
    pub fn push_with(&mut self, words: &[u32], values: &[f32], small: bool, code: Option<(u32, u32)>) {
        self.offsets.push(self.words.len() as u32);
        self.words.extend_from_slice(words);
        self.param_offsets.push(self.params.len() as u32);
        self.params.extend_from_slice(values);
        self.nparams.push(values.len() as i32);
        self.unit.push(code.map_or(-1, |(u, _)| u as i32));
        self.member.push(code.map_or(0, |(_, m)| m));
        self.small.push(small);
    }

    /// Adds program `k` of `other` (its words, kernels and all) with the parameter values
    /// `values`.
    pub fn push_from(&mut self, other: &WireFit, k: usize, values: &[f32]) {
        let small = other.small.get(k).copied().unwrap_or(false);
        self.push_with(other.words_of(k), values, small, other.code_of(k));
    }

    /// Program `k`'s compiled fitting kernel: its unit and member (`None`: the interpreter's).
    pub fn code_of(&self, k: usize) -> Option<(u32, u32)> {
        let unit = *self.unit.get(k)?;
        (unit >= 0).then(|| (unit as u32, self.member.get(k).copied().unwrap_or(0)))
    }

    /// Program `k`'s words.
    pub fn words_of(&self, k: usize) -> &[u32] {
        let end = self.offsets.get(k + 1).map_or(self.words.len(), |&e| e as usize);
        &self.words[self.offsets[k] as usize..end]
    }

    /// Program `k`'s parameter values.
    pub fn values_of(&self, k: usize) -> &[f32] {
        let at = self.param_offsets[k] as usize;
        &self.params[at..at + self.nparams[k].max(0) as usize]
    }
}

/// A population's bytecode for the interpreter: every program's words one after the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WirePopulation {
    /// All programs' words.
    pub words: Vec<u32>,
    /// The first word of each program, with the interpreter's flags (no jump, deep stack) in
    /// its top bits.
    pub offsets: Vec<u32>,
    /// Loop iterations allowed per case before a program fails.
    pub max_steps: u64,
}

/// One compiled unit as it crosses the pipe.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct WireUnit {
    /// Its CUBIN.
    pub cubin: Vec<u8>,
    /// Kernel names, one per member.
    pub kernels: Vec<String>,
    /// Index of each member among the generation's individuals.
    pub members: Vec<u64>,
}

impl From<&CompiledUnit<'_>> for WireUnit {
    fn from(u: &CompiledUnit<'_>) -> Self {
        WireUnit {
            cubin: u.cubin.to_vec(),
            kernels: u.kernels.to_vec(),
            members: u.members.iter().map(|&m| m as u64).collect(),
        }
    }
}

/// What a [`Request::Fit`] found, per start in its order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fitted {
    /// Each start's best values, one after the other (as the request's `params`).
    pub params: Vec<f32>,
    /// Their sums of squares.
    pub sse: Vec<f64>,
    /// The sum of squares at each start's starting values.
    pub first_sse: Vec<f64>,
    /// How many launches of the fitting kernels ran each start: its first (with derivatives),
    /// a plain run per trial and one more with derivatives per trial whose plain run was lower
    /// and after which the start went on; at most 2 × the iterations (1 with none).
    pub launches: Vec<u32>,
    /// The worker's time for it (launches, copies, the small solves), microseconds.
    pub took_us: u64,
}

/// What the worker answers.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub enum Reply {
    /// Answer to [`Request::Init`]: the GPU's name.
    Ready {
        /// The GPU's name.
        name: String,
    },
    /// The generation was evaluated.
    Done {
        /// Per individual: its raw fitness, or `None`.
        fitness: Vec<Option<f64>>,
        /// Individuals whose launch the driver refused, with its error.
        faults: Vec<(u64, String)>,
        /// Loading modules, microseconds.
        load_us: u64,
        /// Launching until the device finished, microseconds.
        launch_us: u64,
        /// Copying fitness back, microseconds.
        readback_us: u64,
    },
    /// In careful mode, sent before each individual's kernel is launched (the final reply comes
    /// after the last one): a parent whose deadline passes knows whose kernel does not end.
    Started {
        /// The individual whose kernel is launched next.
        individual: u64,
    },
    /// The generation faulted; `culprit` in careful mode. The worker's GPU is now unusable.
    Fault {
        /// The individual whose kernel faulted, when known.
        culprit: Option<u64>,
        /// The driver's error.
        why: String,
    },
    /// The least-squares sums of each program of a [`Request::Linearize`], one after the other
    /// (the fitting kernel's layout).
    Linearized {
        /// The sums.
        sums: Vec<f64>,
        /// Launching until the device finished and copying back, microseconds.
        launch_us: u64,
    },
    /// The outcome of a [`Request::Fit`].
    Fitted(Fitted),
    /// What variant `index` of a [`Request::KernelRun`] did.
    Variant {
        /// Its index in the request.
        index: u64,
        /// What it did.
        run: VariantRun,
    },
    /// Every variant of a [`Request::KernelRun`] was run.
    VariantsDone,
    /// The request could not be served (no GPU, evaluate before init, ...).
    Error(String),
}

/// Where a member's code is in its CUBIN, as [`CompiledUnit::kernels`] writes it: `NAME`, a
/// kernel of its own ([`crate::Shape::Kernels`]), or `NAME@J`, branch `J` of the switch kernel
/// `NAME` ([`crate::Shape::Switch`]). `@` cannot occur in a C identifier, so the two never mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelRef<'a> {
    /// The kernel's name.
    pub kernel: &'a str,
    /// The branch of a switch kernel; `None` for a kernel of its own.
    pub branch: Option<u32>,
}

impl<'a> KernelRef<'a> {
    /// Reads `NAME` or `NAME@J`; `None` when `J` is not a number.
    pub fn parse(text: &'a str) -> Option<KernelRef<'a>> {
        match text.split_once('@') {
            None => Some(KernelRef { kernel: text, branch: None }),
            Some((kernel, j)) => Some(KernelRef { kernel, branch: Some(j.parse().ok()?) }),
        }
    }

    /// The text of branch `branch` of switch kernel `kernel`.
    pub fn switch_branch(kernel: &str, branch: usize) -> String {
        format!("{kernel}@{branch}")
    }
}

/// One compiled unit of a generation, borrowed from the caller.
#[derive(Debug, Clone, Copy)]
pub struct CompiledUnit<'a> {
    /// Its CUBIN.
    pub cubin: &'a [u8],
    /// Where each member's code is, one [`KernelRef`] text per member.
    pub kernels: &'a [String],
    /// Index of each member among the generation's individuals.
    pub members: &'a [usize],
}

/// Timings and outcome of one generation on the GPU.
#[derive(Debug, Clone, Default)]
pub struct GpuGeneration {
    /// Per individual: its raw fitness value, or `None` (no CUBIN, or its kernel faulted).
    pub fitness: Vec<Option<f64>>,
    /// Individuals whose launch the driver refused, whose kernel faulted, or whose kernel did not
    /// end before the deadline, with the reason.
    pub faults: Vec<(usize, String)>,
    /// Of `faults`, the individuals whose kernel did not end before the deadline.
    pub timeouts: Vec<usize>,
    /// Loading modules and looking up kernels.
    pub load: Duration,
    /// Launching every individual and the reduction, until the device finished.
    pub launch: Duration,
    /// Copying fitness back.
    pub readback: Duration,
}

/// A frame that could not be written or read.
#[derive(Debug, Error)]
pub enum FrameError {
    /// The peer closed the pipe before a new frame began: a clean end.
    #[error("the pipe was closed")]
    Closed,
    /// The pipe failed mid-frame.
    #[error("the pipe failed")]
    Io(#[from] std::io::Error),
    /// The length prefix claims more than any frame may hold.
    #[error("frame of {0} bytes is larger than the {MAX_WORKER_FRAME}-byte limit")]
    TooLarge(u64),
    /// The frame's bytes are not a valid message.
    #[error(transparent)]
    Message(#[from] MessageError),
}

// The bulk messages' arrays cross the pipe as raw bytes ([`crate::raw`]); the rest as bincode
// writes it.

raw_message!(WireFit {
    raw words,
    raw offsets,
    raw params,
    raw param_offsets,
    raw nparams,
    plain max_steps,
    raw unit,
    raw member,
    plain small,
});

raw_message!(WirePopulation { raw words, raw offsets, plain max_steps });

raw_message!(Fitted { raw params, raw sse, raw first_sse, raw launches, plain took_us });

/// Whether `GPFARM_FIT_PROFILE` is set: the GPU worker and its client then time their frames and
/// phases and write the times to stderr (a diagnostic; the fitting kernels' launches are then
/// each waited for, which slows the fit).
pub fn profiling() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("GPFARM_FIT_PROFILE").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// Writes one frame and flushes it.
pub fn write_frame<T: Encode>(w: &mut (impl Write + ?Sized), msg: &T) -> Result<(), FrameError> {
    let bytes = bincode::encode_to_vec(msg, config()).map_err(MessageError::from)?;
    w.write_all(&(bytes.len() as u64).to_le_bytes())?;
    w.write_all(&bytes)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame; [`FrameError::Closed`] when the pipe ended cleanly before it.
pub fn read_frame<T: Decode<()>>(r: &mut impl Read) -> Result<T, FrameError> {
    read_frame_timed(r).map(|(msg, _, _)| msg)
}

/// As [`read_frame`], with the frame's length in bytes and the time from its length to its
/// message (reading the rest and decoding it).
pub fn read_frame_timed<T: Decode<()>>(r: &mut impl Read) -> Result<(T, usize, Duration), FrameError> {
    let mut len = [0u8; 8];
    let mut got = 0;
    while got < len.len() {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let begun = std::time::Instant::now();
    let len = u64::from_le_bytes(len);
    if len > MAX_WORKER_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    // Room for the frame at once (up to 16 MiB before any byte of it arrives), not grown by
    // doubling as it comes.
    let mut bytes = Vec::with_capacity(len.min(1 << 24) as usize);
    r.take(len).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != len {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    let (msg, used) = bincode::decode_from_slice(&bytes, config()).map_err(MessageError::from)?;
    if used != bytes.len() {
        return Err(MessageError::Trailing(bytes.len() - used).into());
    }
    Ok((msg, bytes.len(), begun.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_fit_request_gives_back_each_program_s_words_and_values() {
        let mut fit = WireFit::new(7);
        fit.push(&[1, 2, 3], &[0.5]);
        fit.push(&[4], &[]);
        fit.push(&[5, 6], &[1.0, -2.0]);
        assert_eq!((fit.words_of(0), fit.values_of(0)), (&[1, 2, 3][..], &[0.5f32][..]));
        assert_eq!((fit.words_of(1), fit.values_of(1)), (&[4][..], &[][..]));
        assert_eq!((fit.words_of(2), fit.values_of(2)), (&[5, 6][..], &[1.0f32, -2.0][..]));
        assert_eq!(
            (fit.offsets.as_slice(), fit.param_offsets.as_slice(), fit.nparams.as_slice()),
            (&[0, 3, 4][..], &[0, 1, 1][..], &[1, 0, 2][..])
        );
    }

    fn sample() -> Request {
        Request::Evaluate {
            units: vec![WireUnit { cubin: vec![0x7f, b'E'], kernels: vec!["k0".into()], members: vec![3] }],
            n: 4,
            careful: true,
            skip: vec![1],
            values: vec![0.5, -1.25],
            value_stride: 2,
        }
    }

    #[test]
    fn frames_round_trip() {
        let mut pipe = Vec::new();
        write_frame(&mut pipe, &sample()).unwrap();
        let reply = Reply::Fault { culprit: Some(2), why: "illegal address".into() };
        write_frame(&mut pipe, &reply).unwrap();
        let mut r = pipe.as_slice();
        assert_eq!(read_frame::<Request>(&mut r).unwrap(), sample());
        assert_eq!(read_frame::<Reply>(&mut r).unwrap(), reply);
        assert!(matches!(read_frame::<Reply>(&mut r), Err(FrameError::Closed)));
    }

    #[test]
    fn a_frame_cut_short_is_an_error_not_a_clean_end() {
        let mut pipe = Vec::new();
        write_frame(&mut pipe, &sample()).unwrap();
        for cut in 1..pipe.len() {
            let got = read_frame::<Request>(&mut &pipe[..cut]);
            assert!(matches!(got, Err(FrameError::Io(_))), "prefix of {cut}: {got:?}");
        }
    }

    #[test]
    fn an_oversized_length_is_refused_before_allocating() {
        let bytes = u64::MAX.to_le_bytes();
        assert!(matches!(read_frame::<Reply>(&mut &bytes[..]), Err(FrameError::TooLarge(_))));
    }

    /// The messages whose arrays cross as raw bytes: a fit, a population and a fit's outcome,
    /// with values whose bits a lossy encoding would change (NaN payloads, -0.0, subnormals).
    fn bulk() -> (Request, Request, Reply) {
        let mut fit = WireFit::new(9);
        fit.push_with(&[1, u32::MAX, 0x8000_0000], &[f32::from_bits(0x7fc0_1234), -0.0, 1e-45], true, None);
        fit.push_with(&[7], &[], false, Some((2, 5)));
        let population =
            WirePopulation { words: vec![3, 0, u32::MAX], offsets: vec![0, 1 | 1 << 31], max_steps: 77 };
        let fitted = Fitted {
            params: vec![f32::NAN, -3.5, f32::MIN_POSITIVE],
            sse: vec![f64::from_bits(0x7ff8_0000_0000_0abc), -0.0],
            first_sse: vec![f64::INFINITY, 2.0],
            launches: vec![0, u32::MAX],
            took_us: 1234,
        };
        (
            Request::Fit { fit, iterations: 10, code: vec![vec![1, 2, 3]] },
            Request::Interpret(population),
            Reply::Fitted(fitted),
        )
    }

    /// Equal bit for bit (NaN is not equal to itself as a float).
    fn same_bits<T: std::fmt::Debug>(a: &T, b: &T) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    #[test]
    fn bulk_arrays_round_trip_bit_for_bit() {
        let (fit, population, fitted) = bulk();
        let mut pipe = Vec::new();
        write_frame(&mut pipe, &fit).unwrap();
        write_frame(&mut pipe, &population).unwrap();
        write_frame(&mut pipe, &fitted).unwrap();
        let mut r = pipe.as_slice();
        let back = read_frame::<Request>(&mut r).unwrap();
        let Request::Fit { fit: got, .. } = &back else { panic!("{back:?}") };
        let Request::Fit { fit: sent, .. } = &fit else { unreachable!() };
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got.params), bits(&sent.params));
        assert!(same_bits(&back, &fit));
        assert_eq!(read_frame::<Request>(&mut r).unwrap(), population);
        let back = read_frame::<Reply>(&mut r).unwrap();
        let (Reply::Fitted(got), Reply::Fitted(sent)) = (&back, &fitted) else { panic!("{back:?}") };
        assert_eq!(got.sse[0].to_bits(), sent.sse[0].to_bits());
        assert_eq!(got.params[0].to_bits(), sent.params[0].to_bits());
        assert!(same_bits(&back, &fitted));
        // Cut anywhere, each frame is an error, not a message.
        for frame in [&fit, &population] {
            let mut pipe = Vec::new();
            write_frame(&mut pipe, frame).unwrap();
            for cut in 1..pipe.len() {
                assert!(read_frame::<Request>(&mut &pipe[..cut]).is_err(), "prefix of {cut}");
            }
        }
    }

    #[test]
    fn an_array_longer_than_its_frame_is_refused_before_allocating() {
        // An interpret request whose words claim 2^40 elements in a frame of a few bytes.
        let mut body = Vec::new();
        bincode::encode_into_std_write(2u32, &mut body, config()).unwrap();
        bincode::encode_into_std_write(1u64 << 40, &mut body, config()).unwrap();
        body.extend_from_slice(&[0; 16]);
        let mut frame = (body.len() as u64).to_le_bytes().to_vec();
        frame.extend(body);
        let got = read_frame::<Request>(&mut frame.as_slice());
        assert!(matches!(got, Err(FrameError::Message(_)) | Err(FrameError::Io(_))), "{got:?}");
    }

    #[test]
    fn problems_name_themselves_on_the_command_line() {
        assert_eq!(ProblemRef::Builtin("keijzer6".into()).args(), ["--problem", "keijzer6"]);
        assert_eq!(ProblemRef::Dir("/p".into()).args(), ["--problem-dir", "/p"]);
        let files = ProblemFiles {
            origin: "memory:m".into(),
            toml: "name = \"m\"".into(),
            grammar: "<e> ::= x".into(),
            template: String::new(),
            cases: CasesFile::Npy(vec![0x93, b'N', b'U', b'M', b'P', b'Y']),
        };
        let memory = ProblemRef::Memory(Arc::new(files));
        assert_eq!(memory.args(), ["--problem-in-init"]);
        assert!(!memory.on_command_line() && ProblemRef::Kernels.on_command_line());
        // It travels in the readying request, bytes and all.
        let init = Request::Init {
            fitness_cubin: None,
            interpreter_cubin: None,
            fit_cubins: Vec::new(),
            fit_cases: 0,
            problem: Some(memory),
        };
        let mut pipe = Vec::new();
        write_frame(&mut pipe, &init).unwrap();
        assert_eq!(read_frame::<Request>(&mut pipe.as_slice()).unwrap(), init);
        assert!(format!("{init:?}").contains("ProblemFiles(memory:m, cases.npy of 6 bytes)"));
    }

    proptest! {
        #[test]
        fn reading_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = read_frame::<Request>(&mut bytes.as_slice());
            let _ = read_frame::<Reply>(&mut bytes.as_slice());
        }
    }
}
