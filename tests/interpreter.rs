//! The GPU interpreter: its kernel compiles for every built-in problem (NVRTC only, no GPU);
//! on the GPU it gives the compiled routes' fitness bit for bit, fails a runaway loop alone,
//! and evolves runs exactly as the compile routes do. The GPU tests are ignored unless asked for
//! with `--include-ignored`, and then fail, saying why, when there is no GPU.

mod common;

use std::process::Command;

use common::{config, require_gpu};
use gpfarm_client::partition::per_unit;
use gpfarm_client::{CompileOptions, Compiler, FailureKind, Farm, InProcess, SmArch, Unit, UnitOutcome};
use gpfarm_gp::{Evolution, EvolutionConfig, Phenotype, Problem, Program};
use gpfarm_kernels::gpu::{self, CompiledUnit, GpuEvaluator, Kernels, WirePopulation};
use gpfarm_kernels::interpreter::{
    PackedPopulation, Tuning, assemble, interpreter_source, interpreter_source_with,
};
use gpfarm_kernels::unit::render_batch;
use gpfarm_protocol::Language;
use gpfarm_protocol::Shape;

/// The engine's compile options: no contraction.
fn options(arch: SmArch) -> CompileOptions {
    CompileOptions { flags: vec![gpfarm_evolve::NO_FMAD.into()], ..CompileOptions::cubin(arch) }
}

fn cubin_of(compiler: &mut dyn Compiler, name: &str, source: String, options: &CompileOptions) -> Vec<u8> {
    let batch = compiler.compile(&[Unit::new(name, source)], options).unwrap();
    let r = &batch.results[0];
    match r.cubin() {
        Some(c) => c.to_vec(),
        None => panic!("{name} does not compile: {:?}\n{}", r.outcome, r.log),
    }
}

#[test]
fn the_interpreter_kernel_compiles_for_every_built_in_problem() {
    if !common::nvrtc_or_skip("interpreter_kernel_compiles") {
        return;
    }
    let toolchain = gpfarm_toolchain::Toolchain::discover(None).unwrap();
    let options = options(SmArch::SM_90);
    let mut nvrtc = InProcess::new(&toolchain, &options).unwrap();
    for name in Problem::builtin_names() {
        let problem = Problem::builtin(name).unwrap();
        for interleave in [1, 2, 4] {
            let tuning = Tuning { interleave, ..Tuning::default() };
            let source = interpreter_source_with(&problem, tuning).unwrap();
            let cubin = cubin_of(&mut nvrtc, name, source, &options);
            // All three kernels are in it.
            let text = String::from_utf8_lossy(&cubin);
            for kernel in [
                gpfarm_kernels::interpreter::INTERP_KERNEL_SMALL,
                gpfarm_kernels::interpreter::INTERP_KERNEL_LARGE,
                gpu::TILES_KERNEL,
            ] {
                assert!(text.contains(kernel), "{name}, {interleave} at once: {kernel}");
            }
        }
        let three = Tuning { interleave: 3, ..Tuning::default() };
        assert!(interpreter_source_with(&problem, three).is_err(), "3 does not divide a tile's rows");
        let cubin = cubin_of(&mut nvrtc, name, gpu::fitness_source(&problem).unwrap(), &options);
        let text = String::from_utf8_lossy(&cubin);
        for kernel in [gpu::FITNESS_KERNEL, gpu::TILES_KERNEL] {
            assert!(text.contains(kernel), "{name}: {kernel}");
        }
    }
}

/// A population's bytecode for the worker's wire.
fn wire(problem: &Problem, phenotypes: &[Phenotype], max_steps: u64) -> WirePopulation {
    let codes: Vec<_> =
        phenotypes.iter().map(|p| assemble(problem, &Program::parse(problem, p).unwrap()).unwrap()).collect();
    PackedPopulation::new(&codes).into_wire(max_steps)
}

/// Generation 0 of three seeds and three bred generations of the first, deduplicated.
fn populations(problem: &Problem) -> Vec<Phenotype> {
    let mut all = Vec::new();
    for seed in [7, 8, 9] {
        let config = EvolutionConfig {
            population: 1000,
            seed,
            generations: 50,
            max_size: 0,
            ..EvolutionConfig::default()
        };
        all.extend(Evolution::new(problem, config).unwrap().dedup().unique);
    }
    all.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    all.dedup();
    all
}

