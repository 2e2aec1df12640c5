//! Parser and type checker for the C subset: turns tokens into a typed tree whose
//! variables are resolved to slots. Must never accept what a C++ compiler would reject
//! in this subset (writes to inputs, `%` on floats, unknown names), since the GPU path
//! compiles the same text; nesting is bounded so that no phenotype can exhaust the stack.

use std::collections::HashMap;

use super::ParseError;
use super::lex::{Tok, Token};
use super::value::{Ty, Value};
use crate::problem::is_math_function;

/// Deepest nesting of statements and expressions accepted; deeper phenotypes are
/// rejected rather than risking the stack of whichever thread evaluates them. Grammar
/// phenotypes stay below it: mapping caps derivation depth at 90 by default, and the
/// built-in grammars open at most two levels of nesting per derivation level.
pub const MAX_NESTING: usize = 200;

/// An arithmetic operator: operands take C's usual arithmetic conversions, the result
/// has their common type. Int `/` truncates toward zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
}

/// An operator on two ints giving an int.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOp {
    /// `%`, the sign of the dividend.
    Rem,
    /// `&`
    And,
    /// `|`
    Or,
    /// `^`
    Xor,
    /// `<<`
    Shl,
    /// `>>`, arithmetic (sign-filling).
    Shr,
}

/// A comparison, on operands after the usual arithmetic conversions, giving int 0 or 1.
/// With a NaN operand every comparison is false except `!=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `<=`
    Le,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

/// A math function of one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fn1 {
    /// `sin`
    Sin,
    /// `cos`
    Cos,
    /// `exp`
    Exp,
    /// `log`, natural.
    Log,
    /// `sqrt`
    Sqrt,
    /// `fabs`
    Fabs,
    /// `tanh`
    Tanh,
}

impl Fn1 {
    /// The C name of the double form (`"sin"`); the float form appends `f`.
    pub fn c_name(self) -> &'static str {
        match self {
            Fn1::Sin => "sin",
            Fn1::Cos => "cos",
            Fn1::Exp => "exp",
            Fn1::Log => "log",
            Fn1::Sqrt => "sqrt",
            Fn1::Fabs => "fabs",
            Fn1::Tanh => "tanh",
        }
    }
}

/// A math function of two arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fn2 {
    /// `pow`
    Pow,
    /// `fmin`: the other operand when one is NaN.
    Fmin,
    /// `fmax`: the other operand when one is NaN.
    Fmax,
    /// `pdiv`, protected division: `a / b` where `|b| > 0.001`, else 1 (NaN `b` gives 1), the
    /// test and the quotient in the operation's type (`fabsf(b) > 0.001f ? a / b : 1.0f` for
    /// `pdivf`).
    Pdiv,
}

impl Fn2 {
    /// The C name of the double form (`"pow"`); the float form appends `f`.
    pub fn c_name(self) -> &'static str {
        match self {
            Fn2::Pow => "pow",
            Fn2::Fmin => "fmin",
            Fn2::Fmax => "fmax",
            Fn2::Pdiv => "pdiv",
        }
    }
}

/// A typed expression; binary operands are promoted at run time by C's usual
/// arithmetic conversions, which the static types here agree with. Its height is at
/// most a small multiple of the parser's nesting bound.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A literal (an int, a float with `f`, or a double).
    Const(Value),
    /// The current value of a variable slot (see `Program::slots`).
    Var(usize),
    /// Element of int array `.0` (see `Program::arrays`), index (an int expression)
    /// wrapped into `[0, len)`; an empty array reads 0.
    Index(usize, Box<Expr>),
    /// C conversion to the type (casts, and the implicit conversions of `?:`, calls and
    /// array indices).
    Convert(Ty, Box<Expr>),
    /// Unary `-` (wrapping for ints).
    Neg(Box<Expr>),
    /// `~`, on an int.
    BitNot(Box<Expr>),
    /// `!`: int 1 if the operand is zero, else 0 (NaN is nonzero).
    Not(Box<Expr>),
    /// `first op1 e1 op2 e2 ...` applied left to right (`&&`/`||` short-circuit).
    /// Flat, so that long sums cost no stack depth to evaluate or drop.
    Chain(Box<Expr>, Vec<(Bin, Expr)>),
    /// `c ? a : b`; both arms already converted to their common type.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// One-argument math function computed in `Ty` (argument converted to it; `Ty` is
    /// never `Int`).
    Call1(Fn1, Ty, Box<Expr>),
    /// Two-argument math function computed in `Ty` (arguments converted to it).
    Call2(Fn2, Ty, Box<Expr>, Box<Expr>),
}

