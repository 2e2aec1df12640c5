//! The interpreter's instruction set and the compiler from the typed tree to it.
//!
//! A program is a list of 32-bit words. The low 8 bits of a word are its [`Op`], the high 24
//! its argument (a variable slot, an array, an output, or a jump target in words). `PushI` and
//! `PushF` are followed by one word of value bits, `PushD` by two (low, then high). The
//! machine is a stack of 8-byte cells whose top is held apart (in a register on the GPU);
//! every op says how it moves the stack ([`Op::effect`]), so the compiler knows the deepest
//! point of each program ([`Bytecode::depth`]).
//!
//! Each op is the C operation the NVRTC template and the PTX route compute for the same tree
//! node, in the same type: the interpreter's CUDA C (`super::source`) is generated from the
//! table below, one `case` per op.

use gpfarm_gp::problem::{InputType, Kind, ScalarType};
use gpfarm_gp::program::tree::{ArithOp, Bin, Body, CmpOp, Expr, Fn1, Fn2, IntOp, Source, Stmt, Ty, Value};
use gpfarm_gp::{Problem, Program};

/// The deepest stack (cells, the top included) a program may need; the parser's nesting
/// bound keeps every phenotype it accepts far below it.
pub const MAX_DEPTH: usize = 1024;

/// The largest argument a word can carry.
const MAX_ARG: usize = (1 << 24) - 1;

