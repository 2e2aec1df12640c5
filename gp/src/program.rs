//! The typed program and the CPU reference evaluator: parses a phenotype (the C subset the grammars produce)
//! once into a typed tree and runs it over every case, with the semantics the GPU
//! kernels have. It is the oracle GPU results are checked against and the evaluator used
//! without a GPU. Must never hold global state: evaluation is a pure function of the
//! problem and the program, so populations can be evaluated on any number of threads.
//!
//! Semantics, chosen to match what NVRTC makes of the same text:
//! - `int` is 32-bit and wraps on overflow; `/` and `%` by zero give 0 (the built-in
//!   grammars cannot divide ints by zero). Shift counts outside 0..32 clamp as in PTX.
//! - `float` is f32 and `double` f64; a literal with `.` or an exponent and no `f` is a
//!   double, and C's usual arithmetic conversions apply, so `x * 07.35` is computed in
//!   double. `sinf` and the other `f` functions take and return float; the unsuffixed
//!   names follow C++ overloading (float for float arguments, double otherwise).
//! - Floating to int truncates toward zero, saturating, with NaN giving 0 (`cvt.rzi`).
//! - `pdivf(a, b)` is `fabsf(b) > 0.001f ? a / b : 1.0f` and `pdiv(a, b)` the same in double
//!   (protected division; NaN `b` gives 1), as every NVRTC unit defines them ([`MATH_HELPERS`]).
//! - Reading an `int[]` input wraps the index into `[0, len)` (`m = k % n; if (m < 0)
//!   m += n;`), exactly as the templates' `operator[]` does.
//! - Locals and statement outputs start at zero; loops stop the program (invalid, worst
//!   fitness) after `max_steps` iterations in one case.
//!
//! Transcendental functions use the host's libm, which may differ from CUDA's in the
//! last bits, and the GPU may contract `a * b + c` into one rounding; compare float
//! results with a tolerance.

mod lex;
mod parse;
mod run;
mod runs;
pub(crate) use run::{fn1_f64, fn2_f32, fn2_f64};
pub use runs::Runs;
mod tangent;
mod tape;
mod trig;
mod value;

/// The typed tree a phenotype parses into ([`Program::parse`]), read-only, for code
/// generators that must compute exactly what the evaluator computes. Every expression has
/// a static type ([`Expr::ty`]) that is also the type of its value at run time; binary
/// operands of a [`Expr::Chain`] take C's usual arithmetic conversions ([`Ty::usual`])
/// before the operator applies, and every other implicit conversion is an explicit
/// [`Expr::Convert`] node. The semantics are those stated at the top of [`crate::program`].
pub mod tree {
    pub use super::parse::{ArithOp, Bin, CmpOp, Expr, Fn1, Fn2, IntOp, MAX_NESTING, Stmt};
    pub use super::value::{Ty, Value};
    pub use super::{Body, Source};
}

/// The evaluator's arithmetic where C leaves it undefined, and the templates' wrapped array read,
/// for other runners of the same programs (the interpreter's CPU run) to share.
pub mod semantics {
    pub use super::run::wrapped;
    pub use super::trig::{REDUCED, cosf, sin_cos_block, sinf};
    pub use super::value::{int_div, int_rem, shl, shr};
}

use std::collections::HashMap;
use std::num::NonZeroUsize;

use crate::fitness::Fitness;
use crate::mapping::{PARAM_ARRAY, Phenotype};
use crate::problem::{Column, InputColumn, InputType, Kind, Problem, ProblemSpec, ScalarType, ScoreError};

use parse::{ArithOp, Bin, Binding, CmpOp, Expr, Parser, Stmt};
use run::{Machine, OutOfSteps};
use tangent::Tangent;
use tape::Tape;
use value::{Ty, Value};

pub use crate::problem::spec::DEFAULT_MAX_STEPS;

/// CUDA C that every NVRTC unit holds after its template's preamble: the problem's step limit
/// `max_steps` ([`crate::Problem::max_steps`]), the unit's failure flags (one `unsigned` per
/// member, `gpfarm_failed`, when `members` > 0: zero when its module is loaded) and two forms of
/// `gpfarm_step`, each counting one step in a case's counter:
/// - `gpfarm_step(steps, failure)`, the phenotype's loops' ([`with_step_limit`]): past the limit
///   it sets `failure` (the member's flag) and returns `false`, so this loop and every later one
///   ends at once and the kernel runs to its end; the GPU evaluator reads the flags after the
///   launch and gives a flagged member the worst fitness, as the CPU evaluator fails it;
/// - `gpfarm_step(steps)`, for a template's own loops (`unsigned long long steps = 0; while
///   (gpfarm_step(steps) && (c)) ...`): past the limit it stops the kernel with `__trap()`; the
///   GPU worker then finds the individual and fails it.
pub fn step_helper(max_steps: u64, members: usize) -> String {
    let flags = if members > 0 {
        format!("extern \"C\" {{ __device__ unsigned gpfarm_failed[{members}]; }}\n")
    } else {
        String::new()
    };
    format!(
        "\n// gpfarm: the step limit every route keeps (one step before each test of a loop's condition).\n\
static constexpr unsigned long long gpfarm_max_steps = {max_steps}ull;\n\
{flags}\
static __device__ inline bool gpfarm_step(unsigned long long& steps, unsigned& failure)\n\
{{\n    if (steps >= gpfarm_max_steps) {{ failure = 1u; return false; }}\n    ++steps;\n    return true;\n}}\n\
static __device__ inline bool gpfarm_step(unsigned long long& steps)\n\
{{\n    if (++steps > gpfarm_max_steps) __trap();\n    return true;\n}}\n"
    )
}

