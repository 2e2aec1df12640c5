//! GPU evaluation against the CPU reference evaluator. Every test needs a GPU, so each is ignored
//! unless asked for with `--include-ignored`, and then fails, saying why, when there is none.

mod common;

use std::num::NonZeroUsize;
use std::process::Command;

use common::{config, require_gpu};
use gpfarm_client::partition::per_unit;
use gpfarm_client::{CompileOptions, Compiler, FailureKind, Farm, SmArch, Unit, UnitOutcome};
use gpfarm_gp::{Evolution, EvolutionConfig, Phenotype, Problem, evaluate_all};
use gpfarm_kernels::gpu::{self, CompiledUnit, GpuEvaluator};
use gpfarm_kernels::unit::render_batch;
use gpfarm_protocol::Language;
use gpfarm_protocol::Shape;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

struct Built {
    cubins: Vec<(Vec<u8>, Vec<String>, Vec<usize>)>,
}

fn compile(farm: &mut Farm, problem: &Problem, phenotypes: &[Phenotype], arch: SmArch) -> Built {
    compile_with(farm, problem, phenotypes, &CompileOptions::cubin(arch))
}

fn compile_with(
    farm: &mut Farm,
    problem: &Problem,
    phenotypes: &[Phenotype],
    options: &CompileOptions,
) -> Built {
    compile_shaped(farm, problem, phenotypes, options, Shape::Kernels)
}

fn compile_shaped(
    farm: &mut Farm,
    problem: &Problem,
    phenotypes: &[Phenotype],
    options: &CompileOptions,
    shape: Shape,
) -> Built {
    let arch = options.arch;
    let units =
        render_batch(problem, Language::CudaC, shape, arch, phenotypes, 0, &per_unit(phenotypes.len(), 32))
            .units;
    let wire: Vec<Unit> = units.iter().map(|u| u.unit.clone()).collect();
    let batch = farm.compile(&wire, options).unwrap();
    let mut cubins = Vec::new();
    for (u, r) in units.into_iter().zip(batch.results) {
        match r.outcome {
            UnitOutcome::Cubin(c) => cubins.push((c, u.kernels, u.members)),
            // NVRTC 13.0 crashes on a few valid programs (tests/data/nvrtc13_crash.cu); their unit
            // is left out of the comparison.
            UnitOutcome::Failed(f) if f.kind == FailureKind::Lost => {
                eprintln!("{}: left out, {} individuals: {f}", u.unit.name, u.members.len())
            }
            UnitOutcome::Failed(f) => panic!("{}: {f}\n{}", u.unit.name, r.log),
        }
    }
    Built { cubins }
}

fn evaluator(farm: &mut Farm, problem: &Problem, arch: SmArch) -> GpuEvaluator {
    let src = gpu::fitness_source(problem).unwrap();
    let batch = farm.compile(&[Unit::new("fitness.cu", src)], &CompileOptions::cubin(arch)).unwrap();
    let cubin = batch.results[0].cubin().expect("fitness kernel compiles").to_vec();
    GpuEvaluator::new(problem, cubin).unwrap()
}

fn views(built: &Built) -> Vec<CompiledUnit<'_>> {
    built.cubins.iter().map(|(c, k, m)| CompiledUnit { cubin: c, kernels: k, members: m }).collect()
}

/// One kernel's CUBIN; panics with NVRTC's log when it does not compile.
fn kernel_cubin(farm: &mut Farm, name: &str, source: String, options: &CompileOptions) -> Vec<u8> {
    let batch = farm.compile(&[Unit::new(name, source)], options).unwrap();
    batch.results[0].cubin().unwrap_or_else(|| panic!("{name}: {}", batch.results[0].log)).to_vec()
}

/// `phenotypes` in `language` and `shape`, 32 to a unit, every unit compiled (a unit that fails
/// panics with its log); also how many phenotypes the PTX route's parser refused.
fn compile_every_unit(
    farm: &mut Farm,
    problem: &Problem,
    (language, shape): (Language, Shape),
    phenotypes: &[Phenotype],
    options: &CompileOptions,
) -> (Built, usize) {
    let rendered =
        render_batch(problem, language, shape, options.arch, phenotypes, 0, &per_unit(phenotypes.len(), 32));
    let wire: Vec<Unit> = rendered.units.iter().map(|u| u.unit.clone()).collect();
    let batch = farm.compile(&wire, options).unwrap();
    let mut cubins = Vec::new();
    for (u, r) in rendered.units.into_iter().zip(batch.results) {
        match r.outcome {
            UnitOutcome::Cubin(c) => cubins.push((c, u.kernels, u.members)),
            UnitOutcome::Failed(f) => panic!("{}: {f}\n{}", u.unit.name, r.log),
        }
    }
    (Built { cubins }, rendered.refused.len())
}

/// 1000 random individuals (generation 0 of a seeded run), deduplicated.
fn random_phenotypes(problem: &Problem, seed: u64) -> Vec<Phenotype> {
    let evo = Evolution::new(
        problem,
        EvolutionConfig {
            population: 1000,
            seed,
            generations: 50,
            max_size: 0,
            ..EvolutionConfig::default()
        },
    )
    .unwrap();
    evo.dedup().unique
}

