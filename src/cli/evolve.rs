//! `gpfarm evolve`: turns the flags into [`gpfarm_evolve::Options`] and a
//! [`CompilerRequest`], has the engine's planner ([`gpfarm_evolve::plan`]) build what the run
//! needs, and prints what the engine reports. Must never hold generation logic or decide which
//! compilers a run gets: that is the `gpfarm-evolve` library's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use gpfarm_client::{BuildConfig, DiskCache, Workers};
use gpfarm_evolve::plan::{self, CompilerRequest, Compilers, IslandFarm};
use gpfarm_evolve::{Engine, EvalMode, EvolveError, Options, ProblemRef, Route, Summary};
use gpfarm_gp::{EvolutionConfig, FitConfig};
use gpfarm_protocol::{FarmName, SmArch};
use indicatif::{ProgressBar, ProgressStyle};

use gpfarm_client::CompilerSpec;

pub(crate) use table::row;
use table::{footer, header};

mod table;

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
    #[arg(long, default_value_t = 300, value_parser = crate::cli::count::<{ gpfarm_gp::limits::MAX_POPULATION }>)]
    pub(super) population: usize,
    /// Generations bred after the initial one.
    #[arg(long, default_value_t = 30, value_parser = crate::cli::count::<1_000_000_000>)]
    pub(super) generations: usize,
    /// Compile daemons (or threads); default: one per core.
    #[arg(long, short = 'n', value_parser = crate::cli::count::<4096>)]
    pub(super) daemons: Option<usize>,
    /// Compiler: farm[:K], threads[:K], inprocess or nvcc (K daemons or threads; default: -n,
    /// else one per core).
    #[arg(long, default_value = "farm")]
    compiler: CompilerSpec,
    /// Compile on daemons started by `gpfarm daemons start` instead of spawning new ones (they
    /// stay up, warm, for the next run).
    #[arg(long, conflicts_with = "no_compile")]
    attach: bool,
    /// With --attach: the farm's name (default: the only resident farm).
    #[arg(long, requires = "attach")]
    farm: Option<FarmName>,
    /// Compile nothing and evaluate on the CPU: the same as --route cpu (for quick experiments
    /// with the GP engine).
    #[arg(long, conflicts_with = "route")]
    no_compile: bool,
    /// Individuals per translation unit (default: chunks guided by each individual's estimated
    /// compile cost, heaviest first, shrinking towards the end of a generation so that every
    /// daemon finishes at about the same time).
    #[arg(long, value_parser = crate::cli::count::<1_000_000>)]
    per_unit: Option<usize>,
    /// Evaluator: auto (GPU if present, else CPU), cpu or gpu.
    #[arg(long, value_enum, default_value_t = EvalMode::Auto)]
    eval: EvalMode,
    /// Target architecture for the CUBIN (default: the GPU's when evaluating on it, else sm_90).
    #[arg(long)]
    arch: Option<SmArch>,
    /// Extra NVRTC option (repeatable).
    #[arg(long = "flag", allow_hyphen_values = true)]
    flags: Vec<String>,
    /// How individuals get their fitness: nvrtc (CUDA C compiled by NVRTC on the daemons), ptx
    /// (PTX emitted from the phenotype, linked by nvJitLink on the daemons), interpreter
    /// (bytecode run by one GPU kernel for the whole population; no daemons), cpu (the CPU
    /// reference evaluator; nothing compiled), or auto: the interpreter or ptx, by predicted
    /// time, where the problem's template.cu is the standard harness, else nvrtc (nvrtc with
    /// --compiler nvcc); the interpreter becomes cpu without a GPU. ptx and interpreter need the
    /// standard harness. All give the same fitness on the GPU, bit for bit.
    #[arg(long, default_value = "auto", value_parser = Route::parse_choice)]
    route: AutoRoute,
    /// nvJitLink option for the PTX route (repeatable; replaces the default: the level the first
    /// generation calls for, -O3 where programs loop or read free parameters over more than
    /// about 2.2e7 / (parameters per program) cases, else -O0), e.g. --link-flag=-O3.
    #[arg(long = "link-flag", allow_hyphen_values = true)]
    link_flags: Vec<String>,
    /// How a unit holds its individuals: switch (one kernel per unit, switching on the block
    /// row; one launch evaluates the unit) or kernels (one kernel per individual). Default:
    /// switch, or kernels for an NVRTC template that reads blockIdx.y.
    #[arg(long)]
    shape: Option<gpfarm_protocol::Shape>,
    /// Let NVRTC fuse `a * b + c` into one multiply-add (its own default). Without it every
    /// floating-point operation is rounded on its own, as C and the CPU evaluator do.
    #[arg(long)]
    fmad: bool,
    /// Seed: the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Tournament size.
    #[arg(long, default_value_t = 3, value_parser = crate::cli::count::<100_000_000>)]
    tournament: usize,
    /// Elite individuals kept unchanged.
    #[arg(long, default_value_t = 1, value_parser = crate::cli::count::<100_000_000>)]
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
    pub(super) json: bool,
    /// Where the unit of each individual that does not compile is written, for reproducing it
    /// with `gpfarm compile --source FILE` (default: a private folder gpfarm-crashes-XXXXXX made
    /// in the temporary directory on the first failure; kept after the run).
    #[arg(long)]
    crash_dir: Option<PathBuf>,
    /// NVRTC option an individual that crashes NVRTC is compiled again with, once, in a daemon of
    /// its own (repeatable; default: --Ofast-compile=min).
    #[arg(long = "crash-retry-flag", allow_hyphen_values = true, conflicts_with = "no_crash_retry")]
    crash_retry_flags: Vec<String>,
    /// Do not compile individuals that crash NVRTC again: they get the worst fitness.
    #[arg(long)]
    no_crash_retry: bool,
    /// Give an individual that crashes NVRTC the worst fitness on the GPU even when its retry
    /// compiles (the default retry flag gives bit-identical fitness there; other flags may not).
    #[arg(long)]
    no_crash_retry_on_gpu: bool,
    /// Seconds the GPU may take to evaluate a batch (and, while the culprit is sought, one
    /// kernel) before the GPU worker is killed and restarted: a kernel that does not end gets the
    /// worst fitness, with the reason timeout, and the run goes on.
    #[arg(long, value_name = "SECONDS", default_value_t = gpfarm_client::DEFAULT_GPU_DEADLINE.as_secs_f64(), value_parser = positive_seconds)]
    gpu_deadline: f64,
    /// Loop iterations a program may take in one case before it fails with the worst fitness,
    /// on every route (default: the problem's `max_steps`, else 1000000).
    #[arg(long, value_name = "STEPS", value_parser = clap::value_parser!(u64).range(1..))]
    max_steps: Option<u64>,
    /// Levenberg-Marquardt iterations fitting the free parameters (`#param#` in the grammar) of
    /// each individual bred; 0: no fitting (the values are only inherited and mutated).
    #[arg(long, value_name = "N", default_value_t = gpfarm_gp::FitConfig::default().iterations, value_parser = crate::cli::count::<1_000_000>)]
    fit_iterations: usize,
    /// Fits from other starting values beyond the first, keeping the best.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = crate::cli::count::<1_000_000>)]
    fit_restarts: usize,
    /// Share of the individuals bred whose parameters are fitted, in [0, 1].
    #[arg(long, value_name = "SHARE", default_value_t = 1.0, value_parser = probability)]
    fit_share: f64,
    /// Fit on at most this many cases, evenly spaced (0: all), on the GPU and the CPU (on the CPU
    /// beside the GPU at most 4096); the fitness still uses all.
    #[arg(long, value_name = "N", default_value_t = gpfarm_gp::FitConfig::default().cases, value_parser = crate::cli::count::<1_000_000_000_000>)]
    fit_cases: usize,
    /// Which kernels fit free parameters on the GPU: the interpreter's, kernels compiled for
    /// each straight-line program's structure (once per run; on the PTX route its own PTX linked
    /// with a fitting template, elsewhere NVRTC's), or compiled where that pays for itself over
    /// the fit's iterations and cases (auto).
    #[arg(long, value_name = "KERNELS", default_value = "auto")]
    fit_kernels: gpfarm_evolve::route::FitKernels,
    /// Keep fitted values for the individual's own fitness only (Baldwinian); by default
    /// offspring inherit them (Lamarckian).
    #[arg(long)]
    no_lamarck: bool,
    /// Parsimony pressure: tournaments compare error plus this much per node of an
    /// individual's size (0: error alone)
    #[arg(long, value_name = "PER_NODE", default_value_t = 0.0, value_parser = non_negative)]
    parsimony: f64,
    /// How individuals are held and varied: "ge" (grammatical evolution's codons, the paper's
    /// representation) or "tree" (derivation trees of the grammar: subtree crossover and
    /// mutation, no child over --max-size)
    #[arg(long, value_name = "KIND", default_value = "ge")]
    representation: gpfarm_gp::Representation,
    /// Largest size (nodes of a program's syntax tree) an individual may have; larger ones get
    /// the worst fitness without being evaluated, and trees never breed one (0: no limit; 50 is
    /// Operon's default length)
    #[arg(long, value_name = "NODES", default_value_t = 50, value_parser = crate::cli::count::<1_000_000_000>)]
    max_size: usize,
    /// The run's model is the smallest on its size-error front whose error is within this share
    /// of the front's best (0: the best model, the smallest of equals)
    #[arg(long, value_name = "SHARE", default_value_t = 0.0, value_parser = non_negative)]
    select_tolerance: f64,
    /// The run's wall time in seconds, from the command's start: it ends after the generation
    /// closest to the limit (within half a generation); one island only
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    max_time: Option<f64>,
    /// Threads that evaluate and fit on the CPU (default: one per core)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    threads: Option<u64>,
    /// Start the first generation from the size–error front of an earlier run: a file holding
    /// that run's `--json` summary (its last line), on the same problem and grammar
    #[arg(long, value_name = "SUMMARY")]
    start: Option<PathBuf>,
    /// Seconds a daemon may spend on one unit before it is killed and replaced, and the unit
    /// retried once (farm only).
    #[arg(long, default_value_t = gpfarm_client::DEFAULT_UNIT_DEADLINE.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    deadline: u64,
    /// Sub-populations evolved side by side (the island model), each of --population
    /// individuals, each with its own evaluator (GPUs taken round-robin); under mpirun, per
    /// rank.
    #[arg(long, default_value_t = 1, value_parser = crate::cli::count::<{ gpfarm_gp::limits::MAX_ISLANDS }>)]
    pub islands: usize,
    /// Generations between migrations: after generations M-1, 2M-1, ... each island sends its
    /// best to the next island on a ring.
    #[arg(long, default_value_t = 10, value_parser = crate::cli::count::<1_000_000_000>)]
    migrate_every: usize,
    /// Individuals each island sends at a migration; they replace the next island's worst.
    #[arg(long, default_value_t = 2, value_parser = crate::cli::count::<100_000_000>)]
    migrants: usize,
    /// Whether islands share one farm (all its daemons) or split its daemons between them.
    #[arg(long, value_enum, default_value_t = IslandFarm::Shared)]
    island_farm: IslandFarm,
}