macro_rules! ops {
    ($($(#[$doc:meta])* $name:ident = ($effect:expr, $cuda:expr),)*) => {
        /// One instruction. In the CUDA C of each op, `t` is the top of the stack, `st[sp - 1]`
        /// the cell below it, `arg` the word's argument and `pc` the next word.
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Op {
            $($(#[$doc])* $name,)*
        }

        impl Op {
            /// Every op, in encoding order.
            pub const ALL: &'static [Op] = &[$(Op::$name,)*];

            /// How many cells the op adds to the stack (negative: removes).
            pub fn effect(self) -> i32 {
                match self { $(Op::$name => $effect,)* }
            }

            /// The op's body in the interpreter's CUDA C.
            pub fn cuda(self) -> &'static str {
                match self { $(Op::$name => $cuda,)* }
            }
        }
    };
}

ops! {
    /// Stop: the outputs are written.
    End = (0, "goto finished;"),
    /// Push the int in the next word.
    PushI = (1, "st[sp++] = t; t.i = (int)prog[pc++];"),
    /// Push the float whose bits are the next word.
    PushF = (1, "st[sp++] = t; t.f = __int_as_float((int)prog[pc++]);"),
    /// Push the double whose bits are the next two words (low, high).
    PushD = (1, "st[sp++] = t; t.d = __hiloint2double((int)prog[pc + 1], (int)prog[pc]); pc += 2;"),
    /// Push variable slot `arg`.
    Load = (1, "st[sp++] = t; t = vars[arg];"),
    /// Pop into variable slot `arg`.
    Store = (-1, "vars[arg] = t; t = st[--sp];"),
    /// Replace the int index on top by element `index` of int array `arg`, wrapped.
    Read = (0, "t.i = gpfarm_read(arg, t.i, c);"),
    /// int to float.
    CvtIF = (0, "t.f = (float)t.i;"),
    /// int to double.
    CvtID = (0, "t.d = (double)t.i;"),
    /// float to int (toward zero, saturating, NaN to 0).
    CvtFI = (0, "t.i = (int)t.f;"),
    /// double to int.
    CvtDI = (0, "t.i = (int)t.d;"),
    /// float to double.
    CvtFD = (0, "t.d = (double)t.f;"),
    /// double to float.
    CvtDF = (0, "t.f = (float)t.d;"),
    /// `-` on an int (wrapping).
    NegI = (0, "t.i = (int)(0u - (unsigned)t.i);"),
    /// `-` on a float.
    NegF = (0, "t.f = -t.f;"),
    /// `-` on a double.
    NegD = (0, "t.d = -t.d;"),
    /// `~` on an int.
    BitNot = (0, "t.i = ~t.i;"),
    /// `!` of an int.
    NotI = (0, "t.i = (t.i == 0);"),
    /// `!` of a float.
    NotF = (0, "t.i = (t.f == 0.0f);"),
    /// `!` of a double.
    NotD = (0, "t.i = (t.d == 0.0);"),
    /// An int's truth, as 0 or 1.
    TruthI = (0, "t.i = (t.i != 0);"),
    /// A float's truth (NaN is true).
    TruthF = (0, "t.i = (t.f != 0.0f);"),
    /// A double's truth.
    TruthD = (0, "t.i = (t.d != 0.0);"),
    /// int `+` (wrapping).
    AddI = (-1, "{ V a = st[--sp]; t.i = (int)((unsigned)a.i + (unsigned)t.i); }"),
    /// int `-`.
    SubI = (-1, "{ V a = st[--sp]; t.i = (int)((unsigned)a.i - (unsigned)t.i); }"),
    /// int `*`.
    MulI = (-1, "{ V a = st[--sp]; t.i = (int)((unsigned)a.i * (unsigned)t.i); }"),
    /// int `/` (`div.s32`).
    DivI = (-1, "{ V a = st[--sp]; t.i = a.i / t.i; }"),
    /// float `+`.
    AddF = (-1, "{ V a = st[--sp]; t.f = a.f + t.f; }"),
    /// float `-`.
    SubF = (-1, "{ V a = st[--sp]; t.f = a.f - t.f; }"),
    /// float `*`.
    MulF = (-1, "{ V a = st[--sp]; t.f = a.f * t.f; }"),
    /// float `/`.
    DivF = (-1, "{ V a = st[--sp]; t.f = a.f / t.f; }"),
    /// double `+`.
    AddD = (-1, "{ V a = st[--sp]; t.d = a.d + t.d; }"),
    /// double `-`.
    SubD = (-1, "{ V a = st[--sp]; t.d = a.d - t.d; }"),
    /// double `*`.
    MulD = (-1, "{ V a = st[--sp]; t.d = a.d * t.d; }"),
    /// double `/`.
    DivD = (-1, "{ V a = st[--sp]; t.d = a.d / t.d; }"),
    /// int `%` (`rem.s32`).
    Rem = (-1, "{ V a = st[--sp]; t.i = a.i % t.i; }"),
    /// int `&`.
    And = (-1, "{ V a = st[--sp]; t.i = a.i & t.i; }"),
    /// int `|`.
    Or = (-1, "{ V a = st[--sp]; t.i = a.i | t.i; }"),
    /// int `^`.
    Xor = (-1, "{ V a = st[--sp]; t.i = a.i ^ t.i; }"),
    /// int `<<` (`shl.b32`).
    Shl = (-1, "{ V a = st[--sp]; t.i = a.i << t.i; }"),
    /// int `>>` (`shr.s32`).
    Shr = (-1, "{ V a = st[--sp]; t.i = a.i >> t.i; }"),
    /// int `<`.
    LtI = (-1, "{ V a = st[--sp]; t.i = (a.i < t.i); }"),
    /// int `>`.
    GtI = (-1, "{ V a = st[--sp]; t.i = (a.i > t.i); }"),
    /// int `<=`.
    LeI = (-1, "{ V a = st[--sp]; t.i = (a.i <= t.i); }"),
    /// int `>=`.
    GeI = (-1, "{ V a = st[--sp]; t.i = (a.i >= t.i); }"),
    /// int `==`.
    EqI = (-1, "{ V a = st[--sp]; t.i = (a.i == t.i); }"),
    /// int `!=`.
    NeI = (-1, "{ V a = st[--sp]; t.i = (a.i != t.i); }"),
    /// float `<`.
    LtF = (-1, "{ V a = st[--sp]; t.i = (a.f < t.f); }"),
    /// float `>`.
    GtF = (-1, "{ V a = st[--sp]; t.i = (a.f > t.f); }"),
    /// float `<=`.
    LeF = (-1, "{ V a = st[--sp]; t.i = (a.f <= t.f); }"),
    /// float `>=`.
    GeF = (-1, "{ V a = st[--sp]; t.i = (a.f >= t.f); }"),
    /// float `==`.
    EqF = (-1, "{ V a = st[--sp]; t.i = (a.f == t.f); }"),
    /// float `!=` (true when either is NaN).
    NeF = (-1, "{ V a = st[--sp]; t.i = (a.f != t.f); }"),
    /// double `<`.
    LtD = (-1, "{ V a = st[--sp]; t.i = (a.d < t.d); }"),
    /// double `>`.
    GtD = (-1, "{ V a = st[--sp]; t.i = (a.d > t.d); }"),
    /// double `<=`.
    LeD = (-1, "{ V a = st[--sp]; t.i = (a.d <= t.d); }"),
    /// double `>=`.
    GeD = (-1, "{ V a = st[--sp]; t.i = (a.d >= t.d); }"),
    /// double `==`.
    EqD = (-1, "{ V a = st[--sp]; t.i = (a.d == t.d); }"),
    /// double `!=`.
    NeD = (-1, "{ V a = st[--sp]; t.i = (a.d != t.d); }"),
    /// `&&` of two truths (0 or 1).
    LAnd = (-1, "{ V a = st[--sp]; t.i = a.i & t.i; }"),
    /// `||` of two truths.
    LOr = (-1, "{ V a = st[--sp]; t.i = a.i | t.i; }"),
    /// Pop an int; jump to `arg` when it is 0.
    Jz = (-1, "{ int z = t.i; t = st[--sp]; if (z == 0) pc = arg; }"),
    /// Jump to `arg`.
    Jmp = (0, "pc = arg;"),
    /// Count one loop iteration of this case; past the step limit, or once another case of the
    /// block failed, the program fails (the kernel follows this with a check for a repeated
    /// state).
    Step = (0, "if (++steps > max_steps || *(volatile int*)&gpfarm_abort) { failed = 1; goto finished; }"),
    /// `sinf`.
    SinF = (0, "t.f = sinf(t.f);"),
    /// `cosf`.
    CosF = (0, "t.f = cosf(t.f);"),
    /// `expf`.
    ExpF = (0, "t.f = expf(t.f);"),
    /// `logf`.
    LogF = (0, "t.f = logf(t.f);"),
    /// `sqrtf`.
    SqrtF = (0, "t.f = sqrtf(t.f);"),
    /// `fabsf`.
    FabsF = (0, "t.f = fabsf(t.f);"),
    /// `tanhf`.
    TanhF = (0, "t.f = tanhf(t.f);"),
    /// `sin`.
    SinD = (0, "t.d = sin(t.d);"),
    /// `cos`.
    CosD = (0, "t.d = cos(t.d);"),
    /// `exp`.
    ExpD = (0, "t.d = exp(t.d);"),
    /// `log`.
    LogD = (0, "t.d = log(t.d);"),
    /// `sqrt`.
    SqrtD = (0, "t.d = sqrt(t.d);"),
    /// `fabs`.
    FabsD = (0, "t.d = fabs(t.d);"),
    /// `tanh`.
    TanhD = (0, "t.d = tanh(t.d);"),
    /// `powf`.
    PowF = (-1, "{ V a = st[--sp]; t.f = powf(a.f, t.f); }"),
    /// `fminf`.
    FminF = (-1, "{ V a = st[--sp]; t.f = fminf(a.f, t.f); }"),
    /// `fmaxf`.
    FmaxF = (-1, "{ V a = st[--sp]; t.f = fmaxf(a.f, t.f); }"),
    /// `pdivf`: protected division, the quotient where the divisor's magnitude is above 0.001f,
    /// else 1.
    PdivF = (-1, "{ V a = st[--sp]; t.f = fabsf(t.f) > 0.001f ? a.f / t.f : 1.0f; }"),
    /// `pow`.
    PowD = (-1, "{ V a = st[--sp]; t.d = pow(a.d, t.d); }"),
    /// `fmin`.
    FminD = (-1, "{ V a = st[--sp]; t.d = fmin(a.d, t.d); }"),
    /// `fmax`.
    FmaxD = (-1, "{ V a = st[--sp]; t.d = fmax(a.d, t.d); }"),
    /// `pdiv`: protected division in double (threshold 0.001).
    PdivD = (-1, "{ V a = st[--sp]; t.d = fabs(t.d) > 0.001 ? a.d / t.d : 1.0; }"),
    /// Pop into output `arg` (already in the output's type).
    Out = (-1, "out[arg] = t; t = st[--sp];"),
}

impl Op {
    /// The op a word holds.
    pub fn decode(word: u32) -> Option<Op> {
        Op::ALL.get((word & 0xff) as usize).copied()
    }

    /// Whether the op moves `pc` other than to the next op (a jump) or counts loop steps.
    pub fn is_control(self) -> bool {
        matches!(self, Op::Jz | Op::Jmp | Op::Step)
    }

    /// Words the op takes, itself and its constant's value words.
    pub fn width(self) -> usize {
        match self {
            Op::PushI | Op::PushF => 2,
            Op::PushD => 3,
            _ => 1,
        }
    }
}

/// The ops of `words`, skipping constants' value words; `None` for a word that is no op.
pub fn walk(words: &[u32]) -> impl Iterator<Item = Option<Op>> + '_ {
    let mut pc = 0;
    std::iter::from_fn(move || {
        let w = *words.get(pc)?;
        let op = Op::decode(w);
        pc += op.map_or(1, Op::width);
        Some(op)
    })
}

/// Why a program cannot become bytecode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BytecodeError {
    /// It was compiled for another problem, or its variables are not laid out as the
    /// problem's interpreter expects.
    #[error("the program was compiled for `{compiled_for}`, not for `{problem}`")]
    WrongProblem { compiled_for: String, problem: String },
    /// It reads free parameters: the interpreter runs a program with their values written in
    /// ([`gpfarm_gp::program::instantiate`]).
    #[error("the program reads {params} free parameter(s): write their values in first")]
    Params { params: usize },
    /// Deeper than [`MAX_DEPTH`].
    #[error("the program needs a stack of {depth} cells; the interpreter has {MAX_DEPTH}")]
    TooDeep { depth: usize },
    /// Longer than a jump can reach.
    #[error("the program is {words} words long; jumps reach {MAX_ARG}")]
    TooLong { words: usize },
}

/// One program's bytecode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bytecode {
    /// The words.
    pub words: Vec<u32>,
    /// The most cells on the stack at once, the top included.
    pub depth: usize,
}

