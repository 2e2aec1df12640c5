//! The contract between the evaluator and the interpreter's kernels: the kernels' names, the
//! flag bits of a program's offset in [`WirePopulation::offsets`], and the fitting kernels'
//! layout of sums and modes.
//!
//! The interpreter's source (`interpreter::interpreter_source`) and its population layout
//! (`interpreter::PackedPopulation`) follow the names and bits defined here, and `interpreter` re-exports
//! them, so that the evaluator needs nothing from the interpreter's module. Must never hold
//! anything but these names and bits: no bytecode, no launch.

#[cfg(doc)]
use super::WirePopulation;

/// The interpreter's kernel for programs whose stack fits its small stack (`interpreter::SMALL_DEPTH`
/// cells): every program without [`DEEP`].
pub const INTERP_KERNEL_SMALL: &str = "gpfarm_interpret_small";
/// The interpreter's kernel for deeper programs (up to `interpreter::MAX_DEPTH`): those with [`DEEP`].
pub const INTERP_KERNEL_LARGE: &str = "gpfarm_interpret_large";

/// The bit of an offset in [`WirePopulation::offsets`] that marks a program without jumps.
pub const STRAIGHT: u32 = 1 << 31;
/// The bit of an offset in [`WirePopulation::offsets`] that marks a program whose stack is too
/// deep for [`INTERP_KERNEL_SMALL`]: it runs in [`INTERP_KERNEL_LARGE`].
pub const DEEP: u32 = 1 << 30;
/// The flag bits of an offset.
pub const FLAGS: u32 = STRAIGHT | DEEP;

/// Where program `k` lies among `nwords` words laid out as in [`WirePopulation`], from its
/// `offsets` (flags and all).
pub fn program_range(offsets: &[u32], nwords: usize, k: usize) -> std::ops::Range<usize> {
    let start = (offsets[k] & !FLAGS) as usize;
    let end = offsets.get(k + 1).map_or(nwords, |&e| (e & !FLAGS) as usize);
    start..end
}

/// The interpreter's fitting kernels (`interpreter::fit_source`): least-squares sums of programs
/// with free parameters, one kernel per width of [`FIT_WIDTHS`], named by `fit_kernel`.
pub const FIT_KERNEL: &str = "gpfarm_fit";
/// The compiled fitting kernel of a unit of programs (`interpreter::fit_code_source`): the
/// interpreter's fitting kernels' parameters, `offsets` naming each program's member of the unit.
pub const FIT_CODE_KERNEL: &str = "gpfarm_fit_code";
/// The kernel that sums each program's tiles of the fitting kernels' sums.
pub const FIT_TILES_KERNEL: &str = "gpfarm_fit_tiles";
/// The kernel of one Levenberg–Marquardt iteration of every start on the GPU (a warp each):
/// [`FIT_STEP_BEGIN`], [`FIT_STEP_JUDGE`] and [`FIT_STEP_TRIAL`] in its `mode`.
pub const FIT_STEP_KERNEL: &str = "gpfarm_fit_step";
/// A step kernel's mode bit: the sums are those of the starting values; each start begins there.
pub const FIT_STEP_BEGIN: i32 = 1;
/// A step kernel's mode bit: each start that ran its trial plain refuses it where its sum of
/// squares is not lower and otherwise marks itself to run it again with derivatives (its
/// parameter count in the launches' counts); one that ran it with derivatives takes it.
pub const FIT_STEP_JUDGE: i32 = 2;
/// A step kernel's mode bit: each start still going, with trials left and none to run again,
/// solves for its next trial and marks itself to run it plain (a count of 0 in the launches'
/// counts, where a start not run has -1).
pub const FIT_STEP_TRIAL: i32 = 4;
/// The parameter counts the fitting kernels are built for: a program runs in the narrowest that
/// holds its parameters ([`fit_width`]), since a kernel's cost grows with its width.
pub const FIT_WIDTHS: [usize; 6] = [4, 8, 16, 32, 64, 128];
/// The widths that also have a small-stack fitting kernel ([`fit_kernel_small`]).
pub const FIT_SMALL_WIDTHS: [usize; 2] = [4, 8];
/// A small-stack fitting kernel takes programs whose stack stays under this many values.
pub const FIT_SMALL_DEPTH: usize = 14;
/// A small-stack fitting kernel's tape: the most ops of a program it differentiates in reverse.
pub const FIT_SMALL_TAPE: usize = 64;
/// The small-stack fitting kernel of width `width` (one of [`FIT_SMALL_WIDTHS`]): its per-case
/// stacks and tape are a fraction of the full kernel's, small enough to stay in the L1 cache.
pub fn fit_kernel_small(width: usize) -> String {
    format!("{FIT_KERNEL}_{width}_small")
}