impl Expr {
    /// The static C type of the expression, given the type of each variable slot (as
    /// `Program::slot_types` gives them). It is also the type of its value at run time.
    pub fn ty(&self, slot_types: &[Ty]) -> Ty {
        match self {
            Expr::Const(v) => v.ty(),
            Expr::Var(slot) => slot_types[*slot],
            Expr::Index(..) | Expr::BitNot(_) | Expr::Not(_) => Ty::Int,
            Expr::Convert(ty, _) | Expr::Call1(_, ty, _) | Expr::Call2(_, ty, ..) => *ty,
            Expr::Neg(a) => a.ty(slot_types),
            Expr::Cond(_, a, _) => a.ty(slot_types),
            Expr::Chain(first, rest) => {
                let mut ty = first.ty(slot_types);
                for (op, e) in rest {
                    ty = op.result(ty, e.ty(slot_types));
                }
                ty
            }
        }
    }
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `slot = (ty) expr`: the value converted to the slot's type `ty`. Compound
    /// assignments and `++`/`--` are written out (`x += e` is `x = x + e`).
    Assign(usize, Ty, Expr),
    /// `if (cond) then else els`; the condition is true when nonzero.
    If(Expr, Vec<Stmt>, Vec<Stmt>),
    /// `for`/`while` after hoisting the initialiser: test, body, step.
    Loop(Option<Expr>, Vec<Stmt>, Vec<Stmt>),
    /// `{ ... }`, and a `for` with its initialiser hoisted in front of its loop.
    Block(Vec<Stmt>),
    /// An expression whose value is dropped (it has no side effects in this subset).
    Discard(Expr),
}

/// What a name means to the parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Binding {
    Scalar {
        slot: usize,
        ty: Ty,
        writable: bool,
    },
    Array(usize),
    /// The free parameters `p[0]` .. `p[count - 1]`, read-only floats in slots `first` ...
    Params {
        first: usize,
        count: usize,
    },
}

pub(super) struct Parser<'a> {
    toks: &'a [Token],
    pos: usize,
    end: usize,
    names: &'a HashMap<String, Binding>,
    nesting: usize,
    functions: &'a HashMap<String, Inline>,
    /// What [`super::Program::size`] adds to the size of the tree it parsed: a call of a
    /// declared function is one node around its arguments, however large its body.
    pub(super) size_adjust: isize,
    /// Nodes inlined so far ([`super::MAX_INLINED_NODES`] bounds them).
    inlined: usize,
}

/// A declared function (`[[functions]]` of `problem.toml`) ready to inline: its body over the
/// slots `0..arity` (its parameters), of type `ty`.
#[derive(Clone, Debug)]
pub(super) struct Inline {
    arity: usize,
    body: Expr,
    ty: Ty,
    /// Nodes of `body`.
    body_size: usize,
}

