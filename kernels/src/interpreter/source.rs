//! The interpreter kernel's CUDA C, generated for one problem: its inputs as the compiled
//! kernels take them, its variable slots, its outputs and its fitness.
//!
//! One block of [`crate::gpu::BLOCK`] threads per tile of [`crate::gpu::TILE`] cases (grid x)
//! and program (grid y). Thread `l` runs the program on cases `l`, `l + 256`, ... of its tile and
//! adds each case's fitness term to its own `double` in that order (a program with loops over
//! at most [`crate::gpu::BLOCK`] cases runs one case per warp instead, so that cases that loop
//! differently do not serialise one warp, and hands each case's term to its thread); the block then sums the 256
//! partial sums pairwise into the tile's sum, and [`crate::gpu::TILES_KERNEL`] sums the tiles,
//! exactly as the fitness kernel of the compiled routes sums its slabs
//! ([`crate::gpu::fitness_source`]). A program without jumps runs [`INTERLEAVE`] of the thread's
//! cases at once (one fetch and dispatch per op for all of them), still adding their terms in
//! case order. Each case's outputs are the compiled kernel's, op for op, so the fitness is the
//! same bits. A program whose loop runs past the step limit in any case gets NaN, which the
//! engine scores as the worst fitness; a case whose loop state repeats, or whose block already
//! has a failed case, fails at once, since it would fail anyway (`step_source`).

use std::fmt::Write as _;

use gpfarm_gp::Problem;
use gpfarm_gp::problem::{InputType, ParamRole, ScalarType};
use gpfarm_gp::program::tree::{Source, Ty};

use super::bytecode::{MAX_DEPTH, Op, array_layout, slot_layout, writable_slots};
use crate::gpu::contract::{INTERP_KERNEL_LARGE, INTERP_KERNEL_SMALL};
use crate::gpu::{BLOCK, GpuError, ROWS, TILE, block_sum, fitness_term, tiles_source};

/// Cases a thread runs at once, for programs without jumps, in [`INTERP_KERNEL_SMALL`].
pub const INTERLEAVE: usize = 4;
/// The stack of [`INTERP_KERNEL_SMALL`], in cells.
pub const SMALL_DEPTH: usize = 32;
/// [`Tuning::register_slots`] of the kernel gpfarm runs.
pub const REGISTER_SLOTS: usize = 4;

/// How the interpreter kernel is built: a setting for measuring it. Every tuning gives the same
/// bits; [`Tuning::default`] is the one gpfarm runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Cases a thread runs at once for programs without jumps in [`INTERP_KERNEL_SMALL`]: a
    /// divisor of a tile's rows ([`ROWS`]); 1 turns it off.
    pub interleave: usize,
    /// Blocks per multiprocessor asked of the compiler (`__launch_bounds__`), which caps the
    /// registers per thread; 0 leaves it to the compiler.
    pub min_blocks: u32,
    /// The most variable slots (and, apart, outputs) kept in registers: an op reaching slot
    /// `arg` picks it by comparing `arg` with each slot, rather than indexing an array the
    /// compiler must keep in local memory. 0 keeps them in local memory.
    pub register_slots: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning { interleave: INTERLEAVE, min_blocks: 0, register_slots: REGISTER_SLOTS }
    }
}

impl std::fmt::Display for Tuning {
    /// `4`, or `4b6s2`: cases at once, then `b` blocks per multiprocessor and `s` register
    /// slots where they differ from the default.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = Tuning::default();
        write!(f, "{}", self.interleave)?;
        if self.min_blocks != d.min_blocks {
            write!(f, "b{}", self.min_blocks)?;
        }
        if self.register_slots != d.register_slots {
            write!(f, "s{}", self.register_slots)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Tuning {
    type Err = String;

    /// Parses what [`Display`](std::fmt::Display) writes: `K[bN][sN]`.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "`{text}` is not a tuning: cases at once, then optionally bN (blocks) and sN (register slots), e.g. 4b6s2"
            )
        };
        let number = |s: &str| s.parse::<usize>().map_err(|_| bad());
        // The numbers, each after its letter (none before the first).
        let mut values = text.split(|c: char| c.is_ascii_alphabetic());
        let mut tuning = Tuning { interleave: number(values.next().unwrap_or(""))?, ..Tuning::default() };
        for (field, value) in text.chars().filter(char::is_ascii_alphabetic).zip(values) {
            let value = number(value)?;
            match field {
                'b' => tuning.min_blocks = u32::try_from(value).map_err(|_| bad())?,
                's' => tuning.register_slots = value,
                _ => return Err(bad()),
            }
        }
        Ok(tuning)
    }
}