/// The most parameters a program fitted on the GPU may have.
pub const FIT_PARAMS: usize = FIT_WIDTHS[FIT_WIDTHS.len() - 1];
/// The most parameters of a program the fitting kernels differentiate forward (a tangent per
/// value); wider kernels take only programs they differentiate in reverse (straight-line float
/// code, `interpreter::fitted_in_reverse`), and others are fitted on the CPU. The kernels of
/// widths 32 to 128 have no forward sweep, which held registers their reverse sweep needed. 16
/// rather than 64: the GPU worker's fitting is faster and the runs are the same
/// (docs/regression.md, "The fitting constants' measurements", gives the figures).
pub const FIT_FORWARD_PARAMS: usize = 16;
/// The sums a program with `params` parameters has: the sum of squares, `Jᵀr` (`params`), and
/// the lower triangle of `JᵀJ` row by row (`[1 + params + k * (k + 1) / 2 + l]` for `l <= k`).
/// Every tile of a fitting kernel writes a program's sums in this layout, and so do the tiles
/// kernel and the read-back.
pub fn sums_of(params: usize) -> usize {
    1 + params + params * (params + 1) / 2
}

/// The most cases each thread of a fitting kernel runs, one after another (each tile ends in a
/// reduction of its sums, so a tile should not be too small).
pub const FIT_ROWS: u32 = 16;
/// Tiles a program's cases are split into where there are enough cases: enough blocks for the
/// GPU's multiprocessors even when few programs are fitted at one width, and rows enough per
/// thread to pay for each tile's reduction. 16: fits took less GPU time a generation than with
/// 32 tiles of one row each, and as little as with 8 or 4 tiles (docs/regression.md, "The
/// fitting constants' measurements", gives the figures).
const FIT_TILES_WANTED: usize = 16;

/// [`FIT_TILES_WANTED`], or `GPFARM_FIT_TILES` where it is set to a number from 1 (a diagnostic
/// for tuning; the sums' bits follow the tiles).
fn fit_tiles_wanted() -> usize {
    static WANTED: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| tuning("GPFARM_FIT_TILES", 1..=usize::MAX).unwrap_or(FIT_TILES_WANTED))
}

/// Whether the environment variable `var`, a diagnostic switch of the fitting kernels, is `0`.
pub(crate) fn switched_off(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| v == "0")
}

/// The number the environment variable `name` sets, where it is set to one in `valid`: a setting
/// of the fitting kernels for tuning them (a diagnostic), the built-in one otherwise.
pub(crate) fn tuning(name: &str, valid: std::ops::RangeInclusive<usize>) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|n| valid.contains(n))
}

/// The cases each thread of a fitting kernel runs over `ncases` cases (1 to [`FIT_ROWS`]): a
/// function of the case count only, so that a program's sums do not depend on the programs
/// fitted beside it.
pub fn fit_rows(ncases: usize) -> u32 {
    ncases.div_ceil(super::BLOCK as usize * fit_tiles_wanted()).clamp(1, FIT_ROWS as usize) as u32
}

/// Tiles (blocks along x) of [`fit_rows`] rows of cases that `ncases` cases fill (at least one).
pub fn fit_tiles(ncases: usize) -> usize {
    ncases.div_ceil(super::BLOCK as usize * fit_rows(ncases) as usize).max(1)
}

/// The fitting kernel of width `width` (one of [`FIT_WIDTHS`]).
pub fn fit_kernel(width: usize) -> String {
    format!("{FIT_KERNEL}_{width}")
}

/// The widths whose fitting kernel has a plain twin ([`fit_kernel_plain`]): the wide ones, whose
/// registers go mostly to derivatives.
pub const FIT_PLAIN_WIDTHS: [usize; 4] = [16, 32, 64, 128];

/// The plain twin of the fitting kernel of width `width` (one of [`FIT_PLAIN_WIDTHS`]): it runs
/// the starts of a count of 0 (a trial's plain run, the sum of squares alone), compiled without
/// the derivatives; the kernel of that width then runs only the starts with derivatives. Its
/// sums of squares are the width's kernel's, bit for bit. Where a module has no such kernel,
/// the width's kernel runs both.
pub fn fit_kernel_plain(width: usize) -> String {
    format!("{FIT_KERNEL}_{width}_plain")
}

/// The narrowest of [`FIT_WIDTHS`] that holds `params` parameters; `None` beyond [`FIT_PARAMS`].
pub fn fit_width(params: usize) -> Option<usize> {
    FIT_WIDTHS.iter().copied().find(|&w| params <= w)
}