/// The declared functions of `spec`, each parsed with those before it; the index of the one
/// whose body does not parse, and why, otherwise.
pub(super) fn inline_functions(
    spec: &crate::problem::spec::ProblemSpec,
) -> Result<HashMap<String, Inline>, (usize, ParseError)> {
    let mut functions = HashMap::new();
    for (i, f) in spec.functions.iter().enumerate() {
        let names: HashMap<String, Binding> = f
            .params
            .iter()
            .enumerate()
            .map(|(slot, p)| (p.clone(), Binding::Scalar { slot, ty: Ty::Float, writable: false }))
            .collect();
        let toks = super::lex::lex(&f.body).map_err(|e| (i, e))?;
        let mut parser = Parser::new(&toks, f.body.len(), &names, &functions);
        let (body, ty) = parser.expr().map_err(|e| (i, e))?;
        parser.expect_end().map_err(|e| (i, e))?;
        let body_size = super::expr_size(&body);
        functions.insert(f.name.clone(), Inline { arity: f.params.len(), body, ty, body_size });
    }
    Ok(functions)
}

/// Declarations and the functions parsed from them.
type Parsed = (Vec<crate::problem::spec::FunctionSpec>, std::rc::Rc<HashMap<String, Inline>>);

thread_local! {
    /// The declared functions last parsed on this thread, with the declarations they came from:
    /// a run parses every individual (several times) against the same few.
    static INLINED: std::cell::RefCell<Option<Parsed>> = const { std::cell::RefCell::new(None) };
}

/// [`inline_functions`], parsed once per thread for the same declarations.
pub(super) fn inline_functions_cached(
    spec: &crate::problem::spec::ProblemSpec,
) -> Result<std::rc::Rc<HashMap<String, Inline>>, (usize, ParseError)> {
    INLINED.with(|cell| {
        if let Some((declared, functions)) = &*cell.borrow()
            && *declared == spec.functions
        {
            return Ok(functions.clone());
        }
        let functions = std::rc::Rc::new(inline_functions(spec)?);
        *cell.borrow_mut() = Some((spec.functions.clone(), functions.clone()));
        Ok(functions)
    })
}

/// `e` with each `Var(k)` replaced by `args[k]`.
fn substitute(e: &Expr, args: &[Expr]) -> Expr {
    let s = |e: &Expr| Box::new(substitute(e, args));
    match e {
        Expr::Var(k) => args[*k].clone(),
        Expr::Const(v) => Expr::Const(*v),
        Expr::Index(a, i) => Expr::Index(*a, s(i)),
        Expr::Convert(t, a) => Expr::Convert(*t, s(a)),
        Expr::Neg(a) => Expr::Neg(s(a)),
        Expr::BitNot(a) => Expr::BitNot(s(a)),
        Expr::Not(a) => Expr::Not(s(a)),
        Expr::Chain(first, rest) => {
            Expr::Chain(s(first), rest.iter().map(|(op, e)| (*op, substitute(e, args))).collect())
        }
        Expr::Cond(c, a, b) => Expr::Cond(s(c), s(a), s(b)),
        Expr::Call1(f, t, a) => Expr::Call1(*f, *t, s(a)),
        Expr::Call2(f, t, a, b) => Expr::Call2(*f, *t, s(a), s(b)),
    }
}

type PResult<T> = Result<T, ParseError>;

impl<'a> Parser<'a> {
    pub(super) fn new(
        toks: &'a [Token],
        src_len: usize,
        names: &'a HashMap<String, Binding>,
        functions: &'a HashMap<String, Inline>,
    ) -> Self {
        Self { toks, pos: 0, end: src_len, names, nesting: 0, functions, size_adjust: 0, inlined: 0 }
    }

