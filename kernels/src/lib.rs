//! From phenotypes to GPU code and back: rendering a population into CUDA C translation units
//! ([`render`]), and (where a GPU is present) evaluating the compiled individuals on it.
//!
//! This crate knows the problem's template and kernel convention (from `gp`), never how units are
//! compiled: it hands out plain source text and takes back CUBIN bytes.

mod fold;
pub mod gpu;
pub mod interp;
pub mod ptx;
pub mod render;
pub mod worker;

pub use ptx::{
    PTX_UNIT_WEIGHT, PtxUnits, PtxUnsupported, Refused, keyed_ptx, ptx_compile_weight, ptx_supported,
    ptx_switch_unit, ptx_unit, render_ptx_units,
};
pub use render::{
    RenderedUnit, UNIT_WEIGHT, compile_weight, kernel_name, keyed_source, render_switch_unit, render_unit,
    render_units, switch_refs, unit_kernel_name,
};
