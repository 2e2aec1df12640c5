//! The PTX route: each individual's kernel emitted as PTX straight from the typed tree the CPU
//! evaluator parses its phenotype into ([`gpfarm_gp::program::tree`]), with no C compiler in
//! between. A unit is one PTX module (`.version 9.0`, `.target sm_XX`, `.address_size 64`) with
//! one `.visible .entry` per individual, named and parameterised exactly as the NVRTC route's
//! kernels ([`crate::unit::kernel_name`], [`gpfarm_gp::problem::template::kernel_params`]), so the GPU evaluator
//! launches either route's kernels the same way. The transcendental functions are not in the
//! unit: it declares the ones it calls (`.extern .func`, the `extern "C"` ABI NVRTC writes for
//! `gpm_sinf` and the others of [`gpfarm_protocol::ptx_math`]) and is linked with the library.
//!
//! # Same bits as NVRTC with `--fmad=false`
//!
//! The kernel computes what NVRTC makes of the phenotype in the problem's `template.cu`, bit for
//! bit, provided that template is the standard harness ([`ptx_supported`]):
//! - Every floating operation carries its rounding: `add.rn`, `sub.rn`, `mul.rn`, `div.rn`
//!   (IEEE division, NVRTC's default `-prec-div=true`), `sqrt.rn` (`-prec-sqrt=true`). A plain
//!   `mul.f32`/`add.f32` would let ptxas contract `a * b + c` into an FMA; `.rn` forbids it, as
//!   `--fmad=false` does in NVRTC. No `.ftz`: NVRTC keeps subnormals by default.
//! - C's typing comes from the tree: literals without `f` are doubles, binary operands take the
//!   usual arithmetic conversions, every other conversion is a node. Conversions are
//!   `cvt.rn.f32.s32`, `cvt.rn.f64.s32`, `cvt.f64.f32` (exact), `cvt.rn.f32.f64`, and
//!   `cvt.rzi.s32.f32/f64` for floating to int (toward zero, saturating, NaN to 0), the
//!   instructions NVRTC writes. Constants are converted here with the same rounding and written
//!   as exact hexadecimal immediates (`0f3F800000`).
//! - Comparisons are `setp` with C's NaN behaviour: ordered `lt gt le ge eq`, and `neu` for
//!   `!=`; truth tests are `!= 0` (`neu` for floating values, so NaN is true).
//! - Ints wrap (`add.s32`, `mul.lo.s32`); `/` and `%` are `div.s32`/`rem.s32`; `<<` and `>>`
//!   are `shl.b32` and `shr.s32`, whose out-of-range counts behave as the evaluator states.
//! - `sqrtf`/`sqrt`, `fabsf`/`fabs`, `fminf`/`fmin`, `fmaxf`/`fmax` are the single instructions
//!   NVRTC writes for them (`sqrt.rn`, `abs`, `min`, `max`); `sin cos exp log tanh pow` and
//!   their `f` forms call CUDA's own implementations in the library, compiled with the same
//!   flags. `pdivf`/`pdiv`, the inline function every NVRTC unit defines
//!   ([`gpfarm_gp::program::MATH_HELPERS`]), is its four instructions, no call: `abs`,
//!   `setp.gt` against 0.001 in the call's type, `div.rn`, `selp` of the quotient or 1.
//! - `&&`, `||` and `?:` evaluate both sides and select: no expression of the subset has side
//!   effects or can fault, so the value is the same as C's short-circuit evaluation.
//! - The harness: case `c = ctaid.x * ntid.x + tid.x`, return when `c >= NCASES`; scalar
//!   inputs loaded from the case's element; an `int[]` input's reads wrap the index into
//!   `[0, len)` exactly as `gp_wrapped_ints::operator[]` (0 for an empty list); case bits
//!   `(c >> bit) & 1`; locals and statement outputs start at zero; an expression problem
//!   stores the value converted to the output's type, a statement problem each output at the
//!   end.
//! - Loops are branches that count the case's steps as the CPU evaluator does: one before each
//!   test of a condition, in one `u64` counter per case; past
//!   [`gpfarm_gp::program::DEFAULT_MAX_STEPS`] the kernel traps (`@p trap`), so the program
//!   faults and its individual gets the worst fitness, as the evaluator, the interpreter and the
//!   NVRTC route ([`gpfarm_gp::program::with_step_limit`]) fail it. A kernel that does not end
//!   anyway is stopped by the GPU worker's deadline (`gpfarm_client::GpuWorker`).
//!
//! Registers are virtual and single-assignment except for variable slots (`%p`, `%r`, `%rd`,
//! `%f`, `%fd`, counted per kernel); ptxas allocates them. The emitter recurses once per nesting
//! level of the tree, which the parser bounds ([`gpfarm_gp::program::tree::MAX_NESTING`]); long
//! flat chains such as a 10,000-term sum are iterated, not recursed.

