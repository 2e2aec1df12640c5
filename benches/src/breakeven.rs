//! The break-even between compiling and interpreting (`gpfarm bench --break-even`): for each
//! workload (a problem, a case count, a program size) one population, and for each route the
//! time to get it from phenotypes to fitness on this machine's GPU:
//! - `interpreter`: bytecode (compiled on the CPU, timed as its compile) and one launch;
//! - `nvrtc`, `ptx`: the engine's units (switch kernels, guided chunks, each taken by the next
//!   free daemon), compiled on a farm, loaded, launched and reduced;
//! - `cpu`: the CPU evaluator on every core (up to `cpu_max_cases` cases).
//!
//! Evaluation is repeated and the median kept, so a row also tells what `k` evaluations of the
//! same population cost (constant optimisation): `compile + load + k * eval`.
//!
//! The regression workloads are keijzer6's grammar and template over `n` cases of `x` spread over
//! `[1, 64]`, target the harmonic number's continuous form `ln x + 0.5772`.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, anyhow};
use gpfarm_client::{CompileOptions, Compiler};
use gpfarm_gp::problem::ProblemSources;
use gpfarm_gp::{Evolution, EvolutionConfig, Phenotype, Problem, Program, evaluate_all};
use gpfarm_kernels::gpu::{self, GpuEvaluator, Kernels};
use gpfarm_kernels::interpreter::{self, PackedPopulation};
use gpfarm_protocol::{Route, SmArch};
use serde::{Deserialize, Serialize};

use crate::shared::{Compiled, compile_kernel, median};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BreakEvenConfig {
    /// Case counts of the regression workloads.
    pub cases: Vec<usize>,
    /// Largest derivation depth of the initial population, one program size each.
    pub depths: Vec<u32>,
    /// Individuals per population (before removing duplicates).
    pub population: usize,
    /// Also the built-in problems at their own case counts.
    pub builtins: bool,
    /// Timed evaluations per route and workload (the median is kept).
    pub repeats: usize,
    /// The CPU evaluator only up to this many cases.
    pub cpu_max_cases: usize,
    /// The GPU's architecture.
    pub arch: SmArch,
    /// Loop counts of the loop workloads: for each case count and loop count, programs that
    /// run a loop that many times per case ([`loops`]); empty for none.
    pub loops: Vec<u64>,
    /// Loop workloads only up to this many cases times loop count (each program's total steps).
    pub loop_max_steps: u64,
    /// Cases per thread at once of the interpreter for programs without jumps: the first is
    /// the `interpreter` route, each other one an extra row `interpreter-xK`.
    pub tunings: Vec<interpreter::Tuning>,
    /// Where CSV, table and plots go.
    pub out: PathBuf,
}

/// One route on one workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BreakEvenRow {
    /// Problem name.
    pub problem: String,
    /// Test cases.
    pub cases: usize,
    /// Largest derivation depth of the population's sensible initialisation (0: the engine's
    /// default initialisation, for the built-in problems).
    pub depth: u32,
    /// Distinct programs evaluated.
    pub programs: usize,
    /// Mean ops per program (bytecode, constants' words not counted).
    pub mean_ops: f64,
    /// Times each case runs its loop (loop workloads), 0 for programs without loops.
    #[serde(default)]
    pub loop_count: u64,
    /// nvrtc, ptx, interpreter or cpu.
    pub route: String,
    /// Phenotype to executable form: the farm's wall time, or bytecode compilation.
    pub compile_ms: f64,
    /// Loading the modules (compiled routes).
    pub load_ms: f64,
    /// One evaluation of the whole population, median of the repeats.
    pub eval_ms: f64,
    /// `compile + load + eval`: one generation's evaluation.
    pub generation_ms: f64,
    /// Ops evaluated per second in one evaluation (programs x mean ops x cases / eval).
    pub ops_per_s: f64,
}

/// The same fitness, bit for bit (any NaN is the same).
fn same(a: &Option<f64>, b: &Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan(),
        (a, b) => a.is_none() && b.is_none(),
    }
}

/// keijzer6's grammar and template over `n` cases.
pub fn regression(n: usize) -> Result<Problem> {
    let base = gpfarm_gp::problem::builtin::sources("keijzer6").ok_or_else(|| anyhow!("no keijzer6"))?;
    let toml = base.toml.replacen("name = \"keijzer6\"", &format!("name = \"regression{n}\""), 1);
    let cases = regression_cases(n);
    let src = ProblemSources { toml: &toml, grammar: base.grammar, cases: &cases, template: base.template };
    Ok(Problem::from_sources(&format!("regression{n}"), &src)?)
}