/// CUDA C that opens every NVRTC unit, before the template's preamble and the problem's declared
/// functions (whose bodies may call them): the math functions of the phenotype language that CUDA
/// does not have. `pdivf(a, b)` and `pdiv(a, b)`, protected division ([`tree::Fn2::Pdiv`]): the
/// quotient where `|b| > 0.001` in the call's type, else 1 (NaN `b` gives 1). `pdiv` follows C++
/// overloading as the parser types it: float for two floats, double for any other arguments (the
/// template takes every mixed call, which would otherwise resolve to the float form).
pub const MATH_HELPERS: &str = "\
// gpfarm: protected division, pdivf/pdiv(a, b): a / b where |b| > 0.001, else 1.
static __device__ inline float pdivf(float a, float b) { return fabsf(b) > 0.001f ? a / b : 1.0f; }
static __device__ inline double pdiv(double a, double b) { return fabs(b) > 0.001 ? a / b : 1.0; }
static __device__ inline float pdiv(float a, float b) { return pdivf(a, b); }
template <typename A, typename B>
static __device__ inline double pdiv(A a, B b) { return pdiv((double)a, (double)b); }
";

/// The name of a unit's failure flags in [`step_helper`], which the GPU evaluator reads.
pub const FAILED_FLAGS: &str = "gpfarm_failed";

/// The phenotype's C text with the step limit the CPU evaluator keeps, for code compiled from
/// the text itself (the NVRTC route), as member `member` of its unit: every `while (C)` becomes
/// `while (STEP && (C))` and every `for (A; C; B)` `for (A; STEP && (C); B)`, where STEP is
/// `gpfarm_step(gpfarm_steps, gpfarm_failure)` ([`step_helper`], which the unit must hold): it
/// counts one step in a counter of the case (declared, with `gpfarm_failure`, the member's flag,
/// by a block wrapped around the text) and, past the limit, sets the flag and ends the loops:
/// its individual gets the worst fitness, as the CPU evaluator fails it. A step is counted
/// before each test of a loop's condition, as the evaluator counts it, so a program fails on
/// every route at the same step. `None` when the text has no loop (or does not lex: it is then
/// left as it is, to fail as it would).
pub fn with_step_limit(phenotype: &str, member: usize) -> Option<String> {
    let tokens = lex::lex(phenotype).ok()?;
    let is = |k: usize, p: &str| matches!(tokens.get(k), Some(lex::Token { tok: lex::Tok::Punct(q), .. }) if *q == p);
    let step = "gpfarm_step(gpfarm_steps, gpfarm_failure)".to_owned();
    // (byte offset, text to insert there), applied from the end.
    let mut inserts: Vec<(usize, String)> = Vec::new();
    for (t, token) in tokens.iter().enumerate() {
        let lex::Tok::Ident(word) = &token.tok else { continue };
        if (word != "while" && word != "for") || !is(t + 1, "(") {
            continue;
        }
        // The matching `)` and, for `for`, the two `;` at the top level of the parentheses.
        let (mut depth, mut close, mut semis) = (0usize, None, Vec::new());
        for (k, tk) in tokens.iter().enumerate().skip(t + 1) {
            match &tk.tok {
                lex::Tok::Punct("(") => depth += 1,
                lex::Tok::Punct(")") => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(k);
                        break;
                    }
                }
                lex::Tok::Punct(";") if depth == 1 => semis.push(k),
                _ => {}
            }
        }
        let close = close?;
        let open_end = tokens[t + 1].at + 1;
        match (word.as_str(), semis.as_slice()) {
            ("while", []) => {
                inserts.push((open_end, format!("{step} && (")));
                inserts.push((tokens[close].at, ")".into()));
            }
            ("for", [first, second]) if second - first == 1 => {
                inserts.push((tokens[*second].at, step.clone()))
            }
            ("for", [first, second]) => {
                inserts.push((tokens[*first].at + 1, format!(" {step} && (")));
                inserts.push((tokens[*second].at, ")".into()));
            }
            _ => return None,
        }
    }
    if inserts.is_empty() {
        return None;
    }
    inserts.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
    let mut text = phenotype.to_owned();
    for (at, insert) in inserts {
        text.insert_str(at, &insert);
    }
    Some(format!(
        "{{ unsigned long long gpfarm_steps = 0; unsigned& gpfarm_failure = {FAILED_FLAGS}[{member}]; {text} }}"
    ))
}

/// Why a phenotype does not parse; `at` is a byte offset into the phenotype.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not valid in the subset's grammar.
    #[error("at byte {at}: {message}")]
    Syntax { at: usize, message: String },
    /// A malformed or out-of-range numeric literal.
    #[error("at byte {at}: {message}")]
    Literal { at: usize, message: String },
    /// A name that is not an input, case bit, local or output of the problem.
    #[error("at byte {at}: `{name}` is not declared by the problem")]
    Undeclared { at: usize, name: String },
    /// Assignment to an input or case bit.
    #[error("at byte {at}: `{name}` is read-only")]
    ReadOnly { at: usize, name: String },
    /// An operator applied to the wrong type.
    #[error("at byte {at}: {message}")]
    Type { at: usize, message: String },
    /// A call to a function the subset does not know.
    #[error("at byte {at}: unknown function `{name}`")]
    UnknownFunction { at: usize, name: String },
    /// C the subset does not cover.
    #[error("at byte {at}: {what} are not supported")]
    Unsupported { at: usize, what: String },
    /// Nesting beyond the evaluator's bound.
    #[error("at byte {at}: nested deeper than {limit} levels")]
    TooDeep { at: usize, limit: usize },
    /// Calls of declared functions that, inlined, grow past [`MAX_INLINED_NODES`]: a body that
    /// reads a parameter twice doubles its argument at each level of nesting. Such a program
    /// fails on every route (NVRTC's included, which would call the functions).
    #[error("at byte {at}: declared functions, inlined, grow past {limit} nodes")]
    Inlined { at: usize, limit: usize },
}

/// The most nodes a program's tree may have once its calls of declared functions are inlined.
pub const MAX_INLINED_NODES: usize = 4096;

