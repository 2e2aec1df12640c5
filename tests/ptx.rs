//! The PTX route through every compiler: a PTX unit linked with the math library by nvJitLink,
//! failures that stay the unit's own, and the farm's fault rules for PTX units. Needs NVRTC and
//! nvJitLink (the pinned wheels), no GPU.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{config, nvjitlink_or_skip, ptx_kernel, ptx_units, units};
use gpfarm_client::cubin::inspect;
use gpfarm_client::{
    CompileOptions, Compiler, FailureKind, Farm, FarmConfig, InProcess, Nvcc, SmArch, Threads, Unit,
    UnitOutcome, UnitResult,
};
use gpfarm_toolchain::Toolchain;

fn options() -> CompileOptions {
    CompileOptions::cubin(SmArch::SM_90)
}

/// Each unit named `p<i>.ptx` came back as a CUBIN with exactly the kernel `p_<i>`; a unit named
/// `u<i>.cu` with `k_<i>`.
fn assert_compiled(results: &[UnitResult], input: &[Unit], skip: &[usize]) {
    assert_eq!(results.len(), input.len());
    for (i, (r, u)) in results.iter().zip(input).enumerate() {
        if skip.contains(&i) {
            continue;
        }
        let cubin = r.cubin().unwrap_or_else(|| panic!("unit {i} ({}): {:?}\n{}", u.name, r.outcome, r.log));
        assert_eq!(&cubin[..4], b"\x7fELF");
        let info = inspect(cubin).unwrap_or_else(|| panic!("unit {i}: not a CUDA ELF"));
        let want = match (u.name.strip_prefix('p'), u.name.strip_prefix('u')) {
            (Some(n), _) => format!("p_{}", n.trim_end_matches(".ptx")),
            (_, Some(n)) => format!("k_{}", n.trim_end_matches(".cu")),
            _ => unreachable!(),
        };
        assert_eq!(info.kernels, vec![want], "unit {i} came back out of order");
        assert_eq!(info.sm, 90);
    }
}

/// An invalid PTX unit (an undefined register) and one that calls a function the library lacks.
fn broken() -> [Unit; 2] {
    let bad_register = ptx_kernel("bad", 0).replace("cvt.rn.f32.u32 %f1, %r1;", "cvt.rn.f32.u32 %f1, %nope;");
    let undefined = ptx_kernel("undef", 0).replace("gpm_sinf", "gpm_nosuch");
    [Unit::ptx("bad.ptx", bad_register), Unit::ptx("undef.ptx", undefined)]
}

fn assert_fails_with_nvjitlinks_log(r: &UnitResult, what: &str) {
    let UnitOutcome::Failed(f) = &r.outcome else { panic!("the unit with {what} linked") };
    assert_eq!(f.kind, FailureKind::Compilation, "{f}");
    assert!(f.message.contains("nvJitLink"), "{f}");
    assert!(r.log.contains(what), "{what} not in the log: {}", r.log);
}

/// PTX units, CUDA C units and broken PTX units mixed in one call.
fn mixed() -> (Vec<Unit>, Vec<usize>) {
    let mut input = ptx_units(6);
    input.extend(units(2));
    let [bad, undefined] = broken();
    input.insert(2, bad);
    input.insert(5, undefined);
    (input, vec![2, 5])
}

fn check_mixed(name: &str, compiler: &mut dyn Compiler) {
    let (input, broken_at) = mixed();
    let started = Instant::now();
    let batch = compiler.compile(&input, &options()).unwrap();
    eprintln!("{name}: {} units in {:?}", input.len(), started.elapsed());
    assert_compiled(&batch.results, &input, &broken_at);
    assert_fails_with_nvjitlinks_log(&batch.results[broken_at[0]], "nope");
    assert_fails_with_nvjitlinks_log(&batch.results[broken_at[1]], "gpm_nosuch");
    let ptx: Vec<u64> = batch
        .results
        .iter()
        .zip(&input)
        .filter(|(_, u)| u.name.ends_with(".ptx"))
        .map(|(r, _)| r.timings.compile_us)
        .collect();
    assert!(ptx.iter().all(|&t| t > 0), "{ptx:?}");
    assert!(batch.results.iter().all(|r| r.timings.jit_us == 0));
    // A second call: the math library is there, so every PTX unit costs one nvJitLink call.
    let again = compiler.compile(&ptx_units(4), &options()).unwrap();
    let us: Vec<u64> = again.results.iter().map(|r| r.timings.compile_us + r.timings.extract_us).collect();
    eprintln!("{name}: link time per PTX unit, warm: {us:?} us");
    assert_compiled(&again.results, &ptx_units(4), &[]);
}

#[test]
fn ptx_units_link_in_process_beside_cuda_c_and_broken_ones_fail_alone() {
    if !nvjitlink_or_skip("ptx_inprocess") {
        return;
    }
    let toolchain = Toolchain::discover(None).unwrap();
    check_mixed("inprocess", &mut InProcess::new(&toolchain, &options()).unwrap());
}