/// Compares GPU and CPU fitness of 1000 random individuals; returns how many of the compiled
/// individuals differ by more than `tolerance` (relative), after printing each, and how many were
/// compiled.
fn compare(problem_name: &str, tolerance: f64) -> (usize, usize) {
    compare_with(problem_name, tolerance, &[])
}

fn compare_with(problem_name: &str, tolerance: f64, flags: &[&str]) -> (usize, usize) {
    let arch = require_gpu(problem_name);
    let problem = Problem::builtin(problem_name).unwrap();
    let phenotypes = random_phenotypes(&problem, 7);
    let mut farm = Farm::spawn(config(cores())).unwrap();
    let options = CompileOptions {
        flags: flags.iter().map(|f| f.to_string()).collect(),
        ..CompileOptions::cubin(arch)
    };
    let built = compile_with(&mut farm, &problem, &phenotypes, &options);
    let mut gpu = evaluator(&mut farm, &problem, arch);
    let on_gpu = gpu.evaluate(&views(&built), phenotypes.len()).unwrap();
    assert!(on_gpu.faults.is_empty(), "{:?}", on_gpu.faults);
    let on_cpu = evaluate_all(&problem, &phenotypes, NonZeroUsize::new(cores()).unwrap());
    let compiled: Vec<usize> = built.cubins.iter().flat_map(|c| c.2.iter().copied()).collect();
    let (mut both_bad, mut worst_rel, mut differ) = (0, 0.0f64, 0);
    for &i in &compiled {
        let (g, c) = (on_gpu.fitness[i].unwrap_or(f64::NAN), &on_cpu[i]);
        let c_ok = c.failure.is_none() && c.fitness.is_finite();
        let rel = if !g.is_finite() && !c_ok {
            both_bad += 1;
            0.0
        } else if g.is_finite() && c_ok {
            (g - c.fitness.value()).abs() / c.fitness.value().abs().max(1.0)
        } else {
            f64::INFINITY
        };
        if rel > tolerance {
            differ += 1;
            eprintln!(
                "{problem_name} #{i}: gpu {g} cpu {} (rel {rel:e}): {}",
                c.fitness,
                phenotypes[i].as_str()
            );
        } else {
            worst_rel = worst_rel.max(rel);
        }
    }
    eprintln!(
        "{problem_name} {flags:?}: {} distinct individuals, {} compiled, {both_bad} invalid on both, {differ} beyond {tolerance:e}, \
         largest difference within it {worst_rel:e}",
        phenotypes.len(),
        compiled.len()
    );
    (differ, compiled.len())
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn search_fitness_on_the_gpu_equals_the_cpu_evaluator_exactly() {
    let (differ, _) = compare("search", 0.0);
    assert_eq!(differ, 0);
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn multiplier5_fitness_on_the_gpu_equals_the_cpu_evaluator_exactly() {
    let (differ, _) = compare("multiplier5", 0.0);
    assert_eq!(differ, 0);
}

/// Keijzer-6 is float arithmetic with sinf/expf/tanhf/logf/sqrtf: CUDA's versions are within
/// 1-2 ulp of the correctly rounded result and glibc's within 1, and NVRTC contracts a*b+c into
/// one FMA where the CPU rounds twice. An output may so differ by a few ulp of float (relative
/// ~1e-7 per operation, compounding through an expression), and the RMSE inherits that: 1e-4
/// relative leaves room for long expressions while staying far below any difference selection
/// acts on. Some expressions amplify an ulp without bound: in `sinf(expf(x))`, expf(64) is about
/// 6e27, where one ulp of float spans many periods of the sine, so the two evaluators compute
/// different, equally rounded answers. Those are reported one by one, and must stay under 1% of
/// the individuals.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn keijzer6_fitness_on_the_gpu_matches_the_cpu_evaluator_within_1e_4() {
    let (differ, compiled) = compare("keijzer6", 1e-4);
    assert!(differ * 100 <= compiled, "{differ} of {compiled} differ beyond 1e-4");
}

/// The PTX route against the NVRTC route (both without contraction, as the engine compiles),
/// each in both unit shapes: random individuals of each problem get bit-identical fitness on the
/// GPU, whether a kernel each or branches of a switch kernel, launched together or (careful mode,
/// with some left out) one by one.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn the_ptx_route_gives_the_nvrtc_route_s_fitness_bit_for_bit() {
    let arch = require_gpu("ptx_route_agreement");
    let mut farm = Farm::spawn(config(cores())).unwrap();
    let nvrtc = CompileOptions { flags: vec![gpfarm_evolve::NO_FMAD.into()], ..CompileOptions::cubin(arch) };
    let (mut differ, mut total) = (0, 0);
    for problem_name in ["search", "keijzer6", "multiplier5"] {
        let problem = Problem::builtin(problem_name).unwrap();
        let mut gpu = evaluator(&mut farm, &problem, arch);
        for seed in [7, 8, 9] {
            let phenotypes = random_phenotypes(&problem, seed);
            let reference = compile_with(&mut farm, &problem, &phenotypes, &nvrtc);
            let on_nvrtc = gpu.evaluate(&views(&reference), phenotypes.len()).unwrap();
            let mut compare = |what: &str, fitness: &[Option<f64>], skipped: &[usize]| {
                let mut compared = 0;
                for (i, (x, y)) in on_nvrtc.fitness.iter().zip(fitness).enumerate() {
                    let Some(x) = x else { continue };
                    if skipped.contains(&i) {
                        assert_eq!(*y, None, "{what}: #{i} was left out");
                        continue;
                    }
                    compared += 1;
                    if y.map(f64::to_bits) != Some(x.to_bits()) {
                        differ += 1;
                        eprintln!(
                            "{problem_name} seed {seed} #{i}: nvrtc {x:e}, {what} {y:?}: {}",
                            phenotypes[i].as_str()
                        );
                    }
                }
                total += compared;
                eprintln!("{what}, {problem_name} seed {seed}: {compared} individuals compared");
            };
            let switched = compile_shaped(&mut farm, &problem, &phenotypes, &nvrtc, Shape::Switch);
            compare("nvrtc switch", &gpu.evaluate(&views(&switched), phenotypes.len()).unwrap().fitness, &[]);
            for shape in [Shape::Kernels, Shape::Switch] {
                let (b, refused) =
                    compile_every_unit(&mut farm, &problem, (Language::Ptx, shape), &phenotypes, &nvrtc);
                eprintln!("ptx {shape}, {problem_name} seed {seed}: {refused} refused by the parser");
                let what = format!("ptx {shape}");
                compare(&what, &gpu.evaluate(&views(&b), phenotypes.len()).unwrap().fitness, &[]);
                // One launch per individual, some left out.
                let skip: Vec<usize> = (0..phenotypes.len()).filter(|i| i % 7 == 3).collect();
                let careful = gpu.evaluate_with(&views(&b), phenotypes.len(), true, &skip).unwrap();
                compare(&format!("{what} careful"), &careful.fitness, &skip);
            }
        }
    }
    eprintln!("ptx route and switch shapes: {differ} of {total} differ");
    assert_eq!(differ, 0);
}

