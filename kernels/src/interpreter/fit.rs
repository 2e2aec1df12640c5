//! The interpreter's fitting kernel: for a population of programs with free parameters
//! ([`super::bytecode::assemble_structure`]), one launch computes, for every program over every
//! case, the sums Levenberg–Marquardt needs: the sum of squared residuals (output − target), the
//! gradient `Jᵀr` and the lower triangle of `JᵀJ`, with the Jacobian by automatic
//! differentiation: one kernel per width of [`FIT_WIDTHS`], a program in the narrowest that holds
//! its parameters. Straight-line float programs of 8 or more parameters are differentiated in
//! reverse ([`adjoint`], [`fitted_in_reverse`]: a forward sweep with derivatives keeps the
//! operands of each op whose slopes read them, but for those a leaf pushed just before, which the
//! backward sweep reads again, and a backward sweep adds the adjoints); the others
//! forward ([`dual`]: a tangent of as many floats as the kernel's width beside each value, up to
//! [`FIT_FORWARD_PARAMS`]).
//! The programs' parameter values come in a buffer, so the same bytecode serves every iteration.
//! A program launched with a count of 0 gets its sum of squares alone: the tangents and the
//! backward sweep are skipped (a compiled member still computes its derivatives, unused), and the
//! sum of squares is the same bits as with them, each sum being added on its own. The fitting
//! loop runs each trial so first.
//!
//! Layout: one block of [`BLOCK`] threads per tile of `BLOCK × rows` cases (grid x;
//! [`crate::gpu::contract::fit_rows`]) and program (grid y); a thread runs cases `l`,
//! `l + BLOCK`, ... of its tile. Up to 8 parameters, it adds
//! each case's products to its own `double` sums in that order and the block sums its warps by
//! shuffles and then its warps in order; wider, the block's Jacobian rows go to shared memory as
//! doubles and the block's warps add their products on the double-precision tensor cores (`mma`
//! m8n8k4: an 8 × 8 tile of sums per warp and step of four rows, tiles holding none of the
//! program's parameters skipped; before compute capability 8.0, or with `GPFARM_FIT_MMA=0`, each
//! thread adds its own share of the sums, in order). [`FIT_TILES_KERNEL`] sums each program's
//! tiles in order, so the sums are the same bits on every run of the same GPU. Values are the evaluating kernel's ops (so the outputs are the interpreter's, bit for
//! bit); the derivatives are floats, by the rules of the CPU's tangents (`gp::program`): none for
//! ints, comparisons and conversions to int; the path taken at a branch; the first argument's
//! side of `fabs` at 0 and of `fmin`/`fmax` on a tie; `pow`'s exponent only where its base is
//! positive; `pdiv` division's slopes where it divides (`|b| > 0.001` in its type) and none where
//! it is 1. So the GPU's sums agree with the CPU's within float rounding of the derivatives.
//!
//! Supported: problems the interpreter runs, with one float output, the rmse fitness and no
//! `int[]` input ([`fit_supported`]); programs with at most [`FIT_PARAMS`] parameters and a stack
//! of at most [`FIT_DEPTH`] cells. Others are fitted on the CPU.

use std::fmt::Write as _;

use gpfarm_gp::problem::{InputType, ParamRole, ScalarType};
use gpfarm_gp::{FitnessKind, Problem};

use super::bytecode::{Op, slot_layout};
use crate::gpu::contract::{
    FIT_CODE_KERNEL, FIT_FORWARD_PARAMS, FIT_PARAMS, FIT_PLAIN_WIDTHS, FIT_SMALL_DEPTH, FIT_SMALL_TAPE,
    FIT_SMALL_WIDTHS, FIT_STEP_BEGIN, FIT_STEP_JUDGE, FIT_STEP_KERNEL, FIT_STEP_TRIAL, FIT_TILES_KERNEL,
    FIT_WIDTHS, fit_kernel, fit_kernel_plain, fit_kernel_small, fit_width, switched_off, tuning,
};

/// The narrowest fitting kernel that differentiates straight-line float programs in reverse
/// (narrower ones differentiate every program forward).
pub const FIT_REVERSE_WIDTH: usize = 8;
use crate::gpu::{BLOCK, GpuError};

/// A program fitted on the GPU keeps its stack under this many cells.
pub const FIT_DEPTH: usize = 64;
/// The most ops of a program the fitting kernels differentiate in reverse (longer ones run
/// forward).
pub const FIT_TAPE: usize = 512;
/// Whether `problem`'s programs can be fitted on the GPU (see the module documentation); why not
/// otherwise.
pub fn fit_supported(problem: &Problem) -> Result<(), String> {
    let spec = problem.spec();
    if spec.fitness != FitnessKind::Rmse {
        return Err("its fitness is not least squares (rmse)".into());
    }
    if !matches!(spec.outputs.as_slice(), [o] if o.ty == ScalarType::Float) {
        return Err("it does not have one float output".into());
    }
    if spec.inputs.iter().any(|i| i.ty == InputType::IntArray) {
        return Err("it has an int[] input".into());
    }
    super::interp_supported(problem).map_err(|e| e.to_string())
}

/// The dual (value and tangent) CUDA C of `op`: `t`/`dt` the top and its derivatives, `st`/`sdt`
/// the cells below, `vars`/`vdt` the variable slots, `P` the program's parameter values.
fn dual(op: Op) -> String {
    let zero = "FORK dt[k] = 0.0f;";
    let pop_dt = "FORK dt[k] = sdt[sp][k];";
    let push_dt = "FORK sdt[sp][k] = dt[k];";
    // `f(x)` in float or double with the derivative's slope `s`, from `x` (before) and `t` (after).
    let unary = |field: &str, call: &str, slope: &str| {
        let ty = if field == "f" { "float" } else { "double" };
        format!(
            "{{ const {ty} x = t.{field}; t.{field} = {call}(x); if (gpfarm_deriv) {{ const float s = (float)({slope}); FORK dt[k] *= s; }} }}"
        )
    };
    let binary = |field: &str, op: &str, da: &str, db: &str| {
        format!(
            "{{ --sp; const V a = st[sp]; if (gpfarm_deriv) {{ const float sa = (float)({da}), sb = (float)({db}); FORK dt[k] = MIXF(sa, sdt[sp][k]) + MIXF(sb, dt[k]); }} t.{field} = a.{field} {op} t.{field}; }}"
        )
    };
    match op {
        Op::End | Op::Jmp | Op::Step | Op::CvtFD | Op::CvtDF => op.cuda().to_owned(),
        Op::PushI | Op::PushD => format!("{{ {push_dt} {} {zero} }}", op.cuda()),
        Op::PushF => format!(
            "{{ {push_dt} st[sp++] = t; const unsigned bits = prog[pc++]; \
             if (arg) {{ t.f = P[arg - 1]; FORK dt[k] = (k == (int)arg - 1) ? 1.0f : 0.0f; }} \
             else {{ t.f = __int_as_float((int)bits); {zero} }} }}"
        ),
        Op::Load => format!(
            "{{ {push_dt} st[sp++] = t; t = vars[arg]; if (STORED(arg)) {{ FORK dt[k] = vdt[arg][k]; }} else {{ {zero} }} }}"
        ),
        Op::Store => {
            format!("{{ FORK vdt[arg][k] = dt[k]; MARK(arg); vars[arg] = t; t = st[--sp]; {pop_dt} }}")
        }
        Op::Out => {
            format!("{{ if (arg == 0) {{ FORK dout[k] = dt[k]; }} out[arg] = t; t = st[--sp]; {pop_dt} }}")
        }
        Op::Jz => format!("{{ int z = t.i; t = st[--sp]; {pop_dt} if (z == 0) pc = arg; }}"),
        Op::Read
        | Op::CvtIF
        | Op::CvtID
        | Op::CvtFI
        | Op::CvtDI
        | Op::NegI
        | Op::BitNot
        | Op::NotI
        | Op::NotF
        | Op::NotD
        | Op::TruthI
        | Op::TruthF
        | Op::TruthD => format!("{{ {} {zero} }}", op.cuda()),
        Op::NegF | Op::NegD => format!("{{ {} FORK dt[k] = -dt[k]; }}", op.cuda()),
        Op::AddI
        | Op::SubI
        | Op::MulI
        | Op::DivI
        | Op::Rem
        | Op::And
        | Op::Or
        | Op::Xor
        | Op::Shl
        | Op::Shr
        | Op::LtI
        | Op::GtI
        | Op::LeI
        | Op::GeI
        | Op::EqI
        | Op::NeI
        | Op::LtF
        | Op::GtF
        | Op::LeF
        | Op::GeF
        | Op::EqF
        | Op::NeF
        | Op::LtD
        | Op::GtD
        | Op::LeD
        | Op::GeD
        | Op::EqD
        | Op::NeD
        | Op::LAnd
        | Op::LOr => format!("{{ {} {zero} }}", op.cuda()),
        Op::AddF => binary("f", "+", "1.0", "1.0"),
        Op::SubF => binary("f", "-", "1.0", "-1.0"),
        Op::MulF => binary("f", "*", "(double)t.f", "(double)a.f"),
        Op::DivF => binary("f", "/", "1.0 / (double)t.f", "-(double)a.f / ((double)t.f * (double)t.f)"),
        Op::AddD => binary("d", "+", "1.0", "1.0"),
        Op::SubD => binary("d", "-", "1.0", "-1.0"),
        Op::MulD => binary("d", "*", "t.d", "a.d"),
        Op::DivD => binary("d", "/", "1.0 / t.d", "-a.d / (t.d * t.d)"),
        Op::SinF => unary("f", "sinf", "cosf(x)"),
        Op::CosF => unary("f", "cosf", "-sinf(x)"),
        Op::ExpF => unary("f", "expf", "t.f"),
        Op::LogF => unary("f", "logf", "1.0f / x"),
        Op::SqrtF => unary("f", "sqrtf", "0.5f / t.f"),
        Op::FabsF => unary("f", "fabsf", "x < 0.0f ? -1.0f : 1.0f"),
        Op::TanhF => unary("f", "tanhf", "1.0f - t.f * t.f"),
        Op::SinD => unary("d", "sin", "cos(x)"),
        Op::CosD => unary("d", "cos", "-sin(x)"),
        Op::ExpD => unary("d", "exp", "t.d"),
        Op::LogD => unary("d", "log", "1.0 / x"),
        Op::SqrtD => unary("d", "sqrt", "0.5 / t.d"),
        Op::FabsD => unary("d", "fabs", "x < 0.0 ? -1.0 : 1.0"),
        Op::TanhD => unary("d", "tanh", "1.0 - t.d * t.d"),
        Op::PowF | Op::PowD => {
            let (f, ty, pow, log) =
                if op == Op::PowF { ("f", "float", "powf", "logf") } else { ("d", "double", "pow", "log") };
            format!(
                "{{ --sp; const V a = st[sp]; const {ty} r = {pow}(a.{f}, t.{f}); if (gpfarm_deriv) {{ \
                 const double sa = (double)(t.{f} * {pow}(a.{f}, t.{f} - 1)); \
                 const double sb = a.{f} > 0 ? (double)(r * {log}(a.{f})) : 0.0; \
                 FORK dt[k] = (float)(MIX(sa, (double)sdt[sp][k]) + MIX(sb, (double)dt[k])); }} t.{f} = r; }}"
            )
        }
        Op::PdivF | Op::PdivD => {
            let (f, abs, threshold, one) = if op == Op::PdivF {
                ("f", "fabsf", "0.001f", "1.0f")
            } else {
                ("d", "fabs", "0.001", "1.0")
            };
            format!(
                "{{ --sp; const V a = st[sp]; const bool on = {abs}(t.{f}) > {threshold}; if (gpfarm_deriv) {{ \
                 const float sa = on ? (float)(1.0 / (double)t.{f}) : 0.0f, \
                 sb = on ? (float)(-(double)a.{f} / ((double)t.{f} * (double)t.{f})) : 0.0f; \
                 FORK dt[k] = MIXF(sa, sdt[sp][k]) + MIXF(sb, dt[k]); }} t.{f} = on ? a.{f} / t.{f} : {one}; }}"
            )
        }
        Op::FminF | Op::FmaxF | Op::FminD | Op::FmaxD => {
            let (f, ty, call) = match op {
                Op::FminF => ("f", "float", "fminf"),
                Op::FmaxF => ("f", "float", "fmaxf"),
                Op::FminD => ("d", "double", "fmin"),
                _ => ("d", "double", "fmax"),
            };
            format!(
                "{{ --sp; const V a = st[sp]; const {ty} r = {call}(a.{f}, t.{f}); \
                 const bool first = r == a.{f} || isnan(t.{f}); FORK dt[k] = first ? sdt[sp][k] : dt[k]; t.{f} = r; }}"
            )
        }
    }
}

