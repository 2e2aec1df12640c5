//! Values and types of the C subset, with C's conversions and the arithmetic the
//! evaluator defines where C leaves it undefined. Must never differ from what the
//! kernels compute on the GPU for any program the grammars can produce; where C is
//! undefined, the choice made here is stated.

/// A C arithmetic type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// 32-bit signed `int`.
    Int,
    /// `float`, f32.
    Float,
    /// `double`, f64.
    Double,
}

impl Ty {
    /// C's usual arithmetic conversions for two operands.
    pub fn usual(a: Ty, b: Ty) -> Ty {
        if a == Ty::Double || b == Ty::Double {
            Ty::Double
        } else if a == Ty::Float || b == Ty::Float {
            Ty::Float
        } else {
            Ty::Int
        }
    }
}

/// A runtime value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// An `int`.
    Int(i32),
    /// A `float`.
    Float(f32),
    /// A `double`.
    Double(f64),
}

/// Two operands after the usual arithmetic conversions.
pub(super) enum Pair {
    Int(i32, i32),
    Float(f32, f32),
    Double(f64, f64),
}

impl Value {
    /// Zero of type `ty`: every local and output starts here.
    pub(super) fn zero(ty: Ty) -> Value {
        match ty {
            Ty::Int => Value::Int(0),
            Ty::Float => Value::Float(0.0),
            Ty::Double => Value::Double(0.0),
        }
    }

    /// C conversion to `ty`. Floating to int truncates toward zero; out-of-range values
    /// saturate and NaN becomes 0, which is what CUDA's `cvt.rzi.s32` does.
    pub fn to(self, ty: Ty) -> Value {
        match (self, ty) {
            (Value::Int(_), Ty::Int) | (Value::Float(_), Ty::Float) | (Value::Double(_), Ty::Double) => self,
            (Value::Int(i), Ty::Float) => Value::Float(i as f32),
            (Value::Int(i), Ty::Double) => Value::Double(f64::from(i)),
            (Value::Float(f), Ty::Int) => Value::Int(f as i32),
            (Value::Float(f), Ty::Double) => Value::Double(f64::from(f)),
            (Value::Double(d), Ty::Int) => Value::Int(d as i32),
            (Value::Double(d), Ty::Float) => Value::Float(d as f32),
        }
    }

    pub(super) fn as_int(self) -> i32 {
        match self.to(Ty::Int) {
            Value::Int(i) => i,
            _ => 0,
        }
    }

    /// C truth: nonzero (NaN is nonzero).
    pub(super) fn truthy(self) -> bool {
        match self {
            Value::Int(i) => i != 0,
            Value::Float(f) => f != 0.0,
            Value::Double(d) => d != 0.0,
        }
    }

    /// Its type.
    pub fn ty(self) -> Ty {
        match self {
            Value::Int(_) => Ty::Int,
            Value::Float(_) => Ty::Float,
            Value::Double(_) => Ty::Double,
        }
    }

    /// Both operands converted to their common type.
    pub(super) fn promote(a: Value, b: Value) -> Pair {
        match (a.to(Ty::usual(a.ty(), b.ty())), b.to(Ty::usual(a.ty(), b.ty()))) {
            (Value::Int(x), Value::Int(y)) => Pair::Int(x, y),
            (Value::Float(x), Value::Float(y)) => Pair::Float(x, y),
            (x, y) => Pair::Double(x.to_f64(), y.to_f64()),
        }
    }

    pub(super) fn to_f64(self) -> f64 {
        match self {
            Value::Int(i) => f64::from(i),
            Value::Float(f) => f64::from(f),
            Value::Double(d) => d,
        }
    }
}

/// Signed overflow wraps (C leaves it undefined; GPUs wrap). Division and remainder
/// by zero give 0 (undefined in C; no built-in grammar can produce them).
pub fn int_div(a: i32, b: i32) -> i32 {
    if b == 0 { 0 } else { a.wrapping_div(b) }
}

pub fn int_rem(a: i32, b: i32) -> i32 {
    if b == 0 { 0 } else { a.wrapping_rem(b) }
}

/// Shift counts outside 0..32 (undefined in C) are clamped as PTX `shl`/`shr` do:
/// everything shifted out, with the sign filling in for `>>`.
pub fn shl(a: i32, count: i32) -> i32 {
    let n = count as u32;
    if n >= 32 { 0 } else { ((a as u32) << n) as i32 }
}

pub fn shr(a: i32, count: i32) -> i32 {
    let n = count as u32;
    if n >= 32 { a >> 31 } else { a >> n }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_to_int_truncates_and_saturates_like_cuda() {
        assert_eq!(Value::Float(-2.9).as_int(), -2);
        assert_eq!(Value::Double(1e20).as_int(), i32::MAX);
        assert_eq!(Value::Float(f32::NEG_INFINITY).as_int(), i32::MIN);
        assert_eq!(Value::Float(f32::NAN).as_int(), 0);
    }

    #[test]
    fn mixing_float_and_double_computes_in_double() {
        assert!(matches!(Value::promote(Value::Float(1.0), Value::Double(2.0)), Pair::Double(..)));
        assert!(matches!(Value::promote(Value::Int(1), Value::Float(2.0)), Pair::Float(..)));
        assert!(matches!(Value::promote(Value::Int(1), Value::Int(2)), Pair::Int(..)));
    }

    #[test]
    fn undefined_int_cases_have_stated_results() {
        assert_eq!(int_div(7, 0), 0);
        assert_eq!(int_rem(7, 0), 0);
        assert_eq!(int_div(i32::MIN, -1), i32::MIN);
        assert_eq!(int_rem(-7, 3), -1);
        assert_eq!(shl(1, 32), 0);
        assert_eq!(shl(1, -1), 0);
        assert_eq!(shr(-8, 40), -1);
        assert_eq!(shr(8, 40), 0);
    }

    #[test]
    fn nan_is_true() {
        assert!(Value::Float(f32::NAN).truthy());
        assert!(!Value::Double(0.0).truthy());
    }
}
