//! Parameter optimisation's workload (`gpfarm bench --param-steps`): `E` expressions with free
//! parameters over `P` points, each evaluated for `S` steps with new values of its parameters at
//! every step, as in the related thesis's comparison (expressions 10 to 10^5, points 362 to 10^4,
//! 100 steps). Per route, one structure is prepared once and then only its values change:
//! - `interpreter`: bytecode assembled once; each step writes the values into it
//!   ([`Bytecode::with_values`]) and interprets the whole set in one launch;
//! - `nvrtc`, `ptx`: each structure compiled once on the farm (the engine's units) and loaded
//!   once (the evaluator keeps modules loaded), values passed as the kernels' argument
//!   ([`gpfarm_kernels::gpu::GpuEvaluator::set_values`]) at each step;
//! - `cpu`: the CPU evaluator with the values (`Program::run_params`) on every core.
//!
//! Every step includes the fitness (RMSE against the points' target), which the thesis's result
//! matrix does not. A row gives the preparation (`compile_ms`), the median step, and the total
//! `compile + S * step`; so a row also says what `k` steps cost, and where compiling pays
//! ([`crossover_steps`]). The GPU routes' fitness is checked against the interpreter's at the
//! first step.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, anyhow};
use gpfarm_client::Compiler;
use gpfarm_gp::problem::ProblemSources;
use gpfarm_gp::{Evolution, EvolutionConfig, Phenotype, Problem, Program};
use gpfarm_kernels::gpu::{GpuEvaluator, Kernels, WireFit};
use gpfarm_kernels::interpreter::{
    Bytecode, PackedPopulation, assemble_structure, fit_compiles, fits_on_gpu, fits_small,
};
use gpfarm_protocol::{Route, SmArch};
use serde::{Deserialize, Serialize};

use crate::shared::{Compiled, bench_options, compile_kernel, interpreting_evaluator, median};

/// What to measure.
#[derive(Debug, Clone)]
pub struct StepsConfig {
    /// Expressions per workload (before removing duplicates).
    pub expressions: Vec<usize>,
    /// Points (test cases) per workload.
    pub points: Vec<usize>,
    /// Parameter steps per workload.
    pub steps: usize,
    /// Largest derivation depth of the expressions (sensible initialisation).
    pub depth: u32,
    /// The compiled routes only up to this many expressions.
    pub compiled_max_expressions: usize,
    /// The CPU only up to this many expression-points per step.
    pub cpu_max_work: usize,
    /// The GPU's architecture.
    pub arch: SmArch,
    /// Fitting's steps instead of evaluation's: each step is one Levenberg–Marquardt
    /// linearization (residuals, `Jᵀr`, `JᵀJ`) of every expression a compiled fitting kernel takes
    /// (straight-line, 5 or more parameters), by the interpreter's fitting kernels
    /// (`fit-interpreter`), by kernels compiled for each structure (`fit-compiled`) and by the PTX
    /// route's (`fit-ptx`: PTX linked with the fitting template).
    pub fit: bool,
    /// nvJitLink option sets the PTX route is measured with, each a row of its own (`ptx` and
    /// the options, e.g. `ptx -O3`); none: [`gpfarm_evolve::default_link_flags`] of the
    /// benchmark's problem, in a row named `ptx`.
    pub ptx_links: Vec<Vec<String>>,
    /// Where CSV, table and plot go.
    pub out: PathBuf,
}

/// The row name of the PTX route linked with `flags` (see [`StepsConfig::ptx_links`]).
pub fn ptx_route_name(flags: &[String]) -> String {
    if flags.is_empty() { "ptx".into() } else { format!("ptx {}", flags.join(" ")) }
}

/// One route on one workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepsRow {
    /// Expressions asked for.
    pub expressions: usize,
    /// Distinct expressions evaluated.
    pub programs: usize,
    /// Points.
    pub points: usize,
    /// Mean ops per expression (bytecode).
    pub mean_ops: f64,
    /// Mean free parameters per expression.
    pub mean_params: f64,
    /// interpreter, ptx, nvrtc or cpu.
    pub route: String,
    /// Preparing the structures once: compiling (farm wall time, plus loading the modules) or
    /// assembling bytecode.
    pub compile_ms: f64,
    /// One step (new values for every expression, evaluation, fitness back), median.
    pub step_ms: f64,
    /// Steps timed.
    pub steps: usize,
    /// `compile + steps * step`.
    pub total_ms: f64,
    /// Expression-points evaluated per second in a step.
    pub evals_per_s: f64,
}

