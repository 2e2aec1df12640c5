//! The interpreter kernel's CUDA C, generated for one problem: its inputs as the compiled
//! kernels take them, its variable slots, its outputs and its fitness.
//!
//! One block of [`crate::gpu::BLOCK`] threads per program. Thread `l` runs the program on cases
//! `l`, `l + 256`, `l + 512`, ... in turn and adds each case's fitness term to its own `double`
//! as it goes; the block then sums the 256 partial sums pairwise, exactly as the fitness kernel
//! of the compiled routes sums its slabs ([`crate::gpu::fitness_source`]). Each case's outputs
//! are the compiled kernel's, op for op, so the fitness is the same bits. A program whose loop
//! runs past the step limit in any case gets NaN, which the engine scores as the worst fitness.

use std::fmt::Write as _;

use gpfarm_gp::Problem;
use gpfarm_gp::interp::tree::{Source, Ty};
use gpfarm_gp::problem::{InputType, ParamRole, ScalarType};

use super::bytecode::{MAX_DEPTH, Op, array_layout, slot_layout};
use crate::gpu::{BLOCK, GpuError, fitness_term};

/// The kernel for programs whose stack is at most [`SMALL_DEPTH`] cells deep.
pub const INTERP_KERNEL_SMALL: &str = "gpfarm_interpret_small";
/// The kernel for deeper programs (up to [`MAX_DEPTH`]).
pub const INTERP_KERNEL_LARGE: &str = "gpfarm_interpret_large";
/// The stack of [`INTERP_KERNEL_SMALL`], in cells.
pub const SMALL_DEPTH: usize = 32;

