//! The evaluator's fast path for expression programs over scalar inputs, the programs of
//! symbolic regression: the tree flattened once into postfix steps, each step then computed
//! over a block of cases at a time instead of the tree being walked once per case. Must compute
//! every value exactly as [`super::run`] does — the same operations on the same operands, case
//! by case — so that outputs are the reference evaluator's bit for bit (a test holds it on random
//! programs). Programs it does not cover (statements, ints beyond arithmetic, comparisons, `?:`,
//! arrays) are left to the tree walk.
//!
//! A step that reads no input (an operation on constants and parameters, such as the
//! `sinf(p[0] * p[1])` of a fitted model) has the same value in every case: a block computes it,
//! and its slopes, for its first case only and copies them to the others. The same operation on
//! the same operands gives the same bits, so this changes no value.
//!
//! Values of every type are held as f64, which holds every `int` and `float` exactly; each
//! operation converts its operands to its C type, computes there and widens the result back. A
//! run of a tape that is float arithmetic alone over float inputs (the programs of a grammar like
//! Friedman-1's) holds its values as f32 instead: the same operations on the same operands,
//! without the conversions, at half the memory ([`Tape::exec_f32`]); with derivatives, its
//! slopes are still f64, computed from the values widened, as the f64 run computes them.
//!
//! Derivatives are taken in reverse (adjoint) mode: the forward sweep keeps each step's slopes
//! (the same slopes [`super::tangent`] takes, held as f64), the backward sweep carries each step's
//! adjoint down to its operands, and adds the adjoint of every occurrence of `p[k]` into the
//! case's derivative for `p[k]`. A run with derivatives then costs about two plain runs whatever
//! the number of parameters, where forward mode costs one derivative per parameter a step
//! depends on. A slope of 0, or an adjoint of 0, passes 0 down (as forward mode ignores a side
//! whose slope is 0), so a zero derivative is not made NaN by an infinite slope below it.
//! Against the tree walk's forward mode, the products of slopes along a path are rounded in
//! another order, and a parameter's occurrences are added in another order: where forward mode's
//! derivative is finite, reverse mode's is within 1e-12 of the sum of the magnitudes of its
//! contributions (one per path from the result to an occurrence of the parameter; a test holds
//! it on random programs, where the largest difference is below 1e-15 of it). Where forward mode
//! makes a derivative NaN through a parameter a step does not read (an infinite slope times the
//! zero derivative of that parameter), reverse mode does not.

use super::parse::{ArithOp, Bin, Expr, Fn1, Fn2};
use super::run::{fn1_f32, fn1_f64, fn2_f32, fn2_f64};
use super::tangent::{fn1_slope, fn2_slopes};
use super::trig::sin_cos_block;
use super::value::{Ty, int_div};
use super::{Program, Source};
use crate::problem::{Column, InputColumn, Problem};

/// Cases computed together: fewer passes over the steps than with 64, and a block's values and
/// slopes still near the core (a fit on the CPU took 3.6% less time than with 64, 128 and 256
/// alike; 32 took more).
pub(super) const BLOCK: usize = 128;

#[derive(Clone, Copy, Debug)]
enum Op {
    Const(f64),
    /// Scalar input column.
    Input(usize),
    /// Free parameter `p[k]`.
    Param(usize),
    Convert(Ty),
    Neg,
    /// Operands converted to the step's type first.
    Arith(ArithOp, Ty, Ty),
    Call1(Fn1),
    Call2(Fn2, Ty, Ty),
}

#[derive(Clone, Debug)]
struct Step {
    op: Op,
    /// The type of the step's value (for `Call1`, `Neg` and `Convert` the operand's type is
    /// `from`).
    ty: Ty,
    from: Ty,
    /// Whether the value depends on a parameter (an `int` value never does: its derivative is
    /// 0).
    reads: bool,
    /// The steps of its operands ([`NONE`] where it has fewer).
    args: [usize; 2],
}

/// No operand.
const NONE: usize = usize::MAX;

/// What every block of a run shares ([`Tape::blocks`]): the cases, the parameters (`np` of them
/// differentiated, 0 for a plain run), and how the run holds its values.
#[derive(Clone, Copy)]
struct Pass<'a> {
    n: usize,
    np: usize,
    in_f32: bool,
    derivatives: bool,
    /// Whether the run is the AVX2 one ([`Tape::blocks_avx2`]).
    avx2: bool,
    inputs: &'a [InputColumn],
    params: &'a [f32],
}

/// The cases a step runs over: `len` of them from `start`, with the problem's inputs and the
/// run's parameter values.
#[derive(Clone, Copy)]
struct Cases<'a> {
    start: usize,
    len: usize,
    inputs: &'a [InputColumn],
    params: &'a [f32],
}

/// A program flattened for block evaluation ([`Tape::compile`]).
#[derive(Clone, Debug)]
pub(super) struct Tape {
    steps: Vec<Step>,
    /// Stack depth each step's result lands at.
    depth: Vec<usize>,
    /// How deep the stack gets.
    height: usize,
    /// Whether a step's adjoint can be other than 0: it reads a parameter, and so does every step
    /// on its way to the result.
    live: Vec<bool>,
    /// Per parameter `p[k]`, the live steps that read it, last first: a case's derivative in
    /// `p[k]` is their adjoints added in that order, from 0 ([`Tape::gather`]).
    reads_of: Vec<Vec<usize>>,
    /// For each step that calls a function (`sinf`, `powf`, ...), its place among them; `None`
    /// for the others.
    calls: Vec<Option<usize>>,
    /// Whether a step's value is the same in every case: it reads no input (constants and
    /// parameters only). A block computes such a step (and its slopes) for its first case and
    /// copies it to the others: the same operation on the same operands, so the same bits, at a
    /// share of the cost (a `sinf(p[0] * p[1])` calls `sinf` once a block, not once a case).
    uniform: Vec<bool>,
    /// Whether every step is float arithmetic a run can hold in f32 ([`Tape::exec_f32`]):
    /// float constants, inputs and parameters, arithmetic, negation and float calls. Such a run
    /// computes the same operations on the same operands, so the same bits, with half the memory
    /// and no conversions.
    float_only: bool,
}

/// What a run does with the values its calls give ([`Stack::memo`]): a plain run keeps them, a
/// run with derivatives at the same parameter values takes them instead of calling again
/// (the same values: each call is a pure function of its operands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Memo {
    Off,
    Keep,
    Take,
}

/// The per-block working memory of a run; kept by [`super::Runs`] between the runs of a fit.
pub(super) struct Stack {
    values: Vec<Vec<f64>>,
    /// A [`Tape::float_only`] run's values.
    values32: Vec<Vec<f32>>,
    /// With derivatives: each step's slopes in its first and second operand, and its adjoint,
    /// [`BLOCK`] cases a step.
    slope_a: Vec<f64>,
    slope_b: Vec<f64>,
    adjoint: Vec<f64>,
    /// The block's rows of derivatives, one per case.
    rows: Vec<f64>,
    /// Whether derivatives are taken as the sums of their contributions' magnitudes (see
    /// [`Tape::backward`]), for measuring rounding.
    magnitudes: bool,
    /// The calls' values, call after call, case after case, and what this run does with them.
    memo: Vec<f64>,
    /// Laid out as `memo`: the slopes of the calls of `sinf` and `cosf`, which come with their
    /// values ([`sin_cos_block`]); the other calls' slopes are taken from their values.
    memo_slopes: Vec<f64>,
    /// A block's arguments of `sinf` or `cosf`, and their sines and cosines.
    trig: [Vec<f32>; 3],
    memo_cases: usize,
    pub(super) memo_mode: Memo,
}

