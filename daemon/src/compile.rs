//! Compiling one request's units, one NVRTC program per unit, in order.

use std::time::Instant;

use gpfarm_protocol::{
    CompileMode, CompileOptions, Failure, FailureKind, Unit, UnitOutcome, UnitResult, UnitTimings,
};
use gpfarm_toolchain::{Nvrtc, Output};

use crate::jit::Jit;

/// Compiles every unit; a unit that fails never affects the others. `finished(k)` is called
/// after the k-th unit.
pub fn compile_units(
    nvrtc: &Nvrtc,
    jit: Option<&Jit>,
    options: &CompileOptions,
    units: &[Unit],
    mut finished: impl FnMut(usize),
) -> Vec<UnitResult> {
    units
        .iter()
        .enumerate()
        .map(|(k, u)| {
            let r = compile_unit(nvrtc, jit, options, u);
            finished(k + 1);
            r
        })
        .collect()
}

fn us(d: std::time::Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

/// NVRTC options for a compile: the architecture first, then the caller's flags.
pub fn nvrtc_options(options: &CompileOptions) -> Vec<String> {
    let arch = match options.mode {
        CompileMode::Cubin => options.arch.cubin_option(),
        CompileMode::PtxJit => options.arch.ptx_option(),
    };
    std::iter::once(arch).chain(options.flags.iter().cloned()).collect()
}

/// Test-only faults, so that crash and hang recovery are tested with real processes: when the
/// daemon runs with `GPFARM_TEST_FAULTS=1`, a unit whose source contains
/// `gpfarm-test-fault: crash` aborts the daemon, `...: hang` never returns, and `...: kill`
/// makes it SIGKILL itself. Without the variable the markers are ordinary text.
fn test_fault(unit: &Unit) {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ENABLED.get_or_init(|| std::env::var_os("GPFARM_TEST_FAULTS").is_some_and(|v| v == "1")) {
        return;
    }
    let has = |what: &str| unit.source.windows(what.len()).any(|w| w == what.as_bytes());
    if has("gpfarm-test-fault: crash") {
        std::process::abort();
    }
    if has("gpfarm-test-fault: kill") {
        // SAFETY: kill(2) of this very process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    if has("gpfarm-test-fault: hang") {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

fn compile_unit(nvrtc: &Nvrtc, jit: Option<&Jit>, options: &CompileOptions, unit: &Unit) -> UnitResult {
    test_fault(unit);
    let output = match options.mode {
        CompileMode::Cubin => Output::Cubin,
        CompileMode::PtxJit => Output::Ptx,
    };
    let compiled = match nvrtc.compile(&unit.name, &unit.source, &nvrtc_options(options), output) {
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
    if options.mode == CompileMode::Cubin {
        return UnitResult { outcome: UnitOutcome::Cubin(compiled.code), log: compiled.log, timings };
    }
    let Some(jit) = jit else {
        return UnitResult {
            outcome: UnitOutcome::Failed(Failure {
                kind: FailureKind::Jit,
                message: "ptx-jit mode needs a GPU and its driver, and a daemon holding a CUDA context \
                          (`gpfarm daemons start --gpu-context`); this daemon has none"
                    .into(),
            }),
            log: compiled.log,
            timings,
        };
    };
    let start = Instant::now();
    let linked = jit.link(&compiled.code);
    timings.jit_us = us(start.elapsed());
    let mut log = compiled.log;
    match linked {
        Ok((cubin, jit_log)) => {
            log.push_str(&jit_log);
            UnitResult { outcome: UnitOutcome::Cubin(cubin), log, timings }
        }
        Err((message, jit_log)) => {
            log.push_str(&jit_log);
            UnitResult {
                outcome: UnitOutcome::Failed(Failure { kind: FailureKind::Jit, message }),
                log,
                timings,
            }
        }
    }
}
