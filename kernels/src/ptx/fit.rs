//! The PTX route's fitting units: each member's forward and backward sweeps emitted as PTX from
//! its bytecode, in one function [`FIT_MEMBER_FUNCTION`] that switches on the member, for
//! nvJitLink to link with the fitting template ([`crate::interpreter::fit_link_source`], a
//! relocatable CUBIN compiled once per problem and width) and the math library. No C compiler
//! runs per structure.
//!
//! # Same bits as the interpreter's fitting kernels
//!
//! A member computes what [`crate::interpreter::fit_code_source`] writes for it in CUDA C, op for
//! op, in the same order, each floating operation with its rounding (`add.rn`, `mul.rn`,
//! `div.rn`, `sqrt.rn`, `cvt.rn`) so that ptxas contracts nothing; `sinf`, `cosf`, `expf`,
//! `logf`, `tanhf` and `powf` are the math library's (CUDA's own, compiled with `--fmad=false`,
//! [`gpfarm_protocol::ptx_math`]); `fabsf`, `fminf`, `fmaxf` are `abs`, `min`, `max`, as NVRTC
//! writes them. So its sums are those of the interpreter's fitting kernels in reverse, bit for
//! bit (`tests/fit.rs`), and a run is the same whichever kernels fit it.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use gpfarm_protocol::SmArch;
use gpfarm_protocol::ptx_math::FUNCTIONS;

use super::PTX_VERSION;
use crate::gpu::GpuError;
use crate::interpreter::bytecode::Op;
use crate::interpreter::fit::{FIT_MEMBER_FUNCTION, Node, known_width, straight_nodes};

/// `1.0f`, `-1.0f`, `0.5f`, `0.0f` and `0.001f` (protected division's threshold) as PTX
/// immediates.
const ONE: &str = "0f3F800000";
const MINUS_ONE: &str = "0fBF800000";
const HALF: &str = "0f3F000000";
const ZERO: &str = "0f00000000";
const ZERO_D: &str = "0d0000000000000000";
const ONE_D: &str = "0d3FF0000000000000";

/// PTX of one fitting unit of width `width` for `members` (each a program's words as
/// [`crate::interpreter::assemble_structure`] wrote them, straight-line float code of at most
/// `width` parameters, [`crate::interpreter::fit_compiles`]): a module for `arch` defining [`FIT_MEMBER_FUNCTION`],
/// member `m` the program `members[m]`. The caller links it with
/// [`crate::interpreter::fit_link_source`] of the same problem and width.
pub fn fit_member_unit(width: usize, members: &[&[u32]], arch: SmArch) -> Result<String, GpuError> {
    known_width(width)?;
    let mut e = Emitter::default();
    let mut bodies = String::new();
    for (m, words) in members.iter().enumerate() {
        let Some((nodes, last_out)) = straight_nodes(words, width) else {
            return Err(GpuError::Problem(format!(
                "member {m} is not straight-line float code of at most {width} parameters"
            )));
        };
        e.body.clear();
        e.member(&nodes, last_out);
        let _ = write!(bodies, "$gpfarm_m{m}:\n{}", e.body);
        let _ = writeln!(bodies, "\tmov.u32 \t%r1, 0;\n\tst.param.b32 \t[func_retval0+0], %r1;\n\tret;");
    }
    let mut s = String::with_capacity(bodies.len() + 2048);
    let _ = writeln!(s, "//\n// gpfarm PTX fitting unit: width {width}, {} members\n//\n", members.len());
    let _ = writeln!(s, ".version {PTX_VERSION}\n.target sm_{}\n.address_size 64\n", arch.0);
    for &i in &e.calls {
        let _ = writeln!(s, "{}", FUNCTIONS[i].ptx_extern());
    }
    let f = FIT_MEMBER_FUNCTION;
    let _ = writeln!(
        s,
        "\n.visible .func (.param .b32 func_retval0) {f}(\n\t.param .b32 {f}_member,\n\t.param .b64 {f}_vars,\n\t\
         .param .b64 {f}_p,\n\t.param .b64 {f}_out0,\n\t.param .b64 {f}_grad\n)\n{{"
    );
    let _ = writeln!(
        s,
        "\t.reg .pred %p<{}>;\n\t.reg .b32 %r<2>;\n\t.reg .f32 %f<{}>;\n\t.reg .f64 %fd<{}>;\n\t.reg .b64 %rd<4>;\n",
        e.preds.max(1),
        e.floats.max(1),
        e.doubles.max(1)
    );
    let _ = writeln!(
        s,
        "\tld.param.u32 \t%r0, [{f}_member];\n\tld.param.u64 \t%rd0, [{f}_vars];\n\tld.param.u64 \t%rd1, [{f}_p];\n\t\
         ld.param.u64 \t%rd2, [{f}_out0];\n\tld.param.u64 \t%rd3, [{f}_grad];"
    );
    // The member's branch, or 1 (not a member).
    for m in 0..members.len() {
        let _ = writeln!(s, "\tsetp.eq.u32 \t%p0, %r0, {m};\n\t@%p0 bra \t$gpfarm_m{m};");
    }
    let _ = writeln!(s, "\tmov.u32 \t%r1, 1;\n\tst.param.b32 \t[func_retval0+0], %r1;\n\tret;");
    s.push_str(&bodies);
    s.push_str("}\n");
    Ok(s)
}

