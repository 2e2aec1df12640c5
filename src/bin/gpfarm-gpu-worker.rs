//! gpfarm-gpu-worker: the GPU evaluation worker, driven by its parent (`gpfarm_client::GpuWorker`)
//! over stdin and stdout. All of it lives in `gpfarm_kernels::worker`; this binary only reads
//! which problem to evaluate.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use gpfarm_kernels::worker::{LoadProblem, serve};
use gpfarm_protocol::worker::ProblemRef;

#[path = "../stderr.rs"]
mod stderr;

/// Command line of gpfarm-gpu-worker.
#[derive(Debug, Parser)]
#[command(name = "gpfarm-gpu-worker", version, about = "gpfarm's GPU evaluation worker (started by gpfarm)")]
struct Args {
    /// A built-in problem.
    #[arg(long, conflicts_with = "problem_dir", required_unless_present = "problem_dir")]
    problem: Option<String>,
    /// A problem directory.
    #[arg(long)]
    problem_dir: Option<PathBuf>,
}

fn run(args: Args) -> Result<()> {
    let problem = match (args.problem, args.problem_dir) {
        (_, Some(dir)) => ProblemRef::Dir(dir),
        (Some(name), None) => ProblemRef::Builtin(name),
        (None, None) => unreachable!("clap requires one of them"),
    };
    let problem = problem.load().with_context(|| format!("loading {problem:?}"))?;
    Ok(serve(&problem)?)
}

fn main() -> std::process::ExitCode {
    // As in gpfarm: no CUDA driver cache of earlier runs. SAFETY: no other thread has started.
    unsafe { gpfarm_toolchain::disable_driver_cache() };
    stderr::init_logging("warn");
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpfarm-gpu-worker: {}", stderr::one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