/// Why a compiled program produced no outputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// A loop ran past the step limit.
    #[error("case {case}: more than {limit} loop iterations")]
    StepLimit { case: usize, limit: u64 },
    /// The program was compiled for another problem.
    #[error(
        "program compiled for problem `{compiled_for}` run on `{run_on}`: compile it for the problem it runs on"
    )]
    WrongProblem { compiled_for: String, run_on: String },
    /// Derivatives asked of a program without a single float output.
    #[error("only a program with one float output has derivatives")]
    NotDifferentiable,
    /// Not one value per free parameter.
    #[error("the program reads {expected} parameter(s) and was given {given} value(s)")]
    Params { expected: usize, given: usize },
}

/// Why an evaluation ended with the worst fitness.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The phenotype does not compile.
    #[error("does not compile: {0}")]
    Compile(#[from] ParseError),
    /// The program did not finish.
    #[error("does not run: {0}")]
    Run(#[from] RunError),
    /// The outputs could not be scored.
    #[error("cannot be scored: {0}")]
    Score(#[from] ScoreError),
}

/// Where a variable's value comes from in each case.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Scalar input `index` (into the problem's inputs).
    Input(usize),
    /// Length of `int[]` input `index`.
    Length(usize),
    /// Bit `bit` of the case index.
    CaseBit(u32),
    /// Zero of its type.
    Zero(Ty),
    /// Free parameter `k` (`p[k]`, a float): the same in every case, set per run.
    Param(usize),
}

/// What a program does.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// An expression problem: the value, converted to the output's type, is the output.
    Expression(Expr),
    /// A statement problem: run the statements, then each output is its slot's value.
    Statements(Vec<Stmt>),
}

/// A phenotype parsed for one problem.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    problem: String,
    body: Body,
    /// Initial value source per slot.
    slots: Vec<Source>,
    /// Type per slot.
    slot_types: Vec<Ty>,
    /// Input index per array.
    arrays: Vec<usize>,
    /// For statement programs, the slot of each output.
    output_slots: Vec<usize>,
    output_types: Vec<ScalarType>,
    /// Added to its tree's size: calls of declared functions count one node each.
    size_adjust: isize,
}

fn scalar_ty(t: ScalarType) -> Ty {
    match t {
        ScalarType::Int => Ty::Int,
        ScalarType::Float => Ty::Float,
    }
}

impl Program {
    /// Parses and type-checks `phenotype` against the variables `problem` declares.
    /// Nesting deeper than 200 levels is refused; at that depth an unoptimised build
    /// needs about 1.5 MiB of stack (an optimised one a tenth of that).
    pub fn parse(problem: &Problem, phenotype: &Phenotype) -> Result<Program, ParseError> {
        Self::parse_for(problem.spec(), phenotype)
    }

    /// As [`Program::parse`], given only the problem's specification (its names and types).
    pub fn parse_for(spec: &ProblemSpec, phenotype: &Phenotype) -> Result<Program, ParseError> {
        let mut names: HashMap<String, Binding> = HashMap::new();
        let mut slots = Vec::new();
        let mut slot_types = Vec::new();
        let mut arrays = Vec::new();
        let mut bind =
            |names: &mut HashMap<String, Binding>, name: &str, src: Source, ty: Ty, writable: bool| {
                names.insert(name.to_string(), Binding::Scalar { slot: slots.len(), ty, writable });
                slots.push(src);
                slot_types.push(ty);
                slots.len() - 1
            };
        for (i, input) in spec.inputs.iter().enumerate() {
            match input.ty {
                InputType::Int => {
                    bind(&mut names, &input.name, Source::Input(i), Ty::Int, false);
                }
                InputType::Float => {
                    bind(&mut names, &input.name, Source::Input(i), Ty::Float, false);
                }
                InputType::IntArray => {
                    names.insert(input.name.clone(), Binding::Array(arrays.len()));
                    arrays.push(i);
                    if let Some(len) = &input.length_name {
                        bind(&mut names, len, Source::Length(i), Ty::Int, false);
                    }
                }
            }
        }
        for b in &spec.case_bits {
            bind(&mut names, &b.name, Source::CaseBit(b.bit), Ty::Int, false);
        }
        for l in &spec.locals {
            let ty = scalar_ty(l.ty);
            bind(&mut names, &l.name, Source::Zero(ty), ty, true);
        }
        let mut output_slots = Vec::new();
        if spec.kind == Kind::Statements {
            for o in &spec.outputs {
                let ty = scalar_ty(o.ty);
                output_slots.push(bind(&mut names, &o.name, Source::Zero(ty), ty, true));
            }
        }
        let text = phenotype.as_str();
        let toks = lex::lex(text)?;
        let params = param_count(&toks);
        if params > MAX_PARAMS {
            return Err(ParseError::Unsupported {
                at: 0,
                what: format!("more than {MAX_PARAMS} parameters"),
            });
        }
        if params > 0 && !names.contains_key(PARAM_ARRAY) {
            names.insert(PARAM_ARRAY.to_owned(), Binding::Params { first: slots.len(), count: params });
            for k in 0..params {
                slots.push(Source::Param(k));
                slot_types.push(Ty::Float);
            }
        }
        let none = HashMap::new();
        let declared;
        let functions = if spec.functions.is_empty() {
            &none
        } else {
            declared = parse::inline_functions_cached(spec).map_err(|(_, e)| e)?;
            &*declared
        };
        let mut parser = Parser::new(&toks, text.len(), &names, functions);
        let body = match spec.kind {
            Kind::Expression => {
                let (e, _) = parser.expr()?;
                parser.expect_end()?;
                Body::Expression(e)
            }
            Kind::Statements => Body::Statements(parser.statements()?),
        };
        Ok(Program {
            problem: spec.name.clone(),
            body,
            slots,
            slot_types,
            arrays,
            output_slots,
            output_types: spec.outputs.iter().map(|o| o.ty).collect(),
            size_adjust: parser.size_adjust,
        })
    }