/// `cases.json` of [`regression`]: `n` values of `x` spread over `[1, 64]`, target `ln x + 0.5772`.
fn regression_cases(n: usize) -> String {
    let mut cases = String::with_capacity(n * 48);
    cases.push('[');
    for c in 0..n {
        let x = 1.0 + 63.0 * c as f64 / (n.max(2) - 1) as f64;
        let (x, t) = (x as f32, (x.ln() + 0.5772) as f32);
        if c > 0 {
            cases.push(',');
        }
        cases.push_str(&format!("{{\"x\":{x:?},\"target\":{t:?}}}"));
    }
    cases.push(']');
    cases
}

/// A loop workload over `n` cases: keijzer6's expressions and cases (as [`regression`]), each
/// program a statement that adds one expression to an accumulator `count` times per case:
/// `while(i < COUNT){acc = acc + E; i = i + 1;}y = acc;`. No step limit is reached (it is set
/// above the count), and no case's state repeats, so every route runs every iteration.
pub fn loops(n: usize, count: u64) -> Result<Problem> {
    let keijzer = gpfarm_gp::problem::builtin::sources("keijzer6").ok_or_else(|| anyhow!("no keijzer6"))?;
    let rules: String =
        keijzer.grammar.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n");
    let grammar = format!("<s> ::= while(i < {count}){{acc = acc + <e>; i = i + 1;}}y = acc;\n{rules}\n");
    let toml = format!(
        "name = \"loops{n}x{count}\"\nstart = \"s\"\nkind = \"statements\"\nfitness = \"rmse\"\nmax_steps = {}\n\
         [[inputs]]\nname = \"x\"\ntype = \"float\"\n[[locals]]\nname = \"i\"\ntype = \"int\"\n\
         [[locals]]\nname = \"acc\"\ntype = \"float\"\n[[outputs]]\nname = \"y\"\ntype = \"float\"\n\
         [target]\ntype = \"float\"\n",
        count + 1
    );
    let cases = regression_cases(n);
    // The standard harness for this declaration, from a first load with a plain template.
    let plain = "//@kernel\nextern \"C\" __global__ void {{KERNEL}}(const float* in_x, float* out_y, int NCASES) { int i = 0; float acc = 0.0f; float y = 0.0f; const float x = in_x[0]; {{PHENOTYPE}} out_y[0] = y; }\n";
    let name = format!("loops{n}x{count}");
    let first = Problem::from_sources(
        &name,
        &ProblemSources { toml: &toml, grammar: &grammar, cases: &cases, template: plain },
    );
    let spec = match first {
        Ok(p) => p.spec().clone(),
        Err(e) => return Err(anyhow!("{name}: {e}")),
    };
    let template = gpfarm_gp::problem::standard_template(&spec);
    Ok(Problem::from_sources(
        &name,
        &ProblemSources { toml: &toml, grammar: &grammar, cases: &cases, template: &template },
    )?)
}

/// One population of `problem`: generation 0 of seed 1, duplicates and programs that do not
/// parse removed. With a `depth`, sensible initialisation up to that derivation depth sets the
/// programs' size; without, the engine's default initialisation.
fn population(problem: &Problem, size: usize, depth: Option<u32>) -> Result<(Vec<Phenotype>, Vec<Program>)> {
    let mut config = EvolutionConfig {
        population: size,
        seed: 1,
        generations: 50,
        max_size: 0,
        ..EvolutionConfig::default()
    };
    if let Some(depth) = depth {
        config.init = gpfarm_gp::InitMethod::Sensible;
        config.init_max_depth = depth;
    }
    let unique = Evolution::new(problem, config)?.dedup().unique;
    let mut phenotypes = Vec::new();
    let mut programs = Vec::new();
    for p in unique {
        if let Ok(program) = Program::parse(problem, &p) {
            phenotypes.push(p);
            programs.push(program);
        }
    }
    Ok((phenotypes, programs))
}

