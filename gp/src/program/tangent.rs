//! Forward-mode derivatives: a program run on one case with, beside each value, its derivative
//! along one direction of the free parameters (a tangent). Must compute every value exactly as
//! the evaluator does ([`super::run`]'s operations, shared), so the outputs of a tangent run are
//! the evaluator's outputs bit for bit; derivatives are f64 whatever the values' type.
//!
//! Where C's operations have no derivative the rule is that of automatic-differentiation
//! tools: ints, comparisons, `!`, `&&`, `||`, bit operations and conversions to int carry
//! none (0); a branch (`?:`, `if`, a loop's test) contributes the derivative of the path taken;
//! `fabs` at 0, `fmin`/`fmax` on a tie take the first argument's side; `pow(x, y)` carries a
//! derivative along `y` only where `x > 0`. A derivative that is not finite (`log` at 0) stays
//! what it is, and whoever uses it decides.

use super::parse::{ArithOp, Bin, Expr, Fn1, Fn2, Stmt};
use super::run::{OutOfSteps, arith, call1, call2, compare, int_op, wrapped};
use super::value::{Ty, Value};

/// The state of one case: each slot's value and derivative, and the case's int arrays.
pub(super) struct Tangent<'a> {
    pub slots: Vec<Value>,
    pub dots: Vec<f64>,
    pub arrays: Vec<&'a [i32]>,
    pub steps: u64,
    pub max_steps: u64,
}

impl Tangent<'_> {
    pub(super) fn exec(&mut self, stmts: &[Stmt]) -> Result<(), OutOfSteps> {
        for s in stmts {
            self.exec_one(s)?;
        }
        Ok(())
    }

    fn exec_one(&mut self, s: &Stmt) -> Result<(), OutOfSteps> {
        match s {
            Stmt::Assign(slot, ty, e) => {
                let (v, d) = self.eval(e);
                self.slots[*slot] = v.to(*ty);
                self.dots[*slot] = if *ty == Ty::Int { 0.0 } else { d };
            }
            Stmt::If(c, then, els) => {
                if self.eval(c).0.truthy() {
                    self.exec(then)?;
                } else {
                    self.exec(els)?;
                }
            }
            Stmt::Loop(cond, body, step) => loop {
                self.steps += 1;
                if self.steps > self.max_steps {
                    return Err(OutOfSteps);
                }
                if cond.as_ref().is_some_and(|c| !self.eval(c).0.truthy()) {
                    break;
                }
                self.exec(body)?;
                self.exec(step)?;
            },
            Stmt::Block(b) => self.exec(b)?,
            Stmt::Discard(_) => {}
        }
        Ok(())
    }

    /// The value of `e` and its derivative.
    pub(super) fn eval(&self, e: &Expr) -> (Value, f64) {
        match e {
            Expr::Const(v) => (*v, 0.0),
            Expr::Var(slot) => (self.slots[*slot], self.dots[*slot]),
            Expr::Index(array, i) => (Value::Int(wrapped(self.arrays[*array], self.eval(i).0.as_int())), 0.0),
            Expr::Convert(ty, a) => {
                let (v, d) = self.eval(a);
                (v.to(*ty), if *ty == Ty::Int { 0.0 } else { d })
            }
            Expr::Neg(a) => {
                let (v, d) = self.eval(a);
                let v = match v {
                    Value::Int(i) => Value::Int(i.wrapping_neg()),
                    Value::Float(f) => Value::Float(-f),
                    Value::Double(x) => Value::Double(-x),
                };
                (v, -d)
            }
            Expr::BitNot(a) => (Value::Int(!self.eval(a).0.as_int()), 0.0),
            Expr::Not(a) => (Value::Int(i32::from(!self.eval(a).0.truthy())), 0.0),
            Expr::Chain(first, rest) => {
                let (mut acc, mut dacc) = self.eval(first);
                for (op, e) in rest {
                    (acc, dacc) = match op {
                        Bin::Arith(o) => {
                            let (b, db) = self.eval(e);
                            let v = arith(*o, acc, b);
                            let d = if v.ty() == Ty::Int { 0.0 } else { arith_dot(*o, acc, dacc, b, db) };
                            (v, d)
                        }
                        Bin::Int(o) => (Value::Int(int_op(*o, acc.as_int(), self.eval(e).0.as_int())), 0.0),
                        Bin::Cmp(o) => (Value::Int(i32::from(compare(*o, acc, self.eval(e).0))), 0.0),
                        Bin::And => (Value::Int(i32::from(acc.truthy() && self.eval(e).0.truthy())), 0.0),
                        Bin::Or => (Value::Int(i32::from(acc.truthy() || self.eval(e).0.truthy())), 0.0),
                    };
                }
                (acc, dacc)
            }
            Expr::Cond(c, a, b) => {
                if self.eval(c).0.truthy() {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
            Expr::Call1(f, ty, a) => {
                let (x, dx) = self.eval(a);
                let v = call1(*f, *ty, x);
                (v, fn1_dot(*f, x.to_f64(), v.to_f64(), dx))
            }
            Expr::Call2(f, ty, a, b) => {
                let ((x, dx), (y, dy)) = (self.eval(a), self.eval(b));
                let v = call2(*f, *ty, x, y);
                (v, fn2_dot(*f, x.to_f64(), dx, y.to_f64(), dy, v.to_f64()))
            }
        }
    }
}

/// The derivative of `a op b`.
fn arith_dot(op: ArithOp, a: Value, da: f64, b: Value, db: f64) -> f64 {
    let (x, y) = (a.to_f64(), b.to_f64());
    match op {
        ArithOp::Add => da + db,
        ArithOp::Sub => da - db,
        ArithOp::Mul => da * y + x * db,
        ArithOp::Div => (da * y - x * db) / (y * y),
    }
}

/// The derivative of `v = f(x)`.
fn fn1_dot(f: Fn1, x: f64, v: f64, dx: f64) -> f64 {
    if dx == 0.0 {
        return 0.0;
    }
    dx * match f {
        Fn1::Sin => x.cos(),
        Fn1::Cos => -x.sin(),
        Fn1::Exp => v,
        Fn1::Log => 1.0 / x,
        Fn1::Sqrt => 0.5 / v,
        Fn1::Fabs => {
            if x < 0.0 {
                -1.0
            } else {
                1.0
            }
        }
        Fn1::Tanh => 1.0 - v * v,
    }
}

/// The derivative of `v = f(x, y)`.
fn fn2_dot(f: Fn2, x: f64, dx: f64, y: f64, dy: f64, v: f64) -> f64 {
    match f {
        Fn2::Pow => {
            let along_x = if dx == 0.0 { 0.0 } else { dx * y * x.powf(y - 1.0) };
            let along_y = if dy == 0.0 || x <= 0.0 { 0.0 } else { dy * v * x.ln() };
            along_x + along_y
        }
        // NaN loses to a number in fmin/fmax, as C's do.
        Fn2::Fmin | Fn2::Fmax if v == x || y.is_nan() => dx,
        Fn2::Fmin | Fn2::Fmax => dy,
    }
}
