//! The math functions of the PTX route: CUDA's own implementations, compiled once per compiler
//! (daemon or in-process) by NVRTC into a relocatable CUBIN that every PTX unit is linked with.
//! A PTX unit declares the ones it calls (`.extern .func`, [`MathFn::ptx_extern`]) by the symbols
//! listed here, so both sides of the link take their names and signatures from this one table.
//!
//! `sqrtf`, `fabsf`, `fminf`, `fmaxf` and their double forms need no library: the emitter writes
//! the single PTX instruction NVRTC writes for them (`sqrt.rn`, `abs`, `min`, `max`). Nor does
//! protected division, `pdivf`/`pdiv`: the emitter writes it as `abs`, `setp.gt`, `div.rn` and
//! `selp`.

/// A floating type of a math function's arguments and result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathTy {
    /// `float`, PTX `.f32`.
    F32,
    /// `double`, PTX `.f64`.
    F64,
}

impl MathTy {
    /// The C type's name.
    pub fn c_name(self) -> &'static str {
        match self {
            MathTy::F32 => "float",
            MathTy::F64 => "double",
        }
    }

    /// The PTX type (`f32`, `f64`) without the dot.
    pub fn ptx(self) -> &'static str {
        match self {
            MathTy::F32 => "f32",
            MathTy::F64 => "f64",
        }
    }

    /// The PTX type of a parameter or result of this type in a `.func` prototype (`b32`, `b64`)
    /// without the dot: the untyped bits NVRTC declares the library's functions with. A unit that
    /// declares them `.f32`/`.f64` still links, but nvJitLink prints "Prototype doesn't match"
    /// on stderr for every such function, every time.
    pub fn ptx_param(self) -> &'static str {
        match self {
            MathTy::F32 => "b32",
            MathTy::F64 => "b64",
        }
    }
}

/// One library function: `symbol(args) = c_function(args)` in type `ty`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MathFn {
    /// The function's name in the library and in PTX units (`gpm_sinf`).
    pub symbol: &'static str,
    /// The CUDA function it wraps (`sinf`).
    pub c_function: &'static str,
    /// Argument and result type.
    pub ty: MathTy,
    /// Number of arguments (1 or 2).
    pub arity: u8,
}

impl MathFn {
    /// The declaration a PTX unit that calls this function carries, exactly as the library
    /// defines it: `.extern .func (.param .b32 r) gpm_sinf (.param .b32 a);`. Loads and stores
    /// of the parameters stay typed (`st.param.f32`).
    pub fn ptx_extern(&self) -> String {
        let p = self.ty.ptx_param();
        let params =
            if self.arity == 1 { format!(".param .{p} a") } else { format!(".param .{p} a, .param .{p} b") };
        format!(".extern .func (.param .{p} r) {} ({params});", self.symbol)
    }
}

const fn f(symbol: &'static str, c_function: &'static str, ty: MathTy, arity: u8) -> MathFn {
    MathFn { symbol, c_function, ty, arity }
}

/// Every function of the library.
pub const FUNCTIONS: &[MathFn] = &[
    f("gpm_sinf", "sinf", MathTy::F32, 1),
    f("gpm_cosf", "cosf", MathTy::F32, 1),
    f("gpm_expf", "expf", MathTy::F32, 1),
    f("gpm_logf", "logf", MathTy::F32, 1),
    f("gpm_tanhf", "tanhf", MathTy::F32, 1),
    f("gpm_powf", "powf", MathTy::F32, 2),
    f("gpm_sin", "sin", MathTy::F64, 1),
    f("gpm_cos", "cos", MathTy::F64, 1),
    f("gpm_exp", "exp", MathTy::F64, 1),
    f("gpm_log", "log", MathTy::F64, 1),
    f("gpm_tanh", "tanh", MathTy::F64, 1),
    f("gpm_pow", "pow", MathTy::F64, 2),
];

/// The library function wrapping `c_function` (`"sinf"`, `"pow"`), if there is one.
pub fn find(c_function: &str) -> Option<&'static MathFn> {
    FUNCTIONS.iter().find(|m| m.c_function == c_function)
}

/// NVRTC options the library is compiled with, besides the architecture: relocatable device
/// code, and no contraction of `a * b + c` into one FMA (the PTX route rounds every operation,
/// so the NVRTC route is compiled without contraction too, and the library must match both).
pub const LIBRARY_FLAGS: &[&str] = &["-rdc=true", "--fmad=false"];

/// The library's CUDA C source: one `extern "C" __device__` wrapper per function.
pub fn library_source() -> String {
    let mut s = String::from("// gpfarm's PTX-route math library: CUDA's own functions, one wrapper each.\n");
    for m in FUNCTIONS {
        let t = m.ty.c_name();
        let (params, args) = if m.arity == 1 {
            (format!("{t} a"), "a".to_owned())
        } else {
            (format!("{t} a, {t} b"), "a, b".to_owned())
        };
        s.push_str(&format!(
            "extern \"C\" __device__ __noinline__ {t} {}({params}) {{ return {}({args}); }}\n",
            m.symbol, m.c_function
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symbol_is_unique_and_in_the_source() {
        let source = library_source();
        for (i, m) in FUNCTIONS.iter().enumerate() {
            assert!(FUNCTIONS[i + 1..].iter().all(|o| o.symbol != m.symbol && o.c_function != m.c_function));
            assert!(source.contains(&format!(" {}(", m.symbol)), "{}", m.symbol);
            assert_eq!(find(m.c_function), Some(m));
        }
        assert!(source.contains(
            "extern \"C\" __device__ __noinline__ float gpm_powf(float a, float b) { return powf(a, b); }"
        ));
        assert_eq!(
            find("sinf").unwrap().ptx_extern(),
            ".extern .func (.param .b32 r) gpm_sinf (.param .b32 a);"
        );
        assert_eq!(
            find("pow").unwrap().ptx_extern(),
            ".extern .func (.param .b64 r) gpm_pow (.param .b64 a, .param .b64 b);"
        );
    }
}
