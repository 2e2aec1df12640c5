//! `gpfarm evolve`: grammatical GP where every generation is compiled by the farm and evaluated.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use gpfarm_client::{Compiler, FailureKind, UnitOutcome};
use gpfarm_gp::{Evolution, EvolutionConfig, Fitness, Phenotype, Problem, evaluate_all};
use gpfarm_kernels::gpu::{self, CompiledUnit};
use gpfarm_kernels::worker::{GpuWorker, ProblemRef};
use gpfarm_kernels::{Layout, RenderedUnit, render_single, render_units};
use gpfarm_protocol::{CompileMode, CompileOptions, SmArch, Unit};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::compilers::{self, FarmSource, Kind};

/// Where fitness is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalMode {
    /// The GPU if there is one, else the CPU.
    Auto,
    /// The CPU reference evaluator.
    Cpu,
    /// The GPU (an error without one).
    Gpu,
}

impl FromStr for EvalMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(EvalMode::Auto),
            "cpu" => Ok(EvalMode::Cpu),
            "gpu" => Ok(EvalMode::Gpu),
            _ => Err(format!("unknown evaluator {s:?}: use auto, cpu or gpu")),
        }
    }
}

/// Arguments of `gpfarm evolve`.
#[derive(Debug, Args)]
pub struct EvolveArgs {
    /// Built-in problem: search, keijzer6 or multiplier5.
    #[arg(long, default_value = "keijzer6", conflicts_with = "problem_dir")]
    problem: String,
    /// A problem directory (problem.toml, grammar.bnf, cases.json, template.cu) instead.
    #[arg(long)]
    problem_dir: Option<PathBuf>,
    /// Individuals per generation.
    #[arg(long, default_value_t = 300)]
    population: usize,
    /// Generations bred after the initial one.
    #[arg(long, default_value_t = 30)]
    generations: usize,
    /// Compile daemons (or threads); default: one per core.
    #[arg(long, short = 'n')]
    daemons: Option<usize>,
    /// Compiler: farm, inprocess, threads or nvcc.
    #[arg(long, default_value = "farm")]
    compiler: Kind,
    /// Skip compilation (CPU evaluation only; for quick experiments with the GP engine).
    #[arg(long)]
    no_compile: bool,
    /// Individuals per translation unit (default: each generation's new individuals split into
    /// units of at most 10, the size the benchmark uses, in a whole number of rounds of units
    /// over the daemons, so that every daemon gets the same share).
    #[arg(long)]
    per_unit: Option<usize>,
    /// Evaluator: auto (GPU if present, else CPU), cpu or gpu.
    #[arg(long, default_value = "auto")]
    eval: EvalMode,
    /// Target architecture for the CUBIN (default: the GPU's when evaluating on it, else sm_90).
    #[arg(long)]
    arch: Option<SmArch>,
    /// Extra NVRTC option (repeatable).
    #[arg(long = "flag", allow_hyphen_values = true)]
    flags: Vec<String>,
    /// Seed: the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Tournament size.
    #[arg(long, default_value_t = 3)]
    tournament: usize,
    /// Elite individuals kept unchanged.
    #[arg(long, default_value_t = 1)]
    elite: usize,
    /// Compile and evaluate every distinct phenotype of every generation, even ones whose
    /// fitness is known from an earlier generation (for measuring; results are the same).
    #[arg(long)]
    no_reuse: bool,
    /// Print one JSON record per generation (and a final summary record) instead of a table.
    #[arg(long)]
    json: bool,
    /// Seconds a daemon may spend on one unit before it is killed and replaced, and the unit
    /// retried once (farm only).
    #[arg(long, default_value_t = gpfarm_client::DEFAULT_UNIT_DEADLINE.as_secs())]
    deadline: u64,
}

/// Individuals per unit for `n` individuals on `workers` daemons: at most [`MAX_PER_UNIT`], and
/// as even as can be. The farm hands out whole units, so 200 individuals in units of 10 on 16
/// daemons would leave four daemons with two units and the call as slow as 320 individuals;
/// units of 7 give every daemon 12 to 14.
fn units_of(n: usize, workers: usize) -> usize {
    let workers = workers.max(1);
    let rounds = n.div_ceil(workers * MAX_PER_UNIT).max(1);
    n.div_ceil(workers * rounds).clamp(1, MAX_PER_UNIT)
}

/// The unit size the benchmark found best (benches/results).
const MAX_PER_UNIT: usize = 10;