mod emit;
mod fit;

pub use fit::fit_member_unit;

use emit::Needs;

use std::fmt::Write as _;

use gpfarm_gp::problem::{TemplateDifference, compare_with_standard};
use gpfarm_gp::program::FAILED_FLAGS;
use gpfarm_gp::{Problem, Program};
use gpfarm_protocol::SmArch;
use gpfarm_protocol::ptx_math::FUNCTIONS;

/// The PTX ISA version units declare (CUDA 13.0's).
pub const PTX_VERSION: &str = "9.0";

/// Why a problem cannot take the PTX route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "problem `{problem}` cannot take the PTX route, which generates the standard kernel harness itself: {difference}"
)]
pub struct PtxUnsupported {
    /// The problem's name.
    pub problem: String,
    /// Where its template first differs from the standard harness.
    pub difference: TemplateDifference,
}

/// Whether `problem` can take the PTX route: its `template.cu` must be the standard harness
/// ([`gpfarm_gp::problem::standard_template`]) up to comments and spacing, since the emitted
/// kernels compute exactly that harness and nothing a template adds.
pub fn ptx_supported(problem: &Problem) -> Result<(), PtxUnsupported> {
    compare_with_standard(problem.template(), problem.spec())
        .map_err(|difference| PtxUnsupported { problem: problem.name().to_owned(), difference })
}

/// One PTX module holding the kernel of each `(kernel name, program)`.
pub(crate) fn ptx_unit(problem: &Problem, members: &[(&str, &Program)], arch: SmArch) -> String {
    let mut needs = Needs::default();
    let kernels: Vec<String> = members
        .iter()
        .enumerate()
        .map(|(j, (name, program))| emit::kernel(problem, program, name, j, &mut needs))
        .collect();
    module(problem, arch, &needs, members.len(), &kernels)
}

/// Estimated cost of assembling `program`'s code in a PTX unit, in the units of
/// [`PTX_UNIT_WEIGHT`]: the instructions of its kernel. On nvJitLink 13.0.88 for sm_90 at `-O0`,
/// one individual alone costs about 5 ms + 0.026 ms per instruction on an idle core (Search
/// individuals of generation 0; the instruction count explains the time with correlation 0.87).
pub(crate) fn ptx_compile_weight(problem: &Problem, program: &Program) -> f64 {
    let mut needs = Needs::default();
    let kernel = emit::kernel(problem, program, "gpfarm_weight", 0, &mut needs);
    kernel.lines().filter(|l| l.trim_end().ends_with(';') && !l.trim_start().starts_with('.')).count() as f64
}

/// nvJitLink's fixed cost per PTX unit in the units of [`ptx_compile_weight`]. With 16 daemons
/// linking at once on the 16-core GPU host, a call costs about 18 ms before its first
/// instruction and about 15 us per instruction (Search and multiplier5 units of 10 against
/// units of 30, the same populations), so a unit's fixed cost is worth about 1,200
/// instructions (on an idle core it is nearer 5 ms).
pub(crate) const PTX_UNIT_WEIGHT: f64 = 1200.0;