/// CUDA C that sets each variable slot (`V vars[]`) for case `c` as the compiled kernel sets its
/// variables: inputs and `int[]` lengths from the problem's kernel parameters, case bits from `c`,
/// locals and outputs at zero; one line each, after `indent`. Shared by the interpreter and its
/// fitting kernels.
pub(super) fn slot_init(problem: &Problem, indent: &str) -> Result<String, GpuError> {
    let params = problem.kernel_params();
    let name_of = |role: ParamRole| {
        params.iter().find(|p| p.role == role).map(|p| p.name.clone()).ok_or_else(|| {
            GpuError::Problem(format!("problem `{}` has no kernel parameter for {role:?}", problem.name()))
        })
    };
    let mut init = String::new();
    for (k, (src, ty)) in slot_layout(problem).iter().enumerate() {
        let value = match src {
            Source::Input(i) => format!("{}[c]", name_of(ParamRole::Input(*i))?),
            Source::Length(i) => format!("{}[c]", name_of(ParamRole::Lengths(*i))?),
            Source::CaseBit(bit) => format!("(c >> {bit}) & 1"),
            // Zero, and parameters, which are never in a problem's layout (see `bytecode::assemble`).
            Source::Zero(_) | Source::Param(_) => {
                writeln!(init, "{indent}vars[{k}].d = 0.0;").ok();
                continue;
            }
        };
        writeln!(init, "{indent}vars[{k}].{} = {value};", field(*ty)).ok();
    }
    Ok(init)
}

/// CUDA C of the interpreter for `problem`. Its parameters, in order: one pointer per input
/// parameter of the problem's compiled kernels (inputs and `int[]` lengths, in
/// [`Problem::kernel_params`] order), the targets, `int ncases`, the programs' words, the word
/// offset of each program, the step limit per case (`unsigned long long`), and one `double`
/// of fitness per program.
pub fn interpreter_source(problem: &Problem) -> Result<String, GpuError> {
    interpreter_source_with(problem, Tuning::default())
}

