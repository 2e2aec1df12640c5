//! NVRTC 13 crashes (SIGSEGV) on about 1 in 900 valid random Search programs
//! (`tests/data/nvrtc13_crash.cu` is one). These tests hold gpfarm to what it promises then:
//! an in-process compiler dies of the signal, but first prints one line that names the unit and
//! its individuals and points to the farm; the farm isolates the crash.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use common::nvrtc_or_skip;

const CRASH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/nvrtc13_crash.cu");

fn gpfarm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(args)
        .env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"))
        .env("CUDA_CACHE_DISABLE", "1")
        .output()
        .expect("gpfarm runs")
}

/// Whether this NVRTC still crashes on the reproducer (a fixed NVRTC skips the crash tests).
fn nvrtc_crashes(test: &str) -> bool {
    if !nvrtc_or_skip(test) {
        return false;
    }
    let out = gpfarm(&["compile", "--compiler", "farm", "-n", "1", "--source", CRASH]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let crashes = stdout.contains("Lost") && stdout.contains("SIGSEGV");
    if !crashes {
        eprintln!("SKIPPED {test}: this NVRTC compiles {CRASH}\n{stdout}");
    }
    crashes
}

#[test]
fn an_nvrtc_crash_in_process_ends_in_one_line_that_names_the_unit_and_points_to_the_farm() {
    if !nvrtc_crashes("in_process_crash") {
        return;
    }
    for compiler in ["inprocess", "threads:2"] {
        let out = gpfarm(&["compile", "--compiler", compiler, "--source", CRASH]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{compiler}: {:?}\n{stderr}", out.status);
        let line = stderr
            .lines()
            .find(|l| l.starts_with("error: NVRTC crashed (SIGSEGV) compiling "))
            .unwrap_or_else(|| panic!("{compiler}: no crash line in\n{stderr}"));
        assert!(
            line.contains(&format!("{} (individual 14 of generation 0)", Path::new(CRASH).display())),
            "{line}"
        );
        assert!(line.contains("--compiler farm") && line.contains("isolates"), "{line}");
    }
}

#[test]
fn an_evolve_run_whose_individual_crashes_nvrtc_in_process_names_it_before_dying() {
    if !nvrtc_crashes("in_process_evolve_crash") {
        return;
    }
    let out = gpfarm(&[
        "evolve",
        "--route",
        "nvrtc",
        "--problem",
        "search",
        "--population",
        "50",
        "--generations",
        "5",
        "--seed",
        "3",
        "--eval",
        "cpu",
        "--compiler",
        "inprocess",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{:?}\n{stderr}", out.status);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: NVRTC crashed (SIGSEGV) compiling g0_j"))
        .unwrap_or_else(|| panic!("no crash line in\n{stderr}"));
    assert!(line.contains("of generation 0)") && line.contains("--compiler farm"), "{line}");
}

/// A farm of this build's daemons.
fn farm(daemons: usize) -> gpfarm_client::Farm {
    gpfarm_client::Farm::spawn(common::config(daemons)).expect("a farm starts")
}

/// Every program NVRTC 13.0.88 is known to crash on: the reproducer and the individuals that
/// random Search runs saved (`tests/data/nvrtc13_crashes/`).
fn known_crashes() -> Vec<gpfarm_client::Unit> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nvrtc13_crashes");
    let mut paths: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    paths.insert(0, CRASH.into());
    paths
        .iter()
        .map(|p| gpfarm_client::Unit::new(p.display().to_string(), std::fs::read_to_string(p).unwrap()))
        .collect()
}

#[test]
fn the_crash_retry_flags_compile_every_known_crash_for_every_architecture_it_crashes() {
    if !nvrtc_crashes("crash_retry_flags") {
        return;
    }
    use gpfarm_client::{CompileOptions, Compiler, FailureKind, SmArch, UnitOutcome};
    let mut farm = farm(1);
    for (unit, arch) in
        known_crashes().iter().flat_map(|u| [SmArch(75), SmArch(80), SmArch::SM_90].map(|a| (u, a)))
    {
        let plain = CompileOptions::cubin(arch);
        let crashed = farm.compile(std::slice::from_ref(unit), &plain).unwrap();
        assert!(
            matches!(&crashed.results[0].outcome, UnitOutcome::Failed(f) if f.kind == FailureKind::Lost),
            "{} {arch}: {:?}",
            unit.name,
            crashed.results[0].outcome
        );
        let flags = gpfarm_evolve::CRASH_RETRY_FLAGS.iter().map(|f| f.to_string()).collect();
        let retried = farm.compile(std::slice::from_ref(unit), &CompileOptions { flags, ..plain }).unwrap();
        assert!(
            retried.results[0].cubin().is_some(),
            "{} {arch}: {:?}",
            unit.name,
            retried.results[0].outcome
        );
    }
}

/// Best and mean of every generation, and the records' individual counts.
type Run = (Vec<(f64, Option<f64>)>, Vec<gpfarm_evolve::Individuals>);

fn evolve_search(
    population: usize,
    generations: usize,
    seed: u64,
    compile: Option<(&mut gpfarm_client::Farm, &Path, bool)>,
) -> Run {
    evolve_search_on(gpfarm_evolve::EvalMode::Cpu, population, generations, seed, compile)
}

fn evolve_search_on(
    eval: gpfarm_evolve::EvalMode,
    population: usize,
    generations: usize,
    seed: u64,
    compile: Option<(&mut gpfarm_client::Farm, &Path, bool)>,
) -> Run {
    use gpfarm_evolve::{Engine, Options, ProblemRef};
    let mut options = Options {
        evolution: gpfarm_gp::EvolutionConfig {
            population,
            generations,
            seed,
            max_size: 0,
            ..Default::default()
        },
        // NVRTC crashes are the NVRTC route's.
        route: Some(gpfarm_evolve::Route::Nvrtc),
        eval,
        gpu_worker: Some(env!("CARGO_BIN_EXE_gpfarm-gpu-worker").into()),
        ..Options::default()
    };
    let (mut trajectory, mut individuals) = (Vec::new(), Vec::new());
    let mut on_record = |r: &gpfarm_evolve::GenerationRecord| {
        trajectory.push((r.best, r.mean));
        individuals.push(r.individuals.clone());
        Ok(())
    };
    match compile {
        Some((farm, crash_dir, retry)) => {
            options.crash_dir = Some(crash_dir.to_path_buf());
            if !retry {
                options.crash_retry_flags.clear();
            }
            let engine = Engine::new(ProblemRef::Builtin("search".into()), options).unwrap();
            engine.run(farm, &mut on_record).unwrap();
        }
        None => {
            let engine = Engine::new(ProblemRef::Builtin("search".into()), options).unwrap();
            engine.run_without_compiling(&mut on_record).unwrap();
        }
    }
    (trajectory, individuals)
}

fn total(
    individuals: &[gpfarm_evolve::Individuals],
    f: impl Fn(&gpfarm_evolve::Individuals) -> usize,
) -> usize {
    individuals.iter().map(f).sum()
}

#[test]
fn an_individual_that_crashes_nvrtc_is_compiled_again_and_the_run_evolves_as_without_the_crash() {
    if !nvrtc_crashes("crash_retry_run") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut farm = farm(2);
    // Seed 3's generation 0 holds an individual that crashes NVRTC (individual 36).
    let (with_retry, counts) = evolve_search(50, 5, 3, Some((&mut farm, dir.path(), true)));
    let reference = evolve_search(50, 5, 3, None).0;
    assert!(total(&counts, |i| i.crash_retried) >= 1, "{counts:?}");
    assert_eq!(total(&counts, |i| i.crash_retry_used), total(&counts, |i| i.crash_retried));
    assert_eq!(total(&counts, |i| i.failed), 0);
    assert_eq!(with_retry, reference, "the CPU's fitness of a retried individual is its own");

    // Without the retry the same individual gets the worst fitness and is counted as failed.
    let (_, counts) = evolve_search(50, 5, 3, Some((&mut farm, dir.path(), false)));
    assert!(total(&counts, |i| i.failed) >= 1, "{counts:?}");
    assert_eq!(total(&counts, |i| i.crash_retried), 0);
}

/// On the GPU (`crash_retry_on_gpu` is on by default), the retried individual's kernel is evaluated: Search's
/// GPU fitness equals the CPU evaluator's exactly (tests/gpu.rs), so the run must evolve exactly
/// as the CPU-only run does.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_retried_individual_s_kernel_gives_the_cpu_s_fitness_on_the_gpu() {
    common::require_gpu("crash_retry_gpu");
    if !nvrtc_crashes("crash_retry_gpu") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut farm = farm(4);
    let (on_gpu, counts) =
        evolve_search_on(gpfarm_evolve::EvalMode::Gpu, 50, 5, 3, Some((&mut farm, dir.path(), true)));
    let reference = evolve_search(50, 5, 3, None).0;
    eprintln!("crash retry on the GPU: {counts:?}");
    assert!(total(&counts, |i| i.crash_retry_used) >= 1, "{counts:?}");
    assert_eq!(total(&counts, |i| i.failed), 0);
    assert_eq!(on_gpu, reference);
}

