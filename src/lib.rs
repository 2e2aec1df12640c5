//! The `gpfarm` command line as a library: its subcommands and their arguments, for the `gpfarm`
//! binary (the run's options are the engine's `RunSpec`, which Python reads too).

pub mod cli;
pub use gpfarm_entry::stderr;
