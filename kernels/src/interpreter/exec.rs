//! Runs bytecode on the CPU, op for op as the interpreter kernel does, with the CPU evaluator's
//! arithmetic (its `/` and `%` by zero give 0, where the GPU's `div.s32` and `rem.s32` give
//! what the compiled routes give; no built-in grammar divides an int by zero) and its math
//! functions (its own `sinf` and `cosf`, the host's math library for the others). It exists to hold the compiler to the CPU evaluator: both must produce the
//! same outputs, bit for bit, for every program.

use gpfarm_gp::Problem;
use gpfarm_gp::problem::{Column, InputColumn, ScalarType};
use gpfarm_gp::program::RunError;
use gpfarm_gp::program::semantics::{cosf, int_div, int_rem, shl, shr, sinf, wrapped};
use gpfarm_gp::program::tree::{Source, Ty};

use super::bytecode::{Bytecode, Op, array_layout, slot_layout, writable_slots};

/// A stack cell: an int or a float in its low 32 bits, or a double.
#[derive(Clone, Copy, Default)]
struct Cell(u64);

impl Cell {
    fn i(self) -> i32 {
        self.0 as u32 as i32
    }
    fn f(self) -> f32 {
        f32::from_bits(self.0 as u32)
    }
    fn d(self) -> f64 {
        f64::from_bits(self.0)
    }
    fn int(v: i32) -> Cell {
        Cell(u64::from(v as u32))
    }
    fn float(v: f32) -> Cell {
        Cell(u64::from(v.to_bits()))
    }
    fn double(v: f64) -> Cell {
        Cell(v.to_bits())
    }
    fn bool(b: bool) -> Cell {
        Cell::int(i32::from(b))
    }
}

/// Runs `code` (compiled for `problem`) over every case: one column per output, as
/// [`gpfarm_gp::Program::run_with_limit`] returns them.
pub fn run(problem: &Problem, code: &Bytecode, max_steps: u64) -> Result<Vec<Column>, RunError> {
    let cases = problem.cases();
    let n = cases.len();
    let layout = slot_layout(problem);
    let types: Vec<ScalarType> = problem.spec().outputs.iter().map(|o| o.ty).collect();
    let mut columns: Vec<Column> = types
        .iter()
        .map(|t| match t {
            ScalarType::Int => Column::Int(Vec::with_capacity(n)),
            ScalarType::Float => Column::Float(Vec::with_capacity(n)),
        })
        .collect();
    let mut stack = vec![Cell::default(); code.depth + 1];
    let mut out = vec![Cell::default(); types.len()];
    for c in 0..n {
        let (vars, data) = case_state(problem, &layout, c);
        let mut m = Machine::new(vars, &mut stack, &mut out, data, max_steps);
        m.run(&code.words).map_err(|_| RunError::StepLimit { case: c, limit: max_steps })?;
        for (col, v) in columns.iter_mut().zip(out.iter()) {
            match col {
                Column::Int(x) => x.push(v.i()),
                Column::Float(x) => x.push(v.f()),
            }
        }
    }
    Ok(columns)
}

/// What a program's cases cost the GPU routes, counted on the CPU ([`profile`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// Ops run per case, on average over the cases counted.
    pub mean_ops: f64,
    /// Ops run by the case that ran most.
    pub max_ops: f64,
    /// Whether the program fails (passes the step limit, or a case's state repeats).
    pub fails: bool,
    /// For a failing program, the ops its failing case would run to the step limit, at the ops
    /// per step it showed, had its loop not repeated: what such a loop costs where nothing
    /// finds the repetition (the CPU evaluator), or a loop like it that does not repeat.
    pub to_limit: f64,
}

