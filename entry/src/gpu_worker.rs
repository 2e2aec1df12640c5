//! `gpfarm-gpu-worker`: the GPU evaluation worker, driven by its parent
//! (`gpfarm_client::GpuWorker`) over stdin and stdout. All of it lives in
//! `gpfarm_kernels::worker`; this reads which problem to evaluate. The `gpfarm-gpu-worker` binary
//! and the Python package's command of that name both run [`main`].

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use gpfarm_kernels::worker::{LoadProblem, serve};
use gpfarm_protocol::worker::ProblemRef;

/// Command line of gpfarm-gpu-worker.
#[derive(Debug, Parser)]
#[command(name = "gpfarm-gpu-worker", version, about = "gpfarm's GPU evaluation worker (started by gpfarm)")]
pub struct Args {
    /// A built-in problem.
    #[arg(
        long,
        conflicts_with_all = ["problem_dir", "kernels", "problem_in_init"],
        required_unless_present_any = ["problem_dir", "kernels", "problem_in_init"]
    )]
    problem: Option<String>,
    /// A problem directory.
    #[arg(long, conflicts_with_all = ["kernels", "problem_in_init"])]
    problem_dir: Option<PathBuf>,
    /// The problem comes with every readying request (a problem held in memory by the parent).
    #[arg(long, conflicts_with = "kernels")]
    problem_in_init: bool,
    /// Run a user's kernel and its variants (`gpfarm improve`) instead of a problem.
    #[arg(long)]
    kernels: bool,
}

fn run(args: Args) -> Result<()> {
    if args.kernels {
        return Ok(gpfarm_kernels::worker::serve_kernels()?);
    }
    if args.problem_in_init {
        return Ok(serve(None)?);
    }
    let problem = match (args.problem, args.problem_dir) {
        (_, Some(dir)) => ProblemRef::Dir(dir),
        (Some(name), None) => ProblemRef::Builtin(name),
        (None, None) => unreachable!("clap requires one of them"),
    };
    let problem = problem.load().with_context(|| format!("loading {problem:?}"))?;
    Ok(serve(Some(&problem))?)
}

/// Runs the worker with `args` (its command line, the program name first) and returns its exit
/// status. Call it before any other thread starts: it switches off the CUDA driver's cache.
pub fn main(args: impl IntoIterator<Item = String>) -> u8 {
    // As in gpfarm: no CUDA driver cache of earlier runs. SAFETY: the caller starts no thread
    // before this.
    unsafe { gpfarm_toolchain::disable_driver_cache() };
    let args = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    crate::stderr::init_logging("warn");
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gpfarm-gpu-worker: {}", crate::stderr::one_line(&e));
            1
        }
    }
}
