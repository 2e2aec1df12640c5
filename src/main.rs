//! `gpfarm`: compile GP populations on a farm of resident NVRTC daemons, evolve programs with
//! grammatical GP, and measure it all.

use gpfarm::{cli, stderr};

// Generations of 10^5-10^6 individuals allocate and free millions of small trees on every core;
// glibc's allocator spent a third of such a generation in its own locks and consolidation.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Die quietly when a reader such as `head` closes the pipe, as command-line tools do.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // Compile for real, not from the CUDA driver's cache of earlier runs, in this process and in
    // every daemon it starts. SAFETY: no other thread has started yet.
    unsafe { gpfarm_toolchain::disable_driver_cache() };
    let args = cli::Cli::parse_checked();
    let level = ["warn", "info", "debug"][usize::from(args.verbose.min(2))];
    stderr::init_logging(level);
    match cli::run(args) {
        Ok(()) => cli::Exit::Success.into(),
        Err(e) => {
            eprintln!("gpfarm: {}", stderr::one_line(&e));
            cli::Exit::of(&e).into()
        }
    }
}