impl Bytecode {
    /// A structure's bytecode ([`assemble_structure`]) with the values of its free parameters
    /// written into its marked `PushF`s, as the evaluating interpreter reads them: new values
    /// cost a copy of the words, nothing is assembled again. A parameter beyond `values` reads 0.
    pub fn with_values(&self, values: &[f32]) -> Bytecode {
        let mut words = self.words.clone();
        let mut pc = 0;
        while pc < words.len() {
            let op = Op::decode(words[pc]);
            let k = (words[pc] >> 8) as usize;
            if op == Some(Op::PushF) && k > 0 && pc + 1 < words.len() {
                words[pc + 1] = values.get(k - 1).copied().unwrap_or(0.0).to_bits();
            }
            pc += op.map_or(1, Op::width);
        }
        Bytecode { words, depth: self.depth }
    }

    /// Whether the program runs straight through, every case the same ops: no `if`, no loop.
    /// The GPU runs such programs on several cases per thread at once.
    pub fn is_straight(&self) -> bool {
        walk(&self.words).all(|op| op.is_some_and(|op| !op.is_control()))
    }
}

/// The slots of [`slot_layout`] a program may write (locals and statement outputs), by index:
/// with the place of a loop's step, a case's whole state there.
pub fn writable_slots(problem: &Problem) -> Vec<usize> {
    slot_layout(problem)
        .iter()
        .enumerate()
        .filter(|(_, (src, _))| matches!(src, Source::Zero(_)))
        .map(|(k, _)| k)
        .collect()
}

