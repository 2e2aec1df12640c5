//! Free parameters: `p[k]` in a phenotype, its values given per run, the text with the values
//! written in, forward-mode derivatives, and Levenberg–Marquardt fitting.

use gpfarm_gp::problem::Column;
use gpfarm_gp::program::{float_literal, instantiate};
use gpfarm_gp::{FitSettings, Phenotype, Problem, Program, fit, fittable};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn keijzer6() -> Problem {
    Problem::builtin("keijzer6").unwrap()
}

fn floats(c: &Column) -> Vec<u32> {
    match c {
        Column::Float(v) => v.iter().map(|f| f.to_bits()).collect(),
        Column::Int(_) => panic!("an int column"),
    }
}

fn xs(problem: &Problem) -> Vec<f64> {
    match &problem.cases().inputs()[0] {
        gpfarm_gp::problem::InputColumn::Scalar(Column::Float(v)) => {
            v.iter().map(|&x| f64::from(x)).collect()
        }
        _ => panic!("keijzer6's x is a float"),
    }
}

#[test]
fn a_program_with_values_written_in_computes_what_it_computes_with_them_bit_for_bit() {
    let problem = keijzer6();
    let text = Phenotype::new("sinf(x * p[0]) * p[1] + expf(p[2] / x) - p[0] * 07.35");
    let program = Program::parse(&problem, &text).unwrap();
    assert_eq!(program.params(), 3);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for _ in 0..200 {
        let params: Vec<f32> =
            (0..3).map(|_| rng.random_range(-3.0f32..3.0) * 10f32.powi(rng.random_range(-8..8))).collect();
        let with = program.run_params(&problem, &params, 1000).unwrap();
        let written = Program::parse(&problem, &instantiate(&text, &params)).unwrap();
        assert_eq!(written.params(), 0);
        assert_eq!(floats(&with[0]), floats(&written.run(&problem).unwrap()[0]), "{params:?}");
        let lin = program.linearize(&problem, &params, 1000).unwrap();
        let lin_bits: Vec<u32> = lin.outputs.iter().map(|f| f.to_bits()).collect();
        assert_eq!(lin_bits, floats(&with[0]));
    }
    assert_eq!(
        instantiate(&Phenotype::new("x * p[0] + p[1]"), &[1.5, -2e-8]).as_str(),
        "x * (1.5f) + (-2e-8f)"
    );
    assert_eq!(float_literal(1.0), "1.0");
    assert_eq!(float_literal(-3e20), "-3e20");
}

#[test]
fn a_program_needs_one_value_per_parameter_and_an_index_that_is_a_literal() {
    let problem = keijzer6();
    let program = Program::parse(&problem, &Phenotype::new("x * p[1]")).unwrap();
    assert_eq!(program.params(), 2);
    let err = program.run(&problem).unwrap_err();
    assert_eq!(err.to_string(), "the program reads 2 parameter(s) and was given 0 value(s)");
    assert!(Program::parse(&problem, &Phenotype::new("x * p[x]")).is_err());
    assert!(Program::parse(&problem, &Phenotype::new("x * p[100000]")).is_err());
}

