//! One individual's kernel as PTX text, from its compiled [`Program`]. Must never emit an
//! instruction whose result could differ from what NVRTC (with `--fmad=false`) makes of the same
//! phenotype in the standard harness: every floating operation names its rounding, and nothing
//! here is left to ptxas to contract or approximate.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use gpfarm_gp::problem::template::kernel_params;
use gpfarm_gp::problem::{InputType, Kind, ParamRole, ScalarType};
use gpfarm_gp::program::FAILED_FLAGS;
use gpfarm_gp::program::tree::{ArithOp, Bin, Body, CmpOp, Expr, Fn1, Fn2, IntOp, Source, Stmt, Ty, Value};
use gpfarm_gp::{Problem, Program};
use gpfarm_protocol::ptx_math::{self, MathFn};

/// Register classes, in the order of their `.reg` declarations.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Pred,
    B32,
    B64,
    F32,
    F64,
}

const CLASSES: [(Class, &str, &str); 5] = [
    (Class::Pred, ".pred", "%p"),
    (Class::B32, ".b32", "%r"),
    (Class::B64, ".b64", "%rd"),
    (Class::F32, ".f32", "%f"),
    (Class::F64, ".f64", "%fd"),
];

fn class(ty: Ty) -> Class {
    match ty {
        Ty::Int => Class::B32,
        Ty::Float => Class::F32,
        Ty::Double => Class::F64,
    }
}

/// The PTX type suffix for moves, selects and parameter passing of `ty`.
fn bits(ty: Ty) -> &'static str {
    match ty {
        Ty::Int => "b32",
        Ty::Float => "f32",
        Ty::Double => "f64",
    }
}

/// The PTX type suffix for arithmetic and comparisons on `ty`.
fn num(ty: Ty) -> &'static str {
    match ty {
        Ty::Int => "s32",
        Ty::Float => "f32",
        Ty::Double => "f64",
    }
}

fn scalar_ty(t: ScalarType) -> Ty {
    match t {
        ScalarType::Int => Ty::Int,
        ScalarType::Float => Ty::Float,
    }
}

/// A value: a register, or a constant written as a PTX immediate.
#[derive(Clone)]
enum Opnd {
    Reg(String),
    Imm(Value),
}

#[derive(Clone)]
struct Val {
    op: Opnd,
    ty: Ty,
}

/// A constant as a PTX immediate: floating values by their exact bits.
fn immediate(v: Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format!("0f{:08X}", f.to_bits()),
        Value::Double(d) => format!("0d{:016X}", d.to_bits()),
    }
}

/// `a op b` when both are constants ([`crate::fold::arith`]).
fn fold_arith(op: ArithOp, a: &Val, b: &Val) -> Option<Val> {
    let (Opnd::Imm(x), Opnd::Imm(y)) = (&a.op, &b.op) else { return None };
    crate::fold::arith(op, *x, *y).map(|v| Val { op: Opnd::Imm(v), ty: a.ty })
}

/// A math function of constant arguments ([`crate::fold::call`]).
fn fold_call(name: &str, ty: Ty, args: &[&Val]) -> Option<Val> {
    let mut values = Vec::with_capacity(args.len());
    for a in args {
        let Opnd::Imm(v) = a.op else { return None };
        values.push(v);
    }
    crate::fold::call(name, ty, &values).map(|v| Val { op: Opnd::Imm(v), ty })
}

/// A module-local function a unit defines once for its kernels to call: the `rem.s32` or
/// `div.s32` of a divisor known only at run time. ptxas expands each such instruction into a
/// long sequence; inline, Search's remainders cost more to assemble than the rest of its
/// kernels (measured on nvJitLink 13.0.88 at `-O0`: a unit of ten Search individuals 58 ms
/// inline, 36 ms through the function). The function holds the same instruction, so the value
/// is the same; a constant divisor stays inline, where ptxas multiplies by its reciprocal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Helper {
    /// `div.s32`.
    Div,
    /// `rem.s32`.
    Rem,
    /// A wrapped read of an int array: `len <= 0 ? 0 : a[m < 0 ? m + len : m]` with
    /// `m = k % len` ([`Emitter::index`]).
    Read,
}

impl Helper {
    fn instruction(self) -> &'static str {
        match self {
            Helper::Div => "div.s32",
            Helper::Rem | Helper::Read => "rem.s32",
        }
    }

    /// The function's name.
    pub(super) fn name(self) -> &'static str {
        match self {
            Helper::Div => "gpfarm_div_s32",
            Helper::Rem => "gpfarm_rem_s32",
            Helper::Read => "gpfarm_read_wrapped",
        }
    }

    /// The function's definition.
    pub(super) fn definition(self) -> String {
        let (f, i) = (self.name(), self.instruction());
        if self == Helper::Read {
            return format!(
                ".func (.param .b32 {f}_r) {f}(.param .b64 {f}_base, .param .b32 {f}_len, .param .b32 {f}_k)\n{{\n\
                 \t.reg .pred \t%p<3>;\n\t.reg .b32 \t%r<8>;\n\t.reg .b64 \t%rd<4>;\n\n\
                 \tld.param.b64 \t%rd1, [{f}_base];\n\tld.param.b32 \t%r1, [{f}_len];\n\
                 \tld.param.b32 \t%r2, [{f}_k];\n\tmov.b32 \t%r7, 0;\n\tsetp.le.s32 \t%p1, %r1, 0;\n\
                 \t@%p1 bra \t$L__{f}_done;\n\t{i} \t%r3, %r2, %r1;\n\tsetp.lt.s32 \t%p2, %r3, 0;\n\
                 \tadd.s32 \t%r4, %r3, %r1;\n\tselp.b32 \t%r5, %r4, %r3, %p2;\n\tmul.wide.s32 \t%rd2, %r5, 4;\n\
                 \tadd.s64 \t%rd3, %rd1, %rd2;\n\tld.global.nc.u32 \t%r7, [%rd3];\n$L__{f}_done:\n\
                 \tst.param.b32 \t[{f}_r], %r7;\n\tret;\n}}\n"
            );
        }
        format!(
            ".func (.param .b32 {f}_r) {f}(.param .b32 {f}_a, .param .b32 {f}_b)\n{{\n\t.reg .b32 \t%r<4>;\n\n\tld.param.b32 \t%r1, [{f}_a];\n\tld.param.b32 \t%r2, [{f}_b];\n\t{i} \t%r3, %r1, %r2;\n\tst.param.b32 \t[{f}_r], %r3;\n\tret;\n}}\n"
        )
    }
}