#[test]
fn ptx_units_link_on_threads_beside_cuda_c_and_broken_ones_fail_alone() {
    if !nvjitlink_or_skip("ptx_threads") {
        return;
    }
    let toolchain = Toolchain::discover(None).unwrap();
    check_mixed("threads:2", &mut Threads::new(&toolchain, &options(), 2).unwrap());
}

#[test]
fn ptx_units_link_on_the_farm_beside_cuda_c_and_broken_ones_fail_alone() {
    if !nvjitlink_or_skip("ptx_farm") {
        return;
    }
    check_mixed("farm:2", &mut Farm::spawn(config(2)).unwrap());
}

#[test]
fn nvcc_and_ptx_jit_mode_refuse_ptx_units_one_by_one() {
    if !nvjitlink_or_skip("ptx_refused") {
        return;
    }
    let toolchain = Toolchain::discover(None).unwrap();
    let input = vec![Unit::ptx("p0.ptx", ptx_kernel("p_0", 0))];
    if toolchain.nvcc.is_some() {
        let batch = Nvcc::new(&toolchain).unwrap().compile(&input, &options()).unwrap();
        let UnitOutcome::Failed(f) = &batch.results[0].outcome else { panic!("nvcc compiled a PTX unit") };
        assert!(f.message.contains("CUDA C only") && f.message.contains("nvJitLink"), "{f}");
    }
    let jit = CompileOptions { mode: gpfarm_client::CompileMode::PtxJit, ..options() };
    let mut farm = Farm::spawn(config(1)).unwrap();
    let batch = farm.compile(&input, &jit).unwrap();
    let UnitOutcome::Failed(f) = &batch.results[0].outcome else { panic!("ptx-jit mode took a PTX unit") };
    assert_eq!(f.kind, FailureKind::Jit);
    assert!(f.message.contains("--mode cubin"), "{f}");
}

fn faulty_config(daemons: usize, deadline: Duration) -> FarmConfig {
    FarmConfig {
        request_timeout: deadline,
        env: vec![("GPFARM_TEST_FAULTS".into(), "1".into())],
        ..config(daemons)
    }
}

/// A PTX unit `<name>.ptx` whose `//` comment carries a test-fault marker.
fn marked(name: &str, fault: &str) -> Unit {
    Unit::ptx(format!("{name}.ptx"), format!("// gpfarm-test-fault: {fault}\n{}", ptx_kernel(name, 1)))
}

#[test]
fn a_ptx_unit_that_crashes_its_daemon_is_tried_twice_then_fails_alone() {
    if !nvjitlink_or_skip("ptx_crash") {
        return;
    }
    let mut farm = Farm::spawn(faulty_config(2, Duration::from_secs(60))).unwrap();
    let mut input = ptx_units(6);
    input.insert(2, marked("crasher", "crash"));
    let batch = farm.compile(&input, &options()).unwrap();
    let UnitOutcome::Failed(f) = &batch.results[2].outcome else { panic!("the crashing unit linked") };
    assert_eq!(f.kind, FailureKind::Lost, "{f}");
    assert!(f.message.contains("SIGABRT") && f.message.contains("on this unit"), "{f}");
    assert_compiled(&batch.results, &input, &[2]);
    assert_eq!((batch.stats.lost_daemons, batch.stats.restarts), (2, 2), "crashed once, retried once");
}

#[test]
fn a_ptx_unit_that_hangs_its_daemon_fails_alone_after_the_deadline() {
    if !nvjitlink_or_skip("ptx_hang") {
        return;
    }
    let deadline = Duration::from_secs(2);
    let mut farm = Farm::spawn(faulty_config(2, deadline)).unwrap();
    let mut input = ptx_units(4);
    input.insert(1, marked("hanger", "hang"));
    let started = Instant::now();
    let batch = farm.compile(&input, &options()).unwrap();
    let took = started.elapsed();
    let UnitOutcome::Failed(f) = &batch.results[1].outcome else { panic!("the hanging unit linked") };
    assert!(f.message.contains("no answer within"), "{f}");
    assert_compiled(&batch.results, &input, &[1]);
    assert_eq!(batch.stats.restarts, 2);
    assert!(took < deadline * 2 + Duration::from_secs(20), "took {took:?}");
}

#[test]
fn gpfarm_compile_takes_a_ptx_file_as_a_ptx_unit() {
    if !nvjitlink_or_skip("ptx_cli") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ptx = dir.path().join("mine.ptx");
    std::fs::write(&ptx, ptx_kernel("from_cli", 3)).unwrap();
    let cu = dir.path().join("mine.cu");
    std::fs::write(&cu, common::kernel("from_cu", 1)).unwrap();
    for compiler in ["farm:1", "inprocess"] {
        let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
            .args(["compile", "--compiler", compiler, "--json", "--source"])
            .arg(&ptx)
            .arg(&cu)
            .output()
            .unwrap();
        assert!(out.status.success(), "{compiler}: {}", String::from_utf8_lossy(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["ok"], 2, "{compiler}: {doc}");
        assert_eq!(doc["units"][0]["kernels"], serde_json::json!(["from_cli"]), "{compiler}: {doc}");
        assert_eq!(doc["units"][1]["kernels"], serde_json::json!(["from_cu"]), "{compiler}: {doc}");
    }
}
