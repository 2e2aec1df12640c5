//! GPU evaluation in a worker process: a kernel that faults, or never ends, costs only its
//! individual. Kept apart from `gpu_fault.rs`, whose test poisons every CUDA context of its
//! process.

mod common;

use std::process::Command;

use gpfarm_client::{Compiler, Unit};
use gpfarm_client::{GpuWorker, ProblemRef};
use gpfarm_kernels::gpu::CompiledUnit;

/// One unit of six keijzer6 kernels `i0`..`i5`, kernel `k` running `body(k)` on case `c`: its
/// CUBIN, kernel names and members.
fn six_kernels(
    farm: &mut gpfarm_client::Farm,
    options: &gpfarm_client::CompileOptions,
    body: &dyn Fn(usize) -> String,
) -> (Vec<u8>, Vec<String>, Vec<usize>) {
    let src: String = (0..6)
        .map(|k| {
            format!(
                "extern \"C\" __global__ void i{k}(const float* in_x, float* out_y, int NCASES)\n\
                 {{ int c = blockIdx.x * blockDim.x + threadIdx.x; if (c < NCASES) {{ {} }} }}\n",
                body(k)
            )
        })
        .collect();
    let batch = farm.compile(&[Unit::new("six.cu", src)], options).unwrap();
    let cubin = batch.results[0].cubin().unwrap().to_vec();
    (cubin, (0..6).map(|k| format!("i{k}")).collect(), (0..6).collect())
}