/// 20 generations of each problem by either route, evaluated on the GPU: the same best, mean and
/// median in every generation.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn runs_by_either_route_evolve_the_same_on_the_gpu() {
    require_gpu("ptx_route_runs");
    for problem in ["search", "keijzer6", "multiplier5"] {
        let run = |route: &str, shape: &str| -> Vec<serde_json::Value> {
            let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
                .args(["evolve", "--eval", "gpu", "--problem", problem, "--population", "300"])
                .args(["--generations", "20", "--seed", "1", "--json", "--route", route, "--shape", shape])
                .output()
                .unwrap();
            assert!(out.status.success(), "{problem} {route}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
        };
        let runs = [("nvrtc", "kernels"), ("nvrtc", "switch"), ("ptx", "kernels"), ("ptx", "switch")];
        let records: Vec<_> = runs.iter().map(|(route, shape)| run(route, shape)).collect();
        for (r, (route, shape)) in records.iter().zip(&runs) {
            assert_eq!(r.len(), 22, "{route} {shape}");
            for (x, y) in records[0][..21].iter().zip(&r[..21]) {
                for field in ["best", "mean", "median"] {
                    assert_eq!(
                        x[field], y[field],
                        "{problem} {route} {shape} generation {} {field}",
                        x["generation"]
                    );
                }
                assert_eq!(y["evaluator"], "gpu");
            }
            eprintln!(
                "{problem}: {route} {shape} {:.1} ms per generation",
                r[21]["mean_generation_ms"].as_f64().unwrap()
            );
        }
    }
}

/// The engine may evaluate an individual compiled with its crash retry flags on the GPU only if
/// those flags give the same fitness as the default ones: every random individual of each
/// problem, compiled both ways, must get bit-identical fitness on the GPU.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn the_crash_retry_flags_give_bit_identical_fitness_on_the_gpu() {
    let arch = require_gpu("crash_retry_flags_gpu");
    let mut farm = Farm::spawn(config(cores())).unwrap();
    // As the engine compiles: without contraction, then with the retry flags added.
    let base = CompileOptions { flags: vec![gpfarm_evolve::NO_FMAD.into()], ..CompileOptions::cubin(arch) };
    let mut retry = base.clone();
    retry.flags.extend(gpfarm_evolve::CRASH_RETRY_FLAGS.iter().map(|f| f.to_string()));
    let mut differ = 0;
    for problem_name in ["search", "keijzer6", "multiplier5"] {
        let problem = Problem::builtin(problem_name).unwrap();
        let mut gpu = evaluator(&mut farm, &problem, arch);
        for seed in [7, 8] {
            let phenotypes = random_phenotypes(&problem, seed);
            let plain = compile_with(&mut farm, &problem, &phenotypes, &base);
            let retried = compile_with(&mut farm, &problem, &phenotypes, &retry);
            let a = gpu.evaluate(&views(&plain), phenotypes.len()).unwrap();
            let b = gpu.evaluate(&views(&retried), phenotypes.len()).unwrap();
            let mut compared = 0;
            for (i, (x, y)) in a.fitness.iter().zip(&b.fitness).enumerate() {
                let (Some(x), Some(y)) = (x, y) else { continue };
                compared += 1;
                if x.to_bits() != y.to_bits() {
                    differ += 1;
                    eprintln!("{problem_name} seed {seed} #{i}: {x:e} vs {y:e}: {}", phenotypes[i].as_str());
                }
            }
            eprintln!("crash retry flags, {problem_name} seed {seed}: {compared} individuals compared");
        }
    }
    assert_eq!(differ, 0, "fitness differs with {:?}", retry.flags);
}

