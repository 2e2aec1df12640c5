//! gpfarmd: the resident compile daemon. All of it lives in the `gpfarm-daemon` crate.

use clap::Parser;

fn main() -> std::process::ExitCode {
    // A daemon started by hand compiles for real too (gpfarm sets this for the daemons it starts).
    // SAFETY: no other thread has started yet.
    unsafe { gpfarm_toolchain::disable_driver_cache() };
    let args = gpfarm_daemon::Args::parse();
    let level = ["warn", "info", "debug"][usize::from(args.verbose.min(2))];
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match gpfarm_daemon::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpfarmd: {e:#}");
            std::process::ExitCode::from(3)
        }
    }
}