/// Counts the ops `code` runs on `problem`'s first `cases` cases as the GPU routes run them: a
/// case whose loop state repeats stops there (as the interpreter and the PTX route stop it),
/// and the first case to fail (fewest ops) stops the others, which run beside it. Each case runs
/// at most `cap` steps; one that reaches `cap` is counted as running to the problem's step
/// limit at the ops per step it showed. Deterministic: it depends on the program and the cases
/// only, never on this machine.
pub fn profile(problem: &Problem, code: &Bytecode, cases: usize, cap: u64) -> Profile {
    let n = problem.cases().len().min(cases.max(1));
    let layout = slot_layout(problem);
    let writable = writable_slots(problem);
    let limit = problem.max_steps();
    // Each case's ops, and whether it failed.
    let mut runs: Vec<(f64, bool)> = Vec::with_capacity(n);
    let mut to_limit = 0.0f64;
    let mut stack = vec![Cell::default(); code.depth + 1];
    let mut out = vec![Cell::default(); problem.spec().outputs.len()];
    for c in 0..n {
        let (vars, data) = case_state(problem, &layout, c);
        let mut m = Machine::new(vars, &mut stack, &mut out, data, cap.min(limit));
        m.cycles =
            Some(Cycles { writable: writable.clone(), kept_pc: usize::MAX, kept: Vec::new(), next: 1 });
        let outcome = m.run(&code.words);
        let ops = match outcome {
            Err(Stop::Limit) if cap < limit => m.ops as f64 / m.steps.max(1) as f64 * limit as f64,
            _ => m.ops as f64,
        };
        if outcome.is_err() {
            to_limit = to_limit.max(m.ops as f64 / m.steps.max(1) as f64 * limit as f64);
        }
        runs.push((ops, outcome.is_err()));
    }
    // The cases run side by side; the first to fail stops the others.
    let first_failure = runs.iter().filter(|r| r.1).map(|r| r.0).reduce(f64::min);
    let fails = first_failure.is_some();
    let stop = first_failure.unwrap_or(f64::INFINITY);
    let (mut total, mut max) = (0.0f64, 0.0f64);
    for &(ops, _) in &runs {
        let ops = ops.min(stop);
        total += ops;
        max = max.max(ops);
    }
    Profile { mean_ops: total / runs.len().max(1) as f64, max_ops: max, fails, to_limit }
}

/// Case `c`'s variable slots and int arrays.
fn case_state<'p>(problem: &'p Problem, layout: &[(Source, Ty)], c: usize) -> (Vec<Cell>, Vec<&'p [i32]>) {
    let cases = problem.cases();
    let vars = layout
        .iter()
        .map(|(src, ty)| match src {
            Source::Input(i) => match &cases.inputs()[*i] {
                InputColumn::Scalar(Column::Int(v)) => Cell::int(v[c]),
                InputColumn::Scalar(Column::Float(v)) => Cell::float(v[c]),
                InputColumn::IntArray { .. } => Cell::default(),
            },
            Source::Length(i) => match &cases.inputs()[*i] {
                InputColumn::IntArray { lens, .. } => Cell::int(lens[c]),
                InputColumn::Scalar(_) => Cell::default(),
            },
            Source::CaseBit(bit) => Cell::int(((c >> bit) & 1) as i32),
            // A problem's layout has no parameters: programs reach the interpreter with their
            // values written in (`assemble` refuses any other).
            Source::Param(_) => Cell::default(),
            Source::Zero(_) => match ty {
                Ty::Double => Cell::double(0.0),
                Ty::Float => Cell::float(0.0),
                Ty::Int => Cell::int(0),
            },
        })
        .collect();
    let data = array_layout(problem).iter().map(|&i| cases.array(i, c).unwrap_or(&[])).collect();
    (vars, data)
}

struct Machine<'a> {
    vars: Vec<Cell>,
    stack: &'a mut [Cell],
    out: &'a mut [Cell],
    data: Vec<&'a [i32]>,
    steps: u64,
    max_steps: u64,
    /// Ops run so far.
    ops: u64,
    /// For finding a repeated state as the GPU routes do ([`profile`]): the writable slots,
    /// and the kept step's place, slots and the step at which the next is kept.
    cycles: Option<Cycles>,
}

struct Cycles {
    writable: Vec<usize>,
    kept_pc: usize,
    kept: Vec<Cell>,
    next: u64,
}