/// Without contraction (the engine's default), only the transcendental functions' last bits can
/// tell the GPU from the CPU.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn keijzer6_fitness_without_contraction_matches_the_cpu_evaluator_within_1e_4() {
    let (differ, compiled) = compare_with("keijzer6", 1e-4, &[gpfarm_evolve::NO_FMAD]);
    assert!(differ * 100 <= compiled, "{differ} of {compiled} differ beyond 1e-4");
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_kernel_that_faults_on_the_gpu_does_not_end_an_evolve_run() {
    require_gpu("faulting_run");
    // Keijzer-6 as a user problem whose kernel traps whenever an output exceeds 1000: random
    // populations have such individuals (expf of x up to 64) in generation 0.
    let src = gpfarm_gp::problem::builtin::sources("keijzer6").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("problem.toml"), src.toml).unwrap();
    std::fs::write(dir.path().join("grammar.bnf"), src.grammar).unwrap();
    std::fs::write(dir.path().join("cases.json"), src.cases).unwrap();
    let template = src.template.replace(
        "out_y[c] = (float)({{PHENOTYPE}});",
        "const float r = (float)({{PHENOTYPE}});\n    if (r > 1000.0f) __trap();\n    out_y[c] = r;",
    );
    assert_ne!(template, src.template, "the template changed shape; update this test");
    std::fs::write(dir.path().join("template.cu"), template).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
        .args(["evolve", "--eval", "gpu", "--problem-dir"])
        .arg(dir.path())
        .args(["--population", "100", "--generations", "3", "--seed", "1", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let records: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len(), 5, "4 generations and a summary");
    // Every generation stays on the GPU: the worker process that faulted is replaced, and only
    // the individuals whose kernels trapped lose their fitness.
    assert!(
        records[..4].iter().all(|r| r["evaluator"] == "gpu" && r["eval_split"]["fell_back_to_cpu"].is_null())
    );
    let faults: Vec<u64> = records[..4].iter().map(|r| r["eval_split"]["faults"].as_u64().unwrap()).collect();
    assert!(faults[0] > 0, "generation 0 had no trapping individual: {}", records[0]);
    assert!(!stderr.contains("falling back"), "{stderr}");
    for r in &records[..4] {
        eprintln!(
            "faulting run: generation {}: {} faults isolated, {} worker restarts so far, best {}, evaluation {:.1} ms",
            r["generation"],
            r["eval_split"]["faults"],
            r["eval_split"]["gpu_worker_restarts"],
            r["best"],
            r["eval_ms"]
        );
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn device_memory_does_not_grow_over_many_generations() {
    let arch = require_gpu("memory_growth");
    let problem = Problem::builtin("keijzer6").unwrap();
    let mut farm = Farm::spawn(config(cores())).unwrap();
    let phenotypes = random_phenotypes(&problem, 3);
    let built = compile(&mut farm, &problem, &phenotypes, arch);
    let mut gpu = evaluator(&mut farm, &problem, arch);
    let free = || cudarc::driver::result::mem_get_info().map(|(free, _)| free).unwrap();
    gpu.evaluate(&views(&built), phenotypes.len()).unwrap();
    let before = free();
    for _ in 0..50 {
        gpu.evaluate(&views(&built), phenotypes.len()).unwrap();
    }
    let after = free();
    eprintln!("free device memory before {before}, after 50 generations {after}");
    assert!(after + (16 << 20) >= before, "device memory shrank by {} bytes", before - after);
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn twenty_generations_of_each_problem_run_on_the_gpu() {
    require_gpu("evolve_on_gpu");
    for problem in ["search", "keijzer6", "multiplier5"] {
        let out = Command::new(env!("CARGO_BIN_EXE_gpfarm"))
            .args([
                "evolve",
                "--eval",
                "gpu",
                "--problem",
                problem,
                "--population",
                "100",
                "--generations",
                "20",
            ])
            .args(["--seed", "1", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{problem}: {}", String::from_utf8_lossy(&out.stderr));
        let records: Vec<serde_json::Value> =
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(records.len(), 22, "{problem}: 21 generations and a summary");
        assert!(records[..21].iter().all(|r| r["evaluator"] == "gpu"));
        eprintln!("{problem}: {}", records[21]);
    }
}

/// The while-loop example's random population (two seeds) under its own step limit and under a
/// limit of 40 steps, which many of its loops pass: the CPU evaluator, the interpreter, NVRTC
/// (kernels and switch) and PTX (kernels and switch) give every individual the same fitness bit
/// for bit, the programs past the limit failing (NaN on the GPU, the worst fitness) on each, and
/// no kernel faults.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_while_loop_population_has_one_fitness_on_every_route() {
    let (compared, failing) =
        every_route_gives_the_cpu_s_fitness("while_loops_every_route", example("while-search"), true, 0.0);
    eprintln!("while loops: {compared} fitness values compared, {failing} CPU failures among them");
    assert!(failing > 0, "the population must hold programs that fail");
}

/// The functions example's random population (two seeds): its declared functions inlined by the
/// CPU evaluator, the interpreter and the PTX route, and called as `__device__` functions by
/// NVRTC's, give every individual the CPU's fitness within 1e-6 (relative): the outputs are the
/// same (the bodies use `+ - * /`, `fabsf`, `fminf` and `fmaxf`, which round alike everywhere),
/// and the root mean squared error is summed in another order on the GPU than on the CPU.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn declared_functions_give_one_fitness_on_every_route() {
    let (compared, _) =
        every_route_gives_the_cpu_s_fitness("declared_functions", example("functions"), false, 1e-6);
    assert!(compared > 500, "{compared}");
}

/// A problem over x1 and x2 whose grammar calls protected division in every form: `pdivf` of
/// any two subexpressions and of a constant divisor (0.0005f, 0.001f, -0.002f, ...), `pdiv` of two
/// floats (the float form), of a double or an int divisor (the double form), and a declared
/// function whose body calls `pdivf` (so every NVRTC unit must define it before the declared
/// functions). Its cases hold divisors at 0, below, at and just past the threshold.
fn protected_division_problem() -> Problem {
    let toml = r#"
name = "protected_division"
kind = "expression"
fitness = "rmse"
start = "e"

[[inputs]]
name = "x1"
type = "float"

[[inputs]]
name = "x2"
type = "float"

[[outputs]]
name = "y"
type = "float"

[target]
type = "float"

[[functions]]
name = "ratio"
params = ["a", "b"]
body = "pdivf(a, b - 0.5f)"
"#;
    let grammar =
        "<e> ::= <e> + <e> | <e> - <e> | <e> * <e> | pdivf(<e>, <e>) | pdivf(<e>, <c>) | pdiv(<e>, <e>)
        | pdiv(<e>, <k>) | ratio(<e>, <e>) | <v> | <v> | <c>
<v> ::= x1 | x2
<c> ::= <d>.<d>f | 0.00<d>f | -0.00<d>f | 0.0005f | 0.001f | -0.002f
<k> ::= <d>.<d> | 0.00<d> | 0.0005 | -0.002 | <d>
<d> ::= 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9
";
    let special = [0.0f32, 0.0005, -0.0005, 0.001, -0.001, 0.0010001, -0.002, 0.5, 0.5005, 0.501];
    let mut cases = Vec::new();
    for k in 0..200usize {
        let x1 = special.get(k).copied().unwrap_or(((k as f32) * 0.7361).sin() * 2.0);
        let x2 = special.get(k % 37).copied().unwrap_or(((k as f32) * 1.3187).cos() * 2.0);
        cases.push(format!("{{\"x1\": {x1:e}, \"x2\": {x2:e}, \"target\": {:e}}}", x1 * x2 + 1.0));
    }
    let cases = format!("[{}]", cases.join(",\n"));
    let template = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/functions/template.cu"),
    )
    .unwrap();
    let sources = gpfarm_gp::problem::ProblemSources { toml, grammar, cases: &cases, template: &template };
    Problem::from_sources("protected_division", &sources).unwrap()
}

/// Protected division's random population (two seeds): the CPU evaluator, the interpreter, NVRTC
/// (kernels and switch, calling the unit's `pdivf`/`pdiv`) and PTX (kernels and switch, `abs`,
/// `setp`, `div.rn`, `selp`) give every individual the CPU's fitness within 1e-6 (relative): the
/// outputs are the same (`+ - *` and IEEE division, the same test against 0.001 in the call's
/// type), and the root mean squared error is summed in another order on the GPU than on the CPU.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn protected_division_gives_one_fitness_on_every_route() {
    let problem = protected_division_problem();
    let phenotypes = random_phenotypes(&problem, 7);
    let calls = phenotypes.iter().filter(|p| p.as_str().contains("pdiv")).count();
    assert!(calls > 150 && calls * 2 > phenotypes.len(), "{calls} of {} call pdiv", phenotypes.len());
    let (compared, _) = every_route_gives_the_cpu_s_fitness("protected_division", problem, false, 1e-6);
    assert!(compared > 500, "{compared}");
}

/// The example problem in `examples/<name>`.
fn example(name: &str) -> Problem {
    Problem::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)).unwrap()
}