/// Writes members' sweeps; registers are numbered across the whole function (`%p0` is the
/// member test's).
#[derive(Default)]
struct Emitter {
    body: String,
    preds: usize,
    floats: usize,
    doubles: usize,
    /// Math library functions called (indices into [`FUNCTIONS`]).
    calls: BTreeSet<usize>,
}

macro_rules! ins {
    ($e:expr, $($t:tt)*) => {{
        $e.body.push('\t');
        let _ = write!($e.body, $($t)*);
        $e.body.push_str(";\n");
    }};
}

impl Emitter {
    fn f(&mut self) -> String {
        self.floats += 1;
        format!("%f{}", self.floats - 1)
    }

    fn fd(&mut self) -> String {
        self.doubles += 1;
        format!("%fd{}", self.doubles - 1)
    }

    fn p(&mut self) -> String {
        // %p0 is the member test's.
        self.preds = self.preds.max(1) + 1;
        format!("%p{}", self.preds - 1)
    }

    /// `op` of float operands into a new register.
    fn op(&mut self, instr: &str, args: &[&str]) -> String {
        let d = self.f();
        ins!(self, "{instr} \t{d}, {}", args.join(", "));
        d
    }

    /// `op` of double operands into a new register.
    fn opd(&mut self, instr: &str, args: &[&str]) -> String {
        let d = self.fd();
        ins!(self, "{instr} \t{d}, {}", args.join(", "));
        d
    }

    fn set(&mut self, cmp: &str, a: &str, b: &str) -> String {
        let p = self.p();
        ins!(self, "setp.{cmp} \t{p}, {a}, {b}");
        p
    }

    /// A call of the math library's float function `c_function` (`sinf`, `powf`).
    fn call(&mut self, c_function: &str, args: &[&str]) -> String {
        let index = FUNCTIONS.iter().position(|m| m.c_function == c_function).expect("in the math library");
        self.calls.insert(index);
        let symbol = FUNCTIONS[index].symbol;
        let r = self.f();
        self.body.push_str("\t{\n");
        let mut params = Vec::new();
        for (k, a) in args.iter().enumerate() {
            ins!(self, ".param .b32 param{k}");
            ins!(self, "st.param.f32 \t[param{k}+0], {a}");
            params.push(format!("param{k}"));
        }
        ins!(self, ".param .b32 retval0");
        ins!(self, "call.uni (retval0), {symbol}, ({})", params.join(", "));
        ins!(self, "ld.param.f32 \t{r}, [retval0+0]");
        self.body.push_str("\t}\n");
        r
    }

    /// `MIXF(s, d)`: `(s == 0 || d == 0) ? 0 : s * d`.
    fn mixf(&mut self, s: &str, d: &str) -> String {
        let zs = self.set("eq.f32", s, ZERO);
        let zd = self.set("eq.f32", d, ZERO);
        let either = self.p();
        ins!(self, "or.pred \t{either}, {zs}, {zd}");
        let prod = self.op("mul.rn.f32", &[s, d]);
        self.op("selp.f32", &[ZERO, &prod, &either])
    }