/// The variable slots every program of `problem` has, in the order the CPU evaluator binds
/// them ([`Program::slots`]): inputs (an `int[]` input as its length), case bits, locals, and a
/// statement problem's outputs.
pub fn slot_layout(problem: &Problem) -> Vec<(Source, Ty)> {
    let spec = problem.spec();
    let scalar = |t: ScalarType| match t {
        ScalarType::Int => Ty::Int,
        ScalarType::Float => Ty::Float,
    };
    let mut slots = Vec::new();
    for (i, input) in spec.inputs.iter().enumerate() {
        match input.ty {
            InputType::Int => slots.push((Source::Input(i), Ty::Int)),
            InputType::Float => slots.push((Source::Input(i), Ty::Float)),
            InputType::IntArray => {
                if input.length_name.is_some() {
                    slots.push((Source::Length(i), Ty::Int));
                }
            }
        }
    }
    for b in &spec.case_bits {
        slots.push((Source::CaseBit(b.bit), Ty::Int));
    }
    for l in &spec.locals {
        slots.push((Source::Zero(scalar(l.ty)), scalar(l.ty)));
    }
    if spec.kind == Kind::Statements {
        for o in &spec.outputs {
            slots.push((Source::Zero(scalar(o.ty)), scalar(o.ty)));
        }
    }
    slots
}