/// As [`interpreter_source`], built with `tuning`. For measuring; every tuning gives the same
/// bits.
pub fn interpreter_source_with(problem: &Problem, tuning: Tuning) -> Result<String, GpuError> {
    let interleave = tuning.interleave;
    if interleave == 0 || !(ROWS as usize).is_multiple_of(interleave) {
        return Err(GpuError::Problem(format!("{interleave} cases per thread do not divide {ROWS}")));
    }
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
    decl.push("int ntiles".into());
    decl.push("double* __restrict__ partial".into());
    args.extend(["target", "ncases", "code", "offsets", "max_steps", "ntiles", "partial"].map(String::from));
    let decl = decl.join(", ");
    let args = args.join(", ");

    let name_of = |role: ParamRole| {
        params.iter().find(|p| p.role == role).map(|p| p.name.clone()).ok_or_else(|| {
            GpuError::Problem(format!("problem `{}` has no kernel parameter for {role:?}", problem.name()))
        })
    };
    let layout = slot_layout(problem);
    let init = slot_init(problem, "        ")?;
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
    let out_field = |k: usize| match outputs[k].ty {
        ScalarType::Int => "i",
        ScalarType::Float => "f",
    };
    let (term, finish) = fitness_term(problem, &|k| format!("out[{k}].{}", out_field(k)))?;
    let (term_k, _) = fitness_term(problem, &|k| format!("OUT[q][{k}].{}", out_field(k)))?;
    let mut cases = String::new();
    let mut cases_k = String::new();
    let nslots = layout.len().max(1);
    let nout = outputs.len().max(1);
    let writable = writable_slots(problem);
    let step = step_source(&writable);
    for (code, op) in Op::ALL.iter().enumerate() {
        let body = match op {
            Op::Step => step.clone(),
            _ => slot_access(op.cuda(), nslots, nout, tuning.register_slots),
        };
        writeln!(cases, "            case {code}: {body} break; // {op:?}").ok();
        if !op.is_control() {
            writeln!(
                cases_k,
                "                case {code}: {{ {} }} break; // {op:?}",
                interleaved(*op, &body)
            )
            .ok();
        }
    }
    let bounds = match tuning.min_blocks {
        0 => format!("{BLOCK}"),
        b => format!("{BLOCK}, {b}"),
    };
    let init_k = rename(&init, "q");
    Ok(format!(
        "// gpfarm interpreter for problem `{problem}`\n\
union V {{ int i; float f; double d; }};\n\n\
// Slot k of a variable or output array kept in registers: every index is a constant once unrolled.\n\
template <int N> __device__ __forceinline__ V gpfarm_get(const V (&a)[N], unsigned k)\n\
{{\n    V r = a[0];\n#pragma unroll\n    for (int j = 1; j < N; ++j) if (k == (unsigned)j) r = a[j];\n    return r;\n}}\n\
template <int N> __device__ __forceinline__ void gpfarm_set(V (&a)[N], unsigned k, V v)\n\
{{\n#pragma unroll\n    for (int j = 0; j < N; ++j) if (k == (unsigned)j) a[j] = v;\n}}\n\n\
// One block per tile of {TILE} cases (x) and program (y); lane l runs cases l, l + {BLOCK}, ... of the\n\
// tile and adds their fitness terms in that order. A program without jumps runs K cases at once.\n\
template <int DEPTH, int K>\n\
__device__ __forceinline__ void gpfarm_interpret({decl})\n{{\n\
    __shared__ double part[{BLOCK}];\n\
    __shared__ int gpfarm_abort;\n\
    if (threadIdx.x == 0) gpfarm_abort = 0;\n\
    __syncthreads();\n\
    const unsigned o = offsets[blockIdx.y];\n\
    const unsigned* __restrict__ prog = code + (o & 0x3fffffffu);\n\
    const int first = blockIdx.x * {TILE} + threadIdx.x;\n\
{read}\
    double s = 0.0;\n\
    int failed = 0;\n\
    if (K > 1 && (o >> 31)) {{\n\
        for (int j0 = 0; j0 < {ROWS}; j0 += K) {{\n\
            if (first + j0 * {BLOCK} >= ncases) break;\n\
            int C[K];\n\
            V VARS[K][{nslots}];\n\
            V OUT[K][{nout}];\n\
            V ST[K][DEPTH + 1];\n\
            V T[K];\n\
#pragma unroll\n\
            for (int q = 0; q < K; ++q) {{\n\
                const int cq = first + (j0 + q) * {BLOCK};\n\
                C[q] = cq < ncases ? cq : first + j0 * {BLOCK};\n\
{init_k}\
                for (int k = 0; k < {nout}; ++k) OUT[q][k].d = 0.0;\n\
                ST[q][0].d = 0.0;\n\
                T[q].d = 0.0;\n\
            }}\n\
            int sp = 1;\n\
            unsigned pc = 0;\n\
            for (;;) {{\n\
                const unsigned w = prog[pc++];\n\
                const unsigned arg = w >> 8;\n\
                switch (w & 0xffu) {{\n\
{cases_k}\
                default: failed = 1; goto finished_k;\n\
                }}\n\
            }}\n\
        finished_k:\n\
            if (failed) break;\n\
#pragma unroll\n\
            for (int q = 0; q < K; ++q) {{\n\
                const int c = C[q];\n\
                if (first + (j0 + q) * {BLOCK} < ncases) {{\n\
                {term_k}\n\
                }}\n\
            }}\n\
        }}\n\
    }} else {{\n\
    // A program with jumps over no more cases than a block has threads runs one case per warp\n\
    // (its first lane), so that cases looping differently do not take turns in one warp; each\n\
    // case's term meets in part[] and thread l takes case l's, as the lane layout sums them.\n\
    const bool by_warp = ncases <= {BLOCK};\n\
    for (int j = 0; ; ++j) {{\n\
        const int c = by_warp ? ((threadIdx.x & 31u) ? ncases : (int)(threadIdx.x >> 5) + j * {WARPS})\n\
                              : (j < {ROWS} ? first + j * {BLOCK} : ncases);\n\
        if (c >= ncases) break;\n\
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
        unsigned snap_pc = 0xffffffffu;\n\
        unsigned long long snap_at = 1;\n\
        V snap[{nsnap}];\n\
        for (;;) {{\n\
            const unsigned w = prog[pc++];\n\
            const unsigned arg = w >> 8;\n\
            switch (w & 0xffu) {{\n\
{cases}\
            default: failed = 1; goto finished;\n\
            }}\n\
        }}\n\
    finished:\n\
        if (failed) {{ gpfarm_abort = 1; break; }}\n\
        if (by_warp) {{\n\
        double s = 0.0;\n\
        {term}\n\
        part[c] = s;\n\
        }} else {{\n\
        {term}\n\
        }}\n\
    }}\n\
    if (by_warp) {{\n\
        __syncthreads();\n\
        s = (int)threadIdx.x < ncases ? part[threadIdx.x] : 0.0;\n\
    }}\n\
    }}\n\
    const int any_failed = __syncthreads_or(failed);\n\
{tail}\
}}\n\n\
extern \"C\" __global__ void __launch_bounds__({bounds}) {INTERP_KERNEL_SMALL}({decl})\n\
{{\n    gpfarm_interpret<{SMALL_DEPTH}, {interleave}>({args});\n}}\n\n\
extern \"C\" __global__ void __launch_bounds__({BLOCK}) {INTERP_KERNEL_LARGE}({decl})\n\
{{\n    gpfarm_interpret<{MAX_DEPTH}, 1>({args});\n}}\n\n\
{tiles}",
        problem = problem.name(),
        WARPS = BLOCK / 32,
        nsnap = writable.len().max(1),
        tail = block_sum(
            "partial[(size_t)blockIdx.y * ntiles + blockIdx.x] = any_failed ? __longlong_as_double(0x7ff8000000000000LL) : part[0];"
        ),
        tiles = tiles_source(finish),
    ))
}

