//! gpfarmd, the resident compile daemon (the binary is a three-line `main` in the root package,
//! so that `cargo test` and `cargo install` build it beside `gpfarm`).
//!
//! One daemon serves one shared-memory segment. It loads NVRTC once and warms it, then waits for
//! "go", compiles the units of the request, writes the results back and signals "done", for as
//! long as it lives. It leaves on a shutdown request, on SIGINT/SIGTERM, or when the process that
//! spawned it dies, and removes its segment on the way out. It never exits with a request
//! half-answered if it can help it, and never panics on what it reads from shared memory.

mod compile;
mod jit;
mod serve;

pub use serve::{Args, run};
