//! Constant folding as NVVM (LLVM's constant folder) does it when NVRTC compiles the standard
//! harness: the PTX route and the interpreter fold the same subexpressions the same way, so all
//! three routes give the same bits. Arithmetic folded here rounds as the GPU's `.rn` instruction
//! would; what matters is the math functions, whose folded value (the host's double-precision
//! function, rounded once) can differ in the last bit from CUDA's function at run time.

use gpfarm_gp::program::tree::{ArithOp, Ty, Value};

/// `a op b` computed here when both are constants: IEEE arithmetic rounds the same on the host
/// as `.rn` on the GPU, and int `+ - *` wrap alike. Int division is left to the GPU (its result
/// for a zero divisor is the hardware's). NVVM folds constant subexpressions too; folding them
/// matters because a folded constant can reach a math function, which NVVM folds.
pub(crate) fn arith(op: ArithOp, x: Value, y: Value) -> Option<Value> {
    Some(match (op, x, y) {
        (ArithOp::Add, Value::Int(x), Value::Int(y)) => Value::Int(x.wrapping_add(y)),
        (ArithOp::Sub, Value::Int(x), Value::Int(y)) => Value::Int(x.wrapping_sub(y)),
        (ArithOp::Mul, Value::Int(x), Value::Int(y)) => Value::Int(x.wrapping_mul(y)),
        (ArithOp::Div, Value::Int(_), Value::Int(_)) => return None,
        (ArithOp::Add, Value::Float(x), Value::Float(y)) => Value::Float(x + y),
        (ArithOp::Sub, Value::Float(x), Value::Float(y)) => Value::Float(x - y),
        (ArithOp::Mul, Value::Float(x), Value::Float(y)) => Value::Float(x * y),
        (ArithOp::Div, Value::Float(x), Value::Float(y)) => Value::Float(x / y),
        (ArithOp::Add, Value::Double(x), Value::Double(y)) => Value::Double(x + y),
        (ArithOp::Sub, Value::Double(x), Value::Double(y)) => Value::Double(x - y),
        (ArithOp::Mul, Value::Double(x), Value::Double(y)) => Value::Double(x * y),
        (ArithOp::Div, Value::Double(x), Value::Double(y)) => Value::Double(x / y),
        _ => return None,
    })
}

/// A math function of constant arguments, folded as NVVM folds it: the host's double-precision
/// function of the arguments widened to double, rounded once to the call's type. LLVM does not
/// fold when the host raises an exception other than inexact (invalid, division by zero,
/// overflow, underflow); those calls are left to run on the GPU, recognised by a result that is
/// not finite or is subnormal (or zero from a nonzero exact result's underflow, for `exp` and
/// `pow`). `sqrt`, `fabs`, `fmin`, `fmax` are exact either way. `pdiv` is no library call but
/// every unit's inline function (a comparison, a division and a select, which NVVM folds whatever
/// the operands): it is computed in its own type, always. `name` is the base name (`sin` for
/// `sinf` and `sin`); the type is `ty`.
pub(crate) fn call(name: &str, ty: Ty, args: &[Value]) -> Option<Value> {
    if name == "pdiv" {
        return match (ty, args) {
            (Ty::Float, [Value::Float(x), Value::Float(y)]) => {
                Some(Value::Float(if y.abs() > 0.001f32 { x / y } else { 1.0 }))
            }
            (Ty::Double, [Value::Double(x), Value::Double(y)]) => {
                Some(Value::Double(if y.abs() > 0.001 { x / y } else { 1.0 }))
            }
            _ => None,
        };
    }
    let mut xs = [0.0f64; 2];
    for (x, a) in xs.iter_mut().zip(args) {
        *x = match *a {
            Value::Float(f) => f64::from(f),
            Value::Double(d) => d,
            Value::Int(_) => return None,
        };
        if !x.is_finite() {
            return None;
        }
    }
    let [x, y] = xs;
    let r = match name {
        "sin" => x.sin(),
        "cos" => x.cos(),
        "exp" => x.exp(),
        "log" => x.ln(),
        "tanh" => x.tanh(),
        "pow" => x.powf(y),
        "sqrt" => {
            // Exact in both types: computed in the call's own type.
            return match ty {
                Ty::Float => (x >= 0.0).then(|| Value::Float((x as f32).sqrt())),
                _ => (x >= 0.0).then(|| Value::Double(x.sqrt())),
            };
        }
        "fabs" => x.abs(),
        "fmin" => x.min(y),
        "fmax" => x.max(y),
        _ => return None,
    };
    let underflow = r != 0.0 && r.abs() < f64::MIN_POSITIVE || r == 0.0 && matches!(name, "exp" | "pow");
    if !r.is_finite() || underflow {
        return None;
    }
    Some(match ty {
        Ty::Float => Value::Float(r as f32),
        _ => Value::Double(r),
    })
}