impl Stack {
    /// The f64 values it holds room for.
    pub(super) fn capacity(&self) -> usize {
        let rows: usize = self.values.iter().map(Vec::capacity).sum::<usize>()
            + self.values32.iter().map(|v| v.capacity().div_ceil(2)).sum::<usize>();
        rows + [&self.slope_a, &self.slope_b, &self.adjoint, &self.rows, &self.memo, &self.memo_slopes]
            .iter()
            .map(|v| v.capacity())
            .sum::<usize>()
            + self.trig.iter().map(|v| v.capacity().div_ceil(2)).sum::<usize>()
    }
}

impl Tape {
    /// The tape of `program`'s expression, when every part of it is covered.
    pub(super) fn compile(program: &Program, e: &Expr) -> Option<Tape> {
        let mut tape = Tape {
            steps: Vec::new(),
            depth: Vec::new(),
            height: 0,
            live: Vec::new(),
            reads_of: Vec::new(),
            calls: Vec::new(),
            uniform: Vec::new(),
            float_only: false,
        };
        let mut stack: Vec<usize> = Vec::new();
        tape.walk(program, e, &mut stack)?;
        let n = tape.steps.len();
        tape.live = vec![false; n];
        tape.live[n - 1] = tape.steps[n - 1].reads;
        for i in (0..n).rev() {
            let step = &tape.steps[i];
            // A conversion to `int` ends its operand's derivatives.
            let passes = tape.live[i] && !matches!(step.op, Op::Convert(Ty::Int));
            for a in step.args.into_iter().filter(|&a| a != NONE) {
                tape.live[a] = passes && tape.steps[a].reads;
            }
        }
        for i in (0..n).rev() {
            if let (Op::Param(k), true) = (tape.steps[i].op, tape.live[i]) {
                if tape.reads_of.len() <= k {
                    tape.reads_of.resize(k + 1, Vec::new());
                }
                tape.reads_of[k].push(i);
            }
        }
        let mut calls = 0;
        tape.calls = tape
            .steps
            .iter()
            .map(|s| {
                matches!(s.op, Op::Call1(_) | Op::Call2(..)).then(|| {
                    calls += 1;
                    calls - 1
                })
            })
            .collect();
        for step in &tape.steps {
            let uniform = match step.op {
                Op::Input(_) => false,
                _ => step.args.iter().all(|&a| a == NONE || tape.uniform[a]),
            };
            tape.uniform.push(uniform);
        }
        tape.float_only = tape.steps.iter().all(|step| {
            let float = step.ty == Ty::Float && step.from == Ty::Float;
            float
                && match step.op {
                    Op::Const(v) => f64::from(v as f32).to_bits() == v.to_bits(),
                    Op::Input(_) | Op::Param(_) | Op::Neg | Op::Call1(_) => true,
                    Op::Arith(_, ta, tb) | Op::Call2(_, ta, tb) => ta == Ty::Float && tb == Ty::Float,
                    Op::Convert(_) => false,
                }
        });
        Some(tape)
    }

    /// The type of the expression's value.
    pub(super) fn ty(&self) -> Ty {
        self.steps.last().map_or(Ty::Float, |s| s.ty)
    }

    /// C's conversion of a value of the expression's type, as [`Tape::run`] gives it, to `to`.
    pub(super) fn convert(&self, v: f64, to: Ty) -> f64 {
        convert(v, self.ty(), to)
    }

    fn push(&mut self, step: Step, stack: &mut Vec<usize>, popped: usize) {
        stack.truncate(stack.len() - popped);
        let d = stack.len();
        self.height = self.height.max(d + 1);
        stack.push(self.steps.len());
        self.depth.push(d);
        self.steps.push(step);
    }

    fn leaf(op: Op, ty: Ty, reads: bool) -> Step {
        Step { op, ty, from: ty, reads, args: [NONE; 2] }
    }

    fn unary(&self, op: Op, ty: Ty, arg: usize) -> Step {
        let a = &self.steps[arg];
        Step { op, ty, from: a.ty, reads: ty != Ty::Int && a.reads, args: [arg, NONE] }
    }

    fn binary(&self, op: Op, ty: Ty, a: usize, b: usize) -> Step {
        let reads = ty != Ty::Int && (self.steps[a].reads || self.steps[b].reads);
        Step { op, ty, from: ty, reads, args: [a, b] }
    }

    fn walk(&mut self, program: &Program, e: &Expr, stack: &mut Vec<usize>) -> Option<()> {
        let types = program.slot_types();
        match e {
            Expr::Const(v) => self.push(Self::leaf(Op::Const(v.to_f64()), v.ty(), false), stack, 0),
            Expr::Var(slot) => {
                let step = match program.slots()[*slot] {
                    Source::Input(i) => Self::leaf(Op::Input(i), types[*slot], false),
                    Source::Param(k) => Self::leaf(Op::Param(k), Ty::Float, true),
                    _ => return None,
                };
                self.push(step, stack, 0);
            }
            Expr::Convert(ty, a) => {
                self.walk(program, a, stack)?;
                let step = self.unary(Op::Convert(*ty), *ty, *stack.last()?);
                self.push(step, stack, 1);
            }
            Expr::Neg(a) => {
                self.walk(program, a, stack)?;
                let step = self.unary(Op::Neg, a.ty(types), *stack.last()?);
                self.push(step, stack, 1);
            }
            Expr::Chain(first, rest) => {
                self.walk(program, first, stack)?;
                for (op, b) in rest {
                    let Bin::Arith(op) = op else { return None };
                    self.walk(program, b, stack)?;
                    let (ia, ib) = (stack[stack.len() - 2], stack[stack.len() - 1]);
                    let (ta, tb) = (self.steps[ia].ty, self.steps[ib].ty);
                    let ty = Ty::usual(ta, tb);
                    let step = self.binary(Op::Arith(*op, ta, tb), ty, ia, ib);
                    self.push(step, stack, 2);
                }
            }
            Expr::Call1(f, ty, a) if *ty != Ty::Int => {
                self.walk(program, a, stack)?;
                let step = self.unary(Op::Call1(*f), *ty, *stack.last()?);
                self.push(step, stack, 1);
            }
            Expr::Call2(f, ty, a, b) if *ty != Ty::Int => {
                self.walk(program, a, stack)?;
                self.walk(program, b, stack)?;
                let (ia, ib) = (stack[stack.len() - 2], stack[stack.len() - 1]);
                let (ta, tb) = (self.steps[ia].ty, self.steps[ib].ty);
                let step = self.binary(Op::Call2(*f, ta, tb), *ty, ia, ib);
                self.push(step, stack, 2);
            }
            _ => return None,
        }
        Some(())
    }

    /// Working memory for runs of this tape, with derivatives, made of `spare` (another tape's)
    /// where there is one: sized for this tape, nothing in it cleared (a run writes every value,
    /// slope and adjoint it reads before reading it), nothing kept for a run to take.
    pub(super) fn stack_from(&self, spare: Option<Stack>) -> Stack {
        let Some(mut s) = spare else { return self.stack(true) };
        s.values.resize_with(self.height, || vec![0.0; BLOCK]);
        s.values32.resize_with(self.height, || vec![0.0; BLOCK]);
        let per_step = self.steps.len() * BLOCK;
        for v in [&mut s.slope_a, &mut s.slope_b, &mut s.adjoint] {
            if v.len() < per_step {
                v.resize(per_step, 0.0);
            }
        }
        (s.magnitudes, s.memo_mode) = (false, Memo::Off);
        s
    }

    /// Working memory for runs of this tape, with or without derivatives.
    pub(super) fn stack(&self, derivatives: bool) -> Stack {
        let per_step = if derivatives { self.steps.len() * BLOCK } else { 0 };
        Stack {
            values: vec![vec![0.0; BLOCK]; self.height],
            values32: vec![vec![0.0; BLOCK]; self.height],
            slope_a: vec![0.0; per_step],
            slope_b: vec![0.0; per_step],
            adjoint: vec![0.0; per_step],
            rows: Vec::new(),
            magnitudes: false,
            memo: Vec::new(),
            memo_slopes: Vec::new(),
            trig: [vec![0.0; BLOCK], vec![0.0; BLOCK], vec![0.0; BLOCK]],
            memo_cases: 0,
            memo_mode: Memo::Off,
        }
    }