/// The random population (seeds 7 and 8) of `loaded`, under its own step limit and, with
/// `limits`, under 40 steps: the CPU evaluator, the interpreter, NVRTC (kernels and switch)
/// and PTX (kernels and switch) give every individual the same fitness, bit for bit with
/// `tolerance` 0, else within it (relative). Returns the
/// values compared and the CPU's failures.
fn every_route_gives_the_cpu_s_fitness(
    label: &str,
    loaded: Problem,
    limits: bool,
    tolerance: f64,
) -> (usize, usize) {
    let arch = require_gpu(label);
    let mut farm = Farm::spawn(config(cores())).unwrap();
    let options =
        CompileOptions { flags: vec![gpfarm_evolve::NO_FMAD.into()], ..CompileOptions::cubin(arch) };
    let cubin = |farm: &mut Farm, name: &str, source: String| kernel_cubin(farm, name, source, &options);
    let (mut compared, mut failing) = (0, 0);
    let limit_list = if limits { vec![loaded.max_steps(), 40] } else { vec![loaded.max_steps()] };
    for limit in limit_list {
        let problem = loaded.clone().with_max_steps(limit).unwrap();
        let kernels = gpfarm_kernels::gpu::Kernels {
            fitness: Some(cubin(&mut farm, "fitness.cu", gpu::fitness_source(&problem).unwrap())),
            interpreter: Some(cubin(
                &mut farm,
                "interp.cu",
                gpfarm_kernels::interpreter::interpreter_source(&problem).unwrap(),
            )),
            fit: Vec::new(),
        };
        let mut gpu = GpuEvaluator::with_kernels(&problem, &kernels).unwrap();
        for seed in [7, 8] {
            let phenotypes = random_phenotypes(&problem, seed);
            let t = std::time::Instant::now();
            let cpu = evaluate_all(&problem, &phenotypes, NonZeroUsize::new(cores()).unwrap());
            eprintln!("limit {limit} seed {seed}: cpu in {:.2?}", t.elapsed());
            // The CPU's fitness as the GPU reports it: NaN for a program that failed.
            let want: Vec<Option<u64>> = cpu
                .iter()
                .map(|e| Some(if e.failure.is_some() { f64::NAN } else { e.fitness.value() }.to_bits()))
                .collect();
            failing += cpu.iter().filter(|e| e.failure.is_some()).count();
            let mut check = |what: &str, got: &[Option<f64>]| {
                let mut differ = 0;
                for (i, (w, g)) in want.iter().zip(got).enumerate() {
                    let g = g.map(|g| if g.is_nan() { f64::NAN.to_bits() } else { g.to_bits() });
                    let near = |g: u64, w: u64| {
                        let (g, w) = (f64::from_bits(g), f64::from_bits(w));
                        (g - w).abs() <= tolerance * w.abs()
                    };
                    let same = match (g, *w) {
                        (Some(g), Some(w)) => g == w || near(g, w),
                        (g, w) => g == w,
                    };
                    if !same {
                        differ += 1;
                        eprintln!(
                            "limit {limit} seed {seed} {what} #{i}: {g:?} vs cpu {w:?}: {}",
                            phenotypes[i]
                        );
                    }
                }
                compared += got.len();
                assert_eq!(differ, 0, "limit {limit} seed {seed} {what}: {differ} differ from the CPU");
            };
            // Programs that do not map (no phenotype the evaluator parses) fail on the CPU; the
            // GPU routes take every parsed one.
            let parsed: Vec<usize> = (0..phenotypes.len())
                .filter(|&i| gpfarm_gp::Program::parse(&problem, &phenotypes[i]).is_ok())
                .collect();
            let subset: Vec<Phenotype> = parsed.iter().map(|&i| phenotypes[i].clone()).collect();
            let want_subset: Vec<Option<u64>> = parsed.iter().map(|&i| want[i]).collect();
            let expand = |got: Vec<Option<f64>>| -> Vec<Option<f64>> {
                let mut all = vec![None; phenotypes.len()];
                for (k, &i) in parsed.iter().enumerate() {
                    all[i] = got[k];
                }
                all
            };
            assert_eq!(want_subset.len(), subset.len());
            let codes: Vec<_> = subset
                .iter()
                .map(|p| {
                    gpfarm_kernels::interpreter::assemble(
                        &problem,
                        &gpfarm_gp::Program::parse(&problem, p).unwrap(),
                    )
                    .unwrap()
                })
                .collect();
            let wire =
                gpfarm_kernels::interpreter::PackedPopulation::new(&codes).into_wire(problem.max_steps());
            let t = std::time::Instant::now();
            eprintln!("limit {limit} seed {seed}: {} programs, {failing} failing so far", subset.len());
            let interpreted = gpu.interpret(&wire).unwrap();
            eprintln!("limit {limit} seed {seed}: interpreted in {:.2?}", t.elapsed());
            let mut check_parsed = |what: &str, got: Vec<Option<f64>>| {
                let all = expand(got);
                let got: Vec<Option<f64>> = (0..phenotypes.len())
                    .map(|i| if parsed.contains(&i) { all[i] } else { want[i].map(f64::from_bits) })
                    .collect();
                check(what, &got);
            };
            check_parsed("interpreter", interpreted.fitness);
            for (language, shape) in [
                (Language::CudaC, Shape::Kernels),
                (Language::CudaC, Shape::Switch),
                (Language::Ptx, Shape::Kernels),
                (Language::Ptx, Shape::Switch),
            ] {
                let rendered =
                    render_batch(&problem, language, shape, arch, &subset, 0, &per_unit(subset.len(), 32));
                let wire: Vec<Unit> = rendered.units.iter().map(|u| u.unit.clone()).collect();
                let batch = farm.compile(&wire, &options).unwrap();
                let mut cubins = Vec::new();
                for (u, r) in rendered.units.into_iter().zip(batch.results) {
                    match r.outcome {
                        UnitOutcome::Cubin(c) => cubins.push((c, u.kernels, u.members)),
                        UnitOutcome::Failed(f) => panic!("{}: {f}\n{}", u.unit.name, r.log),
                    }
                }
                assert!(rendered.refused.is_empty(), "{language:?} refused {:?}", rendered.refused);
                let t = std::time::Instant::now();
                let out = gpu.evaluate(&views(&Built { cubins }), subset.len()).unwrap();
                eprintln!("limit {limit} seed {seed}: {language:?} {shape} evaluated in {:.2?}", t.elapsed());
                assert!(out.faults.is_empty(), "{language:?} {shape}: {:?}", out.faults);
                check_parsed(&format!("{language:?} {shape}"), out.fitness);
            }
        }
    }
    (compared, failing)
}