/// Runs every workload; `progress` hears one line per row.
pub fn run(
    config: &BreakEvenConfig,
    farm: &mut dyn Compiler,
    mut progress: impl FnMut(&str),
) -> Result<Vec<BreakEvenRow>> {
    let mut workloads: Vec<(Problem, Option<u32>, u64)> = Vec::new();
    if config.builtins {
        for name in Problem::builtin_names() {
            workloads.push((Problem::builtin(name)?, None, 0));
        }
    }
    for &n in &config.cases {
        let problem = regression(n)?;
        for &d in &config.depths {
            workloads.push((problem.clone(), Some(d), 0));
        }
        for &count in &config.loops {
            if (n as u64).saturating_mul(count) <= config.loop_max_steps {
                workloads.push((loops(n, count)?, Some(config.depths.first().copied().unwrap_or(4)), count));
            }
        }
    }
    let tunings =
        if config.tunings.is_empty() { vec![interpreter::Tuning::default()] } else { config.tunings.clone() };
    let options =
        CompileOptions { flags: vec![gpfarm_evolve::NO_FMAD.into()], ..CompileOptions::cubin(config.arch) };
    let threads = std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN);
    let mut rows = Vec::new();
    let mut evaluators: Option<(String, Vec<GpuEvaluator>)> = None;
    for &(ref problem, depth_limit, loop_count) in &workloads {
        let (phenotypes, programs) = population(problem, config.population, depth_limit)?;
        let depth = depth_limit.unwrap_or(0);
        let cases = problem.cases().len();
        let name = problem.name().to_owned();
        if evaluators.as_ref().is_none_or(|(n, _)| *n != name) {
            drop(evaluators.take()); // free the last problem's cases first
            let fitness = compile_kernel(farm, gpu::fitness_source(problem)?, "fitness.cu", &options)?;
            let mut all = Vec::new();
            for (k, &x) in tunings.iter().enumerate() {
                let kernels = Kernels {
                    fitness: (k == 0).then(|| fitness.clone()),
                    interpreter: Some(compile_kernel(
                        farm,
                        interpreter::interpreter_source_with(problem, x)?,
                        "interp.cu",
                        &options,
                    )?),
                    fit: Vec::new(),
                };
                all.push(GpuEvaluator::with_kernels(problem, &kernels)?);
            }
            evaluators = Some((name.clone(), all));
        }
        let (first, others) = evaluators.as_mut().expect("made above").1.split_at_mut(1);
        let gpu = &mut first[0];
        let n = programs.len();
        let row = |route: &str, compile_ms: f64, load_ms: f64, eval_ms: f64, ops: f64| BreakEvenRow {
            problem: name.clone(),
            cases,
            depth,
            programs: n,
            mean_ops: ops,
            loop_count,
            route: route.to_owned(),
            compile_ms,
            load_ms,
            eval_ms,
            generation_ms: compile_ms + load_ms + eval_ms,
            ops_per_s: ops * loop_count.max(1) as f64 * n as f64 * cases as f64 / (eval_ms / 1000.0),
        };
        let mut keep = |r: BreakEvenRow, progress: &mut dyn FnMut(&str)| {
            progress(&format!(
                "{} cases {} depth {} loops {} ({} programs, {:.1} ops): {} compile {:.2} load {:.2} eval {:.3} ms ({:.3e} ops/s)",
                r.problem,
                r.cases,
                r.depth,
                r.loop_count,
                r.programs,
                r.mean_ops,
                r.route,
                r.compile_ms,
                r.load_ms,
                r.eval_ms,
                r.ops_per_s
            ));
            rows.push(r);
        };
        // The interpreter.
        let t = Instant::now();
        let codes: Vec<_> =
            programs.iter().map(|p| interpreter::assemble(problem, p)).collect::<Result<_, _>>()?;
        let packed = PackedPopulation::new(&codes);
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        let ops = packed.ops() as f64 / n.max(1) as f64;
        let wire = packed.into_wire(problem.max_steps());
        let mut times = Vec::new();
        let mut interpreted = Vec::new();
        for _ in 0..=config.repeats {
            let t = Instant::now();
            interpreted = gpu.interpret(&wire)?.fitness;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.remove(0); // the first launch loads the module's code on the device
        let by_text: HashMap<&str, Option<f64>> =
            phenotypes.iter().map(Phenotype::as_str).zip(interpreted.iter().copied()).collect();
        keep(row("interpreter", compile_ms, 0.0, median(times), ops), &mut progress);
        for (other, &x) in others.iter_mut().zip(&tunings[1..]) {
            let mut times = Vec::new();
            for _ in 0..=config.repeats {
                let t = Instant::now();
                let fitness = other.interpret(&wire)?.fitness;
                times.push(t.elapsed().as_secs_f64() * 1e3);
                let differ = fitness.iter().zip(&interpreted).filter(|(a, b)| !same(a, b)).count();
                if differ > 0 {
                    progress(&format!(
                        "{name}: {differ} of {n} programs differ between tunings {x} and {}",
                        tunings[0]
                    ));
                }
            }
            times.remove(0);
            keep(row(&format!("interpreter-x{x}"), compile_ms, 0.0, median(times), ops), &mut progress);
        }
        // The compile routes, on the engine's units.
        for route in [Route::Ptx, Route::Nvrtc] {
            let compiled = Compiled::new(farm, problem, &phenotypes, route, config.arch, &options, None)?;
            let (ordered, compile_ms) = (&compiled.ordered, compiled.compile_ms);
            let views = compiled.views();
            let (mut loads, mut evals) = (Vec::new(), Vec::new());
            for k in 0..=config.repeats {
                let out = gpu.evaluate(&views, n)?;
                if k == 0 {
                    // Same fitness as the interpreter's, bit for bit, or the comparison is void.
                    let differ = out
                        .fitness
                        .iter()
                        .zip(ordered)
                        .filter(|(a, p)| match (a, by_text.get(p.as_str())) {
                            (Some(a), Some(Some(b))) => {
                                a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan())
                            }
                            _ => false,
                        })
                        .count();
                    if differ > 0 {
                        progress(&format!(
                            "{name}: {differ} of {n} programs differ between {route} and the interpreter"
                        ));
                    }
                    continue;
                }
                loads.push(out.load.as_secs_f64() * 1e3);
                evals.push((out.launch + out.readback).as_secs_f64() * 1e3);
            }
            keep(row(route.as_str(), compile_ms, median(loads), median(evals), ops), &mut progress);
        }
        // The CPU evaluator.
        if cases <= config.cpu_max_cases
            && (cases as u64).saturating_mul(loop_count) <= config.cpu_max_cases as u64 * 1000
        {
            let mut times = Vec::new();
            for _ in 0..config.repeats.clamp(1, 3) {
                let t = Instant::now();
                evaluate_all(problem, &phenotypes, threads);
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            keep(row("cpu", 0.0, 0.0, median(times), ops), &mut progress);
        }
    }
    Ok(rows)
}