/// Fitness of phenotypes evaluated in earlier generations, so elites and re-created individuals
/// are not compiled and evaluated again. Within one run the problem, compile options, target
/// and NVRTC are fixed, so the phenotype is the whole key; evaluation is deterministic, so a
/// reused value is the value a recomputation gives. Bounded: past [`MEMO_CAPACITY`] entries,
/// those not seen in the last [`MEMO_KEEP_GENERATIONS`] generations are dropped.
#[derive(Default)]
struct FitnessMemo {
    entries: HashMap<Phenotype, (Fitness, usize)>,
}

const MEMO_CAPACITY: usize = 200_000;
const MEMO_KEEP_GENERATIONS: usize = 5;

impl FitnessMemo {
    fn get(&mut self, p: &Phenotype, generation: usize) -> Option<Fitness> {
        let (f, seen) = self.entries.get_mut(p)?;
        *seen = generation;
        Some(*f)
    }

    fn insert(&mut self, p: Phenotype, f: Fitness, generation: usize) {
        self.entries.insert(p, (f, generation));
        if self.entries.len() > MEMO_CAPACITY {
            self.entries.retain(|_, (_, seen)| *seen + MEMO_KEEP_GENERATIONS > generation);
            if self.entries.len() > MEMO_CAPACITY {
                self.entries.clear();
            }
        }
    }
}

/// Compile figures of one generation.
#[derive(Debug, Default, Serialize)]
struct CompileFigures {
    units: usize,
    individuals: usize,
    wall_ms: f64,
    ms_per_individual: f64,
    nvrtc_compile_ms: f64,
    extract_ms: f64,
    jit_ms: f64,
    failed_individuals: usize,
    isolation_units: usize,
}

/// Where GPU evaluation time went (zero on the CPU).
#[derive(Debug, Default, Serialize)]
struct EvalSplit {
    load_ms: f64,
    launch_ms: f64,
    readback_ms: f64,
    faults: usize,
    /// GPU workers replaced over the run so far (one per faulting individual, and one more per
    /// generation that faulted).
    gpu_worker_restarts: usize,
    /// Set when a kernel fault made the GPU unusable and this generation was evaluated on the CPU.
    fell_back_to_cpu: Option<String>,
}

/// One generation's record (`--json`).
#[derive(Debug, Serialize)]
struct GenerationRecord {
    generation: usize,
    best: f64,
    mean: Option<f64>,
    invalid: usize,
    unique: usize,
    /// Distinct phenotypes whose fitness was known from earlier generations (not recompiled).
    reused: usize,
    compile: CompileFigures,
    eval_ms: f64,
    eval_split: EvalSplit,
    evaluator: &'static str,
    breed_ms: f64,
    best_phenotype: Option<String>,
}

/// Which problem the run is on, for loading it here and in the GPU worker.
fn problem_ref(args: &EvolveArgs) -> ProblemRef {
    match &args.problem_dir {
        Some(dir) => ProblemRef::Dir(dir.clone()),
        None => ProblemRef::Builtin(args.problem.clone()),
    }
}

fn load_problem(args: &EvolveArgs) -> Result<Problem> {
    let problem = problem_ref(args).load();
    Ok(match &args.problem_dir {
        Some(dir) => problem.with_context(|| format!("loading problem {}", dir.display()))?,
        None => problem?,
    })
}

/// A compiled translation unit and the individuals in it.
struct Compiled {
    cubin: Vec<u8>,
    kernels: Vec<String>,
    members: Vec<usize>,
}

/// The outcome of compiling one generation.
struct GenerationBuild {
    /// Per phenotype: why it has no CUBIN, if it has none.
    failures: Vec<Option<String>>,
    /// The CUBINs, with their members.
    compiled: Vec<Compiled>,
    figures: CompileFigures,
}

