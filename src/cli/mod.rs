//! The command line: one module per subcommand.

mod bench;
mod compile;
pub mod compilers;
mod daemons;
pub mod evolve;
mod improve;
#[cfg(feature = "mpi")]
mod mpi;
mod random;

use std::fmt;
use std::path::PathBuf;

/// A count a flag takes, from 0 to `MAX`: a one-line usage error above it (a larger count asks
/// for more memory or time than any run has) or for text that is not a whole number.
pub(crate) fn count<const MAX: usize>(s: &str) -> Result<usize, String> {
    let n: u128 = s.trim().parse().map_err(|_| format!("`{s}` is not a whole number from 0 to {MAX}"))?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= MAX)
        .ok_or_else(|| format!("{n} is more than {MAX}, the most it takes"))
}

use anyhow::Result;
use clap::{Parser, Subcommand};

/// The exit statuses, as `--help` lists them; [`Exit`] is the same list in code.
const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  done, including when there was nothing to do (e.g. no farm to stop)
  1  error: the command could not do its job; the last line on stderr says why
  2  usage: the command line is wrong or contradicts itself
  3  partly failed: the command ran to the end, but some of its work failed (e.g. units that did
     not compile); its output says which";

/// gpfarm: compiled genetic programming on GPUs, with a farm of resident NVRTC daemons.
#[derive(Debug, Parser)]
#[command(name = "gpfarm", version, about, after_help = EXIT_STATUS_HELP)]
pub struct Cli {
    /// CUDA toolkit or wheel directory to take NVRTC and nvcc from (default: GPFARM_CUDA,
    /// CUDA_HOME, /usr/local/cuda, then the checkout's .toolchain/).
    #[arg(long, global = true)]
    pub cuda: Option<PathBuf>,
    /// More logging on stderr (-v: info, -vv: debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The command line, parsed, with `evolve`'s options checked ([`gpfarm_evolve::RunSpec::check`]):
    /// a value out of its range ends the process as clap's own parse errors do (status 2, one
    /// message naming the flag).
    pub fn parse_checked() -> Cli {
        let cli = Cli::parse();
        if let Command::Evolve(args) = &cli.command
            && let Err(e) = args.spec.check()
        {
            // As clap writes a value its parser refused.
            eprintln!(
                "error: invalid value for '{}': {}\n\nFor more information, try '--help'.",
                e.flag(),
                e.why
            );
            std::process::exit(Exit::Usage as i32);
        }
        cli
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compile a seeded random population, or given .cu files, and report the timings.
    Compile(compile::CompileArgs),
    /// Compare every compiler on the paper's populations: CSV, tables, fits and plots.
    Bench(bench::BenchArgs),
    /// Evolve programs for a problem: every generation compiled by the farm and evaluated.
    Evolve(evolve::EvolveArgs),
    /// Improve an existing CUDA kernel: evolve edits to its PTX, keep faster variants with the
    /// same output (GEVO's method, variants linked by the farm and timed on the GPU).
    Improve(improve::ImproveArgs),
    /// Start, inspect and stop resident daemons shared by later runs.
    #[command(subcommand)]
    Daemons(daemons::DaemonsCommand),
}

/// Runs `gpfarm evolve`: as one rank of an MPI job when an MPI launcher started this process,
/// else every island here.
fn run_evolve(args: evolve::EvolveArgs, cuda: Option<&std::path::Path>) -> Result<()> {
    if let Some(_ranks) = launched_by_mpi() {
        #[cfg(feature = "mpi")]
        return mpi::run(args, cuda);
        #[cfg(not(feature = "mpi"))]
        if _ranks > 1 {
            let why = format!(
                "started by an MPI launcher with {_ranks} ranks, but this gpfarm was built without MPI: every rank \
                 would run the whole job alone; build it with `cargo build --release --features mpi`"
            );
            return Err(UsageError(why).into());
        }
    }
    evolve::run(args, cuda)
}

/// The number of ranks when an MPI launcher (Open MPI's mpirun, a PMI or PMIx launcher such as
/// Slurm's srun) started this process.
pub fn launched_by_mpi() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .or_else(|| std::env::var_os("PMIX_RANK").map(|_| 1))
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Compile(args) => compile::run(args, cli.cuda.as_deref()),
        Command::Daemons(cmd) => daemons::run(cmd, cli.cuda.as_deref()),
        Command::Evolve(args) => run_evolve(args, cli.cuda.as_deref()),
        Command::Bench(args) => bench::run(args, cli.cuda.as_deref()),
        Command::Improve(args) => improve::run(args, cli.cuda.as_deref()),
    }
}

/// How `gpfarm` ends: its exit status (listed in `--help`). A subcommand chooses one other than
/// [`Exit::Error`] by returning a [`UsageError`] or a [`PartialFailure`] somewhere in its error's
/// chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done, including when there was nothing to do.
    Success = 0,
    /// 1: the command could not do its job.
    Error = 1,
    /// 2: the command line is wrong (clap's own errors exit 2 as well).
    Usage = 2,
    /// 3: the command ran to the end, but some of its work failed; its output says which.
    PartlyFailed = 3,
}

impl Exit {
    /// The status a command that failed with `error` exits with.
    pub fn of(error: &anyhow::Error) -> Exit {
        for cause in error.chain() {
            if cause.is::<UsageError>() {
                return Exit::Usage;
            }
            if cause.is::<PartialFailure>() {
                return Exit::PartlyFailed;
            }
        }
        Exit::Error
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit as u8)
    }
}

/// A command line that parses but asks for something impossible or contradictory; exits 2.
/// The message says what to give instead.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A command that ran to the end with some of its work failed; exits 3. The message sums it up
/// (e.g. "2 of 5 units did not compile"); the command's output has the details.
#[derive(Debug)]
pub struct PartialFailure(pub String);

impl fmt::Display for PartialFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PartialFailure {}

#[cfg(test)]
mod tests {
    use anyhow::Context;
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_exit_status_is_found_under_any_context() {
        let usage = Err::<(), _>(UsageError("give --random N".into())).context("compiling");
        assert_eq!(Exit::of(&usage.unwrap_err()), Exit::Usage);
        let partial = anyhow::Error::new(PartialFailure("1 of 2 units did not compile".into()));
        assert_eq!(Exit::of(&partial), Exit::PartlyFailed);
        assert_eq!(Exit::of(&anyhow::anyhow!("no NVRTC")), Exit::Error);
    }

    #[test]
    fn help_lists_every_exit_status() {
        let help = Cli::command().render_long_help().to_string();
        for exit in [Exit::Success, Exit::Error, Exit::Usage, Exit::PartlyFailed] {
            assert!(help.contains(&format!("\n  {}  ", exit as u8)), "{help}");
        }
    }
}
