//! Shared helpers of the end-to-end tests.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpfarm_client::{FarmConfig, SmArch, Unit};
use gpfarm_protocol::segment::{list_segments, process_alive};
use gpfarm_protocol::{FarmName, ptx_math};

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

/// Whether the PTX route can run: NVRTC (for the math library) and nvJitLink beside it. Skips
/// or, with `GPFARM_REQUIRE_NVRTC=1`, fails as [`nvrtc_or_skip`] does.
pub fn nvjitlink_or_skip(test: &str) -> bool {
    if !nvrtc_or_skip(test) {
        return false;
    }
    let toolchain = gpfarm_toolchain::Toolchain::discover(None).expect("NVRTC was found a moment ago");
    match gpfarm_toolchain::NvJitLink::load(&toolchain) {
        Ok(_) => true,
        Err(e) => {
            if std::env::var_os("GPFARM_REQUIRE_NVRTC").is_some() {
                panic!("{test}: nvJitLink is required here: {e}");
            }
            eprintln!("SKIPPED {test}: no nvJitLink ({e})");
            false
        }
    }
}

/// A PTX module for sm_90 with one kernel `name` that calls the math library's `gpm_sinf` and
/// `gpm_pow` (a double one); `k` (0-15) changes a constant, so each unit is distinct.
pub fn ptx_kernel(name: &str, k: usize) -> String {
    format!(
        ".version 9.0\n.target sm_90\n.address_size 64\n\n{}\n{}\n\n\
         .visible .entry {name}(.param .u64 out)\n{{\n\
         .reg .b32 %r<2>;\n.reg .b64 %rd<4>;\n.reg .f32 %f<5>;\n.reg .f64 %fd<4>;\n\
         ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\n\
         mov.u32 %r1, %tid.x;\ncvt.rn.f32.u32 %f1, %r1;\n\
         {{\n.param .f32 a0;\n.param .f32 r0;\nst.param.f32 [a0], %f1;\n\
         call.uni (r0), gpm_sinf, (a0);\nld.param.f32 %f2, [r0];\n}}\n\
         cvt.f64.f32 %fd1, %f2;\nmov.f64 %fd2, 0d4000000000000000;\n\
         {{\n.param .f64 a1;\n.param .f64 b1;\n.param .f64 r1;\n\
         st.param.f64 [a1], %fd1;\nst.param.f64 [b1], %fd2;\n\
         call.uni (r1), gpm_pow, (a1, b1);\nld.param.f64 %fd3, [r1];\n}}\n\
         cvt.rn.f32.f64 %f3, %fd3;\nadd.rn.f32 %f4, %f3, 0f3F80000{k:X};\n\
         mul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\n\
         st.global.f32 [%rd3], %f4;\nret;\n}}\n",
        ptx_math::find("sinf").unwrap().ptx_extern(),
        ptx_math::find("pow").unwrap().ptx_extern(),
    )
}

/// `n` PTX units `p<i>.ptx` with one kernel `p_<i>` each.
pub fn ptx_units(n: usize) -> Vec<Unit> {
    (0..n).map(|i| Unit::ptx(format!("p{i}.ptx"), ptx_kernel(&format!("p_{i}"), i % 16))).collect()
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

/// A farm configuration whose daemons take test faults (`GPFARM_TEST_FAULTS=1`) and declare a
/// unit hung after `deadline`.
pub fn faulty_config(daemons: usize, deadline: Duration) -> FarmConfig {
    FarmConfig {
        request_timeout: deadline,
        env: vec![("GPFARM_TEST_FAULTS".into(), "1".into())],
        ..config(daemons)
    }
}

/// A CUDA unit `<name>.cu` carrying a test-fault marker (`crash`, `hang`, `kill`, `bloat`).
pub fn marked(name: &str, fault: &str) -> Unit {
    Unit::new(format!("{name}.cu"), format!("// gpfarm-test-fault: {fault}\n{}", kernel(name, 1)))
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

/// Runs `gpfarm evolve --json` on the example problem `examples/<example>` with `args`, and
/// checks that it succeeded; returns the generation records and the summary.
pub fn evolve_example(example: &str, args: &[&str]) -> (Vec<serde_json::Value>, serde_json::Value) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(example);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["evolve", "--json", "--problem-dir"])
        .arg(&dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{example} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let mut records: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let summary = records.pop().expect("a summary");
    assert_eq!(summary["summary"], true);
    (records, summary)
}
