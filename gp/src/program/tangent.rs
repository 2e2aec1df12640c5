//! Forward-mode derivatives: a program run on one case with, beside each value, its derivatives
//! with respect to every free parameter at once (a tangent of `np` numbers). Must compute every
//! value exactly as the evaluator does ([`super::run`]'s operations, shared), so the outputs of a
//! tangent run are the evaluator's outputs bit for bit; derivatives are f64 whatever the values'
//! type. Must never allocate per operation: tangents live on one stack of `np`-wide frames.
//!
//! Where C's operations have no derivative the rule is that of automatic-differentiation
//! tools: ints, comparisons, `!`, `&&`, `||`, bit operations and conversions to int carry
//! none (0); a branch (`?:`, `if`, a loop's test) contributes the derivatives of the path taken;
//! `fabs` at 0, `fmin`/`fmax` on a tie take the first argument's side; slopes are f64, but
//! those of `sinf` and `cosf` are computed in float, as the functions are (`cosf(x)`,
//! `-sinf(x)`); `pow(x, y)` carries a derivative along `y` only where `x > 0`; `pdiv(x, y)` has
//! `/`'s slopes `(1/y, -x/y²)` where it divides (`|y| > 0.001` in its type) and none where it is
//! the constant 1. A derivative that is not finite (`log` at 0) stays what it is, and whoever
//! uses it decides.

use super::parse::{ArithOp, Bin, Expr, Fn1, Fn2, Stmt};
use super::run::{OutOfSteps, arith, call1, call2, compare, int_op, pdiv_divides, wrapped};
use super::value::{Ty, Value};

/// The state of one case: each slot's value and derivatives, and the case's int arrays.
pub(super) struct Tangent<'a> {
    /// Derivatives per value.
    pub np: usize,
    pub slots: Vec<Value>,
    /// `np` derivatives per slot.
    pub dots: Vec<f64>,
    pub arrays: Vec<&'a [i32]>,
    pub steps: u64,
    pub max_steps: u64,
    /// The derivatives of the values being computed, `np` per value, innermost last.
    pub stack: Vec<f64>,
}