    fn at(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end, |t| t.at)
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn peek_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }

    fn eat(&mut self, p: &str) -> bool {
        if self.peek_punct(p) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> PResult<()> {
        if self.eat(p) { Ok(()) } else { Err(self.syntax(&format!("expected `{p}`"))) }
    }

    fn syntax(&self, message: &str) -> ParseError {
        let found = match self.peek() {
            None => "end of program".to_string(),
            Some(Tok::Ident(s)) => format!("`{s}`"),
            Some(Tok::Punct(p)) => format!("`{p}`"),
            Some(Tok::Int(v)) => format!("`{v}`"),
            Some(Tok::Float(v)) => format!("`{v}f`"),
            Some(Tok::Double(v)) => format!("`{v}`"),
        };
        ParseError::Syntax { at: self.at(), message: format!("{message}, found {found}") }
    }

    fn enter(&mut self) -> PResult<()> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            Err(ParseError::TooDeep { at: self.at(), limit: MAX_NESTING })
        } else {
            Ok(())
        }
    }

    fn leave(&mut self) {
        self.nesting -= 1;
    }

    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    pub(super) fn expect_end(&self) -> PResult<()> {
        if self.at_end() { Ok(()) } else { Err(self.syntax("expected end of program")) }
    }

    // ---- statements ----

    pub(super) fn statements(&mut self) -> PResult<Vec<Stmt>> {
        let mut out = Vec::new();
        while !self.at_end() {
            out.push(self.statement()?);
        }
        Ok(out)
    }

    fn statement(&mut self) -> PResult<Stmt> {
        self.enter()?;
        let s = self.statement_inner();
        self.leave();
        s
    }

    fn statement_inner(&mut self) -> PResult<Stmt> {
        if self.eat(";") {
            return Ok(Stmt::Block(Vec::new()));
        }
        if self.eat("{") {
            let mut body = Vec::new();
            while !self.eat("}") {
                if self.at_end() {
                    return Err(self.syntax("expected `}`"));
                }
                body.push(self.statement()?);
            }
            return Ok(Stmt::Block(body));
        }
        if let Some(Tok::Ident(word)) = self.peek() {
            match word.as_str() {
                "if" => {
                    self.pos += 1;
                    self.expect("(")?;
                    let (cond, _) = self.expr()?;
                    self.expect(")")?;
                    let then = self.statement()?;
                    let els = if matches!(self.peek(), Some(Tok::Ident(w)) if w == "else") {
                        self.pos += 1;
                        vec![self.statement()?]
                    } else {
                        Vec::new()
                    };
                    return Ok(Stmt::If(cond, vec![then], els));
                }
                "for" => {
                    self.pos += 1;
                    self.expect("(")?;
                    let init = if self.peek_punct(";") { Vec::new() } else { vec![self.simple()?] };
                    self.expect(";")?;
                    let cond = if self.peek_punct(";") { None } else { Some(self.expr()?.0) };
                    self.expect(";")?;
                    let step = if self.peek_punct(")") { Vec::new() } else { vec![self.simple()?] };
                    self.expect(")")?;
                    let body = self.statement()?;
                    let mut block = init;
                    block.push(Stmt::Loop(cond, vec![body], step));
                    return Ok(Stmt::Block(block));
                }
                "while" => {
                    self.pos += 1;
                    self.expect("(")?;
                    let (cond, _) = self.expr()?;
                    self.expect(")")?;
                    let body = self.statement()?;
                    return Ok(Stmt::Loop(Some(cond), vec![body], Vec::new()));
                }
                "else" | "do" | "break" | "continue" | "return" | "switch" | "goto" | "int" | "float"
                | "double" => {
                    return Err(ParseError::Unsupported {
                        at: self.at(),
                        what: format!("`{word}` statements"),
                    });
                }
                _ => {}
            }
        }
        let s = self.simple()?;
        self.expect(";")?;
        Ok(s)
    }

    /// An assignment, increment, or expression, without the `;`.
    fn simple(&mut self) -> PResult<Stmt> {
        // Prefix ++/--.
        for (p, op) in [("++", ArithOp::Add), ("--", ArithOp::Sub)] {
            if self.eat(p) {
                let (slot, ty) = self.target()?;
                return Ok(step(slot, ty, op));
            }
        }
        if let (Some(Tok::Ident(_)), Some(Tok::Punct(p))) =
            (self.peek(), self.toks.get(self.pos + 1).map(|t| &t.tok))
        {
            let p = *p;
            let compound = match p {
                "=" => Some(None),
                "+=" => Some(Some(Bin::Arith(ArithOp::Add))),
                "-=" => Some(Some(Bin::Arith(ArithOp::Sub))),
                "*=" => Some(Some(Bin::Arith(ArithOp::Mul))),
                "/=" => Some(Some(Bin::Arith(ArithOp::Div))),
                "%=" => Some(Some(Bin::Int(IntOp::Rem))),
                "&=" => Some(Some(Bin::Int(IntOp::And))),
                "|=" => Some(Some(Bin::Int(IntOp::Or))),
                "^=" => Some(Some(Bin::Int(IntOp::Xor))),
                "<<=" => Some(Some(Bin::Int(IntOp::Shl))),
                ">>=" => Some(Some(Bin::Int(IntOp::Shr))),
                "++" | "--" => {
                    let (slot, ty) = self.target()?;
                    self.pos += 1;
                    let op = if p == "++" { ArithOp::Add } else { ArithOp::Sub };
                    return Ok(step(slot, ty, op));
                }
                _ => None,
            };
            if let Some(compound) = compound {
                let at = self.at();
                let (slot, ty) = self.target()?;
                self.pos += 1;
                let rhs = self.expr()?;
                let value = match compound {
                    None => rhs.0,
                    Some(op) => {
                        binary_type(op, ty, rhs.1, at)?;
                        Expr::Chain(Box::new(Expr::Var(slot)), vec![(op, rhs.0)])
                    }
                };
                return Ok(Stmt::Assign(slot, ty, value));
            }
        }
        Ok(Stmt::Discard(self.expr()?.0))
    }

    /// A writable scalar variable name.
    fn target(&mut self) -> PResult<(usize, Ty)> {
        let at = self.at();
        let Some(Tok::Ident(name)) = self.peek() else {
            return Err(self.syntax("expected a variable"));
        };
        let name = name.clone();
        self.pos += 1;
        match self.names.get(&name) {
            Some(Binding::Scalar { slot, ty, writable: true }) => Ok((*slot, *ty)),
            Some(_) => Err(ParseError::ReadOnly { at, name }),
            None => Err(ParseError::Undeclared { at, name }),
        }
    }

    // ---- expressions ----

    pub(super) fn expr(&mut self) -> PResult<(Expr, Ty)> {
        self.expr_bp(0)
    }

    /// An expression whose binary operators all bind at least as tightly as
    /// `min_prec`. One function per nesting level keeps the stack cost of deep
    /// phenotypes small; `enter` bounds the nesting.
    fn expr_bp(&mut self, min_prec: u8) -> PResult<(Expr, Ty)> {
        self.enter()?;
        let e = self.expr_bp_inner(min_prec);
        self.leave();
        e
    }

    fn expr_bp_inner(&mut self, min_prec: u8) -> PResult<(Expr, Ty)> {
        let (mut lhs, mut lty) = self.operand()?;
        // Everything consumed by this loop applies left to right to the running value:
        // each right operand was parsed with a tighter binding than its operator.
        let mut chain: Vec<(Bin, Expr)> = Vec::new();
        while let Some(Tok::Punct(p)) = self.peek() {
            let Some((prec, op)) = binary_op(p) else {
                break;
            };
            if prec < min_prec {
                break;
            }
            let at = self.at();
            self.pos += 1;
            let (rhs, rty) = self.expr_bp(prec + 1)?;
            lty = binary_type(op, lty, rty, at)?;
            chain.push((op, rhs));
        }
        if !chain.is_empty() {
            lhs = Expr::Chain(Box::new(lhs), chain);
        }
        if min_prec == 0 && self.eat("?") {
            let (a, ta) = self.expr_bp(0)?;
            self.expect(":")?;
            let (b, tb) = self.expr_bp(0)?;
            let ty = Ty::usual(ta, tb);
            lhs = Expr::Cond(Box::new(lhs), Box::new(convert(a, ta, ty)), Box::new(convert(b, tb, ty)));
            lty = ty;
        }
        Ok((lhs, lty))
    }

    /// A prefix operator, cast, parenthesis, literal, variable, element or call. Each
    /// kind that nests lives in its own function: in unoptimised builds a frame holds
    /// every temporary of its function, and only the path actually taken recurses.
    fn operand(&mut self) -> PResult<(Expr, Ty)> {
        let at = self.at();
        match self.peek() {
            Some(Tok::Punct(p @ ("-" | "+" | "!" | "~"))) => {
                let p = *p;
                self.prefix(p, at)
            }
            Some(Tok::Punct("++" | "--")) => {
                Err(ParseError::Unsupported { at, what: "`++`/`--` inside an expression".into() })
            }
            Some(Tok::Punct("(")) => self.paren_or_cast(),
            Some(Tok::Int(v)) => {
                let v = *v;
                self.pos += 1;
                Ok((Expr::Const(Value::Int(v)), Ty::Int))
            }
            Some(Tok::Float(v)) => {
                let v = *v;
                self.pos += 1;
                Ok((Expr::Const(Value::Float(v)), Ty::Float))
            }
            Some(Tok::Double(v)) => {
                let v = *v;
                self.pos += 1;
                Ok((Expr::Const(Value::Double(v)), Ty::Double))
            }
            Some(Tok::Ident(_)) => self.name_use(at),
            _ => Err(self.syntax("expected an expression")),
        }
    }

    fn prefix(&mut self, p: &str, at: usize) -> PResult<(Expr, Ty)> {
        self.pos += 1;
        let (e, t) = self.expr_bp(UNARY_PREC)?;
        match p {
            "-" => Ok((Expr::Neg(Box::new(e)), t)),
            "+" => Ok((e, t)),
            "!" => Ok((Expr::Not(Box::new(e)), Ty::Int)),
            _ if t == Ty::Int => Ok((Expr::BitNot(Box::new(e)), Ty::Int)),
            _ => Err(type_error(at, "operand of `~` must be int")),
        }
    }

    fn paren_or_cast(&mut self) -> PResult<(Expr, Ty)> {
        if let Some(ty) = self.cast_type() {
            self.pos += 3;
            let (e, t) = self.expr_bp(UNARY_PREC)?;
            return Ok((convert(e, t, ty), ty));
        }
        self.pos += 1;
        let e = self.expr_bp(0)?;
        self.expect(")")?;
        Ok(e)
    }

    /// A variable, an array element, or a call.
    fn name_use(&mut self, at: usize) -> PResult<(Expr, Ty)> {
        let Some(Tok::Ident(name)) = self.peek() else {
            return Err(self.syntax("expected a name"));
        };
        let name = name.clone();
        self.pos += 1;
        if self.peek_punct("(") {
            return self.call(&name, at);
        }
        match self.names.get(&name) {
            Some(Binding::Scalar { slot, ty, .. }) => Ok((Expr::Var(*slot), *ty)),
            Some(Binding::Array(array)) => {
                let array = *array;
                self.expect("[")?;
                let (i, t) = self.expr_bp(0)?;
                self.expect("]")?;
                // The template's operator[] takes an int: C++ converts implicitly.
                Ok((Expr::Index(array, Box::new(convert(i, t, Ty::Int))), Ty::Int))
            }
            Some(Binding::Params { first, count }) => {
                let (first, count) = (*first, *count);
                self.expect("[")?;
                let k = match self.peek() {
                    Some(Tok::Int(k)) => usize::try_from(*k).ok().filter(|&k| k < count),
                    _ => None,
                };
                let Some(k) = k else {
                    return Err(self.syntax("a parameter's index must be a literal int (`p[0]`)"));
                };
                self.pos += 1;
                self.expect("]")?;
                Ok((Expr::Var(first + k), Ty::Float))
            }
            None => Err(ParseError::Undeclared { at, name }),
        }
    }

    /// The type named by a cast `(int)`, `(float)` or `(double)` starting here.
    fn cast_type(&self) -> Option<Ty> {
        let word = match self.toks.get(self.pos + 1).map(|t| &t.tok) {
            Some(Tok::Ident(w)) => w.as_str(),
            _ => return None,
        };
        let closes = matches!(self.toks.get(self.pos + 2).map(|t| &t.tok), Some(Tok::Punct(")")));
        match word {
            "int" if closes => Some(Ty::Int),
            "float" if closes => Some(Ty::Float),
            "double" if closes => Some(Ty::Double),
            _ => None,
        }
    }

    fn call(&mut self, name: &str, at: usize) -> PResult<(Expr, Ty)> {
        self.expect("(")?;
        let mut args = Vec::new();
        if !self.eat(")") {
            loop {
                args.push(self.expr_bp(0)?);
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
        }
        if let Some(f) = self.functions.get(name) {
            if args.len() != f.arity {
                return Err(type_error(at, &format!("`{name}` takes {} argument(s)", f.arity)));
            }
            let args: Vec<Expr> = args.into_iter().map(|(e, t)| convert(e, t, Ty::Float)).collect();
            let call = 1 + args.iter().map(super::expr_size).sum::<usize>();
            // The arguments' sizes bound the substitution's before it is built.
            let uses = f.body_size.saturating_mul(call);
            if uses > super::MAX_INLINED_NODES {
                return Err(ParseError::Inlined { at, limit: super::MAX_INLINED_NODES });
            }
            let e = convert(substitute(&f.body, &args), f.ty, Ty::Float);
            let expanded = super::expr_size(&e);
            self.inlined += expanded;
            if self.inlined > super::MAX_INLINED_NODES {
                return Err(ParseError::Inlined { at, limit: super::MAX_INLINED_NODES });
            }
            self.size_adjust += call as isize - expanded as isize;
            return Ok((e, Ty::Float));
        }
        let Some((f, float_form)) = math_function(name) else {
            return Err(ParseError::UnknownFunction { at, name: name.to_string() });
        };
        // `sinf` and friends compute in float. The unsuffixed names follow C++ overload
        // resolution (NVRTC compiles C++): float when every argument is float, double
        // otherwise.
        let ty = if float_form || args.iter().all(|(_, t)| *t == Ty::Float) { Ty::Float } else { Ty::Double };
        let mut args = args.into_iter().map(|(e, t)| Box::new(convert(e, t, ty)));
        match (f, args.next(), args.next(), args.next()) {
            (MathFn::One(f), Some(a), None, None) => Ok((Expr::Call1(f, ty, a), ty)),
            (MathFn::Two(f), Some(a), Some(b), None) => Ok((Expr::Call2(f, ty, a, b), ty)),
            (f, ..) => {
                let arity = if matches!(f, MathFn::One(_)) { 1 } else { 2 };
                Err(type_error(at, &format!("`{name}` takes {arity} argument(s)")))
            }
        }
    }
}