/// `--route`: a route, or `None` for auto. (An alias, so that clap takes `auto` as a value
/// rather than the flag as optional.)
type AutoRoute = Option<Route>;

/// Parses a number of seconds above zero.
fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v < 1e9 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds above 0")),
    }
}

fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a share in [0, 1]")),
    }
}

fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a finite number of at least 0")),
    }
}

impl EvolveArgs {
    /// Which problem the run is on.
    pub fn problem(&self) -> ProblemRef {
        match &self.problem_dir {
            Some(dir) => ProblemRef::Dir(dir.clone()),
            None => ProblemRef::Builtin(self.problem.clone()),
        }
    }

    /// The engine's options.
    pub fn options(&self) -> Result<Options> {
        let disk_cache = match (&self.cache_dir, self.disk_cache) {
            (Some(dir), _) => Some(dir.clone()),
            (None, true) => Some(
                DiskCache::default_dir()
                    .context("no cache directory: set GPFARM_CACHE_DIR or HOME, or give --cache-dir")?,
            ),
            (None, false) => None,
        };
        Ok(Options {
            evolution: EvolutionConfig {
                population: self.population,
                generations: self.generations,
                tournament: self.tournament,
                elite: self.elite,
                seed: self.seed,
                fit: FitConfig {
                    iterations: self.fit_iterations,
                    restarts: self.fit_restarts,
                    share: self.fit_share,
                    lamarckian: !self.no_lamarck,
                    cases: self.fit_cases,
                },
                parsimony: self.parsimony,
                max_size: self.max_size,
                select_tolerance: self.select_tolerance,
                representation: self.representation,
                ..EvolutionConfig::default()
            },
            eval: self.eval,
            arch: self.arch,
            flags: self.flags.clone(),
            fmad: self.fmad,
            route: if self.no_compile { Some(Route::Cpu) } else { self.route },
            fit_kernels: self.fit_kernels,
            link_flags: self.link_flags.clone(),
            shape: self.shape,
            cache: !self.no_cache,
            overlap: !self.no_overlap,
            per_unit: self.per_unit,
            disk_cache,
            trace_units: self.trace_units.clone(),
            gpu_worker: None,
            gpu_deadline: Duration::from_secs_f64(self.gpu_deadline),
            max_steps: self.max_steps,
            max_time: self.max_time.map(Duration::from_secs_f64),
            // The command's own start-up (loading the problem, the evaluator) counts.
            started: Some(std::time::Instant::now()),
            threads: self.threads.and_then(|t| std::num::NonZeroUsize::new(usize::try_from(t).ok()?)),
            crash_retry_flags: match (self.no_crash_retry, self.crash_retry_flags.is_empty()) {
                (true, _) => Vec::new(),
                (false, true) => Options::default().crash_retry_flags,
                (false, false) => self.crash_retry_flags.clone(),
            },
            crash_retry_on_gpu: !self.no_crash_retry_on_gpu,
            crash_dir: self.crash_dir.clone(),
            islands: self.islands,
            start: match &self.start {
                Some(path) => start_from(path)?,
                None => Vec::new(),
            },
            // One run per process: nothing to keep the GPU worker for.
            keep_gpu_worker: false,
            migrate_every: self.migrate_every,
            migrants: self.migrants,
        })
    }

