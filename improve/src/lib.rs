//! Improving a user's CUDA kernel by evolution (`gpfarm improve`), GEVO's method on PTX.
//!
//! A kernel directory ([`harness`]) holds the user's CUDA C and a harness (`kernel.toml`): which
//! kernel, its arguments and how they are filled, its launch as a function of the size `n`, how
//! outputs are compared, and the sizes to search and to check at. The original is compiled once to
//! PTX by NVRTC ([`search::original_ptx`]); an individual is a list of edits to that PTX's
//! instruction stream ([`ptx`]: delete, copy, move, swap, replace an operand); NSGA-II ([`nsga`])
//! keeps the best on (time relative to the original, error). Each generation's new variants are
//! linked by the compile farm's nvJitLink (one unit each: one that does not assemble fails alone),
//! and run in a kernel worker process on the GPU, which compares their outputs with the
//! original's, checks the guard bytes after every buffer, and times them beside the original
//! (`gpfarm_kernels::gpu::variants`). A variant that faults or never ends costs its worker, which
//! is replaced, and scores worst; the run goes on ([`search`]).

pub mod harness;
pub mod nsga;
pub mod ptx;
pub mod search;

pub use harness::{HarnessError, KernelDir};
pub use ptx::{Edit, Kernel, PtxError};
pub use search::{
    Check, ImproveConfig, ImproveError, Individual, Outcome, Record, Score, improve, link, original_ptx,
};