/// Binds tighter than every binary operator.
const UNARY_PREC: u8 = 11;

fn type_error(at: usize, message: &str) -> ParseError {
    ParseError::Type { at, message: message.to_string() }
}

/// Result type of a binary operator, or why the operands do not fit it.
fn binary_type(op: Bin, lty: Ty, rty: Ty, at: usize) -> PResult<Ty> {
    match op {
        Bin::Arith(_) => Ok(Ty::usual(lty, rty)),
        Bin::Int(_) if lty == Ty::Int && rty == Ty::Int => Ok(Ty::Int),
        Bin::Int(o) => Err(type_error(at, &format!("operands of `{}` must be int", int_op_text(o)))),
        Bin::Cmp(_) | Bin::And | Bin::Or => Ok(Ty::Int),
    }
}

/// A binary operator of an operator chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bin {
    /// `+ - * /`
    Arith(ArithOp),
    /// `% & | ^ << >>`, on ints.
    Int(IntOp),
    /// `< > <= >= == !=`
    Cmp(CmpOp),
    /// `&&` (short-circuit; int 0 or 1).
    And,
    /// `||` (short-circuit; int 0 or 1).
    Or,
}

impl Bin {
    /// The type of `a op b` for operands of types `a` and `b` the parser accepted.
    pub fn result(self, a: Ty, b: Ty) -> Ty {
        match self {
            Bin::Arith(_) => Ty::usual(a, b),
            Bin::Int(_) | Bin::Cmp(_) | Bin::And | Bin::Or => Ty::Int,
        }
    }
}