/// The input index of each `int[]` array, in the order [`Op::Read`] names them.
pub fn array_layout(problem: &Problem) -> Vec<usize> {
    problem
        .spec()
        .inputs
        .iter()
        .enumerate()
        .filter(|(_, i)| i.ty == InputType::IntArray)
        .map(|(k, _)| k)
        .collect()
}

/// Whether constant subexpressions are computed when compiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folding {
    /// As NVVM folds them when NVRTC compiles the harness (`crate::fold`, the PTX route's
    /// rule): a math function of constants becomes the host's value, which can differ in the
    /// last bit from CUDA's function at run time. The GPU interpreter's bytecode, so that its
    /// fitness is the compiled routes' bit for bit.
    Nvvm,
    /// Nothing folded: every op runs, as the CPU evaluator runs every node.
    None,
}

/// Assembles `program` (parsed for `problem`) into bytecode, folding constants as NVVM does.
pub fn assemble(problem: &Problem, program: &Program) -> Result<Bytecode, BytecodeError> {
    assemble_with(problem, program, Folding::Nvvm)
}

/// As [`assemble`], with the folding asked for.
pub fn assemble_with(
    problem: &Problem,
    program: &Program,
    folding: Folding,
) -> Result<Bytecode, BytecodeError> {
    if program.params() > 0 {
        return Err(BytecodeError::Params { params: program.params() });
    }
    assemble_checked(problem, program, folding)
}

/// A program with free parameters as the interpreter's fitting kernel runs it
/// ([`super::fit_source`]): each `p[k]` is a `PushF` whose argument is `k + 1` (0 for every other
/// constant, so the evaluating kernel, which ignores the argument, would read the value word,
/// here 0); the fitting kernel reads the value from the program's parameters instead and gives it
/// the derivative 1 along `p[k]`. Folds as [`assemble`] does (a parameter is never constant).
pub fn assemble_structure(problem: &Problem, program: &Program) -> Result<Bytecode, BytecodeError> {
    assemble_checked(problem, program, Folding::Nvvm)
}

fn assemble_checked(
    problem: &Problem,
    program: &Program,
    folding: Folding,
) -> Result<Bytecode, BytecodeError> {
    let layout = slot_layout(problem);
    let own = program.slots().len() - program.params();
    let same_layout = program.problem() == problem.name()
        && own == layout.len()
        && program.slots()[own..].iter().all(|s| matches!(s, Source::Param(_)))
        && program.slots().iter().zip(&layout).all(|(s, (l, _))| s == l)
        && program.slot_types().iter().zip(&layout).all(|(t, (_, l))| t == l)
        && program.arrays() == array_layout(problem).as_slice();
    if !same_layout {
        return Err(BytecodeError::WrongProblem {
            compiled_for: program.problem().to_owned(),
            problem: problem.name().to_owned(),
        });
    }
    let mut e = Emitter {
        words: Vec::new(),
        depth: 0,
        max: 0,
        slot_types: program.slot_types(),
        params: program.slots(),
        fold: folding == Folding::Nvvm,
    };
    let outputs: Vec<Ty> = program
        .output_types()
        .iter()
        .map(|t| match t {
            ScalarType::Int => Ty::Int,
            ScalarType::Float => Ty::Float,
        })
        .collect();
    match program.body() {
        Body::Expression(x) => {
            for (k, &ty) in outputs.iter().enumerate() {
                let t = e.expr(x);
                e.convert(t, ty);
                e.op_arg(Op::Out, k);
            }
        }
        Body::Statements(s) => {
            e.stmts(s);
            for (k, (&slot, &ty)) in program.output_slots().iter().zip(&outputs).enumerate() {
                e.op_arg(Op::Load, slot);
                e.convert(program.slot_types()[slot], ty);
                e.op_arg(Op::Out, k);
            }
        }
    }
    e.op(Op::End);
    if e.max > MAX_DEPTH {
        return Err(BytecodeError::TooDeep { depth: e.max });
    }
    if e.words.len() > MAX_ARG {
        return Err(BytecodeError::TooLong { words: e.words.len() });
    }
    Ok(Bytecode { words: e.words, depth: e.max })
}

struct Emitter<'a> {
    words: Vec<u32>,
    depth: i32,
    max: usize,
    slot_types: &'a [Ty],
    /// Each slot's source: a parameter's slot is read as a marked `PushF`.
    params: &'a [Source],
    fold: bool,
}