    /// The value of every case (the expression's own type, held as f64); `None` when an input
    /// the program reads is not a scalar column of `problem`.
    pub(super) fn run(&self, problem: &Problem, params: &[f32]) -> Option<Vec<f64>> {
        let mut out = Vec::with_capacity(problem.cases().len());
        let mut s = self.stack(false);
        self.each_block(&mut s, problem, params, false, |_, values, _| {
            out.extend_from_slice(values);
            true
        })?;
        Some(out)
    }

    /// Runs the tape over every case, a block of up to [`BLOCK`] cases at a time, in order, with
    /// working memory `s` (from [`Tape::stack`] with the same `derivatives`), and hands `each` the
    /// block's first case, its values (the expression's own type, held as f64) and, with
    /// `derivatives`, its rows of d value / d `p[k]` one after the other (`params.len()` each;
    /// empty without); `each` returns whether to go on. Whether every block ran; `None` when an
    /// input the program reads is not a scalar column of `problem`.
    pub(super) fn each_block(
        &self,
        s: &mut Stack,
        problem: &Problem,
        params: &[f32],
        derivatives: bool,
        mut each: impl FnMut(usize, &[f64], &[f64]) -> bool,
    ) -> Option<bool> {
        let inputs = problem.cases().inputs();
        for step in &self.steps {
            if let Op::Input(i) = step.op {
                match inputs.get(i) {
                    Some(InputColumn::Scalar(_)) => {}
                    _ => return None,
                }
            }
        }
        let n = problem.cases().len();
        self.steps.last()?;
        let np = if derivatives { params.len() } else { 0 };
        // Kept in `s` with the rest of the working memory, and handed back at the end.
        let mut rows = std::mem::take(&mut s.rows);
        rows.resize(np * BLOCK, 0.0);
        let calls = self.calls.iter().flatten().count();
        s.memo_cases = n;
        match s.memo_mode {
            Memo::Keep if calls * n <= MEMO_LIMIT => {
                s.memo.resize(calls * n, 0.0);
                s.memo_slopes.resize(calls * n, 0.0);
            }
            Memo::Keep => s.memo_mode = Memo::Off,
            Memo::Take => assert_eq!(s.memo.len(), calls * n, "a run takes the values its plain run kept"),
            Memo::Off => {}
        }
        // A run of float arithmetic over float columns holds its values in f32.
        let in_f32 = !(derivatives && wide_only())
            && self.float_only
            && self.steps.iter().all(|step| match step.op {
                Op::Input(k) => matches!(inputs[k], InputColumn::Scalar(Column::Float(_))),
                _ => true,
            });
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::arch::is_x86_feature_detected!("avx2") && !portable_only();
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        let pass = Pass { n, np, in_f32, derivatives, avx2, inputs, params };
        #[cfg(target_arch = "x86_64")]
        let start = if avx2 {
            // SAFETY: the CPU has AVX2, checked just above.
            unsafe { self.blocks_avx2(s, &pass, &mut rows, &mut each) }
        } else {
            self.blocks(s, &pass, &mut rows, &mut each)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let start = self.blocks(s, &pass, &mut rows, &mut each);
        s.rows = rows;
        Some(start >= n)
    }

    /// [`Tape::blocks`] compiled for AVX2, with the steps, the backward sweep and the sums it
    /// inlines: the same operations (no fused multiply-add), so the same bits, in wider registers.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn blocks_avx2(
        &self,
        s: &mut Stack,
        pass: &Pass<'_>,
        rows: &mut [f64],
        each: &mut impl FnMut(usize, &[f64], &[f64]) -> bool,
    ) -> usize {
        self.blocks(s, pass, rows, each)
    }

    /// The blocks of [`Tape::each_block`], in order, until `each` says to stop: the first case not
    /// run (`pass.n` when every block ran).
    #[inline(always)]
    fn blocks(
        &self,
        s: &mut Stack,
        pass: &Pass<'_>,
        rows: &mut [f64],
        each: &mut impl FnMut(usize, &[f64], &[f64]) -> bool,
    ) -> usize {
        let Pass { n, np, in_f32, derivatives, avx2, inputs, params } = *pass;
        let mut start = 0;
        while start < n {
            let len = BLOCK.min(n - start);
            for (i, step) in self.steps.iter().enumerate() {
                let once = self.uniform[i] && len > 1 && !matches!(step.op, Op::Const(_) | Op::Param(_));
                let cases = Cases { start, len: if once { 1 } else { len }, inputs, params };
                match in_f32 {
                    true => self.exec_f32(i, step, s, &cases, derivatives),
                    false => self.exec(i, step, s, &cases, derivatives),
                }
                if once {
                    self.broadcast(i, s, len, derivatives, in_f32);
                }
            }
            if in_f32 {
                let (out, out32) = (&mut s.values[0][..len], &s.values32[0][..len]);
                out.iter_mut().zip(out32).for_each(|(o, &v)| *o = f64::from(v));
            }
            if np > 0 && s.magnitudes {
                self.backward::<true>(s, len, np, &mut rows[..np * len], avx2);
            } else if np > 0 {
                self.backward::<false>(s, len, np, &mut rows[..np * len], avx2);
            }
            let go_on = each(start, &s.values[0][..len], &rows[..np * len]);
            start += len;
            if !go_on {
                break;
            }
        }
        start
    }

    /// Copies a [`Tape::uniform`] step's value (and its slopes, where the backward sweep uses
    /// them) from a block's first case to its other `len - 1`; in the f32 values where `in_f32`.
    #[inline(always)]
    fn broadcast(&self, i: usize, s: &mut Stack, len: usize, derivatives: bool, in_f32: bool) {
        if in_f32 {
            let values = &mut s.values32[self.depth[i]];
            let v = values[0];
            values[1..len].fill(v);
        } else {
            let values = &mut s.values[self.depth[i]];
            let v = values[0];
            values[1..len].fill(v);
        }
        if derivatives && self.live[i] {
            let at = i * BLOCK;
            for slope in [&mut s.slope_a, &mut s.slope_b] {
                let k = slope[at];
                slope[at + 1..at + len].fill(k);
            }
        }
    }

