//! The one compile layer: a warm NVRTC that turns a [`Unit`] into a [`UnitResult`].
//!
//! Every NVRTC route goes through here: the resident daemon and the in-process baselines
//! (`InProcess`, `Threads`) start a [`WarmNvrtc`] (allocator tuned, NVRTC loaded and warmed once)
//! and call [`WarmNvrtc::compile_unit`] per unit. This is the only place NVRTC's outcome is
//! mapped onto the wire's [`UnitResult`], so a unit fails the same way whoever compiles it.
//!
//! The PTX route's second stage (PTX to CUBIN) needs a CUDA context, which only a process that
//! holds one can offer: it comes in through the [`PtxLinker`] trait (the daemon implements it
//! with the driver's linker). This module must never create a CUDA context, start a process or
//! panic on a unit's contents: a unit that fails is a failed [`UnitResult`], never an error.

use std::error::Error as StdError;
use std::time::{Duration, Instant};

use gpfarm_protocol::{
    CompileMode, CompileOptions, Failure, FailureKind, SmArch, Unit, UnitOutcome, UnitResult, UnitTimings,
};
use thiserror::Error;

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
        Ok(WarmNvrtc { nvrtc, warmup: started.elapsed() })
    }

    /// The loaded library (its version and path identify the compiler build).
    pub fn nvrtc(&self) -> &Nvrtc {
        &self.nvrtc
    }

    /// How long loading and warming took.
    pub fn warmup(&self) -> Duration {
        self.warmup
    }

    /// Compiles one unit as `options` ask: CUBIN straight from NVRTC, or in ptx-jit mode PTX
    /// from NVRTC then `linker`. Every failure is the unit's own, with NVRTC's or the linker's
    /// log; without a linker a ptx-jit unit fails with [`NO_LINKER`].
    pub fn compile_unit(
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
