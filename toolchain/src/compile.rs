//! The one compile layer: a warm NVRTC that turns a [`Unit`] into a [`UnitResult`].
//!
//! Every NVRTC route goes through here: the resident daemon and the in-process baselines
//! (`InProcess`, `Threads`) start a [`WarmNvrtc`] (allocator tuned, NVRTC loaded and warmed once)
//! and call [`WarmNvrtc::compile_unit`] per unit. This is the only place NVRTC's outcome is
//! mapped onto the wire's [`UnitResult`], so a unit fails the same way whoever compiles it.
//!
//! The ptx-jit mode's second stage (NVRTC's PTX to CUBIN) needs a CUDA context, which only a
//! process that holds one can offer: it comes in through the [`PtxLinker`] trait (the daemon
//! implements it with the driver's linker). This module must never create a CUDA context, start
//! a process or panic on a unit's contents: a unit that fails is a failed [`UnitResult`], never
//! an error.
//!
//! A PTX unit ([`Language::Ptx`]) skips NVRTC: nvJitLink ([`NvJitLink`], loaded on the first PTX
//! unit from beside NVRTC) assembles its PTX and links it with the math library
//! ([`gpfarm_protocol::ptx_math`]), which NVRTC compiles into a relocatable CUBIN once per
//! architecture and which is kept for the life of the [`WarmNvrtc`].

use std::collections::HashMap;
use std::error::Error as StdError;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gpfarm_protocol::{
    CompileMode, CompileOptions, Failure, FailureKind, Language, SmArch, Unit, UnitOutcome, UnitResult,
    UnitTimings, ptx_math,
};
use thiserror::Error;

use crate::nvjitlink::{Input, NvJitLink};
use crate::nvrtc::{LoadError, Nvrtc, NvrtcFailure, Output};
use crate::{Toolchain, tune_allocator};

/// A tiny kernel with a transcendental call, compiled once at start-up so that no real unit
/// pays NVRTC's first-compile cost (loading its builtins, the first libNVVM and ptxas runs).
const WARMUP_SOURCE: &str = "extern \"C\" __global__ void gpfarm_warmup(float* o)\n\
     { o[threadIdx.x] = sinf((float)threadIdx.x) + expf(o[threadIdx.x]); }\n";

/// How the process's allocator serves NVRTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Allocator {
    /// Keep freed memory for the next compile ([`tune_allocator`]).
    #[default]
    Tuned,
    /// glibc's defaults, for measuring what the tuning changes.
    Default,
}

/// A warm NVRTC could not be started.
#[derive(Debug, Error)]
pub enum StartError {
    /// NVRTC could not be loaded or is the wrong version.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// NVRTC loaded but could not compile a trivial kernel: it is unusable here (a missing
    /// builtins library, an architecture this NVRTC does not know).
    #[error("NVRTC's warm-up compile for {arch} failed")]
    Warmup {
        /// The architecture of the warm-up compile.
        arch: SmArch,
        /// NVRTC's failure.
        #[source]
        failure: NvrtcFailure,
    },
}

/// PTX to CUBIN, by whoever holds what it needs (the daemon: the driver's linker in its CUDA
/// context).
pub trait PtxLinker {
    /// Links one unit's PTX text (no trailing NUL) into a CUBIN.
    fn link(&self, ptx: &[u8]) -> Result<Linked, LinkError>;
}

/// A successful link.
#[derive(Debug)]
pub struct Linked {
    /// The CUBIN.
    pub cubin: Vec<u8>,
    /// The linker's log, often empty.
    pub log: String,
}

/// A failed link: why, and what the linker logged before failing.
#[derive(Debug, Error)]
#[error("linking PTX into a CUBIN failed")]
pub struct LinkError {
    /// What failed (the linker's own error type).
    #[source]
    pub cause: Box<dyn StdError + Send + Sync>,
    /// The linker's log, often empty.
    pub log: String,
}

/// What a unit gets in ptx-jit mode when the compiling process holds no linker.
pub const NO_LINKER: &str = "ptx-jit mode needs a GPU and its driver, and a daemon holding a CUDA context \
     (`gpfarm daemons start --gpu-context`); this process has none";