    /// Its size: the nodes of its syntax tree that the program's text writes. A constant, a
    /// variable, an input or a free parameter (`p[k]`) is one node; so is each operator
    /// (`a + b + c` is five nodes), each function call, `?:`, array index, assignment, `if` and
    /// loop, around its operands; conversions C inserts (an int where a float goes) count nothing,
    /// and neither do blocks. So `x0 * p[0] + sinf(x1)` has size 6. This is the size that
    /// parsimony and the size–error front use.
    pub fn size(&self) -> usize {
        fn stmts(list: &[Stmt]) -> usize {
            list.iter()
                .map(|s| match s {
                    Stmt::Assign(_, _, e) => 1 + expr_size(e),
                    Stmt::If(c, a, b) => 1 + expr_size(c) + stmts(a) + stmts(b),
                    Stmt::Loop(c, body, step) => {
                        1 + c.as_ref().map_or(0, expr_size) + stmts(body) + stmts(step)
                    }
                    Stmt::Block(b) => stmts(b),
                    Stmt::Discard(e) => expr_size(e),
                })
                .sum()
        }
        let tree = match &self.body {
            Body::Expression(e) => expr_size(e),
            Body::Statements(s) => stmts(s),
        };
        tree.saturating_add_signed(self.size_adjust)
    }

    /// The name of the problem it was compiled for.
    pub fn problem(&self) -> &str {
        &self.problem
    }

    /// What it computes.
    pub fn body(&self) -> &Body {
        &self.body
    }

    /// The most steps (tests of a loop's condition) the program can take in one case, when its
    /// loops are provably bounded: every loop counts a variable up by one from a constant to
    /// below an `int[]` input's length or a constant, and nothing else writes that variable.
    /// `None` when some loop is not bounded that way. A program bounded below
    /// [`DEFAULT_MAX_STEPS`] can never reach the step limit, so compiled code need not count.
    pub fn step_bound(&self, problem: &Problem) -> Option<u64> {
        match &self.body {
            Body::Expression(_) => Some(0),
            Body::Statements(s) => self.steps_of(s, problem),
        }
    }

    /// The most steps `stmts` take, run once.
    fn steps_of(&self, stmts: &[Stmt], problem: &Problem) -> Option<u64> {
        let mut total: u64 = 0;
        for (k, s) in stmts.iter().enumerate() {
            let steps = match s {
                Stmt::Assign(..) | Stmt::Discard(_) => 0,
                Stmt::If(_, then, els) => self.steps_of(then, problem)?.max(self.steps_of(els, problem)?),
                Stmt::Block(b) => self.steps_of(b, problem)?,
                Stmt::Loop(cond, body, step) => {
                    let tests = self.loop_tests(
                        k.checked_sub(1).map(|j| &stmts[j]),
                        cond.as_ref(),
                        body,
                        step,
                        problem,
                    )?;
                    let inner = self.steps_of(body, problem)?.checked_add(self.steps_of(step, problem)?)?;
                    tests.checked_mul(inner.checked_add(1)?)?
                }
            };
            total = total.checked_add(steps)?;
        }
        Some(total)
    }

    /// How often a loop's condition is tested at most, when the loop is `v = k; while (v < n)
    /// { ...; v = v + 1; }` with `n` an `int[]` length or a constant and `v` written nowhere
    /// else (`init` is the statement before the loop).
    fn loop_tests(
        &self,
        init: Option<&Stmt>,
        cond: Option<&Expr>,
        body: &[Stmt],
        step: &[Stmt],
        problem: &Problem,
    ) -> Option<u64> {
        let Some(Stmt::Assign(v, Ty::Int, Expr::Const(Value::Int(start)))) = init else { return None };
        let Some(Expr::Chain(first, rest)) = cond else { return None };
        let (Expr::Var(var), [(Bin::Cmp(CmpOp::Lt), bound)]) = (first.as_ref(), rest.as_slice()) else {
            return None;
        };
        let end: i64 = match bound {
            Expr::Const(Value::Int(c)) => i64::from(*c),
            Expr::Var(slot) => match self.slots.get(*slot) {
                Some(Source::Length(input)) => problem.spec().inputs.get(*input)?.max_len? as i64,
                _ => return None,
            },
            _ => return None,
        };
        let increments = matches!(step, [Stmt::Assign(w, Ty::Int, Expr::Chain(a, ops))]
            if w == v && matches!(a.as_ref(), Expr::Var(x) if x == v)
                && matches!(ops.as_slice(), [(Bin::Arith(ArithOp::Add), Expr::Const(Value::Int(1)))]));
        if var != v || !increments || writes(body, *v) {
            return None;
        }
        Some((end - i64::from(*start)).max(0) as u64 + 1)
    }

    /// Where each variable slot's value comes from; [`tree::Expr::Var`] and
    /// [`tree::Stmt::Assign`] name slots by their index here. Slots bound to inputs,
    /// lengths and case bits are never assigned.
    pub fn slots(&self) -> &[Source] {
        &self.slots
    }

    /// The C type of each slot, in the order of [`Program::slots`].
    pub fn slot_types(&self) -> &[Ty] {
        &self.slot_types
    }

    /// The input index (into the problem's inputs) of each `int[]` array that
    /// [`tree::Expr::Index`] names by its position here.
    pub fn arrays(&self) -> &[usize] {
        &self.arrays
    }

    /// For statement programs, the slot holding each output, in output order; empty for
    /// expression programs.
    pub fn output_slots(&self) -> &[usize] {
        &self.output_slots
    }

    /// The type of each output, in output order.
    pub fn output_types(&self) -> &[ScalarType] {
        &self.output_types
    }

