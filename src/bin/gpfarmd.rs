//! gpfarmd: the resident compile daemon. All of it lives in the `gpfarm-daemon` crate.

use clap::Parser;

#[path = "../stderr.rs"]
mod stderr;

fn main() -> std::process::ExitCode {
    // A daemon started by hand compiles for real too (gpfarm sets this for the daemons it starts).
    // SAFETY: no other thread has started yet.
    unsafe { gpfarm_toolchain::disable_driver_cache() };
    let args = gpfarm_daemon::Args::parse();
    let level = ["warn", "info", "debug"][usize::from(args.verbose.min(2))];
    stderr::init_logging(level);
    match gpfarm_daemon::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpfarmd: {}", stderr::one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