/// C precedence, higher binds tighter.
fn binary_op(p: &str) -> Option<(u8, Bin)> {
    Some(match p {
        "||" => (1, Bin::Or),
        "&&" => (2, Bin::And),
        "|" => (3, Bin::Int(IntOp::Or)),
        "^" => (4, Bin::Int(IntOp::Xor)),
        "&" => (5, Bin::Int(IntOp::And)),
        "==" => (6, Bin::Cmp(CmpOp::Eq)),
        "!=" => (6, Bin::Cmp(CmpOp::Ne)),
        "<" => (7, Bin::Cmp(CmpOp::Lt)),
        ">" => (7, Bin::Cmp(CmpOp::Gt)),
        "<=" => (7, Bin::Cmp(CmpOp::Le)),
        ">=" => (7, Bin::Cmp(CmpOp::Ge)),
        "<<" => (8, Bin::Int(IntOp::Shl)),
        ">>" => (8, Bin::Int(IntOp::Shr)),
        "+" => (9, Bin::Arith(ArithOp::Add)),
        "-" => (9, Bin::Arith(ArithOp::Sub)),
        "*" => (10, Bin::Arith(ArithOp::Mul)),
        "/" => (10, Bin::Arith(ArithOp::Div)),
        "%" => (10, Bin::Int(IntOp::Rem)),
        _ => return None,
    })
}

