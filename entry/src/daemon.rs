//! `gpfarmd`: the resident compile daemon. All of it lives in the `gpfarm-daemon` crate; the
//! `gpfarmd` binary and the Python package's command of that name both run [`main`].

use clap::Parser;

/// Runs the daemon with `args` (its command line, the program name first) and returns its exit
/// status. Call it before any other thread starts: it switches off the CUDA driver's cache.
pub fn main(args: impl IntoIterator<Item = String>) -> u8 {
    // A daemon started by hand compiles for real too (gpfarm sets this for the daemons it starts).
    // SAFETY: the caller starts no thread before this.
    unsafe { gpfarm_toolchain::disable_driver_cache() };
    let args = match gpfarm_daemon::Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    let level = ["warn", "info", "debug"][usize::from(args.verbose.min(2))];
    crate::stderr::init_logging(level);
    match gpfarm_daemon::run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gpfarmd: {}", crate::stderr::one_line(&e));
            1
        }
    }
}
