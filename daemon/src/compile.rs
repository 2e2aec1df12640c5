//! Compiling one request's units in order, each through the toolchain's one compile layer
//! ([`WarmNvrtc::compile_unit`]); the daemon adds only its PTX linker and its test faults.
//!
//! A unit that fails never affects the others; nothing here maps NVRTC's outcome itself.

use gpfarm_protocol::{CompileOptions, Unit, UnitResult};
use gpfarm_toolchain::{PtxLinker, WarmNvrtc};

use crate::jit::Jit;

/// Compiles every unit; `finished(k)` is called after the k-th unit.
pub fn compile_units(
    nvrtc: &WarmNvrtc,
    jit: Option<&Jit>,
    options: &CompileOptions,
    units: &[Unit],
    mut finished: impl FnMut(usize),
) -> Vec<UnitResult> {
    let linker = jit.map(|j| j as &dyn PtxLinker);
    units
        .iter()
        .enumerate()
        .map(|(k, u)| {
            test_fault(u);
            let r = nvrtc.compile_unit(u, options, linker);
            finished(k + 1);
            r
        })
        .collect()
}

/// Test-only faults, so that crash and hang recovery are tested with real processes: when the
/// daemon runs with `GPFARM_TEST_FAULTS=1`, a unit whose source contains
/// `gpfarm-test-fault: crash` aborts the daemon, `...: hang` never returns, `...: kill`
/// makes it SIGKILL itself, and `...: bloat` leaves it holding 400 MiB more. Without the variable the markers are ordinary text.
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
    if has("gpfarm-test-fault: bloat") {
        // 400 MiB, written so it is resident, and kept: as NVRTC's allocator keeps what a huge
        // unit made it take.
        std::hint::black_box(Vec::leak(vec![1u8; 400 << 20]));
    }
    if has("gpfarm-test-fault: hang") {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}
