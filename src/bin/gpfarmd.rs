//! gpfarmd: the resident compile daemon. All of it lives in the `gpfarm-daemon` crate, started by
//! `gpfarm_entry::daemon`.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(gpfarm_entry::daemon::main(std::env::args()))
}