    #[inline(always)]
    fn exec(&self, i: usize, step: &Step, s: &mut Stack, cases: &Cases<'_>, derivatives: bool) {
        let Cases { start, len, inputs, params } = *cases;
        let d = self.depth[i];
        // Slopes where the backward sweep will use them.
        let slopes_of = derivatives && self.live[i];
        let at = i * BLOCK;
        match step.op {
            Op::Const(v) => s.values[d][..len].fill(v),
            Op::Input(k) => {
                let out = &mut s.values[d][..len];
                match &inputs[k] {
                    InputColumn::Scalar(Column::Float(v)) => {
                        out.iter_mut().zip(&v[start..start + len]).for_each(|(o, &x)| *o = f64::from(x));
                    }
                    InputColumn::Scalar(Column::Int(v)) => {
                        out.iter_mut().zip(&v[start..start + len]).for_each(|(o, &x)| *o = f64::from(x));
                    }
                    _ => unreachable!("checked before the run"),
                }
            }
            Op::Param(k) => s.values[d][..len].fill(f64::from(params[k])),
            Op::Convert(to) => {
                let from = step.from;
                s.values[d][..len].iter_mut().for_each(|v| *v = convert(*v, from, to));
            }
            Op::Neg => {
                let ty = step.ty;
                s.values[d][..len].iter_mut().for_each(|v| {
                    *v = if ty == Ty::Int { f64::from((*v as i32).wrapping_neg()) } else { -*v }
                });
            }
            Op::Call1(f) => {
                let (from, ty) = (step.from, step.ty);
                let values = &mut s.values[d][..len];
                let slope = &mut s.slope_a[if slopes_of { at..at + len } else { 0..0 }];
                let (memo, kept) = memo_of(&mut s.memo, s.memo_mode, self.calls[i], start, len, s.memo_cases);
                if let Some(cos_of) = trig_call(f, ty) {
                    let (_, kept_slopes) =
                        memo_of(&mut s.memo_slopes, memo, self.calls[i], start, len, s.memo_cases);
                    if memo == Memo::Take {
                        values.copy_from_slice(kept);
                        if slopes_of {
                            slope.copy_from_slice(kept_slopes);
                        }
                        return;
                    }
                    let [xs, sin, cos] = &mut s.trig;
                    xs[..len]
                        .iter_mut()
                        .zip(values.iter())
                        .for_each(|(x, &v)| *x = convert(v, from, ty) as f32);
                    sin_cos_block(&xs[..len], &mut sin[..len], &mut cos[..len]);
                    let (ys, slope_at) = trig_values(cos_of, &sin[..len], &cos[..len]);
                    for (r, v) in values.iter_mut().enumerate() {
                        let (y, k) = (f64::from(ys[r]), slope_at(r));
                        *v = y;
                        if slopes_of {
                            slope[r] = k;
                        }
                        if memo == Memo::Keep {
                            (kept[r], kept_slopes[r]) = (y, k);
                        }
                    }
                    return;
                }
                for (r, v) in values.iter_mut().enumerate() {
                    let x = *v;
                    let y = match (memo, ty) {
                        (Memo::Take, _) => kept[r],
                        (_, Ty::Float) => f64::from(fn1_f32(f, convert(x, from, Ty::Float) as f32)),
                        _ => fn1_f64(f, convert(x, from, Ty::Double)),
                    };
                    if memo == Memo::Keep {
                        kept[r] = y;
                    }
                    *v = y;
                    if slopes_of {
                        slope[r] = fn1_slope(f, ty, x, y);
                    }
                }
            }
            Op::Arith(op, ta, tb) => {
                let ty = step.ty;
                let (lower, upper) = s.values.split_at_mut(d + 1);
                let (a, b) = (&mut lower[d][..len], &upper[0][..len]);
                // Add and Sub pass the adjoint on as it is (negated for Sub's right side).
                if slopes_of && !matches!(op, ArithOp::Add | ArithOp::Sub) {
                    let (sa, sb) = (&mut s.slope_a[at..at + len], &mut s.slope_b[at..at + len]);
                    slopes(a, b, sa, sb, |x, y| arith_slopes(op, x, y));
                }
                if ta == ty && tb == ty {
                    match (op, ty) {
                        (ArithOp::Add, Ty::Float) => binary(a, b, |x, y| f64::from(x as f32 + y as f32)),
                        (ArithOp::Sub, Ty::Float) => binary(a, b, |x, y| f64::from(x as f32 - y as f32)),
                        (ArithOp::Mul, Ty::Float) => binary(a, b, |x, y| f64::from(x as f32 * y as f32)),
                        (ArithOp::Div, Ty::Float) => binary(a, b, |x, y| f64::from(x as f32 / y as f32)),
                        _ => binary(a, b, |x, y| arith(op, ty, x, y)),
                    }
                } else {
                    binary(a, b, |x, y| arith(op, ty, convert(x, ta, ty), convert(y, tb, ty)));
                }
            }
            Op::Call2(f, ta, tb) => {
                let ty = step.ty;
                let (lower, upper) = s.values.split_at_mut(d + 1);
                let (a, b) = (&mut lower[d][..len], &upper[0][..len]);
                let (memo, kept) = memo_of(&mut s.memo, s.memo_mode, self.calls[i], start, len, s.memo_cases);
                for r in 0..len {
                    let (x, y) = (a[r], b[r]);
                    let v = match ty {
                        _ if memo == Memo::Take => kept[r],
                        Ty::Float => f64::from(fn2_f32(
                            f,
                            convert(x, ta, Ty::Float) as f32,
                            convert(y, tb, Ty::Float) as f32,
                        )),
                        _ => fn2_f64(f, convert(x, ta, Ty::Double), convert(y, tb, Ty::Double)),
                    };
                    if memo == Memo::Keep {
                        kept[r] = v;
                    }
                    a[r] = v;
                    if slopes_of {
                        (s.slope_a[at + r], s.slope_b[at + r]) = fn2_slopes(f, ty, x, y, v);
                    }
                }
            }
        }
    }

    /// [`Tape::exec`] of a [`Tape::float_only`] tape's step, its values in f32: each value the
    /// f32 that `exec` holds widened to f64, computed by the same operation on the same operands,
    /// and with `derivatives` each slope computed from those widened values as `exec` computes
    /// it, so the same bits.
    #[inline(always)]
    fn exec_f32(&self, i: usize, step: &Step, s: &mut Stack, cases: &Cases<'_>, derivatives: bool) {
        let Cases { start, len, inputs, params } = *cases;
        let d = self.depth[i];
        let slopes_of = derivatives && self.live[i];
        let at = i * BLOCK;
        match step.op {
            Op::Const(v) => s.values32[d][..len].fill(v as f32),
            Op::Input(k) => {
                let InputColumn::Scalar(Column::Float(v)) = &inputs[k] else {
                    unreachable!("checked before the run")
                };
                s.values32[d][..len].copy_from_slice(&v[start..start + len]);
            }
            Op::Param(k) => s.values32[d][..len].fill(params[k]),
            Op::Neg => s.values32[d][..len].iter_mut().for_each(|v| *v = -*v),
            Op::Arith(op, ..) => {
                let (lower, upper) = s.values32.split_at_mut(d + 1);
                let (a, b) = (&mut lower[d][..len], &upper[0][..len]);
                // Add and Sub pass the adjoint on as it is (negated for Sub's right side).
                if slopes_of && !matches!(op, ArithOp::Add | ArithOp::Sub) {
                    let (sa, sb) = (&mut s.slope_a[at..at + len], &mut s.slope_b[at..at + len]);
                    slopes(a, b, sa, sb, |x, y| arith_slopes(op, x, y));
                }
                let zip = a.iter_mut().zip(b);
                match op {
                    ArithOp::Add => zip.for_each(|(x, &y)| *x += y),
                    ArithOp::Sub => zip.for_each(|(x, &y)| *x -= y),
                    ArithOp::Mul => zip.for_each(|(x, &y)| *x *= y),
                    ArithOp::Div => zip.for_each(|(x, &y)| *x /= y),
                }
            }
            Op::Call1(f) => {
                let values = &mut s.values32[d][..len];
                let slope = &mut s.slope_a[if slopes_of { at..at + len } else { 0..0 }];
                let (memo, kept) = memo_of(&mut s.memo, s.memo_mode, self.calls[i], start, len, s.memo_cases);
                if let Some(cos_of) = trig_call(f, Ty::Float) {
                    let (_, kept_slopes) =
                        memo_of(&mut s.memo_slopes, memo, self.calls[i], start, len, s.memo_cases);
                    if memo == Memo::Take {
                        values.iter_mut().zip(kept.iter()).for_each(|(v, &y)| *v = y as f32);
                        if slopes_of {
                            slope.copy_from_slice(kept_slopes);
                        }
                        return;
                    }
                    let [_, sin, cos] = &mut s.trig;
                    sin_cos_block(values, &mut sin[..len], &mut cos[..len]);
                    let (ys, slope_at) = trig_values(cos_of, &sin[..len], &cos[..len]);
                    values.copy_from_slice(ys);
                    if slopes_of {
                        slope.iter_mut().enumerate().for_each(|(r, k)| *k = slope_at(r));
                    }
                    if memo == Memo::Keep {
                        for r in 0..len {
                            (kept[r], kept_slopes[r]) = (f64::from(ys[r]), slope_at(r));
                        }
                    }
                    return;
                }
                for (r, v) in values.iter_mut().enumerate() {
                    let x = *v;
                    *v = match memo {
                        Memo::Take => kept[r] as f32,
                        _ => fn1_f32(f, x),
                    };
                    if memo == Memo::Keep {
                        kept[r] = f64::from(*v);
                    }
                    if slopes_of {
                        slope[r] = fn1_slope(f, Ty::Float, f64::from(x), f64::from(*v));
                    }
                }
            }
            Op::Call2(f, ..) => {
                let (lower, upper) = s.values32.split_at_mut(d + 1);
                let (a, b) = (&mut lower[d][..len], &upper[0][..len]);
                let (memo, kept) = memo_of(&mut s.memo, s.memo_mode, self.calls[i], start, len, s.memo_cases);
                for r in 0..len {
                    let (x, y) = (a[r], b[r]);
                    a[r] = match memo {
                        Memo::Take => kept[r] as f32,
                        _ => fn2_f32(f, x, y),
                    };
                    if memo == Memo::Keep {
                        kept[r] = f64::from(a[r]);
                    }
                    if slopes_of {
                        (s.slope_a[at + r], s.slope_b[at + r]) =
                            fn2_slopes(f, Ty::Float, f64::from(x), f64::from(y), f64::from(a[r]));
                    }
                }
            }
            Op::Convert(_) => unreachable!("not float_only"),
        }
    }