/// The value of `x` where the PTX route (and NVVM) computes it when compiling: a literal, its
/// conversion or negation, arithmetic of constants, and a math function of constants
/// ([`crate::fold`]); `None` for anything computed at run time.
fn constant(x: &Expr) -> Option<Value> {
    match x {
        Expr::Const(v) => Some(*v),
        Expr::Convert(ty, a) => constant(a).map(|v| v.to(*ty)),
        Expr::Neg(a) => Some(match constant(a)? {
            Value::Int(i) => Value::Int(i.wrapping_neg()),
            Value::Float(f) => Value::Float(-f),
            Value::Double(d) => Value::Double(-d),
        }),
        Expr::Chain(first, rest) => {
            let mut acc = constant(first)?;
            for (op, e) in rest {
                let Bin::Arith(o) = op else { return None };
                let b = constant(e)?;
                let u = Ty::usual(acc.ty(), b.ty());
                acc = crate::fold::arith(*o, acc.to(u), b.to(u))?;
            }
            Some(acc)
        }
        Expr::Call1(f, ty, a) => {
            let ty = if *ty == Ty::Int { Ty::Double } else { *ty };
            let v = constant(a)?.to(ty);
            crate::fold::call(f.c_name(), ty, &[v])
        }
        Expr::Call2(f, ty, a, b) => {
            let ty = if *ty == Ty::Int { Ty::Double } else { *ty };
            let (a, b) = (constant(a)?.to(ty), constant(b)?.to(ty));
            crate::fold::call(f.c_name(), ty, &[a, b])
        }
        _ => None,
    }
}

