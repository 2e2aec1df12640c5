//! `gpfarm evolve`: turns the flags into [`gpfarm_evolve::Options`] and a
//! [`CompilerRequest`], has the engine's planner ([`gpfarm_evolve::plan`]) build what the run
//! needs, and prints what the engine reports. Must never hold generation logic or decide which
//! compilers a run gets: that is the `gpfarm-evolve` library's.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use gpfarm_evolve::plan::{self, CompilerRequest, Compilers};
use gpfarm_evolve::{Engine, EvolveError, OptionError, Options, ProblemRef, RunSpec, Summary};
use indicatif::{ProgressBar, ProgressStyle};

pub(crate) use table::row;
use table::{footer, header};

mod table;

/// Arguments of `gpfarm evolve`: the problem, the run's options ([`RunSpec`], every one of
/// them with its default and check there), and how the run is shown.
#[derive(Debug, Args)]
pub struct EvolveArgs {
    /// Built-in problem: search, keijzer6 or multiplier5.
    #[arg(long, default_value = "keijzer6", conflicts_with = "problem_dir")]
    problem: String,
    /// A problem directory (problem.toml, grammar.bnf, cases.json, template.cu) instead.
    #[arg(long)]
    problem_dir: Option<PathBuf>,
    /// The run's options.
    #[command(flatten)]
    pub spec: RunSpec,
    /// Print one JSON record per generation (and a final summary record) instead of a table.
    #[arg(long)]
    pub(super) json: bool,
    /// Start the first generation from the size–error front of an earlier run: a file holding
    /// that run's `--json` summary (its last line), on the same problem and grammar
    #[arg(long, value_name = "SUMMARY")]
    start: Option<PathBuf>,
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
        let start = match &self.start {
            Some(path) => start_from(path)?,
            None => Vec::new(),
        };
        // The command's own start-up (loading the problem, the evaluator) counts.
        self.spec.options(start, Some(std::time::Instant::now())).map_err(usage)
    }

    /// The compiler the run asks for (the planner adds what its route needs).
    pub fn compiler_request(&self, cuda: Option<&Path>) -> Result<CompilerRequest> {
        self.spec.compiler_request(cuda).map_err(usage)
    }
}

/// A spec's error as the usage error it is, named by the flag.
fn usage(e: OptionError) -> anyhow::Error {
    super::UsageError(format!("invalid value for {}: {}", e.flag(), e.why)).into()
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
        let bar = ProgressBar::new((args.spec.generations as u64 + 1) * args.spec.islands.max(1) as u64);
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
    let (json, islands) = (args.json, args.spec.islands > 1);
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