/// A GPU worker process for keijzer6 with its fitness kernel.
fn keijzer6_worker(fitness_cubin: Vec<u8>) -> GpuWorker {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_gpfarm-gpu-worker"));
    GpuWorker::spawn(exe, ProblemRef::Builtin("keijzer6".into()), fitness_cubin).unwrap()
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn in_a_worker_process_a_faulting_kernel_costs_only_its_individual() {
    let (options, mut farm, _, fitness_cubin) = common::keijzer6_on_gpu("worker_fault");
    // Six individuals in one unit; the third traps, the fifth reads far out of bounds.
    let body = |k: usize| match k {
        2 => "out_y[c] = in_x[c]; __trap();".to_string(),
        4 => "out_y[c] = in_x[c + (1 << 30)];".to_string(),
        k => format!("out_y[c] = in_x[c] * {k}.5f;"),
    };
    let (cubin, kernels, members) = six_kernels(&mut farm, &options, &body);
    let mut worker = keijzer6_worker(fitness_cubin);
    let units = [CompiledUnit { cubin: &cubin, kernels: &kernels, members: &members }];
    let t = std::time::Instant::now();
    let out = worker.evaluate(&units, 6).expect("the faults were isolated");
    eprintln!(
        "worker_fault: {:?} to isolate, {} worker restarts, faults: {:?}",
        t.elapsed(),
        worker.restarts,
        out.faults
    );
    let mut faulted: Vec<usize> = out.faults.iter().map(|(i, _)| *i).collect();
    faulted.sort_unstable();
    assert_eq!(faulted, vec![2, 4]);
    assert!(out.faults.iter().all(|(_, why)| why.contains("kernel faulted")), "{:?}", out.faults);
    assert!(out.fitness[2].is_none() && out.fitness[4].is_none());
    // The others got exactly the fitness a clean generation gives them.
    let good: Vec<usize> = vec![0, 1, 3, 5];
    let (gk, gm): (Vec<String>, Vec<usize>) = good.iter().map(|&k| (format!("i{k}"), k)).unzip();
    let clean = worker.evaluate(&[CompiledUnit { cubin: &cubin, kernels: &gk, members: &gm }], 6).unwrap();
    for k in good {
        assert!(out.fitness[k].is_some(), "individual {k} lost its fitness");
        assert_eq!(out.fitness[k], clean.fitness[k], "individual {k}");
    }
    // And the worker is usable afterwards without another restart.
    let restarts = worker.restarts;
    worker.evaluate(&[CompiledUnit { cubin: &cubin, kernels: &gk, members: &gm }], 6).unwrap();
    assert_eq!(worker.restarts, restarts);
}

/// The watchdog: a kernel that never ends is killed with its worker at the deadline, named in
/// careful mode, reported as a timeout, and the rest of the generation (a trapping kernel
/// included) is evaluated as a clean generation evaluates it.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_kernel_that_never_ends_costs_only_its_individual_and_the_deadline() {
    let (options, mut farm, _, fitness_cubin) = common::keijzer6_on_gpu("worker_timeout");
    // The second spins forever (on the clock, which no compiler may read away); the
    // fourth traps.
    let body = |k: usize| match k {
        1 => "while (clock64() >= 0) {} out_y[c] = in_x[c];".to_string(),
        3 => "out_y[c] = in_x[c]; __trap();".to_string(),
        k => format!("out_y[c] = in_x[c] * {k}.5f;"),
    };
    let (cubin, kernels, members) = six_kernels(&mut farm, &options, &body);
    let mut worker = keijzer6_worker(fitness_cubin);
    let deadline = std::time::Duration::from_secs(3);
    worker.set_deadline(deadline);
    let units = [CompiledUnit { cubin: &cubin, kernels: &kernels, members: &members }];
    let t = std::time::Instant::now();
    let out = worker.evaluate(&units, 6).expect("the endless kernel and the fault were isolated");
    let took = t.elapsed();
    eprintln!(
        "worker_timeout: {took:?} to isolate, {} worker restarts, faults: {:?}",
        worker.restarts, out.faults
    );
    // The whole batch, then the careful pass up to the endless kernel: two deadlines and the
    // restarts, not more.
    assert!(took < deadline * 6, "{took:?}");
    assert_eq!(out.timeouts, vec![1]);
    let mut faulted: Vec<usize> = out.faults.iter().map(|(i, _)| *i).collect();
    faulted.sort_unstable();
    assert_eq!(faulted, vec![1, 3]);
    let why = |i: usize| out.faults.iter().find(|(j, _)| *j == i).map(|(_, w)| w.clone()).unwrap();
    assert!(why(1).starts_with("timeout"), "{}", why(1));
    assert!(why(3).contains("kernel faulted"), "{}", why(3));
    assert!(out.fitness[1].is_none() && out.fitness[3].is_none());
    let good: Vec<usize> = vec![0, 2, 4, 5];
    let (gk, gm): (Vec<String>, Vec<usize>) = good.iter().map(|&k| (format!("i{k}"), k)).unzip();
    let clean = worker.evaluate(&[CompiledUnit { cubin: &cubin, kernels: &gk, members: &gm }], 6).unwrap();
    for k in good {
        assert!(out.fitness[k].is_some(), "individual {k} lost its fitness");
        assert_eq!(out.fitness[k], clean.fitness[k], "individual {k}");
    }
    assert!(clean.timeouts.is_empty() && clean.faults.is_empty());
}

#[test]
fn a_worker_that_cannot_start_says_why() {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_gpfarm-gpu-worker"));
    let err = GpuWorker::spawn(exe, ProblemRef::Builtin("no-such-problem".into()), Vec::new()).err();
    let err = err.expect("a worker for an unknown problem started").to_string();
    assert!(err.contains("could not start"), "{err}");
}

/// The files of the problem directory `dir`, held in memory.
fn in_memory(dir: &std::path::Path) -> ProblemRef {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    ProblemRef::Memory(std::sync::Arc::new(gpfarm_protocol::worker::ProblemFiles {
        origin: format!("memory:{}", dir.display()),
        toml: read("problem.toml"),
        grammar: read("grammar.bnf"),
        template: read("template.cu"),
        cases: gpfarm_protocol::worker::CasesFile::Json(read("cases.json")),
    }))
}