/// The CUDA C of [`Op::Step`] for a problem whose writable variable slots are `writable`. It
/// counts the case's step and fails the program past the limit, as the CPU evaluator does, and
/// fails it sooner where the outcome is already certain:
/// - when another case of the block has failed (`gpfarm_abort`): the program's fitness is the
///   worst whatever the other cases give;
/// - when the case's state repeats (Brent's cycle detection): at a step the state is the step's
///   place (`pc`) and the writable slots (the stack is empty between statements, the read-only
///   slots and the case's inputs never change, outputs are written after the body); the state of
///   every `2^k`-th step is kept, and meeting it again means the case runs the same steps
///   forever, so it would pass the limit. A loop that repeats with period `p` after `m` steps is
///   caught within about `2 max(m, p) + p` steps.
///
/// Either way the program fails exactly where the CPU evaluator fails it, only sooner.
fn step_source(writable: &[usize]) -> String {
    let same: String =
        writable.iter().enumerate().map(|(j, k)| format!(" && vars[{k}].i == snap[{j}].i")).collect();
    let keep: String = writable.iter().enumerate().map(|(j, k)| format!(" snap[{j}] = vars[{k}];")).collect();
    format!(
        "{{ {} \
         if (pc == snap_pc{same}) {{ failed = 1; goto finished; }} \
         if (steps == snap_at) {{ snap_pc = pc;{keep} snap_at <<= 1; }} }}",
        Op::Step.cuda()
    )
}

/// The CUDA C of `op` on `K` cases at once, `q` = 0..K (unrolled): each case has its own top
/// `T[q]`, stack `ST[q]`, variables `VARS[q]`, outputs `OUT[q]` and case index `C[q]`. The stack
/// pointer and `pc` move alike for every case, as the op moves them for one.
fn interleaved(op: Op, code: &str) -> String {
    let body = rename(code, "q");
    if op == Op::End {
        return body;
    }
    let moves = |name: &str| idents(code).any(|i| i == name);
    let (sp, pc) = (moves("sp"), moves("pc"));
    let mut open = String::new();
    let mut inner = String::new();
    let mut after = String::new();
    let mut close = String::new();
    for (name, ty, on) in [("sp", "int", sp), ("pc", "unsigned", pc)] {
        if on {
            open.push_str(&format!("const {ty} {name}0 = {name}; {ty} {name}1 = {name}; "));
            inner.push_str(&format!("{ty} {name} = {name}0; "));
            after.push_str(&format!(" {name}1 = {name};"));
            close.push_str(&format!(" {name} = {name}1;"));
        }
    }
    format!(
        "{open}\n#pragma unroll\n                    for (int q = 0; q < K; ++q) {{ {inner}{body}{after} }}{close}"
    )
}

/// `code` (an op's CUDA C) reaching variable slot or output `arg` through `gpfarm_get` and
/// `gpfarm_set` where the problem has at most `max` of them, so the arrays stay in registers.
fn slot_access(code: &str, nslots: usize, nout: usize, max: usize) -> String {
    let mut code = code.to_owned();
    if nslots <= max {
        code = code.replace("t = vars[arg];", "t = gpfarm_get(vars, arg);");
        code = code.replace("vars[arg] = t;", "gpfarm_set(vars, arg, t);");
    }
    if nout <= max {
        code = code.replace("out[arg] = t;", "gpfarm_set(out, arg, t);");
    }
    code
}