#[test]
fn the_unit_of_an_individual_that_crashed_nvrtc_is_saved_and_reproduces_the_crash() {
    if !nvrtc_crashes("crash_saved") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args([
            "evolve",
            "--route",
            "nvrtc",
            "--problem",
            "search",
            "--population",
            "50",
            "--generations",
            "1",
        ])
        .args(["--seed", "3"])
        .args(["--eval", "cpu", "--compiler", "farm", "-n", "2"])
        .env("GPFARMD", env!("CARGO_BIN_EXE_gpfarmd"))
        .env("CUDA_CACHE_DISABLE", "1")
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warning = stderr
        .lines()
        .find(|l| l.contains("individual 36 of generation 0 did not compile: Lost"))
        .unwrap_or_else(|| panic!("no crash warning in\n{stderr}"));
    assert!(warning.contains("SIGSEGV") && warning.contains("phenotype: for(i=0;"), "{warning}");
    assert!(warning.contains("its fitness is used"), "{warning}");
    // The warning says where the unit is; it is in this process's crash directory and stays.
    let path = warning
        .split("its unit is in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no path in {warning}"));
    assert!(path.starts_with(&tmp.path().join("gpfarm-crashes-").display().to_string()), "{path}");
    let source = std::fs::read_to_string(path).unwrap();
    assert!(source.contains("__global__ void g0_i36("), "{source}");
    // It reproduces the crash as the warning says.
    let again = gpfarm(&["compile", "--source", path, "--compiler", "farm", "-n", "1"]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(stdout.contains("Lost") && stdout.contains("SIGSEGV"), "{stdout}");
}

#[test]
fn without_the_crash_retry_the_individual_fails_and_its_unit_goes_where_asked() {
    if !nvrtc_crashes("crash_no_retry") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let crash_dir = dir.path().join("units");
    let out = gpfarm(&[
        "evolve",
        "--route",
        "nvrtc",
        "--problem",
        "search",
        "--population",
        "50",
        "--generations",
        "0",
        "--seed",
        "3",
        "--eval",
        "cpu",
        "-n",
        "2",
        "--no-crash-retry",
        "--crash-dir",
        crash_dir.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("individual 36 of generation 0 did not compile")
            && stderr.contains("it gets the worst fitness"),
        "{stderr}"
    );
    assert!(stdout.contains("1 failed to compile (worst fitness); 0 crashed NVRTC"), "{stdout}");
    assert!(
        stdout.contains(&format!("units that did not compile are in {}", crash_dir.display())),
        "{stdout}"
    );
    assert!(crash_dir.join("g0_i36.cu").is_file());
}