/// Free parameters as a kernel argument: random structures of the Friedman-1 example compiled
/// once, on both routes and in both unit shapes, evaluated with two sets of values each without
/// compiling again, get the interpreter's fitness with those values bit for bit (both compute on
/// the device at run time), and within 1e-6 (relative) the fitness of their phenotypes with the
/// values written in and compiled on the same route: there NVRTC folds a math function of
/// constants (`sinf(-2.5f)`) on the host, which may differ from the device's in the last bits.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_structure_compiled_once_runs_with_any_values_bit_for_bit() {
    use gpfarm_gp::Program;
    use gpfarm_gp::program::instantiate;
    use gpfarm_kernels::interpreter::{PackedPopulation, assemble_structure, interpreter_source};
    let arch = require_gpu("params_as_arguments");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/friedman1");
    let problem = Problem::load(&dir).unwrap();
    let mut farm = Farm::spawn(config(cores())).unwrap();
    let plain = CompileOptions::cubin(arch);
    let kernels = gpu::Kernels {
        fitness: Some(kernel_cubin(&mut farm, "fitness.cu", gpu::fitness_source(&problem).unwrap(), &plain)),
        interpreter: Some(kernel_cubin(
            &mut farm,
            "interp.cu",
            interpreter_source(&problem).unwrap(),
            &plain,
        )),
        fit: Vec::new(),
    };
    let mut gpu = GpuEvaluator::with_kernels(&problem, &kernels).unwrap();
    let options =
        CompileOptions { flags: vec![gpfarm_evolve::NO_FMAD.into()], ..CompileOptions::cubin(arch) };
    let structures: Vec<Phenotype> = random_phenotypes(&problem, 11).into_iter().take(300).collect();
    let programs: Vec<Program> = structures.iter().map(|p| Program::parse(&problem, p).unwrap()).collect();
    let counts: Vec<usize> = programs.iter().map(Program::params).collect();
    assert!(counts.iter().filter(|&&c| c > 0).count() > 100, "{counts:?}");
    let codes: Vec<_> = programs.iter().map(|p| assemble_structure(&problem, p).unwrap()).collect();
    let stride = counts.iter().copied().max().unwrap();
    let values = |round: u32| -> Vec<f32> {
        let mut v = vec![0.0f32; structures.len() * stride];
        for (i, x) in v.iter_mut().enumerate() {
            *x = ((i as f32 * 0.37 + round as f32 * 1.91).sin() * 3.0 * 1024.0).round() / 1024.0;
        }
        v
    };
    let build = |farm: &mut Farm, language: Language, shape: Shape, phenotypes: &[Phenotype]| {
        compile_every_unit(farm, &problem, (language, shape), phenotypes, &options).0
    };
    let (mut folded, mut compared) = (0, 0);
    for language in [Language::CudaC, Language::Ptx] {
        for shape in [Shape::Kernels, Shape::Switch] {
            let once = build(&mut farm, language, shape, &structures);
            for round in [1, 2] {
                let v = values(round);
                let row = |i: usize| &v[i * stride..i * stride + counts[i]];
                let stepped: Vec<_> = codes.iter().enumerate().map(|(i, c)| c.with_values(row(i))).collect();
                let interpreted =
                    gpu.interpret(&PackedPopulation::new(&stepped).into_wire(problem.max_steps())).unwrap();
                let written: Vec<Phenotype> =
                    structures.iter().enumerate().map(|(i, p)| instantiate(p, row(i))).collect();
                let reference = build(&mut farm, language, shape, &written);
                gpu.set_values(&[], 0).unwrap();
                let literal = gpu.evaluate(&views(&reference), structures.len()).unwrap().fitness;
                gpu.set_values(&v, stride).unwrap();
                let got = gpu.evaluate(&views(&once), structures.len()).unwrap().fitness;
                let finite = got.iter().filter(|x| x.is_some_and(f64::is_finite)).count();
                assert!(finite > 200, "{language:?} {shape}: {finite} finite");
                for i in 0..structures.len() {
                    let (a, b, c) = (got[i], interpreted.fitness[i], literal[i]);
                    let what = format!("{language:?} {shape} round {round} #{i}: {}", written[i].as_str());
                    assert_eq!(
                        a.map(f64::to_bits),
                        b.map(f64::to_bits),
                        "{what}: {a:?} as arguments, {b:?} interpreted"
                    );
                    let (a, c) = (a.unwrap(), c.unwrap());
                    if a.to_bits() != c.to_bits() && !(a.is_nan() && c.is_nan()) {
                        folded += 1;
                        assert!(
                            (a - c).abs() <= 1e-6 * a.abs().max(c.abs()),
                            "{what}: {a} as arguments, {c} written in"
                        );
                    }
                    compared += 1;
                }
                eprintln!("{language:?} {shape} round {round}: {} individuals agree", structures.len());
            }
        }
    }
    eprintln!(
        "written in: {folded} of {compared} differ in the last bits (math of constants folded on the host)"
    );
    // Values too few for the generation are refused before anything runs.
    gpu.set_values(&[1.0; 4], 2).unwrap();
    assert!(gpu.evaluate(&[], 3).is_err());
}