    /// The backward sweep over a block of `len` cases whose forward sweep kept its slopes: each
    /// live step's adjoint (the derivative of the result in its value, 1 for the result itself)
    /// carried to its operands; then `rows` (one row of `np` derivatives per case) gathered from
    /// the adjoints of the steps that read each `p[k]` ([`Tape::gather`]).
    ///
    /// With `MAGNITUDE`, every slope and adjoint is taken by its absolute value: each derivative
    /// becomes the sum of its contributions' magnitudes, the scale its rounding is measured
    /// against.
    #[inline(always)]
    fn backward<const MAGNITUDE: bool>(
        &self,
        s: &mut Stack,
        len: usize,
        np: usize,
        rows: &mut [f64],
        avx2: bool,
    ) {
        let last = self.steps.len() - 1;
        if !self.live[last] {
            rows.fill(0.0);
            return;
        }
        s.adjoint[last * BLOCK..last * BLOCK + len].fill(1.0);
        for (i, step) in self.steps.iter().enumerate().rev() {
            if !self.live[i] {
                continue;
            }
            let (below, here) = s.adjoint.split_at_mut(i * BLOCK);
            let g = &here[..len];
            let at = i * BLOCK;
            let [a, b] = step.args;
            // Where an operand's adjoint goes, if it is live (each step is one step's operand).
            let mut to = |arg: usize, f: &dyn Fn(usize, f64) -> f64| {
                if arg != NONE && self.live[arg] {
                    for (r, out) in below[arg * BLOCK..arg * BLOCK + len].iter_mut().enumerate() {
                        *out = f(r, g[r]);
                    }
                }
            };
            let (sa, sb) = (&s.slope_a[at..at + len], &s.slope_b[at..at + len]);
            let minus = |g: f64| if MAGNITUDE { g } else { -g };
            let along = |k: f64, g: f64| if MAGNITUDE { edge(k.abs(), g.abs()) } else { edge(k, g) };
            match step.op {
                // Gathered below, a row at a time.
                Op::Param(_) | Op::Const(_) | Op::Input(_) => {}
                Op::Convert(_) => to(a, &|_, g| g),
                Op::Neg => to(a, &|_, g| minus(g)),
                Op::Call1(_) => to(a, &|r, g| along(sa[r], g)),
                Op::Arith(ArithOp::Add, ..) => {
                    to(a, &|_, g| g);
                    to(b, &|_, g| g);
                }
                Op::Arith(ArithOp::Sub, ..) => {
                    to(a, &|_, g| g);
                    to(b, &|_, g| minus(g));
                }
                Op::Arith(..) | Op::Call2(..) => {
                    to(a, &|r, g| along(sa[r], g));
                    to(b, &|r, g| along(sb[r], g));
                }
            }
        }
        self.gather(s, len, np, rows, avx2);
    }

    /// A block's rows of derivatives (one row of `np` per case) from the backward sweep's
    /// adjoints: `p[k]`'s derivative in a case is the adjoints of the steps that read it added
    /// from 0 ([`Tape::reads_of`], last step first), 0 where none is live. Each derivative is
    /// that sum whether it is written case by case or a column of cases at a time, so the rows
    /// are the same bits either way (with `avx2`, four rows and four parameters a time).
    #[inline(always)]
    fn gather(&self, s: &mut Stack, len: usize, np: usize, rows: &mut [f64], avx2: bool) {
        // A parameter read more than once: its adjoints added into the column of the read its
        // sum starts from (the last step, above the others), which the sweep is done with. The
        // sum is never -0, so adding it to 0 again below leaves it as it is.
        for reads in self.reads_of.iter().take(np) {
            if let [first, rest @ ..] = reads.as_slice()
                && !rest.is_empty()
            {
                let (below, here) = s.adjoint.split_at_mut(first * BLOCK);
                let sum = &mut here[..len];
                sum.iter_mut().for_each(|v| *v += 0.0);
                for &i in rest {
                    sum.iter_mut().zip(&below[i * BLOCK..i * BLOCK + len]).for_each(|(v, &g)| *v += g);
                }
            }
        }
        // Where each parameter's column of derivatives starts in the adjoints (none: 0).
        let column = |k: usize| self.reads_of.get(k).and_then(|reads| reads.first()).map(|&i| i * BLOCK);
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: `avx2` says the CPU has AVX2.
            unsafe { transpose_avx2(&s.adjoint, np, column, len, rows) };
            return;
        }
        let _ = avx2;
        transpose(&s.adjoint, np, column, 0, len, rows);
    }
}

/// `rows[r * np + k] = 0 + adjoint[column(k) + r]` (0 where `column(k)` is `None`) for the cases
/// `r0..len` and every parameter `k < np`.
#[inline(always)]
fn transpose(
    adjoint: &[f64],
    np: usize,
    column: impl Fn(usize) -> Option<usize>,
    r0: usize,
    len: usize,
    rows: &mut [f64],
) {
    for k in 0..np {
        let c = column(k);
        for r in r0..len {
            rows[r * np + k] = c.map_or(0.0, |at| 0.0 + adjoint[at + r]);
        }
    }
}