/// Compiles the units; a unit that fails to compile is split into one unit per individual so
/// that only the individuals at fault fail.
fn compile_generation(
    compiler: &mut dyn Compiler,
    units: Vec<RenderedUnit>,
    n: usize,
    options: &CompileOptions,
    generation: usize,
    template: &gpfarm_gp::Template,
    phenotypes: &[Phenotype],
) -> Result<GenerationBuild> {
    let start = Instant::now();
    let wire: Vec<Unit> = units.iter().map(|u| Unit::new(u.name.clone(), u.source.clone())).collect();
    let batch = compiler.compile(&wire, options)?;
    let mut figures = CompileFigures { units: units.len(), individuals: n, ..Default::default() };
    let add = |t: &gpfarm_protocol::UnitTimings, f: &mut CompileFigures| {
        f.nvrtc_compile_ms += t.compile_us as f64 / 1000.0;
        f.extract_ms += t.extract_us as f64 / 1000.0;
        f.jit_ms += t.jit_us as f64 / 1000.0;
    };
    let mut failure: Vec<Option<String>> = vec![None; n];
    let mut compiled = Vec::with_capacity(units.len());
    let mut suspects = Vec::new();
    for (unit, r) in units.into_iter().zip(batch.results) {
        add(&r.timings, &mut figures);
        match r.outcome {
            UnitOutcome::Cubin(cubin) => {
                compiled.push(Compiled { cubin, kernels: unit.kernels, members: unit.members })
            }
            UnitOutcome::Failed(f) => {
                if unit.members.len() > 1 || f.kind == FailureKind::Lost {
                    suspects.extend(unit.members.iter().copied());
                } else {
                    for &m in &unit.members {
                        failure[m] = Some(format!("{f}\n{}", r.log));
                    }
                }
            }
        }
    }
    if !suspects.is_empty() {
        let singles: Vec<RenderedUnit> =
            suspects.iter().map(|&i| render_single(template, &phenotypes[i], generation, i)).collect();
        let wire: Vec<Unit> = singles.iter().map(|u| Unit::new(u.name.clone(), u.source.clone())).collect();
        figures.isolation_units = wire.len();
        let again = compiler.compile(&wire, options)?;
        for (unit, r) in singles.into_iter().zip(again.results) {
            add(&r.timings, &mut figures);
            match r.outcome {
                UnitOutcome::Cubin(cubin) => {
                    compiled.push(Compiled { cubin, kernels: unit.kernels, members: unit.members })
                }
                UnitOutcome::Failed(f) => failure[unit.members[0]] = Some(format!("{f}\n{}", r.log)),
            }
        }
    }
    figures.failed_individuals = failure.iter().filter(|f| f.is_some()).count();
    figures.wall_ms = start.elapsed().as_secs_f64() * 1000.0;
    figures.ms_per_individual = figures.wall_ms / n.max(1) as f64;
    Ok(GenerationBuild { failures: failure, compiled, figures })
}

/// The evaluator a run uses.
enum Evaluator {
    Cpu,
    Gpu(Box<GpuWorker>),
}

/// Chooses the evaluator (and so the target architecture) before anything is compiled.
fn choose_evaluator(mode: EvalMode, no_compile: bool) -> Result<Option<(String, SmArch)>> {
    if mode == EvalMode::Cpu {
        return Ok(None);
    }
    match gpu::probe() {
        Ok((name, (major, minor))) if !no_compile => Ok(Some((name, SmArch((major * 10 + minor) as u32)))),
        Ok(_) if mode == EvalMode::Gpu => bail!("--eval gpu needs compiled individuals: drop --no-compile"),
        Ok(_) => Ok(None),
        Err(e) if mode == EvalMode::Gpu => bail!("--eval gpu: {e}"),
        Err(e) => {
            eprintln!("note: {e}; evaluating on the CPU (the reference evaluator)");
            Ok(None)
        }
    }
}

/// A fitness value for a table column: fixed point when readable, scientific otherwise.
fn number(v: f64) -> String {
    if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-4) { format!("{v:.4e}") } else { format!("{v:.6}") }
}

