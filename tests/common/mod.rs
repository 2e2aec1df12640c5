//! Shared helpers of the end-to-end tests.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpfarm_client::{FarmConfig, SmArch, Unit};
use gpfarm_protocol::FarmName;
use gpfarm_protocol::segment::{list_segments, process_alive};

/// Whether NVRTC is available; prints why a test is skipped when it is not. With
/// `GPFARM_REQUIRE_NVRTC=1` (set by the README's test command) a missing NVRTC fails instead.
pub fn nvrtc_or_skip(test: &str) -> bool {
    match gpfarm_toolchain::Toolchain::discover(None) {
        Ok(_) => true,
        Err(e) => {
            if std::env::var_os("GPFARM_REQUIRE_NVRTC").is_some() {
                panic!("{test}: NVRTC is required here: {e}");
            }
            eprintln!("SKIPPED {test}: no NVRTC ({e})");
            false
        }
    }
}

/// A farm configuration that uses this build's gpfarmd.
pub fn config(daemons: usize) -> FarmConfig {
    FarmConfig {
        daemons,
        executable: Some(PathBuf::from(env!("CARGO_BIN_EXE_gpfarmd"))),
        warmup_arch: SmArch::SM_90,
        gpu_context: false,
        start_timeout: Duration::from_secs(120),
        ..FarmConfig::default()
    }
}

/// A small kernel named `name` whose body depends on `k`, so each unit is distinct.
pub fn kernel(name: &str, k: usize) -> String {
    format!(
        "extern \"C\" __global__ void {name}(const float* x, float* y, int n)\n{{\n    int c = blockIdx.x * blockDim.x + threadIdx.x;\n    if (c < n) y[c] = x[c] * {k}.0f + {}.5f;\n}}\n",
        k % 7
    )
}

/// `n` units with one kernel `k_<i>` each.
pub fn units(n: usize) -> Vec<Unit> {
    (0..n).map(|i| Unit::new(format!("u{i}.cu"), kernel(&format!("k_{i}"), i))).collect()
}

/// This user's segments belonging to `farm`.
pub fn segments_of(farm: &FarmName) -> Vec<String> {
    list_segments().into_iter().filter(|n| &n.farm == farm).map(|n| n.to_string()).collect()
}

/// Waits up to `limit` for every pid to be gone; returns the ones still alive.
pub fn wait_gone(pids: &[u32], limit: Duration) -> Vec<u32> {
    let until = Instant::now() + limit;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| process_alive(p) && !is_zombie(p)).collect();
        if alive.is_empty() || Instant::now() > until {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// The GPU's architecture. GPU-only tests are `#[ignore]`d with the reason "needs a GPU", so they
/// run only when asked for (`--include-ignored`, as `scripts/gpu/harness/tests.sh` does on the GPU
/// host); asked for on a machine without a GPU, they fail saying why instead of passing unseen.
pub fn require_gpu(test: &str) -> SmArch {
    match gpfarm_kernels::gpu::probe() {
        Ok((name, (major, minor))) => {
            eprintln!("{test}: running on {name} (sm_{major}{minor})");
            SmArch((major * 10 + minor) as u32)
        }
        Err(e) => panic!("{test} needs a GPU and was run on a machine without one: {e}"),
    }
}

/// For GPU fault tests: the GPU's architecture, a 2-daemon farm, keijzer6 and its fitness
/// kernel's CUBIN. Fails without a GPU, as [`require_gpu`].
pub fn keijzer6_on_gpu(
    test: &str,
) -> (gpfarm_client::CompileOptions, gpfarm_client::Farm, gpfarm_gp::Problem, Vec<u8>) {
    use gpfarm_client::Compiler;
    let arch = require_gpu(test);
    let problem = gpfarm_gp::Problem::builtin("keijzer6").unwrap();
    let mut farm = gpfarm_client::Farm::spawn(config(2)).unwrap();
    let options = gpfarm_client::CompileOptions::cubin(arch);
    let source = gpfarm_kernels::gpu::fitness_source(&problem).unwrap();
    let fitness = farm.compile(&[Unit::new("f.cu", source)], &options).unwrap();
    let cubin = fitness.results[0].cubin().unwrap().to_vec();
    (options, farm, problem, cubin)
}
