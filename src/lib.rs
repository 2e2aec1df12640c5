//! The `gpfarm` command line as a library: its subcommands and their arguments, shared by the
//! `gpfarm` binary and the Python package (which parses `evolve`'s options with the same
//! definitions, so both take the same options).

pub mod cli;
pub mod stderr;
