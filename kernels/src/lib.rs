//! From phenotypes to GPU code and back: units for the compile routes ([`unit`](mod@unit), the one place
//! that matches on a unit's language and shape, over the CUDA C renderer and the PTX emitter),
//! the GPU interpreter's bytecode and kernel ([`interpreter`]), and (where a GPU is present)
//! evaluating compiled or interpreted individuals on it ([`gpu`], [`worker`]).
//!
//! This crate knows the problem's template and kernel convention (from `gp`), never how units are
//! compiled: it hands out plain source text and takes back CUBIN bytes.

mod fold;
pub mod gpu;
pub mod interpreter;
pub mod ptx;
mod render;
pub mod unit;
pub mod worker;

pub use ptx::{PtxUnsupported, ptx_supported};