/// Runs `gpfarm evolve`.
pub fn run(args: EvolveArgs, cuda: Option<&Path>) -> Result<()> {
    let problem = load_problem(&args)?;
    let gpu_choice = choose_evaluator(args.eval, args.no_compile)?;
    let arch = args.arch.or(gpu_choice.as_ref().map(|g| g.1)).unwrap_or(SmArch::SM_90);
    let mut evaluator_name = if gpu_choice.is_some() { "gpu" } else { "cpu" };
    let config = EvolutionConfig {
        population: args.population,
        generations: args.generations,
        tournament: args.tournament,
        elite: args.elite,
        seed: args.seed,
        ..EvolutionConfig::default()
    };
    let mut evo = Evolution::new(&problem, config)?;
    let workers = args.daemons.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let options = CompileOptions { arch, mode: CompileMode::Cubin, flags: args.flags.clone() };
    let mut compiler = if args.no_compile {
        None
    } else {
        let source = FarmSource { attach: None, deadline_s: Some(args.deadline) };
        Some(compilers::build(args.compiler, workers, cuda, &options, &source)?)
    };
    let mut evaluator = match (&gpu_choice, compiler.as_deref_mut()) {
        (Some(_), Some(c)) => {
            let source = gpu::fitness_source(&problem)?;
            let batch = c.compile(&[Unit::new("gpfarm_fitness.cu", source)], &options)?;
            let result = batch.results.into_iter().next().context("no result for the fitness kernel")?;
            let cubin = match result.outcome {
                UnitOutcome::Cubin(c) => c,
                UnitOutcome::Failed(f) => bail!("the fitness kernel did not compile: {f}\n{}", result.log),
            };
            let exe = std::env::current_exe().context("locating this executable for the GPU worker")?;
            Evaluator::Gpu(Box::new(GpuWorker::spawn(&exe, problem_ref(&args), cubin)?))
        }
        _ => Evaluator::Cpu,
    };
    let eval_threads = NonZeroUsize::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
        .unwrap_or(NonZeroUsize::MIN);

    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(args.generations as u64 + 1);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} generations, {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    };
    if !args.json {
        bar.suspend(|| {
            println!(
                "{} on {}: population {}, {} generations, seed {}, evaluator {}, {arch}",
                problem.name(),
                compiler.as_ref().map_or("no compiler".to_string(), |c| c.name()),
                args.population,
                args.generations,
                args.seed,
                match &evaluator {
                    Evaluator::Gpu(g) => format!("gpu ({})", g.name),
                    Evaluator::Cpu => "cpu".into(),
                }
            )
        });
        bar.suspend(|| {
            println!(
                "{:>4} {:>12} {:>12} {:>7} {:>6} {:>6} {:>9} {:>10} {:>9} {:>8}",
                "gen",
                "best",
                "mean",
                "invalid",
                "uniq",
                "reused",
                "comp ms",
                "ms/indiv",
                "nvrtc ms",
                "eval ms"
            )
        });
    }
    let mut memo = (!args.no_reuse).then(FitnessMemo::default);
    let run_start = Instant::now();
    let mut total_compile_ms = 0.0;
    let mut total_eval_ms = 0.0;
    for generation in 0..=args.generations {
        let dedup = evo.dedup();
        // Phenotypes evaluated before keep their fitness; only the new ones are compiled and
        // evaluated (`fresh`, with `n` members).
        let known: Vec<Option<Fitness>> =
            dedup.unique.iter().map(|p| memo.as_mut().and_then(|m| m.get(p, generation))).collect();
        let fresh: Vec<Phenotype> =
            dedup.unique.iter().zip(&known).filter(|(_, k)| k.is_none()).map(|(p, _)| p.clone()).collect();
        let n = fresh.len();
        let build = match compiler.as_deref_mut() {
            Some(c) => {
                let layout = Layout::PerUnit(args.per_unit.unwrap_or_else(|| units_of(n, workers)));
                let units = render_units(problem.template(), &fresh, generation, layout);
                compile_generation(c, units, n, &options, generation, problem.template(), &fresh)?
            }
            None => GenerationBuild {
                failures: vec![None; n],
                compiled: Vec::new(),
                figures: CompileFigures::default(),
            },
        };
        let eval_start = Instant::now();
        let worst = Fitness::worst(problem.direction());
        let mut faulted = vec![false; n];
        let mut split = EvalSplit::default();
        let cpu_fitness = |failures: &[Option<String>]| -> Vec<Fitness> {
            evaluate_all(&problem, &fresh, eval_threads)
                .iter()
                .zip(failures)
                .map(|(e, failed)| if failed.is_some() { worst } else { e.fitness })
                .collect()
        };
        let gpu_result = match &mut evaluator {
            Evaluator::Cpu => None,
            Evaluator::Gpu(g) => {
                let units: Vec<CompiledUnit<'_>> = build
                    .compiled
                    .iter()
                    .map(|c| CompiledUnit { cubin: &c.cubin, kernels: &c.kernels, members: &c.members })
                    .collect();
                Some(g.evaluate(&units, n))
            }
        };
        let unique_fitness: Vec<Fitness> = match gpu_result {
            None => cpu_fitness(&build.failures),
            Some(Ok(out)) => {
                split = EvalSplit {
                    load_ms: out.load.as_secs_f64() * 1000.0,
                    launch_ms: out.launch.as_secs_f64() * 1000.0,
                    readback_ms: out.readback.as_secs_f64() * 1000.0,
                    faults: out.faults.len(),
                    gpu_worker_restarts: match &evaluator {
                        Evaluator::Gpu(g) => g.restarts,
                        Evaluator::Cpu => 0,
                    },
                    fell_back_to_cpu: None,
                };
                for (i, why) in &out.faults {
                    tracing::warn!("individual {i} of generation {generation} failed on the GPU: {why}");
                    faulted[*i] = true;
                }
                out.fitness
                    .iter()
                    .map(|v| match v {
                        Some(v) if v.is_finite() => Fitness::new(*v, problem.direction()),
                        _ => worst,
                    })
                    .collect()
            }
            Some(Err(gpu::GpuError::Fault(why))) => {
                eprintln!(
                    "warning: generation {generation}: the GPU faulted and the fault could not be pinned \
                     on one individual ({why}); falling back to the CPU evaluator for the rest of the run"
                );
                evaluator = Evaluator::Cpu;
                evaluator_name = "cpu";
                split.fell_back_to_cpu = Some(why);
                cpu_fitness(&build.failures)
            }
            Some(Err(e)) => return Err(e.into()),
        };
        let eval_ms = eval_start.elapsed().as_secs_f64() * 1000.0;
        let figures = build.figures;
        // Remember what was computed without a failure, then put the generation back together.
        if let Some(m) = memo.as_mut() {
            for (j, (p, f)) in fresh.into_iter().zip(&unique_fitness).enumerate() {
                if build.failures[j].is_none() && !faulted[j] {
                    m.insert(p, *f, generation);
                }
            }
        }
        let mut computed = unique_fitness.into_iter();
        let unique_fitness: Vec<Fitness> = known
            .iter()
            .map(|k| k.or_else(|| computed.next()).expect("one fitness per new phenotype"))
            .collect();
        let reused = known.iter().filter(|k| k.is_some()).count();
        let fitness = dedup.expand(&unique_fitness, problem.direction())?;
        evo.set_fitness(fitness)?;
        let stats = evo.stats()?;
        total_compile_ms += figures.wall_ms;
        total_eval_ms += eval_ms;
        let breed_start = Instant::now();
        if generation < args.generations {
            evo.breed()?;
        }
        let record = GenerationRecord {
            generation,
            best: stats.best.value(),
            mean: stats.mean,
            invalid: stats.invalid,
            unique: known.len(),
            reused,
            compile: figures,
            eval_ms,
            eval_split: split,
            evaluator: evaluator_name,
            breed_ms: breed_start.elapsed().as_secs_f64() * 1000.0,
            best_phenotype: stats.best_phenotype.as_ref().map(|p| p.as_str().to_owned()),
        };
        if args.json {
            println!("{}", serde_json::to_string(&record)?);
        } else {
            bar.suspend(|| {
                println!(
                    "{:>4} {:>12} {:>12} {:>7} {:>6} {:>6} {:>9.1} {:>10.3} {:>9.1} {:>8.1}",
                    generation,
                    number(record.best),
                    record.mean.map_or("-".into(), number),
                    record.invalid,
                    record.unique,
                    record.reused,
                    record.compile.wall_ms,
                    record.compile.ms_per_individual,
                    record.compile.nvrtc_compile_ms,
                    record.eval_ms
                )
            });
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (best, fitness) = evo.best_ever().context("no individual was evaluated")?;
    let phenotype = best.phenotype().map_or("<invalid>".to_string(), |p| p.as_str().to_owned());
    let summary = serde_json::json!({
        "summary": true,
        "problem": problem.name(),
        "generations": args.generations,
        "population": args.population,
        "seed": args.seed,
        "best_fitness": fitness.value(),
        "best_phenotype": phenotype,
        "wall_s": run_start.elapsed().as_secs_f64(),
        "compile_s": total_compile_ms / 1000.0,
        "eval_s": total_eval_ms / 1000.0,
    });
    if args.json {
        println!("{summary}");
    } else {
        println!(
            "best fitness {} after {} generations ({:.1} s: compile {:.1} s, evaluate {:.1} s)",
            fitness.value(),
            args.generations,
            run_start.elapsed().as_secs_f64(),
            total_compile_ms / 1000.0,
            total_eval_ms / 1000.0
        );
        println!("best individual:\n{phenotype}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::units_of;

    #[test]
    fn units_fill_whole_rounds_of_daemons() {
        for n in 1..700 {
            for workers in [1, 2, 3, 8, 16] {
                let k = units_of(n, workers);
                assert!((1..=10).contains(&k), "n {n} workers {workers}: {k}");
                let units = n.div_ceil(k);
                let rounds = units.div_ceil(workers);
                // No daemon does more individuals than an even split over as few rounds as
                // units of 10 allow, plus one unit of rounding per round.
                let best_rounds = n.div_ceil(workers * 10);
                assert_eq!(rounds, best_rounds, "n {n} workers {workers}: units of {k}");
                assert!(
                    rounds * k <= n.div_ceil(workers) + best_rounds,
                    "n {n} workers {workers}: units of {k}"
                );
            }
        }
        assert_eq!(units_of(200, 16), 7);
        assert_eq!(units_of(300, 16), 10);
        assert_eq!(units_of(160, 16), 10);
    }
}