/// Why a run stopped before [`Op::End`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Past the step limit.
    Limit,
    /// The state of a step repeated: the case would never end.
    Repeats,
}

impl<'a> Machine<'a> {
    fn new(
        vars: Vec<Cell>,
        stack: &'a mut [Cell],
        out: &'a mut [Cell],
        data: Vec<&'a [i32]>,
        max_steps: u64,
    ) -> Machine<'a> {
        Machine { vars, stack, out, data, steps: 0, max_steps, ops: 0, cycles: None }
    }

    /// At a step: whether the state repeats the kept one; keeps it at every `2^k`-th step.
    fn repeats(&mut self, pc: usize) -> bool {
        let Some(c) = &mut self.cycles else { return false };
        if pc == c.kept_pc && c.writable.iter().zip(&c.kept).all(|(&k, v)| self.vars[k].0 == v.0) {
            return true;
        }
        if self.steps == c.next {
            c.kept_pc = pc;
            c.kept = c.writable.iter().map(|&k| self.vars[k]).collect();
            c.next <<= 1;
        }
        false
    }

    /// Runs to [`Op::End`]; `Err` past the step limit, or when a step's state repeats (with
    /// `cycles` only).
    fn run(&mut self, prog: &[u32]) -> Result<(), Stop> {
        let mut t = Cell::default();
        let mut sp = 1usize;
        let mut pc = 0usize;
        loop {
            let w = prog[pc];
            pc += 1;
            self.ops += 1;
            let arg = (w >> 8) as usize;
            let op = Op::decode(w).expect("the compiler writes only ops it knows");
            let effect = op.effect();
            if effect > 0 {
                self.stack[sp] = t;
                sp += 1;
            }
            // The cell below the top, for ops that consume two values.
            let a = if effect < 0 && !matches!(op, Op::Store | Op::Jz | Op::Out) {
                sp -= 1;
                self.stack[sp]
            } else {
                Cell::default()
            };
            t = match op {
                Op::End => return Ok(()),
                Op::PushI | Op::PushF => {
                    pc += 1;
                    Cell(u64::from(prog[pc - 1]))
                }
                Op::PushD => {
                    pc += 2;
                    Cell(u64::from(prog[pc - 2]) | (u64::from(prog[pc - 1]) << 32))
                }
                Op::Load => self.vars[arg],
                Op::Store | Op::Out | Op::Jz => {
                    if op == Op::Store {
                        self.vars[arg] = t;
                    } else if op == Op::Out {
                        self.out[arg] = t;
                    } else if t.i() == 0 {
                        pc = arg;
                    }
                    sp -= 1;
                    self.stack[sp]
                }
                Op::Read => Cell::int(wrapped(self.data[arg], t.i())),
                Op::CvtIF => Cell::float(t.i() as f32),
                Op::CvtID => Cell::double(f64::from(t.i())),
                Op::CvtFI => Cell::int(t.f() as i32),
                Op::CvtDI => Cell::int(t.d() as i32),
                Op::CvtFD => Cell::double(f64::from(t.f())),
                Op::CvtDF => Cell::float(t.d() as f32),
                Op::NegI => Cell::int(t.i().wrapping_neg()),
                Op::NegF => Cell::float(-t.f()),
                Op::NegD => Cell::double(-t.d()),
                Op::BitNot => Cell::int(!t.i()),
                Op::NotI => Cell::bool(t.i() == 0),
                Op::NotF => Cell::bool(t.f() == 0.0),
                Op::NotD => Cell::bool(t.d() == 0.0),
                Op::TruthI => Cell::bool(t.i() != 0),
                Op::TruthF => Cell::bool(t.f() != 0.0),
                Op::TruthD => Cell::bool(t.d() != 0.0),
                Op::AddI => Cell::int(a.i().wrapping_add(t.i())),
                Op::SubI => Cell::int(a.i().wrapping_sub(t.i())),
                Op::MulI => Cell::int(a.i().wrapping_mul(t.i())),
                Op::DivI => Cell::int(int_div(a.i(), t.i())),
                Op::AddF => Cell::float(a.f() + t.f()),
                Op::SubF => Cell::float(a.f() - t.f()),
                Op::MulF => Cell::float(a.f() * t.f()),
                Op::DivF => Cell::float(a.f() / t.f()),
                Op::AddD => Cell::double(a.d() + t.d()),
                Op::SubD => Cell::double(a.d() - t.d()),
                Op::MulD => Cell::double(a.d() * t.d()),
                Op::DivD => Cell::double(a.d() / t.d()),
                Op::Rem => Cell::int(int_rem(a.i(), t.i())),
                Op::And | Op::LAnd => Cell::int(a.i() & t.i()),
                Op::Or | Op::LOr => Cell::int(a.i() | t.i()),
                Op::Xor => Cell::int(a.i() ^ t.i()),
                Op::Shl => Cell::int(shl(a.i(), t.i())),
                Op::Shr => Cell::int(shr(a.i(), t.i())),
                Op::LtI => Cell::bool(a.i() < t.i()),
                Op::GtI => Cell::bool(a.i() > t.i()),
                Op::LeI => Cell::bool(a.i() <= t.i()),
                Op::GeI => Cell::bool(a.i() >= t.i()),
                Op::EqI => Cell::bool(a.i() == t.i()),
                Op::NeI => Cell::bool(a.i() != t.i()),
                Op::LtF => Cell::bool(a.f() < t.f()),
                Op::GtF => Cell::bool(a.f() > t.f()),
                Op::LeF => Cell::bool(a.f() <= t.f()),
                Op::GeF => Cell::bool(a.f() >= t.f()),
                Op::EqF => Cell::bool(a.f() == t.f()),
                Op::NeF => Cell::bool(a.f() != t.f()),
                Op::LtD => Cell::bool(a.d() < t.d()),
                Op::GtD => Cell::bool(a.d() > t.d()),
                Op::LeD => Cell::bool(a.d() <= t.d()),
                Op::GeD => Cell::bool(a.d() >= t.d()),
                Op::EqD => Cell::bool(a.d() == t.d()),
                Op::NeD => Cell::bool(a.d() != t.d()),
                Op::Jmp => {
                    pc = arg;
                    t
                }
                Op::Step => {
                    self.steps += 1;
                    if self.steps > self.max_steps {
                        return Err(Stop::Limit);
                    }
                    if self.repeats(pc) {
                        return Err(Stop::Repeats);
                    }
                    t
                }
                Op::SinF => Cell::float(sinf(t.f())),
                Op::CosF => Cell::float(cosf(t.f())),
                Op::ExpF => Cell::float(t.f().exp()),
                Op::LogF => Cell::float(t.f().ln()),
                Op::SqrtF => Cell::float(t.f().sqrt()),
                Op::FabsF => Cell::float(t.f().abs()),
                Op::TanhF => Cell::float(t.f().tanh()),
                Op::SinD => Cell::double(t.d().sin()),
                Op::CosD => Cell::double(t.d().cos()),
                Op::ExpD => Cell::double(t.d().exp()),
                Op::LogD => Cell::double(t.d().ln()),
                Op::SqrtD => Cell::double(t.d().sqrt()),
                Op::FabsD => Cell::double(t.d().abs()),
                Op::TanhD => Cell::double(t.d().tanh()),
                Op::PowF => Cell::float(a.f().powf(t.f())),
                Op::FminF => Cell::float(a.f().min(t.f())),
                Op::FmaxF => Cell::float(a.f().max(t.f())),
                Op::PdivF => Cell::float(if t.f().abs() > 0.001f32 { a.f() / t.f() } else { 1.0 }),
                Op::PowD => Cell::double(a.d().powf(t.d())),
                Op::FminD => Cell::double(a.d().min(t.d())),
                Op::FmaxD => Cell::double(a.d().max(t.d())),
                Op::PdivD => Cell::double(if t.d().abs() > 0.001 { a.d() / t.d() } else { 1.0 }),
            };
        }
    }
}