    /// The compiler the run asks for (the planner adds what its route needs).
    pub fn compiler_request(&self, cuda: Option<&Path>) -> Result<CompilerRequest> {
        let workers = match self.daemons {
            None => None,
            Some(n) => Some(Workers::exactly(n).map_err(|e| super::UsageError(e.to_string()))?.count()),
        };
        Ok(CompilerRequest {
            spec: self.compiler,
            workers,
            build: BuildConfig {
                cuda: cuda.map(Path::to_path_buf),
                attach: self.attach.then(|| self.farm.clone()),
                unit_deadline: Duration::from_secs(self.deadline),
            },
            island_farm: self.island_farm,
        })
    }
}

/// The engine for `args` and the compilers its route needs, started and checked
/// ([`plan::prepare`]).
pub fn prepare(args: &EvolveArgs, cuda: Option<&Path>) -> Result<(Engine, Compilers)> {
    let problem = args.problem();
    plan::prepare(problem.clone(), args.options()?, &args.compiler_request(cuda)?).map_err(|e| {
        match (e, &problem) {
            (EvolveError::Usage(why), _) => super::UsageError(why).into(),
            (e @ EvolveError::Problem(_), ProblemRef::Dir(dir)) => {
                anyhow::Error::new(e).context(format!("loading problem {}", dir.display()))
            }
            (e, _) => e.into(),
        }
    })
}