    /// `(float)MIX(s, (double)d)`: `s == 0 ? 0 : s * d` in double, rounded to float.
    fn mix(&mut self, s: &str, d: &str) -> String {
        let dd = self.opd("cvt.f64.f32", &[d]);
        let z = self.set("eq.f64", s, ZERO_D);
        let prod = self.opd("mul.rn.f64", &[s, &dd]);
        let m = self.opd("selp.f64", &[ZERO_D, &prod, &z]);
        self.op("cvt.rn.f32.f64", &[&m])
    }

    /// Division's slopes in `a` and `b`, in double and rounded to float:
    /// `(float)(1.0 / (double)b)` and `(float)(-(double)a / ((double)b * (double)b))`.
    fn div_slopes(&mut self, a: &str, b: &str) -> (String, String) {
        let bd = self.opd("cvt.f64.f32", &[b]);
        let q = self.opd("div.rn.f64", &[ONE_D, &bd]);
        let sa = self.op("cvt.rn.f32.f64", &[&q]);
        let ad = self.opd("cvt.f64.f32", &[a]);
        let na = self.opd("neg.f64", &[&ad]);
        let bb = self.opd("mul.rn.f64", &[&bd, &bd]);
        let q = self.opd("div.rn.f64", &[&na, &bb]);
        let sb = self.op("cvt.rn.f32.f64", &[&q]);
        (sa, sb)
    }

    /// Whether `|b| > 0.001f`, protected division's test.
    fn divides(&mut self, b: &str) -> String {
        let abs = self.op("abs.f32", &[b]);
        let threshold = format!("0f{:08X}", 0.001f32.to_bits());
        self.set("gt.f32", &abs, &threshold)
    }