/// [`transpose`] of every case and parameter with AVX2: four cases of four parameters at a time
/// turned in registers (the last group of four ending at the last parameter, so overlapping the
/// one before where the count is not a multiple of four: its values written twice, the same),
/// the last cases and fewer than four parameters as `transpose` does them; the same additions,
/// so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn transpose_avx2(
    adjoint: &[f64],
    np: usize,
    column: impl Fn(usize) -> Option<usize>,
    len: usize,
    rows: &mut [f64],
) {
    use std::arch::x86_64::{
        _mm256_add_pd, _mm256_loadu_pd, _mm256_permute2f128_pd, _mm256_setzero_pd, _mm256_storeu_pd,
        _mm256_unpackhi_pd, _mm256_unpacklo_pd,
    };
    assert!(rows.len() >= np * len, "a row per case");
    if np < 4 {
        return transpose(adjoint, np, column, 0, len, rows);
    }
    let len4 = len - len % 4;
    let zero = _mm256_setzero_pd();
    let last = (!np.is_multiple_of(4)).then_some(np - 4);
    for k0 in (0..np - np % 4).step_by(4).chain(last) {
        let cs: [Option<&[f64]>; 4] =
            std::array::from_fn(|j| column(k0 + j).map(|at| &adjoint[at..at + len]));
        for r0 in (0..len4).step_by(4) {
            let [a0, a1, a2, a3] = cs.map(|c| match c {
                // SAFETY: `c` holds `len` values and `r0 + 4 <= len`.
                Some(c) => _mm256_add_pd(zero, unsafe { _mm256_loadu_pd(c.as_ptr().add(r0)) }),
                None => zero,
            });
            let (t0, t1) = (_mm256_unpacklo_pd(a0, a1), _mm256_unpackhi_pd(a0, a1));
            let (t2, t3) = (_mm256_unpacklo_pd(a2, a3), _mm256_unpackhi_pd(a2, a3));
            let out = [
                _mm256_permute2f128_pd::<0x20>(t0, t2),
                _mm256_permute2f128_pd::<0x20>(t1, t3),
                _mm256_permute2f128_pd::<0x31>(t0, t2),
                _mm256_permute2f128_pd::<0x31>(t1, t3),
            ];
            for (i, v) in out.into_iter().enumerate() {
                let at = &mut rows[(r0 + i) * np + k0..][..4];
                // SAFETY: `at` holds four f64.
                unsafe { _mm256_storeu_pd(at.as_mut_ptr(), v) };
            }
        }
    }
    transpose(adjoint, np, column, len4, len, rows);
}

/// An adjoint `g` carried down an edge of slope `k`: 0 where either is 0 (an infinite slope does
/// not make a zero derivative NaN, nor a NaN slope a side that does not count).
fn edge(k: f64, g: f64) -> f64 {
    if k == 0.0 || g == 0.0 { 0.0 } else { k * g }
}

/// At most this many call values are kept for the next run (64 MiB of f64 per fit).
const MEMO_LIMIT: usize = 8 << 20;

/// The kept values of call `call` (a step's place among the calls) for the cases
/// `start..start + len` of `n`, and what to do with them: nothing for a step that calls nothing.
fn memo_of(
    memo: &mut [f64],
    mode: Memo,
    call: Option<usize>,
    start: usize,
    len: usize,
    n: usize,
) -> (Memo, &mut [f64]) {
    match (mode, call) {
        (Memo::Off, _) | (_, None) => (Memo::Off, &mut []),
        (mode, Some(c)) => (mode, &mut memo[c * n + start..c * n + start + len]),
    }
}

/// For a call of `sinf` (`Some(false)`) or `cosf` (`Some(true)`), computed a block at a time
/// with its slope ([`sin_cos_block`]); `None` for the other calls, computed a value at a time.
fn trig_call(f: Fn1, ty: Ty) -> Option<bool> {
    match (f, ty) {
        (Fn1::Sin, Ty::Float) => Some(false),
        (Fn1::Cos, Ty::Float) => Some(true),
        _ => None,
    }
}

/// Of a block's sines and cosines, a trig call's values and its slope in each case: `sinf`'s
/// values are the sines and its slopes the cosines, `cosf`'s the cosines and the sines negated.
fn trig_values<'a>(cos_of: bool, sin: &'a [f32], cos: &'a [f32]) -> (&'a [f32], impl Fn(usize) -> f64 + 'a) {
    let (values, other) = if cos_of { (cos, sin) } else { (sin, cos) };
    (values, move |r| if cos_of { -f64::from(other[r]) } else { f64::from(other[r]) })
}

/// `a[r] = f(a[r], b[r])`.
fn binary(a: &mut [f64], b: &[f64], f: impl Fn(f64, f64) -> f64) {
    a.iter_mut().zip(b).for_each(|(x, &y)| *x = f(*x, y));
}

/// The slopes `f(a[r], b[r])` of a step of two operands (held as f64 or f32, widened), into `sa`
/// and `sb`.
#[inline(always)]
fn slopes<T: Copy + Into<f64>>(
    a: &[T],
    b: &[T],
    sa: &mut [f64],
    sb: &mut [f64],
    f: impl Fn(f64, f64) -> (f64, f64),
) {
    for (((&x, &y), ka), kb) in a.iter().zip(b).zip(sa.iter_mut()).zip(sb.iter_mut()) {
        (*ka, *kb) = f(x.into(), y.into());
    }
}

/// The slopes of `x op y` with respect to `x` and `y`, as [`super::tangent`]'s `combine` has
/// them.
fn arith_slopes(op: ArithOp, x: f64, y: f64) -> (f64, f64) {
    match op {
        ArithOp::Add => (1.0, 1.0),
        ArithOp::Sub => (1.0, -1.0),
        ArithOp::Mul => (y, x),
        ArithOp::Div => (1.0 / y, -x / (y * y)),
    }
}

/// C's conversion of `v` (a value of type `from`, held as f64) to `to`, held as f64: what
/// [`super::value::Value::to`] does.
fn convert(v: f64, from: Ty, to: Ty) -> f64 {
    match (from, to) {
        (Ty::Int, Ty::Float) => f64::from(v as i32 as f32),
        (Ty::Double, Ty::Float) => f64::from(v as f32),
        (_, Ty::Int) => f64::from(v as i32),
        _ => v,
    }
}

/// `x op y` in `ty`, both already of that type: [`super::run::arith`]'s arithmetic.
fn arith(op: ArithOp, ty: Ty, x: f64, y: f64) -> f64 {
    match ty {
        Ty::Int => {
            let (x, y) = (x as i32, y as i32);
            f64::from(match op {
                ArithOp::Add => x.wrapping_add(y),
                ArithOp::Sub => x.wrapping_sub(y),
                ArithOp::Mul => x.wrapping_mul(y),
                ArithOp::Div => int_div(x, y),
            })
        }
        Ty::Float => {
            let (x, y) = (x as f32, y as f32);
            f64::from(match op {
                ArithOp::Add => x + y,
                ArithOp::Sub => x - y,
                ArithOp::Mul => x * y,
                ArithOp::Div => x / y,
            })
        }
        Ty::Double => match op {
            ArithOp::Add => x + y,
            ArithOp::Sub => x - y,
            ArithOp::Mul => x * y,
            ArithOp::Div => x / y,
        },
    }
}

/// Switches that tests set on their thread to compare the paths of a run; outside tests, off.
/// `portable_only`: blocks run without AVX2 where the CPU has it. `wide_only`: runs with
/// derivatives hold their values in f64 where they could hold them in f32 ([`Tape::float_only`]).
#[cfg(not(test))]
mod switches {
    pub(super) fn portable_only() -> bool {
        false
    }

    pub(super) fn wide_only() -> bool {
        false
    }
}

#[cfg(test)]
mod switches {
    pub(super) fn portable_only() -> bool {
        super::tests::PORTABLE.get()
    }

    pub(super) fn wide_only() -> bool {
        super::tests::WIDE.get()
    }
}