/// The reverse-mode (adjoint) CUDA C of `op` for straight-line float programs: what the forward
/// sweep does (`tv` the top, `fst` the cells below, operands kept on the tape `ta`/`tb` at op
/// `i`) and what the backward sweep does (`gt` the top's adjoint, `gs` the cells'); `None` for
/// ops a program fitted this way may not have (they run forward, in [`dual`]). The values are
/// the evaluating kernel's ops, so the outputs are the interpreter's bit for bit; the slopes are
/// [`dual`]'s.
fn adjoint(op: Op) -> Option<(String, String)> {
    // The tape is written only where the backward sweep follows (a run with derivatives), and
    // only for ops whose slopes read their operands (not `+` and `-`).
    // An operand that a leaf pushed just before (`lfl`, see the scan) is not kept: the backward
    // sweep reads it again where the leaf did (`gpfarm_leaf`), the same value.
    let keep = |a: &str, b: &str| {
        format!(
            "if (gpfarm_deriv) {{ const unsigned lf = lfl[i]; if (!(lf & 2u)) ta[i] = {a}; if (!(lf & 1u)) tb[i] = {b}; }}"
        )
    };
    let kept_pair = "const unsigned lf = lfl[i]; const float a = (lf & 2u) ? gpfarm_leaf(i - 2) : ta[i], b = (lf & 1u) ? gpfarm_leaf(i - 1) : tb[i]; ";
    // `+` and `-`, whose slopes are constants, keep nothing and read nothing.
    let binary = |sym: &str, sa: &str, sb: &str| {
        let constant = [sa, sb].iter().all(|s| s.trim_start_matches('-') == "1.0f");
        let (kept, read) = match constant {
            true => (String::new(), ""),
            false => (keep("a", "tv"), kept_pair),
        };
        (
            format!("{{ const float a = fst[--sp]; {kept} tv = a {sym} tv; }}"),
            format!(
                "{{ {read}const float sa = {sa}, sb = {sb}; gs[gp++] = MIXF(sa, gt); gt = MIXF(sb, gt); }}"
            ),
        )
    };
    // `f(x)` whose slope reads `x` (its operand) or `y` (its value), the one kept.
    let unary = |call: &str, slope: &str, reads: &str| {
        let (kept, read) = match reads {
            "x" => (
                "if (gpfarm_deriv && !(lfl[i] & 1u)) ta[i] = x;",
                "(lfl[i] & 1u) ? gpfarm_leaf(i - 1) : ta[i]",
            ),
            _ => ("if (gpfarm_deriv) ta[i] = tv;", "ta[i]"),
        };
        (
            format!("{{ const float x = tv; tv = {call}(tv); {kept} }}"),
            format!("{{ const float {reads} = {read}; gt *= (float)({slope}); }}"),
        )
    };
    let pair = |call: &str| {
        (
            format!("{{ const float a = fst[--sp]; {} tv = {call}(a, tv); }}", keep("a", "tv")),
            format!(
                "{{ {kept_pair}const float r = {call}(a, b); const bool first = r == a || isnan(b); \
                 gs[gp++] = first ? gt : 0.0f; gt = first ? 0.0f : gt; }}"
            ),
        )
    };
    Some(match op {
        Op::End => ("i = nops;".into(), String::new()),
        Op::PushF => (
            "fst[sp++] = tv; tv = arg ? P[arg - 1] : __int_as_float((int)prog[opat[i] + 1]);".into(),
            "if (arg && arg <= NP) grad[arg - 1] += gt; gt = gs[--gp];".into(),
        ),
        Op::Load => ("fst[sp++] = tv; tv = vars[arg].f;".into(), "gt = gs[--gp];".into()),
        Op::Out => (
            "if (arg == 0) out0 = tv; tv = fst[--sp];".into(),
            "gs[gp++] = gt; gt = (arg == 0 && !seen) ? 1.0f : 0.0f; if (arg == 0) seen = true;".into(),
        ),
        Op::NegF => ("tv = -tv;".into(), "gt = -gt;".into()),
        Op::AddF => binary("+", "1.0f", "1.0f"),
        Op::SubF => binary("-", "1.0f", "-1.0f"),
        Op::MulF => binary("*", "b", "a"),
        Op::DivF => binary("/", "(float)(1.0 / (double)b)", "(float)(-(double)a / ((double)b * (double)b))"),
        Op::SinF => unary("sinf", "cosf(x)", "x"),
        Op::CosF => unary("cosf", "-sinf(x)", "x"),
        Op::ExpF => unary("expf", "y", "y"),
        Op::LogF => unary("logf", "1.0f / x", "x"),
        Op::SqrtF => unary("sqrtf", "0.5f / y", "y"),
        Op::FabsF => unary("fabsf", "x < 0.0f ? -1.0f : 1.0f", "x"),
        Op::TanhF => unary("tanhf", "1.0f - y * y", "y"),
        Op::PowF => (
            format!("{{ const float a = fst[--sp]; {} tv = powf(a, tv); }}", keep("a", "tv")),
            format!(
                "{{ {kept_pair}const float r = powf(a, b); const double sa = (double)(b * powf(a, b - 1)); \
                 const double sb = a > 0 ? (double)(r * logf(a)) : 0.0; gs[gp++] = (float)MIX(sa, (double)gt); gt = (float)MIX(sb, (double)gt); }}"
            ),
        ),
        Op::PdivF => (
            format!(
                "{{ const float a = fst[--sp]; {} tv = fabsf(tv) > 0.001f ? a / tv : 1.0f; }}",
                keep("a", "tv")
            ),
            binary(
                "/",
                "fabsf(b) > 0.001f ? (float)(1.0 / (double)b) : 0.0f",
                "fabsf(b) > 0.001f ? (float)(-(double)a / ((double)b * (double)b)) : 0.0f",
            )
            .1,
        ),
        Op::FminF => pair("fminf"),
        Op::FmaxF => pair("fmaxf"),
        _ => return None,
    })
}

/// Where `words` (a program [`super::assemble_structure`] wrote) is straight-line float code
/// (every op one the reverse sweeps know, [`adjoint`], up to `End`): how many ops it has and
/// where its last one starts.
fn straight_ops(words: &[u32]) -> Option<(usize, usize)> {
    let (mut pc, mut n, mut last) = (0, 0, 0);
    while let Some(&w) = words.get(pc) {
        let op = Op::ALL.get((w & 0xff) as usize).copied()?;
        if op == Op::End {
            return Some((n, last));
        }
        adjoint(op)?;
        (n, last) = (n + 1, pc);
        pc += if op == Op::PushF { 2 } else { 1 };
    }
    None
}

/// Whether straight-line code of `ops` ops whose last starts at `last` ([`straight_ops`]) fits
/// the kernels' tape: at most [`FIT_TAPE`] ops, each at a word the tape's 16 bits can name.
fn fits_tape((ops, last): (usize, usize)) -> bool {
    ops <= FIT_TAPE && last <= 0xffff
}

/// Whether the fitting kernels differentiate `words` (a program [`super::assemble_structure`]
/// wrote) in reverse: straight-line float code of at most [`FIT_TAPE`] ops, as the kernels'
/// own scan decides. Programs of more than `FIT_FORWARD_PARAMS` parameters are fitted on the
/// GPU only then.
pub fn fitted_in_reverse(words: &[u32]) -> bool {
    straight_ops(words).is_some_and(fits_tape)
}