impl Tangent<'_> {
    /// A frame of zeros on top of the stack.
    fn push_zero(&mut self) {
        self.stack.resize(self.stack.len() + self.np, 0.0);
    }

    fn pop(&mut self) {
        self.stack.truncate(self.stack.len() - self.np);
    }

    /// The top frame.
    pub(super) fn top(&self) -> &[f64] {
        &self.stack[self.stack.len() - self.np..]
    }

    fn top_mut(&mut self) -> &mut [f64] {
        let n = self.stack.len();
        &mut self.stack[n - self.np..]
    }

    /// Sets the top frame to zeros (the value has no derivative).
    fn zero_top(&mut self) {
        self.top_mut().iter_mut().for_each(|d| *d = 0.0);
    }

    /// Scales the top frame by `k` (0 when `k` is 0, whatever the frame holds).
    fn scale_top(&mut self, k: f64) {
        if k == 0.0 {
            self.zero_top();
        } else {
            self.top_mut().iter_mut().for_each(|d| *d *= k);
        }
    }

    pub(super) fn exec(&mut self, stmts: &[Stmt]) -> Result<(), OutOfSteps> {
        for s in stmts {
            self.exec_one(s)?;
        }
        Ok(())
    }

    fn exec_one(&mut self, s: &Stmt) -> Result<(), OutOfSteps> {
        match s {
            Stmt::Assign(slot, ty, e) => {
                let v = self.eval(e);
                self.slots[*slot] = v.to(*ty);
                let (np, n) = (self.np, self.stack.len());
                if *ty == Ty::Int {
                    self.dots[slot * np..(slot + 1) * np].iter_mut().for_each(|d| *d = 0.0);
                } else {
                    self.dots[slot * np..(slot + 1) * np].copy_from_slice(&self.stack[n - np..]);
                }
                self.pop();
            }
            Stmt::If(c, then, els) => {
                if self.test(c) {
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
                if cond.as_ref().is_some_and(|c| !self.test(c)) {
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

    /// The truth of `e`, leaving the stack as it was.
    fn test(&mut self, e: &Expr) -> bool {
        let v = self.eval(e);
        self.pop();
        v.truthy()
    }

    /// The value of `e`, its derivatives pushed as a frame.
    pub(super) fn eval(&mut self, e: &Expr) -> Value {
        match e {
            Expr::Const(v) => {
                self.push_zero();
                *v
            }
            Expr::Var(slot) => {
                let np = self.np;
                self.stack.extend_from_slice(&self.dots[slot * np..(slot + 1) * np]);
                self.slots[*slot]
            }
            Expr::Index(array, i) => {
                let k = self.eval(i).as_int();
                self.zero_top();
                Value::Int(wrapped(self.arrays[*array], k))
            }
            Expr::Convert(ty, a) => {
                let v = self.eval(a).to(*ty);
                if *ty == Ty::Int {
                    self.zero_top();
                }
                v
            }
            Expr::Neg(a) => {
                let v = match self.eval(a) {
                    Value::Int(i) => Value::Int(i.wrapping_neg()),
                    Value::Float(f) => Value::Float(-f),
                    Value::Double(x) => Value::Double(-x),
                };
                self.scale_top(-1.0);
                v
            }
            Expr::BitNot(a) => {
                let v = Value::Int(!self.eval(a).as_int());
                self.zero_top();
                v
            }
            Expr::Not(a) => {
                let v = Value::Int(i32::from(!self.eval(a).truthy()));
                self.zero_top();
                v
            }
            Expr::Chain(first, rest) => {
                let mut acc = self.eval(first);
                for (op, e) in rest {
                    acc = match op {
                        Bin::Arith(o) => {
                            let b = self.eval(e);
                            let v = arith(*o, acc, b);
                            if v.ty() == Ty::Int {
                                self.pop();
                                self.zero_top();
                            } else {
                                self.combine(*o, acc.to_f64(), b.to_f64());
                            }
                            v
                        }
                        Bin::Int(o) => {
                            let b = self.eval(e).as_int();
                            self.pop();
                            self.zero_top();
                            Value::Int(int_op(*o, acc.as_int(), b))
                        }
                        Bin::Cmp(o) => {
                            let b = self.eval(e);
                            self.pop();
                            self.zero_top();
                            Value::Int(i32::from(compare(*o, acc, b)))
                        }
                        Bin::And => {
                            let v = acc.truthy() && self.test(e);
                            self.zero_top();
                            Value::Int(i32::from(v))
                        }
                        Bin::Or => {
                            let v = acc.truthy() || self.test(e);
                            self.zero_top();
                            Value::Int(i32::from(v))
                        }
                    };
                }
                acc
            }
            Expr::Cond(c, a, b) => {
                if self.test(c) {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
            Expr::Call1(f, ty, a) => {
                let x = self.eval(a);
                let v = call1(*f, *ty, x);
                self.scale_top(fn1_slope(*f, *ty, x.to_f64(), v.to_f64()));
                v
            }
            Expr::Call2(f, ty, a, b) => {
                let x = self.eval(a);
                let y = self.eval(b);
                let v = call2(*f, *ty, x, y);
                let (sx, sy) = fn2_slopes(*f, *ty, x.to_f64(), y.to_f64(), v.to_f64());
                self.mix(sx, sy);
                v
            }
        }
    }

    /// Replaces the top two frames `da`, `db` (of `a` below `b`) by the derivatives of `a op b`.
    fn combine(&mut self, op: ArithOp, a: f64, b: f64) {
        match op {
            ArithOp::Add => self.mix(1.0, 1.0),
            ArithOp::Sub => self.mix(1.0, -1.0),
            ArithOp::Mul => self.mix(b, a),
            ArithOp::Div => self.mix(1.0 / b, -a / (b * b)),
        }
    }

    /// Replaces the top two frames `da`, `db` by `sa·da + sb·db` (a slope of 0 ignores its frame,
    /// so an infinite derivative where the slope is 0 does not make NaN).
    fn mix(&mut self, sa: f64, sb: f64) {
        let (np, n) = (self.np, self.stack.len());
        let (lower, upper) = self.stack[n - 2 * np..].split_at_mut(np);
        for (a, b) in lower.iter_mut().zip(upper.iter()) {
            let left = if sa == 0.0 { 0.0 } else { sa * *a };
            let right = if sb == 0.0 { 0.0 } else { sb * *b };
            *a = left + right;
        }
        self.pop();
    }
}

/// d f(x) / dx where `v = f(x)` is computed in `ty`: the slopes of `sinf` and `cosf` are taken
/// in float as the functions are (`cosf`, `-sinf`), those of `sin` and `cos` in double.
pub(super) fn fn1_slope(f: Fn1, ty: Ty, x: f64, v: f64) -> f64 {
    match f {
        Fn1::Sin if ty == Ty::Float => f64::from(super::trig::cosf(x as f32)),
        Fn1::Cos if ty == Ty::Float => -f64::from(super::trig::sinf(x as f32)),
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

/// The partial derivatives of `v = f(x, y)` computed in `ty`.
pub(super) fn fn2_slopes(f: Fn2, ty: Ty, x: f64, y: f64, v: f64) -> (f64, f64) {
    match f {
        Fn2::Pow => (y * x.powf(y - 1.0), if x > 0.0 { v * x.ln() } else { 0.0 }),
        // NaN loses to a number in fmin/fmax, as C's do.
        Fn2::Fmin | Fn2::Fmax if v == x || y.is_nan() => (1.0, 0.0),
        Fn2::Fmin | Fn2::Fmax => (0.0, 1.0),
        // `/`'s slopes where it divides; the constant 1 elsewhere (NaN `y` included).
        Fn2::Pdiv if pdiv_divides(ty, y) => (1.0 / y, -x / (y * y)),
        Fn2::Pdiv => (0.0, 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::run::{fn2_f32, fn2_f64};

    /// Central differences of `f` at `(x, y)` along each argument, in double.
    fn differences(f: impl Fn(f64, f64) -> f64, x: f64, y: f64) -> (f64, f64) {
        let h = 1e-7 * y.abs().max(1e-3);
        ((f(x + h, y) - f(x - h, y)) / (2.0 * h), (f(x, y + h) - f(x, y - h)) / (2.0 * h))
    }

    /// `pdiv`'s slopes are `/`'s where it divides, as finite differences find them, and zero
    /// where it is the constant 1: at 0, below the threshold, at NaN.
    #[test]
    fn protected_division_has_the_slopes_of_division_past_its_threshold_and_none_below() {
        let pdiv = |x: f64, y: f64| fn2_f64(Fn2::Pdiv, x, y);
        for (x, y) in [(1.5, -0.002), (-3.0, 0.0015), (2.0, 0.75), (0.25, -40.0), (7.0, 0.0011)] {
            let v = pdiv(x, y);
            assert_eq!(v, x / y);
            for ty in [Ty::Float, Ty::Double] {
                let (sx, sy) = fn2_slopes(Fn2::Pdiv, ty, x, y, v);
                assert_eq!((sx, sy), (1.0 / y, -x / (y * y)), "{ty:?} ({x}, {y})");
                let (dx, dy) = differences(pdiv, x, y);
                assert!((sx - dx).abs() <= 1e-5 * sx.abs(), "d/dx at ({x}, {y}): {sx} against {dx}");
                assert!((sy - dy).abs() <= 1e-5 * sy.abs(), "d/dy at ({x}, {y}): {sy} against {dy}");
            }
        }
        for y in [0.0, -0.0, 0.0005, -0.0005, 0.001, -0.001, f64::NAN] {
            for ty in [Ty::Float, Ty::Double] {
                assert_eq!(fn2_slopes(Fn2::Pdiv, ty, 2.0, y, 1.0), (0.0, 0.0), "{ty:?} at {y}");
            }
            if y.abs() < 0.001 {
                let (dx, dy) = differences(pdiv, 2.0, y);
                assert_eq!((dx, dy), (0.0, 0.0), "at {y}");
            }
        }
        // At 0.001f the float form is the constant, the double form divides.
        let b = f64::from(0.001f32);
        assert_eq!(f64::from(fn2_f32(Fn2::Pdiv, 2.0, 0.001)), 1.0);
        assert_eq!(fn2_slopes(Fn2::Pdiv, Ty::Float, 2.0, b, 1.0), (0.0, 0.0));
        assert_eq!(fn2_slopes(Fn2::Pdiv, Ty::Double, 2.0, b, 2.0 / b), (1.0 / b, -2.0 / (b * b)));
    }
}
