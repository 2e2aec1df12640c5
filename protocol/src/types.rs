//! Values carried by requests and responses: what to compile, how, and what came of it.

use std::fmt;
use std::str::FromStr;

use bincode::{Decode, Encode};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A real GPU architecture, `sm_XX` (NVRTC gives CUBIN only for real architectures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Encode, Decode, Serialize, Deserialize)]
pub struct SmArch(pub u32);

/// Why an architecture string was refused.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("{0:?} is not a GPU architecture: write sm_XX, e.g. sm_90 for H100/H200")]
pub struct BadArch(pub String);

impl SmArch {
    /// The architecture of the H100 and H200.
    pub const SM_90: SmArch = SmArch(90);

    /// `-arch=sm_XX`, the NVRTC and nvcc option for CUBIN.
    pub fn cubin_option(self) -> String {
        format!("-arch=sm_{}", self.0)
    }

    /// `-arch=compute_XX`, the NVRTC option for PTX.
    pub fn ptx_option(self) -> String {
        format!("-arch=compute_{}", self.0)
    }
}

impl FromStr for SmArch {
    type Err = BadArch;
    fn from_str(s: &str) -> Result<Self, BadArch> {
        let digits = s.strip_prefix("sm_").ok_or_else(|| BadArch(s.to_owned()))?;
        match digits.parse::<u32>() {
            Ok(n) if (30..=999).contains(&n) && !digits.starts_with('0') => Ok(SmArch(n)),
            _ => Err(BadArch(s.to_owned())),
        }
    }
}

impl fmt::Display for SmArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.0)
    }
}

/// How NVRTC's output becomes a CUBIN, for CUDA C units (a compile option, not a route: PTX
/// units are always linked by nvJitLink, and the interpreter and the CPU compile nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Encode, Decode, Serialize, Deserialize)]
pub enum CompileMode {
    /// NVRTC straight to CUBIN (`nvrtcGetCUBIN`): no driver, no GPU needed. The fast path.
    #[default]
    Cubin,
    /// The paper's path: NVRTC to PTX, then PTX to CUBIN by the driver's linker in the daemon's
    /// own CUDA context. Needs a GPU.
    PtxJit,
}

impl FromStr for CompileMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cubin" => Ok(CompileMode::Cubin),
            "ptx-jit" => Ok(CompileMode::PtxJit),
            _ => Err(format!("unknown compile mode {s:?}: use cubin or ptx-jit")),
        }
    }
}

impl fmt::Display for CompileMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CompileMode::Cubin => "cubin",
            CompileMode::PtxJit => "ptx-jit",
        })
    }
}

/// Everything about a compile that is not the source.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Encode, Decode, Serialize, Deserialize)]
pub struct CompileOptions {
    /// Target architecture.
    pub arch: SmArch,
    /// CUBIN directly, or PTX then driver JIT.
    pub mode: CompileMode,
    /// Extra NVRTC options, passed as given (e.g. `--use_fast_math`, `-default-device`). CUDA C
    /// units only.
    pub flags: Vec<String>,
    /// Extra nvJitLink options for PTX units ([`Language::Ptx`]), passed as given after
    /// `-arch=sm_XX` (e.g. `-O0`, `-Xptxas=-O1`). Empty by default.
    pub link_flags: Vec<String>,
}

impl CompileOptions {
    /// CUBIN for `arch` with no extra options.
    pub fn cubin(arch: SmArch) -> Self {
        CompileOptions { arch, mode: CompileMode::Cubin, flags: Vec::new(), link_flags: Vec::new() }
    }
}

/// How a phenotype gets its fitness: the one value every layer (command line, Python, engine,
/// evaluator) passes along. Every route gives the same fitness on the GPU, bit for bit; the CPU
/// reference evaluator is the oracle they are all tested against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Encode, Decode, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// CUDA C rendered from the problem's template, compiled to CUBIN by NVRTC on the compile
    /// daemons (the paper's route; any CUDA C a template allows).
    #[default]
    Nvrtc,
    /// PTX emitted straight from the phenotype's typed tree, assembled and linked with the math
    /// library ([`crate::ptx_math`]) by nvJitLink on the compile daemons.
    Ptx,
    /// Bytecode run by one GPU interpreter kernel for the whole population: nothing is compiled
    /// per individual and no daemon is started.
    Interpreter,
    /// The CPU reference evaluator walks the typed tree: nothing is compiled, no GPU is used.
    Cpu,
}