/// The fitness of `phenotypes` compiled by `compiler` (a kernel per individual) and evaluated on
/// `gpu`; `None` where a unit was lost.
fn compiled_fitness(
    gpu: &mut GpuEvaluator,
    compiler: &mut dyn Compiler,
    problem: &Problem,
    phenotypes: &[Phenotype],
    options: &CompileOptions,
) -> Vec<Option<f64>> {
    let units = render_batch(
        problem,
        Language::CudaC,
        Shape::Kernels,
        SmArch::SM_90,
        phenotypes,
        0,
        &per_unit(phenotypes.len(), 32),
    )
    .units;
    let sources: Vec<Unit> = units.iter().map(|u| u.unit.clone()).collect();
    let batch = compiler.compile(&sources, options).unwrap();
    let mut built = Vec::new();
    for (u, r) in units.iter().zip(&batch.results) {
        match &r.outcome {
            UnitOutcome::Cubin(c) => built.push((c.clone(), u)),
            UnitOutcome::Failed(f) if f.kind == FailureKind::Lost => {
                eprintln!("{}: left out: {f}", u.unit.name)
            }
            UnitOutcome::Failed(f) => panic!("{}: {f}\n{}", u.unit.name, r.log),
        }
    }
    let views: Vec<CompiledUnit<'_>> = built
        .iter()
        .map(|(c, u)| CompiledUnit { cubin: c, kernels: &u.kernels, members: &u.members })
        .collect();
    gpu.evaluate(&views, phenotypes.len()).unwrap().fitness
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn interpreted_fitness_is_the_compiled_routes_fitness_bit_for_bit() {
    let arch = require_gpu("interpreter_bit_for_bit");
    let mut farm = Farm::spawn(config(std::thread::available_parallelism().map_or(2, |n| n.get()))).unwrap();
    let options = options(arch);
    for name in Problem::builtin_names() {
        let problem = Problem::builtin(name).unwrap();
        let phenotypes = populations(&problem);
        let kernels = Kernels {
            fitness: Some(cubin_of(
                &mut farm,
                "fitness.cu",
                gpu::fitness_source(&problem).unwrap(),
                &options,
            )),
            interpreter: Some(cubin_of(
                &mut farm,
                "interp.cu",
                interpreter_source(&problem).unwrap(),
                &options,
            )),
            fit: Vec::new(),
        };
        let mut gpu = GpuEvaluator::with_kernels(&problem, &kernels).unwrap();
        let compiled = compiled_fitness(&mut gpu, &mut farm, &problem, &phenotypes, &options);
        let interpreted = gpu.interpret(&wire(&problem, &phenotypes, 1_000_000)).unwrap();
        let (mut same, mut differ) = (0, 0);
        for (i, p) in phenotypes.iter().enumerate() {
            let Some(c) = compiled[i] else { continue };
            let v = interpreted.fitness[i].unwrap();
            if c.to_bits() == v.to_bits() || (c.is_nan() && v.is_nan()) {
                same += 1;
            } else {
                differ += 1;
                eprintln!("{name} #{i}: compiled {c:e} interpreted {v:e}: {}", p.as_str());
            }
        }
        eprintln!(
            "{name}: {} individuals, {same} compared bit for bit, {differ} differ; interpreter launch {:?}",
            phenotypes.len(),
            interpreted.launch
        );
        assert_eq!(differ, 0, "{name}");
        assert!(same > 1000, "{name}: {same}");
    }
}

/// Programs deeper than the small kernel's stack run in the large kernel, the others in the
/// small one, in one population: every fitness is the compiled one, and the same as when each
/// program is interpreted alone.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn deep_and_shallow_programs_share_a_population() {
    let arch = require_gpu("interpreter_deep_and_shallow");
    let problem = Problem::builtin("keijzer6").unwrap();
    let toolchain = gpfarm_toolchain::Toolchain::discover(None).unwrap();
    let options = options(arch);
    let mut nvrtc = InProcess::new(&toolchain, &options).unwrap();
    let kernels = Kernels {
        fitness: Some(cubin_of(&mut nvrtc, "fitness.cu", gpu::fitness_source(&problem).unwrap(), &options)),
        interpreter: Some(cubin_of(&mut nvrtc, "interp.cu", interpreter_source(&problem).unwrap(), &options)),
        fit: Vec::new(),
    };
    let mut gpu = GpuEvaluator::with_kernels(&problem, &kernels).unwrap();
    // Right-nested sums keep one value waiting per level: from shallow to deeper than the
    // small kernel's stack, mixed with short programs.
    let nested =
        |levels: usize| (0..levels).fold(String::from("x"), |e, k| format!("{}.5f * x + ({e})", k % 7));
    let mut phenotypes = Vec::new();
    for levels in [1, 40, 3, 33, 60, 8, 31, 45] {
        phenotypes.push(Phenotype::new(nested(levels)));
        phenotypes.push(Phenotype::new(format!("sinf(x) * {levels}.25f")));
    }
    let population = wire(&problem, &phenotypes, 1_000_000);
    let deep = population.offsets.iter().filter(|&&o| o & gpfarm_kernels::interpreter::DEEP != 0).count();
    assert!(deep >= 3 && deep < phenotypes.len() / 2, "{deep} deep programs");
    let together = gpu.interpret(&population).unwrap().fitness;
    let compiled = compiled_fitness(&mut gpu, &mut nvrtc, &problem, &phenotypes, &options);
    for (k, p) in phenotypes.iter().enumerate() {
        let alone = gpu.interpret(&wire(&problem, std::slice::from_ref(p), 1_000_000)).unwrap().fitness[0];
        let (t, a, c) = (together[k].unwrap(), alone.unwrap(), compiled[k].unwrap());
        assert_eq!(t.to_bits(), a.to_bits(), "#{k} together {t:e} alone {a:e}: {}", p.as_str());
        assert_eq!(t.to_bits(), c.to_bits(), "#{k} interpreted {t:e} compiled {c:e}: {}", p.as_str());
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_runaway_loop_fails_its_own_program_only() {
    let arch = require_gpu("interpreter_runaway");
    let problem = Problem::builtin("search").unwrap();
    let toolchain = gpfarm_toolchain::Toolchain::discover(None).unwrap();
    let options = options(arch);
    let mut nvrtc = InProcess::new(&toolchain, &options).unwrap();
    let cubin = cubin_of(&mut nvrtc, "interp.cu", interpreter_source(&problem).unwrap(), &options);
    let mut gpu = GpuEvaluator::with_kernels(
        &problem,
        &Kernels { fitness: None, interpreter: Some(cubin), fit: Vec::new() },
    )
    .unwrap();
    let phenotypes = [
        Phenotype::new("OUTPUT = (-1);"),
        Phenotype::new("OUTPUT = 1; while (1) { tmp = tmp + 1; }"),
        Phenotype::new("for(i=0;i<LENINPUT;i++){if (INPUT[i % LENINPUT] == SEARCH) {OUTPUT = i;}}"),
    ];
    let out = gpu.interpret(&wire(&problem, &phenotypes, 10_000)).unwrap();
    let cpu: Vec<f64> =
        phenotypes.iter().map(|p| gpfarm_gp::evaluate_phenotype(&problem, p).fitness.value()).collect();
    assert_eq!(out.fitness[0], Some(cpu[0]));
    assert!(out.fitness[1].unwrap().is_nan(), "{:?}", out.fitness);
    assert_eq!(out.fitness[2], Some(cpu[2]));
}

/// 20 generations of each problem interpreted and compiled (PTX), evaluated on the GPU: the same
/// best, mean and median in every generation.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn runs_by_the_interpreter_evolve_as_runs_by_the_compile_routes() {
    require_gpu("interpreter_runs");
    for problem in ["search", "keijzer6", "multiplier5"] {
        let run = |route: &str| -> Vec<serde_json::Value> {
            let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
                .args(["evolve", "--eval", "gpu", "--problem", problem, "--population", "300"])
                .args(["--generations", "20", "--seed", "1", "--json", "--route", route])
                .output()
                .unwrap();
            assert!(out.status.success(), "{problem} {route}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
        };
        let routes = ["ptx", "interpreter", "auto"];
        let records: Vec<_> = routes.iter().map(|r| run(r)).collect();
        for (r, route) in records.iter().zip(routes) {
            assert_eq!(r.len(), 22, "{route}");
            for (x, y) in records[0][..21].iter().zip(&r[..21]) {
                for field in ["best", "mean", "median"] {
                    assert_eq!(
                        x[field], y[field],
                        "{problem} {route} generation {} {field}",
                        x["generation"]
                    );
                }
                assert_eq!(y["evaluator"], "gpu");
            }
            eprintln!(
                "{problem}: {route} ({}) {:.2} ms per generation",
                r[21]["route"],
                r[21]["mean_generation_ms"].as_f64().unwrap()
            );
        }
        assert_eq!(records[2][21]["route"], "interpreter");
    }
}