/// Whether a program of `params` parameters and stack `depth` whose words are `words` (as
/// [`super::assemble_structure`] wrote them) runs in its width's small-stack fitting kernel
/// (`fit_kernel_small`), whose per-case arrays stay in the L1 cache: a width of
/// `FIT_SMALL_WIDTHS`, a stack under `FIT_SMALL_DEPTH` values, straight-line float code (the
/// small kernels' forward sweep knows only its ops) and, where the kernel differentiates the
/// program in reverse, at most `FIT_SMALL_TAPE` ops. Such a program takes the same path
/// through either kernel (the same ops, forward or reverse alike), so its sums are the same bits
/// in both.
pub fn fits_small(words: &[u32], params: usize, depth: usize) -> bool {
    let Some(w) = fit_width(params) else { return false };
    if !FIT_SMALL_WIDTHS.contains(&w) || depth >= FIT_SMALL_DEPTH {
        return false;
    }
    let Some(shape) = straight_ops(words) else { return false };
    w < FIT_REVERSE_WIDTH || !fits_tape(shape) || shape.0 <= FIT_SMALL_TAPE
}

/// Whether a program of `params` parameters and stack `depth` whose words are `words` is fitted
/// on the GPU (else on the CPU). The kernels' sweeps fail a case whose stack reaches
/// [`FIT_DEPTH`] values, so such a program is fitted on the CPU.
pub fn fits_on_gpu(words: &[u32], params: usize, depth: usize) -> bool {
    depth < FIT_DEPTH && (params <= FIT_FORWARD_PARAMS || (params <= FIT_PARAMS && fitted_in_reverse(words)))
}

/// CUDA C of the fitting kernels for `problem` (one per width of [`FIT_WIDTHS`], named by
/// `fit_kernel`, and [`FIT_TILES_KERNEL`]). A fitting kernel's parameters, in order: one
/// pointer per input of the problem's compiled kernels (in [`Problem::kernel_params`] order), the
/// targets, `int ncases`, the programs' words, each program's first word, the parameter values,
/// each program's first value, each program's number of parameters, the step limit per case,
/// `int ntiles`, `int rows`, where each program's sums start among the launch's programs'
/// ([`crate::gpu::contract::sums_of`] per program, `at[0]` the first's) and the tile sums:
/// `ntiles` blocks of a program's sums per program, from `(at[p] - at[0]) * ntiles`. The tiles
/// kernel's: those tile sums, `int ntiles`, `int nprograms`, the programs' parameter counts,
/// `at`, and the sums, each program's from `at[p]`. A negative count in either kernel's launch
/// means the program is not run there and keeps its sums (the fitting loop's starts that have
/// ended). The source also holds the fitting loop's step kernel ([`FIT_STEP_KERNEL`],
/// the private `fit_step_source`).
pub fn fit_source(problem: &Problem) -> Result<String, GpuError> {
    fit_source_for(problem, &FIT_WIDTHS)
}

/// As [`fit_source`], with the fitting kernels of `widths` only (each one of [`FIT_WIDTHS`]), so
/// that each width can be compiled apart, at the same time as the others.
pub fn fit_source_for(problem: &Problem, widths: &[usize]) -> Result<String, GpuError> {
    if let Some(w) = widths.iter().find(|w| !FIT_WIDTHS.contains(w)) {
        return Err(GpuError::Problem(format!("{w} is not a fitting kernel's width ({FIT_WIDTHS:?})")));
    }
    let (template, decl, args) = fit_template(problem, Members::Interpreted)?;
    let mut kernels = String::new();
    let plain = fit_plain();
    for &w in widths {
        // With a plain twin, the width's kernel runs only the starts with derivatives.
        let twin = plain.is_some() && FIT_PLAIN_WIDTHS.contains(&w);
        writeln!(
            kernels,
            "extern \"C\" __global__ void __launch_bounds__({}) {}({decl})\n{{\n    gpfarm_fit_body<{w}, {}, {FIT_TAPE}, false, {}>({args});\n}}\n",
            fit_bounds(w, true),
            fit_kernel(w),
            FIT_DEPTH + 2,
            if twin { 2 } else { 0 },
        )
        .ok();
        if let (true, Some(blocks)) = (twin, plain) {
            writeln!(
                kernels,
                "extern \"C\" __global__ void __launch_bounds__({BLOCK}, {blocks}) {}({decl})\n{{\n    gpfarm_fit_body<{w}, {}, {FIT_TAPE}, false, 1>({args});\n}}\n",
                fit_kernel_plain(w),
                FIT_DEPTH + 2,
            )
            .ok();
        }
        if FIT_SMALL_WIDTHS.contains(&w) {
            writeln!(
                kernels,
                "extern \"C\" __global__ void __launch_bounds__({BLOCK}) {}({decl})\n{{\n    gpfarm_fit_body<{w}, {}, {FIT_SMALL_TAPE}, GPFARM_FIT_STRAIGHT>({args});\n}}\n",
                fit_kernel_small(w),
                FIT_SMALL_DEPTH + 2,
            )
            .ok();
        }
    }
    let step = fit_step_source();
    Ok(format!(
        "{template}\n{kernels}\n\
extern \"C\" __global__ void {FIT_TILES_KERNEL}(const double* __restrict__ partial, int ntiles, int nprograms,\n\
    const int* __restrict__ nparams, const long long* __restrict__ at, double* __restrict__ sums)\n\
{{\n\
    // Program p's sums (1 + np + np(np+1)/2 of them), the sum of its tiles' in tile order, to\n\
    // sums[at[p]].\n\
    const int p = blockIdx.x;\n\
    if (p >= nprograms) return;\n\
    // A start not run this round (a negative count) keeps its sums.\n\
    const int np = nparams[p];\n\
    if (np < 0) return;\n\
    const int used = 1 + np + np * (np + 1) / 2;\n\
    const size_t base = (size_t)(at[p] - at[0]) * ntiles;\n\
    for (int i = threadIdx.x; i < used; i += blockDim.x) {{\n\
        double s = 0.0;\n\
        for (int tile = 0; tile < ntiles; ++tile) s += partial[base + (size_t)tile * used + i];\n\
        sums[at[p] + i] = s;\n\
    }}\n\
}}\n\
{step}"
    ))
}

