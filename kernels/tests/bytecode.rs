//! The interpreter's bytecode without a GPU: run op for op on the CPU, it gives the CPU
//! evaluator's outputs bit for bit, for the built-in problems' random and bred populations and
//! for phenotypes that use every op; its kernel source has one case per op.

mod common;

use gpfarm_gp::problem::{Column, ProblemSources, standard_template};
use gpfarm_gp::program::{DEFAULT_MAX_STEPS, RunError};
use gpfarm_gp::{Phenotype, Problem, Program};
use gpfarm_kernels::interpreter::{
    self, DEEP, Folding, MAX_DEPTH, Op, PackedPopulation, SMALL_DEPTH, STRAIGHT, assemble, assemble_with,
    exec, interp_supported, interpreter_source,
};

/// The same columns, floats compared by their bits (any NaN equals any NaN).
fn same_columns(a: &[Column], b: &[Column]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Column::Int(x), Column::Int(y)) => x == y,
            (Column::Float(x), Column::Float(y)) => {
                x.len() == y.len()
                    && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
            }
            _ => false,
        })
}

/// Runs `text` both ways with `max_steps`; panics where they differ. Returns the ops used.
fn agree(problem: &Problem, text: &str, max_steps: u64) -> Vec<Op> {
    let program = Program::parse(problem, &Phenotype::new(text)).unwrap_or_else(|e| panic!("{text}: {e}"));
    // Unfolded: the CPU evaluator computes every node (the folded form is tested apart).
    let code = assemble_with(problem, &program, Folding::None).unwrap_or_else(|e| panic!("{text}: {e}"));
    let want = program.run_with_limit(problem, max_steps);
    let got = exec::run(problem, &code, max_steps);
    match (&want, &got) {
        (Ok(w), Ok(g)) => assert!(same_columns(w, g), "{text}:\ncpu {w:?}\nbytecode {g:?}"),
        (Err(w), Err(g)) => assert_eq!(w, g, "{text}"),
        _ => panic!("{text}: cpu {want:?}, bytecode {got:?}"),
    }
    let mut ops = Vec::new();
    let mut pc = 0;
    while pc < code.words.len() {
        let op = Op::decode(code.words[pc]).unwrap();
        ops.push(op);
        pc += match op {
            Op::PushI | Op::PushF => 2,
            Op::PushD => 3,
            _ => 1,
        };
    }
    ops
}

fn agrees_on_populations(name: &str) {
    let problem = Problem::builtin(name).unwrap();
    interp_supported(&problem).unwrap();
    let mut n = 0;
    for phenotypes in common::populations(&problem, &[1, 2, 3], 300) {
        for p in &phenotypes {
            agree(&problem, p.as_str(), DEFAULT_MAX_STEPS);
        }
        n += phenotypes.len();
    }
    assert!(n > 600, "{name}: {n}");
}

#[test]
fn keijzer6_populations_run_as_on_the_cpu_evaluator() {
    agrees_on_populations("keijzer6");
}

#[test]
fn search_populations_run_as_on_the_cpu_evaluator() {
    agrees_on_populations("search");
}

#[test]
fn multiplier5_populations_run_as_on_the_cpu_evaluator() {
    agrees_on_populations("multiplier5");
}

