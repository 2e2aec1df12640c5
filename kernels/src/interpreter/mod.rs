//! The interpreter route: no compiling per individual. Each phenotype's typed tree (the CPU
//! evaluator's, [`gpfarm_gp::program::tree`]) becomes compact bytecode ([`bytecode`]); one launch
//! of one kernel, compiled once per problem ([`interpreter_source`]), runs a whole population
//! over every case, with the cases resident on the GPU, and reduces each program's fitness on
//! the device, so only one `double` per program comes back.
//!
//! # Same bits as the compiled routes
//!
//! Each op is the C operation that the standard harness compiles the same tree node to
//! (NVRTC's `--fmad=false` code, which the PTX route reproduces bit for bit): `+ - * /` in the
//! node's type, rounded on their own; C's conversions; `div.s32`/`rem.s32`, `shl`/`shr` for
//! ints; the same CUDA math functions, compiled with the run's options; the wrapped array read
//! of `gp_wrapped_ints`; constant subexpressions folded where NVVM folds them, as the PTX route
//! folds them ([`Folding::Nvvm`]: a math function of constants is the host's value, not CUDA's).
//! The per-case fitness term and the order of summation are the fitness
//! kernel's. So, on the GPU, the interpreter's fitness is the compiled routes' fitness, bit for
//! bit, with one stated exception (below). A loop that runs past the step limit in any case
//! (the problem's [`gpfarm_gp::Problem::max_steps`]) fails the program (worst fitness) here as on
//! every route; the interpreter finds some such programs sooner (a case whose state repeats, or
//! another case of its block that failed: see the `Step` op in `source`), with the same outcome.
//!
//! The exception: with `--fmad` NVRTC may fuse `a * b + c` across tree nodes in compiled code,
//! which an interpreter cannot: the default (`--fmad=false`) is exact.
//!
//! Like the PTX route it needs the standard harness ([`interp_supported`]): a template that
//! computes anything else cannot be interpreted.
//!
//! The interpreter is written to the GPU evaluator's terms ([`crate::gpu`]): its fitness
//! reduction, its error, and the kernel names and offset flags it launches by (re-exported here).
//! The evaluator must never depend on this module in turn.

pub mod bytecode;
pub mod exec;
pub(crate) mod fit;
mod source;

pub use bytecode::{
    Bytecode, BytecodeError, Folding, MAX_DEPTH, Op, assemble, assemble_structure, assemble_with, walk,
};
pub use fit::{
    FIT_CODE_MEMBERS, FIT_DEPTH, FIT_LINK_FLAGS, FIT_LINK_MAX_REGISTERS, FIT_MEMBER_FUNCTION,
    FIT_REVERSE_WIDTH, FIT_TAPE, FitCodeUnit, fit_code_groups, fit_code_source, fit_compiles,
    fit_link_source, fit_source, fit_source_for, fit_supported, fits_on_gpu, fits_small, fitted_in_reverse,
};
pub use source::{
    INTERLEAVE, REGISTER_SLOTS, SMALL_DEPTH, Tuning, interpreter_source, interpreter_source_with,
};
// The evaluator launches by these names and flags; the interpreter's kernels and its population
// layout follow them.
pub use crate::gpu::contract::{
    DEEP, FIT_CODE_KERNEL, FIT_FORWARD_PARAMS, FIT_KERNEL, FIT_PARAMS, FIT_STEP_BEGIN, FIT_STEP_JUDGE,
    FIT_STEP_KERNEL, FIT_STEP_TRIAL, FIT_TILES_KERNEL, FIT_WIDTHS, FLAGS, INTERP_KERNEL_LARGE,
    INTERP_KERNEL_SMALL, STRAIGHT, fit_width, program_range, sums_of,
};

use gpfarm_gp::Problem;
use gpfarm_gp::problem::compare_with_standard;
use gpfarm_protocol::worker::WirePopulation;

/// Why a problem cannot be interpreted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "problem `{problem}` cannot be interpreted: the interpreter computes the standard kernel harness, and {difference}"
)]
pub struct InterpUnsupported {
    /// The problem's name.
    pub problem: String,
    /// Where its template first differs from the standard harness.
    pub difference: gpfarm_gp::problem::TemplateDifference,
}

/// Whether `problem` can be interpreted: its `template.cu` must be the standard harness.
pub fn interp_supported(problem: &Problem) -> Result<(), InterpUnsupported> {
    compare_with_standard(problem.template(), problem.spec())
        .map_err(|difference| InterpUnsupported { problem: problem.name().to_owned(), difference })
}

/// A population's bytecode, laid out for one launch: every program's words one after the other,
/// and where each starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedPopulation {
    /// All programs' words.
    pub words: Vec<u32>,
    /// The first word of each program, with [`STRAIGHT`] set when the program has no jump
    /// ([`Bytecode::is_straight`]) and [`DEEP`] when its stack needs the large kernel.
    pub offsets: Vec<u32>,
}

impl PackedPopulation {
    /// Lays out `programs` in order.
    pub fn new<'a>(programs: impl IntoIterator<Item = &'a Bytecode>) -> PackedPopulation {
        let mut p = PackedPopulation::default();
        for b in programs {
            let straight = if b.is_straight() { STRAIGHT } else { 0 };
            let deep = if b.depth > SMALL_DEPTH { DEEP } else { 0 };
            p.offsets.push(p.words.len() as u32 | straight | deep);
            p.words.extend_from_slice(&b.words);
        }
        p
    }

    /// The population as the GPU evaluator and its worker take it, `max_steps` loop iterations
    /// allowed per case.
    pub fn into_wire(self, max_steps: u64) -> WirePopulation {
        WirePopulation { words: self.words, offsets: self.offsets, max_steps }
    }

    /// Programs held.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// The kernel that runs program `k`: the small stack's when it fits.
    pub fn kernel(&self, k: usize) -> &'static str {
        if self.offsets[k] & DEEP == 0 { INTERP_KERNEL_SMALL } else { INTERP_KERNEL_LARGE }
    }

    /// The ops the programs hold (a constant's value words not counted): the interpreter's work
    /// per case when no loop repeats any.
    pub fn ops(&self) -> usize {
        (0..self.len()).map(|k| bytecode::walk(self.program(k)).count()).sum()
    }

    /// The words of program `k`.
    pub fn program(&self, k: usize) -> &[u32] {
        &self.words[program_range(&self.offsets, self.words.len(), k)]
    }
}