/// Runs `gpfarm evolve`.
pub fn run(args: EvolveArgs, cuda: Option<&Path>) -> Result<()> {
    let (engine, mut compilers) = prepare(&args, cuda)?;
    if let Some(notice) = engine.notice() {
        eprintln!("note: {notice}");
    }
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new((args.generations as u64 + 1) * args.islands.max(1) as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} generations, {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let compiler = match compilers.as_slice() {
            [] => "no compiler".to_string(),
            [one] => one.name(),
            split => format!(
                "{} farms ({})",
                split.len(),
                split.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
            ),
        };
        bar.suspend(|| header(&args, &engine, &compiler));
        bar
    };
    let (json, islands) = (args.json, args.islands > 1);
    let summary = plan::run(&engine, &mut compilers, |r| {
        if json {
            println!("{}", serde_json::to_string(r)?);
        } else {
            bar.suspend(|| row(r, islands));
        }
        bar.inc(1);
        Ok(())
    })?;
    bar.finish_and_clear();
    print_summary(&summary, json)
}

/// Prints the summary: a JSON record, or the table's footer.
/// The front of the summary in `path` (the last line that is a summary, so that a whole
/// `--json` output will do) as the individuals to start from.
fn start_from(path: &std::path::Path) -> Result<Vec<gpfarm_gp::Seed>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--start {}", path.display()))?;
    let summary = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Summary>(l).ok().filter(|s| s.summary))
        .with_context(|| {
            format!("--start {}: no run summary in it (write one with --json)", path.display())
        })?;
    let seeds: Vec<gpfarm_gp::Seed> = summary.front.into_iter().filter_map(|m| m.seed).collect();
    if seeds.is_empty() {
        anyhow::bail!("--start {}: the summary's front has no genomes to start from", path.display());
    }
    Ok(seeds)
}

pub(super) fn print_summary(summary: &Summary, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(summary)?);
    } else {
        footer(summary);
    }
    Ok(())
}