/// CUDA C of the interpreter for `problem`. Its parameters, in order: one pointer per input
/// parameter of the problem's compiled kernels (inputs and `int[]` lengths, in
/// [`Problem::kernel_params`] order), the targets, `int ncases`, the programs' words, the word
/// offset of each program, the step limit per case (`unsigned long long`), and one `double`
/// of fitness per program.
pub fn interpreter_source(problem: &Problem) -> Result<String, GpuError> {
    let spec = problem.spec();
    let params = problem.kernel_params();
    let mut decl = Vec::new();
    let mut args = Vec::new();
    for p in &params {
        if matches!(p.role, ParamRole::Input(_) | ParamRole::Lengths(_)) {
            decl.push(format!("{} __restrict__ {}", p.c_type, p.name));
            args.push(p.name.clone());
        }
    }
    decl.push(format!("const {}* __restrict__ target", spec.target.ty.c_name()));
    decl.push("int ncases".into());
    decl.push("const unsigned* __restrict__ code".into());
    decl.push("const unsigned* __restrict__ offsets".into());
    decl.push("unsigned long long max_steps".into());
    decl.push("double* __restrict__ fitness".into());
    args.extend(["target", "ncases", "code", "offsets", "max_steps", "fitness"].map(String::from));
    let decl = decl.join(", ");
    let args = args.join(", ");

    let name_of = |role: ParamRole| {
        params.iter().find(|p| p.role == role).map(|p| p.name.clone()).ok_or_else(|| {
            GpuError::Problem(format!("problem `{}` has no kernel parameter for {role:?}", problem.name()))
        })
    };
    // Variable slots, set for each case as the compiled kernel sets its variables.
    let layout = slot_layout(problem);
    let mut init = String::new();
    for (k, (src, ty)) in layout.iter().enumerate() {
        let field = field(*ty);
        let value = match src {
            Source::Input(i) => format!("{}[c]", name_of(ParamRole::Input(*i))?),
            Source::Length(i) => format!("{}[c]", name_of(ParamRole::Lengths(*i))?),
            Source::CaseBit(bit) => format!("(c >> {bit}) & 1"),
            Source::Zero(_) => "0".to_owned(),
        };
        if matches!(src, Source::Zero(_)) {
            writeln!(init, "        vars[{k}].d = 0.0;").ok();
        } else {
            writeln!(init, "        vars[{k}].{field} = {value};").ok();
        }
    }
    // The wrapped read of each int array, as the template's `gp_wrapped_ints` reads it.
    let mut read = String::from("    auto gpfarm_read = [&](unsigned a, int k, int c) -> int {\n");
    for (j, &i) in array_layout(problem).iter().enumerate() {
        let input = &spec.inputs[i];
        debug_assert_eq!(input.ty, InputType::IntArray);
        let data = name_of(ParamRole::Input(i))?;
        let lens = name_of(ParamRole::Lengths(i))?;
        let max = input.max_len.unwrap_or(0);
        writeln!(
            read,
            "        if (a == {j}u) {{\n            const int len = {lens}[c];\n            if (len <= 0) return 0;\n            int m = k % len;\n            if (m < 0) m += len;\n            return {data}[c * {max} + m];\n        }}"
        )
        .ok();
    }
    read.push_str("        return 0;\n    };\n");

    let outputs = &spec.outputs;
    let (term, finish) = fitness_term(problem, &|k| {
        let f = match outputs[k].ty {
            ScalarType::Int => "i",
            ScalarType::Float => "f",
        };
        format!("out[{k}].{f}")
    })?;
    let mut cases = String::new();
    for (code, op) in Op::ALL.iter().enumerate() {
        writeln!(cases, "            case {code}: {} break; // {op:?}", op.cuda()).ok();
    }
    let nslots = layout.len().max(1);
    let nout = outputs.len().max(1);
    Ok(format!(
        "// gpfarm interpreter for problem `{problem}`\n\
union V {{ int i; float f; double d; }};\n\n\
template <int DEPTH>\n\
__device__ __forceinline__ void gpfarm_interpret({decl})\n{{\n\
    __shared__ double part[{BLOCK}];\n\
    const unsigned* __restrict__ prog = code + offsets[blockIdx.x];\n\
{read}\
    double s = 0.0;\n\
    int failed = 0;\n\
    for (int c = threadIdx.x; c < ncases; c += blockDim.x) {{\n\
        V vars[{nslots}];\n\
        V out[{nout}];\n\
        V st[DEPTH + 1];\n\
{init}\
        for (int k = 0; k < {nout}; ++k) out[k].d = 0.0;\n\
        st[0].d = 0.0;\n\
        V t;\n\
        t.d = 0.0;\n\
        int sp = 1;\n\
        unsigned pc = 0;\n\
        unsigned long long steps = 0;\n\
        for (;;) {{\n\
            const unsigned w = prog[pc++];\n\
            const unsigned arg = w >> 8;\n\
            switch (w & 0xffu) {{\n\
{cases}\
            default: failed = 1; goto finished;\n\
            }}\n\
        }}\n\
    finished:\n\
        if (failed) break;\n\
        {{\n\
        {term}\n\
        }}\n\
    }}\n\
    const int any_failed = __syncthreads_or(failed);\n\
    part[threadIdx.x] = s;\n\
    __syncthreads();\n\
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {{\n\
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];\n\
        __syncthreads();\n\
    }}\n\
    if (threadIdx.x == 0) fitness[blockIdx.x] = any_failed ? __longlong_as_double(0x7ff8000000000000LL) : {finish};\n\
}}\n\n\
extern \"C\" __global__ void __launch_bounds__({BLOCK}) {INTERP_KERNEL_SMALL}({decl})\n\
{{\n    gpfarm_interpret<{SMALL_DEPTH}>({args});\n}}\n\n\
extern \"C\" __global__ void __launch_bounds__({BLOCK}) {INTERP_KERNEL_LARGE}({decl})\n\
{{\n    gpfarm_interpret<{MAX_DEPTH}>({args});\n}}\n",
        problem = problem.name(),
    ))
}

fn field(ty: Ty) -> &'static str {
    match ty {
        Ty::Int => "i",
        Ty::Float => "f",
        Ty::Double => "d",
    }
}
