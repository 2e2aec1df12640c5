//! The command line: one module per subcommand.

mod bench;
mod compile;
mod compilers;
mod daemons;
mod evolve;
mod random;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// gpfarm: compiled genetic programming on GPUs, with a farm of resident NVRTC daemons.
#[derive(Debug, Parser)]
#[command(name = "gpfarm", version, about)]
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

#[derive(Debug, Subcommand)]
enum Command {
    /// Compile a seeded random population, or given .cu files, and report the timings.
    Compile(compile::CompileArgs),
    /// Compare every compiler on the paper's populations: CSV, tables, fits and plots.
    Bench(bench::BenchArgs),
    /// Evolve programs for a problem: every generation compiled by the farm and evaluated.
    Evolve(evolve::EvolveArgs),
    /// Start, inspect and stop resident daemons shared by later runs.
    #[command(subcommand)]
    Daemons(daemons::DaemonsCommand),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Compile(args) => compile::run(args, cli.cuda.as_deref()),
        Command::Daemons(cmd) => daemons::run(cmd, cli.cuda.as_deref()),
        Command::Evolve(args) => evolve::run(args, cli.cuda.as_deref()),
        Command::Bench(args) => bench::run(args, cli.cuda.as_deref()),
    }
}