    /// One member: the forward sweep (values, the output into `out0`), then the backward sweep
    /// (adjoints, each parameter's derivative added in order, then stored into `grad`).
    fn member(&mut self, nodes: &[Node], last_out: Option<usize>) {
        let mut v: Vec<String> = Vec::with_capacity(nodes.len());
        for n in nodes {
            let x = n.a.map(|a| v[a].clone()).unwrap_or_default();
            let y = n.b.map(|b| v[b].clone()).unwrap_or_default();
            let value = match n.op {
                Op::PushF if n.arg > 0 => {
                    let d = self.f();
                    ins!(self, "ld.f32 \t{d}, [%rd1+{}]", 4 * (n.arg - 1));
                    d
                }
                Op::PushF => self.op("mov.f32", &[&format!("0f{:08X}", n.bits)]),
                Op::Load => {
                    let d = self.f();
                    ins!(self, "ld.f32 \t{d}, [%rd0+{}]", 8 * n.arg);
                    d
                }
                Op::Out => {
                    if n.arg == 0 {
                        ins!(self, "st.f32 \t[%rd2], {x}");
                    }
                    String::new()
                }
                Op::NegF => self.op("neg.f32", &[&x]),
                Op::AddF => self.op("add.rn.f32", &[&x, &y]),
                Op::SubF => self.op("sub.rn.f32", &[&x, &y]),
                Op::MulF => self.op("mul.rn.f32", &[&x, &y]),
                Op::DivF => self.op("div.rn.f32", &[&x, &y]),
                Op::PowF => self.call("powf", &[&x, &y]),
                Op::PdivF => {
                    let p = self.divides(&y);
                    let q = self.op("div.rn.f32", &[&x, &y]);
                    self.op("selp.f32", &[&q, ONE, &p])
                }
                Op::FminF => self.op("min.f32", &[&x, &y]),
                Op::FmaxF => self.op("max.f32", &[&x, &y]),
                Op::SqrtF => self.op("sqrt.rn.f32", &[&x]),
                Op::FabsF => self.op("abs.f32", &[&x]),
                Op::SinF => self.call("sinf", &[&x]),
                Op::CosF => self.call("cosf", &[&x]),
                Op::ExpF => self.call("expf", &[&x]),
                Op::LogF => self.call("logf", &[&x]),
                Op::TanhF => self.call("tanhf", &[&x]),
                op => unreachable!("{op:?} is not straight-line float code"),
            };
            v.push(value);
        }
        // Adjoints: 0 until the op that consumes a value sets it.
        let mut g: Vec<Option<String>> = vec![None; nodes.len()];
        let mut grad: Vec<(u32, String)> = Vec::new();
        for (i, n) in nodes.iter().enumerate().rev() {
            let gi = match &g[i] {
                Some(r) => r.clone(),
                None => self.op("mov.f32", &[ZERO]),
            };
            let (a, b) = (n.a, n.b);
            let va = a.map(|a| v[a].clone()).unwrap_or_default();
            let vb = b.map(|b| v[b].clone()).unwrap_or_default();
            match n.op {
                Op::Out => {
                    let seed = if Some(i) == last_out { ONE } else { ZERO };
                    g[a.expect("an operand")] = Some(self.op("mov.f32", &[seed]));
                }
                Op::PushF if n.arg > 0 => {
                    let k = n.arg - 1;
                    // grad[k] starts at 0.0f and each use adds into it, as `grad[k] += g`.
                    let at = grad.iter().position(|(p, _)| *p == k);
                    let before = at.map_or_else(|| ZERO.to_owned(), |j| grad[j].1.clone());
                    let sum = self.op("add.rn.f32", &[&before, &gi]);
                    match at {
                        Some(j) => grad[j].1 = sum,
                        None => grad.push((k, sum)),
                    }
                }
                Op::PushF | Op::Load => {}
                Op::NegF => g[a.expect("an operand")] = Some(self.op("neg.f32", &[&gi])),
                Op::AddF | Op::SubF | Op::MulF | Op::DivF | Op::PdivF => {
                    let (sa, sb) = match n.op {
                        Op::AddF => (self.op("mov.f32", &[ONE]), self.op("mov.f32", &[ONE])),
                        Op::SubF => (self.op("mov.f32", &[ONE]), self.op("mov.f32", &[MINUS_ONE])),
                        Op::MulF => (vb.clone(), va.clone()),
                        Op::DivF => self.div_slopes(&va, &vb),
                        _ => {
                            let p = self.divides(&vb);
                            let (sa, sb) = self.div_slopes(&va, &vb);
                            (self.op("selp.f32", &[&sa, ZERO, &p]), self.op("selp.f32", &[&sb, ZERO, &p]))
                        }
                    };
                    g[a.expect("an operand")] = Some(self.mixf(&sa, &gi));
                    g[b.expect("an operand")] = Some(self.mixf(&sb, &gi));
                }
                Op::PowF => {
                    // r = powf(a, b) is the forward sweep's value, the same bits.
                    let r = v[i].clone();
                    let bm1 = self.op("sub.rn.f32", &[&vb, ONE]);
                    let q = self.call("powf", &[&va, &bm1]);
                    let m = self.op("mul.rn.f32", &[&vb, &q]);
                    let sa = self.opd("cvt.f64.f32", &[&m]);
                    let positive = self.set("gt.f32", &va, ZERO);
                    let l = self.call("logf", &[&va]);
                    let m = self.op("mul.rn.f32", &[&r, &l]);
                    let sbd = self.opd("cvt.f64.f32", &[&m]);
                    let sb = self.opd("selp.f64", &[&sbd, ZERO_D, &positive]);
                    g[a.expect("an operand")] = Some(self.mix(&sa, &gi));
                    g[b.expect("an operand")] = Some(self.mix(&sb, &gi));
                }
                Op::FminF | Op::FmaxF => {
                    let r = v[i].clone();
                    let same = self.set("eq.f32", &r, &va);
                    let nan = self.set("nan.f32", &vb, &vb);
                    let first = self.p();
                    ins!(self, "or.pred \t{first}, {same}, {nan}");
                    g[a.expect("an operand")] = Some(self.op("selp.f32", &[&gi, ZERO, &first]));
                    g[b.expect("an operand")] = Some(self.op("selp.f32", &[ZERO, &gi, &first]));
                }
                unary => {
                    let (x, y) = (va.clone(), v[i].clone());
                    let slope = match unary {
                        Op::SinF => self.call("cosf", &[&x]),
                        Op::CosF => {
                            let s = self.call("sinf", &[&x]);
                            self.op("neg.f32", &[&s])
                        }
                        Op::ExpF => y,
                        Op::LogF => self.op("div.rn.f32", &[ONE, &x]),
                        Op::SqrtF => self.op("div.rn.f32", &[HALF, &y]),
                        Op::FabsF => {
                            let neg = self.set("lt.f32", &x, ZERO);
                            self.op("selp.f32", &[MINUS_ONE, ONE, &neg])
                        }
                        Op::TanhF => {
                            let yy = self.op("mul.rn.f32", &[&y, &y]);
                            self.op("sub.rn.f32", &[ONE, &yy])
                        }
                        op => unreachable!("{op:?} is not straight-line float code"),
                    };
                    g[a.expect("an operand")] = Some(self.op("mul.rn.f32", &[&gi, &slope]));
                }
            }
        }
        for (k, sum) in grad {
            ins!(self, "st.f32 \t[%rd3+{}], {sum}", 4 * k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpreter::assemble_structure;
    use gpfarm_gp::{Phenotype, Problem, Program};

    fn words(text: &str) -> Vec<u32> {
        let problem = friedman();
        let program = Program::parse(&problem, &Phenotype::new(text)).unwrap();
        assemble_structure(&problem, &program).unwrap().words
    }

    fn friedman() -> Problem {
        Problem::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/friedman1"))
            .unwrap()
    }

    #[test]
    fn a_unit_rounds_every_operation_and_calls_the_math_library() {
        let a = words(
            "p[0] * sinf(x1 * p[1]) + p[2] / (x2 - p[3]) + powf(fabsf(p[4] * x3), p[5]) + p[6] * x4 + p[7] * x5",
        );
        let b = words(
            "p[0] * expf(p[1] * x1) - tanhf(p[2] * x2) * p[3] + sqrtf(p[4] * x3 * x3) + logf(p[5] + x4 * x4) + fminf(p[6], x5) * p[7]",
        );
        let ptx = fit_member_unit(8, &[&a, &b], SmArch::SM_90).unwrap();
        for f in ["gpm_sinf", "gpm_cosf", "gpm_powf", "gpm_logf", "gpm_expf", "gpm_tanhf"] {
            assert!(ptx.contains(&format!(".extern .func (.param .b32 r) {f} ")), "{f}\n{ptx}");
        }
        assert!(ptx.contains(&format!(".visible .func (.param .b32 func_retval0) {FIT_MEMBER_FUNCTION}(")));
        assert!(ptx.contains("$gpfarm_m0:") && ptx.contains("$gpfarm_m1:"));
        for line in ptx.lines().map(str::trim) {
            let op = line.split_whitespace().next().unwrap_or("");
            for bare in
                ["add.f", "sub.f", "mul.f", "div.f", "fma", "mad", "div.approx", "div.full", "sqrt.approx"]
            {
                assert!(!op.starts_with(bare), "{line}");
            }
            assert!(!line.contains(".ftz"), "{line}");
        }
        // Each of the eight parameters' derivatives is stored once per member.
        for k in 0..8 {
            assert_eq!(ptx.matches(&format!("[%rd3+{}]", 4 * k)).count(), 2, "parameter {k}");
        }
    }

    #[test]
    fn a_member_that_is_not_straight_line_code_or_too_wide_is_refused_in_one_line() {
        let branch = words("x1 > p[0] ? p[1] * x2 + p[2] * x3 + p[3] * x4 + p[4] : p[5] * x5 + p[6] * p[7]");
        let why = fit_member_unit(8, &[&branch], SmArch::SM_90).unwrap_err().to_string();
        assert!(why.contains("member 0 is not straight-line float code of at most 8 parameters"), "{why}");
        let wide = words(
            "p[0] * x1 + p[1] * x2 + p[2] * x3 + p[3] * x4 + p[4] * x5 + p[5] + p[6] * x1 * x2 + p[7] * x3 + p[8] * x4",
        );
        assert!(fit_member_unit(8, &[&wide], SmArch::SM_90).is_err());
        assert!(fit_member_unit(16, &[&wide], SmArch::SM_90).is_ok());
        assert!(fit_member_unit(7, &[], SmArch::SM_90).is_err());
    }
}