/// What the rows of one workload share.
struct Workload {
    expressions: usize,
    programs: usize,
    points: usize,
    mean_ops: f64,
    mean_params: f64,
    steps: usize,
}

impl Workload {
    /// The row of `route`, which prepared the workload in `compile_ms` and took `times` (ms) for
    /// its timed steps.
    fn row(&self, route: &str, compile_ms: f64, times: Vec<f64>) -> StepsRow {
        let step_ms = median(times);
        StepsRow {
            expressions: self.expressions,
            programs: self.programs,
            points: self.points,
            mean_ops: self.mean_ops,
            mean_params: self.mean_params,
            route: route.to_owned(),
            compile_ms,
            step_ms,
            steps: self.steps,
            total_ms: compile_ms + self.steps as f64 * step_ms,
            evals_per_s: self.programs as f64 * self.points as f64 / (step_ms / 1e3),
        }
    }
}

/// The expressions' problem over `points` points: ten inputs `x1..x10` uniform in [1, 2), the
/// target a smooth function of five of them, and a grammar of the thesis's operators (`+ - * /`,
/// `powf`, `fabsf`, `logf`, `expf`, `sqrtf`) over weighted variables, variables and free
/// parameters.
pub fn problem(points: usize) -> Result<Problem> {
    let mut toml =
        format!("name = \"steps{points}\"\nstart = \"e\"\nkind = \"expression\"\nfitness = \"rmse\"\n");
    for i in 1..=10 {
        toml.push_str(&format!("[[inputs]]\nname = \"x{i}\"\ntype = \"float\"\n"));
    }
    toml.push_str("[[outputs]]\nname = \"y\"\ntype = \"float\"\n[target]\ntype = \"float\"\n");
    let grammar = "<e> ::= <e> + <e> | <e> - <e> | <e> * <e> | <e> / <e> | powf(fabsf(<e>), <w>) | fabsf(<e>) \
                   | logf(fabsf(<e>)) | expf(<w>) | sqrtf(fabsf(<e>)) | <w> | <w> | <w>\n\
                   <w> ::= #param# * <v> | #param# | <v>\n\
                   <v> ::= x1 | x2 | x3 | x4 | x5 | x6 | x7 | x8 | x9 | x10\n";
    // A fixed generator (splitmix64), so every run measures the same points.
    let mut state = 0x5EED_u64;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        1.0 + ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut cases = String::with_capacity(points * 200);
    cases.push('[');
    for c in 0..points {
        let x: Vec<f32> = (0..10).map(|_| next()).collect();
        let t = x[0] * x[1] + (x[2] * 3.0).sin() + x[3].sqrt() / x[4];
        if c > 0 {
            cases.push(',');
        }
        cases.push('{');
        for (i, v) in x.iter().enumerate() {
            cases.push_str(&format!("\"x{}\":{v:?},", i + 1));
        }
        cases.push_str(&format!("\"target\":{t:?}}}"));
    }
    cases.push(']');
    // The standard harness for this declaration (the PTX route needs it), from a first load with
    // a plain template of the same parameters.
    let inputs: Vec<String> = (1..=10).map(|i| format!("const float* in_x{i}")).collect();
    let reads: String = (1..=10).map(|i| format!("const float x{i} = in_x{i}[0]; ")).collect();
    let plain = format!(
        "//@kernel\nextern \"C\" __global__ void {{{{KERNEL}}}}({}, float* out_y, int NCASES) {{ {reads}out_y[0] = ({{{{PHENOTYPE}}}}); }}\n",
        inputs.join(", ")
    );
    let first = Problem::from_sources(
        "steps",
        &ProblemSources { toml: &toml, grammar, cases: &cases, template: &plain },
    );
    let spec = first.map_err(|e| anyhow!("steps problem: {e}"))?.spec().clone();
    let template = gpfarm_gp::problem::standard_template(&spec);
    Ok(Problem::from_sources(
        &format!("steps{points}"),
        &ProblemSources { toml: &toml, grammar, cases: &cases, template: &template },
    )?)
}