    /// Runs over every case of `problem`: one column per declared output; a loop may take
    /// [`Problem::max_steps`] steps in a case.
    /// A program with free parameters ([`Program::params`]) needs their values: see
    /// [`Program::run_params`].
    pub fn run(&self, problem: &Problem) -> Result<Vec<Column>, RunError> {
        self.run_params(problem, &[], problem.max_steps())
    }

    /// As [`Program::run`], with `max_steps` loop iterations allowed per case.
    pub fn run_with_limit(&self, problem: &Problem, max_steps: u64) -> Result<Vec<Column>, RunError> {
        self.run_params(problem, &[], max_steps)
    }

    /// Free parameters the program reads (`p[0]` .. `p[params - 1]`).
    pub fn params(&self) -> usize {
        self.slots.iter().filter(|s| matches!(s, Source::Param(_))).count()
    }

    /// As [`Program::run_with_limit`], with `params[k]` the value of `p[k]`: one value per
    /// parameter the program reads, exactly.
    pub fn run_params(
        &self,
        problem: &Problem,
        params: &[f32],
        max_steps: u64,
    ) -> Result<Vec<Column>, RunError> {
        self.check(problem, params)?;
        if let Body::Expression(e) = &self.body
            && let Some(tape) = Tape::compile(self, e)
            && let Some(values) = tape.run(problem, params)
        {
            let column = match self.output_types.first() {
                Some(ScalarType::Int) => {
                    Column::Int(values.iter().map(|&v| tape.convert(v, Ty::Int) as i32).collect())
                }
                _ => Column::Float(values.iter().map(|&v| tape.convert(v, Ty::Float) as f32).collect()),
            };
            return Ok(vec![column]);
        }
        self.run_tree(problem, params, max_steps)
    }

    /// [`Program::run_params`] by walking the tree in every case: the reference the block
    /// evaluation of expressions ([`tape`]) is tested against.
    #[doc(hidden)]
    pub fn run_tree(
        &self,
        problem: &Problem,
        params: &[f32],
        max_steps: u64,
    ) -> Result<Vec<Column>, RunError> {
        self.check(problem, params)?;
        let cases = problem.cases();
        let n = cases.len();
        let mut outputs: Vec<Column> = self
            .output_types
            .iter()
            .map(|t| match t {
                ScalarType::Int => Column::Int(Vec::with_capacity(n)),
                ScalarType::Float => Column::Float(Vec::with_capacity(n)),
            })
            .collect();
        let mut machine = Machine {
            slots: Vec::with_capacity(self.slots.len()),
            arrays: Vec::with_capacity(self.arrays.len()),
            steps: 0,
            max_steps,
        };
        for c in 0..n {
            self.load(problem, c, params, &mut machine.slots)?;
            machine.arrays.clear();
            for &i in &self.arrays {
                machine.arrays.push(cases.array(i, c).ok_or_else(|| self.wrong(problem))?);
            }
            machine.steps = 0;
            match &self.body {
                Body::Expression(e) => {
                    let v = machine.eval(e);
                    push(&mut outputs[0], v);
                }
                Body::Statements(s) => {
                    machine
                        .exec(s)
                        .map_err(|OutOfSteps| RunError::StepLimit { case: c, limit: max_steps })?;
                    for (k, &slot) in self.output_slots.iter().enumerate() {
                        push(&mut outputs[k], machine.slots[slot]);
                    }
                }
            }
        }
        Ok(outputs)
    }
}

impl Program {
    fn wrong(&self, problem: &Problem) -> RunError {
        RunError::WrongProblem { compiled_for: self.problem.clone(), run_on: problem.name().to_string() }
    }

    /// Whether the program can run on `problem` with `params`.
    fn check(&self, problem: &Problem, params: &[f32]) -> Result<(), RunError> {
        if params.len() != self.params() {
            return Err(RunError::Params { expected: self.params(), given: params.len() });
        }
        if problem.name() != self.problem || problem.spec().outputs.len() != self.output_types.len() {
            return Err(self.wrong(problem));
        }
        Ok(())
    }

    /// Each slot's value at the start of case `c`, into `slots`.
    fn load(
        &self,
        problem: &Problem,
        c: usize,
        params: &[f32],
        slots: &mut Vec<Value>,
    ) -> Result<(), RunError> {
        let inputs = problem.cases().inputs();
        slots.clear();
        for src in &self.slots {
            let v = match src {
                Source::Zero(ty) => Value::zero(*ty),
                Source::Param(k) => Value::Float(params[*k]),
                Source::CaseBit(bit) => Value::Int(((c >> bit) & 1) as i32),
                Source::Input(i) => match inputs.get(*i) {
                    Some(InputColumn::Scalar(Column::Int(v))) => Value::Int(v[c]),
                    Some(InputColumn::Scalar(Column::Float(v))) => Value::Float(v[c]),
                    _ => return Err(self.wrong(problem)),
                },
                Source::Length(i) => match inputs.get(*i) {
                    Some(InputColumn::IntArray { lens, .. }) => Value::Int(lens[c]),
                    _ => return Err(self.wrong(problem)),
                },
            };
            slots.push(v);
        }
        Ok(())
    }

    /// Whether [`Program::linearize`] applies: the problem has one float output.
    pub fn differentiable(&self) -> bool {
        matches!(self.output_types.as_slice(), [ScalarType::Float])
    }

    /// The program's single float output in every case with `params`, and its derivatives with
    /// respect to each parameter by automatic differentiation (the rules are in the
    /// `program::tangent` module's documentation): `jacobian[c * params.len() + k]` is
    /// d output(c) / d `p[k]`. Expressions the block evaluation covers are differentiated in
    /// reverse mode, other programs in forward mode by the tree walk
    /// ([`Program::linearize_tree`]); the `program::tape` module states how the two compare.
    /// The outputs are [`Program::run_params`]'s, bit for bit.
    pub fn linearize(
        &self,
        problem: &Problem,
        params: &[f32],
        max_steps: u64,
    ) -> Result<Linearization, RunError> {
        let (mut outputs, mut jacobian) = (Vec::new(), Vec::new());
        self.runs(problem, max_steps).linearize(params, |_, ys, rows| {
            outputs.extend_from_slice(ys);
            jacobian.extend_from_slice(rows);
        })?;
        Ok(Linearization { outputs, jacobian })
    }

