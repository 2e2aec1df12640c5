//! Free parameters fitted on the GPU: the fitting kernel compiles (NVRTC only, no GPU); on the
//! GPU its least-squares sums agree with the CPU's within float rounding of the derivatives, and
//! a run fits on the GPU. The GPU tests are ignored unless asked for with `--include-ignored`,
//! and then fail, saying why, when there is no GPU.

mod common;

use std::path::Path;

use common::require_gpu;
use gpfarm_client::{CompileOptions, Compiler, InProcess, SmArch, Unit};
use gpfarm_gp::{Phenotype, Problem, Program};
use gpfarm_kernels::gpu::{GpuEvaluator, Kernels, WireFit};
use gpfarm_kernels::interpreter::{
    FIT_FORWARD_PARAMS, FIT_PARAMS, assemble_structure, fit_code_source, fit_compiles, fit_source,
    fit_supported, fits_on_gpu, fits_small, fitted_in_reverse, sums_of,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

fn friedman1() -> Problem {
    Problem::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/friedman1")).unwrap()
}

fn fit_cubin(problem: &Problem, arch: SmArch) -> Vec<u8> {
    let toolchain = gpfarm_toolchain::Toolchain::discover(None).unwrap();
    let options =
        CompileOptions { flags: vec![gpfarm_evolve::NO_FMAD.into()], ..CompileOptions::cubin(arch) };
    let mut nvrtc = InProcess::new(&toolchain, &options).unwrap();
    let t = std::time::Instant::now();
    let batch = nvrtc.compile(&[Unit::new("fit.cu", fit_source(problem).unwrap())], &options).unwrap();
    eprintln!("{}: the fitting kernels compiled in {:.2?}", problem.name(), t.elapsed());
    let r = &batch.results[0];
    r.cubin()
        .unwrap_or_else(|| panic!("the fitting kernel does not compile: {:?}\n{}", r.outcome, r.log))
        .to_vec()
}

/// The GPU's evaluator with `problem`'s fitting kernels, and the GPU's architecture; the test
/// fails, saying why, without a GPU (`name` in its message).
fn fitting_on_the_gpu(name: &str, problem: &Problem) -> (SmArch, GpuEvaluator) {
    let arch = require_gpu(name);
    let kernels = Kernels { fit: vec![fit_cubin(problem, arch)], ..Kernels::default() };
    (arch, GpuEvaluator::with_kernels(problem, &kernels).unwrap())
}

#[test]
fn the_fitting_kernel_compiles_where_fitting_applies_and_is_refused_elsewhere() {
    if !common::nvrtc_or_skip("fitting_kernel_compiles") {
        return;
    }
    for problem in [Problem::builtin("keijzer6").unwrap(), friedman1()] {
        let cubin = fit_cubin(&problem, SmArch::SM_90);
        let text = String::from_utf8_lossy(&cubin);
        assert!(text.contains(gpfarm_kernels::interpreter::FIT_KERNEL), "{}", problem.name());
        assert!(text.contains(gpfarm_kernels::interpreter::FIT_TILES_KERNEL), "{}", problem.name());
        assert!(text.contains(gpfarm_kernels::interpreter::FIT_STEP_KERNEL), "{}", problem.name());
    }
    // One width alone is a source of its own (the engine compiles each width apart).
    let one = gpfarm_kernels::interpreter::fit_source_for(&friedman1(), &[8]).unwrap();
    assert!(one.contains("gpfarm_fit_8(") && !one.contains("gpfarm_fit_32("));
    assert!(gpfarm_kernels::interpreter::fit_source_for(&friedman1(), &[7]).is_err());
    let why = fit_supported(&Problem::builtin("search").unwrap()).unwrap_err();
    assert!(why.contains("not least squares"), "{why}");
    assert!(fit_source(&Problem::builtin("multiplier5").unwrap()).is_err());
}

#[test]
fn wide_programs_go_to_the_gpu_only_where_they_are_differentiated_in_reverse() {
    let problem = friedman1();
    let code = |text: &str| {
        let program = Program::parse(&problem, &Phenotype::new(text)).unwrap();
        (assemble_structure(&problem, &program).unwrap(), program.params())
    };
    let sum = |n: usize| (0..n).map(|k| format!("p[{k}] * x{}", k % 5 + 1)).collect::<Vec<_>>().join(" + ");
    // Straight-line float code: in reverse, so on the GPU up to the widest kernel.
    let (straight, np) = code(&format!("sinf({}) + p[{}] / x2", sum(90), 90));
    assert!(fitted_in_reverse(&straight.words));
    assert!(fits_on_gpu(&straight.words, np, straight.depth));
    // A branch (or a double) runs forward: up to FIT_FORWARD_PARAMS parameters on the GPU, beyond
    // them on the CPU (the wider kernels have no forward sweep).
    let (branch, np) = code(&format!("x1 > p[90] ? {} : p[91]", sum(90)));
    assert!(!fitted_in_reverse(&branch.words));
    assert!(!fits_on_gpu(&branch.words, np, branch.depth));
    let branch_of = |n: usize| code(&format!("x1 > p[{}] ? {} : p[{}]", n - 2, sum(n - 2), n - 1));
    let (edge, np) = branch_of(FIT_FORWARD_PARAMS);
    assert_eq!(np, FIT_FORWARD_PARAMS);
    assert!(!fitted_in_reverse(&edge.words) && fits_on_gpu(&edge.words, np, edge.depth));
    let (past, np) = branch_of(FIT_FORWARD_PARAMS + 1);
    assert!(!fitted_in_reverse(&past.words) && !fits_on_gpu(&past.words, np, past.depth));
    let (narrow, np) = code("x1 > p[0] ? p[1] * x2 : p[2]");
    assert!(!fitted_in_reverse(&narrow.words) && fits_on_gpu(&narrow.words, np, narrow.depth));
    let (double, _) = code("p[0] * 07.35 * x1");
    assert!(!fitted_in_reverse(&double.words));
    // Protected division in float is differentiated in reverse; in double, forward.
    let (pdivf, _) = code(&format!("pdivf({}, p[90] * x2)", sum(90)));
    assert!(fitted_in_reverse(&pdivf.words));
    let (pdiv, _) = code(&format!("pdiv({}, p[90] * x2 * 1.0)", sum(90)));
    assert!(!fitted_in_reverse(&pdiv.words));
    // Too many parameters for any kernel.
    let (widest, np) = code(&(0..130).map(|k| format!("p[{k}]")).collect::<Vec<_>>().join(" + "));
    assert!(fitted_in_reverse(&widest.words) && !fits_on_gpu(&widest.words, np, widest.depth));
}

#[test]
fn small_stack_kernels_take_shallow_programs_of_the_narrow_widths_only() {
    let problem = friedman1();
    let code = |text: &str| {
        let program = Program::parse(&problem, &Phenotype::new(text)).unwrap();
        let c = assemble_structure(&problem, &program).unwrap();
        (fits_small(&c.words, program.params(), c.depth), c.depth)
    };
    let sum = |n: usize| (0..n).map(|k| format!("p[{k}] * x{}", k % 5 + 1)).collect::<Vec<_>>().join(" + ");
    assert!(code("p[0] * x1 + p[1]").0);
    // A branch: not straight-line float code, which is all the small kernels' forward sweep knows.
    assert!(!code("x1 > p[0] ? p[1] * x2 : cosf(p[2] * x3)").0);
    assert!(code("p[1] * x2 - cosf(p[2] * x3)").0);
    assert!(code(&sum(8)).0, "width 8, straight, 31 ops");
    assert!(!code(&sum(12)).0, "width 16 has no small-stack kernel");
    // Width 8 in reverse: the small tape holds 64 ops; beyond, the full kernel runs it.
    let long = format!(
        "{} + {}",
        sum(8),
        (0..20).map(|k| format!("x{}", k % 5 + 1)).collect::<Vec<_>>().join(" * ")
    );
    assert!(!code(&long).0);
    // A stack of 14 values or more: the full kernel.
    let deep =
        (0..20).fold(String::from("p[0] * x1"), |e, k| format!("p[{}] * x{} + ({e})", k % 4 + 1, k % 5 + 1));
    let (small, depth) = code(&deep);
    assert!(depth >= 14 && !small, "depth {depth}");
}

/// The CPU's least-squares sums of `program` at `params`: sum of squares, `Jᵀr`, `JᵀJ` (lower).
fn cpu_sums(problem: &Problem, program: &Program, params: &[f32]) -> (f64, Vec<f64>, Vec<f64>) {
    let np = params.len();
    let lin = program.linearize(problem, params, problem.max_steps()).unwrap();
    let (mut sse, mut g, mut a) = (0.0, vec![0.0; np], vec![0.0; np * (np + 1) / 2]);
    for (c, &y) in lin.outputs.iter().enumerate() {
        let r = f64::from(y) - problem.cases().targets().as_f64(c);
        sse += r * r;
        let row = &lin.jacobian[c * np..(c + 1) * np];
        for k in 0..np {
            g[k] += row[k] * r;
            for l in 0..=k {
                a[k * (k + 1) / 2 + l] += row[k] * row[l];
            }
        }
    }
    (sse, g, a)
}

fn close(what: &str, got: f64, want: f64, rel: f64, scale: f64) {
    assert!(
        (got - want).abs() <= rel * (want.abs() + scale),
        "{what}: GPU {got} against CPU {want} (relative {})",
        (got - want).abs() / want.abs().max(1e-300)
    );
}

/// Programs with parameters over every kind of op the fitting kernel differentiates.
fn programs() -> Vec<String> {
    let wide: Vec<String> = (0..40).map(|k| format!("p[{k}] * x{}", k % 5 + 1)).collect();
    let mut all: Vec<String> = [
        "p[0] * x1 + p[1]",
        "sinf(p[0] * x1 * x2) * p[1] + p[2] * (x3 - p[3]) * (x3 - p[3]) + p[4] * x4 + p[5] * x5",
        "expf(p[0] * x1) - tanhf(p[1] * x2) + logf(fabsf(p[2] * x3) + 1.0f) + sqrtf(fabsf(p[3]) + x4)",
        "x1 > p[0] ? p[1] * x2 : cosf(p[2] * x3)",
        "fminf(p[0] * x1, x2) + fmaxf(p[1], x3) + powf(fabsf(p[2]) + 1.0f, x4)",
        // Protected division, its divisors on both sides of 0.001 from case to case.
        "pdivf(p[0] * x1, p[1] * x2 - 0.5f) + pdivf(x3, p[2] * 0.002f) + pdiv(p[3] * x4 * 1.0, p[4] * 0.001)",
        "p[0] * 07.35 * x1 + (float)(p[1] * 1.5) / (x2 + 2.0f)",
        "(p[0] - x1) / (p[1] + x2 * x2 + 1.0f) - p[2] * p[3] * x5",
        // Wider than the narrowest kernel.
        "p[0] * x1 + p[1] * x2 + p[2] * x3 + p[3] * x4 + p[4] * x5 + sinf(p[5] * x1 + p[6]) * p[7] \
         + p[8] * x1 * x2 + p[9] * x3 * x3 + expf(p[10] * x4) + p[11]",
    ]
    .map(String::from)
    .to_vec();
    // 8 or more parameters run in reverse (adjoint sweeps) where the program is straight-line
    // float code: every differentiated op there; with a branch, forward.
    all.push(
        "fminf(p[0] * x1, x2) + fmaxf(p[1], x3) + powf(fabsf(p[2]) + 1.0f, x4 * p[3]) \
         + powf(fabsf(x1) + 0.5f, p[4]) + p[5] * logf(x2 + p[6] * p[6] + 1.0f) + sqrtf(p[7] * p[7] + x3) \
         - tanhf(p[8] * x5) + cosf(p[9] * x2) / (p[10] + 3.0f) - p[11] + -p[12] * x1"
            .into(),
    );
    all.push("x1 > p[0] ? p[1] * x2 + p[2] * x3 + p[3] * x4 + p[4] : p[5] * x5 + p[6] * x1 + p[7]".into());
    // Protected division in reverse.
    all.push(
        "pdivf(p[0] * x1, p[1] * x2 - 0.5f) + pdivf(x3, p[2] * 0.002f) + p[3] * x4 + p[4] * x5 + p[5] \
         + pdivf(p[6], x1 - 0.5f) * p[7] + p[8] * x2"
            .into(),
    );
    // Wider than 16: width 32, in reverse only.
    all.push(format!("cosf({}) * p[20] + p[21] * x2 * x3 - p[22] / (x4 + 2.0f)", wide[..20].join(" + ")));
    // Wider than 32.
    all.push(format!("sinf({}) * p[40] + p[41]", wide.join(" + ")));
    // Wider than 64: the widest kernel, in reverse only.
    let wider: Vec<String> = (0..80).map(|k| format!("p[{k}] * x{}", k % 5 + 1)).collect();
    all.push(format!("tanhf({}) * p[80] + p[81] / (x1 + 1.0f)", wider.join(" + ")));
    all
}

/// Pushes every program of `texts` at three random starts into a fitting request, with the CPU's
/// sums for each.
type CpuSums = (f64, Vec<f64>, Vec<f64>);
fn request(problem: &Problem, texts: &[String], seed: u64) -> (WireFit, Vec<(String, CpuSums)>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut fit = WireFit::new(problem.max_steps());
    let mut want = Vec::new();
    for text in texts {
        let program = Program::parse(problem, &Phenotype::new(text.as_str())).unwrap();
        let np = program.params();
        assert!(np <= FIT_PARAMS);
        let code = assemble_structure(problem, &program).unwrap();
        for _ in 0..3 {
            let params: Vec<f32> = (0..np).map(|_| rng.random_range(-1.5f32..1.5)).collect();
            fit.push(&code.words, &params);
            want.push((text.clone(), cpu_sums(problem, &program, &params)));
        }
    }
    (fit, want)
}

/// The GPU's sums (`sums`, packed per start) against the CPU's.
fn agree(sums: &[f64], want: &[(String, CpuSums)]) {
    let mut at = 0;
    for (text, (sse, g, a)) in want.iter() {
        let np = g.len();
        let block = &sums[at..at + sums_of(np)];
        at += sums_of(np);
        // Outputs are the interpreter's (CUDA's math functions against the host's): sums of
        // squares agree to float rounding; derivatives are floats on the GPU.
        close(&format!("{text}: sse"), block[0], *sse, 1e-5, 0.0);
        let gscale = g.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for k in 0..np {
            close(&format!("{text}: g[{k}]"), block[1 + k], g[k], 1e-3, 1e-3 * gscale);
        }
        let ascale = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for k in 0..np {
            for l in 0..=k {
                let q = k * (k + 1) / 2 + l;
                close(&format!("{text}: A[{k}][{l}]"), block[1 + np + q], a[q], 1e-3, 1e-3 * ascale);
            }
        }
    }
    assert_eq!(at, sums.len());
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn gpu_sums_agree_with_the_cpu_s() {
    let arch = require_gpu("gpu_fit_sums");
    let problem = friedman1();
    let kernels = Kernels { fit: vec![fit_cubin(&problem, arch)], ..Kernels::default() };
    let mut gpu = GpuEvaluator::with_kernels(&problem, &kernels).unwrap();
    let (fit, want) = request(&problem, &programs(), 11);
    let (sums, took) = gpu.linearize(&fit).unwrap();
    eprintln!("{} programs over {} cases in {took:?}", want.len(), problem.cases().len());
    agree(&sums, &want);
    let taken = same_in_small_kernels(&mut gpu, &problem, &programs(), &fit, &sums);
    eprintln!("{taken} of {} starts in the small-stack kernels", want.len());
    assert!(taken >= 12, "{taken}");
    // Each start's sums are its own, bit for bit, whatever is fitted beside it (the widths run
    // side by side, each program's tiles are summed in order).
    let mut at = 0;
    for (k, (text, _)) in want.iter().enumerate() {
        let mut alone = WireFit::new(problem.max_steps());
        alone.push(fit.words_of(k), fit.values_of(k));
        let (own, _) = gpu.linearize(&alone).unwrap();
        let block = &sums[at..at + own.len()];
        at += own.len();
        assert!(own.iter().zip(block).all(|(a, b)| a.to_bits() == b.to_bits()), "{text}: {own:?} {block:?}");
    }
    assert_eq!(at, sums.len());
    // Fitting on 300 evenly spaced cases gives the sums of the problem on those cases, bit for bit.
    gpu.fit_on_cases(300).unwrap();
    let (on_some, _) = gpu.linearize(&fit).unwrap();
    let strided = problem.strided(300);
    assert_eq!(strided.cases().len(), 300);
    let mut apart = GpuEvaluator::with_kernels(&strided, &kernels).unwrap();
    let (want_some, _) = apart.linearize(&fit).unwrap();
    assert_eq!(on_some.len(), want_some.len());
    assert!(on_some.iter().zip(&want_some).all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(on_some.iter().zip(&sums).any(|(a, b)| a != b), "300 cases are not all 1,000");
    // All cases again.
    gpu.fit_on_cases(0).unwrap();
    let (again, _) = gpu.linearize(&fit).unwrap();
    assert!(again.iter().zip(&sums).all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// Levenberg–Marquardt on the host over the GPU's sums, one `linearize` per iteration of the
/// starts still going: the reference the fitting loop on the GPU must match. Per start, in
/// order: its best values, their sum of squares, the sum of squares where it began, and the
/// launches that ran it.
fn fit_on_the_host(
    gpu: &mut GpuEvaluator,
    fit: &WireFit,
    iterations: usize,
) -> (Vec<f32>, Vec<f64>, Vec<f64>, Vec<u32>) {
    let np = |k: usize| fit.nparams[k] as usize;
    let unpack = |sums: &[f64], ks: &[usize]| -> Vec<gpfarm_gp::Sums> {
        let mut at = 0;
        ks.iter()
            .map(|&k| {
                let block = &sums[at..at + sums_of(np(k))];
                at += block.len();
                gpfarm_gp::Sums::packed(block, np(k))
            })
            .collect()
    };
    let all: Vec<usize> = (0..fit.offsets.len()).collect();
    let (sums, _) = gpu.linearize(fit).unwrap();
    let mut starts: Vec<gpfarm_gp::LmStart> = unpack(&sums, &all)
        .into_iter()
        .enumerate()
        .map(|(k, at)| gpfarm_gp::LmStart::new(fit.values_of(k).to_vec(), at))
        .collect();
    let first: Vec<f64> = starts.iter().map(|s| s.sse()).collect();
    let mut launches = vec![1u32; starts.len()];
    for it in 0..iterations {
        let trials: Vec<(usize, Vec<f32>)> =
            starts.iter_mut().enumerate().filter_map(|(k, s)| s.trial().map(|t| (k, t))).collect();
        if trials.is_empty() {
            break;
        }
        let mut next = WireFit::new(fit.max_steps);
        for (k, v) in &trials {
            next.push_from(fit, *k, v);
        }
        let (sums, _) = gpu.linearize(&next).unwrap();
        let ks: Vec<usize> = trials.iter().map(|(k, _)| *k).collect();
        for ((k, trial), at) in trials.into_iter().zip(unpack(&sums, &ks)) {
            // The GPU runs a trial plain, and again with its derivatives where it is lower and
            // the start goes on after it.
            let lower = (at.sse < starts[k].sse()).then_some(at.sse);
            launches[k] += 1;
            if starts[k].judge_plain(&trial, lower, it + 1 == iterations) {
                launches[k] += 1;
                starts[k].judge(trial, Some(at));
            }
        }
    }
    let params = starts.iter().flat_map(|s| s.params().iter().copied()).collect();
    (params, starts.iter().map(|s| s.sse()).collect(), first, launches)
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn the_fitting_loop_on_the_gpu_takes_the_host_s_values_bit_for_bit() {
    let problem = friedman1();
    let (_, mut gpu) = fitting_on_the_gpu("gpu_fit_loop", &problem);
    let bits32 = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let bits64 = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let (fit, want) = request(&problem, &programs(), 23);
    for iterations in [0, 1, 3, 10, 30] {
        let t = std::time::Instant::now();
        let got = gpu.fit(&fit, iterations).unwrap();
        let on_gpu = t.elapsed();
        let t = std::time::Instant::now();
        let (params, sse, first, launches) = fit_on_the_host(&mut gpu, &fit, iterations);
        eprintln!(
            "{} starts, {iterations} iterations: on the GPU {on_gpu:?}, on the host between launches {:?}",
            want.len(),
            t.elapsed()
        );
        assert_eq!(bits64(&got.first_sse), bits64(&first), "{iterations} iterations: starting sums");
        // Each start ran as many launches as on the host: the first, one per trial and one more
        // per trial whose sum of squares is lower and after which the start goes on.
        assert_eq!(got.launches, launches, "{iterations} iterations: launches");
        for k in 0..fit.offsets.len() {
            let at = fit.param_offsets[k] as usize..fit.param_offsets[k] as usize + fit.nparams[k] as usize;
            assert_eq!(
                (bits32(&got.params[at.clone()]), got.sse[k].to_bits()),
                (bits32(&params[at]), sse[k].to_bits()),
                "{iterations} iterations, start {k} ({}): GPU {} against host {}",
                want[k].0,
                got.sse[k],
                sse[k]
            );
        }
        // The loop does something: most starts gain, none loses.
        let gained = got.sse.iter().zip(&got.first_sse).filter(|(a, b)| a < b).count();
        assert!(
            got.sse
                .iter()
                .zip(&got.first_sse)
                .all(|(a, b)| a.partial_cmp(b) != Some(std::cmp::Ordering::Greater))
        );
        if iterations >= 10 {
            assert!(gained * 2 > fit.offsets.len(), "{gained} of {} starts gained", fit.offsets.len());
        } else if iterations > 0 {
            assert!(gained > 0);
        } else {
            assert_eq!(gained, 0);
            assert_eq!(bits32(&got.params), bits32(&fit.params));
        }
    }
    // A start that cannot run (its sums not finite where it begins) keeps its values.
    let mut bad = WireFit::new(problem.max_steps());
    let code = assemble_structure(
        &problem,
        &Program::parse(&problem, &Phenotype::new("sqrtf(p[0] - 5.0f) * x1")).unwrap(),
    )
    .unwrap();
    bad.push(&code.words, &[1.0]);
    bad.push(&code.words, &[9.0]);
    let got = gpu.fit(&bad, 5).unwrap();
    assert!(
        got.first_sse[0] == f64::INFINITY && got.sse[0] == f64::INFINITY && got.params[0] == 1.0,
        "{got:?}"
    );
    assert!(got.first_sse[1].is_finite() && got.sse[1] <= got.first_sse[1], "{got:?}");
    let (params, sse, first, launches) = fit_on_the_host(&mut gpu, &bad, 5);
    assert_eq!(
        (bits32(&got.params), bits64(&got.sse), bits64(&got.first_sse), &got.launches),
        (bits32(&params), bits64(&sse), bits64(&first), &launches)
    );
    assert_eq!(got.launches[0], 1, "a start that cannot run ran its first launch only");
    // Values that are not the start's own are refused.
    let mut overlapping = bad.clone();
    overlapping.param_offsets[1] = 0;
    let why = gpu.fit(&overlapping, 3).unwrap_err().to_string();
    assert!(why.contains("are not its own"), "{why}");
    // A negative count is refused, not taken as a start to skip.
    let mut negative = fit.clone();
    negative.nparams[0] = -1;
    let why = gpu.fit(&negative, 3).unwrap_err().to_string();
    assert!(why.contains("-1 parameters"), "{why}");
}

/// A statement problem with a float output: x1, x2 in, float locals, y out, 700 cases.
fn statements_problem() -> Problem {
    let toml = r#"
name = "float-statements"
description = "y from x1 and x2 by statements"
start = "s"
kind = "statements"
fitness = "rmse"

[[inputs]]
name = "x1"
type = "float"

[[inputs]]
name = "x2"
type = "float"

[[locals]]
name = "acc"
type = "float"

[[locals]]
name = "u"
type = "float"

[[outputs]]
name = "y"
type = "float"

[target]
type = "float"
"#;
    let template = r#"//@kernel
extern "C" __global__ void {{KERNEL}}(const float* __restrict__ in_x1,
                                      const float* __restrict__ in_x2,
                                      float* __restrict__ out_y,
                                      int NCASES)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= NCASES) return;
    const float x1 = in_x1[c];
    const float x2 = in_x2[c];
    float acc = 0.0f;
    float u = 0.0f;
    float y = 0.0f;
    {{PHENOTYPE}}
    out_y[c] = y;
}
"#;
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let cases: Vec<String> = (0..700)
        .map(|_| {
            let (x1, x2): (f32, f32) = (rng.random_range(0.0..3.0), rng.random_range(-1.0..1.0));
            format!(r#"{{"x1": {x1}, "x2": {x2}, "target": {}}}"#, x1 * x1 - 2.0 * x2 + 0.5)
        })
        .collect();
    let cases = format!("[{}]", cases.join(","));
    let sources = gpfarm_gp::problem::ProblemSources {
        toml,
        grammar: "<s> ::= y = x1 * #param#;",
        cases: &cases,
        template,
    };
    Problem::from_sources("test", &sources).unwrap()
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn gpu_sums_of_programs_with_statements_agree_with_the_cpu_s() {
    let problem = statements_problem();
    let (_, mut gpu) = fitting_on_the_gpu("gpu_fit_statements", &problem);
    let texts: Vec<String> = [
        // A local read before it is written has no derivative; once written, the value's.
        "y = (acc + 1.0f) * p[0] + x1;",
        "acc = p[0] * x1; y = acc * acc + p[1] * x2;",
        "u = sinf(p[0] * x2); acc = u * p[1] + acc; y = acc * x1 + u;",
        // A loop adds p[0] until acc passes x1: the derivative counts the iterations taken.
        "while (acc < x1) { acc = acc + fabsf(p[0]) + 0.25f; } y = acc * p[1];",
        "if (x2 > p[0]) { u = p[1] * x1; } else { u = p[2] * x2; } y = u + acc;",
    ]
    .map(String::from)
    .to_vec();
    let (fit, want) = request(&problem, &texts, 12);
    let (sums, _) = gpu.linearize(&fit).unwrap();
    agree(&sums, &want);
    // Statements, loops and branches are not straight-line float code: none of them runs in the
    // small-stack kernels, whose forward sweep knows only those ops.
    assert_eq!(same_in_small_kernels(&mut gpu, &problem, &texts, &fit, &sums), 0);
}

/// Linearizes `fit`'s starts (three of each of `texts`, as [`request`] makes them) again, each in
/// its width's small-stack kernel where `fits_small` allows, and checks the sums are `sums`, bit
/// for bit; returns how many starts ran there.
fn same_in_small_kernels(
    gpu: &mut GpuEvaluator,
    problem: &Problem,
    texts: &[String],
    fit: &WireFit,
    sums: &[f64],
) -> usize {
    let mut small = WireFit::new(problem.max_steps());
    let mut taken = 0;
    for k in 0..fit.offsets.len() {
        let words = fit.words_of(k);
        let program = Program::parse(problem, &Phenotype::new(texts[k / 3].as_str())).unwrap();
        let depth = assemble_structure(problem, &program).unwrap().depth;
        let s = fits_small(words, fit.values_of(k).len(), depth);
        taken += usize::from(s);
        small.push_with(words, fit.values_of(k), s, None);
    }
    let (again, _) = gpu.linearize(&small).unwrap();
    let differ = again.iter().zip(sums).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert_eq!((differ, again.len()), (0, sums.len()), "{differ} sums differ in the small-stack kernels");
    taken
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_run_on_the_gpu_fits_its_parameters_there() {
    require_gpu("gpu_fit_run");
    let run = |route: &str| {
        common::evolve_example(
            "friedman1",
            &["--route", route, "--population", "200", "--generations", "5", "--seed", "3"],
        )
    };
    let (records, summary) = run("interpreter");
    let on_gpu: u64 = records.iter().map(|r| r["fitted_on_gpu"].as_u64().unwrap()).sum();
    let moved: u64 = records.iter().map(|r| r["fitted"].as_u64().unwrap()).sum();
    eprintln!("fitted on the GPU: {on_gpu}, moved: {moved}, best {}", summary["best_fitness"]);
    assert!(on_gpu > 0 && moved > 0);
    // Node-evaluations: each generation that fitted on the GPU ran some, at most every fitted
    // individual's starts (1 + restarts, the default 0) over all cases at every launch (at most
    // 21 at the default 10 iterations: the first, and a plain run and a run with derivatives a
    // trial), with programs of fewer than 1,000 ops (five generations).
    let cases = friedman1().cases().len() as u64;
    for r in &records {
        let (n, evals) = (r["fitted_on_gpu"].as_u64().unwrap(), r["fit_node_evals"].as_u64().unwrap());
        assert_eq!(n > 0, evals > 0, "{r}");
        assert!(evals <= n * cases * 21 * 1000, "{r}");
        assert!(evals >= n * cases, "{r}");
    }
    // The GPU's sums are reduced in a fixed order: the same seed gives the same run.
    let (again_records, _) = run("interpreter");
    let best = |r: &[Value]| r.iter().map(|g| g["best"].as_f64().unwrap().to_bits()).collect::<Vec<_>>();
    assert_eq!(best(&again_records), best(&records));
    // The printed model re-evaluates, on the CPU, to the fitness the GPU reported (same text).
    let problem = friedman1();
    let text = summary["best_phenotype"].as_str().unwrap();
    let again = gpfarm_gp::evaluate_phenotype(&problem, &Phenotype::new(text)).fitness.value();
    close("best", again, summary["best_fitness"].as_f64().unwrap(), 1e-5, 0.0);
    // Fitting on the GPU finds models as good as fitting on the CPU does (not the same run: the
    // sums differ in the last bits).
    let (_, cpu) = run("cpu");
    let (g, c) = (summary["best_fitness"].as_f64().unwrap(), cpu["best_fitness"].as_f64().unwrap());
    eprintln!("best: GPU-fitted {g}, CPU-fitted {c}");
    assert!(g < 2.0 * c, "GPU-fitted {g} against CPU-fitted {c}");
}

/// Programs the compiled fitting kernels take: straight-line float code of 5 or more parameters.
fn compiled_programs() -> Vec<String> {
    programs()
        .into_iter()
        .filter(|text| {
            let problem = friedman1();
            let program = Program::parse(&problem, &Phenotype::new(text.as_str())).unwrap();
            let code = assemble_structure(&problem, &program).unwrap();
            fit_compiles(&code.words, program.params())
        })
        .collect()
}

/// The compiled fitting units of `texts` (one per width, in `FIT_WIDTHS` order), as the NVRTC
/// route writes them or (`ptx`) as the PTX route does (PTX linked with the fitting template), and
/// each program's unit and member.
fn fit_code_units(
    problem: &Problem,
    texts: &[String],
    arch: SmArch,
    ptx: bool,
) -> (Vec<Vec<u8>>, Vec<(u32, u32)>) {
    let toolchain = gpfarm_toolchain::Toolchain::discover(None).unwrap();
    let options =
        CompileOptions { flags: vec![gpfarm_evolve::NO_FMAD.into()], ..CompileOptions::cubin(arch) };
    let mut nvrtc = InProcess::new(&toolchain, &options).unwrap();
    let codes: Vec<(Vec<u32>, usize)> = texts
        .iter()
        .map(|t| {
            let program = Program::parse(problem, &Phenotype::new(t.as_str())).unwrap();
            (assemble_structure(problem, &program).unwrap().words, program.params())
        })
        .collect();
    let shapes: Vec<(&[u32], usize)> = codes.iter().map(|(w, np)| (w.as_slice(), *np)).collect();
    let mut units = Vec::new();
    let mut at = vec![(u32::MAX, 0); texts.len()];
    // One worker: one unit per width.
    let t = std::time::Instant::now();
    let compiled =
        gpfarm_evolve::FitUnits::default().compile(&mut nvrtc, problem, &options, &shapes, 1, ptx).unwrap();
    eprintln!(
        "{} fitting units ({}) in {:.2?}",
        compiled.len(),
        if ptx { "PTX" } else { "NVRTC" },
        t.elapsed()
    );
    for (plan, cubin) in compiled {
        let cubin = cubin.unwrap_or_else(|why| panic!("width {} does not compile: {why}", plan.width));
        for (m, &k) in plan.members.iter().enumerate() {
            at[k] = (units.len() as u32, m as u32);
        }
        units.push(cubin);
    }
    assert!(at.iter().all(|a| a.0 != u32::MAX), "every program is in a unit");
    (units, at)
}

#[test]
fn compiled_fitting_kernels_compile_for_straight_line_programs_of_five_or_more_parameters() {
    if !common::nvrtc_or_skip("fit_code_compiles") {
        return;
    }
    let problem = friedman1();
    let texts = compiled_programs();
    // The straight-line programs of 5 or more parameters: reverse mode and protected division,
    // 12, 13, 23, 42 and 82 parameters; a branch, a double or 4 parameters are not taken.
    assert_eq!(texts.len(), 7, "{texts:#?}");
    let code = |text: &str| {
        let program = Program::parse(&problem, &Phenotype::new(text)).unwrap();
        (assemble_structure(&problem, &program).unwrap().words, program.params())
    };
    for text in [
        "x1 > p[0] ? p[1] * x2 + p[2] * x3 + p[3] * x4 + p[4] : p[5] * x5",
        "p[0] * x1 + p[1] * x2 * 1.0 + p[2] + p[3] + p[4]",
        "p[0] * x1 + p[1] * x2 + p[2] + p[3]",
    ] {
        let (words, np) = code(text);
        assert!(!fit_compiles(&words, np), "{text}");
    }
    let (units, at) = fit_code_units(&problem, &texts, SmArch::SM_90, false);
    assert!(units.len() >= 3, "{} units", units.len());
    for cubin in &units {
        assert!(String::from_utf8_lossy(cubin).contains(gpfarm_kernels::interpreter::FIT_CODE_KERNEL));
    }
    assert_eq!(at.len(), texts.len());
    // The PTX route's: PTX linked with the template, the same kernel by name.
    if common::nvjitlink_or_skip("fit_code_compiles_ptx") {
        let (linked, at_linked) = fit_code_units(&problem, &texts, SmArch::SM_90, true);
        assert_eq!((linked.len(), &at_linked), (units.len(), &at));
        for cubin in &linked {
            assert!(String::from_utf8_lossy(cubin).contains(gpfarm_kernels::interpreter::FIT_CODE_KERNEL));
        }
    }
    // A member that is not straight-line code, or wider than its unit, is refused in one line.
    let (branch, _) = code("x1 > p[0] ? p[1] * x2 + p[2] * x3 + p[3] * x4 + p[4] : p[5] * x5");
    let why = fit_code_source(&problem, 8, &[&branch]).unwrap_err().to_string();
    assert!(why.contains("member 0 is not straight-line float code"), "{why}");
    let (wide, _) = code(&texts[texts.len() - 1]);
    assert!(fit_code_source(&problem, 16, &[&wide]).is_err());
    assert!(fit_code_source(&problem, 7, &[]).is_err());
    // A program whose stack reaches 64 values fails its cases in the interpreter's sweep: it is
    // left to it.
    let mut depths = Vec::new();
    for n in 40..80 {
        let nested = (0..n)
            .fold(String::from("p[0] * x1"), |e, k| format!("p[{}] * x{} + ({e})", k % 8 + 1, k % 5 + 1));
        let program = Program::parse(&problem, &Phenotype::new(nested.as_str())).unwrap();
        let code = assemble_structure(&problem, &program).unwrap();
        assert!(fitted_in_reverse(&code.words));
        assert_eq!(fit_compiles(&code.words, program.params()), code.depth < 64, "depth {}", code.depth);
        // The interpreter's kernels would fail it too: the CPU fits it.
        assert_eq!(fits_on_gpu(&code.words, program.params(), code.depth), code.depth < 64);
        depths.push(code.depth);
    }
    assert!(depths.contains(&63) && depths.contains(&64), "{depths:?}");
    // The interpreter's kernels clear their shared abort flag before any thread reads it.
    let source = fit_source(&problem).unwrap();
    let cleared = source.find("gpfarm_abort = 0;").expect("the abort flag is cleared");
    assert!(cleared < source.find("__syncthreads()").unwrap());
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn compiled_fitting_kernels_give_the_interpreter_s_sums_and_fits_bit_for_bit() {
    let problem = friedman1();
    let (arch, mut gpu) = fitting_on_the_gpu("gpu_fit_code", &problem);
    let texts = compiled_programs();
    // NVRTC's kernels, then the PTX route's.
    for ptx in [false, true] {
        eprintln!("{}", if ptx { "PTX linked with the template" } else { "NVRTC" });
        compiled_fits_match(&problem, &mut gpu, &texts, fit_code_units(&problem, &texts, arch, ptx));
    }
}

/// Compiled fitting kernels `units` (`at`: each of `texts`' unit and member) give the
/// interpreter's sums and fits, bit for bit.
fn compiled_fits_match(
    problem: &Problem,
    gpu: &mut GpuEvaluator,
    texts: &[String],
    (units, at): (Vec<Vec<u8>>, Vec<(u32, u32)>),
) {
    gpu.load_fit_code(&units).unwrap();
    let (interpreted, want) = request(problem, texts, 5);
    // The same starts, each by its compiled kernel.
    let mut compiled = WireFit::new(problem.max_steps());
    for k in 0..interpreted.offsets.len() {
        compiled.push_with(interpreted.words_of(k), interpreted.values_of(k), false, Some(at[k / 3]));
    }
    let (a, _) = gpu.linearize(&interpreted).unwrap();
    let (b, took) = gpu.linearize(&compiled).unwrap();
    eprintln!("{} starts by compiled kernels in {took:?}", want.len());
    assert_eq!(a.len(), b.len());
    let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
    assert_eq!(differ, 0, "{differ} of {} sums differ", a.len());
    agree(&b, &want);
    // Both kinds in one request: each start's sums are still its own.
    let mut mixed = WireFit::new(problem.max_steps());
    for k in 0..interpreted.offsets.len() {
        let code = (k % 2 == 0).then_some(at[k / 3]);
        mixed.push_with(interpreted.words_of(k), interpreted.values_of(k), false, code);
    }
    let (c, _) = gpu.linearize(&mixed).unwrap();
    assert!(c.iter().zip(&a).all(|(x, y)| x.to_bits() == y.to_bits()));
    // Whole fits: the same values, sums and starting sums.
    let one = gpu.fit(&interpreted, 10).unwrap();
    let two = gpu.fit(&compiled, 10).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&one.params), bits(&two.params));
    assert_eq!(
        one.sse.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        two.sse.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    // A start naming a unit that is not loaded is refused.
    let mut wrong = WireFit::new(problem.max_steps());
    wrong.push_with(interpreted.words_of(0), interpreted.values_of(0), false, Some((units.len() as u32, 0)));
    let why = gpu.linearize(&wrong).unwrap_err().to_string();
    assert!(why.contains("names compiled fitting unit"), "{why}");
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU machine"]
fn a_run_fitted_by_compiled_kernels_is_the_interpreter_fitted_run() {
    require_gpu("gpu_fit_code_run");
    let run = |route: &str, kernels: &str| {
        common::evolve_example(
            "friedman1",
            &[
                "--route",
                route,
                "--population",
                "200",
                "--generations",
                "4",
                "--seed",
                "3",
                "--fit-kernels",
                kernels,
            ],
        )
    };
    let (interpreted, a) = run("interpreter", "interpreter");
    let (compiled, b) = run("interpreter", "compiled");
    // The PTX route fits by its own code: PTX linked with the fitting template. Against the same
    // route fitted by the interpreter's kernels (routes may differ in the last bits where a model
    // has a math function of a parameter alone: the interpreter folds it on the host).
    let (ptx_interpreted, c) = run("ptx", "interpreter");
    let (linked, d) = run("ptx", "compiled");
    let sum = |r: &[Value], key: &str| r.iter().map(|g| g[key].as_u64().unwrap()).sum::<u64>();
    let ms = |r: &[Value], key: &str| r.iter().map(|g| g[key].as_f64().unwrap()).sum::<f64>();
    for (what, r) in [
        ("interpreter", &interpreted),
        ("compiled", &compiled),
        ("PTX route, interpreter's kernels", &ptx_interpreted),
        ("PTX route, its own", &linked),
    ] {
        eprintln!(
            "{what}: fitted on the GPU {}, by compiled kernels {}; fit {:.1} ms, compiling {:.1} ms",
            sum(r, "fitted_on_gpu"),
            sum(r, "fitted_compiled"),
            ms(r, "fit_ms"),
            ms(r, "fit_compile_ms"),
        );
    }
    assert_eq!(sum(&interpreted, "fitted_compiled"), 0);
    assert_eq!(sum(&ptx_interpreted, "fitted_compiled"), 0);
    assert!(sum(&compiled, "fitted_compiled") > 0);
    assert!(sum(&linked, "fitted_compiled") > 0);
    let best = |r: &[Value]| r.iter().map(|g| g["best"].as_f64().unwrap().to_bits()).collect::<Vec<_>>();
    assert_eq!(best(&interpreted), best(&compiled));
    assert_eq!(best(&ptx_interpreted), best(&linked));
    assert_eq!(a["best_phenotype"], b["best_phenotype"]);
    assert_eq!(c["best_phenotype"], d["best_phenotype"]);
}
