//! Executes a compiled program on one case. Must never allocate per operation or
//! recurse deeper than the parser allowed, and must stop any loop that runs past the
//! step limit.

use super::parse::{ArithOp, Bin, CmpOp, Expr, Fn1, Fn2, IntOp, Stmt};
use super::value::{Pair, Ty, Value, int_div, int_rem, shl, shr};

/// The state of one case: variable slots and the case's int arrays.
pub(super) struct Machine<'a> {
    pub slots: Vec<Value>,
    pub arrays: Vec<&'a [i32]>,
    pub steps: u64,
    pub max_steps: u64,
}

/// The step limit was hit.
pub(super) struct OutOfSteps;

impl Machine<'_> {
    pub(super) fn exec(&mut self, stmts: &[Stmt]) -> Result<(), OutOfSteps> {
        for s in stmts {
            self.exec_one(s)?;
        }
        Ok(())
    }

    fn exec_one(&mut self, s: &Stmt) -> Result<(), OutOfSteps> {
        match s {
            Stmt::Assign(slot, ty, e) => {
                let v = self.eval(e).to(*ty);
                self.slots[*slot] = v;
            }
            Stmt::If(c, then, els) => {
                if self.eval(c).truthy() {
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
                if cond.as_ref().is_some_and(|c| !self.eval(c).truthy()) {
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

    pub(super) fn eval(&self, e: &Expr) -> Value {
        match e {
            Expr::Const(v) => *v,
            Expr::Var(slot) => self.slots[*slot],
            Expr::Index(array, i) => Value::Int(wrapped(self.arrays[*array], self.eval(i).as_int())),
            Expr::Convert(ty, a) => self.eval(a).to(*ty),
            Expr::Neg(a) => match self.eval(a) {
                Value::Int(i) => Value::Int(i.wrapping_neg()),
                Value::Float(f) => Value::Float(-f),
                Value::Double(d) => Value::Double(-d),
            },
            Expr::BitNot(a) => Value::Int(!self.eval(a).as_int()),
            Expr::Not(a) => Value::Int(i32::from(!self.eval(a).truthy())),
            Expr::Chain(first, rest) => {
                let mut acc = self.eval(first);
                for (op, e) in rest {
                    acc = match op {
                        Bin::Arith(o) => arith(*o, acc, self.eval(e)),
                        Bin::Int(o) => Value::Int(int_op(*o, acc.as_int(), self.eval(e).as_int())),
                        Bin::Cmp(o) => Value::Int(i32::from(compare(*o, acc, self.eval(e)))),
                        Bin::And => Value::Int(i32::from(acc.truthy() && self.eval(e).truthy())),
                        Bin::Or => Value::Int(i32::from(acc.truthy() || self.eval(e).truthy())),
                    };
                }
                acc
            }
            Expr::Cond(c, a, b) => {
                if self.eval(c).truthy() {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
            Expr::Call1(f, ty, a) => call1(*f, *ty, self.eval(a)),
            Expr::Call2(f, ty, a, b) => call2(*f, *ty, self.eval(a), self.eval(b)),
        }
    }
}

/// The index rule of the templates' array reads: `k` wrapped into `[0, len)`; an empty
/// array reads 0.
pub fn wrapped(data: &[i32], k: i32) -> i32 {
    let n = data.len() as i32;
    if n <= 0 {
        return 0;
    }
    let mut m = k.wrapping_rem(n);
    if m < 0 {
        m += n;
    }
    data.get(m as usize).copied().unwrap_or(0)
}

/// `f(a)` computed in `ty`.
pub(super) fn call1(f: Fn1, ty: Ty, a: Value) -> Value {
    match a.to(ty) {
        Value::Double(x) => Value::Double(fn1_f64(f, x)),
        Value::Float(x) => Value::Float(fn1_f32(f, x)),
        // Arguments are converted to float or double when compiled.
        Value::Int(x) => Value::Double(fn1_f64(f, f64::from(x))),
    }
}

/// `f(a, b)` computed in `ty`.
pub(super) fn call2(f: Fn2, ty: Ty, a: Value, b: Value) -> Value {
    match (a.to(ty), b.to(ty)) {
        (Value::Float(x), Value::Float(y)) => Value::Float(fn2_f32(f, x, y)),
        (x, y) => match Value::promote(x, y) {
            Pair::Double(x, y) => Value::Double(fn2_f64(f, x, y)),
            Pair::Float(x, y) => Value::Float(fn2_f32(f, x, y)),
            Pair::Int(x, y) => Value::Double(fn2_f64(f, f64::from(x), f64::from(y))),
        },
    }
}

pub(super) fn int_op(op: IntOp, x: i32, y: i32) -> i32 {
    match op {
        IntOp::Rem => int_rem(x, y),
        IntOp::And => x & y,
        IntOp::Or => x | y,
        IntOp::Xor => x ^ y,
        IntOp::Shl => shl(x, y),
        IntOp::Shr => shr(x, y),
    }
}

pub(super) fn arith(op: ArithOp, a: Value, b: Value) -> Value {
    match Value::promote(a, b) {
        Pair::Int(x, y) => Value::Int(match op {
            ArithOp::Add => x.wrapping_add(y),
            ArithOp::Sub => x.wrapping_sub(y),
            ArithOp::Mul => x.wrapping_mul(y),
            ArithOp::Div => int_div(x, y),
        }),
        Pair::Float(x, y) => Value::Float(match op {
            ArithOp::Add => x + y,
            ArithOp::Sub => x - y,
            ArithOp::Mul => x * y,
            ArithOp::Div => x / y,
        }),
        Pair::Double(x, y) => Value::Double(match op {
            ArithOp::Add => x + y,
            ArithOp::Sub => x - y,
            ArithOp::Mul => x * y,
            ArithOp::Div => x / y,
        }),
    }
}

pub(super) fn compare(op: CmpOp, a: Value, b: Value) -> bool {
    fn cmp<T: PartialOrd>(op: CmpOp, x: T, y: T) -> bool {
        match op {
            CmpOp::Lt => x < y,
            CmpOp::Gt => x > y,
            CmpOp::Le => x <= y,
            CmpOp::Ge => x >= y,
            CmpOp::Eq => x == y,
            CmpOp::Ne => x != y,
        }
    }
    match Value::promote(a, b) {
        Pair::Int(x, y) => cmp(op, x, y),
        Pair::Float(x, y) => cmp(op, x, y),
        Pair::Double(x, y) => cmp(op, x, y),
    }
}

pub(super) fn fn1_f32(f: Fn1, x: f32) -> f32 {
    match f {
        Fn1::Sin => super::trig::sinf(x),
        Fn1::Cos => super::trig::cosf(x),
        Fn1::Exp => x.exp(),
        Fn1::Log => x.ln(),
        Fn1::Sqrt => x.sqrt(),
        Fn1::Fabs => x.abs(),
        Fn1::Tanh => x.tanh(),
    }
}

pub(crate) fn fn1_f64(f: Fn1, x: f64) -> f64 {
    match f {
        Fn1::Sin => x.sin(),
        Fn1::Cos => x.cos(),
        Fn1::Exp => x.exp(),
        Fn1::Log => x.ln(),
        Fn1::Sqrt => x.sqrt(),
        Fn1::Fabs => x.abs(),
        Fn1::Tanh => x.tanh(),
    }
}

pub(crate) fn fn2_f32(f: Fn2, x: f32, y: f32) -> f32 {
    match f {
        Fn2::Pow => x.powf(y),
        Fn2::Fmin => x.min(y),
        Fn2::Fmax => x.max(y),
        Fn2::Pdiv if pdiv_divides(Ty::Float, f64::from(y)) => x / y,
        Fn2::Pdiv => 1.0,
    }
}

pub(crate) fn fn2_f64(f: Fn2, x: f64, y: f64) -> f64 {
    match f {
        Fn2::Pow => x.powf(y),
        Fn2::Fmin => x.min(y),
        Fn2::Fmax => x.max(y),
        Fn2::Pdiv if pdiv_divides(Ty::Double, y) => x / y,
        Fn2::Pdiv => 1.0,
    }
}

/// Whether `pdiv` computed in `ty` (float, else double) takes the quotient for the divisor `y`
/// (a value of that type): `fabsf(y) > 0.001f`, `fabs(y) > 0.001`. False for NaN. The two
/// thresholds differ: `0.001f` is a little above 0.001, so `pdivf(a, 0.001f)` is 1 where
/// `pdiv(a, (double)0.001f)` divides.
pub(super) fn pdiv_divides(ty: Ty, y: f64) -> bool {
    match ty {
        Ty::Float => (y as f32).abs() > 0.001f32,
        _ => y.abs() > 0.001,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pdivf(1, b)` and `pdiv(1, b)` at the threshold, around it, at 0 and NaN: the quotient
    /// only where `|b|` is above 0.001 in the operation's own type.
    #[test]
    fn protected_division_divides_only_past_its_threshold() {
        let float = |b: f32| fn2_f32(Fn2::Pdiv, 1.0, b);
        let double = |b: f64| fn2_f64(Fn2::Pdiv, 1.0, b);
        for b in [0.0f32, -0.0, 0.0005, -0.0005, 0.001, -0.001, f32::NAN, 1e-30] {
            assert_eq!(float(b), 1.0, "pdivf(1, {b})");
        }
        for b in [0.0, -0.0, 0.0005, -0.0005, 0.001, -0.001, f64::NAN, 1e-300] {
            assert_eq!(double(b), 1.0, "pdiv(1, {b})");
        }
        assert_eq!(float(-0.002), 1.0 / -0.002f32);
        assert_eq!(float(0.0011), 1.0 / 0.0011f32);
        assert_eq!(float(f32::INFINITY), 0.0);
        assert_eq!(fn2_f32(Fn2::Pdiv, 3.0, 7.0).to_bits(), (3.0f32 / 7.0).to_bits());
        assert_eq!(double(-0.002), 1.0 / -0.002);
        assert_eq!(double(0.001), 1.0);
        assert_eq!(double(0.0010000001), 1.0 / 0.0010000001);
        assert_eq!(double(0.0005), 1.0);
        assert_eq!(double(f64::NAN), 1.0);
        // 0.001f is just above 0.001: at it the float form gives 1 and the double form divides.
        let b = 0.001f32;
        assert!(f64::from(b) > 0.001);
        assert_eq!(float(b), 1.0);
        assert_eq!(double(f64::from(b)), 1.0 / f64::from(b));
        // The next float above 0.001f divides; a NaN numerator gives NaN past the threshold only.
        assert_eq!(float(f32::from_bits(b.to_bits() + 1)), 1.0 / f32::from_bits(b.to_bits() + 1));
        assert!(fn2_f32(Fn2::Pdiv, f32::NAN, 2.0).is_nan());
        assert_eq!(fn2_f32(Fn2::Pdiv, f32::NAN, 0.0), 1.0);
        // Through the evaluator's call: `pdiv` of two floats is the float form, of a float and
        // a double the double form.
        let v = call2(Fn2::Pdiv, Ty::Float, Value::Float(1.0), Value::Float(b));
        assert_eq!(v, Value::Float(1.0));
        let v = call2(Fn2::Pdiv, Ty::Double, Value::Float(1.0), Value::Float(b));
        assert_eq!(v, Value::Double(1.0 / f64::from(b)));
    }

    #[test]
    fn negative_indices_wrap_to_the_end() {
        let a = [10, 20, 30];
        assert_eq!(wrapped(&a, -1), 30);
        assert_eq!(wrapped(&a, -4), 30);
        assert_eq!(wrapped(&a, 4), 20);
        assert_eq!(wrapped(&a, i32::MIN), a[(i32::MIN % 3 + 3) as usize]);
        assert_eq!(wrapped(&[], 5), 0);
    }
}