    /// As [`Program::linearize`], but handing each case's output and Jacobian row to `each`
    /// (case, output, d output / d `p[k]` for every `k`), in case order, instead of keeping them:
    /// the same values, without a Jacobian of every case in memory (on the block evaluation; the
    /// tree walk builds it first).
    pub fn linearize_each(
        &self,
        problem: &Problem,
        params: &[f32],
        max_steps: u64,
        mut each: impl FnMut(usize, f32, &[f64]),
    ) -> Result<(), RunError> {
        let np = params.len();
        self.runs(problem, max_steps).linearize(params, |start, ys, rows| {
            for (r, &y) in ys.iter().enumerate() {
                each(start + r, y, &rows[r * np..(r + 1) * np]);
            }
        })
    }

    /// [`Program::linearize`] by walking the tree in every case: the reference the block
    /// evaluation of expressions ([`tape`]) is tested against.
    #[doc(hidden)]
    pub fn linearize_tree(
        &self,
        problem: &Problem,
        params: &[f32],
        max_steps: u64,
    ) -> Result<Linearization, RunError> {
        self.check(problem, params)?;
        if !self.differentiable() {
            return Err(RunError::NotDifferentiable);
        }
        let cases = problem.cases();
        let (n, np) = (cases.len(), params.len());
        let mut out = Linearization { outputs: Vec::with_capacity(n), jacobian: vec![0.0; n * np] };
        let mut t = Tangent {
            np,
            slots: Vec::with_capacity(self.slots.len()),
            dots: vec![0.0; self.slots.len() * np],
            arrays: Vec::with_capacity(self.arrays.len()),
            steps: 0,
            max_steps,
            stack: Vec::new(),
        };
        for (slot, src) in self.slots.iter().enumerate() {
            if let Source::Param(k) = src {
                t.dots[slot * np + k] = 1.0;
            }
        }
        let written: Vec<usize> = match &self.body {
            Body::Expression(_) => Vec::new(),
            Body::Statements(_) => self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| matches!(s, Source::Zero(_)))
                .map(|(k, _)| k)
                .collect(),
        };
        for c in 0..n {
            t.arrays.clear();
            for &i in &self.arrays {
                t.arrays.push(cases.array(i, c).ok_or_else(|| self.wrong(problem))?);
            }
            self.load(problem, c, params, &mut t.slots)?;
            // Only statements write slots: their locals' and outputs' derivatives start again at
            // zero; every other slot's (inputs: 0, parameters: their unit vector) never changes.
            for &slot in &written {
                t.dots[slot * np..(slot + 1) * np].iter_mut().for_each(|d| *d = 0.0);
            }
            t.steps = 0;
            t.stack.clear();
            let v = match &self.body {
                Body::Expression(e) => t.eval(e),
                Body::Statements(s) => {
                    t.exec(s).map_err(|OutOfSteps| RunError::StepLimit { case: c, limit: max_steps })?;
                    let slot = self.output_slots[0];
                    t.stack.extend_from_slice(&t.dots[slot * np..(slot + 1) * np]);
                    t.slots[slot]
                }
            };
            out.outputs.push(match v.to(Ty::Float) {
                Value::Float(f) => f,
                _ => f32::NAN,
            });
            out.jacobian[c * np..(c + 1) * np].copy_from_slice(t.top());
        }
        Ok(out)
    }
}

/// A program's outputs and their derivatives with respect to its parameters
/// ([`Program::linearize`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Linearization {
    /// The output in each case.
    pub outputs: Vec<f32>,
    /// Case-major: `jacobian[c * params + k]` is d output(c) / d `p[k]`.
    pub jacobian: Vec<f64>,
}

/// Stores `v` converted to the column's type, as the kernel's store does.
fn push(col: &mut Column, v: Value) {
    match col {
        Column::Int(c) => c.push(v.as_int()),
        Column::Float(c) => match v.to(Ty::Float) {
            Value::Float(f) => c.push(f),
            _ => c.push(f32::NAN),
        },
    }
}

/// The result of evaluating one program.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// The fitness; the worst value when `failure` is set.
    pub fitness: Fitness,
    /// One column per declared output, when the program ran.
    pub outputs: Option<Vec<Column>>,
    /// Why the fitness is the worst, if it failed.
    pub failure: Option<Failure>,
}

impl Evaluation {
    fn failed(problem: &Problem, failure: Failure) -> Self {
        Self { fitness: Fitness::worst(problem.direction()), outputs: None, failure: Some(failure) }
    }
}

/// Runs `program` over `problem`'s cases and scores it.
pub fn evaluate(problem: &Problem, program: &Program) -> Evaluation {
    let outputs = match program.run(problem) {
        Ok(o) => o,
        Err(e) => return Evaluation::failed(problem, e.into()),
    };
    match problem.score(&outputs) {
        Ok(fitness) => Evaluation { fitness, outputs: Some(outputs), failure: None },
        Err(e) => Evaluation::failed(problem, e.into()),
    }
}

/// Parses and evaluates one phenotype; a parse error gives the worst fitness.
pub fn evaluate_phenotype(problem: &Problem, phenotype: &Phenotype) -> Evaluation {
    match Program::parse(problem, phenotype) {
        Ok(p) => evaluate(problem, &p),
        Err(e) => Evaluation::failed(problem, e.into()),
    }
}

/// Stack given to evaluation threads: deep phenotypes recurse once per nesting level,
/// and unoptimised builds use several KiB per level.
const EVAL_STACK: usize = 16 << 20;