/// What the kernels of a unit use from outside themselves.
#[derive(Debug, Default)]
pub(super) struct Needs {
    /// Library functions called (indices into [`ptx_math::FUNCTIONS`]).
    pub(super) calls: BTreeSet<usize>,
    /// Module-local functions called.
    pub(super) helpers: BTreeSet<Helper>,
    /// Whether a kernel counts loop steps, and so sets its member's failure flag
    /// ([`FAILED_FLAGS`]) past the limit.
    pub(super) flags: bool,
}

/// Registers for finding a case whose loop repeats its state (Brent's method), as the GPU
/// interpreter finds it: at every `2^k`-th step the step's loop and the writable slots are kept;
/// meeting them again at a step means the case runs the same steps forever and would pass the
/// step limit, so it fails at once (its member's flag), with the same outcome, sooner. The state
/// at a step is exactly these: read-only slots and inputs never change, and no other value is
/// live at a loop's test.
struct Cycle {
    /// The loop of the kept step (its number in the program), `u32::MAX` before the first.
    at_loop: String,
    /// The step count at which the state is kept next.
    next: String,
    /// Each writable slot, the register keeping its value, and their width (`b32`, `b64`).
    kept: Vec<(usize, String, &'static str)>,
    /// Loops emitted so far in the program.
    loops: u32,
}

/// The state of one kernel's emission.
struct Emitter<'a> {
    body: String,
    counts: [u32; 5],
    labels: u32,
    /// Register of each variable slot.
    slots: Vec<String>,
    slot_types: &'a [Ty],
    /// Base address and length register of each array.
    arrays: Vec<(String, String)>,
    /// What the kernels call.
    needs: &'a mut Needs,
    /// Ints of predicates not yet written, by register ([`Emitter::int_of_pred`]).
    lazy: HashMap<String, String>,
    /// The case's step counter of the program being emitted (statements only).
    steps: Option<String>,
    /// The case's kept state for finding a loop that repeats ([`Cycle`]; statements only).
    cycle: Option<Cycle>,
    /// The program's place in its unit: its failure flag.
    member: usize,
    /// Loops around the code being emitted: inside one, reads and int divisions are inlined
    /// rather than called ([`Emitter::index`], [`Emitter::helper`]), since a loop runs them
    /// many times.
    loop_depth: u32,
    /// The problem's step limit.
    max_steps: u64,
}

macro_rules! ins {
    ($e:expr, $($arg:tt)*) => {{
        $e.body.push('\t');
        let _ = write!($e.body, $($arg)*);
        $e.body.push_str(";\n");
    }};
}