impl Route {
    /// Every route, in the order the command line lists them.
    pub const ALL: [Route; 4] = [Route::Nvrtc, Route::Ptx, Route::Interpreter, Route::Cpu];

    /// The name used on the command line, in Python and in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Nvrtc => "nvrtc",
            Route::Ptx => "ptx",
            Route::Interpreter => "interpreter",
            Route::Cpu => "cpu",
        }
    }

    /// The language of the units a compile route sends to the daemons; `None` for the routes
    /// that compile no individual.
    pub fn language(self) -> Option<Language> {
        match self {
            Route::Nvrtc => Some(Language::CudaC),
            Route::Ptx => Some(Language::Ptx),
            Route::Interpreter | Route::Cpu => None,
        }
    }

    /// Whether individuals are compiled, one unit at a time, on the compile daemons.
    pub fn compiles_individuals(self) -> bool {
        self.language().is_some()
    }
}

impl FromStr for Route {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "interp" {
            return Ok(Route::Interpreter);
        }
        Route::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown route {s:?}: use nvrtc, ptx, interpreter or cpu"))
    }
}

impl Route {
    /// A route as the command line and Python take it: `auto` (`None`: the engine chooses) or a
    /// route's name.
    pub fn parse_choice(s: &str) -> Result<Option<Route>, String> {
        if s == "auto" {
            return Ok(None);
        }
        s.parse()
            .map(Some)
            .map_err(|_| format!("unknown route {s:?}: use auto, nvrtc, ptx, interpreter or cpu"))
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a unit's source is, so a compiler knows which tool takes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Encode, Decode, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// CUDA C, for NVRTC (or nvcc).
    #[default]
    CudaC,
    /// PTX, for nvJitLink.
    Ptx,
}

impl Language {
    /// The file extension of a unit in this language: `cu` or `ptx`.
    pub fn extension(self) -> &'static str {
        match self {
            Language::CudaC => "cu",
            Language::Ptx => "ptx",
        }
    }
}

/// How a unit holds its individuals' code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// One kernel per individual, launched once each.
    #[default]
    Kernels,
    /// One kernel per unit that switches on the block row: row `y` of a launch from branch
    /// `first` runs individual `first + y` of the unit and writes `y` output slabs further in,
    /// so one launch evaluates consecutive individuals. It takes the problem's kernel parameters
    /// and then `int first`.
    Switch,
}

impl Shape {
    /// The name used on the command line and in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Kernels => "kernels",
            Shape::Switch => "switch",
        }
    }
}

impl FromStr for Shape {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "kernels" => Ok(Shape::Kernels),
            "switch" => Ok(Shape::Switch),
            _ => Err(format!("unknown unit shape {s:?}: use kernels or switch")),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One translation unit to compile: CUDA C for NVRTC, or PTX for nvJitLink.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Unit {
    /// Name shown in the compiler's messages and logs (e.g. `gen3_chunk7.cu`).
    pub name: String,
    /// The source. Bytes, not text: invalid UTF-8 reaches the compiler and is reported per unit
    /// instead of failing the whole call.
    pub source: Vec<u8>,
    /// What the source is, so the compiler knows which tool takes it.
    pub language: Language,
    /// Relocatable CUBINs a PTX unit is linked with besides the math library (the fitting
    /// template its functions complete, `gpfarm_kernels::interpreter::fit_link_source`); empty
    /// for every other unit. A cache key of such a unit takes them in beside its source
    /// (`gpfarm_client::CacheKey::linked`).
    pub libraries: Vec<Vec<u8>>,
}

impl Unit {
    /// A CUDA C unit from a name and its source text.
    pub fn new(name: impl Into<String>, source: impl Into<String>) -> Self {
        Unit {
            name: name.into(),
            source: source.into().into_bytes(),
            language: Language::CudaC,
            libraries: Vec::new(),
        }
    }

    /// A PTX unit from a name and its PTX text.
    pub fn ptx(name: impl Into<String>, ptx: impl Into<String>) -> Self {
        Unit {
            name: name.into(),
            source: ptx.into().into_bytes(),
            language: Language::Ptx,
            libraries: Vec::new(),
        }
    }