/// The step kernel ([`FIT_STEP_KERNEL`]): one Levenberg–Marquardt iteration of every start, a
/// warp each, in the fitting loop that runs on the GPU without the host
/// (`GpuEvaluator::fit`). It is [`gpfarm_gp::LmStart`] written in CUDA C, with the same
/// constants and the same double operations in the same order, each rounded on its own
/// (`__dadd_rn` and the like, never contracted into a fused multiply-add), so that a start
/// fitted on the GPU takes the values the host's `LmStart` would, bit for bit, from the same
/// sums. The Cholesky factor's rows below each column are shared among the lanes; each entry is
/// still one sum in the host's order. (Compiler flags that flush subnormal floats to zero, such
/// as `--use_fast_math`, would make a trial's rounding differ from the host's for values that
/// small.)
///
/// Its parameters: the number of starts, the mode (bits [`FIT_STEP_BEGIN`], [`FIT_STEP_JUDGE`],
/// [`FIT_STEP_TRIAL`]), each start's parameter count, first value and first sum (as the fitting
/// kernels take them), the sums the last launches wrote, the sums at each start's best values,
/// a scratch of the same layout, the values the fitting kernels run (the trials), the best
/// values, each start's λ, whether it goes on, its count for the next launches (-1: not run, 0:
/// a trial's plain run, the sum of squares alone), its sum of squares where it began, and at its
/// best values, the launches that ran it (the first, and one for each run queued; read back as
/// `Fitted::launches`) and the trials it made, then the trials a start may make.
fn fit_step_source() -> String {
    use gpfarm_gp::fit::{CONVERGED, DIAGONAL_MIN, LAMBDA_FACTOR, LAMBDA_MAX, LAMBDA_MIN, LAMBDA_START};
    format!(
        r#"
// One start's trial from its best values and their sums b (packed): the damped step
// (JᵀJ + λ diag(JᵀJ)) δ = −Jᵀr by Cholesky in w (the layout of b), the values b's plus δ rounded
// to float, written to p. False (the start ends) where a sum is not finite, the system is not
// positive definite, the values do not move or are not finite, or the step is predicted to gain
// no more than CONVERGED of the sum of squares.
__device__ bool gpfarm_lm_trial(int np, double lam, const double* __restrict__ b, double* __restrict__ w,
    const float* __restrict__ bp, float* __restrict__ p, int lane)
{{
    const unsigned all = 0xffffffffu;
    const int ns = 1 + np + np * (np + 1) / 2;
    bool bad = false;
    for (int i = 1 + lane; i < ns; i += 32) bad |= !isfinite(b[i]);
    if (__any_sync(all, bad)) return false;
    double* __restrict__ x = w + 1;
    double* __restrict__ a = w + 1 + np;
#define A(i, k) a[(i) * ((i) + 1) / 2 + (k)]
    for (int i = lane; i < np; i += 32) x[i] = -b[1 + i];
    for (int q = lane; q < np * (np + 1) / 2; q += 32) a[q] = b[1 + np + q];
    __syncwarp();
    for (int i = lane; i < np; i += 32) {{
        const double d = A(i, i);
        A(i, i) = __dadd_rn(d, __dmul_rn(lam, fmax(d, {DIAGONAL_MIN:e})));
    }}
    __syncwarp();
    for (int c = 0; c < np; ++c) {{
        double d = 0.0;
        int ok = 1;
        if (lane == 0) {{
            d = A(c, c);
            for (int k = 0; k < c; ++k) d = __dsub_rn(d, __dmul_rn(A(c, k), A(c, k)));
            if (d <= 0.0 || !isfinite(d)) ok = 0;
            else {{ d = __dsqrt_rn(d); A(c, c) = d; }}
        }}
        if (!__shfl_sync(all, ok, 0)) return false;
        d = __shfl_sync(all, d, 0);
        __syncwarp();
        for (int i = c + 1 + lane; i < np; i += 32) {{
            double s = A(i, c);
            for (int k = 0; k < c; ++k) s = __dsub_rn(s, __dmul_rn(A(i, k), A(c, k)));
            A(i, c) = __ddiv_rn(s, d);
        }}
        __syncwarp();
    }}
    if (lane == 0) {{
        for (int i = 0; i < np; ++i) {{
            double s = x[i];
            for (int k = 0; k < i; ++k) s = __dsub_rn(s, __dmul_rn(A(i, k), x[k]));
            x[i] = __ddiv_rn(s, A(i, i));
        }}
        for (int i = np - 1; i >= 0; --i) {{
            double s = x[i];
            for (int k = i + 1; k < np; ++k) s = __dsub_rn(s, __dmul_rn(A(k, i), x[k]));
            x[i] = __ddiv_rn(s, A(i, i));
        }}
    }}
#undef A
    __syncwarp();
    bool moved = false, finite = true;
    for (int i = lane; i < np; i += 32) {{
        const float t = __double2float_rn(__dadd_rn((double)bp[i], x[i]));
        moved |= t != bp[i];
        finite &= isfinite(t);
        p[i] = t;
        // The step as rounded, for the predicted gain (the solve's x is not read again).
        x[i] = __dsub_rn((double)t, (double)bp[i]);
    }}
    if (!(__any_sync(all, moved) && __all_sync(all, finite))) return false;
    __syncwarp();
    // The gain the linear model predicts for the step as rounded (gpfarm_gp::fit::predicted_gain,
    // in its order): the start ends where it is no more than CONVERGED of the sum of squares.
    int gains = 0;
    if (lane == 0) {{
        const double* __restrict__ g = b + 1;
        const double* __restrict__ bt = b + 1 + np;
        double q = 0.0;
        for (int i = 0; i < np; ++i) {{
            double s = 0.0;
            for (int k = 0; k < i; ++k) s = __dadd_rn(s, __dmul_rn(bt[i * (i + 1) / 2 + k], x[k]));
            const double r = __dadd_rn(__dadd_rn(__dmul_rn(2.0, s), __dmul_rn(bt[i * (i + 1) / 2 + i], x[i])),
                __dmul_rn(2.0, g[i]));
            q = __dadd_rn(q, __dmul_rn(x[i], r));
        }}
        gains = -q > __dmul_rn({CONVERGED:e}, b[0]);
    }}
    return __shfl_sync(all, gains, 0) != 0;
}}

extern "C" __global__ void __launch_bounds__(32) {FIT_STEP_KERNEL}(int nprograms, int mode,
    const int* __restrict__ nparams, const unsigned* __restrict__ poffsets, const long long* __restrict__ at,
    const double* __restrict__ sums, double* __restrict__ best, double* __restrict__ work,
    float* __restrict__ params, float* __restrict__ bestp, double* __restrict__ lambda,
    int* __restrict__ active, int* __restrict__ running, double* __restrict__ first, double* __restrict__ sse,
    int* __restrict__ launches, int* __restrict__ trials, int iterations)
{{
    const int j = blockIdx.x;
    if (j >= nprograms) return;
    const int lane = (int)threadIdx.x;
    const int np = nparams[j];
    const int ns = 1 + np + np * (np + 1) / 2;
    const double* __restrict__ s = sums + at[j];
    double* __restrict__ b = best + at[j];
    float* __restrict__ p = params + poffsets[j];
    float* __restrict__ bp = bestp + poffsets[j];
    double lam = lambda[j];
    int on = active[j];
    // The count the last launches ran the start with: np (with derivatives), 0 (a trial's sum of
    // squares alone) or -1 (not run).
    const int ran = running[j];
    int tried = trials[j];
    // A sum of squares that is not finite counts as infinite, as the host's sums make it.
    const double now = isfinite(s[0]) ? s[0] : __longlong_as_double(0x7ff0000000000000LL), was = b[0];
    __syncwarp();
    if (mode & {FIT_STEP_BEGIN}) {{
        for (int i = lane; i < ns; i += 32) b[i] = i == 0 ? now : s[i];
        for (int i = lane; i < np; i += 32) bp[i] = p[i];
        lam = {LAMBDA_START:e};
        on = isfinite(now);
        tried = 0;
        if (lane == 0) {{ first[j] = now; sse[j] = now; }}
    }}
    int go = -1;
    if (!(mode & {FIT_STEP_BEGIN}) && (mode & {FIT_STEP_JUDGE}) && ran >= 0) {{
        if (ran == 0 && now < was && tried < iterations && !(__dsub_rn(was, now) <= __dmul_rn({CONVERGED:e}, now))) {{
            // A trial whose sum of squares alone is lower, and after which the start goes on (it
            // is not the last and gains more than CONVERGED): run it again with its derivatives,
            // then take it (the same sum of squares, bit for bit).
            go = np;
        }} else if (ran == 0 && now < was) {{
            // Lower, but the start ends with it (gpfarm_gp::LmStart::judge_plain): taken without
            // derivatives, which no next trial would read (the best sums beyond the sum of squares
            // are left as they were, and not read again).
            if (lane == 0) b[0] = now;
            for (int i = lane; i < np; i += 32) bp[i] = p[i];
            on = 0;
            if (lane == 0) sse[j] = now;
        }} else if (ran > 0 && now < was) {{
            for (int i = lane; i < ns; i += 32) b[i] = i == 0 ? now : s[i];
            for (int i = lane; i < np; i += 32) bp[i] = p[i];
            lam = fmax(__ddiv_rn(lam, {LAMBDA_FACTOR:e}), {LAMBDA_MIN:e});
            if (__dsub_rn(was, now) <= __dmul_rn({CONVERGED:e}, now)) on = 0;
            if (lane == 0) sse[j] = now;
        }} else {{
            lam = __dmul_rn(lam, {LAMBDA_FACTOR:e});
            if (lam > {LAMBDA_MAX:e}) on = 0;
        }}
    }}
    __syncwarp();
    if (go < 0 && (mode & {FIT_STEP_TRIAL}) && on && tried < iterations) {{
        // The next trial runs plain first: its derivatives only if it is lower and not the end.
        if (gpfarm_lm_trial(np, lam, b, work + at[j], bp, p, lane)) {{ go = 0; ++tried; }}
        else on = 0;
    }}
    if (lane == 0) {{
        lambda[j] = lam; active[j] = on; running[j] = go; trials[j] = tried;
        // The launches that ran the start: the first, and one for each run queued (a trial's plain
        // run, and its run with derivatives where that is lower and the start goes on).
        launches[j] = ((mode & {FIT_STEP_BEGIN}) ? 1 : launches[j]) + (go >= 0 ? 1 : 0);
    }}
}}
"#
    )
}

/// CUDA C of one compiled fitting kernel ([`FIT_CODE_KERNEL`]) of width `width` (one of
/// [`FIT_WIDTHS`]) for `members`: programs [`super::assemble_structure`] wrote, each
/// straight-line float code ([`fitted_in_reverse`]) of at most `width` parameters. It takes the
/// interpreter's fitting kernels' parameters ([`fit_source`]) and computes the same sums in the
/// same order, except that `code` is not read and `offsets` names each program's member (its
/// index in `members`) instead of its first word. Each member's forward and backward sweeps are
/// written out as straight-line code, values in registers, with the interpreter's ops and slopes
/// in the interpreter's order: its sums are those of the interpreter's fitting kernels in
/// reverse, bit for bit (members are fitted so only where the interpreter's kernel of their width
/// differentiates in reverse too, [`fit_compiles`]). The tiles are summed by the
/// interpreter's [`FIT_TILES_KERNEL`].
pub fn fit_code_source(problem: &Problem, width: usize, members: &[&[u32]]) -> Result<String, GpuError> {
    known_width(width)?;
    let mut cases = String::new();
    for (m, words) in members.iter().enumerate() {
        let code = straight_code(words, width).ok_or_else(|| {
            GpuError::Problem(format!(
                "member {m} is not straight-line float code of at most {width} parameters"
            ))
        })?;
        writeln!(cases, "            case {m}: {{\n{code}            }} break;").ok();
    }
    fit_code_kernel(problem, width, Members::Written(&cases))
}

/// `width`, or why it is not one of [`FIT_WIDTHS`].
pub(crate) fn known_width(width: usize) -> Result<(), GpuError> {
    match FIT_WIDTHS.contains(&width) {
        true => Ok(()),
        false => Err(GpuError::Problem(format!("{width} is not a fitting kernel's width ({FIT_WIDTHS:?})"))),
    }
}

/// The compiled fitting kernel ([`FIT_CODE_KERNEL`]) of width `width` around `members`.
fn fit_code_kernel(problem: &Problem, width: usize, members: Members<'_>) -> Result<String, GpuError> {
    let (template, decl, args) = fit_template(problem, members)?;
    Ok(format!(
        "{template}\nextern \"C\" __global__ void __launch_bounds__({}) {FIT_CODE_KERNEL}({decl})\n{{\n    gpfarm_fit_body<{width}, 2, 1>({args});\n}}\n",
        fit_bounds(width, false)
    ))
}

/// The function a PTX fitting unit defines ([`crate::ptx::fit_member_unit`]) for the template
/// of [`fit_link_source`] to call: `int gpfarm_fit_member(unsigned member, const V* vars, const
/// float* P, float* out0, float* grad)`, the case's output into `out0` and the derivatives of
/// the parameters the member reads stored into `grad` (the caller zeroes it, so the others stay
/// 0); 1 where `member` is not one of the unit's.
pub const FIT_MEMBER_FUNCTION: &str = "gpfarm_fit_member";

/// NVRTC's options for [`fit_link_source`] besides the run's: relocatable device code, so that
/// nvJitLink can link it with a PTX unit that defines [`FIT_MEMBER_FUNCTION`].
pub const FIT_LINK_FLAGS: &[&str] = &["-rdc=true"];

/// CUDA C of the fitting template the PTX route's fitting units are linked with: the compiled
/// fitting kernel ([`FIT_CODE_KERNEL`]) of width `width`, as [`fit_code_source`] writes it,
/// except that each case calls [`FIT_MEMBER_FUNCTION`] (declared, not defined) where that writes
/// the members in. Compiled once per problem and width with [`FIT_LINK_FLAGS`] into a
/// relocatable CUBIN; each unit's PTX ([`crate::ptx::fit_member_unit`]) completes it. The
/// member's ops are those [`fit_code_source`] writes, each rounded on its own, so the sums are
/// the interpreter's in reverse bit for bit, as the compiled kernels' are.
pub fn fit_link_source(problem: &Problem, width: usize) -> Result<String, GpuError> {
    known_width(width)?;
    fit_code_kernel(problem, width, Members::Linked)
}

