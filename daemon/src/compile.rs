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

fn compile_unit(nvrtc: &Nvrtc, jit: Option<&Jit>, options: &CompileOptions, unit: &Unit) -> UnitResult {
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
                message: "ptx-jit mode needs a GPU and its driver; this daemon has no CUDA context".into(),
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