/// One PTX module holding one switch kernel `name` ([`gpfarm_protocol::Shape::Switch`]): branch `j` is the
/// kernel of `programs[j]`, computing exactly what its own kernel would.
pub(crate) fn ptx_switch_unit(problem: &Problem, name: &str, programs: &[&Program], arch: SmArch) -> String {
    let mut needs = Needs::default();
    let kernel = emit::switch_kernel(problem, programs, name, &mut needs);
    module(problem, arch, &needs, programs.len(), std::slice::from_ref(&kernel))
}

/// The module around `kernels`: header, the failure flags of its `members` when a kernel counts
/// steps, declarations of the library functions called, and the unit's own functions.
fn module(problem: &Problem, arch: SmArch, needs: &Needs, members: usize, kernels: &[String]) -> String {
    let mut s = String::with_capacity(kernels.iter().map(String::len).sum::<usize>() + 1024);
    let _ = writeln!(s, "//\n// gpfarm PTX unit: problem {}\n//\n", problem.name());
    let _ = writeln!(s, ".version {PTX_VERSION}\n.target sm_{}\n.address_size 64\n", arch.0);
    if needs.flags {
        // Zero when the module is loaded, as every `.global` without an initialiser.
        let _ = writeln!(s, ".visible .global .align 4 .u32 {FAILED_FLAGS}[{members}];\n");
    }
    for &i in &needs.calls {
        let _ = writeln!(s, "{}", FUNCTIONS[i].ptx_extern());
    }
    for h in &needs.helpers {
        s.push('\n');
        s.push_str(&h.definition());
    }
    for k in kernels {
        s.push('\n');
        s.push_str(k);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpfarm_gp::Phenotype;

    /// The PTX of `phenotype`'s kernel alone, as its cache key sees it.
    fn keyed_ptx(problem: &Problem, p: &Phenotype, arch: SmArch) -> String {
        let program = Program::parse(problem, p).unwrap();
        ptx_unit(problem, &[(crate::render::KEYED_KERNEL, &program)], arch)
    }

    fn ptx(problem: &str, phenotype: &str) -> String {
        let problem = Problem::builtin(problem).unwrap();
        keyed_ptx(&problem, &Phenotype::new(phenotype), SmArch::SM_90)
    }

    /// The kernel's instructions, without declarations.
    fn instructions(ptx: &str) -> Vec<String> {
        let body = &ptx[ptx.find(".visible .entry").unwrap()..];
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('.'))
            .map(str::to_owned)
            .collect()
    }

    fn count(ptx: &str, instruction: &str) -> usize {
        instructions(ptx).iter().filter(|l| l.split_whitespace().next() == Some(instruction)).count()
    }

    #[test]
    fn floating_operations_name_their_rounding_and_never_contract() {
        let p = ptx("keijzer6", "x * x + x - x / x * 07.35 + (double)x / x - x * (double)x");
        for op in
            ["mul.rn.f32", "add.rn.f32", "div.rn.f32", "mul.rn.f64", "add.rn.f64", "sub.rn.f64", "div.rn.f64"]
        {
            assert!(count(&p, op) > 0, "{op}\n{p}");
        }
        for line in instructions(&p) {
            let op = line.split_whitespace().find(|w| !w.starts_with('@')).unwrap();
            for bare in
                ["add.f", "sub.f", "mul.f", "div.f", "fma", "mad.f", "div.approx", "div.full", "sqrt.approx"]
            {
                assert!(!op.starts_with(bare), "{line}");
            }
            assert!(!line.contains(".ftz"), "{line}");
        }
    }

    #[test]
    fn c_typing_gives_the_conversions_nvrtc_writes() {
        // 07.35 is a double: x is widened, the product is double, the store rounds to float.
        let p = ptx("keijzer6", "x * 07.35");
        let i = instructions(&p);
        let at = |op: &str| i.iter().position(|l| l.starts_with(op)).unwrap_or_else(|| panic!("{op}\n{p}"));
        assert!(at("cvt.f64.f32") < at("mul.rn.f64") && at("mul.rn.f64") < at("cvt.rn.f32.f64"));
        assert!(i[at("mul.rn.f64")].ends_with("0d401D666666666666;"), "{p}");
        let p = ptx("search", "tmp = SEARCH * 1.5f; OUTPUT = tmp / 2.0f; i = (double)SEARCH / 3;");
        for (op, n) in
            [("cvt.rn.f32.s32", 2), ("cvt.rzi.s32.f32", 2), ("cvt.rn.f64.s32", 1), ("cvt.rzi.s32.f64", 1)]
        {
            assert_eq!(count(&p, op), n, "{op}\n{p}");
        }
        // Constants are converted when emitted, with the same rounding.
        let p = ptx("keijzer6", "x + 1 + (float)16777217 + (int)2.9");
        assert_eq!(count(&p, "cvt.rn.f32.s32"), 0, "{p}");
        assert!(p.contains("0f3F800000") && p.contains("0f4B800000") && p.contains("0f40000000"), "{p}");
    }

    #[test]
    fn comparisons_keep_cs_nan_behaviour() {
        let p = ptx("keijzer6", "(x != 1.0f) + (x < 1) + (x == x) + (x >= 2.0) + !x");
        for op in ["setp.neu.f32", "setp.lt.f32", "setp.eq.f32", "setp.ge.f64"] {
            assert!(count(&p, op) > 0, "{op}\n{p}");
        }
        let p = ptx("search", "if (tmp != SEARCH && SEARCH > 1 || !i) OUTPUT = 1;");
        for op in ["setp.ne.s32", "setp.gt.s32", "and.pred", "or.pred"] {
            assert!(count(&p, op) > 0, "{op}\n{p}");
        }
    }

    #[test]
    fn ints_wrap_divide_and_shift_as_ptx_does() {
        let p = ptx("search", "tmp = SEARCH * 3 / 2 % 5 << 1 >> 2; tmp = -tmp ^ ~tmp | 1 & tmp;");
        for op in [
            "mul.lo.s32",
            "div.s32",
            "rem.s32",
            "shl.b32",
            "shr.s32",
            "neg.s32",
            "not.b32",
            "xor.b32",
            "or.b32",
            "and.b32",
        ] {
            assert!(count(&p, op) > 0, "{op}\n{p}");
        }
    }

    #[test]
    fn only_called_library_functions_are_declared() {
        let p = ptx("keijzer6", "sinf(x) + expf(x) * sinf(x + 1)");
        assert_eq!(p.matches(".extern .func").count(), 2, "{p}");
        assert!(p.contains(".extern .func (.param .b32 r) gpm_sinf (.param .b32 a);\n"), "{p}");
        assert!(p.contains(") gpm_expf ("), "{p}");
        assert_eq!(count(&p, "call.uni"), 3);
        let p = ptx("keijzer6", "sqrtf(fabsf(x)) + fminf(x, 1.0f) + fmax(x, 2.0) + sqrt(fabs(x * 1.0))");
        assert!(!p.contains(".extern"), "{p}");
        for op in ["sqrt.rn.f32", "abs.f32", "min.f32", "max.f64", "sqrt.rn.f64", "abs.f64"] {
            assert_eq!(count(&p, op), 1, "{op}\n{p}");
        }
        let p = ptx("keijzer6", "pdivf(x, x - 1.0f) + pdiv(x, 0.5) + pdiv(x * 1.0, x)");
        assert!(!p.contains(".extern") && !p.contains("call"), "{p}");
        let p = ptx("keijzer6", "pow(x, 2) + powf(x, 0.5f) + tanh(x)");
        assert!(p.contains(".extern .func (.param .b64 r) gpm_pow (.param .b64 a, .param .b64 b);\n"), "{p}");
        assert!(p.contains(") gpm_powf (") && p.contains(") gpm_tanhf ("), "{p}");
    }

    #[test]
    fn a_loop_counts_the_cases_steps_and_flags_its_member_past_the_limit() {
        let p = ptx("search", "while(tmp < 3){tmp = tmp + 1;}");
        assert_eq!(count(&p, "add.u64"), 1, "{p}");
        assert!(p.contains(&format!(", {};", gpfarm_gp::program::DEFAULT_MAX_STEPS)), "{p}");
        assert!(p.contains(".visible .global .align 4 .u32 gpfarm_failed[1];"), "{p}");
        let ins = instructions(&p);
        assert!(ins.iter().any(|l| l.ends_with("st.global.u32 \t[gpfarm_failed+0], 1;")), "{p}");
        // Past the limit, and on meeting the kept state again (Search's writable slots: i, tmp
        // and OUTPUT), the case flags its member and ends.
        assert_eq!(ins.iter().filter(|l| l.starts_with('@') && l.ends_with("exit;")).count(), 2, "{p}");
        assert_eq!(ins.iter().filter(|l| l.starts_with("setp.eq.and.b32")).count(), 3, "{p}");
        assert_eq!(ins.iter().filter(|l| l.ends_with("[gpfarm_failed+0], 1;")).count(), 2, "{p}");
        assert!(!p.contains("trap"), "{p}");
        // The second member of a unit flags its own word; the problem's limit is compiled in.
        let search = Problem::builtin("search").unwrap().with_max_steps(9).unwrap();
        let (a, b) = (Phenotype::new("OUTPUT = 1;"), Phenotype::new("while(tmp < 3){tmp = tmp + 1;}"));
        let (a, b) = (Program::parse(&search, &a).unwrap(), Program::parse(&search, &b).unwrap());
        let unit = ptx_unit(&search, &[("k0", &a), ("k1", &b)], SmArch::SM_90);
        assert!(unit.contains("gpfarm_failed[2];") && unit.contains("[gpfarm_failed+4], 1;"), "{unit}");
        assert!(unit.contains(", 9;"), "{unit}");
        // An expression has no loop, no counter and no flags.
        let plain = ptx("keijzer6", "x * 2.0f");
        assert_eq!(count(&plain, "add.u64"), 0);
        assert!(!plain.contains("gpfarm_failed"), "{plain}");
    }

    #[test]
    fn the_harness_reads_wrapped_elements_and_case_bits() {
        let p = ptx("search", "OUTPUT = INPUT[tmp - 1];");
        // Base: in_INPUT + c * 20, passed with the length and the index to the unit's read
        // function: m = k % len, moved up when negative; 0 when empty.
        assert!(p.contains("mul.lo.s32 \t%r7, %r5, 20;"), "{p}");
        assert_eq!(helper_calls(&p, "gpfarm_read_wrapped"), 1, "{p}");
        assert_eq!(helper_calls(&p, "gpfarm_rem_s32"), 0, "{p}");
        let read = &p[p.find(".func (.param .b32 gpfarm_read_wrapped_r)").expect("defined")..];
        let read = &read[..read.find("\n}\n").expect("closed")];
        for op in [
            "setp.le.s32",
            "@%p1 bra",
            "rem.s32",
            "setp.lt.s32",
            "selp.b32",
            "mul.wide.s32",
            "ld.global.nc.u32",
        ] {
            assert_eq!(read.matches(op).count(), 1, "{op}\n{read}");
        }
        let p = ptx(
            "multiplier5",
            "o0 = a0; o1 = b4; o2 = 0; o3 = 0; o4 = 0; o5 = 0; o6 = 0; o7 = 0; o8 = 0; o9 = 0;",
        );
        assert!(p.contains("shr.s32 \t%r24, %r5, 9;"), "{p}");
        assert_eq!(count(&p, "st.global.u32"), 10);
    }

    #[test]
    fn math_of_constants_is_folded_as_nvvm_folds_it() {
        // sinf(17.86): the double literal rounded to float, widened, the host's double sine,
        // rounded once to float.
        let text = ptx("keijzer6", "sinf(17.86) - x");
        assert_eq!(count(&text, "call.uni"), 0, "{text}");
        let folded = (f64::from(17.86f64 as f32)).sin() as f32;
        assert!(text.contains(&format!("0f{:08X}", folded.to_bits())), "{text}");
        // Through constant arithmetic, and nested.
        let text = ptx("keijzer6", "expf(sinf(tanhf(09.90) - 57.41) * 30.02)");
        assert_eq!(count(&text, "call.uni"), 0, "{text}");
        // Not when the host would raise overflow: left to the GPU.
        let text = ptx("keijzer6", "expf(expf(99.99))");
        assert_eq!(count(&text, "call.uni"), 1, "{text}");
        // A call of a variable is never folded.
        assert_eq!(count(&ptx("keijzer6", "sinf(x)"), "call.uni"), 1);
    }

    /// Protected division is `fabs(b) > 0.001 ? a / b : 1` in the call's type: `abs`, `setp.gt`
    /// against 0.001 (`0f3A83126F`, `0d3F50624DD2F1A9FC`), `div.rn` of the operands, and `selp`
    /// of the quotient or 1, in that order; a constant divisor decides when emitted, and
    /// constants fold with the threshold of the call's type.
    #[test]
    fn protected_division_is_abs_setp_div_and_selp_in_the_calls_type() {
        let ops = |p: &str| -> Vec<String> {
            instructions(p)
                .iter()
                .filter(|l| ["abs.", "setp.gt.", "div.rn.", "selp."].iter().any(|o| l.starts_with(o)))
                .cloned()
                .collect()
        };
        let p = ptx("keijzer6", "pdivf(x, x - 1.0f)");
        let i = ops(&p);
        assert_eq!(i.len(), 4, "{p}");
        let reg = |l: &str, k: usize| {
            l.split([' ', '\t', ',', ';']).filter(|w| !w.is_empty()).nth(k).unwrap().to_owned()
        };
        assert!(i[0].starts_with("abs.f32"), "{p}");
        assert!(
            i[1].starts_with("setp.gt.f32") && i[1].ends_with(&format!("{}, 0f3A83126F;", reg(&i[0], 1))),
            "{p}"
        );
        assert_eq!(format!("0f{:08X}", 0.001f32.to_bits()), "0f3A83126F");
        assert!(i[2].starts_with("div.rn.f32") && i[2].ends_with(&format!(", {};", reg(&i[0], 2))), "{p}");
        assert_eq!(
            i[3],
            format!("selp.f32 \t{}, {}, 0f3F800000, {};", reg(&i[3], 1), reg(&i[2], 1), reg(&i[1], 1)),
            "{p}"
        );
        // Double for a double argument; the threshold in double.
        let p = ptx("keijzer6", "pdiv(x * 1.0, x)");
        let i = ops(&p);
        assert_eq!(i.len(), 4, "{p}");
        assert!(i[0].starts_with("abs.f64") && i[2].starts_with("div.rn.f64"), "{p}");
        assert!(i[1].starts_with("setp.gt.f64") && i[1].ends_with(", 0d3F50624DD2F1A9FC;"), "{p}");
        assert_eq!(format!("0d{:016X}", 0.001f64.to_bits()), "0d3F50624DD2F1A9FC");
        assert!(i[3].starts_with("selp.f64") && i[3].contains(", 0d3FF0000000000000, "), "{p}");
        // A constant divisor: the quotient past the threshold, 1 at or below it.
        for (text, divides) in [
            ("pdivf(x, -0.002f)", true),
            ("pdivf(x, 0.0005f)", false),
            ("pdivf(x, 0.0f)", false),
            ("pdivf(x, 0.001f)", false),
            ("pdiv(x, (double)0.001f)", true),
            ("pdivf(x, 0.0f / 0.0f)", false),
        ] {
            let p = ptx("keijzer6", text);
            assert_eq!(
                count(&p, "div.rn.f32") + count(&p, "div.rn.f64"),
                usize::from(divides),
                "{text}\n{p}"
            );
            assert_eq!(
                count(&p, "selp.f32") + count(&p, "abs.f32") + count(&p, "setp.gt.f32"),
                0,
                "{text}\n{p}"
            );
        }
        // Constants fold: 1 at 0, 0.0005 and NaN; the quotient at -0.002; sinf of it too.
        for (text, value) in [
            ("x * pdivf(3.0f, 0.0f)", 1.0f32),
            ("x * pdivf(3.0f, 0.0005f)", 1.0),
            ("x * pdivf(3.0f, 0.0f / 0.0f)", 1.0),
            ("x * pdivf(3.0f, 0.001f)", 1.0),
            ("x * pdivf(3.0f, -0.002f)", 3.0 / -0.002f32),
            ("x * pdiv(3.0, (double)0.001f)", (3.0 / f64::from(0.001f32)) as f32),
        ] {
            let p = ptx("keijzer6", text);
            assert_eq!(
                count(&p, "div.rn.f32") + count(&p, "div.rn.f64") + count(&p, "selp.f32"),
                0,
                "{text}\n{p}"
            );
            let double = text.contains("pdiv(");
            let imm = if double {
                format!("0d{:016X}", (3.0 / f64::from(0.001f32)).to_bits())
            } else {
                format!("0f{:08X}", value.to_bits())
            };
            assert!(p.contains(&imm), "{text}: {imm}\n{p}");
        }
        let p = ptx("keijzer6", "sinf(pdivf(1.0f, -0.002f)) + x");
        assert_eq!(count(&p, "call.uni"), 0, "{p}");
        let folded = f64::from(1.0f32 / -0.002f32).sin() as f32;
        assert!(p.contains(&format!("0f{:08X}", folded.to_bits())), "{p}");
    }

    /// Calls of one of the unit's own functions.
    fn helper_calls(ptx: &str, helper: &str) -> usize {
        instructions(ptx)
            .iter()
            .filter(|l| l.starts_with("call.uni") && l.contains(&format!("{helper},")))
            .count()
    }

    #[test]
    fn an_index_already_reduced_by_the_length_is_reduced_once_by_the_read() {
        let calls = |p: &str| {
            let p = ptx("search", p);
            (helper_calls(&p, "gpfarm_rem_s32"), helper_calls(&p, "gpfarm_read_wrapped"))
        };
        assert_eq!(calls("OUTPUT = INPUT[tmp % LENINPUT];"), (0, 1));
        assert_eq!(calls("OUTPUT = INPUT[tmp * 3 % LENINPUT];"), (0, 1));
        assert_eq!(calls("OUTPUT = INPUT[tmp];"), (0, 1));
        // The last step is not `% LENINPUT`: the remainder is the index's own.
        assert_eq!(calls("OUTPUT = INPUT[tmp % LENINPUT + 1];"), (1, 1));
        assert_eq!(calls("OUTPUT = INPUT[tmp % SEARCH];"), (1, 1));
        assert_eq!(calls("OUTPUT = INPUT[LENINPUT % tmp];"), (1, 1));
    }

    #[test]
    fn a_run_time_divisor_goes_through_one_function_per_unit_and_a_constant_stays_inline() {
        let p = ptx(
            "search",
            "tmp = SEARCH / tmp + SEARCH % tmp + SEARCH % tmp; OUTPUT = SEARCH / 3 + SEARCH % 7;",
        );
        assert_eq!(helper_calls(&p, "gpfarm_div_s32"), 1);
        assert_eq!(helper_calls(&p, "gpfarm_rem_s32"), 2);
        assert_eq!((count(&p, "div.s32"), count(&p, "rem.s32")), (1, 1), "{p}");
        // Defined once, before the kernels, holding the instruction itself.
        for (f, i) in [("gpfarm_div_s32", "div.s32"), ("gpfarm_rem_s32", "rem.s32")] {
            assert_eq!(p.matches(&format!(".func (.param .b32 {f}_r) {f}(")).count(), 1, "{p}");
            let def = &p[p.find(&format!(".func (.param .b32 {f}_r)")).unwrap()..];
            assert!(def[..def.find('}').unwrap()].contains(&format!("{i} \t%r3, %r1, %r2;")), "{p}");
        }
        assert!(p.find(".func").unwrap() < p.find(".visible .entry").unwrap());
        // A unit without run-time divisors defines neither.
        assert!(!ptx("keijzer6", "x * x").contains(".func (.param .b32 gpfarm_"));
    }
}