/// A statement problem with every kind of variable: int and float inputs, an `int[]` input
/// with its length, case bits, int and float locals, and a float output.
fn everything() -> Problem {
    let toml = r#"
name = "everything"
kind = "statements"
fitness = "rmse"
start = "s"
case_bits = [{ name = "b0", bit = 0 }, { name = "b3", bit = 3 }]

[[inputs]]
name = "n"
type = "int"

[[inputs]]
name = "x"
type = "float"

[[inputs]]
name = "A"
type = "int[]"
length_name = "LEN"
max_len = 4

[[locals]]
name = "i"
type = "int"

[[locals]]
name = "f"
type = "float"

[[outputs]]
name = "y"
type = "float"

[target]
type = "float"
"#;
    let mut cases = String::from("[");
    let xs = [0.0f32, -1.5, 2.25, 1e30, -0.0, 3.0, 7.5, -1e-40, 100.0, 0.5, -2.0, 12.0];
    for (k, x) in xs.iter().enumerate() {
        let n = [0, 1, -7, 2147483647, -2147483648, 5, 31, 33, -1, 8, 100, 3][k];
        let a: Vec<i32> = (0..(k % 5) as i32).map(|j| j * 3 - 4 + k as i32).collect();
        if k > 0 {
            cases.push(',');
        }
        cases.push_str(&format!("{{\"n\": {n}, \"x\": {x:e}, \"A\": {a:?}, \"target\": 1.0}}"));
    }
    cases.push(']');
    let sources = |template: &str| {
        Problem::from_sources(
            "test",
            &ProblemSources { toml, grammar: "<s> ::= y = x;", cases: &cases, template },
        )
        .unwrap_or_else(|e| panic!("{e}"))
    };
    // Any template to read the spec, then the standard harness for it.
    let draft = sources(
        "//@kernel\nextern \"C\" __global__ void {{KERNEL}}(const int* in_n, const float* in_x, const int* in_A, \
         const int* in_LEN, float* out_y, int NCASES) { n x A LEN b0 b3 i f y {{PHENOTYPE}} }\n",
    );
    sources(&standard_template(draft.spec()))
}

/// Phenotypes of `everything` that, together, use every op.
const EVERYTHING: &[&str] = &[
    "y = x + 1.5f * x - x / 3.0f;",
    "y = x * 07.35 + 1.0 / (x - 2.0) - (-x) - (-(x * 1.0));",
    "i = n * 3 + n - n / 7 + n % 5 - (-n); y = i;",
    "i = (n & 12) | (n ^ 5) | (~n); y = i << 2 >> 1;",
    "i = n << LEN; f = n >> (LEN + 30); y = i + f;",
    "y = (x < 1.0f) + (x > 1.0f) * 2 + (x <= 2.25f) * 4 + (x >= 3.0f) * 8 + (x == 0.5f) * 16 + (x != x) * 32;",
    "y = (n < 1) + (n > 1) * 2 + (n <= 5) * 4 + (n >= 8) * 8 + (n == 3) * 16 + (n != 31) * 32;",
    "y = (x < 1.0) + (x > 1.0) * 2 + (x <= 2.25) * 4 + (x >= 3.0) * 8 + (x == 0.5) * 16 + (x != 12.0) * 32;",
    "y = (n && x) + (b0 || b3) * 2 + !n * 4 + !x * 8 + !(x * 1.0) * 16 + (x * 1.0 && n) * 32;",
    "y = x > 1.0f ? x * 2.0f : -x; if (b3) { y = y + 100.0f; } else { y = y - 100.0f; }",
    "y = sinf(x) + cosf(x) + expf(x / 100.0f) + logf(fabsf(x) + 1.0f) + sqrtf(fabsf(x)) + tanhf(x);",
    "y = sin(x * 1.0) + cos(x * 1.0) + exp(x / 100.0) + log(fabs(x * 1.0) + 1.0) + sqrt(fabs(x * 1.0)) + tanh(x * 1.0);",
    "y = powf(fabsf(x), 1.5f) + fminf(x, 2.0f) + fmaxf(x, -1.0f) + pow(fabs(x), 0.5) + fmin(x, 2.0) + fmax(x, 1.0);",
    // Protected division, one divisor each: 0, below the threshold (0.0005), past it negative
    // (-0.002), at it (0.001f, not above 0.001f; as a double above 0.001), NaN, and divisors of
    // the cases on both sides of it (x * 0.0002 is 0.0015 at x = 7.5, 0.00045 at 2.25).
    "y = pdivf(x, 0.0f);",
    "y = pdivf(x, 0.0005f) + pdivf(x, -0.0005f) * 2.0f;",
    "y = pdivf(x, -0.002f);",
    "y = pdivf(x, 0.001f);",
    "y = pdivf(x, sqrtf(-1.0f - fabsf(x)));",
    "y = pdivf(1.0f, x * 0.0002f);",
    "y = pdivf(x, x);",
    "y = pdiv(x * 1.0, 0.0);",
    "y = pdiv(x * 1.0, 0.0005);",
    "y = pdiv(x * 1.0, -0.002);",
    "y = pdiv(x, (double)0.001f);",
    "y = pdiv(x * 1.0, sqrt(-1.0 - fabs(x * 1.0)));",
    "y = pdiv(1.0, x * 0.0002);",
    "y = pdiv(x, 2) + pdiv(n, x);",
    "for (i = 0; i < LEN; i++) { f = f + A[i] * x; } y = f + A[n % 7] + A[-n] + A[i - 9];",
    "i = 0; while (i < 20) { i = i + 3; if (i > n) { f = f + 1.0f; } } y = f + (int)(x * 3.7f) + (int)(x * 1.1);",
    "f = (float)(x * 1.0); i = (int)f; y = (double)i + f + (float)n + (double)n + (float)(n * 1.0);",
    "y = 0; i = 0; while (1) { i++; if (i > 100) { y = i; } }",
    "y = n * 1.5 > 3 ? 1 : 2; i = (n > 2) ? n : -1; y = y + i;",
];