/// What a PTX unit gets in ptx-jit mode.
pub const PTX_IN_JIT_MODE: &str = "ptx-jit mode compiles CUDA C to PTX and hands it to the driver's linker; \
     a PTX unit is assembled by nvJitLink in cubin mode (--mode cubin)";

/// nvJitLink options for a PTX unit: `-arch=sm_XX`, then the caller's link flags.
pub fn link_options(options: &CompileOptions) -> Vec<String> {
    std::iter::once(options.arch.cubin_option()).chain(options.link_flags.iter().cloned()).collect()
}

/// Whether PTX `source` declares an external symbol (`.extern`): only such a unit can call into
/// the math library, so only such a unit is linked with it. A false positive (the word in a
/// comment) only links the library for nothing.
pub fn declares_extern(source: &[u8]) -> bool {
    source.windows(b".extern".len()).any(|w| w == b".extern")
}

/// NVRTC options of the PTX route's math library for `arch`: `--gpu-architecture=sm_XX` and
/// [`ptx_math::LIBRARY_FLAGS`].
pub fn library_options(arch: SmArch) -> Vec<String> {
    std::iter::once(format!("--gpu-architecture=sm_{}", arch.0))
        .chain(ptx_math::LIBRARY_FLAGS.iter().map(|f| f.to_string()))
        .collect()
}

/// Compiles the PTX route's math library ([`ptx_math::library_source`]) for `arch` into a
/// relocatable CUBIN.
pub fn compile_math_library(nvrtc: &Nvrtc, arch: SmArch) -> Result<crate::Compiled, NvrtcFailure> {
    nvrtc.compile(
        "gpfarm_ptx_math.cu",
        ptx_math::library_source().as_bytes(),
        &library_options(arch),
        Output::Cubin,
    )
}

/// Why a PTX unit could not even be handed to nvJitLink: the library would not load, or the math
/// library would not compile. Kept, so that every later unit fails the same way at no cost.
#[derive(Debug, Clone)]
struct Unavailable {
    kind: FailureKind,
    message: String,
    log: String,
}

/// The math library's relocatable CUBIN for one architecture, or why there is none.
type Library = Result<Arc<[u8]>, Unavailable>;

/// The PTX route's state in a compiler: nvJitLink, loaded on first use, and the math library's
/// CUBIN per architecture.
struct PtxRoute {
    path: PathBuf,
    jitlink: OnceLock<Result<NvJitLink, Unavailable>>,
    libraries: Mutex<HashMap<SmArch, Library>>,
}

/// NVRTC options for a compile: the architecture the mode needs first, then the caller's flags.
pub fn nvrtc_options(options: &CompileOptions) -> Vec<String> {
    let arch = match options.mode {
        CompileMode::Cubin => options.arch.cubin_option(),
        CompileMode::PtxJit => options.arch.ptx_option(),
    };
    std::iter::once(arch).chain(options.flags.iter().cloned()).collect()
}

