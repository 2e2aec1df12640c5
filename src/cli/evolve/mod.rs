//! `gpfarm evolve`: grammatical GP where every generation is compiled by the farm and evaluated.
//! The run loop is in [`driver`], the fitness memo in [`memo`], the per-generation figures in
//! [`report`].

mod driver;
mod memo;
mod report;

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use clap::Args;
use gpfarm_client::{DiskCache, UnitOutcome};
use gpfarm_client::{GpuWorker, ProblemRef};
use gpfarm_gp::{EvolutionConfig, Pipeline, Problem};
use gpfarm_kernels::gpu;
use gpfarm_kernels::worker::LoadProblem;
use gpfarm_protocol::{CompileMode, CompileOptions, SmArch, Unit};
use indicatif::{ProgressBar, ProgressStyle};

use super::compilers::{self, FarmSource, Kind};
use driver::{Driver, Evaluator, Settings};
use report::GenerationRecord;

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
    /// Individuals per translation unit (default: chunks guided by each individual's estimated
    /// compile cost, heaviest first, shrinking towards the end of a generation so that every
    /// daemon finishes at about the same time).
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
    /// Compile and evaluate every individual of every generation: no reuse of fitness known from
    /// earlier generations, no merging of identical individuals, no disk cache (for measuring;
    /// the results are the same).
    #[arg(long, alias = "no-reuse", conflicts_with_all = ["disk_cache", "cache_dir"])]
    no_cache: bool,
    /// Do not overlap: compile each generation as a whole, then evaluate it, then breed the next
    /// (for measuring; the results are the same). By default each unit is evaluated as soon as it
    /// is compiled, and the next generation's pairs are bred and compiled as soon as their
    /// parents are evaluated.
    #[arg(long)]
    no_overlap: bool,
    /// Keep compiled CUBIN on disk and use it in later runs (in $GPFARM_CACHE_DIR,
    /// $XDG_CACHE_HOME/gpfarm or ~/.cache/gpfarm).
    #[arg(long)]
    disk_cache: bool,
    /// The disk cache's directory (implies --disk-cache).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Write one JSON line per compiled unit to this file: generation, individuals, estimated
    /// compile weight, and when it was queued, started and ended.
    #[arg(long)]
    trace_units: Option<PathBuf>,
    /// Print one JSON record per generation (and a final summary record) instead of a table.
    #[arg(long)]
    json: bool,
    /// Seconds a daemon may spend on one unit before it is killed and replaced, and the unit
    /// retried once (farm only).
    #[arg(long, default_value_t = gpfarm_client::DEFAULT_UNIT_DEADLINE.as_secs())]
    deadline: u64,
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

/// Opens the disk cache the arguments ask for, if any.
fn open_disk_cache(args: &EvolveArgs) -> Result<Option<DiskCache>> {
    let dir = match (&args.cache_dir, args.disk_cache) {
        (Some(dir), _) => dir.clone(),
        (None, true) => DiskCache::default_dir()
            .context("no cache directory: set GPFARM_CACHE_DIR or HOME, or give --cache-dir")?,
        (None, false) => return Ok(None),
    };
    let cache = DiskCache::open(&dir, gpfarm_client::cache::DEFAULT_CACHE_LIMIT)
        .with_context(|| format!("opening the disk cache in {}", dir.display()))?;
    Ok(Some(cache))
}