/// The widths whose fitting kernels ask the compiler for a number of blocks per multiprocessor
/// ([`FIT_WIDE_BLOCKS`] for the compiled kernels, [`interpreted_blocks`] for the interpreter's):
/// first two: capping their registers so that two blocks fit made widths 32 and 64 faster a
/// launch, though ptxas spills under the cap (docs/regression.md, "The fitting constants'
/// measurements", gives the figures). Width 128, not measured, keeps its registers.
const FIT_WIDE_WIDTHS: [usize; 3] = [16, 32, 64];
/// Blocks per multiprocessor the wide fitting kernels ask for (`__launch_bounds__`): their
/// registers capped so that two blocks fit, where one did, latency-bound. The interpreter's
/// kernels ask for more ([`interpreted_blocks`]).
const FIT_WIDE_BLOCKS: u32 = 2;

/// nvJitLink's `-maxrregcount` for the PTX route's fitting units: the registers a thread of the
/// wide fitting kernels may have (a multiprocessor's 65,536 shared by two blocks
/// of [`BLOCK`] threads, 128), which a function they call may not exceed (nvJitLink refuses the
/// link otherwise).
pub const FIT_LINK_MAX_REGISTERS: u32 = 65536 / (BLOCK * FIT_WIDE_BLOCKS);

/// Blocks per multiprocessor the interpreter's fitting kernels of the wide widths ask for, by
/// width (16, 32, 64): at most 85, 64 and 85 registers a thread instead of 128.
/// - Widths 16 and 32 at three blocks: the GPU worker's fitting is faster than with two blocks,
///   and the runs are the same.
/// - Once widths 32 and 64 lost their forward sweep (every program they take is differentiated
///   in reverse, [`FIT_FORWARD_PARAMS`]), width 32 fits four blocks (64 registers, a few bytes
///   spilled) and width 64 three (80 registers). Each made the worker's fitting faster, the runs
///   the same.
///
/// docs/regression.md, "The fitting constants' measurements", gives the figures.
///
/// The compiled fitting kernels keep [`FIT_WIDE_BLOCKS`], the bound their linked members are held
/// to ([`FIT_LINK_MAX_REGISTERS`]).
fn interpreted_blocks(width: usize) -> u32 {
    match width {
        32 => 4,
        _ => 3,
    }
}

/// The `__launch_bounds__` of the fitting kernel of width `width`, the interpreter's where
/// `interpreted`: [`FIT_WIDE_BLOCKS`] blocks per multiprocessor for the wide widths,
/// [`interpreted_blocks`] for the interpreter's, or, for the interpreter's wide widths,
/// `GPFARM_FIT_WIDE_BLOCKS_<width>` or else `GPFARM_FIT_WIDE_BLOCKS` where set to a number from 1
/// to 8 (diagnostics for tuning; the values do not depend on them).
fn fit_bounds(width: usize, interpreted: bool) -> String {
    if !FIT_WIDE_WIDTHS.contains(&width) {
        return BLOCK.to_string();
    }
    let blocks = match interpreted {
        false => FIT_WIDE_BLOCKS,
        true => tuning(&format!("GPFARM_FIT_WIDE_BLOCKS_{width}"), 1..=8)
            .or_else(|| tuning("GPFARM_FIT_WIDE_BLOCKS", 1..=8))
            .map_or(interpreted_blocks(width), |n| n as u32),
    };
    format!("{BLOCK}, {blocks}")
}

/// Blocks per multiprocessor the plain twins of the wide fitting kernels ask for
/// ([`crate::gpu::contract::fit_kernel_plain`]): without derivatives a thread needs far fewer
/// registers, and a block's shared memory is a row of 12 doubles per thread.
const FIT_PLAIN_BLOCKS: usize = 6;

/// The blocks per multiprocessor of the wide kernels' plain twins, or `None` where there are
/// none: [`FIT_PLAIN_BLOCKS`], or `GPFARM_FIT_PLAIN_BLOCKS` where set to a number from 1 to 8;
/// `GPFARM_FIT_PLAIN=0` leaves them out (each width's kernel then runs its plain runs too).
/// Diagnostics for tuning: the sums are the same bits either way.
fn fit_plain() -> Option<usize> {
    (!switched_off("GPFARM_FIT_PLAIN"))
        .then(|| tuning("GPFARM_FIT_PLAIN_BLOCKS", 1..=8).unwrap_or(FIT_PLAIN_BLOCKS))
}

/// Programs of one width per compiled fitting unit at most ([`fit_code_groups`]).
pub const FIT_CODE_MEMBERS: usize = 32;

/// A compiled fitting unit's plan: its width, its members (indices into the programs given to
/// [`fit_code_groups`]) and its source (or why it has none).
#[derive(Debug)]
pub struct FitCodeUnit {
    /// The kernel's width.
    pub width: usize,
    /// Its members, in order.
    pub members: Vec<usize>,
    /// [`fit_code_source`] or [`crate::ptx::fit_member_unit`] of them
    /// ([`crate::unit::FitCodeWriter`]).
    pub source: Result<String, GpuError>,
}

/// `programs` (each its words and parameter count, each taken by [`fit_compiles`]) grouped for
/// compiled fitting units for `workers` compilers side by side: each group a width and its
/// members (indices into `programs`), by width, narrowest first, in the programs' order, each of
/// at most [`FIT_CODE_MEMBERS`] and of no more than a worker's share of the programs (a unit is
/// compiled by one worker, and each member adds to its time). A program of more than
/// [`FIT_PARAMS`] parameters is in none. `crate::unit::fit_units` writes each group's code.
pub fn fit_code_groups(programs: &[(&[u32], usize)], workers: usize) -> Vec<(usize, Vec<usize>)> {
    let per_unit = programs.len().div_ceil(workers.max(1)).clamp(1, FIT_CODE_MEMBERS);
    let mut groups = Vec::new();
    for width in FIT_WIDTHS {
        let of: Vec<usize> =
            (0..programs.len()).filter(|&k| fit_width(programs[k].1) == Some(width)).collect();
        groups.extend(of.chunks(per_unit).map(|chunk| (width, chunk.to_vec())));
    }
    groups
}

/// Whether a program of `params` parameters whose words are `words` (as
/// [`super::assemble_structure`] wrote them) is fitted by a compiled kernel when asked: where the
/// interpreter's fitting kernel differentiates it in reverse ([`fitted_in_reverse`], a width of
/// at least [`FIT_REVERSE_WIDTH`]), so that the compiled kernel's sums are the interpreter's bit
/// for bit and which of the two fits a program never changes a run.
pub fn fit_compiles(words: &[u32], params: usize) -> bool {
    fit_width(params).is_some_and(|w| w >= FIT_REVERSE_WIDTH) && straight_nodes(words, FIT_PARAMS).is_some()
}

/// One op of a straight-line float program, its operands the values of earlier ops.
#[derive(Clone, Copy)]
pub(crate) struct Node {
    pub(crate) op: Op,
    pub(crate) arg: u32,
    /// A float literal's bits.
    pub(crate) bits: u32,
    pub(crate) a: Option<usize>,
    pub(crate) b: Option<usize>,
}

/// `words` (straight-line float code, [`adjoint`]'s ops) as a list of ops, each naming the ops
/// whose values it takes, and the last `Out` of output 0; `None` where the program is not such
/// code, reads a parameter beyond `width`, or stacks [`FIT_DEPTH`] values (where the
/// interpreter's sweep fails its cases).
pub(crate) fn straight_nodes(words: &[u32], width: usize) -> Option<(Vec<Node>, Option<usize>)> {
    if !fitted_in_reverse(words) {
        return None;
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut pc = 0;
    let mut last_out = None;
    loop {
        let w = *words.get(pc)?;
        let op = *Op::ALL.get((w & 0xff) as usize)?;
        let arg = w >> 8;
        let i = nodes.len();
        let mut node = Node { op, arg, bits: 0, a: None, b: None };
        match op {
            Op::End => break,
            Op::PushF if arg as usize > width => return None,
            Op::PushF => {
                node.bits = if arg == 0 { *words.get(pc + 1)? } else { 0 };
                stack.push(i);
            }
            Op::Load => stack.push(i),
            Op::Out => {
                node.a = Some(stack.pop()?);
                if arg == 0 {
                    last_out = Some(i);
                }
            }
            _ if op == Op::NegF || unary_call(op).is_some() => {
                node.a = Some(stack.pop()?);
                stack.push(i);
            }
            _ if binary_slopes(op).is_some() || matches!(op, Op::PowF | Op::FminF | Op::FmaxF) => {
                node.b = Some(stack.pop()?);
                node.a = Some(stack.pop()?);
                stack.push(i);
            }
            _ => return None,
        }
        // The interpreter's sweep fails a case once its stack holds FIT_DEPTH values: such a
        // program is left to it.
        if stack.len() >= FIT_DEPTH {
            return None;
        }
        nodes.push(node);
        pc += if op == Op::PushF { 2 } else { 1 };
    }
    Some((nodes, last_out))
}

/// The forward and backward sweeps of `words` ([`straight_nodes`]) as straight-line CUDA C:
/// `v{i}` op `i`'s value, `g{i}` its adjoint; the output into `out0`, each parameter's derivative
/// added into `grad` in the interpreter's backward order.
fn straight_code(words: &[u32], width: usize) -> Option<String> {
    let (nodes, last_out) = straight_nodes(words, width)?;
    let mut fwd = String::new();
    for (i, n) in nodes.iter().enumerate() {
        let (x, y) = (n.a.unwrap_or(0), n.b.unwrap_or(0));
        let value = match n.op {
            Op::PushF if n.arg > 0 => format!("P[{}]", n.arg - 1),
            Op::PushF => format!("__int_as_float({})", n.bits as i32),
            Op::Load => format!("vars[{}].f", n.arg),
            Op::Out => {
                if n.arg == 0 {
                    writeln!(fwd, "        out0 = v{x};").ok();
                }
                continue;
            }
            Op::NegF => format!("-v{x}"),
            Op::AddF => format!("v{x} + v{y}"),
            Op::SubF => format!("v{x} - v{y}"),
            Op::MulF => format!("v{x} * v{y}"),
            Op::DivF => format!("v{x} / v{y}"),
            Op::PowF => format!("powf(v{x}, v{y})"),
            Op::PdivF => format!("fabsf(v{y}) > 0.001f ? v{x} / v{y} : 1.0f"),
            Op::FminF => format!("fminf(v{x}, v{y})"),
            Op::FmaxF => format!("fmaxf(v{x}, v{y})"),
            op => format!("{}(v{x})", unary_call(op)?),
        };
        writeln!(fwd, "        const float v{i} = {value};").ok();
    }
    // Every value's adjoint starts at 0: those left on the stack at the end keep it, as in the
    // interpreter's backward sweep; each other one is set once, by the op that consumed it.
    let mut back = String::new();
    let adjoints: Vec<String> = nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.op != Op::Out)
        .map(|(i, _)| format!("g{i} = 0.0f"))
        .collect();
    if !adjoints.is_empty() {
        writeln!(back, "        float {};", adjoints.join(", ")).ok();
    }
    for (i, n) in nodes.iter().enumerate().rev() {
        let line = match (n.op, n.a, n.b) {
            (Op::Out, Some(a), _) => format!("g{a} = {};", if Some(i) == last_out { "1.0f" } else { "0.0f" }),
            (Op::PushF, _, _) if n.arg > 0 => format!("grad[{}] += g{i};", n.arg - 1),
            (Op::PushF | Op::Load, _, _) => continue,
            (Op::NegF, Some(a), _) => format!("g{a} = -g{i};"),
            (Op::PowF, Some(a), Some(b)) => format!(
                "{{ const float a = v{a}, b = v{b}; const float r = powf(a, b); const double sa = (double)(b * powf(a, b - 1)); \
                 const double sb = a > 0 ? (double)(r * logf(a)) : 0.0; g{a} = (float)MIX(sa, (double)g{i}); g{b} = (float)MIX(sb, (double)g{i}); }}"
            ),
            (Op::FminF | Op::FmaxF, Some(a), Some(b)) => format!(
                "{{ const float a = v{a}, b = v{b}; const float r = {}(a, b); const bool first = r == a || isnan(b); \
                 g{a} = first ? g{i} : 0.0f; g{b} = first ? 0.0f : g{i}; }}",
                if n.op == Op::FminF { "fminf" } else { "fmaxf" }
            ),
            (op, Some(a), Some(b)) => {
                let (sa, sb) = binary_slopes(op)?;
                format!(
                    "{{ const float a = v{a}, b = v{b}; const float sa = {sa}, sb = {sb}; g{a} = MIXF(sa, g{i}); g{b} = MIXF(sb, g{i}); }}"
                )
            }
            (op, Some(a), None) => {
                format!("{{ const float x = v{a}, y = v{i}; g{a} = g{i} * (float)({}); }}", unary_slope(op)?)
            }
            _ => return None,
        };
        writeln!(back, "        {line}").ok();
    }
    Some(format!("{fwd}{back}"))
}