/// Evaluates many phenotypes on up to `threads` threads (each with a stack large enough
/// for the deepest phenotype the parser accepts); results are in input order and do not
/// depend on the thread count.
pub fn evaluate_all(problem: &Problem, phenotypes: &[Phenotype], threads: NonZeroUsize) -> Vec<Evaluation> {
    if phenotypes.is_empty() {
        return Vec::new();
    }
    let threads = threads.get().min(phenotypes.len());
    let chunk = phenotypes.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = phenotypes
            .chunks(chunk)
            .map(|part| {
                std::thread::Builder::new().stack_size(EVAL_STACK).spawn_scoped(s, move || {
                    part.iter().map(|p| evaluate_phenotype(problem, p)).collect::<Vec<_>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(phenotypes.len());
        for (h, part) in handles.into_iter().zip(phenotypes.chunks(chunk)) {
            match h {
                Ok(h) => match h.join() {
                    Ok(v) => out.extend(v),
                    // Evaluation never panics by design; if it did, surface it unchanged.
                    Err(panic) => std::panic::resume_unwind(panic),
                },
                // No thread could be started: evaluate on this one instead.
                Err(_) => out.extend(part.iter().map(|p| evaluate_phenotype(problem, p))),
            }
        }
        out
    })
}

/// `phenotype` with each free parameter `p[k]` replaced by `params[k]` written as a
/// parenthesized float literal (`(-1.25f)`) that reads back as exactly that value, so the text
/// computes what the program computes with those values, on every route. A `p[k]` beyond
/// `params` is left as it is; a value that is not finite, which fitting never keeps, is written
/// as `0.0f`.
pub fn instantiate(phenotype: &Phenotype, params: &[f32]) -> Phenotype {
    let Ok(toks) = lex::lex(phenotype.as_str()) else { return phenotype.clone() };
    let text = phenotype.as_str();
    let mut out = String::with_capacity(text.len() + 12 * params.len());
    let mut copied = 0;
    for w in toks.windows(4) {
        let (lex::Tok::Ident(p), lex::Tok::Punct("["), lex::Tok::Int(k), lex::Tok::Punct("]")) =
            (&w[0].tok, &w[1].tok, &w[2].tok, &w[3].tok)
        else {
            continue;
        };
        let Some(&v) = usize::try_from(*k).ok().and_then(|k| params.get(k)) else { continue };
        if p != PARAM_ARRAY || w[0].at < copied {
            continue;
        }
        out.push_str(&text[copied..w[0].at]);
        out.push_str(&format!("({}f)", float_literal(v)));
        copied = w[3].at + 1;
    }
    out.push_str(&text[copied..]);
    Phenotype::new(out)
}

/// `v` as the digits of a C float literal (without the `f`) that reads back as `v`: Rust's
/// shortest round-trip form, with `.0` where it has neither a point nor an exponent.
pub fn float_literal(v: f32) -> String {
    if !v.is_finite() {
        return "0.0".to_owned();
    }
    let s = format!("{v:?}");
    if s.contains(['.', 'e', 'E']) { s } else { format!("{s}.0") }
}

/// The nodes of `e`'s syntax tree ([`Program::size`]).
fn expr_size(e: &Expr) -> usize {
    match e {
        Expr::Const(_) | Expr::Var(_) => 1,
        Expr::Index(_, i) => 1 + expr_size(i),
        Expr::Convert(_, a) => expr_size(a),
        Expr::Neg(a) | Expr::BitNot(a) | Expr::Not(a) | Expr::Call1(_, _, a) => 1 + expr_size(a),
        Expr::Chain(first, rest) => {
            expr_size(first) + rest.iter().map(|(_, e)| 1 + expr_size(e)).sum::<usize>()
        }
        Expr::Cond(c, a, b) => 1 + expr_size(c) + expr_size(a) + expr_size(b),
        Expr::Call2(_, _, a, b) => 1 + expr_size(a) + expr_size(b),
    }
}

/// Whether the declared functions of `spec` parse: the index of the first that does not and
/// why, otherwise.
pub fn check_functions(spec: &ProblemSpec) -> Result<(), (usize, ParseError)> {
    parse::inline_functions(spec).map(|_| ())
}

/// Checks `spec` as loading a problem does, and its declared functions' bodies as programs
/// (which loading leaves to this module, the parser's): what is wrong, naming the field,
/// otherwise.
pub fn check_spec(spec: &ProblemSpec) -> Result<(), crate::problem::spec::SpecIssue> {
    spec.validate()?;
    check_functions(spec).map_err(|(i, e)| crate::problem::spec::SpecIssue {
        field: format!("functions[{i}].body"),
        message: e.to_string(),
    })
}

/// Checks what of `problem` only the parser can: its declared functions' bodies, and that its
/// grammar writes programs that parse (of [`GRAMMAR_SAMPLES`] programs drawn from it, at least
/// one that maps must parse: a grammar with a syntax slip, such as `x + | ( <e>`, writes none).
/// A run checks this before it starts ([`crate::Problem::load`] checks the rest).
pub fn check_problem(problem: &Problem) -> Result<(), crate::ProblemError> {
    check_functions(problem.spec()).map_err(|(i, e)| crate::ProblemError::Field {
        file: "problem.toml".to_owned(),
        field: format!("functions[{i}].body"),
        message: e.to_string(),
    })?;
    check_grammar_writes_programs(problem)
}

/// Programs drawn from a problem's grammar to check that it writes programs that parse.
pub const GRAMMAR_SAMPLES: usize = 64;

fn check_grammar_writes_programs(problem: &Problem) -> Result<(), crate::ProblemError> {
    match sample_program(problem) {
        Ok(_) => Ok(()),
        Err((program, e)) => {
            let shown: String = program.chars().take(80).collect();
            let more = if shown.len() < program.len() { "..." } else { "" };
            Err(crate::ProblemError::Programs {
                file: "grammar.bnf".to_owned(),
                program: format!("{shown}{more}"),
                message: e.to_string(),
            })
        }
    }
}

/// The first of [`GRAMMAR_SAMPLES`] programs drawn from `problem`'s grammar (seeded, the same
/// each time) that parses; `Ok(None)` when none maps; the first program and its parse error when
/// some map and none parses.
pub fn sample_program(problem: &Problem) -> Result<Option<(Phenotype, Program)>, (String, ParseError)> {
    use rand::SeedableRng;

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let limits = crate::mapping::MappingLimits::default();
    let mut first: Option<(String, ParseError)> = None;
    for k in 0..GRAMMAR_SAMPLES {
        let genome = crate::init::random_genome(&mut rng, 8 + k, 32 + 4 * k, 256);
        let mapped = crate::mapping::map(problem.grammar(), &genome, &limits);
        let Some(phenotype) = mapped.phenotype() else { continue };
        match Program::parse(problem, phenotype) {
            Ok(program) => return Ok(Some((phenotype.clone(), program))),
            Err(e) => {
                first.get_or_insert_with(|| (phenotype.as_str().to_owned(), e));
            }
        }
    }
    first.map_or(Ok(None), Err)
}

/// The most free parameters a program may read.
pub const MAX_PARAMS: usize = 4096;

/// One more than the largest `k` of the `p[k]` the tokens hold (0 when they hold none).
fn param_count(toks: &[lex::Token]) -> usize {
    toks.windows(4)
        .filter_map(|w| match (&w[0].tok, &w[1].tok, &w[2].tok, &w[3].tok) {
            (lex::Tok::Ident(p), lex::Tok::Punct("["), lex::Tok::Int(k), lex::Tok::Punct("]"))
                if p == PARAM_ARRAY =>
            {
                usize::try_from(*k).ok().map(|k| k + 1)
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Whether `stmts` assign slot `v` anywhere.
fn writes(stmts: &[Stmt], v: usize) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Assign(w, ..) => *w == v,
        Stmt::If(_, a, b) => writes(a, v) || writes(b, v),
        Stmt::Loop(_, a, b) => writes(a, v) || writes(b, v),
        Stmt::Block(b) => writes(b, v),
        Stmt::Discard(_) => false,
    })
}

#[cfg(test)]
mod tests {
    use super::with_step_limit;

    use super::{DEFAULT_MAX_STEPS, step_helper};

    const STEP: &str = "gpfarm_step(gpfarm_steps, gpfarm_failure)";
    const BLOCK: &str = "unsigned long long gpfarm_steps = 0; unsigned& gpfarm_failure = gpfarm_failed[0];";

    #[test]
    fn a_loop_counting_up_to_a_length_is_bounded_and_any_other_is_not() {
        use crate::{Phenotype, Problem};
        let search = Problem::builtin("search").unwrap();
        let bound =
            |text: &str| super::Program::parse(&search, &Phenotype::new(text)).unwrap().step_bound(&search);
        // max_len is 20: 21 tests of the condition, each with no inner steps.
        assert_eq!(bound("for(i=0;i < LENINPUT;i++){tmp = 1;}"), Some(21));
        assert_eq!(bound("OUTPUT = 1;"), Some(0));
        assert_eq!(bound("for(i=0;i < LENINPUT;i++){tmp = 1;}for(i=0;i < LENINPUT;i++){}"), Some(42));
        // The body writes the variable, the bound is not a length, or it is a while loop.
        assert_eq!(bound("for(i=0;i < LENINPUT;i++){i = 0;}"), None);
        assert_eq!(bound("for(i=0;i < tmp;i++){}"), None);
        assert_eq!(bound("while(i < LENINPUT){i = i + 1;}"), None);
    }

    #[test]
    fn the_helper_keeps_the_problems_limit_and_flags_only_when_asked() {
        let helper = step_helper(DEFAULT_MAX_STEPS, 3);
        assert!(helper.contains(&format!("gpfarm_max_steps = {DEFAULT_MAX_STEPS}ull;")), "{helper}");
        assert!(helper.contains("__device__ unsigned gpfarm_failed[3];"), "{helper}");
        let helper = step_helper(17, 0);
        assert!(
            helper.contains("gpfarm_max_steps = 17ull;") && !helper.contains("gpfarm_failed"),
            "{helper}"
        );
    }

    #[test]
    fn every_loop_counts_a_step_before_its_test_and_text_without_loops_is_left_alone() {
        assert_eq!(with_step_limit("OUTPUT = 1;", 0), None);
        assert_eq!(
            with_step_limit("while(i < 3){i = i + 1;}", 0).unwrap(),
            format!("{{ {BLOCK} while({STEP} && (i < 3)){{i = i + 1;}} }}")
        );
        assert_eq!(
            with_step_limit("for(i=0;i < LENINPUT;i++){tmp = 1;}", 0).unwrap(),
            format!("{{ {BLOCK} for(i=0; {STEP} && (i < LENINPUT);i++){{tmp = 1;}} }}")
        );
        assert_eq!(with_step_limit("for(;;){}", 0).unwrap(), format!("{{ {BLOCK} for(;{STEP};){{}} }}"));
        assert!(with_step_limit("for(;;){}", 7).unwrap().contains("gpfarm_failed[7];"));
        // Nested and sequential loops share the case's one counter; parentheses inside a
        // condition are matched.
        let two = with_step_limit("while((i) != (tmp)){ while (f(i)) {} } for(i=0;(i);i++){}", 0).unwrap();
        assert_eq!(two.matches(STEP).count(), 3, "{two}");
        assert_eq!(two.matches("gpfarm_steps = 0").count(), 1, "{two}");
        assert!(two.contains(&format!("while({STEP} && ((i) != (tmp)))")), "{two}");
    }
}