/// Runs `gpfarm evolve`.
pub fn run(args: EvolveArgs, cuda: Option<&Path>) -> Result<()> {
    let problem = load_problem(&args)?;
    let gpu_choice = choose_evaluator(args.eval, args.no_compile)?;
    let arch = args.arch.or(gpu_choice.as_ref().map(|g| g.1)).unwrap_or(SmArch::SM_90);
    let config = EvolutionConfig {
        population: args.population,
        generations: args.generations,
        tournament: args.tournament,
        elite: args.elite,
        seed: args.seed,
        ..EvolutionConfig::default()
    };
    let depth = if args.no_overlap { NonZeroUsize::MIN } else { NonZeroUsize::new(2).expect("2 > 0") };
    let pipeline = Pipeline::new(&problem, config, depth)?;
    let workers = args.daemons.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let options = CompileOptions { arch, mode: CompileMode::Cubin, flags: args.flags.clone() };
    let disk = if args.no_compile { None } else { open_disk_cache(&args)? };
    let mut compiler = if args.no_compile {
        None
    } else {
        let source = FarmSource { attach: None, deadline_s: Some(args.deadline) };
        Some(compilers::build(args.compiler, workers, cuda, &options, &source)?)
    };
    let evaluator = match (&gpu_choice, compiler.as_deref_mut()) {
        (Some(_), Some(c)) => {
            let source = gpu::fitness_source(&problem)?;
            let batch = c.compile(&[Unit::new("gpfarm_fitness.cu", source)], &options)?;
            let result = batch.results.into_iter().next().context("no result for the fitness kernel")?;
            let cubin = match result.outcome {
                UnitOutcome::Cubin(c) => c,
                UnitOutcome::Failed(f) => bail!("the fitness kernel did not compile: {f}\n{}", result.log),
            };
            Evaluator::Gpu(Box::new(GpuWorker::spawn_located(problem_ref(&args), cubin)?))
        }
        _ => Evaluator::Cpu,
    };
    let settings = Settings {
        cache: !args.no_cache,
        overlap: !args.no_overlap,
        per_unit: args.per_unit,
        workers: compiler.as_ref().map_or(workers, |c| c.workers()),
    };
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
                "{} on {}: population {}, {} generations, seed {}, evaluator {}, {arch}{}{}{}",
                problem.name(),
                compiler.as_ref().map_or("no compiler".to_string(), |c| c.name()),
                args.population,
                args.generations,
                args.seed,
                match &evaluator {
                    Evaluator::Gpu(g) => format!("gpu ({})", g.name),
                    Evaluator::Cpu => "cpu".into(),
                },
                if args.no_cache { ", no cache" } else { "" },
                if args.no_overlap { ", no overlap" } else { "" },
                disk.as_ref().map_or(String::new(), |d| format!(", disk cache {}", d.dir().display())),
            );
            println!(
                "{:>4} {:>12} {:>12} {:>7} {:>6} {:>6} {:>6} {:>9} {:>10} {:>9} {:>8}",
                "gen",
                "best",
                "mean",
                "invalid",
                "uniq",
                "new",
                "hits",
                "gen ms",
                "compile s",
                "crit ms",
                "eval ms"
            );
        });
    }
    let toolchain = compiler.as_ref().map_or_else(|| "none".into(), |c| c.toolchain());
    let mut driver = Driver::new(&problem, &options, toolchain, settings, pipeline, disk, evaluator);
    if let Some(path) = &args.trace_units {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        driver.trace_units(file);
    }
    let json = args.json;
    let print = |r: GenerationRecord| -> Result<()> {
        if json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            bar.suspend(|| {
                println!(
                    "{:>4} {:>12} {:>12} {:>7} {:>6} {:>6} {:>6} {:>9.1} {:>10.2} {:>9.1} {:>8.1}",
                    r.generation,
                    number(r.best),
                    r.mean.map_or("-".into(), number),
                    r.invalid,
                    r.unique,
                    r.individuals.compiled,
                    r.individuals.reused + r.individuals.duplicates + r.individuals.disk_hits,
                    r.generation_ms,
                    r.compile.busy_ms / 1000.0,
                    r.critical_path.compile_ms,
                    r.eval_ms
                )
            });
        }
        bar.inc(1);
        Ok(())
    };
    let (totals, pipeline) = driver.run(compiler.as_deref_mut(), print)?;
    bar.finish_and_clear();
    let (best, fitness) = pipeline.best_ever().context("no individual was evaluated")?;
    let phenotype = best.phenotype().map_or("<invalid>".to_string(), |p| p.as_str().to_owned());
    let generations = args.generations + 1;
    let summary = serde_json::json!({
        "summary": true,
        "problem": problem.name(),
        "generations": args.generations,
        "population": args.population,
        "seed": args.seed,
        "cache": !args.no_cache,
        "overlap": !args.no_overlap,
        "best_fitness": fitness.value(),
        "best_phenotype": phenotype,
        "mean_generation_ms": totals.wall_s * 1000.0 / generations as f64,
        "totals": totals,
    });
    if json {
        println!("{summary}");
    } else {
        println!(
            "best fitness {} after {} generations: {:.1} s, {:.0} ms per generation; {} of {} individuals \
             compiled ({} reused, {} merged, {} from disk), {:.1} s of compile time, {:.2} s evaluating",
            fitness.value(),
            args.generations,
            totals.wall_s,
            totals.wall_s * 1000.0 / generations as f64,
            totals.compiled,
            totals.individuals_evaluated,
            totals.reused,
            totals.duplicates,
            totals.disk_hits,
            totals.compile_busy_s,
            totals.eval_s,
        );
        println!("best individual:\n{phenotype}");
    }
    Ok(())
}