fn us(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

/// NVRTC, loaded, with the allocator tuned and the first compile paid for.
pub struct WarmNvrtc {
    nvrtc: Nvrtc,
    warmup: Duration,
    ptx: PtxRoute,
}

impl WarmNvrtc {
    /// Sets the allocator (before NVRTC's first allocation; it affects the whole process), loads
    /// NVRTC from `toolchain` and compiles a trivial kernel for `arch`, so that no measured
    /// compile pays the first one's cost.
    pub fn start(toolchain: &Toolchain, arch: SmArch, allocator: Allocator) -> Result<Self, StartError> {
        if allocator == Allocator::Tuned {
            tune_allocator();
        }
        let started = Instant::now();
        let nvrtc = Nvrtc::load(toolchain)?;
        nvrtc
            .compile("gpfarm_warmup.cu", WARMUP_SOURCE.as_bytes(), &[arch.cubin_option()], Output::Cubin)
            .map_err(|failure| StartError::Warmup { arch, failure })?;
        let ptx = PtxRoute {
            path: toolchain.libnvjitlink(),
            jitlink: OnceLock::new(),
            libraries: Mutex::new(HashMap::new()),
        };
        Ok(WarmNvrtc { nvrtc, warmup: started.elapsed(), ptx })
    }

    /// nvJitLink, loaded now if it is not yet; the error says what to install.
    pub fn nvjitlink(&self) -> Result<&NvJitLink, String> {
        self.jitlink().map_err(|u| u.message.clone())
    }

    fn jitlink(&self) -> Result<&NvJitLink, &Unavailable> {
        self.ptx
            .jitlink
            .get_or_init(|| {
                NvJitLink::load_from(&self.ptx.path).map_err(|e| Unavailable {
                    kind: FailureKind::Internal,
                    message: e.to_string(),
                    log: String::new(),
                })
            })
            .as_ref()
    }

    /// The math library's relocatable CUBIN for `arch`, compiled now if it is not yet, and the
    /// time this call spent compiling it (zero when it was there). Threads asking for the same
    /// library wait for one compile.
    fn library(&self, arch: SmArch) -> (Library, Duration) {
        let start = Instant::now();
        let mut libraries = self.ptx.libraries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(found) = libraries.get(&arch) {
            return (found.clone(), Duration::ZERO);
        }
        let compiled =
            compile_math_library(&self.nvrtc, arch).map(|c| Arc::from(c.code)).map_err(|f| Unavailable {
                kind: FailureKind::Internal,
                message: format!("the PTX route's math library does not compile for {arch}: {}", f.message),
                log: f.log,
            });
        libraries.insert(arch, compiled.clone());
        (compiled, start.elapsed())
    }

    /// Readies the PTX route for `arch` now rather than on its first unit: loads nvJitLink and
    /// compiles the math library. Returns how long that took.
    pub fn warm_ptx(&self, arch: SmArch) -> Result<Duration, String> {
        let start = Instant::now();
        self.nvjitlink()?;
        self.library(arch).0.map_err(|u| u.message)?;
        Ok(start.elapsed())
    }

    /// The loaded library (its version and path identify the compiler build).
    pub fn nvrtc(&self) -> &Nvrtc {
        &self.nvrtc
    }

    /// How long loading and warming took.
    pub fn warmup(&self) -> Duration {
        self.warmup
    }

    /// Compiles one unit as its language and `options` ask. A CUDA C unit: CUBIN straight from
    /// NVRTC, or in ptx-jit mode PTX from NVRTC then `linker`. A PTX unit: nvJitLink links its
    /// PTX with the math library (cubin mode only). Every failure is the unit's own, with NVRTC's
    /// or the linker's log; without a linker a ptx-jit unit fails with [`NO_LINKER`].
    pub fn compile_unit(
        &self,
        unit: &Unit,
        options: &CompileOptions,
        linker: Option<&dyn PtxLinker>,
    ) -> UnitResult {
        match unit.language {
            Language::CudaC => self.compile_cuda(unit, options, linker),
            Language::Ptx => self.compile_ptx(unit, options),
        }
    }

    /// A PTX unit: its PTX, the math library for `options.arch` and the unit's own libraries
    /// ([`Unit::libraries`]), linked by nvJitLink.
    fn compile_ptx(&self, unit: &Unit, options: &CompileOptions) -> UnitResult {
        if options.mode == CompileMode::PtxJit {
            return UnitResult::failed(FailureKind::Jit, PTX_IN_JIT_MODE);
        }
        let unavailable = |u: &Unavailable, spent: Duration| UnitResult {
            outcome: UnitOutcome::Failed(Failure { kind: u.kind, message: u.message.clone() }),
            log: u.log.clone(),
            timings: UnitTimings { compile_us: us(spent), ..Default::default() },
        };
        let jitlink = match self.jitlink() {
            Ok(j) => j,
            Err(u) => return unavailable(u, Duration::ZERO),
        };
        // A unit that declares no external function references nothing of the math library:
        // linking it anyway costs ptxas about 4 ms per unit (Search and multiplier5 units call
        // no math function).
        let library = if declares_extern(&unit.source) {
            match self.library(options.arch) {
                (Ok(l), spent) => Some((l, spent)),
                (Err(u), spent) => return unavailable(&u, spent),
            }
        } else {
            None
        };
        let library_time = library.as_ref().map_or(Duration::ZERO, |(_, spent)| *spent);
        let mut inputs = vec![(unit.name.as_str(), Input::Ptx, &unit.source[..])];
        if let Some((library, _)) = &library {
            inputs.push(("gpfarm_ptx_math.cubin", Input::Cubin, &library[..]));
        }
        for l in &unit.libraries {
            inputs.push(("gpfarm_unit_library.cubin", Input::Cubin, &l[..]));
        }
        match jitlink.link(&link_options(options), &inputs) {
            Ok(linked) => UnitResult {
                outcome: UnitOutcome::Cubin(linked.cubin),
                log: linked.log,
                timings: UnitTimings {
                    compile_us: us(library_time + linked.link),
                    extract_us: us(linked.extract),
                    jit_us: 0,
                },
            },
            Err(f) => UnitResult {
                outcome: UnitOutcome::Failed(Failure { kind: f.kind, message: f.message }),
                log: f.log,
                timings: UnitTimings { compile_us: us(library_time + f.link), ..Default::default() },
            },
        }
    }

    /// A CUDA C unit, through NVRTC.
    fn compile_cuda(
        &self,
        unit: &Unit,
        options: &CompileOptions,
        linker: Option<&dyn PtxLinker>,
    ) -> UnitResult {
        let output = match options.mode {
            CompileMode::Cubin => Output::Cubin,
            CompileMode::PtxJit => Output::Ptx,
        };
        let compiled = match self.nvrtc.compile(&unit.name, &unit.source, &nvrtc_options(options), output) {
            Ok(c) => c,
            Err(f) => {
                return UnitResult {
                    outcome: UnitOutcome::Failed(Failure { kind: f.kind, message: f.message }),
                    log: f.log,
                    timings: UnitTimings { compile_us: us(f.compile), ..Default::default() },
                };
            }
        };
        let mut timings =
            UnitTimings { compile_us: us(compiled.compile), extract_us: us(compiled.extract), jit_us: 0 };
        let mut log = compiled.log;
        if options.mode == CompileMode::Cubin {
            return UnitResult { outcome: UnitOutcome::Cubin(compiled.code), log, timings };
        }
        let Some(linker) = linker else {
            let outcome = UnitOutcome::Failed(Failure { kind: FailureKind::Jit, message: NO_LINKER.into() });
            return UnitResult { outcome, log, timings };
        };
        let start = Instant::now();
        let linked = linker.link(&compiled.code);
        timings.jit_us = us(start.elapsed());
        let outcome = match linked {
            Ok(linked) => {
                log.push_str(&linked.log);
                UnitOutcome::Cubin(linked.cubin)
            }
            Err(e) => {
                log.push_str(&e.log);
                UnitOutcome::Failed(Failure { kind: FailureKind::Jit, message: e.cause.to_string() })
            }
        };
        UnitResult { outcome, log, timings }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A warm NVRTC from the discovered toolchain, or `None` (the test is skipped) where there is
    /// none; with `GPFARM_REQUIRE_NVRTC=1` a missing NVRTC fails instead.
    fn warm() -> Option<WarmNvrtc> {
        match Toolchain::discover(None) {
            Ok(tc) => Some(WarmNvrtc::start(&tc, SmArch::SM_90, Allocator::Tuned).expect("NVRTC warms up")),
            Err(e) if std::env::var_os("GPFARM_REQUIRE_NVRTC").is_some() => {
                panic!("NVRTC is required here: {e}")
            }
            Err(e) => {
                eprintln!("SKIPPED: no NVRTC ({e})");
                None
            }
        }
    }

    const KERNEL: &str = "extern \"C\" __global__ void k(float* y) { y[threadIdx.x] = 2.0f; }\n";

    struct FixedLinker(Result<&'static [u8], &'static str>);

    impl PtxLinker for FixedLinker {
        fn link(&self, ptx: &[u8]) -> Result<Linked, LinkError> {
            assert!(ptx.starts_with(b"//") && !ptx.ends_with(b"\0"), "the linker gets PTX text");
            match self.0 {
                Ok(cubin) => Ok(Linked { cubin: cubin.to_vec(), log: "linked\n".into() }),
                Err(why) => Err(LinkError { cause: why.into(), log: "link log\n".into() }),
            }
        }
    }

    /// A PTX module for `target` whose kernel `name` calls `gpm_sinf` and `gpm_pow`.
    fn ptx(name: &str, target: &str) -> String {
        format!(
            "// a hand-written PTX unit\n.version 9.0\n.target {target}\n.address_size 64\n\n{}\n{}\n\n\
             .visible .entry {name}(.param .u64 out)\n{{\n\
             .reg .b32 %r<2>;\n.reg .b64 %rd<4>;\n.reg .f32 %f<4>;\n.reg .f64 %fd<4>;\n\
             ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\n\
             mov.u32 %r1, %tid.x;\ncvt.rn.f32.u32 %f1, %r1;\n\
             {{\n.param .f32 a0;\n.param .f32 r0;\nst.param.f32 [a0], %f1;\n\
             call.uni (r0), gpm_sinf, (a0);\nld.param.f32 %f2, [r0];\n}}\n\
             cvt.f64.f32 %fd1, %f2;\nmov.f64 %fd2, 0d4000000000000000;\n\
             {{\n.param .f64 a1;\n.param .f64 b1;\n.param .f64 r1;\n\
             st.param.f64 [a1], %fd1;\nst.param.f64 [b1], %fd2;\n\
             call.uni (r1), gpm_pow, (a1, b1);\nld.param.f64 %fd3, [r1];\n}}\n\
             cvt.rn.f32.f64 %f3, %fd3;\nmul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\n\
             st.global.f32 [%rd3], %f3;\nret;\n}}\n",
            ptx_math::find("sinf").unwrap().ptx_extern(),
            ptx_math::find("pow").unwrap().ptx_extern(),
        )
    }

    fn contains(haystack: &[u8], needle: &str) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    #[test]
    fn the_math_library_compiles_for_each_architecture_and_exports_every_function() {
        let Some(nvrtc) = warm() else { return };
        for arch in [SmArch(75), SmArch(80), SmArch(90)] {
            let t = Instant::now();
            let lib = compile_math_library(nvrtc.nvrtc(), arch)
                .unwrap_or_else(|f| panic!("{arch}: {f}\n{}", f.log));
            eprintln!("math library for {arch}: {} bytes in {:?}", lib.code.len(), t.elapsed());
            assert_eq!(&lib.code[..4], b"\x7fELF");
            for m in ptx_math::FUNCTIONS {
                assert!(contains(&lib.code, m.symbol), "{arch}: {} missing", m.symbol);
            }
        }
    }

    #[test]
    fn a_ptx_unit_is_linked_with_the_math_library_into_a_cubin() {
        let Some(nvrtc) = warm() else { return };
        let options = CompileOptions::cubin(SmArch::SM_90);
        let first = nvrtc.compile_unit(&Unit::ptx("a.ptx", ptx("ptx_a", "sm_90")), &options, None);
        let cubin = first.cubin().unwrap_or_else(|| panic!("{:?}\n{}", first.outcome, first.log));
        assert_eq!(&cubin[..4], b"\x7fELF");
        assert!(contains(cubin, "ptx_a"));
        assert_eq!(first.timings.jit_us, 0);
        // An older `.target` links for a newer architecture; the library is not compiled again.
        for k in 0..3 {
            let r =
                nvrtc.compile_unit(&Unit::ptx("b.ptx", ptx(&format!("ptx_b{k}"), "sm_75")), &options, None);
            assert!(
                r.cubin().is_some_and(|c| contains(c, &format!("ptx_b{k}"))),
                "{:?}\n{}",
                r.outcome,
                r.log
            );
            eprintln!(
                "first PTX unit {} us (library included), next {} us",
                first.timings.total_us(),
                r.timings.total_us()
            );
            assert!(r.timings.compile_us < first.timings.compile_us);
        }
    }

    #[test]
    fn a_ptx_unit_that_declares_nothing_external_is_linked_without_the_math_library() {
        assert!(declares_extern(ptx("a", "sm_90").as_bytes()));
        let plain = "// no calls\n.version 9.0\n.target sm_90\n.address_size 64\n\n\
                     .visible .entry plain(.param .u64 out)\n{\n.reg .b32 %r<2>;\n.reg .b64 %rd<4>;\n\
                     ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\nmov.u32 %r1, %tid.x;\n\
                     mul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\nst.global.u32 [%rd3], %r1;\nret;\n}\n";
        assert!(!declares_extern(plain.as_bytes()));
        let Some(nvrtc) = warm() else { return };
        let options = CompileOptions::cubin(SmArch::SM_90);
        let r = nvrtc.compile_unit(&Unit::ptx("plain.ptx", plain), &options, None);
        assert!(r.cubin().is_some_and(|c| contains(c, "plain")), "{:?}\n{}", r.outcome, r.log);
        let compiled = nvrtc.ptx.libraries.lock().unwrap().len();
        assert_eq!(compiled, 0, "the math library was compiled for a unit that cannot call it");
        let r = nvrtc.compile_unit(&Unit::ptx("a.ptx", ptx("ptx_a", "sm_90")), &options, None);
        assert!(r.cubin().is_some(), "{:?}\n{}", r.outcome, r.log);
        assert_eq!(nvrtc.ptx.libraries.lock().unwrap().len(), 1);
    }

    #[test]
    fn an_invalid_ptx_unit_fails_with_nvjitlinks_log() {
        let Some(nvrtc) = warm() else { return };
        let options = CompileOptions::cubin(SmArch::SM_90);
        let broken = ptx("bad", "sm_90").replace("cvt.rn.f32.u32 %f1, %r1;", "cvt.rn.f32.u32 %f1, %nope;");
        let r = nvrtc.compile_unit(&Unit::ptx("bad.ptx", broken), &options, None);
        let UnitOutcome::Failed(f) = &r.outcome else { panic!("linked: {}", r.log) };
        assert_eq!(f.kind, FailureKind::Compilation, "{f}");
        assert!(f.message.contains("nvJitLink") && r.log.contains("nope"), "{f}\n{}", r.log);
        let undefined = ptx("undef", "sm_90").replace("gpm_sinf", "gpm_nosuch");
        let r = nvrtc.compile_unit(&Unit::ptx("undef.ptx", undefined), &options, None);
        let UnitOutcome::Failed(f) = &r.outcome else { panic!("linked: {}", r.log) };
        assert_eq!(f.kind, FailureKind::Compilation, "{f}");
        assert!(r.log.contains("gpm_nosuch"), "{f}\n{}", r.log);
        let mut bad = ptx("latin", "sm_90").into_bytes();
        let at = bad.len() - 2;
        bad.insert(at, 0xff);
        let r = nvrtc.compile_unit(
            &Unit { name: "latin.ptx".into(), source: bad, language: Language::Ptx, libraries: Vec::new() },
            &options,
            None,
        );
        let UnitOutcome::Failed(f) = &r.outcome else { panic!("linked: {}", r.log) };
        assert_eq!(f.kind, FailureKind::InvalidSource, "{f}");
        assert!(f.message.contains(&format!("not valid UTF-8 at byte offset {at}")), "{f}");
        let nul = Unit {
            name: "nul.ptx".into(),
            source: b".version 9.0\0".to_vec(),
            language: Language::Ptx,
            libraries: Vec::new(),
        };
        let r = nvrtc.compile_unit(&nul, &options, None);
        assert!(
            matches!(&r.outcome, UnitOutcome::Failed(f) if f.kind == FailureKind::InvalidSource),
            "{:?}",
            r.outcome
        );
    }

    #[test]
    fn link_flags_reach_nvjitlink_and_a_bad_one_fails_the_unit() {
        let Some(nvrtc) = warm() else { return };
        let unit = Unit::ptx("a.ptx", ptx("ptx_a", "sm_90"));
        let o0 = CompileOptions { link_flags: vec!["-O0".into()], ..CompileOptions::cubin(SmArch::SM_90) };
        let r = nvrtc.compile_unit(&unit, &o0, None);
        assert!(r.cubin().is_some(), "{:?}\n{}", r.outcome, r.log);
        let bad = CompileOptions { link_flags: vec!["-no-such-option".into()], ..o0 };
        let r = nvrtc.compile_unit(&unit, &bad, None);
        let UnitOutcome::Failed(f) = &r.outcome else { panic!("linked with a bad option") };
        assert!(f.message.contains("UNRECOGNIZED_OPTION"), "{f}\n{}", r.log);
    }

    #[test]
    fn a_ptx_unit_in_ptx_jit_mode_is_refused_on_its_own() {
        let Some(nvrtc) = warm() else { return };
        let options = CompileOptions { mode: CompileMode::PtxJit, ..CompileOptions::cubin(SmArch::SM_90) };
        let r = nvrtc.compile_unit(&Unit::ptx("a.ptx", ptx("ptx_a", "sm_90")), &options, None);
        assert_eq!(
            r.outcome,
            UnitOutcome::Failed(Failure { kind: FailureKind::Jit, message: PTX_IN_JIT_MODE.into() })
        );
    }

    #[test]
    fn options_put_the_modes_architecture_before_the_callers_flags() {
        let mut options = CompileOptions::cubin(SmArch::SM_90);
        options.flags = vec!["-minimal".into()];
        assert_eq!(nvrtc_options(&options), vec![SmArch::SM_90.cubin_option(), "-minimal".into()]);
        options.mode = CompileMode::PtxJit;
        assert_eq!(nvrtc_options(&options), vec![SmArch::SM_90.ptx_option(), "-minimal".into()]);
    }

    #[test]
    fn a_valid_unit_becomes_a_cubin_with_its_compile_time() {
        let Some(nvrtc) = warm() else { return };
        let r = nvrtc.compile_unit(&Unit::new("k.cu", KERNEL), &CompileOptions::cubin(SmArch::SM_90), None);
        let cubin = r.cubin().unwrap_or_else(|| panic!("{:?}\n{}", r.outcome, r.log));
        assert_eq!(&cubin[..4], b"\x7fELF");
        assert!(r.timings.compile_us > 0);
        assert_eq!(r.timings.jit_us, 0);
    }

    #[test]
    fn a_syntax_error_is_a_compilation_failure_carrying_nvrtcs_log() {
        let Some(nvrtc) = warm() else { return };
        let unit = Unit::new("broken.cu", "extern \"C\" __global__ void b(float* y) { y[0] = ; }\n");
        let r = nvrtc.compile_unit(&unit, &CompileOptions::cubin(SmArch::SM_90), None);
        let UnitOutcome::Failed(f) = &r.outcome else { panic!("compiled: {:?}", r.outcome) };
        assert_eq!(f.kind, FailureKind::Compilation);
        assert!(f.message.contains("error"), "{}", f.message);
        assert!(r.log.contains("broken.cu"), "{}", r.log);
    }

    #[test]
    fn ptx_jit_without_a_linker_fails_the_unit_and_says_what_is_missing() {
        let Some(nvrtc) = warm() else { return };
        let options = CompileOptions { mode: CompileMode::PtxJit, ..CompileOptions::cubin(SmArch::SM_90) };
        let r = nvrtc.compile_unit(&Unit::new("k.cu", KERNEL), &options, None);
        assert_eq!(
            r.outcome,
            UnitOutcome::Failed(Failure { kind: FailureKind::Jit, message: NO_LINKER.into() })
        );
        assert!(r.timings.compile_us > 0, "NVRTC's PTX compile is still timed");
    }

    #[test]
    fn ptx_jit_hands_nvrtcs_ptx_to_the_linker_and_keeps_both_logs() {
        let Some(nvrtc) = warm() else { return };
        let options = CompileOptions { mode: CompileMode::PtxJit, ..CompileOptions::cubin(SmArch::SM_90) };
        let unit = Unit::new("k.cu", KERNEL);
        let ok = nvrtc.compile_unit(&unit, &options, Some(&FixedLinker(Ok(b"CUBIN"))));
        assert_eq!(ok.cubin(), Some(&b"CUBIN"[..]));
        assert!(ok.log.ends_with("linked\n"), "{}", ok.log);
        let failed = nvrtc.compile_unit(&unit, &options, Some(&FixedLinker(Err("cuLinkComplete failed"))));
        assert_eq!(
            failed.outcome,
            UnitOutcome::Failed(Failure { kind: FailureKind::Jit, message: "cuLinkComplete failed".into() })
        );
        assert!(failed.log.ends_with("link log\n"), "{}", failed.log);
    }
}