impl Emitter<'_> {
    fn fresh(&mut self, c: Class) -> String {
        let k = c as usize;
        self.counts[k] += 1;
        format!("{}{}", CLASSES[k].2, self.counts[k])
    }

    fn label(&mut self) -> String {
        self.labels += 1;
        format!("$L__{}", self.labels)
    }

    fn place(&mut self, label: &str) {
        let _ = writeln!(self.body, "{label}:");
    }

    /// Writes the `selp` of an int made from a predicate ([`Emitter::int_of_pred`]) before its
    /// first use as an int.
    fn materialize(&mut self, v: &Val) {
        if let Opnd::Reg(r) = &v.op
            && let Some(p) = self.lazy.remove(r)
        {
            ins!(self, "selp.s32 \t{r}, 1, 0, {p}");
        }
    }

    /// The operand's text (an immediate stays one).
    fn text(&mut self, v: &Val) -> String {
        self.materialize(v);
        match &v.op {
            Opnd::Reg(r) => r.clone(),
            Opnd::Imm(c) => immediate(*c),
        }
    }

    /// The value in a register (constants are moved into a fresh one).
    fn reg(&mut self, v: &Val) -> String {
        self.materialize(v);
        match &v.op {
            Opnd::Reg(r) => r.clone(),
            Opnd::Imm(c) => {
                let r = self.fresh(class(v.ty));
                ins!(self, "mov.{} \t{r}, {}", bits(v.ty), immediate(*c));
                r
            }
        }
    }

    fn new_val(&mut self, ty: Ty) -> (String, Val) {
        let r = self.fresh(class(ty));
        (r.clone(), Val { op: Opnd::Reg(r), ty })
    }

    /// C conversion to `to`. Constants are converted here with the same rounding as the
    /// instruction (round to nearest even; toward zero and saturating, NaN to 0, for int).
    fn convert(&mut self, v: Val, to: Ty) -> Val {
        if v.ty == to {
            return v;
        }
        if let Opnd::Imm(c) = v.op {
            return Val { op: Opnd::Imm(c.to(to)), ty: to };
        }
        let op = match (v.ty, to) {
            (Ty::Int, Ty::Float) => "cvt.rn.f32.s32",
            (Ty::Int, Ty::Double) => "cvt.rn.f64.s32",
            (Ty::Float, Ty::Int) => "cvt.rzi.s32.f32",
            (Ty::Double, Ty::Int) => "cvt.rzi.s32.f64",
            (Ty::Float, Ty::Double) => "cvt.f64.f32",
            (Ty::Double, Ty::Float) => "cvt.rn.f32.f64",
            _ => unreachable!("equal types return above"),
        };
        let a = self.text(&v);
        let (r, out) = self.new_val(to);
        ins!(self, "{op} \t{r}, {a}");
        out
    }

    /// A predicate true when `v` is nonzero (NaN is nonzero: `neu`).
    fn truth(&mut self, v: Val) -> String {
        // A comparison or logical operation decides by its predicate, not by the int made of it.
        if let Opnd::Reg(r) = &v.op
            && let Some(p) = self.lazy.get(r)
        {
            return p.clone();
        }
        let a = self.reg(&v);
        let p = self.fresh(Class::Pred);
        match v.ty {
            Ty::Int => ins!(self, "setp.ne.s32 \t{p}, {a}, 0"),
            Ty::Float => ins!(self, "setp.neu.f32 \t{p}, {a}, 0f00000000"),
            Ty::Double => ins!(self, "setp.neu.f64 \t{p}, {a}, 0d0000000000000000"),
        }
        p
    }

    /// Int 1 where `p` holds, else 0: written where it is first used as an int
    /// ([`Emitter::materialize`]), and never where it only decides (C's `if (a < b)` is a
    /// branch on the comparison's predicate, as NVRTC writes it).
    fn int_of_pred(&mut self, p: &str) -> Val {
        let (r, out) = self.new_val(Ty::Int);
        self.lazy.insert(r, p.to_owned());
        out
    }

    fn expr(&mut self, e: &Expr) -> Val {
        match e {
            Expr::Const(v) => Val { op: Opnd::Imm(*v), ty: v.ty() },
            Expr::Var(slot) => {
                let ty = self.slot_ty(*slot);
                Val { op: Opnd::Reg(self.slots[*slot].clone()), ty }
            }
            Expr::Index(array, i) => {
                // `a[e % LEN]`, LEN the array's length (Search's grammar writes every index so):
                // for `LEN > 0` the read's own remainder gives what `% LEN` gives, and it gives 0
                // for `LEN <= 0` without dividing, so the chain is emitted without its last step
                // and the remainder is computed once.
                let k = match i.as_ref() {
                    Expr::Chain(first, rest) if self.reduced_by_length(i, *array) => {
                        let mut acc = self.expr(first);
                        for (op, e) in &rest[..rest.len() - 1] {
                            let rhs = self.expr(e);
                            acc = self.binary(*op, acc, rhs);
                        }
                        acc
                    }
                    _ => self.expr(i),
                };
                let k = self.convert(k, Ty::Int);
                self.index(*array, k)
            }
            Expr::Convert(ty, a) => {
                let v = self.expr(a);
                self.convert(v, *ty)
            }
            Expr::Neg(a) => {
                let v = self.expr(a);
                self.materialize(&v);
                match v.op {
                    Opnd::Imm(Value::Int(i)) => Val { op: Opnd::Imm(Value::Int(i.wrapping_neg())), ty: v.ty },
                    Opnd::Imm(Value::Float(f)) => Val { op: Opnd::Imm(Value::Float(-f)), ty: v.ty },
                    Opnd::Imm(Value::Double(d)) => Val { op: Opnd::Imm(Value::Double(-d)), ty: v.ty },
                    Opnd::Reg(a) => {
                        let (r, out) = self.new_val(v.ty);
                        ins!(self, "neg.{} \t{r}, {a}", num(v.ty));
                        out
                    }
                }
            }
            Expr::BitNot(a) => {
                let v = self.expr(a);
                let v = self.convert(v, Ty::Int);
                let a = self.reg(&v);
                let (r, out) = self.new_val(Ty::Int);
                ins!(self, "not.b32 \t{r}, {a}");
                out
            }
            Expr::Not(a) => {
                let v = self.expr(a);
                let p = self.truth(v);
                let q = self.fresh(Class::Pred);
                ins!(self, "not.pred \t{q}, {p}");
                self.int_of_pred(&q)
            }
            Expr::Chain(first, rest) => {
                let mut acc = self.expr(first);
                for (op, e) in rest {
                    let rhs = self.expr(e);
                    acc = self.binary(*op, acc, rhs);
                }
                acc
            }
            Expr::Cond(c, a, b) => {
                let cv = self.expr(c);
                let p = self.truth(cv);
                let a = self.expr(a);
                let b = self.expr(b);
                let ty = Ty::usual(a.ty, b.ty);
                let a = self.convert(a, ty);
                let b = self.convert(b, ty);
                let (ta, tb) = (self.text(&a), self.text(&b));
                let (r, out) = self.new_val(ty);
                ins!(self, "selp.{} \t{r}, {ta}, {tb}, {p}", bits(ty));
                out
            }
            Expr::Call1(f, ty, a) => {
                let v = self.expr(a);
                let ty = if *ty == Ty::Int { Ty::Double } else { *ty };
                let v = self.convert(v, ty);
                if let Some(folded) = fold_call(f.c_name(), ty, &[&v]) {
                    return folded;
                }
                match f {
                    Fn1::Sqrt | Fn1::Fabs => {
                        let a = self.reg(&v);
                        let op = if *f == Fn1::Sqrt { "sqrt.rn" } else { "abs" };
                        let (r, out) = self.new_val(ty);
                        ins!(self, "{op}.{} \t{r}, {a}", num(ty));
                        out
                    }
                    _ => self.call(f.c_name(), ty, &[v]),
                }
            }
            Expr::Call2(f, ty, a, b) => {
                let ty = if *ty == Ty::Int { Ty::Double } else { *ty };
                let a = self.expr(a);
                let a = self.convert(a, ty);
                let b = self.expr(b);
                let b = self.convert(b, ty);
                if let Some(folded) = fold_call(f.c_name(), ty, &[&a, &b]) {
                    return folded;
                }
                match f {
                    Fn2::Fmin | Fn2::Fmax => {
                        let ra = self.reg(&a);
                        let tb = self.text(&b);
                        let op = if *f == Fn2::Fmin { "min" } else { "max" };
                        let (r, out) = self.new_val(ty);
                        ins!(self, "{op}.{} \t{r}, {ra}, {tb}", num(ty));
                        out
                    }
                    Fn2::Pow => self.call(f.c_name(), ty, &[a, b]),
                    Fn2::Pdiv => self.pdiv(a, b, ty),
                }
            }
        }
    }

    /// `pdiv(a, b)` in `ty`, the inline function every NVRTC unit defines: `fabs(b) > 0.001 ? a /
    /// b : 1` as `abs`, `setp.gt` against the threshold in `ty`, `div.rn` and `selp` (NaN `b`
    /// fails the test: 1). A constant `b` decides here, as NVVM decides it: the quotient or 1.
    fn pdiv(&mut self, a: Val, b: Val, ty: Ty) -> Val {
        let (threshold, one) = match ty {
            Ty::Float => (Value::Float(0.001), Value::Float(1.0)),
            _ => (Value::Double(0.001), Value::Double(1.0)),
        };
        let div = if ty == Ty::Float { "div.rn.f32" } else { "div.rn.f64" };
        if let Opnd::Imm(c) = b.op {
            let divides = match c {
                Value::Float(y) => y.abs() > 0.001f32,
                Value::Double(y) => y.abs() > 0.001,
                Value::Int(_) => unreachable!("converted to the call's floating type"),
            };
            return if divides { self.op2(div, a, b, ty) } else { Val { op: Opnd::Imm(one), ty } };
        }
        let rb = self.reg(&b);
        let (magnitude, _) = self.new_val(ty);
        ins!(self, "abs.{} \t{magnitude}, {rb}", num(ty));
        let p = self.fresh(Class::Pred);
        ins!(self, "setp.gt.{} \t{p}, {magnitude}, {}", num(ty), immediate(threshold));
        let ra = self.reg(&a);
        let (quotient, _) = self.new_val(ty);
        ins!(self, "{div} \t{quotient}, {ra}, {rb}");
        let (r, out) = self.new_val(ty);
        ins!(self, "selp.{} \t{r}, {quotient}, {}, {p}", bits(ty), immediate(one));
        out
    }

    fn slot_ty(&self, slot: usize) -> Ty {
        self.slot_types[slot]
    }

    /// `a op b` after C's usual arithmetic conversions.
    fn binary(&mut self, op: Bin, a: Val, b: Val) -> Val {
        match op {
            Bin::Arith(o) => {
                let ty = Ty::usual(a.ty, b.ty);
                let a = self.convert(a, ty);
                let b = self.convert(b, ty);
                if let Some(folded) = fold_arith(o, &a, &b) {
                    return folded;
                }
                let name = match (o, ty) {
                    (ArithOp::Add, Ty::Int) => "add.s32",
                    (ArithOp::Sub, Ty::Int) => "sub.s32",
                    (ArithOp::Mul, Ty::Int) => "mul.lo.s32",
                    (ArithOp::Div, Ty::Int) if matches!(b.op, Opnd::Reg(_)) => {
                        return self.helper(Helper::Div, a, b);
                    }
                    (ArithOp::Div, Ty::Int) => "div.s32",
                    (ArithOp::Add, Ty::Float) => "add.rn.f32",
                    (ArithOp::Sub, Ty::Float) => "sub.rn.f32",
                    (ArithOp::Mul, Ty::Float) => "mul.rn.f32",
                    (ArithOp::Div, Ty::Float) => "div.rn.f32",
                    (ArithOp::Add, Ty::Double) => "add.rn.f64",
                    (ArithOp::Sub, Ty::Double) => "sub.rn.f64",
                    (ArithOp::Mul, Ty::Double) => "mul.rn.f64",
                    (ArithOp::Div, Ty::Double) => "div.rn.f64",
                };
                self.op2(name, a, b, ty)
            }
            Bin::Int(o) => {
                let a = self.convert(a, Ty::Int);
                let b = self.convert(b, Ty::Int);
                if o == IntOp::Rem && matches!(b.op, Opnd::Reg(_)) {
                    return self.helper(Helper::Rem, a, b);
                }
                let name = match o {
                    IntOp::Rem => "rem.s32",
                    IntOp::And => "and.b32",
                    IntOp::Or => "or.b32",
                    IntOp::Xor => "xor.b32",
                    IntOp::Shl => "shl.b32",
                    IntOp::Shr => "shr.s32",
                };
                self.op2(name, a, b, Ty::Int)
            }
            Bin::Cmp(o) => {
                let ty = Ty::usual(a.ty, b.ty);
                let a = self.convert(a, ty);
                let b = self.convert(b, ty);
                let cmp = match (o, ty) {
                    (CmpOp::Lt, _) => "lt",
                    (CmpOp::Gt, _) => "gt",
                    (CmpOp::Le, _) => "le",
                    (CmpOp::Ge, _) => "ge",
                    (CmpOp::Eq, _) => "eq",
                    (CmpOp::Ne, Ty::Int) => "ne",
                    // C's `!=` is true when either side is NaN: unordered or not equal.
                    (CmpOp::Ne, _) => "neu",
                };
                let ra = self.reg(&a);
                let tb = self.text(&b);
                let p = self.fresh(Class::Pred);
                ins!(self, "setp.{cmp}.{} \t{p}, {ra}, {tb}", num(ty));
                self.int_of_pred(&p)
            }
            Bin::And | Bin::Or => {
                // Both sides are evaluated: no expression of the subset has side effects
                // or can fault (array reads wrap, int division by zero does not trap).
                let p = self.truth(a);
                let q = self.truth(b);
                let r = self.fresh(Class::Pred);
                let name = if op == Bin::And { "and" } else { "or" };
                ins!(self, "{name}.pred \t{r}, {p}, {q}");
                self.int_of_pred(&r)
            }
        }
    }

    fn op2(&mut self, name: &str, a: Val, b: Val, ty: Ty) -> Val {
        let ra = self.reg(&a);
        let tb = self.text(&b);
        let (r, out) = self.new_val(ty);
        ins!(self, "{name} \t{r}, {ra}, {tb}");
        out
    }

    /// `array[k]` as the template's `gp_wrapped_ints::operator[]` reads it: 0 for an empty
    /// array, else element `k % len`, moved into `[0, len)`. A call of the unit's read function
    /// ([`Helper::Read`]): inline, the remainder, the wrap and the predicated load cost ptxas
    /// more per read than the call does (a Search individual reads about six times).
    /// Inside a loop the read is inlined instead: it runs once per iteration.
    fn index(&mut self, array: usize, k: Val) -> Val {
        let (base, len) = self.arrays[array].clone();
        if self.loop_depth > 0 {
            let tk = self.text(&k);
            let (r, out) = self.new_val(Ty::Int);
            let (empty, negative) = (self.fresh(Class::Pred), self.fresh(Class::Pred));
            let (m, wrapped, at) = (self.fresh(Class::B32), self.fresh(Class::B32), self.fresh(Class::B32));
            let (offset, address) = (self.fresh(Class::B64), self.fresh(Class::B64));
            let done = self.label();
            ins!(self, "mov.b32 \t{r}, 0");
            ins!(self, "setp.le.s32 \t{empty}, {len}, 0");
            ins!(self, "@{empty} bra \t{done}");
            ins!(self, "rem.s32 \t{m}, {tk}, {len}");
            ins!(self, "setp.lt.s32 \t{negative}, {m}, 0");
            ins!(self, "add.s32 \t{wrapped}, {m}, {len}");
            ins!(self, "selp.b32 \t{at}, {wrapped}, {m}, {negative}");
            ins!(self, "mul.wide.s32 \t{offset}, {at}, 4");
            ins!(self, "add.s64 \t{address}, {base}, {offset}");
            ins!(self, "ld.global.nc.u32 \t{r}, [{address}]");
            self.place(&done);
            return out;
        }
        let h = Helper::Read;
        self.needs.helpers.insert(h);
        let tk = self.text(&k);
        let f = h.name();
        self.body.push_str("\t{\n");
        ins!(self, ".param .b64 {f}_base");
        ins!(self, "st.param.b64 \t[{f}_base], {base}");
        ins!(self, ".param .b32 {f}_len");
        ins!(self, "st.param.b32 \t[{f}_len], {len}");
        ins!(self, ".param .b32 {f}_k");
        ins!(self, "st.param.b32 \t[{f}_k], {tk}");
        ins!(self, ".param .b32 {f}_r");
        ins!(self, "call.uni ({f}_r), {f}, ({f}_base, {f}_len, {f}_k)");
        let (r, out) = self.new_val(Ty::Int);
        ins!(self, "ld.param.b32 \t{r}, [{f}_r]");
        self.body.push_str("\t}\n");
        out
    }

    /// Whether `e`'s value is a remainder by the length of `array` (a chain whose last step is
    /// `% LEN`, LEN that array's length), as Search's grammar writes every index.
    fn reduced_by_length(&self, e: &Expr, array: usize) -> bool {
        let Expr::Chain(_, rest) = e else { return false };
        let Some((Bin::Int(IntOp::Rem), Expr::Var(slot))) = rest.last() else { return false };
        self.slot_ty(*slot) == Ty::Int && self.slots[*slot] == self.arrays[array].1
    }

    /// A call to the math library's `c_function` in `ty` (the `f` form for float).
    fn call(&mut self, c_function: &str, ty: Ty, args: &[Val]) -> Val {
        let name = if ty == Ty::Float { format!("{c_function}f") } else { c_function.to_owned() };
        let (index, m): (usize, &MathFn) = ptx_math::FUNCTIONS
            .iter()
            .enumerate()
            .find(|(_, m)| m.c_function == name)
            .expect("every transcendental function of the subset is in the math library");
        self.needs.calls.insert(index);
        let width = if ty == Ty::Double { "b64" } else { "b32" };
        let t = bits(ty);
        self.body.push_str("\t{\n");
        let mut params = Vec::new();
        for (k, a) in args.iter().enumerate() {
            let ta = self.text(a);
            ins!(self, ".param .{width} param{k}");
            ins!(self, "st.param.{t} \t[param{k}+0], {ta}");
            params.push(format!("param{k}"));
        }
        ins!(self, ".param .{width} retval0");
        ins!(self, "call.uni (retval0), {}, ({})", m.symbol, params.join(", "));
        let (r, out) = self.new_val(ty);
        ins!(self, "ld.param.{t} \t{r}, [retval0+0]");
        self.body.push_str("\t}\n");
        out
    }

    /// At a loop's step (the counter `steps` just advanced): fails the case when its state is
    /// the kept one, and keeps it at every `2^k`-th step ([`Cycle`]).
    fn repeats(&mut self, steps: &str) {
        let Some(mut cycle) = self.cycle.take() else { return };
        let id = cycle.loops;
        cycle.loops += 1;
        let same = self.fresh(Class::Pred);
        ins!(self, "setp.eq.u32 \t{same}, {}, {id}", cycle.at_loop);
        for (slot, kept, width) in &cycle.kept {
            ins!(self, "setp.eq.and.{width} \t{same}, {}, {kept}, {same}", self.slots[*slot]);
        }
        ins!(self, "@{same} st.global.u32 \t[{FAILED_FLAGS}+{}], 1", 4 * self.member);
        ins!(self, "@{same} exit");
        let keep = self.fresh(Class::Pred);
        ins!(self, "setp.eq.u64 \t{keep}, {steps}, {}", cycle.next);
        ins!(self, "@{keep} mov.u32 \t{}, {id}", cycle.at_loop);
        for (slot, kept, width) in &cycle.kept {
            ins!(self, "@{keep} mov.{width} \t{kept}, {}", self.slots[*slot]);
        }
        ins!(self, "@{keep} shl.b64 \t{}, {}, 1", cycle.next, cycle.next);
        self.cycle = Some(cycle);
    }

    /// `a / b` or `a % b` of ints through the unit's [`Helper`] function.
    /// Inside a loop the instruction is inlined instead.
    fn helper(&mut self, h: Helper, a: Val, b: Val) -> Val {
        if self.loop_depth > 0 {
            return self.op2(h.instruction(), a, b, Ty::Int);
        }
        self.needs.helpers.insert(h);
        let (ta, tb) = (self.text(&a), self.text(&b));
        let f = h.name();
        self.body.push_str("\t{\n");
        ins!(self, ".param .b32 {f}_a");
        ins!(self, "st.param.b32 \t[{f}_a], {ta}");
        ins!(self, ".param .b32 {f}_b");
        ins!(self, "st.param.b32 \t[{f}_b], {tb}");
        ins!(self, ".param .b32 {f}_r");
        ins!(self, "call.uni ({f}_r), {f}, ({f}_a, {f}_b)");
        let (r, out) = self.new_val(Ty::Int);
        ins!(self, "ld.param.b32 \t{r}, [{f}_r]");
        self.body.push_str("\t}\n");
        out
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Assign(slot, ty, e) => {
                let v = self.expr(e);
                let v = self.convert(v, *ty);
                let t = self.text(&v);
                let dst = self.slots[*slot].clone();
                ins!(self, "mov.{} \t{dst}, {t}", bits(*ty));
            }
            Stmt::If(c, then, els) => {
                let cv = self.expr(c);
                let p = self.truth(cv);
                let (other, end) = (self.label(), self.label());
                ins!(self, "@!{p} bra \t{other}");
                self.stmts(then);
                ins!(self, "bra \t{end}");
                self.place(&other);
                self.stmts(els);
                self.place(&end);
            }
            Stmt::Loop(cond, body, step) => {
                let (top, end) = (self.label(), self.label());
                self.place(&top);
                // A step before each test of the condition, as the CPU evaluator counts; past
                // the limit the case sets its member's failure flag and ends (the program
                // fails: the evaluator reads the flags after the launch).
                if let Some(steps) = self.steps.clone() {
                    ins!(self, "add.u64 \t{steps}, {steps}, 1");
                    let p = self.fresh(Class::Pred);
                    ins!(self, "setp.gt.u64 \t{p}, {steps}, {}", self.max_steps);
                    ins!(self, "@{p} st.global.u32 \t[{FAILED_FLAGS}+{}], 1", 4 * self.member);
                    ins!(self, "@{p} exit");
                    self.needs.flags = true;
                    self.repeats(&steps);
                }
                self.loop_depth += 1;
                if let Some(c) = cond {
                    let cv = self.expr(c);
                    let p = self.truth(cv);
                    ins!(self, "@!{p} bra \t{end}");
                }
                self.stmts(body);
                self.stmts(step);
                self.loop_depth -= 1;
                ins!(self, "bra \t{top}");
                self.place(&end);
            }
            Stmt::Block(b) => self.stmts(b),
            // No expression of the subset has side effects.
            Stmt::Discard(_) => {}
        }
    }
}