fn int_op_text(o: IntOp) -> &'static str {
    match o {
        IntOp::Rem => "%",
        IntOp::And => "&",
        IntOp::Or => "|",
        IntOp::Xor => "^",
        IntOp::Shl => "<<",
        IntOp::Shr => ">>",
    }
}

#[derive(Clone, Copy)]
enum MathFn {
    One(Fn1),
    Two(Fn2),
}

/// The math functions the subset knows ([`crate::problem::MATH_FUNCTIONS`] decides which), and whether the name
/// is the float (`f`) form.
fn math_function(name: &str) -> Option<(MathFn, bool)> {
    if !is_math_function(name) {
        return None;
    }
    let (base, float_form) = match name.strip_suffix('f') {
        Some(b) => (b, true),
        _ => (name, false),
    };
    let f = match base {
        "sin" => MathFn::One(Fn1::Sin),
        "cos" => MathFn::One(Fn1::Cos),
        "exp" => MathFn::One(Fn1::Exp),
        "log" => MathFn::One(Fn1::Log),
        "sqrt" => MathFn::One(Fn1::Sqrt),
        "fabs" => MathFn::One(Fn1::Fabs),
        "tanh" => MathFn::One(Fn1::Tanh),
        "pow" => MathFn::Two(Fn2::Pow),
        "fmin" => MathFn::Two(Fn2::Fmin),
        "fmax" => MathFn::Two(Fn2::Fmax),
        "pdiv" => MathFn::Two(Fn2::Pdiv),
        _ => return None,
    };
    Some((f, float_form))
}

/// `x += 1` / `x -= 1` for `x++` / `x--`.
fn step(slot: usize, ty: Ty, op: ArithOp) -> Stmt {
    Stmt::Assign(
        slot,
        ty,
        Expr::Chain(Box::new(Expr::Var(slot)), vec![(Bin::Arith(op), Expr::Const(Value::Int(1)))]),
    )
}

fn convert(e: Expr, from: Ty, to: Ty) -> Expr {
    if from == to { e } else { Expr::Convert(to, Box::new(e)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::MATH_FUNCTIONS;

    #[test]
    fn the_parser_knows_every_declared_math_function_in_both_forms() {
        for name in MATH_FUNCTIONS {
            assert!(matches!(math_function(name), Some((_, false))), "{name}");
            assert!(matches!(math_function(&format!("{name}f")), Some((_, true))), "{name}f");
        }
        assert!(math_function("atan").is_none());
    }
}