/// `size` distinct expressions of `problem` that parse, with at least one free parameter.
fn expressions(problem: &Problem, size: usize, depth: u32) -> Result<(Vec<Phenotype>, Vec<Program>)> {
    let config = EvolutionConfig {
        population: size,
        seed: 1,
        init: gpfarm_gp::InitMethod::Sensible,
        init_max_depth: depth,
        generations: 50,
        max_size: 0,
        ..EvolutionConfig::default()
    };
    let mut phenotypes = Vec::new();
    let mut programs = Vec::new();
    for p in Evolution::new(problem, config)?.dedup().unique {
        if let Ok(program) = Program::parse(problem, &p)
            && program.params() > 0
        {
            phenotypes.push(p);
            programs.push(program);
        }
    }
    Ok((phenotypes, programs))
}

/// The values of step `step`: a fixed function of the step, the expression and the place, in
/// [-2, 2].
fn values(step: usize, counts: &[usize], stride: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; counts.len() * stride];
    for (i, &n) in counts.iter().enumerate() {
        for k in 0..n {
            let h = (step as u64 + 1)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add((i as u64) << 20 | k as u64)
                .wrapping_mul(0xBF58_476D_1CE4_E5B9);
            v[i * stride + k] = ((h >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0;
        }
    }
    v
}

/// Runs every workload; `progress` hears one line per row.
pub fn run(
    config: &StepsConfig,
    farm: &mut dyn Compiler,
    mut progress: impl FnMut(&str),
) -> Result<Vec<StepsRow>> {
    let options = bench_options(config.arch);
    let threads = std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN);
    let steps = config.steps.max(1);
    let mut rows = Vec::new();
    // The fitting kernels' CUBIN: the same source for every point count.
    let mut fit_cubin: Option<Vec<u8>> = None;
    for &points in &config.points {
        let problem = problem(points)?;
        if config.fit {
            let cubin = match fit_cubin.take() {
                Some(c) => c,
                None => compile_kernel(
                    farm,
                    gpfarm_kernels::interpreter::fit_source(&problem)?,
                    "fit.cu",
                    &options,
                )?,
            };
            let kernels = Kernels { fit: vec![cubin.clone()], ..Kernels::default() };
            fit_cubin = Some(cubin);
            let mut gpu = GpuEvaluator::with_kernels(&problem, &kernels)?;
            for &size in &config.expressions {
                let (_, programs) = expressions(&problem, size, config.depth)?;
                rows.extend(fit_rows(
                    config,
                    farm,
                    &options,
                    &problem,
                    &mut gpu,
                    size,
                    &programs,
                    &mut progress,
                )?);
            }
            continue;
        }
        let mut gpu = interpreting_evaluator(farm, &problem, &options)?;
        // The first compile and load of the PTX route's code at each link option set costs far
        // more than any later (the farm's nvJitLink, the driver's first modules): not timed,
        // once per point count.
        if config.expressions.iter().any(|&e| e <= config.compiled_max_expressions) {
            let (phenotypes, programs) = expressions(&problem, 64, config.depth)?;
            let counts: Vec<usize> = programs.iter().map(Program::params).collect();
            let stride = counts.iter().copied().max().unwrap_or(0);
            for flags in &config.ptx_links {
                let links = Some(flags.as_slice());
                let compiled =
                    Compiled::new(farm, &problem, &phenotypes, Route::Ptx, config.arch, &options, links)?;
                gpu.set_values(&values(0, &counts, stride), stride)?;
                gpu.evaluate(&compiled.views(), programs.len())?;
            }
        }
        for &size in &config.expressions {
            let (phenotypes, programs) = expressions(&problem, size, config.depth)?;
            let n = programs.len();
            let counts: Vec<usize> = programs.iter().map(Program::params).collect();
            let stride = counts.iter().copied().max().unwrap_or(0);
            let mean_params = counts.iter().sum::<usize>() as f64 / n.max(1) as f64;
            let mut keep = |route: &str,
                            compile_ms: f64,
                            times: Vec<f64>,
                            ops: f64,
                            progress: &mut dyn FnMut(&str)| {
                let workload =
                    Workload { expressions: size, programs: n, points, mean_ops: ops, mean_params, steps };
                let r = workload.row(route, compile_ms, times);
                progress(&format!(
                    "{} expressions ({} distinct, {:.1} ops, {:.1} params) x {} points: {} prepare {:.1} ms, step {:.3} ms, {} steps {:.1} ms",
                    r.expressions,
                    r.programs,
                    r.mean_ops,
                    r.mean_params,
                    r.points,
                    r.route,
                    r.compile_ms,
                    r.step_ms,
                    steps,
                    r.total_ms
                ));
                rows.push(r);
            };
            // The interpreter: structures assembled once, values written in at each step.
            let t = Instant::now();
            let codes: Vec<Bytecode> =
                programs.iter().map(|p| assemble_structure(&problem, p)).collect::<Result<_, _>>()?;
            let compile_ms = t.elapsed().as_secs_f64() * 1e3;
            let ops = PackedPopulation::new(&codes).ops() as f64 / n.max(1) as f64;
            let mut times = Vec::with_capacity(steps);
            let mut first: Vec<Option<f64>> = Vec::new();
            for s in 0..=steps {
                let v = values(s % steps, &counts, stride);
                let t = Instant::now();
                let stepped: Vec<Bytecode> = codes
                    .iter()
                    .enumerate()
                    .map(|(i, c)| c.with_values(&v[i * stride..(i + 1) * stride]))
                    .collect();
                let wire = PackedPopulation::new(&stepped).into_wire(problem.max_steps());
                let fitness = gpu.interpret(&wire)?.fitness;
                // The first step loads the module's code on the device: not timed, kept to compare.
                if s == 0 {
                    first = fitness;
                } else {
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                }
            }
            keep("interpreter", compile_ms, times, ops, &mut progress);
            // The compiled routes: each structure compiled once, the values an argument.
            if n <= config.compiled_max_expressions {
                // Each PTX link option set, then NVRTC.
                let mut variants: Vec<(Route, Option<&[String]>)> = if config.ptx_links.is_empty() {
                    vec![(Route::Ptx, None)]
                } else {
                    config.ptx_links.iter().map(|f| (Route::Ptx, Some(f.as_slice()))).collect()
                };
                variants.push((Route::Nvrtc, None));
                for (route, links) in variants {
                    let name = match links {
                        Some(flags) => ptx_route_name(flags),
                        None => route.as_str().to_owned(),
                    };
                    let compiled =
                        Compiled::new(farm, &problem, &phenotypes, route, config.arch, &options, links)?;
                    let (ordered, farm_ms) = (&compiled.ordered, compiled.compile_ms);
                    let views = compiled.views();
                    // The values in the units' order.
                    let place: std::collections::HashMap<&str, usize> =
                        phenotypes.iter().enumerate().map(|(i, p)| (p.as_str(), i)).collect();
                    let order: Vec<usize> = ordered.iter().map(|p| place[p.as_str()]).collect();
                    let mut times = Vec::with_capacity(steps);
                    let mut load_ms = 0.0;
                    let mut differ = 0;
                    for s in 0..=steps {
                        let v = values(s % steps, &counts, stride);
                        let t = Instant::now();
                        let mut row = vec![0.0f32; n * stride];
                        for (j, &i) in order.iter().enumerate() {
                            row[j * stride..(j + 1) * stride]
                                .copy_from_slice(&v[i * stride..(i + 1) * stride]);
                        }
                        gpu.set_values(&row, stride)?;
                        let out = gpu.evaluate(&views, n)?;
                        let took = t.elapsed().as_secs_f64() * 1e3;
                        if s == 0 {
                            // Loading the modules counts as preparing; the fitness must be the
                            // interpreter's or the comparison is void.
                            load_ms = out.load.as_secs_f64() * 1e3;
                            differ = order
                                .iter()
                                .enumerate()
                                .filter(|&(j, &i)| match (out.fitness[j], first[i]) {
                                    (Some(a), Some(b)) => {
                                        let scale = a.abs().max(b.abs()).max(1e-30);
                                        (a - b).abs() / scale > 1e-4 && !(a.is_nan() && b.is_nan())
                                    }
                                    (a, b) => a.is_some() != b.is_some(),
                                })
                                .count();
                        } else {
                            times.push(took);
                        }
                    }
                    if differ > 0 {
                        progress(&format!(
                            "{size} x {points}: {differ} of {n} expressions differ by more than 1e-4 between {name} and the interpreter"
                        ));
                    }
                    keep(&name, farm_ms + load_ms, times, ops, &mut progress);
                }
            }
            // The CPU evaluator with the values, on every core.
            if n * points <= config.cpu_max_work {
                let cpu_steps = steps.min(10);
                let mut times = Vec::with_capacity(cpu_steps);
                for s in 0..cpu_steps {
                    let v = values(s, &counts, stride);
                    let t = Instant::now();
                    cpu_step(&problem, &programs, &v, stride, threads);
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                }
                keep("cpu", 0.0, times, ops, &mut progress);
            }
        }
    }
    Ok(rows)
}