/// The `.visible .entry` of `program` under `name`, with the parameters of the problem's kernel
/// convention; adds the functions it calls to `needs`.
/// `member` is its place in the unit, whose failure flag it sets.
pub(super) fn kernel(
    problem: &Problem,
    program: &Program,
    name: &str,
    member: usize,
    needs: &mut Needs,
) -> String {
    entry(problem, std::slice::from_ref(&program), name, Some(member), needs)
}

/// The `.visible .entry` `name` of a unit's switch kernel: the problem's kernel parameters, then
/// `.param .u32 first`. Block row `y` runs branch `first + y`, the kernel of `programs[first +
/// y]`, and writes its outputs `y * NCASES` values into each output slab, so that a launch of
/// `k` rows from `first` fills `k` consecutive slabs; a row past the last branch does nothing.
pub(super) fn switch_kernel(
    problem: &Problem,
    programs: &[&Program],
    name: &str,
    needs: &mut Needs,
) -> String {
    entry(problem, programs, name, None, needs)
}

/// A kernel of its own for member `Some(member)`, else the switch kernel of `programs`
/// (members `0..`).
fn entry(
    problem: &Problem,
    programs: &[&Program],
    name: &str,
    member: Option<usize>,
    needs: &mut Needs,
) -> String {
    let switch = member.is_none();
    let spec = problem.spec();
    let params = kernel_params(spec);
    let mut e = Emitter {
        body: String::new(),
        counts: [0; 5],
        labels: 0,
        slots: Vec::new(),
        slot_types: &[],
        arrays: Vec::new(),
        needs,
        lazy: HashMap::new(),
        steps: None,
        cycle: None,
        member: 0,
        loop_depth: 0,
        max_steps: problem.max_steps(),
    };
    let done = e.label();

    // Parameters, the case index, and the bounds check.
    let param_regs: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(k, p)| {
            if p.role == ParamRole::NumCases {
                let r = e.fresh(Class::B32);
                ins!(e, "ld.param.u32 \t{r}, [{name}_param_{k}]");
                r
            } else {
                let r = e.fresh(Class::B64);
                ins!(e, "ld.param.u64 \t{r}, [{name}_param_{k}]");
                r
            }
        })
        .collect();
    let (ctaid, ntid, tid, c) =
        (e.fresh(Class::B32), e.fresh(Class::B32), e.fresh(Class::B32), e.fresh(Class::B32));
    ins!(e, "mov.u32 \t{ctaid}, %ctaid.x");
    ins!(e, "mov.u32 \t{ntid}, %ntid.x");
    ins!(e, "mov.u32 \t{tid}, %tid.x");
    ins!(e, "mad.lo.s32 \t{c}, {ctaid}, {ntid}, {tid}");
    let ncases = params.iter().position(|p| p.role == ParamRole::NumCases).map(|k| param_regs[k].clone());
    let out_of_range = e.fresh(Class::Pred);
    ins!(e, "setp.ge.s32 \t{out_of_range}, {c}, {}", ncases.clone().unwrap_or_else(|| "0".into()));
    ins!(e, "@{out_of_range} bra \t{done}");
    let case_offset = e.fresh(Class::B64);
    ins!(e, "mul.wide.s32 \t{case_offset}, {c}, 4");
    let global = |e: &mut Emitter<'_>, role: ParamRole| -> String {
        let k = params.iter().position(|p| p.role == role).expect("kernel_params has every role");
        let g = e.fresh(Class::B64);
        ins!(e, "cvta.to.global.u64 \t{g}, {}", param_regs[k]);
        g
    };
    // The case's element of a per-case array parameter.
    let element = |e: &mut Emitter<'_>, g: &str| -> String {
        let a = e.fresh(Class::B64);
        ins!(e, "add.s64 \t{a}, {g}, {case_offset}");
        a
    };

    // Inputs, lengths and array bases, by the input they belong to.
    let mut input_regs: Vec<Option<String>> = vec![None; spec.inputs.len()];
    let mut length_regs: Vec<Option<String>> = vec![None; spec.inputs.len()];
    let mut base_regs: Vec<Option<String>> = vec![None; spec.inputs.len()];
    for (i, input) in spec.inputs.iter().enumerate() {
        let g = global(&mut e, ParamRole::Input(i));
        match input.ty {
            InputType::Int | InputType::Float => {
                let a = element(&mut e, &g);
                let (cls, t) =
                    if input.ty == InputType::Int { (Class::B32, "u32") } else { (Class::F32, "f32") };
                let r = e.fresh(cls);
                ins!(e, "ld.global.nc.{t} \t{r}, [{a}]");
                input_regs[i] = Some(r);
            }
            InputType::IntArray => {
                let lg = global(&mut e, ParamRole::Lengths(i));
                let a = element(&mut e, &lg);
                let len = e.fresh(Class::B32);
                ins!(e, "ld.global.nc.u32 \t{len}, [{a}]");
                let first = e.fresh(Class::B32);
                ins!(e, "mul.lo.s32 \t{first}, {c}, {}", input.max_len.unwrap_or(0));
                let off = e.fresh(Class::B64);
                ins!(e, "mul.wide.s32 \t{off}, {first}, 4");
                let base = e.fresh(Class::B64);
                ins!(e, "add.s64 \t{base}, {g}, {off}");
                length_regs[i] = Some(len);
                base_regs[i] = Some(base);
            }
        }
    }

    // Where each output goes: the case's element, `y * NCASES` values further in a switch.
    let mut outputs = Vec::with_capacity(spec.outputs.len());
    let mut branch_labels = Vec::new();
    // Free parameters: a kernel of its own reads its values from its last argument; a switch
    // kernel's row `y` from `values + y * stride` (the two arguments after `first`).
    let values = problem.grammar().has_params().then(|| {
        let at = if switch { params.len() + 1 } else { params.len() };
        let (arg, base) = (e.fresh(Class::B64), e.fresh(Class::B64));
        ins!(e, "ld.param.u64 \t{arg}, [{name}_param_{at}]");
        ins!(e, "cvta.to.global.u64 \t{base}, {arg}");
        if !switch {
            return base;
        }
        let (row, stride, rows, bytes, moved) = (
            e.fresh(Class::B32),
            e.fresh(Class::B32),
            e.fresh(Class::B64),
            e.fresh(Class::B64),
            e.fresh(Class::B64),
        );
        ins!(e, "mov.u32 \t{row}, %ctaid.y");
        ins!(e, "ld.param.u32 \t{stride}, [{name}_param_{}]", at + 1);
        ins!(e, "mul.wide.u32 \t{rows}, {row}, {stride}");
        ins!(e, "shl.b64 \t{bytes}, {rows}, 2");
        ins!(e, "add.s64 \t{moved}, {base}, {bytes}");
        moved
    });
    if switch {
        let (row, first, branch) = (e.fresh(Class::B32), e.fresh(Class::B32), e.fresh(Class::B32));
        ins!(e, "mov.u32 \t{row}, %ctaid.y");
        ins!(e, "ld.param.u32 \t{first}, [{name}_param_{}]", params.len());
        ins!(e, "add.s32 \t{branch}, {first}, {row}");
        let slab = e.fresh(Class::B64);
        ins!(e, "mul.wide.u32 \t{slab}, {row}, {}", ncases.unwrap_or_else(|| "0".into()));
        let slab_bytes = e.fresh(Class::B64);
        ins!(e, "shl.b64 \t{slab_bytes}, {slab}, 2");
        for o in 0..spec.outputs.len() {
            let g = global(&mut e, ParamRole::Output(o));
            let a = element(&mut e, &g);
            let at = e.fresh(Class::B64);
            ins!(e, "add.s64 \t{at}, {a}, {slab_bytes}");
            outputs.push(at);
        }
        for j in 0..programs.len() {
            let (p, l) = (e.fresh(Class::Pred), e.label());
            ins!(e, "setp.eq.s32 \t{p}, {branch}, {j}");
            ins!(e, "@{p} bra \t{l}");
            branch_labels.push(l);
        }
        ins!(e, "bra \t{done}");
    } else {
        for o in 0..spec.outputs.len() {
            let g = global(&mut e, ParamRole::Output(o));
            outputs.push(element(&mut e, &g));
        }
    }

    for (j, program) in programs.iter().enumerate() {
        if let Some(l) = branch_labels.get(j) {
            e.place(l);
        }
        e.slot_types = program.slot_types();
        e.member = member.unwrap_or(j);
        e.arrays.clear();
        for &i in program.arrays() {
            let base = base_regs[i].clone().expect("arrays are int[] inputs");
            let len = length_regs[i].clone().expect("arrays are int[] inputs");
            e.arrays.push((base, len));
        }

        // Variable slots: inputs and case bits are read-only and keep their registers; locals
        // and statement outputs start at zero.
        e.slots.clear();
        for (slot, src) in program.slots().iter().enumerate() {
            let ty = program.slot_types()[slot];
            let r = match src {
                Source::Input(i) => input_regs[*i].clone().expect("scalar input"),
                Source::Length(i) => length_regs[*i].clone().expect("int[] input"),
                Source::CaseBit(bit) => {
                    let shifted = e.fresh(Class::B32);
                    ins!(e, "shr.s32 \t{shifted}, {c}, {bit}");
                    let r = e.fresh(Class::B32);
                    ins!(e, "and.b32 \t{r}, {shifted}, 1");
                    r
                }
                Source::Zero(_) => {
                    let r = e.fresh(class(ty));
                    ins!(e, "mov.{} \t{r}, {}", bits(ty), immediate(Value::Int(0).to(ty)));
                    r
                }
                // Parameter `k` is the `k`th value of the individual's row (see `values`).
                Source::Param(k) => {
                    let base = values.as_ref().expect("a program with parameters has a grammar with them");
                    let r = e.fresh(class(ty));
                    ins!(e, "ld.global.nc.f32 \t{r}, [{base}+{}]", 4 * k);
                    r
                }
            };
            e.slots.push(r);
        }

        // The phenotype, then the stores.
        let store = |e: &mut Emitter<'_>, o: usize, v: Val| {
            let t = e.text(&v);
            let st = if v.ty == Ty::Int { "u32" } else { "f32" };
            ins!(e, "st.global.{st} \t[{}], {t}", outputs[o]);
        };
        match program.body() {
            Body::Expression(x) => {
                let v = e.expr(x);
                for (o, out) in spec.outputs.iter().enumerate() {
                    let v = e.convert(v.clone(), scalar_ty(out.ty));
                    store(&mut e, o, v);
                }
            }
            Body::Statements(s) => {
                let steps = e.fresh(Class::B64);
                ins!(e, "mov.u64 \t{steps}, 0");
                e.steps = Some(steps);
                let (at_loop, next) = (e.fresh(Class::B32), e.fresh(Class::B64));
                ins!(e, "mov.u32 \t{at_loop}, {}", u32::MAX);
                ins!(e, "mov.u64 \t{next}, 1");
                let mut kept = Vec::new();
                for (slot, src) in program.slots().iter().enumerate() {
                    if matches!(src, Source::Zero(_)) {
                        let (class, width) = if program.slot_types()[slot] == Ty::Double {
                            (Class::B64, "b64")
                        } else {
                            (Class::B32, "b32")
                        };
                        let r = e.fresh(class);
                        ins!(e, "mov.{width} \t{r}, 0");
                        kept.push((slot, r, width));
                    }
                }
                e.cycle = Some(Cycle { at_loop, next, kept, loops: 0 });
                e.stmts(s);
                for (o, &slot) in program.output_slots().iter().enumerate() {
                    let ty = program.slot_types()[slot];
                    let v = Val { op: Opnd::Reg(e.slots[slot].clone()), ty };
                    store(&mut e, o, v);
                }
            }
        }
        debug_assert!(spec.kind == Kind::Expression || program.output_slots().len() == spec.outputs.len());
        if switch && j + 1 < programs.len() {
            ins!(e, "bra \t{done}");
        }
    }
    e.place(&done);
    ins!(e, "ret");

    let mut k = String::with_capacity(e.body.len() + 512);
    let _ = writeln!(k, ".visible .entry {name}(");
    let mut decls: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let t = if p.role == ParamRole::NumCases { "u32" } else { "u64" };
            format!("\t.param .{t} {name}_param_{i}")
        })
        .collect();
    if switch {
        decls.push(format!("\t.param .u32 {name}_param_{}", params.len()));
    }
    if values.is_some() {
        let at = decls.len();
        decls.push(format!("\t.param .u64 {name}_param_{at}"));
        if switch {
            decls.push(format!("\t.param .u32 {name}_param_{}", at + 1));
        }
    }
    k.push_str(&decls.join(",\n"));
    k.push_str("\n)\n{\n");
    for (i, (_, decl, prefix)) in CLASSES.iter().enumerate() {
        if e.counts[i] > 0 {
            let _ = writeln!(k, "\t.reg {decl} \t{prefix}<{}>;", e.counts[i] + 1);
        }
    }
    k.push('\n');
    k.push_str(&e.body);
    k.push_str("}\n");
    k
}