#[test]
fn every_op_runs_as_on_the_cpu_evaluator() {
    let problem = everything();
    interp_supported(&problem).unwrap();
    let mut used = std::collections::BTreeSet::new();
    for text in EVERYTHING {
        for op in agree(&problem, text, 1000) {
            used.insert(op as u8);
        }
    }
    let missing: Vec<Op> = Op::ALL.iter().copied().filter(|op| !used.contains(&(*op as u8))).collect();
    assert_eq!(missing, vec![], "ops no phenotype used");
}

#[test]
fn a_loop_past_the_step_limit_fails_as_on_the_cpu_evaluator() {
    let problem = everything();
    let text = "i = 0; while (1) { i++; }";
    let program = Program::parse(&problem, &Phenotype::new(text)).unwrap();
    let code = assemble(&problem, &program).unwrap();
    assert_eq!(exec::run(&problem, &code, 500).unwrap_err(), RunError::StepLimit { case: 0, limit: 500 });
    assert!(matches!(program.run_with_limit(&problem, 500), Err(RunError::StepLimit { .. })));
}

#[test]
fn a_program_compiled_for_another_problem_is_refused() {
    let keijzer = Problem::builtin("keijzer6").unwrap();
    let search = Problem::builtin("search").unwrap();
    let program = Program::parse(&search, &Phenotype::new("OUTPUT = 1;")).unwrap();
    let err = assemble(&keijzer, &program).unwrap_err();
    assert!(err.to_string().contains("compiled for `search`, not for `keijzer6`"), "{err}");
}

#[test]
fn deep_programs_take_the_large_stack_and_every_accepted_one_fits() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let shallow =
        assemble(&problem, &Program::parse(&problem, &Phenotype::new("x + 1.0f")).unwrap()).unwrap();
    assert_eq!(shallow.depth, 2);
    // Right-nested sums as deep as the parser allows: each level keeps one value waiting.
    let mut text = String::from("x");
    let mut levels = 0;
    loop {
        let deeper = format!("x + ({text})");
        if Program::parse(&problem, &Phenotype::new(&deeper)).is_err() {
            break;
        }
        text = deeper;
        levels += 1;
    }
    let program = Program::parse(&problem, &Phenotype::new(&text)).unwrap();
    let code = assemble(&problem, &program).unwrap();
    assert!(code.depth > SMALL_DEPTH && code.depth <= MAX_DEPTH, "{levels} levels: depth {}", code.depth);
    let packed = PackedPopulation::new([&shallow, &code]);
    // Only the deep program needs the large stack's kernel.
    assert_eq!(packed.kernel(0), interpreter::INTERP_KERNEL_SMALL);
    assert_eq!(packed.kernel(1), interpreter::INTERP_KERNEL_LARGE);
    assert_eq!(packed.offsets, vec![STRAIGHT, shallow.words.len() as u32 | STRAIGHT | DEEP]);
    assert_eq!(packed.program(0), &shallow.words[..]);
    assert_eq!(packed.program(1), &code.words[..]);
    // The deep program still runs as on the CPU.
    agree(&problem, &text, DEFAULT_MAX_STEPS);
}