#[test]
fn derivatives_are_the_analytic_ones() {
    let problem = keijzer6();
    let x = xs(&problem);
    let program =
        Program::parse(&problem, &Phenotype::new("sinf(x * p[0]) * p[1] + logf(fabsf(p[2] * x) + 1)"))
            .unwrap();
    let p = [0.3f32, -1.7, 0.25];
    let lin = program.linearize(&problem, &p, 1000).unwrap();
    let (p0, p1, p2) = (f64::from(p[0]), f64::from(p[1]), f64::from(p[2]));
    for (c, &x) in x.iter().enumerate() {
        let expect = [
            x * (x * p0).cos() * p1,
            (x * p0).sin(),
            x / ((p2 * x).abs() + 1.0), // p2 * x > 0 here
        ];
        for (k, (got, want)) in lin.jacobian[c * 3..c * 3 + 3].iter().zip(expect).enumerate() {
            assert!(
                (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "case {c}, p[{k}]: {got} against {want}"
            );
        }
    }
}

/// `pdivf(p[0] * x, p[1] * x)` (x = 1, ..., 64): the outputs are `a / b` where `|b| > 0.001f`,
/// else 1, and the derivatives division's there and 0 elsewhere, for divisors that are all 0,
/// all below the threshold, cross it (`p[1] = 0.001f / 8`: at x = 8 the divisor is 0.001f, not
/// above it),
/// all above it negative, and NaN.
#[test]
fn protected_division_is_differentiated_as_division_past_its_threshold_only() {
    let problem = keijzer6();
    let x = xs(&problem);
    let program = Program::parse(&problem, &Phenotype::new("pdivf(p[0] * x, p[1] * x)")).unwrap();
    let (mut divided, mut constant) = (0, 0);
    for p in [[1.5f32, 0.0], [1.5, 0.00001], [-2.5, 0.001 / 8.0], [0.75, -0.002], [1.0, f32::NAN]] {
        let lin = program.linearize(&problem, &p, 1000).unwrap();
        for (c, &xc) in x.iter().enumerate() {
            let xf = xc as f32;
            let (a, b) = (p[0] * xf, p[1] * xf);
            let (value, da, db) = if b.abs() > 0.001f32 {
                divided += 1;
                let (a, b) = (f64::from(a), f64::from(b));
                (a as f32 / b as f32, xc / b, -a * xc / (b * b))
            } else {
                constant += 1;
                (1.0, 0.0, 0.0)
            };
            assert_eq!(lin.outputs[c].to_bits(), value.to_bits(), "p {p:?} case {c}");
            for (k, (got, want)) in lin.jacobian[c * 2..c * 2 + 2].iter().zip([da, db]).enumerate() {
                assert!(
                    (got - want).abs() <= 1e-9 * want.abs() && (want == 0.0) == (*got == 0.0),
                    "p {p:?} case {c}, p[{k}]: {got} against {want}"
                );
            }
        }
    }
    assert!(divided > 100 && constant > 100, "{divided} divided, {constant} constant");
    // The crossing: at x = 8 the divisor is 0.001f exactly, which is not above 0.001f; at 9 it is.
    let lin = program.linearize(&problem, &[1.0, 0.001 / 8.0], 1000).unwrap();
    assert_eq!((x[7], lin.outputs[7], lin.jacobian[2 * 7 + 1]), (8.0, 1.0, 0.0));
    assert!(lin.jacobian[2 * 8 + 1] < 0.0 && lin.outputs[8] == 9.0f32 / (0.001f32 / 8.0 * 9.0));
}

#[test]
fn fitting_a_model_linear_in_its_parameters_reaches_the_least_squares_solution() {
    let problem = keijzer6();
    let x = xs(&problem);
    let t: Vec<f64> = (0..x.len()).map(|c| problem.cases().targets().as_f64(c)).collect();
    // Closed form for y = a·ln(x) + b.
    let n = x.len() as f64;
    let l: Vec<f64> = x.iter().map(|x| x.ln()).collect();
    let (sl, st) = (l.iter().sum::<f64>(), t.iter().sum::<f64>());
    let sll: f64 = l.iter().map(|v| v * v).sum();
    let slt: f64 = l.iter().zip(&t).map(|(a, b)| a * b).sum();
    let a = (n * slt - sl * st) / (n * sll - sl * sl);
    let b = (st - a * sl) / n;

    let program = Program::parse(&problem, &Phenotype::new("p[0] * logf(x) + p[1]")).unwrap();
    assert!(fittable(&problem, &program));
    let fitted =
        fit(&problem, &program, &[0.0, 0.0], &FitSettings { iterations: 20, restarts: 0 }, 1).unwrap();
    assert!((f64::from(fitted.params[0]) - a).abs() < 1e-4, "{:?} against a = {a}", fitted.params);
    assert!((f64::from(fitted.params[1]) - b).abs() < 1e-4, "{:?} against b = {b}", fitted.params);
    // The fit's sum of squares is the fitness's.
    let text = instantiate(&Phenotype::new("p[0] * logf(x) + p[1]"), &fitted.params);
    let rmse = gpfarm_gp::evaluate_phenotype(&problem, &text).fitness.value();
    assert!((rmse - (fitted.sse / n).sqrt()).abs() <= 1e-12 * rmse.max(1.0), "{rmse} against {}", fitted.sse);
    assert!(rmse < 0.05, "{rmse}");
}

#[test]
fn fitting_never_makes_a_program_worse_and_restarts_only_help() {
    let problem = keijzer6();
    let text = Phenotype::new("expf(p[0] * x) * p[1] + p[2]");
    let program = Program::parse(&problem, &text).unwrap();
    let start = [0.5f32, 3.0, -1.0];
    let before = gpfarm_gp::evaluate_phenotype(&problem, &instantiate(&text, &start)).fitness.value();
    let once = fit(&problem, &program, &start, &FitSettings { iterations: 10, restarts: 0 }, 3).unwrap();
    let more = fit(&problem, &program, &start, &FitSettings { iterations: 10, restarts: 3 }, 3).unwrap();
    let n = problem.cases().len() as f64;
    assert!((once.sse / n).sqrt() <= before);
    assert!(more.sse <= once.sse);
    assert!(more.runs > once.runs);
    // Not fittable: no parameters, or a fitness that is not least squares.
    assert!(
        fit(
            &problem,
            &Program::parse(&problem, &Phenotype::new("x")).unwrap(),
            &[],
            &FitSettings { iterations: 5, restarts: 0 },
            0
        )
        .is_none()
    );
    let search = Problem::builtin("search").unwrap();
    let p = Program::parse(&search, &Phenotype::new("OUTPUT = (int)p[0];")).unwrap();
    assert!(!fittable(&search, &p));
}

/// A pipeline on keijzer6 whose grammar has free parameters.
fn param_pipeline(lamarckian: bool) -> gpfarm_gp::Pipeline {
    let grammar =
        gpfarm_gp::Grammar::parse("<e> ::= <e> + <e> | <e> * <e> | x * #param# | #param# | x").unwrap();
    let config = gpfarm_gp::EvolutionConfig {
        population: 40,
        generations: 2,
        seed: 9,
        fit: gpfarm_gp::FitConfig { lamarckian, ..Default::default() },
        max_size: 0,
        ..Default::default()
    };
    gpfarm_gp::Pipeline::with_grammar(
        grammar,
        gpfarm_gp::Direction::Lower,
        config,
        std::num::NonZeroUsize::MIN,
    )
    .unwrap()
}

#[test]
fn children_inherit_fitted_values_when_lamarckian_and_the_values_they_started_with_when_not() {
    const FITTED: f32 = 1234.5;
    let problem = keijzer6();
    for lamarckian in [true, false] {
        let mut p = param_pipeline(lamarckian);
        let born = p.take_born();
        assert!(born.iter().any(|b| !b.params.is_empty()), "the grammar emits parameters");
        for b in &born {
            assert_eq!(Program::parse(&problem, &b.phenotype).unwrap().params(), b.params.len());
            assert!(b.params.iter().all(|v| (-1.0..=1.0).contains(v)), "fresh values are drawn in [-1, 1]");
            if !b.params.is_empty() {
                p.set_fitted(b.generation, b.slot, vec![FITTED; b.params.len()]).unwrap();
            }
            let text = instantiate(&b.phenotype, &vec![FITTED; b.params.len()]);
            p.set_fitness(b.generation, b.slot, gpfarm_gp::evaluate_phenotype(&problem, &text).fitness)
                .unwrap();
        }
        let stats = p.advance();
        // The best expression shows the values its fitness was computed with, either way.
        let best = stats[0].best_phenotype.as_ref().unwrap().as_str().to_owned();
        assert!(!best.contains("p["), "{best}");
        let children = p.take_born();
        let inherited = children.iter().flat_map(|b| &b.params).filter(|&&v| v == FITTED).count();
        if lamarckian {
            assert!(inherited > 0, "no child inherited a fitted value");
        } else {
            assert_eq!(inherited, 0, "a Baldwinian child inherited a fitted value");
        }
        // Refused: values for nobody, or not one per parameter.
        assert!(p.set_fitted(0, 0, vec![1.0]).is_err());
        if let Some(b) = children.iter().find(|b| !b.params.is_empty()) {
            assert!(p.set_fitted(b.generation, b.slot, vec![]).is_err());
        }
    }
}

/// A statement problem with a float output: x in, a float local, y out.
fn statements_problem() -> Problem {
    let toml = r#"
name = "float-statements"
description = "y from x by statements"
start = "s"
kind = "statements"
fitness = "rmse"

[[inputs]]
name = "x"
type = "float"

[[locals]]
name = "acc"
type = "float"

[[outputs]]
name = "y"
type = "float"

[target]
type = "float"
"#;
    let template = r#"//@kernel
extern "C" __global__ void {{KERNEL}}(const float* __restrict__ in_x,
                                      float* __restrict__ out_y,
                                      int NCASES)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= NCASES) return;
    const float x = in_x[c];
    float acc = 0.0f;
    float y = 0.0f;
    {{PHENOTYPE}}
    out_y[c] = y;
}
"#;
    let sources = gpfarm_gp::problem::ProblemSources {
        toml,
        grammar: "<s> ::= y = x * #param#;",
        cases: r#"[{"x": 1.0, "target": 2.0}, {"x": 2.0, "target": 3.0}, {"x": 3.0, "target": 5.0}]"#,
        template,
    };
    Problem::from_sources("test", &sources).unwrap()
}