/// The fitting rows of one workload: every expression a compiled fitting kernel takes,
/// linearized at each step's values by the interpreter's fitting kernels (bytecode assembled once)
/// and by compiled ones (its units compiled on `farm` and loaded once); the first step's sums of
/// the two are compared bit for bit.
#[allow(clippy::too_many_arguments)]
fn fit_rows(
    config: &StepsConfig,
    farm: &mut dyn Compiler,
    options: &gpfarm_client::CompileOptions,
    problem: &Problem,
    gpu: &mut GpuEvaluator,
    size: usize,
    programs: &[Program],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<StepsRow>> {
    let steps = config.steps.max(1);
    let points = problem.cases().len();
    let t = Instant::now();
    let mut codes: Vec<(Vec<u32>, usize)> = Vec::new();
    // Whether the interpreter's small-stack kernel of its width runs each.
    let mut small: Vec<bool> = Vec::new();
    for p in programs {
        let code = assemble_structure(problem, p)?;
        if fit_compiles(&code.words, p.params()) && fits_on_gpu(&code.words, p.params(), code.depth) {
            small.push(fits_small(&code.words, p.params(), code.depth));
            codes.push((code.words, p.params()));
        }
    }
    let assemble_ms = t.elapsed().as_secs_f64() * 1e3;
    let n = codes.len();
    if n == 0 {
        progress(&format!("{size} x {points}: no expression of 5 or more parameters to fit"));
        return Ok(Vec::new());
    }
    let counts: Vec<usize> = codes.iter().map(|(_, np)| *np).collect();
    let stride = counts.iter().copied().max().unwrap_or(0);
    let ops = codes.iter().map(|(w, _)| w.len()).sum::<usize>() as f64 / n as f64;
    let mean_params = counts.iter().sum::<usize>() as f64 / n as f64;
    // The compiled units (NVRTC's, then the PTX route's), each program's unit and member in each.
    let shapes: Vec<(&[u32], usize)> = codes.iter().map(|(w, np)| (w.as_slice(), *np)).collect();
    let mut units: Vec<Vec<u8>> = Vec::new();
    let mut at: [Vec<Option<(u32, u32)>>; 2] = [vec![None; n], vec![None; n]];
    let mut compile_ms = [0.0; 2];
    let mut fit_units = gpfarm_evolve::FitUnits::default();
    let workers = farm.workers();
    for (w, ptx) in [false, true].into_iter().enumerate() {
        let t = Instant::now();
        for (plan, cubin) in fit_units.compile(farm, problem, options, &shapes, workers, ptx)? {
            let cubin = match cubin {
                Ok(c) => c,
                Err(why) => {
                    progress(&format!("{size} x {points}: a compiled fitting unit failed: {why}"));
                    continue;
                }
            };
            for (m, &k) in plan.members.iter().enumerate() {
                at[w][k] = Some((units.len() as u32, m as u32));
            }
            units.push(cubin);
        }
        // Loading the units counts with compiling them (those loaded before are not loaded again).
        gpu.load_fit_code(&units)?;
        compile_ms[w] = t.elapsed().as_secs_f64() * 1e3;
    }
    let compiled = at[0].iter().filter(|a| a.is_some()).count();
    let linked = at[1].iter().filter(|a| a.is_some()).count();
    let mut rows = Vec::new();
    let mut first: Vec<Vec<f64>> = Vec::new();
    let by = [None, Some(&at[0]), Some(&at[1])];
    for ((route, prepare_ms), code_at) in
        [("fit-interpreter", assemble_ms), ("fit-compiled", compile_ms[0]), ("fit-ptx", compile_ms[1])]
            .into_iter()
            .zip(by)
    {
        let mut times = Vec::with_capacity(steps);
        for s in 0..=steps {
            let v = values(s % steps, &counts, stride);
            let t = Instant::now();
            let mut wire = WireFit::new(problem.max_steps());
            for (i, (words, np)) in codes.iter().enumerate() {
                let code = code_at.and_then(|a| a[i]);
                wire.push_with(words, &v[i * stride..i * stride + np], code.is_none() && small[i], code);
            }
            let (sums, _) = gpu.linearize(&wire)?;
            // The first step loads the code on the device: not timed, kept to compare.
            if s == 0 {
                first.push(sums);
            } else {
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        let workload = Workload { expressions: size, programs: n, points, mean_ops: ops, mean_params, steps };
        let r = workload.row(route, prepare_ms, times);
        progress(&format!(
            "{size} expressions ({n} fitted, {compiled} compiled, {linked} linked, {ops:.1} words, {mean_params:.1} params) x {points} points: {route} prepare {:.1} ms, step {:.3} ms, {steps} steps {:.1} ms",
            r.compile_ms, r.step_ms, r.total_ms
        ));
        rows.push(r);
    }
    for (k, what) in [(1, "the compiled"), (2, "the PTX route's")] {
        let differ = first[0].iter().zip(&first[k]).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        if differ > 0 || first[0].len() != first[k].len() {
            progress(&format!(
                "{size} x {points}: {differ} of {} sums differ between {what} and the interpreter's fitting kernels",
                first[0].len()
            ));
        }
    }
    Ok(rows)
}

/// The workloads of `rows` (expressions, points), each once, in order.
fn workloads(rows: &[StepsRow]) -> Vec<(usize, usize)> {
    let mut keys: Vec<(usize, usize)> = rows.iter().map(|r| (r.expressions, r.points)).collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The row of `route` on the workload of `expressions` expressions over `points` points.
fn row_of<'a>(rows: &'a [StepsRow], expressions: usize, points: usize, route: &str) -> Option<&'a StepsRow> {
    rows.iter().find(|r| r.expressions == expressions && r.points == points && r.route == route)
}

/// A markdown table of the fitting rows: per workload, each kind of kernel's preparation and
/// step, the compiled kernel's step against the interpreter's, and the steps after which
/// compiling pays.
pub fn fit_table(rows: &[StepsRow], heading: &str) -> String {
    let mut s = format!(
        "{heading}\n\n| expressions | fitted | points | words | params | interpreter prepare ms | interpreter step ms | compiled prepare ms | compiled step ms | compiled step speed-up | compiled wins after k steps | PTX prepare ms | PTX step ms | PTX step speed-up | PTX wins after k steps |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    );
    for (e, p) in workloads(rows) {
        let of = |route: &str| row_of(rows, e, p, route);
        let (Some(i), Some(c)) = (of("fit-interpreter"), of("fit-compiled")) else { continue };
        let wins = |c: &StepsRow| crossover_steps(c, i).map_or("never".into(), |k| format!("{k:.0}"));
        let ptx = of("fit-ptx").map_or_else(
            || "| – | – | – | – |".to_owned(),
            |x| {
                format!(
                    "| {:.1} | {:.3} | {:.2} | {} |",
                    x.compile_ms,
                    x.step_ms,
                    i.step_ms / x.step_ms,
                    wins(x)
                )
            },
        );
        s.push_str(&format!(
            "| {e} | {} | {p} | {:.1} | {:.1} | {:.1} | {:.3} | {:.1} | {:.3} | {:.2} | {} {ptx}\n",
            i.programs,
            i.mean_ops,
            i.mean_params,
            i.compile_ms,
            i.step_ms,
            c.compile_ms,
            c.step_ms,
            i.step_ms / c.step_ms,
            wins(c),
        ));
    }
    s
}

/// One step on the CPU: every program with its values, scored, on up to `threads` threads.
fn cpu_step(
    problem: &Problem,
    programs: &[Program],
    values: &[f32],
    stride: usize,
    threads: NonZeroUsize,
) -> Vec<f64> {
    let one = |(i, p): (usize, &Program)| -> f64 {
        let v = &values[i * stride..i * stride + p.params()];
        p.run_params(problem, v, problem.max_steps())
            .ok()
            .and_then(|o| problem.score(&o).ok())
            .map_or(f64::NAN, |f| f.value())
    };
    let chunk = programs.len().div_ceil(threads.get()).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = programs
            .chunks(chunk)
            .enumerate()
            .map(|(c, part)| {
                std::thread::Builder::new().stack_size(16 << 20).spawn_scoped(s, move || {
                    part.iter().enumerate().map(|(j, p)| one((c * chunk + j, p))).collect::<Vec<_>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(programs.len());
        for (h, (c, part)) in handles.into_iter().zip(programs.chunks(chunk).enumerate()) {
            match h.map(|h| h.join()) {
                Ok(Ok(v)) => out.extend(v),
                Ok(Err(panic)) => std::panic::resume_unwind(panic),
                Err(_) => out.extend(part.iter().enumerate().map(|(j, p)| one((c * chunk + j, p)))),
            }
        }
        out
    })
}

/// Steps after which `a` (a compiled route) costs less than `b` (the interpreter) on the same
/// workload: `a.compile + k a.step < b.compile + k b.step`; `None` if never.
pub fn crossover_steps(a: &StepsRow, b: &StepsRow) -> Option<f64> {
    let gain = b.step_ms - a.step_ms;
    (gain > 0.0).then(|| ((a.compile_ms - b.compile_ms) / gain).max(1.0))
}

/// Writes `rows` as CSV.
pub fn write_csv(rows: &[StepsRow], path: &Path) -> Result<()> {
    crate::shared::write_rows(rows, path)
}

/// Reads rows written by [`write_csv`].
pub fn read_csv(path: &Path) -> Result<Vec<StepsRow>> {
    crate::shared::read_rows(path)
}

/// The routes of `rows`, each once, in the order first met.
pub fn routes<'a>(rows: impl IntoIterator<Item = &'a StepsRow>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        if !names.contains(&r.route) {
            names.push(r.route.clone());
        }
    }
    names
}

/// The PTX rows' names in `rows` (one per link option set), in the order first met.
fn ptx_routes(rows: &[StepsRow]) -> Vec<String> {
    routes(rows).into_iter().filter(|r| r == "ptx" || r.starts_with("ptx ")).collect()
}

/// A markdown table: one line per workload, each route's total for the steps (the PTX route once
/// per link option set), the fastest, the CPU's time over the fastest GPU route's, and the steps
/// after which each compiled route overtakes the interpreter.
pub fn table(rows: &[StepsRow], heading: &str) -> String {
    let ptx = ptx_routes(rows);
    let gpu: Vec<&str> =
        std::iter::once("interpreter").chain(ptx.iter().map(String::as_str)).chain(["nvrtc"]).collect();
    let all: Vec<&str> = gpu.iter().copied().chain(["cpu"]).collect();
    let compiled: Vec<&str> = gpu[1..].to_vec();
    let mut s = format!("{heading}\n\n| expressions | distinct | points | ops | params |");
    for r in &all {
        s.push_str(&format!(" {r} ms |"));
    }
    s.push_str(" fastest | cpu / fastest GPU |");
    for r in &compiled {
        s.push_str(&format!(" {r} wins after k steps |"));
    }
    s.push_str(" PTX link level by k |");
    s.push_str("\n| ---: | ---: | ---: | ---: | ---: |");
    s.push_str(&" ---: |".repeat(all.len()));
    s.push_str(" --- | ---: |");
    s.push_str(&" ---: |".repeat(compiled.len()));
    s.push_str(" --- |");
    s.push('\n');
    for (e, p) in workloads(rows) {
        let of = |route: &str| row_of(rows, e, p, route);
        let Some(i) = of("interpreter") else { continue };
        let best = |routes: &[&str]| {
            routes.iter().filter_map(|r| of(r)).min_by(|a, b| a.total_ms.total_cmp(&b.total_ms))
        };
        let fastest = best(&all).map_or("-".into(), |r| r.route.clone());
        let ratio = match (of("cpu"), best(&gpu)) {
            (Some(c), Some(g)) => format!("{:.2}", c.total_ms / g.total_ms),
            _ => "-".into(),
        };
        s.push_str(&format!("| {e} | {} | {p} | {:.1} | {:.1} |", i.programs, i.mean_ops, i.mean_params));
        for r in &all {
            s.push_str(&of(r).map_or(" - |".into(), |r| format!(" {:.1} |", r.total_ms)));
        }
        s.push_str(&format!(" {fastest} | {ratio} |"));
        for r in &compiled {
            let wins = match of(r) {
                None => "-".into(),
                Some(a) => crossover_steps(a, i).map_or("never".into(), |k| format!("{k:.0}")),
            };
            s.push_str(&format!(" {wins} |"));
        }
        s.push_str(&format!(" {} |", link_level_by_k(i).flag()));
        s.push('\n');
    }
    s
}

/// The level the PTX route links at for the workload of `row` evaluated `row.steps` times
/// ([`gpfarm_evolve::route::ptx_link_level`], the reference host's costs).
pub fn link_level_by_k(row: &StepsRow) -> gpfarm_evolve::route::LinkLevel {
    use gpfarm_evolve::route::{Costs, Workload as Generation, ptx_link_level};
    let w = Generation {
        programs: row.programs,
        held_ops: row.mean_ops,
        run_ops: row.mean_ops,
        longest_case_ops: row.mean_ops,
        loops: false,
        params: row.mean_params,
    };
    ptx_link_level(&Costs::H100, &w, row.points, row.steps as f64).0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PTX route's link level by k against the committed measurement of every level (H200
    /// host, warmed up; each workload evaluated k = 100 times): on every workload the level the
    /// rule picks cost at most 10% (and 25 ms) more than the better of `-O0` and `-O3` as
    /// measured, and the rule picks each level somewhere.
    #[test]
    fn the_link_level_by_k_is_the_measured_cheaper_one() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/2026-11-26-h200/link-levels");
        let rows = read_csv(&dir.join("steps.csv")).unwrap();
        let mut picked = Vec::new();
        for (e, p) in workloads(&rows) {
            let (Some(i), Some(o0), Some(o3)) = (
                row_of(&rows, e, p, "interpreter"),
                row_of(&rows, e, p, "ptx -O0"),
                row_of(&rows, e, p, "ptx -O3"),
            ) else {
                continue;
            };
            let level = link_level_by_k(i);
            let chosen = if level == gpfarm_evolve::route::LinkLevel::O3 { o3 } else { o0 };
            let best = o0.total_ms.min(o3.total_ms);
            assert!(
                chosen.total_ms <= best * 1.1 + 25.0,
                "{e} x {p}: {level:?} cost {} ms, -O0 {} and -O3 {}",
                chosen.total_ms,
                o0.total_ms,
                o3.total_ms
            );
            picked.push(level);
        }
        assert!(picked.len() >= 10, "{picked:?}");
        assert!(picked.contains(&gpfarm_evolve::route::LinkLevel::O0), "{picked:?}");
        assert!(picked.contains(&gpfarm_evolve::route::LinkLevel::O3), "{picked:?}");
    }

    #[test]
    fn the_workload_has_parameters_and_runs_on_the_cpu_with_any_values() {
        let problem = problem(50).unwrap();
        gpfarm_gp::problem::compare_with_standard(problem.template(), problem.spec()).unwrap();
        let (phenotypes, programs) = expressions(&problem, 40, 5).unwrap();
        assert!(programs.len() > 20, "{}", programs.len());
        let counts: Vec<usize> = programs.iter().map(Program::params).collect();
        let stride = counts.iter().copied().max().unwrap();
        let (a, b) = (values(0, &counts, stride), values(1, &counts, stride));
        assert_ne!(a, b);
        assert!(a.iter().all(|v| (-2.0..=2.0).contains(v)));
        let one = NonZeroUsize::new(1).unwrap();
        let two = NonZeroUsize::new(2).unwrap();
        let first = cpu_step(&problem, &programs, &a, stride, two);
        // The values written in give the same fitness; the threads change nothing.
        for (i, p) in phenotypes.iter().enumerate() {
            let written = gpfarm_gp::program::instantiate(p, &a[i * stride..i * stride + counts[i]]);
            let f = gpfarm_gp::evaluate_phenotype(&problem, &written).fitness.value();
            assert!(
                f.to_bits() == first[i].to_bits() || f.is_nan() && first[i].is_nan() || f.is_infinite(),
                "{written}"
            );
        }
        let again = cpu_step(&problem, &programs, &a, stride, one);
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
        assert_ne!(format!("{first:?}"), format!("{:?}", cpu_step(&problem, &programs, &b, stride, one)));
    }
}