#[test]
fn the_kernel_source_has_one_case_per_op_and_the_fitness_kernel_s_term() {
    for name in Problem::builtin_names() {
        let problem = Problem::builtin(name).unwrap();
        let source = interpreter_source(&problem).unwrap();
        for (k, op) in Op::ALL.iter().enumerate() {
            // Ops reaching a variable slot or an output may reach it through the registers'
            // pickers instead of an index.
            let reaches = matches!(op, Op::Load | Op::Store | Op::Out);
            let found = source.lines().any(|l| {
                l.trim_start().starts_with(&format!("case {k}: "))
                    && l.ends_with(&format!(" break; // {op:?}"))
                    && (l.contains(op.cuda()) || reaches && l.contains("gpfarm_"))
            });
            assert!(found, "{name} {op:?}");
        }
        let fitness = gpfarm_kernels::gpu::fitness_source(&problem).unwrap();
        let last = fitness.lines().find(|l| l.contains("fitness[blockIdx.x] =")).unwrap();
        let finish = last.split(" = ").nth(1).unwrap();
        assert!(source.contains(finish), "{name}: {finish}");
    }
}

/// Constant math is folded as the PTX route folds it (NVVM's rule), so the GPU interpreter gives
/// the compiled routes' bits: `sinf(30.80)` is one constant, the PTX route's immediate.
#[test]
fn constants_fold_as_the_ptx_route_folds_them() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let program = Program::parse(&problem, &Phenotype::new("sinf(30.80) + x * (02.00 + 01.50)")).unwrap();
    let folded = assemble(&problem, &program).unwrap();
    let ops: Vec<Op> = folded.words.iter().filter_map(|&w| Op::decode(w)).collect();
    assert!(!ops.contains(&Op::SinF), "{ops:?}");
    let sin = (30.80f64 as f32 as f64).sin() as f32;
    assert_eq!(folded.words[0], Op::PushF as u32);
    assert_eq!(folded.words[1], sin.to_bits());
    let ptx = gpfarm_kernels::unit::key_text(
        &problem,
        gpfarm_protocol::Language::Ptx,
        gpfarm_protocol::SmArch::SM_90,
        &Phenotype::new("sinf(30.80)"),
        None,
    )
    .unwrap();
    assert!(ptx.contains(&format!("0f{:08X}", sin.to_bits())), "{ptx}");
    // Unfolded, the call runs.
    let plain = assemble_with(&problem, &program, Folding::None).unwrap();
    assert!(plain.words.iter().any(|&w| Op::decode(w) == Some(Op::SinF)));
    // Both run the same otherwise: x * 3.5 in double either way.
    let (a, b) = (exec::run(&problem, &folded, 10).unwrap(), exec::run(&problem, &plain, 10).unwrap());
    let (Column::Float(a), Column::Float(b)) = (&a[0], &b[0]) else { panic!() };
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{x} {y}");
    }
}

/// Protected division of constants folds as the PTX route folds it, the threshold in the call's
/// type: `pdivf(3, 0.001f)` is 1, `pdiv(3, (double)0.001f)` divides; folded or not, the same bits.
#[test]
fn protected_division_of_constants_folds_with_its_threshold() {
    let problem = everything();
    for (text, value) in [
        ("y = x * pdivf(3.0f, 0.001f);", Some(1.0f32)),
        ("y = x * pdivf(3.0f, 0.0f);", Some(1.0)),
        ("y = x * pdivf(3.0f, 0.0005f);", Some(1.0)),
        ("y = x * pdivf(3.0f, -0.002f);", Some(3.0 / -0.002f32)),
        ("y = x * pdivf(3.0f, 0.0f / 0.0f);", Some(1.0)),
        ("y = x * pdiv(3.0, (double)0.001f);", None),
    ] {
        let program = Program::parse(&problem, &Phenotype::new(text)).unwrap();
        let folded = assemble(&problem, &program).unwrap();
        let ops: Vec<Op> = interpreter::walk(&folded.words).map(Option::unwrap).collect();
        assert!(!ops.contains(&Op::PdivF) && !ops.contains(&Op::PdivD), "{text}: {ops:?}");
        match value {
            Some(v) => assert!(folded.words.contains(&v.to_bits()), "{text}: {:?}", folded.words),
            None => {
                let bits = (3.0 / f64::from(0.001f32)).to_bits();
                assert!(
                    folded.words.contains(&(bits as u32)) && folded.words.contains(&((bits >> 32) as u32))
                );
            }
        }
        let plain = assemble_with(&problem, &program, Folding::None).unwrap();
        let unfolded: Vec<Op> = interpreter::walk(&plain.words).map(Option::unwrap).collect();
        assert!(unfolded.contains(&Op::PdivF) || unfolded.contains(&Op::PdivD), "{text}");
        let (a, b) = (exec::run(&problem, &folded, 10).unwrap(), exec::run(&problem, &plain, 10).unwrap());
        assert!(same_columns(&a, &b), "{text}: {a:?} folded, {b:?} not");
        assert!(same_columns(&a, &program.run_with_limit(&problem, 10).unwrap()), "{text}");
    }
}