/// The CUDA function of a unary float op of [`adjoint`] (not `NegF`).
fn unary_call(op: Op) -> Option<&'static str> {
    Some(match op {
        Op::SinF => "sinf",
        Op::CosF => "cosf",
        Op::ExpF => "expf",
        Op::LogF => "logf",
        Op::SqrtF => "sqrtf",
        Op::FabsF => "fabsf",
        Op::TanhF => "tanhf",
        _ => return None,
    })
}

/// The slope of a unary float op of [`adjoint`] in its operand `x` and result `y`.
fn unary_slope(op: Op) -> Option<&'static str> {
    Some(match op {
        Op::SinF => "cosf(x)",
        Op::CosF => "-sinf(x)",
        Op::ExpF => "y",
        Op::LogF => "1.0f / x",
        Op::SqrtF => "0.5f / y",
        Op::FabsF => "x < 0.0f ? -1.0f : 1.0f",
        Op::TanhF => "1.0f - y * y",
        _ => return None,
    })
}

/// The slopes of a binary float op of [`adjoint`] in its operands `a` and `b`.
fn binary_slopes(op: Op) -> Option<(&'static str, &'static str)> {
    Some(match op {
        Op::AddF => ("1.0f", "1.0f"),
        Op::SubF => ("1.0f", "-1.0f"),
        Op::MulF => ("b", "a"),
        Op::DivF => ("(float)(1.0 / (double)b)", "(float)(-(double)a / ((double)b * (double)b))"),
        Op::PdivF => (
            "fabsf(b) > 0.001f ? (float)(1.0 / (double)b) : 0.0f",
            "fabsf(b) > 0.001f ? (float)(-(double)a / ((double)b * (double)b)) : 0.0f",
        ),
        _ => return None,
    })
}

/// The macro that says whether the wide fitting kernels add their products on the tensor cores
/// (`GPFARM_FIT_MMA`: 1 from compute capability 8.0, which has double-precision `mma`, unless the
/// environment variable `GPFARM_FIT_MMA` is `0`; a diagnostic switch), else one sum per thread.
fn fit_mma_macro() -> &'static str {
    if switched_off("GPFARM_FIT_MMA") {
        "#define GPFARM_FIT_MMA 0\n"
    } else {
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800\n#define GPFARM_FIT_MMA 0\n#else\n#define GPFARM_FIT_MMA 1\n#endif\n"
    }
}

/// The macro that says whether the small-stack fitting kernels' forward sweep switches over the
/// ops of straight-line float code only (`GPFARM_FIT_STRAIGHT`: 1, unless the environment
/// variable `GPFARM_FIT_STRAIGHT` is `0`, a diagnostic switch that keeps every op there).
fn fit_straight_macro() -> &'static str {
    if switched_off("GPFARM_FIT_STRAIGHT") {
        "#define GPFARM_FIT_STRAIGHT false\n"
    } else {
        "#define GPFARM_FIT_STRAIGHT true\n"
    }
}

/// How a fitting kernel computes each case's output and derivatives.
#[derive(Clone, Copy)]
enum Members<'a> {
    /// By interpreting the block's program's bytecode.
    Interpreted,
    /// By the block's member (`offsets` names it) of these cases of a switch, straight-line
    /// code written in ([`fit_code_source`]).
    Written(&'a str),
    /// By calling [`FIT_MEMBER_FUNCTION`], defined apart and linked in ([`fit_link_source`]).
    Linked,
}