#[test]
fn statements_and_loops_are_differentiated_along_the_path_taken_case_by_case() {
    let problem = statements_problem();
    // y = (p0 x)^2 + p1: dy/dp0 = 2 p0 x^2, dy/dp1 = 1.
    let program = Program::parse(&problem, &Phenotype::new("acc = p[0] * x; y = acc * acc + p[1];")).unwrap();
    let lin = program.linearize(&problem, &[0.5, 3.0], 100).unwrap();
    for (c, x) in [1.0f64, 2.0, 3.0].into_iter().enumerate() {
        assert!((lin.jacobian[c * 2] - 2.0 * 0.5 * x * x).abs() < 1e-6, "case {c}: {:?}", lin.jacobian);
        assert_eq!(lin.jacobian[c * 2 + 1], 1.0);
    }
    // A loop adds p0 until acc reaches x: y = k p0 with k the iterations taken, so dy/dp0 = k
    // (2, 4, 6 for p0 = 0.5), each case from zero again.
    let program =
        Program::parse(&problem, &Phenotype::new("while (acc < x) { acc = acc + p[0]; } y = acc;")).unwrap();
    let lin = program.linearize(&problem, &[0.5], 100).unwrap();
    assert_eq!(lin.jacobian, vec![2.0, 4.0, 6.0]);
    assert_eq!(lin.outputs, vec![1.0, 2.0, 3.0]);
    // Past the step limit the run fails, as the evaluator's does.
    assert!(program.linearize(&problem, &[0.0], 100).is_err());
}