/// One structure compiled once and run in one evaluation with two sets of values, one of which
/// makes its loop run past the step limit: only that individual fails. (The evaluator keeps
/// modules loaded by their CUBIN; a CUBIN that comes twice in one evaluation is loaded apart, so
/// that each individual's step-limit flag is its own.)
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn the_same_code_with_two_sets_of_values_fails_only_where_its_loop_runs_on() {
    use gpfarm_gp::problem::ProblemSources;
    let arch = require_gpu("params_step_flags");
    let toml = "name = \"paramloop\"\nstart = \"s\"\nkind = \"statements\"\nfitness = \"rmse\"\nmax_steps = 50\n\
                [[inputs]]\nname = \"x\"\ntype = \"float\"\n[[locals]]\nname = \"acc\"\ntype = \"float\"\n\
                [[outputs]]\nname = \"y\"\ntype = \"float\"\n[target]\ntype = \"float\"\n";
    let grammar = "<s> ::= while(acc < #param#){acc = acc + 1.0f;}y = acc + x;\n";
    let cases = r#"[{"x": 1.0, "target": 11.0}, {"x": 2.0, "target": 12.0}]"#;
    let plain = "//@kernel\nextern \"C\" __global__ void {{KERNEL}}(const float* in_x, float* out_y, int NCASES) { float acc = 0.0f; float y = 0.0f; const float x = in_x[0]; {{PHENOTYPE}} out_y[0] = y; }\n";
    let first = Problem::from_sources("paramloop", &ProblemSources { toml, grammar, cases, template: plain })
        .unwrap();
    let template = gpfarm_gp::problem::standard_template(first.spec());
    let problem =
        Problem::from_sources("paramloop", &ProblemSources { toml, grammar, cases, template: &template })
            .unwrap();
    let structure = Phenotype::new("while(acc < p[0]){acc = acc + 1.0f;}y = acc + x;");
    let mut farm = Farm::spawn(config(2)).unwrap();
    let mut gpu = evaluator(&mut farm, &problem, arch);
    let options =
        CompileOptions { flags: vec![gpfarm_evolve::NO_FMAD.into()], ..CompileOptions::cubin(arch) };
    for language in [Language::CudaC, Language::Ptx] {
        let (built, _) = compile_every_unit(
            &mut farm,
            &problem,
            (language, Shape::Switch),
            std::slice::from_ref(&structure),
            &options,
        );
        let (cubin, kernels, _) = &built.cubins[0];
        let (first, second) = (vec![0usize], vec![1usize]);
        let units = [
            CompiledUnit { cubin, kernels, members: &first },
            CompiledUnit { cubin, kernels, members: &second },
        ];
        // Ten steps, then a thousand (past the limit of 50).
        gpu.set_values(&[10.0, 1000.0], 1).unwrap();
        let out = gpu.evaluate(&units, 2).unwrap();
        assert_eq!(out.fitness[0], Some(0.0), "{language:?}: {:?}", out.fitness);
        assert!(out.fitness[1].is_some_and(f64::is_nan), "{language:?}: {:?}", out.fitness);
        // Again, in the other order: the cached module's flags start at zero.
        gpu.set_values(&[1000.0, 10.0], 1).unwrap();
        let out = gpu.evaluate(&units, 2).unwrap();
        assert!(out.fitness[0].is_some_and(f64::is_nan), "{language:?}: {:?}", out.fitness);
        assert_eq!(out.fitness[1], Some(0.0), "{language:?}: {:?}", out.fitness);
    }
}