/// Writes `rows` as CSV.
pub fn write_csv(rows: &[BreakEvenRow], path: &Path) -> Result<()> {
    crate::shared::write_rows(rows, path)
}

/// Reads rows written by [`write_csv`].
pub fn read_csv(path: &Path) -> Result<Vec<BreakEvenRow>> {
    crate::shared::read_rows(path)
}

/// The evaluations `k` of one population after which `a` (compiled) costs less than `b`
/// (interpreted): `a.compile + a.load + k a.eval < b.compile + k b.eval`; `None` if never.
pub fn break_even_evaluations(a: &BreakEvenRow, b: &BreakEvenRow) -> Option<f64> {
    let gain = b.eval_ms - a.eval_ms;
    (gain > 0.0).then(|| ((a.compile_ms + a.load_ms - b.compile_ms) / gain).max(1.0))
}

/// A markdown table: one line per workload, each route's generation time, the fastest route,
/// and the evaluations of the same population after which the best compile route overtakes
/// the interpreter.
pub fn table(rows: &[BreakEvenRow], heading: &str) -> String {
    let mut s = format!(
        "{heading}\n\n| problem | cases | depth | programs | mean ops | interpreter ms | ptx ms | nvrtc ms | cpu ms | fastest | interpreter ops/s | compiled wins after k evaluations |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n"
    );
    let mut keys: Vec<(String, usize, u32)> =
        rows.iter().map(|r| (r.problem.clone(), r.cases, r.depth)).collect();
    keys.dedup();
    for (p, c, d) in keys {
        let of = |route: &str| {
            rows.iter().find(|r| r.problem == p && r.cases == c && r.depth == d && r.route == route)
        };
        let cell = |route: &str| of(route).map_or("-".into(), |r| format!("{:.2}", r.generation_ms));
        let Some(i) = of("interpreter") else { continue };
        let fastest = ["interpreter", "ptx", "nvrtc", "cpu"]
            .iter()
            .filter_map(|r| of(r))
            .min_by(|a, b| a.generation_ms.total_cmp(&b.generation_ms))
            .map_or("-".into(), |r| r.route.clone());
        let k = ["ptx", "nvrtc"]
            .iter()
            .filter_map(|r| of(r).and_then(|a| break_even_evaluations(a, i)))
            .min_by(f64::total_cmp)
            .map_or("never".into(), |k| format!("{k:.0}"));
        s.push_str(&format!(
            "| {p} | {c} | {d} | {} | {:.1} | {} | {} | {} | {} | {fastest} | {:.2e} | {k} |\n",
            i.programs,
            i.mean_ops,
            cell("interpreter"),
            cell("ptx"),
            cell("nvrtc"),
            cell("cpu"),
            i.ops_per_s
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_workload_runs_its_loop_the_count_times_on_the_cpu() {
        let problem = loops(8, 100).unwrap();
        assert_eq!(problem.max_steps(), 101);
        let (phenotypes, programs) = population(&problem, 20, Some(4)).unwrap();
        assert!(!programs.is_empty());
        for (p, program) in phenotypes.iter().zip(&programs) {
            assert!(p.as_str().starts_with("while(i < 100){acc = acc + "), "{p}");
            // 101 tests of the condition: exactly the limit, never past it.
            assert!(program.run(&problem).is_ok(), "{p}");
            assert!(program.run_with_limit(&problem, 100).is_err(), "{p}");
        }
        gpfarm_gp::problem::compare_with_standard(problem.template(), problem.spec()).unwrap();
    }
}
