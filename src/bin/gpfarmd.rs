//! gpfarmd: the resident compile daemon. All of it lives in the `gpfarm-daemon` crate, started by
//! `gpfarm::cli::daemon`.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(gpfarm::cli::daemon::main(std::env::args()))
}