/// Programs without jumps are flagged, so the GPU runs them on several cases per thread; the
/// flag reads ops, not value words: a constant whose bits look like a jump is still a constant.
#[test]
fn programs_without_jumps_and_only_those_are_straight() {
    let keijzer6 = Problem::builtin("keijzer6").unwrap();
    let jz = f32::from_bits(0x4000_0000 | Op::Jz as u32);
    let text = format!("x * {jz:.40}f");
    let program = Program::parse(&keijzer6, &Phenotype::new(&text)).unwrap();
    let code = assemble(&keijzer6, &program).unwrap();
    assert!(code.words.iter().any(|&w| Op::decode(w) == Some(Op::Jz)), "{text}: {:?}", code.words);
    assert!(code.is_straight(), "{text}");
    let packed = PackedPopulation::new([&code]);
    assert_eq!(packed.offsets[0] & STRAIGHT, STRAIGHT);
    assert_eq!(packed.ops(), 5, "{:?}", code.words); // load, push, mul, out, end

    // Search's grammar writes loops and ifs: those programs are not straight, the rest are.
    let search = Problem::builtin("search").unwrap();
    let (mut straight, mut not) = (0, 0);
    for phenotype in common::populations(&search, &[3], 300).concat() {
        let Ok(program) = Program::parse(&search, &phenotype) else { continue };
        let code = assemble(&search, &program).unwrap();
        let text = phenotype.as_str();
        let control = text.contains("if") || text.contains("for") || text.contains("while");
        assert_eq!(code.is_straight(), !control, "{text}");
        if control { not += 1 } else { straight += 1 }
    }
    assert!(straight > 0 && not > 0, "{straight} straight, {not} with jumps");
}

/// The route choice's count of what programs cost the GPU: ops per case as run, a loop whose
/// state repeats stopped where the GPU routes stop it, a long loop counted to the limit.
#[test]
fn a_profile_counts_the_ops_the_gpu_routes_run() {
    use gpfarm_kernels::interpreter::exec::profile;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/while-search");
    let problem = Problem::load(&dir).unwrap();
    let code =
        |text: &str| assemble(&problem, &Program::parse(&problem, &Phenotype::new(text)).unwrap()).unwrap();
    let straight = code("OUTPUT = 1;");
    let p = profile(&problem, &straight, 32, 1000);
    assert!(!p.fails && p.mean_ops == p.max_ops && p.mean_ops <= 8.0, "{p:?}");
    // Ten iterations in every case, each the same few ops.
    let counted = profile(&problem, &code("while(i < 10){i = i + 1;}"), 32, 1000);
    assert!(!counted.fails && counted.mean_ops > 10.0 * 5.0 && counted.mean_ops < 10.0 * 12.0, "{counted:?}");
    // A loop that changes nothing repeats its state at once: a few steps, and it fails.
    let stuck = profile(&problem, &code("while(tmp < 3){OUTPUT = 1;}"), 32, 1000);
    assert!(stuck.fails && stuck.max_ops < 100.0, "{stuck:?}");
    // A loop that never repeats runs to the limit: 10^6 steps at its ops per step.
    let long = profile(&problem, &code("while(tmp != (-1)){tmp = tmp + 2;}"), 32, 1000);
    assert!(long.fails && long.max_ops > 1e6 * 5.0, "{long:?}");
}