/// One `Runs` serves a fit's runs at many values, plain and with derivatives in any order: every
/// run gives `run_params`' outputs and `linearize`'s rows bit for bit, in blocks of cases in
/// order, as if it were the first (nothing of one run leaks into the next), by the block
/// evaluation and by the tree walk (a branch) alike, over Friedman-1's 1,000 cases (blocks of
/// them).
#[test]
fn runs_kept_over_many_values_give_run_params_and_linearize_bit_for_bit() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/friedman1");
    let problem = Problem::load(&dir).unwrap();
    let n = problem.cases().len();
    assert!(n > 64, "several blocks of cases");
    for text in [
        "sinf(x1 * p[0]) * p[1] + expf(p[2] / x2) - p[0] * 07.35 + powf(x3, p[3]) * x4 * p[4] - sinf(p[5])",
        "x1 > p[0] ? p[1] * x2 : cosf(p[2] * x3) + p[3] + p[4] * p[5]",
    ] {
        let program = Program::parse(&problem, &Phenotype::new(text)).unwrap();
        let np = program.params();
        assert_eq!(np, 6, "{text}");
        let mut runs = program.runs(&problem, 1000);
        let values: [[f32; 6]; 4] = [
            [0.7, -1.3, 0.25, 2.0, -0.5, 1.5],
            [1e30, 0.0, -3.0, f32::MIN_POSITIVE, 7.0, -2.5],
            [-0.1, 4.0, 0.5, -1.0, 0.3, 0.0],
            [0.7, -1.3, 0.25, 2.0, -0.5, 1.5],
        ];
        for (i, params) in values.iter().enumerate() {
            for derivatives in [i % 2 == 0, i % 2 != 0] {
                let (mut outputs, mut rows) = (Vec::new(), Vec::new());
                let each =
                    |start: usize, ys: &[f32], r: &[f64], outputs: &mut Vec<f32>, rows: &mut Vec<f64>| {
                        assert_eq!(start, outputs.len(), "{text}: blocks in order");
                        outputs.extend_from_slice(ys);
                        rows.extend_from_slice(r);
                    };
                if derivatives {
                    runs.linearize(params, |s, ys, r| each(s, ys, r, &mut outputs, &mut rows)).unwrap();
                    let lin = program.linearize(&problem, params, 1000).unwrap();
                    let bits = |v: &[f64]| v.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&rows), bits(&lin.jacobian), "{text} at {params:?}: rows");
                    assert_eq!(rows.len(), n * np);
                } else {
                    runs.outputs(params, |s, ys| each(s, ys, &[], &mut outputs, &mut rows)).unwrap();
                    assert!(rows.is_empty());
                }
                let Column::Float(want) = &program.run_params(&problem, params, 1000).unwrap()[0] else {
                    panic!("{text}: a float output")
                };
                let bits = |v: &[f32]| v.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&outputs), bits(want), "{text} at {params:?}: outputs");
            }
        }
        assert!(runs.outputs(&[1.0], |_, _| {}).is_err(), "{text}: too few values");
    }
}