/// A problem held in memory reaches the worker in its readying request: one that does not load
/// is refused with the loader's reason, naming the problem's origin (no GPU needed: the problem
/// is loaded before the context is made).
#[test]
fn a_worker_for_a_problem_in_memory_that_does_not_load_says_why() {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_gpfarm-gpu-worker"));
    let problem = in_memory(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/friedman1"));
    let ProblemRef::Memory(files) = problem else { unreachable!() };
    let mut broken = (*files).clone();
    broken.origin = "memory:broken".into();
    broken.toml.push_str("\nno_such_field = 1\n");
    let err = GpuWorker::spawn(exe, ProblemRef::Memory(std::sync::Arc::new(broken)), Vec::new()).err();
    let err = err.expect("a worker for a broken problem started").to_string();
    assert!(err.contains("could not start") && err.contains("memory:broken/problem.toml"), "{err}");
}

/// A problem held in memory is evaluated and fitted on the GPU as its directory is: the same
/// generations bit for bit, in a fresh worker and in one kept from a run before.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_problem_in_memory_is_evaluated_on_the_gpu_as_its_directory_is() {
    use gpfarm_evolve::plan::{self, CompilerRequest};
    common::require_gpu("memory_problem");
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_gpfarm-gpu-worker"));
    let run = |problem: ProblemRef, keep: bool| {
        let options = gpfarm_evolve::Options {
            evolution: gpfarm_gp::EvolutionConfig {
                population: 100,
                generations: 3,
                seed: 2,
                max_size: 0,
                ..Default::default()
            },
            eval: gpfarm_evolve::EvalMode::Gpu,
            route: Some(gpfarm_evolve::Route::Interpreter),
            gpu_worker: Some(exe.clone()),
            keep_gpu_worker: keep,
            ..Default::default()
        };
        let request = CompilerRequest { spec: gpfarm_client::CompilerSpec::InProcess, ..Default::default() };
        let (engine, mut compilers) = plan::prepare(problem, options, &request).unwrap();
        let mut best = Vec::new();
        let summary = plan::run(&engine, &mut compilers, |r| {
            best.push((r.best.to_bits(), r.mean.map(f64::to_bits), r.fitted_on_gpu, r.evaluator));
            Ok(())
        })
        .unwrap();
        (best, summary.totals.gpu_workers_reused)
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/friedman1");
    let (on_disk, _) = run(ProblemRef::Dir(dir.clone()), false);
    assert!(
        on_disk.iter().all(|g| g.3 == gpfarm_evolve::EvaluatorKind::Gpu) && on_disk.iter().any(|g| g.2 > 0),
        "{on_disk:?}"
    );
    // Kept after it (taking over one an earlier test of this process kept, if there is one),
    // and taken back by the next run.
    let (fresh, _) = run(in_memory(&dir), true);
    assert_eq!(fresh, on_disk);
    let (kept, reused) = run(in_memory(&dir), true);
    assert_eq!(reused, 1, "the worker kept by the run before");
    assert_eq!(kept, on_disk);
}

/// `CUDA_VISIBLE_DEVICES=` hides every GPU from the worker, so this runs alike on machines with
/// and without one.
#[test]
fn a_worker_that_sees_no_gpu_says_no_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let hiding = dir.path().join("gpfarm-gpu-worker-without-gpus");
    // A child process writes the wrapper: a write descriptor held by this process could leak into
    // another test's fork and make running the wrapper fail with "text file busy".
    let written = Command::new("sh")
        .arg("-c")
        .arg(r#"printf '#!/bin/sh\nCUDA_VISIBLE_DEVICES= exec "%s" "$@"\n' "$1" > "$2" && chmod +x "$2""#)
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_gpfarm-gpu-worker"))
        .arg(&hiding)
        .status()
        .unwrap();
    assert!(written.success());
    let err = GpuWorker::spawn(&hiding, ProblemRef::Builtin("keijzer6".into()), Vec::new()).err();
    let err = err.expect("a GPU worker started without a GPU").to_string();
    assert!(err.contains("no GPU"), "{err}");
    eprintln!("without a GPU: {err}");
}

#[test]
fn the_worker_binary_is_found_beside_the_test_binaries() {
    let found = gpfarm_client::gpu_worker_executable().expect("gpfarm-gpu-worker not found");
    assert_eq!(found.file_name().unwrap(), "gpfarm-gpu-worker");
    assert!(found.is_file());
}

#[test]
fn a_missing_worker_binary_is_a_spawn_error_naming_it() {
    let exe = std::path::Path::new("/nonexistent/gpfarm-gpu-worker");
    let err = GpuWorker::spawn(exe, ProblemRef::Builtin("keijzer6".into()), Vec::new()).err();
    let err = err.expect("a worker started from a missing binary");
    assert!(matches!(err, gpfarm_client::WorkerError::Spawn(ref e) if e.program == exe), "{err}");
}

/// A worker kept after a run (`keep_gpu_worker`) serves the next run of the process, on another
/// problem and with the fitting kernels, without a process started: that run's generations are
/// those a fresh worker gives, bit for bit.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_kept_worker_serves_the_next_run_as_a_fresh_one_would() {
    use gpfarm_evolve::plan::{self, CompilerRequest};
    common::require_gpu("kept_worker");
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_gpfarm-gpu-worker"));
    let run = |problem: ProblemRef, keep: bool| {
        let options = gpfarm_evolve::Options {
            evolution: gpfarm_gp::EvolutionConfig {
                population: 100,
                generations: 3,
                seed: 2,
                max_size: 0,
                ..Default::default()
            },
            eval: gpfarm_evolve::EvalMode::Gpu,
            route: Some(gpfarm_evolve::Route::Interpreter),
            gpu_worker: Some(exe.clone()),
            keep_gpu_worker: keep,
            ..Default::default()
        };
        let request = CompilerRequest { spec: gpfarm_client::CompilerSpec::InProcess, ..Default::default() };
        let (engine, mut compilers) = plan::prepare(problem, options, &request).unwrap();
        let mut best = Vec::new();
        let t = std::time::Instant::now();
        let summary = plan::run(&engine, &mut compilers, |r| {
            best.push((r.best.to_bits(), r.fitted_on_gpu));
            Ok(())
        })
        .unwrap();
        eprintln!("kept_worker: run (keep {keep}) in {:.2?}, {summary:?}", t.elapsed());
        (best, summary.totals.gpu_workers_reused)
    };
    let friedman1 =
        ProblemRef::Dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/friedman1"));
    let (fresh, reused) = run(friedman1.clone(), false);
    assert_eq!(reused, 0);
    assert!(fresh.iter().any(|&(_, on_gpu)| on_gpu > 0), "nothing was fitted on the GPU: {fresh:?}");
    let (_, reused) = run(ProblemRef::Builtin("keijzer6".into()), true);
    assert_eq!(reused, 0, "nothing was kept before");
    let (kept, reused) = run(friedman1, true);
    assert_eq!(reused, 1, "the worker kept by the keijzer6 run");
    assert_eq!(kept, fresh);
}

/// On the interpreter route a generation is admitted in parts, each while the GPU interprets the
/// one before (several requests in flight to the worker): every generation's best, mean and
/// median are those of the run admitted whole (`GPFARM_ADMIT_PARTS=1`), bit for bit, in two parts
/// or in the most a generation of 700 makes (5 of 128 or more).
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn admitting_in_parts_changes_no_value() {
    common::require_gpu("parts");
    let run = |parts: &str| -> Vec<(String, String, String)> {
        let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
            .args(["evolve", "--json", "--problem", "keijzer6", "--route", "interpreter"])
            .args(["--population", "700", "--generations", "5", "--seed", "4"])
            .env("GPFARM_ADMIT_PARTS", parts)
            .env("GPFARM_GPU_WORKER", env!("CARGO_BIN_EXE_gpfarm-gpu-worker"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|r| r.get("generation").is_some())
            .map(|r| (r["best"].to_string(), r["mean"].to_string(), r["median"].to_string()))
            .collect()
    };
    let whole = run("1");
    assert_eq!(whole.len(), 6, "{whole:?}");
    assert_eq!(run("2"), whole);
    assert_eq!(run("64"), whole);
}