use switches::{portable_only, wide_only};

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use rand::{Rng, SeedableRng};

    use super::Tape;
    use crate::mapping::Phenotype;
    use crate::problem::{Column, Problem, ProblemSources, ProblemSpec};
    use crate::program::{Body, Program};

    thread_local! {
        /// Runs this thread's blocks without AVX2 even where the CPU has it, to compare the paths.
        pub(super) static PORTABLE: Cell<bool> = const { Cell::new(false) };
        /// Holds this thread's runs with derivatives in f64 even where they could hold f32, to
        /// compare the two.
        pub(super) static WIDE: Cell<bool> = const { Cell::new(false) };
    }

    /// Float inputs x and y, int input n, over 200 cases (three full blocks and a part), with
    /// zeros, negatives, large values and a NaN-free spread.
    fn problem() -> Problem {
        problem_of(200)
    }

    /// [`problem`] over `n` cases.
    fn problem_of(n: usize) -> Problem {
        let toml = "name = \"t\"\nstart = \"e\"\nkind = \"expression\"\nfitness = \"rmse\"\n\
            [[inputs]]\nname = \"x\"\ntype = \"float\"\n[[inputs]]\nname = \"y\"\ntype = \"float\"\n\
            [[inputs]]\nname = \"n\"\ntype = \"int\"\n\
            [[outputs]]\nname = \"out\"\ntype = \"float\"\n[target]\ntype = \"float\"\n";
        let spec: ProblemSpec = toml::from_str(toml).unwrap();
        let template = crate::problem::standard_template(&spec);
        let cases: Vec<String> = (0..n as i64)
            .map(|i| {
                let x = if i % 17 == 0 { 0.0 } else { (i as f32) * 0.173 - 17.0 };
                let y = if i % 29 == 0 { 3.0e30 } else { ((i * 37) % 64) as f32 * 0.11 - 3.0 };
                let n = (i * 7919) % 23 - 11;
                format!("{{\"x\": {x}, \"y\": {y:e}, \"n\": {n}, \"target\": 1.0}}")
            })
            .collect();
        let cases = format!("[{}]", cases.join(","));
        let sources = ProblemSources { toml, grammar: "<e> ::= x | y\n", cases: &cases, template: &template };
        Problem::from_sources("t", &sources).unwrap()
    }

    /// A random expression of about `depth` levels over the inputs, three parameters, float,
    /// double and int literals and every operation the tape covers.
    /// With `float`, only what a float-only tape holds ([`Tape::float_only`]): no `n`, no double
    /// or int literals, no `cos`, `pdiv` or `fmax` of doubles.
    fn random(rng: &mut impl Rng, depth: usize, float: bool) -> String {
        random_of(rng, depth, float, 3)
    }

    /// [`random`] over `params` parameters.
    fn random_of(rng: &mut impl Rng, depth: usize, float: bool, params: usize) -> String {
        // A draw from `0..n`, with `skip` left out where `float`.
        let pick = |rng: &mut dyn rand::RngCore, n: usize, skip: &[usize]| -> usize {
            let mut r = rng.random_range(0..n - if float { skip.len() } else { 0 });
            for &k in skip.iter().filter(|_| float) {
                r += usize::from(r >= k);
            }
            r
        };
        if depth == 0 || rng.random_range(0..6) == 0 {
            return match pick(rng, 9, &[2, 7, 8]) {
                0 => "x".into(),
                1 => "y".into(),
                2 => "n".into(),
                3..=5 => format!("p[{}]", rng.random_range(0..params)),
                6 => format!("{}.{}f", rng.random_range(0..10), rng.random_range(0..100)),
                7 => format!("{}.{}", rng.random_range(0..10), rng.random_range(0..10)),
                _ => format!("{}", rng.random_range(-3..4)),
            };
        }
        let a = random_of(rng, depth - 1, float, params);
        let b = random_of(rng, depth - 1, float, params);
        match pick(rng, 20, &[9, 18, 19]) {
            0 | 1 => format!("({a} + {b})"),
            2 | 3 => format!("({a} - {b})"),
            4 | 5 => format!("({a} * {b})"),
            6 | 7 => format!("({a} / {b})"),
            8 => format!("sinf({a})"),
            9 => format!("cos({a})"),
            10 => format!("tanhf({a})"),
            11 => format!("logf({a})"),
            12 => format!("sqrtf({a})"),
            13 => format!("expf({a})"),
            14 => format!("fabsf(-{a})"),
            15 => format!("powf({a}, {b})"),
            16 => format!("fminf({a}, {b})"),
            17 => format!("pdivf({a}, {b} * 0.001f)"),
            18 => format!("pdiv((double)({a}), {b} * 0.001)"),
            _ => format!("fmax((double)({a}), (int)({b}))"),
        }
    }

    fn bits(c: &Column) -> Vec<u64> {
        match c {
            Column::Float(v) => {
                v.iter().map(|f| if f.is_nan() { 1 } else { u64::from(f.to_bits()) }).collect()
            }
            Column::Int(v) => v.iter().map(|&i| i as u64).collect(),
        }
    }

    /// Each case's derivatives as the sums of their contributions' magnitudes: the scale of
    /// their rounding.
    fn magnitudes(program: &Program, p: &Problem, params: &[f32]) -> Vec<f64> {
        let Body::Expression(e) = program.body() else { panic!("an expression") };
        let tape = Tape::compile(program, e).unwrap();
        let mut s = tape.stack(true);
        s.magnitudes = true;
        let mut out = Vec::new();
        tape.each_block(&mut s, p, params, true, |_, _, rows| {
            out.extend_from_slice(rows);
            true
        })
        .unwrap();
        out
    }

    /// On 3,000 random programs the block evaluation gives the tree walk's outputs bit for bit,
    /// infinities and signed zeros included, and NaN where it gives NaN (a NaN's sign and
    /// payload are the hardware's, not the program's), and it covers them all. Its derivatives
    /// (reverse mode) are the tree walk's (forward mode) wherever those are finite, to within
    /// 1e-12 of the sum of their contributions' magnitudes (the products of slopes along each
    /// path from the result to an occurrence of the parameter; the two modes round those
    /// products and their sum in other orders); where forward mode gives NaN or an infinity,
    /// reverse mode may give a number (a parameter a NaN-making step does not read).
    #[test]
    fn blocks_compute_what_the_tree_walk_computes() {
        let p = problem();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (mut programs, mut non_finite) = (0, 0);
        let (mut derivatives, mut rounded, mut worst) = (0usize, 0usize, 0.0f64);
        // Programs with a step computed once a block (an operation on constants and parameters).
        let mut hoisted = 0;
        while programs < 3000 {
            let text = random(&mut rng, 6, false);
            let Ok(program) = Program::parse(&p, &Phenotype::new(&text)) else { continue };
            let Body::Expression(e) = program.body() else { panic!("{text}: not an expression") };
            let tape = Tape::compile(&program, e);
            assert!(tape.is_some(), "{text}: not covered");
            let tape = tape.unwrap();
            hoisted += usize::from(
                tape.steps.iter().zip(&tape.uniform).any(|(s, &u)| u && s.args[0] != super::NONE),
            );
            programs += 1;
            let params: Vec<f32> = (0..program.params()).map(|_| rng.random_range(-4.0f32..4.0)).collect();
            let fast = program.run_params(&p, &params, 100).unwrap();
            let tree = program.run_tree(&p, &params, 100).unwrap();
            assert_eq!(bits(&fast[0]), bits(&tree[0]), "{text} at {params:?}");
            PORTABLE.set(true);
            let portable = program.run_params(&p, &params, 100).unwrap();
            PORTABLE.set(false);
            assert_eq!(bits(&portable[0]), bits(&tree[0]), "{text} at {params:?} without AVX2");
            if let Column::Float(v) = &tree[0] {
                non_finite += v.iter().filter(|x| !x.is_finite()).count();
            }
            let np = program.params();
            if np == 0 {
                continue;
            }
            let fast = program.linearize(&p, &params, 100).unwrap();
            let tree = program.linearize_tree(&p, &params, 100).unwrap();
            // The blocks without AVX2 give the same bits.
            PORTABLE.set(true);
            let portable = program.linearize(&p, &params, 100).unwrap();
            PORTABLE.set(false);
            let jb =
                |v: &[f64]| v.iter().map(|x| if x.is_nan() { 1 } else { x.to_bits() }).collect::<Vec<_>>();
            let ob =
                |v: &[f32]| v.iter().map(|x| if x.is_nan() { 1 } else { x.to_bits() }).collect::<Vec<_>>();
            assert_eq!(jb(&portable.jacobian), jb(&fast.jacobian), "{text}: derivatives without AVX2");
            assert_eq!(ob(&portable.outputs), ob(&fast.outputs), "{text}: outputs without AVX2");
            let f =
                |v: &[f32]| v.iter().map(|x| if x.is_nan() { 1 } else { x.to_bits() }).collect::<Vec<u32>>();
            assert_eq!(f(&fast.outputs), f(&tree.outputs), "{text}");
            let scale = magnitudes(&program, &p, &params);
            for (i, ((&g, &w), &m)) in fast.jacobian.iter().zip(&tree.jacobian).zip(&scale).enumerate() {
                if !w.is_finite() || !m.is_finite() {
                    continue;
                }
                // A subnormal scale is measured against the smallest normal number.
                let m = m.max(f64::MIN_POSITIVE);
                let off = (g - w).abs();
                let (c, k) = (i / np, i % np);
                assert!(
                    off <= 1e-12 * m,
                    "{text} at {params:?}, case {c}, p[{k}]: {g:e} against {w:e}, scale {m:e}"
                );
                if w != 0.0 {
                    derivatives += 1;
                    rounded += usize::from(g != w);
                    worst = worst.max(off / m);
                }
            }
        }
        eprintln!(
            "{derivatives} nonzero derivatives, {rounded} rounded otherwise, at most {worst:e} of their scale; \
             {hoisted} programs with a step computed once a block"
        );
        assert!(non_finite > 1000, "only {non_finite} non-finite outputs: poles are not tried");
        assert!(hoisted > 500, "only {hoisted} programs compute a step once a block");
        assert!(derivatives > 100_000, "only {derivatives} nonzero derivatives compared");
        assert!(
            rounded > 0,
            "every derivative rounded as forward mode rounds it: the modes are not told apart"
        );
    }

    /// With up to 11 parameters (rows gathered four parameters and four cases at a time with
    /// AVX2, the rest one at a time) over 203 cases (blocks of 128 and 75), on 1,500 random
    /// programs the derivatives are the same bits with and without AVX2, and within 1e-12 of
    /// their scale of the tree walk's where those are finite: a parameter read once, several
    /// times or not at all.
    #[test]
    fn rows_gathered_four_at_a_time_are_the_portable_ones() {
        let p = problem_of(203);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(13);
        let (mut programs, mut wide, mut repeated, mut compared) = (0, 0, 0, 0usize);
        while programs < 1500 {
            let float = rng.random_bool(0.5);
            let text = random_of(&mut rng, 6, float, 11);
            let Ok(program) = Program::parse(&p, &Phenotype::new(&text)) else { continue };
            let np = program.params();
            if np == 0 {
                continue;
            }
            programs += 1;
            wide += usize::from(np >= 4);
            let Body::Expression(e) = program.body() else { panic!("{text}: not an expression") };
            let tape = Tape::compile(&program, e).unwrap();
            repeated += usize::from(tape.reads_of.iter().any(|r| r.len() > 1));
            let params: Vec<f32> = (0..np).map(|_| rng.random_range(-4.0f32..4.0)).collect();
            let fast = program.linearize(&p, &params, 100).unwrap();
            PORTABLE.set(true);
            let portable = program.linearize(&p, &params, 100).unwrap();
            PORTABLE.set(false);
            let jb =
                |v: &[f64]| v.iter().map(|x| if x.is_nan() { 1 } else { x.to_bits() }).collect::<Vec<_>>();
            assert_eq!(jb(&portable.jacobian), jb(&fast.jacobian), "{text}: derivatives without AVX2");
            let tree = program.linearize_tree(&p, &params, 100).unwrap();
            let scale = magnitudes(&program, &p, &params);
            for (i, ((&g, &w), &m)) in fast.jacobian.iter().zip(&tree.jacobian).zip(&scale).enumerate() {
                if w.is_finite() && m.is_finite() {
                    let (c, k) = (i / np, i % np);
                    assert!((g - w).abs() <= 1e-12 * m.max(f64::MIN_POSITIVE), "{text}: case {c}, p[{k}]");
                    compared += 1;
                }
            }
        }
        assert!(wide > 1000, "only {wide} programs with four parameters or more");
        assert!(repeated > 300, "only {repeated} programs read a parameter more than once");
        assert!(compared > 500_000, "only {compared} derivatives compared");
    }

    /// A run of a float-only tape holds its values in f32: the same outputs, bit for bit (NaN for
    /// NaN), as the tree walk, whole and stopped part way, and the same call values kept for the
    /// run with derivatives; and a run with derivatives gives the same derivatives, bit for bit,
    /// as one holding its values in f64, whether it takes the kept call values or calls again.
    #[test]
    fn float_only_plain_runs_compute_what_the_f64_runs_compute() {
        let p = problem();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        let (mut programs, mut uniform, mut non_finite, mut derivatives) = (0, 0, 0, 0);
        let same = |a: &[f32], b: &[f32]| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan())
        };
        while programs < 2000 {
            let text = random(&mut rng, 5, true);
            let program = Program::parse(&p, &Phenotype::new(&text)).unwrap();
            let Body::Expression(e) = program.body() else { panic!("{text}: not an expression") };
            let tape = Tape::compile(&program, e).unwrap();
            assert!(tape.float_only, "{text}: not float-only");
            programs += 1;
            uniform += usize::from(
                tape.steps.iter().zip(&tape.uniform).any(|(s, &u)| u && s.args[0] != super::NONE),
            );
            let params: Vec<f32> = (0..program.params()).map(|_| rng.random_range(-4.0f32..4.0)).collect();
            let Column::Float(tree) = program.run_tree(&p, &params, 100).unwrap().remove(0) else { panic!() };
            non_finite += tree.iter().filter(|x| !x.is_finite()).count();
            let Column::Float(fast) = program.run_params(&p, &params, 100).unwrap().remove(0) else {
                panic!()
            };
            assert!(same(&fast, &tree), "{text} at {params:?}");
            let mut runs = program.runs(&p, 100);
            let mut plain = Vec::new();
            runs.outputs(&params, |_, ys| plain.extend_from_slice(ys)).unwrap();
            let (mut linear, mut rows) = (Vec::new(), Vec::new());
            // Takes the call values the plain run kept.
            runs.linearize(&params, |_, ys, r| {
                linear.extend_from_slice(ys);
                rows.extend_from_slice(r);
            })
            .unwrap();
            assert!(same(&plain, &tree) && same(&linear, &tree), "{text} at {params:?}");
            // The same derivatives as a run holding its values in f64, with and without the call
            // values kept.
            WIDE.set(true);
            let wide = program.linearize(&p, &params, 100).unwrap();
            WIDE.set(false);
            let fresh = program.linearize(&p, &params, 100).unwrap();
            let jb =
                |v: &[f64]| v.iter().map(|x| if x.is_nan() { 1 } else { x.to_bits() }).collect::<Vec<_>>();
            assert_eq!(jb(&wide.jacobian), jb(&rows), "{text} at {params:?}: derivatives in f32");
            assert_eq!(jb(&wide.jacobian), jb(&fresh.jacobian), "{text} at {params:?}: derivatives in f32");
            assert!(same(&wide.outputs, &tree), "{text} at {params:?}");
            derivatives += rows.iter().filter(|g| **g != 0.0).count();
            let mut part = Vec::new();
            let all = runs.outputs_while(&params, |_, ys| {
                part.extend_from_slice(ys);
                false
            });
            assert!(!all.unwrap(), "{text}: a run stopped after its first block ran every block");
            assert!(same(&part, &tree[..part.len()]), "{text}");
        }
        assert!(uniform > 200, "only {uniform} programs compute a step once a block");
        assert!(derivatives > 100_000, "only {derivatives} nonzero derivatives compared");
        assert!(non_finite > 1000, "only {non_finite} non-finite outputs: poles are not tried");
    }
}