/// A plain run stopped part way (`outputs_while`) hands over the blocks up to the one that
/// stopped it, says it stopped, and leaves nothing for a run with derivatives at the same values
/// to take: that run gives `linearize`'s outputs and rows bit for bit, by the block evaluation
/// and by the tree walk (a branch) alike.
#[test]
fn a_plain_run_stopped_part_way_keeps_nothing_for_the_next_run() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/friedman1");
    let problem = Problem::load(&dir).unwrap();
    let n = problem.cases().len();
    assert!(n > 3 * 64, "more than three blocks of cases");
    for text in ["sinf(x1 * p[0]) * p[1] + expf(p[2] / x2)", "x1 > p[0] ? p[1] * x2 : cosf(p[2] * x3)"] {
        let program = Program::parse(&problem, &Phenotype::new(text)).unwrap();
        let params = [0.7f32, -1.3, 0.25];
        let mut runs = program.runs(&problem, 1000);
        let mut blocks = Vec::new();
        let all = runs
            .outputs_while(&params, |start, ys| {
                blocks.push((start, ys.len()));
                blocks.len() < 3
            })
            .unwrap();
        assert!(!all, "{text}: stopped");
        assert_eq!(blocks.len(), 3, "{text}: the block that stopped it is the last handed over");
        assert_eq!(blocks[2].0 + blocks[2].1, blocks.iter().map(|b| b.1).sum::<usize>(), "{text}");
        let (mut outputs, mut rows) = (Vec::new(), Vec::new());
        runs.linearize(&params, |_, ys, r| {
            outputs.extend_from_slice(ys);
            rows.extend_from_slice(r);
        })
        .unwrap();
        let lin = program.linearize(&problem, &params, 1000).unwrap();
        let bits32 = |v: &[f32]| v.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
        let bits64 = |v: &[f64]| v.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits32(&outputs), bits32(&lin.outputs), "{text}: outputs");
        assert_eq!(bits64(&rows), bits64(&lin.jacobian), "{text}: rows");
        assert!(runs.outputs_while(&params, |_, _| true).unwrap(), "{text}: a run to the end");
    }
}

/// A run with derivatives takes the call values of the plain run before it only at the same
/// values to the bit: after a plain run at `p[0] = 0`, one at `-0` calls `sinf(-0)` itself, and
/// `1 / sinf(p[0])` is -inf there, as `linearize` gives it.
#[test]
fn kept_call_values_serve_only_the_same_values_to_the_bit() {
    let problem = keijzer6();
    let program = Program::parse(&problem, &Phenotype::new("1.0f / sinf(p[0]) + x")).unwrap();
    let mut runs = program.runs(&problem, 1000);
    runs.outputs(&[0.0], |_, _| {}).unwrap();
    let mut outputs = Vec::new();
    runs.linearize(&[-0.0], |_, ys, _| outputs.extend_from_slice(ys)).unwrap();
    let want = program.linearize(&problem, &[-0.0], 1000).unwrap().outputs;
    assert!(want.iter().all(|y| *y == f32::NEG_INFINITY), "{want:?}");
    assert_eq!(outputs, want);
}

/// Each case handed over in order, its output and Jacobian row those of `linearize`, bit for bit,
/// by the block evaluation and by the tree walk (a branch) alike.
#[test]
fn linearize_each_hands_over_linearize_s_outputs_and_rows_bit_for_bit() {
    let problem = keijzer6();
    for text in
        ["sinf(x * p[0]) * p[1] + expf(p[2] / x) - p[0] * 07.35", "x > p[0] ? p[1] * x : cosf(p[2] * x)"]
    {
        let program = Program::parse(&problem, &Phenotype::new(text)).unwrap();
        let params = [0.7f32, -1.3, 0.25];
        let lin = program.linearize(&problem, &params, 1000).unwrap();
        let mut seen = 0;
        program
            .linearize_each(&problem, &params, 1000, |c, y, row| {
                assert_eq!(c, seen, "{text}: cases in order");
                assert_eq!(y.to_bits(), lin.outputs[c].to_bits(), "{text}: case {c}");
                let want = &lin.jacobian[c * 3..(c + 1) * 3];
                assert!(row.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()), "{text}: case {c}");
                seen += 1;
            })
            .unwrap();
        assert_eq!(seen, problem.cases().len(), "{text}");
        assert!(lin.jacobian.iter().any(|&d| d != 0.0), "{text}: derivatives");
    }
}
