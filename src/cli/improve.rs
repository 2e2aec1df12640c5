//! `gpfarm improve DIR`: evolves edits to a kernel's PTX so that it runs faster with the same
//! output. All of it lives in the `gpfarm-improve` library; this reads the command line and
//! prints.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use gpfarm_client::{BuildConfig, CompilerSpec, SmArch, Workers};
use gpfarm_improve::{ImproveConfig, KernelDir, Outcome, Record, improve};
use gpfarm_protocol::FarmName;

/// Command line of `gpfarm improve`.
#[derive(Debug, Args)]
pub struct ImproveArgs {
    /// The kernel directory: the CUDA C and its harness, `kernel.toml`.
    dir: PathBuf,
    /// Individuals kept per generation.
    #[arg(long, default_value_t = 64, value_parser = crate::cli::count::<10_000_000>)]
    population: usize,
    /// Generations bred after the first.
    #[arg(long, default_value_t = 20, value_parser = crate::cli::count::<1_000_000_000>)]
    generations: usize,
    /// Stop breeding after this many seconds (the held-out check follows).
    #[arg(long, value_name = "SECONDS")]
    time_limit: Option<f64>,
    /// Seed of the search and of the search inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the results go (records.jsonl, outcome.json, best.ptx, best.cubin, best.diff,
    /// best.patch.json, original.ptx).
    #[arg(long, default_value = "improve-out")]
    out: PathBuf,
    /// Compile daemons (or threads); default: one per core.
    #[arg(long, short = 'n', value_parser = crate::cli::count::<4096>)]
    daemons: Option<usize>,
    /// What links the variants: farm[:K], threads[:K] or inprocess.
    #[arg(long, default_value = "farm")]
    compiler: CompilerSpec,
    /// Link on daemons started by `gpfarm daemons start` instead of spawning new ones.
    #[arg(long)]
    attach: bool,
    /// With --attach: the farm's name (default: the only resident farm).
    #[arg(long, requires = "attach")]
    farm: Option<FarmName>,
    /// Architecture of the CUBIN.
    #[arg(long, default_value = "sm_90")]
    arch: SmArch,
    /// How long one variant may run (its check and timed launches), in milliseconds, before it
    /// is scored a timeout and its worker replaced.
    #[arg(long, default_value_t = 5000)]
    deadline_ms: u64,
}

/// Runs `gpfarm improve`.
pub fn run(args: ImproveArgs, cuda: Option<&Path>) -> Result<()> {
    let dir = KernelDir::load(&args.dir)?;
    if args.population < 2 {
        return Err(super::UsageError("--population is at least 2".into()).into());
    }
    let compiler = match args.daemons {
        None => args.compiler,
        Some(n) => {
            let n = Workers::exactly(n).map_err(|e| super::UsageError(e.to_string()))?.count();
            args.compiler.or_workers(n)
        }
    };
    let config = ImproveConfig {
        population: args.population,
        generations: args.generations,
        time_limit: args.time_limit.map(Duration::from_secs_f64),
        seed: args.seed,
        arch: args.arch,
        compiler,
        build: BuildConfig {
            cuda: cuda.map(Path::to_path_buf),
            attach: args.attach.then(|| args.farm.clone()),
            ..BuildConfig::default()
        },
        deadline: Duration::from_millis(args.deadline_ms.max(1)),
        out: Some(args.out.clone()),
        ..ImproveConfig::default()
    };
    println!(
        "improving {} ({}), search size {}, held-out sizes {:?}; population {}, {} generations",
        dir.kernel,
        args.dir.display(),
        dir.search,
        dir.validate,
        config.population,
        config.generations
    );
    let outcome = improve(&dir, &config, |r| println!("{}", line(r)))
        .with_context(|| format!("improving {}", args.dir.display()))?;
    print!("{}", summary(&outcome, dir.tolerance));
    println!("results in {}", args.out.display());
    Ok(())
}

fn line(r: &Record) -> String {
    format!(
        "gen {:>3}: {:>4} new of {:>4} ({} invalid, {} faulted, {} timed out, {} out of bounds, {} correct), best speed-up {:.3}x, front {}, {:.0} variants/s (apply {:.0} ms, link {:.0} ms, GPU {:.0} ms of which {} restarts {:.0} ms)",
        r.generation,
        r.new,
        r.variants,
        r.invalid,
        r.faults,
        r.timeouts,
        r.out_of_bounds,
        r.correct,
        r.best_speedup,
        r.front,
        r.variants_per_s,
        r.apply_ms,
        r.link_ms,
        r.gpu_ms,
        r.restarts,
        r.restart_ms
    )
}

fn summary(o: &Outcome, tolerance: f64) -> String {
    let mut s = format!(
        "{} on {}: original {:.4} ms; {} variants in {:.1} s\n",
        o.kernel, o.device, o.original_ms, o.evaluated, o.search_s
    );
    s.push_str("front (speed-up, error):");
    for i in o.front.iter().take(8) {
        s.push_str(&format!(" ({:.3}x, {:.2e})", i.score.speedup(), i.score.error));
    }
    s.push('\n');
    for r in &o.rejected {
        let wrong: Vec<String> =
            r.checks.iter().filter(|c| !c.correct).map(|c| format!("n = {}", c.n)).collect();
        s.push_str(&format!(
            "rejected: {:.3}x at search size, wrong on held-out {}\n",
            r.individual.score.speedup(),
            wrong.join(", ")
        ));
    }
    match &o.best {
        None => s.push_str(&format!(
            "no variant with error <= {tolerance:e} was faster than the original and correct on every held-out size\n"
        )),
        Some(b) => {
            let edits: Vec<String> = b.edits.iter().map(ToString::to_string).collect();
            s.push_str(&format!(
                "best: {:.3}x at search size, error {:.2e}, {} edits: {}\n",
                b.score.speedup(),
                b.score.error,
                b.edits.len(),
                edits.join("; ")
            ));
            for c in &o.checks {
                s.push_str(&format!(
                    "  held out n = {}: {:.3}x (95% CI {:.3}-{:.3}), error {:.2e}, {}\n",
                    c.n,
                    c.speedup,
                    c.interval.0,
                    c.interval.1,
                    c.error,
                    if c.correct { "correct" } else { "WRONG" }
                ));
            }
        }
    }
    s
}