impl Emitter<'_> {
    fn op(&mut self, op: Op) {
        self.op_arg(op, 0);
    }

    fn op_arg(&mut self, op: Op, arg: usize) {
        self.words.push(op as u32 | ((arg.min(MAX_ARG) as u32) << 8));
        self.depth += op.effect();
        self.max = self.max.max(self.depth.max(0) as usize);
    }

    /// A jump whose target is patched later; returns the word to patch.
    fn jump(&mut self, op: Op) -> usize {
        self.op(op);
        self.words.len() - 1
    }

    fn patch(&mut self, at: usize) {
        let target = self.words.len().min(MAX_ARG) as u32;
        self.words[at] = (self.words[at] & 0xff) | (target << 8);
    }

    fn constant(&mut self, v: Value) -> Ty {
        match v {
            Value::Int(i) => {
                self.op(Op::PushI);
                self.words.push(i as u32);
            }
            Value::Float(f) => {
                self.op(Op::PushF);
                self.words.push(f.to_bits());
            }
            Value::Double(d) => {
                self.op(Op::PushD);
                let bits = d.to_bits();
                self.words.push(bits as u32);
                self.words.push((bits >> 32) as u32);
            }
        }
        v.ty()
    }

    fn convert(&mut self, from: Ty, to: Ty) {
        let op = match (from, to) {
            (Ty::Int, Ty::Float) => Op::CvtIF,
            (Ty::Int, Ty::Double) => Op::CvtID,
            (Ty::Float, Ty::Int) => Op::CvtFI,
            (Ty::Double, Ty::Int) => Op::CvtDI,
            (Ty::Float, Ty::Double) => Op::CvtFD,
            (Ty::Double, Ty::Float) => Op::CvtDF,
            _ => return,
        };
        self.op(op);
    }

    fn truth(&mut self, ty: Ty) {
        self.op(match ty {
            Ty::Int => Op::TruthI,
            Ty::Float => Op::TruthF,
            Ty::Double => Op::TruthD,
        });
    }

    /// Pushes the value of `x`; returns its type.
    fn expr(&mut self, x: &Expr) -> Ty {
        if self.fold
            && !matches!(x, Expr::Const(_))
            && let Some(v) = constant(x)
        {
            return self.constant(v);
        }
        match x {
            Expr::Const(v) => self.constant(*v),
            Expr::Var(slot) => {
                if let Some(Source::Param(k)) = self.params.get(*slot) {
                    self.op_arg(Op::PushF, k + 1);
                    self.words.push(0);
                    return Ty::Float;
                }
                self.op_arg(Op::Load, *slot);
                self.slot_types[*slot]
            }
            Expr::Index(array, k) => {
                let t = self.expr(k);
                self.convert(t, Ty::Int);
                self.op_arg(Op::Read, *array);
                Ty::Int
            }
            Expr::Convert(ty, a) => {
                let t = self.expr(a);
                self.convert(t, *ty);
                *ty
            }
            Expr::Neg(a) => {
                let t = self.expr(a);
                self.op(match t {
                    Ty::Int => Op::NegI,
                    Ty::Float => Op::NegF,
                    Ty::Double => Op::NegD,
                });
                t
            }
            Expr::BitNot(a) => {
                let t = self.expr(a);
                self.convert(t, Ty::Int);
                self.op(Op::BitNot);
                Ty::Int
            }
            Expr::Not(a) => {
                let t = self.expr(a);
                self.op(match t {
                    Ty::Int => Op::NotI,
                    Ty::Float => Op::NotF,
                    Ty::Double => Op::NotD,
                });
                Ty::Int
            }
            Expr::Chain(first, rest) => {
                let mut acc = self.expr(first);
                for (op, e) in rest {
                    acc = self.binary(*op, acc, e);
                }
                acc
            }
            Expr::Cond(c, a, b) => {
                let t = self.expr(c);
                self.truth(t);
                let to_else = self.jump(Op::Jz);
                let before = self.depth;
                let ty = self.expr(a);
                let to_end = self.jump(Op::Jmp);
                self.patch(to_else);
                self.depth = before;
                let tb = self.expr(b);
                self.convert(tb, ty);
                self.patch(to_end);
                ty
            }
            Expr::Call1(f, ty, a) => {
                let t = self.expr(a);
                let ty = if *ty == Ty::Float { Ty::Float } else { Ty::Double };
                self.convert(t, ty);
                let float = ty == Ty::Float;
                self.op(match f {
                    Fn1::Sin if float => Op::SinF,
                    Fn1::Cos if float => Op::CosF,
                    Fn1::Exp if float => Op::ExpF,
                    Fn1::Log if float => Op::LogF,
                    Fn1::Sqrt if float => Op::SqrtF,
                    Fn1::Fabs if float => Op::FabsF,
                    Fn1::Tanh if float => Op::TanhF,
                    Fn1::Sin => Op::SinD,
                    Fn1::Cos => Op::CosD,
                    Fn1::Exp => Op::ExpD,
                    Fn1::Log => Op::LogD,
                    Fn1::Sqrt => Op::SqrtD,
                    Fn1::Fabs => Op::FabsD,
                    Fn1::Tanh => Op::TanhD,
                });
                ty
            }
            Expr::Call2(f, ty, a, b) => {
                let ty = if *ty == Ty::Float { Ty::Float } else { Ty::Double };
                let t = self.expr(a);
                self.convert(t, ty);
                let t = self.expr(b);
                self.convert(t, ty);
                let float = ty == Ty::Float;
                self.op(match f {
                    Fn2::Pow if float => Op::PowF,
                    Fn2::Fmin if float => Op::FminF,
                    Fn2::Fmax if float => Op::FmaxF,
                    Fn2::Pdiv if float => Op::PdivF,
                    Fn2::Pow => Op::PowD,
                    Fn2::Fmin => Op::FminD,
                    Fn2::Fmax => Op::FmaxD,
                    Fn2::Pdiv => Op::PdivD,
                });
                ty
            }
        }
    }

    /// `acc op e`, with `acc` (of type `acc`) on top; returns the result's type.
    fn binary(&mut self, op: Bin, acc: Ty, e: &Expr) -> Ty {
        let et = e.ty(self.slot_types);
        match op {
            Bin::Arith(o) => {
                let u = Ty::usual(acc, et);
                self.convert(acc, u);
                let t = self.expr(e);
                self.convert(t, u);
                self.op(match (o, u) {
                    (ArithOp::Add, Ty::Int) => Op::AddI,
                    (ArithOp::Sub, Ty::Int) => Op::SubI,
                    (ArithOp::Mul, Ty::Int) => Op::MulI,
                    (ArithOp::Div, Ty::Int) => Op::DivI,
                    (ArithOp::Add, Ty::Float) => Op::AddF,
                    (ArithOp::Sub, Ty::Float) => Op::SubF,
                    (ArithOp::Mul, Ty::Float) => Op::MulF,
                    (ArithOp::Div, Ty::Float) => Op::DivF,
                    (ArithOp::Add, Ty::Double) => Op::AddD,
                    (ArithOp::Sub, Ty::Double) => Op::SubD,
                    (ArithOp::Mul, Ty::Double) => Op::MulD,
                    (ArithOp::Div, Ty::Double) => Op::DivD,
                });
                u
            }
            Bin::Int(o) => {
                self.convert(acc, Ty::Int);
                let t = self.expr(e);
                self.convert(t, Ty::Int);
                self.op(match o {
                    IntOp::Rem => Op::Rem,
                    IntOp::And => Op::And,
                    IntOp::Or => Op::Or,
                    IntOp::Xor => Op::Xor,
                    IntOp::Shl => Op::Shl,
                    IntOp::Shr => Op::Shr,
                });
                Ty::Int
            }
            Bin::Cmp(o) => {
                let u = Ty::usual(acc, et);
                self.convert(acc, u);
                let t = self.expr(e);
                self.convert(t, u);
                let base = match o {
                    CmpOp::Lt => 0,
                    CmpOp::Gt => 1,
                    CmpOp::Le => 2,
                    CmpOp::Ge => 3,
                    CmpOp::Eq => 4,
                    CmpOp::Ne => 5,
                };
                let first = match u {
                    Ty::Int => Op::LtI,
                    Ty::Float => Op::LtF,
                    Ty::Double => Op::LtD,
                };
                self.op(Op::ALL[first as usize + base]);
                Ty::Int
            }
            Bin::And | Bin::Or => {
                self.truth(acc);
                let t = self.expr(e);
                self.truth(t);
                self.op(if op == Bin::And { Op::LAnd } else { Op::LOr });
                Ty::Int
            }
        }
    }

    fn stmts(&mut self, s: &[Stmt]) {
        for st in s {
            self.stmt(st);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Assign(slot, ty, x) => {
                let t = self.expr(x);
                self.convert(t, *ty);
                self.op_arg(Op::Store, *slot);
            }
            Stmt::If(c, then, els) => {
                let t = self.expr(c);
                self.truth(t);
                let to_else = self.jump(Op::Jz);
                self.stmts(then);
                if els.is_empty() {
                    self.patch(to_else);
                } else {
                    let to_end = self.jump(Op::Jmp);
                    self.patch(to_else);
                    self.stmts(els);
                    self.patch(to_end);
                }
            }
            Stmt::Loop(cond, body, step) => {
                let top = self.words.len();
                self.op(Op::Step);
                let exit = cond.as_ref().map(|c| {
                    let t = self.expr(c);
                    self.truth(t);
                    self.jump(Op::Jz)
                });
                self.stmts(body);
                self.stmts(step);
                self.op_arg(Op::Jmp, top);
                if let Some(exit) = exit {
                    self.patch(exit);
                }
            }
            Stmt::Block(b) => self.stmts(b),
            // No expression has side effects: the CPU evaluator does not evaluate it either.
            Stmt::Discard(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use gpfarm_gp::{Evolution, EvolutionConfig, Program};

    use super::*;

    /// A structure's bytecode with values written in runs as the program runs with those values,
    /// bit for bit, for any values, without assembling again.
    #[test]
    fn values_written_into_a_structure_s_bytecode_run_as_the_program_with_them() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/friedman1");
        let problem = Problem::load(&dir).unwrap().strided(50);
        let config = EvolutionConfig {
            population: 60,
            seed: 4,
            generations: 50,
            max_size: 0,
            ..EvolutionConfig::default()
        };
        let mut checked = 0;
        for p in Evolution::new(&problem, config).unwrap().dedup().unique {
            let program = Program::parse(&problem, &p).unwrap();
            let code = assemble_structure(&problem, &program).unwrap();
            for round in 0..3 {
                let values: Vec<f32> =
                    (0..program.params()).map(|k| ((k * 7 + round * 3) as f32 * 0.61).sin() * 2.5).collect();
                let want = program.run_params(&problem, &values, problem.max_steps()).unwrap();
                let got =
                    crate::interpreter::exec::run(&problem, &code.with_values(&values), problem.max_steps())
                        .unwrap();
                assert_eq!(format!("{want:?}"), format!("{got:?}"), "{p} with {values:?}");
                checked += usize::from(program.params() > 0);
            }
        }
        assert!(checked > 30, "{checked}");
    }
}