/// `code` with the per-case names `t`, `st`, `vars`, `out`, `c` made arrays indexed by `q`
/// (`T[q]`, ...), and the label `finished` made `finished_k`.
fn rename(code: &str, q: &str) -> String {
    let mut out = String::with_capacity(code.len() * 2);
    let mut rest = code;
    while let Some(ch) = rest.chars().next() {
        if ch.is_ascii_alphabetic() || ch == '_' || ch.is_ascii_digit() {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.' && ch.is_ascii_digit()));
            let word = &rest[..len.unwrap_or(rest.len())];
            let member = out.ends_with('.');
            match word {
                "t" | "st" | "vars" | "out" | "c" if !member => {
                    out.push_str(&format!(
                        "{}[{q}]",
                        if word == "c" { "C".into() } else { word.to_uppercase() }
                    ));
                }
                "finished" => out.push_str("finished_k"),
                _ => out.push_str(word),
            }
            rest = &rest[word.len()..];
        } else {
            out.push(ch);
            rest = &rest[ch.len_utf8()..];
        }
    }
    out
}

/// The identifiers in `code`.
fn idents(code: &str) -> impl Iterator<Item = &str> {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

fn field(ty: Ty) -> &'static str {
    match ty {
        Ty::Int => "i",
        Ty::Float => "f",
        Ty::Double => "d",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_case_names_become_arrays_and_nothing_else_changes() {
        let code = "{ V a = st[--sp]; t.f = a.f + vars[arg].f; out[arg] = t; } t.i = gpfarm_read(arg, t.i, c); \
                    t.f = 0.5f + 1e3; const int cq = c; goto finished;";
        assert_eq!(
            rename(code, "q"),
            "{ V a = ST[q][--sp]; T[q].f = a.f + VARS[q][arg].f; OUT[q][arg] = T[q]; } T[q].i = gpfarm_read(arg, T[q].i, C[q]); \
             T[q].f = 0.5f + 1e3; const int cq = C[q]; goto finished_k;"
        );
    }

    #[test]
    fn kept_in_registers_no_op_indexes_the_slots() {
        for op in Op::ALL {
            let code = slot_access(op.cuda(), 3, 1, 4);
            assert!(!code.contains("vars[arg]") && !code.contains("out[arg]"), "{op:?}: {code}");
            let code = slot_access(op.cuda(), 5, 5, 4);
            assert_eq!(code, op.cuda(), "{op:?}: more slots than registers kept");
        }
        assert_eq!(slot_access(Op::Store.cuda(), 1, 1, 1), "gpfarm_set(vars, arg, t); t = st[--sp];");
    }

    #[test]
    fn a_step_compares_and_keeps_only_the_writable_slots() {
        let step = step_source(&[2, 5]);
        assert!(step.contains("pc == snap_pc && vars[2].i == snap[0].i && vars[5].i == snap[1].i"), "{step}");
        assert!(
            step.contains("snap_pc = pc; snap[0] = vars[2]; snap[1] = vars[5]; snap_at <<= 1;"),
            "{step}"
        );
        assert!(step.contains("++steps > max_steps"), "{step}");
        let search = Problem::builtin("search").unwrap();
        let source = interpreter_source(&search).unwrap();
        // Search's writable slots: i, tmp and OUTPUT, after INPUT's length and SEARCH.
        assert!(
            source.contains("vars[2].i == snap[0].i && vars[3].i == snap[1].i && vars[4].i == snap[2].i")
        );
        assert!(source.contains("V snap[3];"));
    }

    #[test]
    fn a_tuning_reads_back_what_it_writes() {
        for text in ["4", "1", "16b8", "4s0", "2b6s8"] {
            let tuning: Tuning = text.parse().unwrap();
            assert_eq!(tuning.to_string(), text);
        }
        assert_eq!("4".parse::<Tuning>().unwrap(), Tuning::default());
        assert_eq!(
            "2b6s0".parse::<Tuning>().unwrap(),
            Tuning { interleave: 2, min_blocks: 6, register_slots: 0 }
        );
        for bad in ["", "b6", "4b", "4x2", "4b6b", "-1"] {
            assert!(bad.parse::<Tuning>().is_err(), "{bad}");
        }
    }

    #[test]
    fn an_interleaved_op_moves_sp_and_pc_once() {
        let push = interleaved(Op::PushI, Op::PushI.cuda());
        assert!(push.starts_with("const int sp0 = sp; int sp1 = sp; const unsigned pc0 = pc;"), "{push}");
        assert!(push.ends_with("sp = sp1; pc = pc1;"), "{push}");
        let neg = interleaved(Op::NegF, Op::NegF.cuda());
        assert!(!neg.contains("sp") && !neg.contains("pc"), "{neg}");
        assert!(neg.contains("T[q].f = -T[q].f;"), "{neg}");
        assert_eq!(interleaved(Op::End, Op::End.cuda()), "goto finished_k;");
    }
}