    /// A PTX unit linked with `libraries` (relocatable CUBINs) as well as the math library.
    pub fn ptx_linked(name: impl Into<String>, ptx: impl Into<String>, libraries: Vec<Vec<u8>>) -> Self {
        Unit { libraries, ..Unit::ptx(name, ptx) }
    }
}

/// Time spent on one unit, in microseconds, by stage.
///
/// A PTX unit ([`Language::Ptx`]) has no NVRTC stage: `compile_us` holds nvJitLink's time
/// (`nvJitLinkCreate` + `nvJitLinkAddData` + `nvJitLinkComplete`: assembling the PTX and linking
/// it with the math library), plus, for the first PTX unit a compiler sees for an architecture,
/// NVRTC's compile of that library; `extract_us` is fetching the linked CUBIN and the log;
/// `jit_us` stays zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Encode, Decode, Serialize, Deserialize)]
pub struct UnitTimings {
    /// `nvrtcCreateProgram` + `nvrtcCompileProgram` (the paper's `ptx` stage in JIT mode).
    pub compile_us: u64,
    /// Fetching the CUBIN or PTX and the log out of NVRTC.
    pub extract_us: u64,
    /// PTX to CUBIN by the driver (the paper's `jit`); zero in CUBIN mode.
    pub jit_us: u64,
}

impl UnitTimings {
    /// All stages together.
    pub fn total_us(&self) -> u64 {
        self.compile_us + self.extract_us + self.jit_us
    }
}

/// What kind of failure a unit met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode, Serialize, Deserialize)]
pub enum FailureKind {
    /// NVRTC rejected the source (syntax, types, `#error`, ...); the log says why.
    Compilation,
    /// The source cannot be handed to NVRTC at all (an interior NUL byte).
    InvalidSource,
    /// NVRTC or the driver failed for a reason other than the source (out of memory, ...).
    Internal,
    /// The driver's PTX JIT failed, or JIT mode was asked for without a GPU.
    Jit,
    /// The daemon died or hung while compiling this unit.
    Lost,
}

/// A unit that produced no CUBIN, and why.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode, Serialize, Deserialize)]
pub struct Failure {
    /// Category of the failure.
    pub kind: FailureKind,
    /// One-line reason; the full compiler log is in [`UnitResult::log`].
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

/// The CUBIN, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum UnitOutcome {
    /// An ELF CUBIN for the requested architecture.
    Cubin(Vec<u8>),
    /// No CUBIN.
    Failed(Failure),
}

/// The result of compiling one unit.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct UnitResult {
    /// CUBIN or failure.
    pub outcome: UnitOutcome,
    /// NVRTC's (and in JIT mode the driver linker's) log; often empty on success.
    pub log: String,
    /// Per-stage time.
    pub timings: UnitTimings,
}

impl UnitResult {
    /// The CUBIN, if the unit compiled.
    pub fn cubin(&self) -> Option<&[u8]> {
        match &self.outcome {
            UnitOutcome::Cubin(c) => Some(c),
            UnitOutcome::Failed(_) => None,
        }
    }

    /// A failed result with an empty log and no time spent.
    pub fn failed(kind: FailureKind, message: impl Into<String>) -> Self {
        UnitResult {
            outcome: UnitOutcome::Failed(Failure { kind, message: message.into() }),
            log: String::new(),
            timings: UnitTimings::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_choice_is_auto_or_a_route_and_a_bad_one_lists_them_all() {
        assert_eq!(Route::parse_choice("auto"), Ok(None));
        for r in Route::ALL {
            assert_eq!(Route::parse_choice(r.as_str()), Ok(Some(r)));
        }
        assert_eq!(Route::parse_choice("interp"), Ok(Some(Route::Interpreter)));
        let e = Route::parse_choice("teleport").unwrap_err();
        assert!(e.contains("auto, nvrtc, ptx, interpreter or cpu"), "{e}");
    }

    #[test]
    fn architectures_parse_only_in_sm_form() {
        assert_eq!("sm_90".parse::<SmArch>(), Ok(SmArch(90)));
        assert_eq!("sm_120".parse::<SmArch>(), Ok(SmArch(120)));
        for bad in ["90", "compute_90", "sm_", "sm_9x", "sm_090", "sm_5"] {
            assert!(bad.parse::<SmArch>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn architecture_options_name_the_right_target() {
        assert_eq!(SmArch::SM_90.cubin_option(), "-arch=sm_90");
        assert_eq!(SmArch::SM_90.ptx_option(), "-arch=compute_90");
    }
}