/// The fitting kernels' common source: the prelude and the `gpfarm_fit_body<NP>` template,
/// interpreting bytecode or running compiled members ([`Members`]); with the kernels' parameter
/// declarations and the names that pass them on.
fn fit_template(problem: &Problem, compiled: Members<'_>) -> Result<(String, String, String), GpuError> {
    fit_supported(problem).map_err(|why| {
        GpuError::Problem(format!("problem `{}` cannot be fitted on the GPU: {why}", problem.name()))
    })?;
    let spec = problem.spec();
    let params = problem.kernel_params();
    let mut decl = Vec::new();
    let mut args = Vec::new();
    for p in &params {
        if matches!(p.role, ParamRole::Input(_) | ParamRole::Lengths(_)) {
            decl.push(format!("{} __restrict__ {}", p.c_type, p.name));
            args.push(p.name.clone());
        }
    }
    let target_ty = spec.target.ty.c_name();
    decl.push(format!("const {target_ty}* __restrict__ target"));
    decl.extend(
        [
            "int ncases",
            "const unsigned* __restrict__ code",
            "const unsigned* __restrict__ offsets",
            "const float* __restrict__ params",
            "const unsigned* __restrict__ poffsets",
            "const int* __restrict__ nparams",
            "unsigned long long max_steps",
            "int ntiles",
            "int rows",
            "const long long* __restrict__ at",
            "double* __restrict__ partial",
        ]
        .map(String::from),
    );
    args.extend(
        [
            "target",
            "ncases",
            "code",
            "offsets",
            "params",
            "poffsets",
            "nparams",
            "max_steps",
            "ntiles",
            "rows",
            "at",
            "partial",
        ]
        .map(String::from),
    );
    let (decl, args) = (decl.join(", "), args.join(", "));
    let layout = slot_layout(problem);
    let init = super::source::slot_init(problem, "            ")?;
    let mut cases = String::new();
    for (code, op) in Op::ALL.iter().enumerate() {
        writeln!(cases, "                case {code}: {} break; // {op:?}", dual(*op)).ok();
    }
    let (mut forward, mut backward, mut straight) = (String::new(), String::new(), String::new());
    // The small-stack kernels' forward sweep: only the ops of straight-line float code.
    let mut straight_cases = String::new();
    for (code, op) in Op::ALL.iter().enumerate() {
        if let Some((f, b)) = adjoint(*op) {
            writeln!(straight_cases, "                case {code}: {} break; // {op:?}", dual(*op)).ok();
            writeln!(forward, "                case {code}: {f} break; // {op:?}").ok();
            writeln!(backward, "                case {code}: {b} break; // {op:?}").ok();
            if *op != Op::End {
                write!(straight, "case {code}: ").ok();
            }
        }
    }
    let (end, push_f, load) = (Op::End as usize, Op::PushF as usize, Op::Load as usize);
    let nslots = layout.len().max(1);
    // A slot's derivatives are read only once a Store wrote them (a mask of the slots written),
    // so that no case writes every slot's tangent first; with more slots than the mask holds,
    // every slot's start at 0.
    let (stored_macros, vdt_init) = if nslots <= 64 {
        (
            "#define STORED(a) ((stored >> (a)) & 1ull)\n#define MARK(a) (stored |= 1ull << (a))\n",
            "        unsigned long long stored = 0;\n",
        )
    } else {
        (
            "#define STORED(a) 1\n#define MARK(a) ((void)0)\n",
            "        for (int s = 0; s < NSLOTS; ++s) {{ FORK vdt[s][k] = 0.0f; }}\n",
        )
    };
    let vdt_init = vdt_init.replace("NSLOTS", &nslots.to_string()).replace("{{", "{").replace("}}", "}");
    let nout = spec.outputs.len().max(1);
    // Where a block's program is, and how each of its cases is computed with its derivatives.
    let (scan, per_case) = match compiled {
        Members::Interpreted => (
            format!(
                "    const unsigned* __restrict__ prog = code + offsets[blockIdx.y];\n\
    if (threadIdx.x == 0) {{\n\
        gpfarm_abort = 0;\n\
        int n = -1;\n\
        if constexpr (ADJ) {{\n\
            unsigned pc = 0;\n\
            // lfl: bit 0 where the op before pushed a leaf (a parameter, a constant or an\n\
            // input), the op's top operand; bit 1 where the two ops before did, its other one.\n\
            bool l1 = false, l2 = false;\n\
            for (n = 0;; ++n) {{\n\
                const unsigned op = prog[pc] & 0xffu;\n\
                if (op == {end}) break;\n\
                if (n >= TAPE || pc > 0xffffu || !gpfarm_straight(op)) {{ n = -1; break; }}\n\
                opat[n] = (unsigned short)pc;\n\
                lfl[n] = (unsigned char)((l1 ? 1u : 0u) | (l1 && l2 ? 2u : 0u));\n\
                l2 = l1; l1 = op == {push_f} || op == {load};\n\
                pc += op == {push_f} ? 2 : 1;\n\
            }}\n\
        }}\n\
        nops = n;\n\
    }}\n\
    __syncthreads();\n"
            ),
            format!(
                "        if (ADJ && nops >= 0 && c < ncases) {{\n\
        V vars[{nslots}];\n\
{init}\
        float fst[DEPTH], gs[DEPTH], ta[ADJ ? TAPE : 1], tb[ADJ ? TAPE : 1], grad[NP];\n\
        float tv = 0.0f, out0 = 0.0f;\n\
        // The value the leaf op j pushed (a parameter, a constant or an input), as it pushed it.\n\
        auto gpfarm_leaf = [&](int j) -> float {{\n\
            const unsigned w = prog[opat[j]], a = w >> 8;\n\
            if ((w & 0xffu) != {push_f}) return vars[a].f;\n\
            return a ? P[a - 1] : __int_as_float((int)prog[opat[j] + 1]);\n\
        }};\n\
        fst[0] = 0.0f;\n\
        int sp = 1, failed = 0;\n\
        for (int i = 0; i < nops; ++i) {{\n\
            const unsigned arg = prog[opat[i]] >> 8;\n\
            if (sp >= DEPTH - 1) {{ failed = 1; break; }}\n\
            switch (prog[opat[i]] & 0xffu) {{\n\
{forward}\
            }}\n\
        }}\n\
        if (!failed && gpfarm_deriv) {{\n\
            FORK grad[k] = 0.0f;\n\
            for (int s = 0; s < sp; ++s) gs[s] = 0.0f;\n\
            int gp = sp;\n\
            float gt = 0.0f;\n\
            bool seen = false;\n\
            for (int i = nops - 1; i >= 0; --i) {{\n\
                const unsigned arg = prog[opat[i]] >> 8;\n\
                switch (prog[opat[i]] & 0xffu) {{\n\
{backward}\
                }}\n\
            }}\n\
            FORK dout[k] = grad[k];\n\
        }}\n\
        r = failed ? __longlong_as_double(0x7ff8000000000000LL) : (double)out0 - (double)target[c];\n\
        }} else if (NP > {FIT_FORWARD_PARAMS} && c < ncases) {{\n\
        // Too wide to differentiate forward: never sent here (see fitted_in_reverse).\n\
        r = __longlong_as_double(0x7ff8000000000000LL);\n\
        }} else if (c < ncases) {{\n\
        V vars[{nslots}];\n\
        float vdt[{nslots}][NP];\n\
        V out[{nout}];\n\
        V st[DEPTH];\n\
        float sdt[DEPTH][NP];\n\
{init}\
{vdt_init}\
        for (int s = 0; s < {nout}; ++s) out[s].d = 0.0;\n\
        V t;\n\
        t.d = 0.0;\n\
        float dt[NP];\n\
        FORK dt[k] = 0.0f;\n\
        st[0].d = 0.0;\n\
        int sp = 1;\n\
        unsigned pc = 0;\n\
        unsigned long long steps = 0;\n\
        int failed = 0;\n\
        for (;;) {{\n\
            const unsigned w = prog[pc++];\n\
            const unsigned arg = w >> 8;\n\
            if (sp >= DEPTH - 1) {{ failed = 1; goto finished; }}\n\
            if constexpr (STRAIGHT) {{\n\
            switch (w & 0xffu) {{\n\
{straight_cases}\
                default: failed = 1; goto finished;\n\
            }}\n\
            }} else {{\n\
            switch (w & 0xffu) {{\n\
{cases}\
                default: failed = 1; goto finished;\n\
            }}\n\
            }}\n\
        }}\n\
    finished:\n\
        r = failed ? __longlong_as_double(0x7ff8000000000000LL) : (double)out[0].f - (double)target[c];\n\
        }}\n"
            ),
        ),
        // A compiled kernel: `offsets` names the block's member, the same for all its threads.
        // Written in, it is a case of a switch; linked, a call of the member's function, which
        // stores its derivatives into `grad` (those of parameters it does not read stay 0).
        Members::Written(_) | Members::Linked => {
            let member = match compiled {
                Members::Written(members) => format!(
                    "int failed = 0;\n\
        switch (offsets[blockIdx.y]) {{\n\
{members}\
            default: failed = 1;\n\
        }}\n"
                ),
                _ => format!(
                    "const int failed = {FIT_MEMBER_FUNCTION}(offsets[blockIdx.y], vars, P, &out0, grad);\n"
                ),
            };
            (
                String::new(),
                format!(
                    "        if (c < ncases) {{\n\
        V vars[{nslots}];\n\
{init}\
        float grad[NP];\n\
        // Cleared whatever the count: the member adds into it.\n\
        _Pragma(\"unroll\") for (int k = 0; k < NP; ++k) grad[k] = 0.0f;\n\
        float out0 = 0.0f;\n\
{member}\
        FORK dout[k] = grad[k];\n\
        r = failed ? __longlong_as_double(0x7ff8000000000000LL) : (double)out0 - (double)target[c];\n\
        }}\n"
                ),
            )
        }
    };
    let template = format!(
        "// gpfarm fitting kernels for problem `{problem}`\n\
union V {{ int i; float f; double d; }};\n\
{linked}\
// A loop over the derivatives; none where the launch asks for the sum of squares alone (a\n\
// count of 0: the fitting loop's plain run of a trial).\n\
#define FORK if (!gpfarm_deriv) {{}} else _Pragma(\"unroll\") for (int k = 0; k < NP; ++k)\n\
#define MIX(s, d) ((s) == 0.0 ? 0.0 : (s) * (d))\n\
#define MIXF(s, d) ((s) == 0.0f || (d) == 0.0f ? 0.0f : (s) * (d))\n\
#define FIT_PARAMS {FIT_PARAMS}\n\
{mma}\
{straight_small}\
{stored_macros}\
\n\
// Width NP: a tangent of NP floats per value; NSUMS = 1 + NP + NP (NP + 1) / 2 sums.\n\
// Narrow kernels (NP <= {UNROLLED}) keep every sum in each thread's registers, add each case's\n\
// products there, and sum the threads by shuffles and then the warps in order. Wider ones put each\n\
// case's Jacobian row and residual in shared memory as doubles (as many of the block's rows at a time as fit) and add\n\
// their products on the tensor cores (GPFARM_FIT_MMA), or give each thread its own sums (sum q\n\
// to thread q mod BLOCK), which it adds over the rows in order. Either way the order is fixed.\n\
// Whether an op may be in a program fitted by the adjoint sweeps (straight-line float code).\n\
__device__ __forceinline__ bool gpfarm_straight(unsigned op)\n\
{{\n\
    switch (op) {{ {straight}return true; default: return false; }}\n\
}}\n\n\
// STRAIGHT: the program is straight-line float code (the small-stack kernels' programs), so the\n\
// forward sweep's switch holds only those ops. RUNS: which starts the kernel runs, every one\n\
// with a count of 0 or more (0), only those of a count of 0 (1: a trial's plain run, the sum of\n\
// squares alone, compiled without derivatives, so with fewer registers and more blocks to a\n\
// multiprocessor), or only those with derivatives (2: beside a kernel of RUNS 1).\n\
template <int NP, int DEPTH, int TAPE, bool STRAIGHT = false, int RUNS = 0>\n\
__device__ __forceinline__ void gpfarm_fit_body({decl})\n\
{{\n\
    constexpr int NSUMS = 1 + NP + NP * (NP + 1) / 2;\n\
    constexpr bool NARROW = NP <= {UNROLLED};\n\
    constexpr bool PLAIN = RUNS == 1;\n\
    static_assert(!PLAIN || !NARROW, \"only the wide kernels have a plain twin\");\n\
    // The row's width in shared memory: a plain run's row holds its residual alone, in the\n\
    // place of a column block of 8 the wide kernel's residual heads (zeros after it), so its\n\
    // tensor cores add the same products in the same order: the same sum of squares, bit for bit.\n\
    constexpr int NPL = PLAIN ? 0 : NP;\n\
    // Rows of the wide kernels' shared memory (a row: the case's Jacobian row and residual, as\n\
    // doubles): as many of the block's as fit in 40 KiB, a power of two.\n\
    // With the tensor cores (GPFARM_FIT_MMA), a row is NP + 1 values padded to whole blocks of\n\
    // 8 (MP), its stride LD = 4 mod 8 doubles so that a fragment's 32 loads hit distinct banks.\n\
    constexpr int MP = GPFARM_FIT_MMA ? (NPL + 8) / 8 * 8 : NPL + 1;\n\
    constexpr int LD = GPFARM_FIT_MMA ? MP + (12 - MP % 8) % 8 : NPL + 1;\n\
    constexpr int ROWB = LD * 8;\n\
    constexpr int S = NARROW ? 1 : ROWB * {BLOCK} <= 40960 ? {BLOCK} : ROWB * ({BLOCK} / 2) <= 40960 ? {BLOCK} / 2 : ROWB * ({BLOCK} / 4) <= 40960 ? {BLOCK} / 4 : ROWB * ({BLOCK} / 8) <= 40960 ? {BLOCK} / 8 : {BLOCK} / 16;\n\
    static_assert(NARROW || ROWB * S <= 40960, \"the rows of a wide kernel must fit its shared memory\");\n\
    static_assert(NARROW || S % 4 == 0, \"the tensor cores take rows 4 at a time\");\n\
    constexpr int OWN = NARROW || GPFARM_FIT_MMA || PLAIN ? 1 : (NSUMS + {BLOCK} - 1) / {BLOCK};\n\
    // The tensor cores' tiles: 8 x 8 blocks (I, J), J <= I, of the lower triangle of the\n\
    // (NP + 1)-square of a row's products with itself; warp w takes tiles w, w + WARPS, ...\n\
    constexpr int MB = MP / 8;\n\
    constexpr int NT = MB * (MB + 1) / 2;\n\
    constexpr int TW = NARROW || !GPFARM_FIT_MMA ? 1 : (NT + {WARPS} - 1) / {WARPS};\n\
    __shared__ double red[{WARPS}][NARROW ? NSUMS : 1];\n\
    __shared__ double jsh[S][LD];\n\
    __shared__ int gpfarm_abort;\n\
    // Programs of 8 or more parameters that are straight-line float code (fewer than TAPE ops)\n\
    // are differentiated in reverse: a forward sweep keeps on a tape the operands of each op whose\n\
    // slopes read them (none in a run without derivatives, none for + and -), a\n\
    // backward sweep adds the output's adjoint into each parameter's derivative, so a case\n\
    // costs a few sweeps of the program however many parameters (forward, every op carries\n\
    // NP derivatives). opat: where each op starts; nops: how many, or -1 (forward).\n\
    constexpr bool ADJ = NP >= {FIT_REVERSE_WIDTH};\n\
    __shared__ unsigned short opat[ADJ ? TAPE : 1];\n\
    __shared__ unsigned char lfl[ADJ ? TAPE : 1];\n\
    __shared__ int nops;\n\
    // A start not run this round (the fitting loop's, a negative count) is left as it is; so is\n\
    // one the kernel's twin runs (RUNS).\n\
    if (RUNS == 1 ? nparams[blockIdx.y] != 0 : RUNS == 2 ? nparams[blockIdx.y] <= 0 : nparams[blockIdx.y] < 0) return;\n\
{scan}\
    const float* __restrict__ P = params + poffsets[blockIdx.y];\n\
    const int np = PLAIN ? 0 : nparams[blockIdx.y];\n\
    // A count of 0: the sum of squares alone, no derivatives (its bits are those the same launch\n\
    // gives with derivatives: each sum is added on its own).\n\
    const bool gpfarm_deriv = !PLAIN && np > 0;\n\
    // The sums this program fills: the triangle's rows beyond its parameters stay zero.\n\
    const int used = 1 + NP + np * (np + 1) / 2;\n\
    auto gpfarm_read = [](unsigned, int, int) -> int {{ return 0; }};\n\
    double acc[NARROW ? NSUMS : 1];\n\
    for (int q = 0; q < (NARROW ? NSUMS : 1); ++q) acc[q] = 0.0;\n\
    // A wide kernel's thread's sums, and the two factors of each (an index into a row: NP for\n\
    // the residual).\n\
    double own[OWN];\n\
    int fa[OWN], fb[OWN];\n\
    // A tensor-core warp's tiles: their blocks, whether the program has sums there (a block\n\
    // holds one of its parameters or the residual), and their fragments (lane: row lane / 4,\n\
    // columns 2 (lane % 4) and the next).\n\
    const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5);\n\
    int ti[TW], tj[TW];\n\
    bool tl[TW];\n\
    double tc[TW][2];\n\
#pragma unroll\n\
    for (int t = 0; t < TW; ++t) {{\n\
        const int tt = warp + t * {WARPS};\n\
        int i = 0;\n\
        while ((i + 1) * (i + 2) / 2 <= tt) ++i;\n\
        ti[t] = i; tj[t] = tt - i * (i + 1) / 2;\n\
        auto live = [&](int b) {{ return 8 * b < np || (8 * b <= NPL && NPL < 8 * b + 8); }};\n\
        tl[t] = tt < NT && live(ti[t]) && live(tj[t]);\n\
        tc[t][0] = 0.0; tc[t][1] = 0.0;\n\
    }}\n\
    if constexpr (GPFARM_FIT_MMA && !NARROW) {{\n\
        // The padding columns stay zero.\n\
        for (int q = threadIdx.x; q < S * (LD - NPL - 1); q += {BLOCK}) jsh[q / (LD - NPL - 1)][NPL + 1 + q % (LD - NPL - 1)] = 0.0;\n\
    }}\n\
#pragma unroll\n\
    for (int s = 0; s < OWN; ++s) {{\n\
        own[s] = 0.0;\n\
        const int q = (int)threadIdx.x + s * {BLOCK};\n\
        if (q == 0 || q >= NSUMS || PLAIN) {{ fa[s] = NPL; fb[s] = NPL; }}\n\
        else if (q <= NP) {{ fa[s] = q - 1; fb[s] = NPL; }}\n\
        else {{ int t = q - 1 - NP, k = 0; while (t > k) {{ t -= k + 1; ++k; }} fa[s] = k; fb[s] = t; }}\n\
    }}\n\
    for (int j = 0; j < rows; ++j) {{\n\
        // The same for every thread of the block, so that all of them reach the barriers.\n\
        if ((int)((blockIdx.x * rows + j) * {BLOCK}) >= ncases) break;\n\
        const int c = (blockIdx.x * rows + j) * {BLOCK} + threadIdx.x;\n\
        float dout[NP];\n\
        FORK dout[k] = 0.0f;\n\
        double r = 0.0;\n\
{per_case}\
        if constexpr (NARROW) {{\n\
            // Every index a constant, so that the sums live in registers.\n\
            acc[0] += r * r;\n\
#pragma unroll\n\
            for (int k = 0; k < NP; ++k) {{\n\
                if (k < np) {{\n\
                    const double jk = (double)dout[k];\n\
                    acc[1 + k] += jk * r;\n\
#pragma unroll\n\
                    for (int l = 0; l <= k; ++l) acc[1 + NP + k * (k + 1) / 2 + l] += jk * (double)dout[l];\n\
                }}\n\
            }}\n\
        }} else {{\n\
            for (int half = 0; half < {BLOCK} / S; ++half) {{\n\
                if ((int)threadIdx.x / S == half) {{\n\
                    const int row = (int)threadIdx.x % S;\n\
                    FORK jsh[row][k] = (double)dout[k];\n\
                    jsh[row][NPL] = r;\n\
                }}\n\
                __syncthreads();\n\
                if constexpr (GPFARM_FIT_MMA) {{\n\
                    // D += A B on the tensor cores, 4 rows a step: A (8 x 4, lane: row lane / 4,\n\
                    // column lane % 4) the rows' block I transposed, B (4 x 8, lane: row lane % 4,\n\
                    // column lane / 4) their block J.\n\
                    for (int r0 = 0; r0 < S; r0 += 4) {{\n\
#pragma unroll\n\
                        for (int t = 0; t < TW; ++t) {{\n\
                            if (tl[t]) {{\n\
                                const double a = jsh[r0 + (lane & 3)][8 * ti[t] + (lane >> 2)];\n\
                                const double b = jsh[r0 + (lane & 3)][8 * tj[t] + (lane >> 2)];\n\
                                asm volatile(\"mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {{%0,%1}}, {{%2}}, {{%3}}, {{%0,%1}};\"\n\
                                             : \"+d\"(tc[t][0]), \"+d\"(tc[t][1]) : \"d\"(a), \"d\"(b));\n\
                            }}\n\
                        }}\n\
                    }}\n\
                }} else {{\n\
                    for (int row = 0; row < S; ++row) {{\n\
#pragma unroll\n\
                        for (int s = 0; s < OWN; ++s) {{\n\
                            own[s] += jsh[row][fa[s]] * jsh[row][fb[s]];\n\
                        }}\n\
                    }}\n\
                }}\n\
                __syncthreads();\n\
            }}\n\
        }}\n\
    }}\n\
    // This tile's sums: the program's own layout (the sum of squares, Jᵀr in np places, the\n\
    // triangle), where sum q of this width goes to place(q); -1 for Jᵀr's places beyond np.\n\
    const size_t base = (size_t)(at[blockIdx.y] - at[0]) * ntiles + (size_t)blockIdx.x * (used - NP + np);\n\
    auto place = [&](int q) -> int {{ return q == 0 ? 0 : q <= NP ? (q - 1 < np ? q : -1) : q - NP + np; }};\n\
    if constexpr (NARROW) {{\n\
        const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;\n\
#pragma unroll\n\
        for (int q = 0; q < NSUMS; ++q) {{\n\
            if (q < used) {{\n\
                double v = acc[q];\n\
                for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);\n\
                if (lane == 0) red[warp][q] = v;\n\
            }}\n\
        }}\n\
        __syncthreads();\n\
        for (int q = threadIdx.x; q < used; q += {BLOCK}) {{\n\
            double s = 0.0;\n\
            for (int w = 0; w < {WARPS}; ++w) s += red[w][q];\n\
            if (place(q) >= 0) partial[base + place(q)] = s;\n\
        }}\n\
    }} else if constexpr (GPFARM_FIT_MMA) {{\n\
        // Product (a, b), b <= a, of the row (index NP: the residual) is sum 0 for (NP, NP),\n\
        // Jᵀr's 1 + b for (NP, b), else the triangle's 1 + NP + a (a + 1) / 2 + b.\n\
#pragma unroll\n\
        for (int t = 0; t < TW; ++t) {{\n\
#pragma unroll\n\
            for (int e = 0; e < 2; ++e) {{\n\
                const int a = 8 * ti[t] + (lane >> 2), b = 8 * tj[t] + 2 * (lane & 3) + e;\n\
                if (!tl[t] || a > NPL || b > a) continue;\n\
                const int q = a == NPL ? (b == NPL ? 0 : 1 + b) : 1 + NP + a * (a + 1) / 2 + b;\n\
                if (q < used && place(q) >= 0) partial[base + place(q)] = tc[t][e];\n\
            }}\n\
        }}\n\
    }} else {{\n\
#pragma unroll\n\
        for (int s = 0; s < OWN; ++s) {{\n\
            const int q = (int)threadIdx.x + s * {BLOCK};\n\
            if (q < used && place(q) >= 0) partial[base + place(q)] = own[s];\n\
        }}\n\
    }}\n\
}}\n",
        problem = problem.name(),
        linked = if matches!(compiled, Members::Linked) {
            format!(
                "// A member's output and derivatives (fit_link_source): 0, or 1 where member is not one.\n\
extern \"C\" __device__ int {FIT_MEMBER_FUNCTION}(unsigned member, const V* vars, const float* P, float* out0, float* grad);\n"
            )
        } else {
            String::new()
        },
        stored_macros = stored_macros,
        mma = fit_mma_macro(),
        straight_small = fit_straight_macro(),
        WARPS = BLOCK / 32,
        UNROLLED = 8,
    );
    Ok((template, decl, args))
}
