//! The CPU evaluator against answers computed independently from the data.

use gpfarm_gp::problem::{InputColumn, ProblemSources};
use gpfarm_gp::program::Failure;
use gpfarm_gp::{
    Column, Direction, Fitness, Genome, MappingLimits, Phenotype, Problem, Program, evaluate_phenotype, map,
};

fn search() -> Problem {
    Problem::builtin("search").unwrap()
}

fn ints(c: &Column) -> &[i32] {
    match c {
        Column::Int(v) => v,
        Column::Float(_) => panic!("expected an int column"),
    }
}

/// Each search case as (list, searched value, target), straight from the problem data.
fn search_cases(p: &Problem) -> Vec<(Vec<i32>, i32, i32)> {
    let InputColumn::Scalar(Column::Int(search)) = &p.cases().inputs()[1] else {
        panic!("SEARCH is not an int column");
    };
    let targets = ints(p.cases().targets());
    (0..p.cases().len()).map(|c| (p.cases().array(0, c).unwrap().to_vec(), search[c], targets[c])).collect()
}

#[test]
fn a_correct_search_program_answers_all_32_cases() {
    let p = search();
    let program = Phenotype::new(
        "for(i=0;i < LENINPUT;i++){if (INPUT[tmp % LENINPUT] != SEARCH) {tmp = tmp + 1;}}\
         OUTPUT = tmp;if (tmp == i) {OUTPUT = (-1);}",
    );
    let e = evaluate_phenotype(&p, &program);
    assert_eq!(e.failure, None);
    assert_eq!(e.fitness, Fitness::new(32.0, Direction::Higher));
}

#[test]
fn a_mapped_genome_reaches_the_same_perfect_search_score() {
    let p = search();
    let codons = vec![
        2, 2, 0, 1, 1, 2, 0, 3, 1, 1, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0, 2, 1, 1, 1, 0, 0,
        1, 1, 0, 2,
    ];
    let m = map(p.grammar(), &Genome(codons), &MappingLimits::default());
    let e = evaluate_phenotype(&p, m.phenotype().unwrap());
    assert_eq!(e.fitness.value(), 32.0);
}

#[test]
fn a_program_in_general_c_with_first_index_semantics_scores_32() {
    let p = search();
    let program = Phenotype::new(
        "OUTPUT = -1; for (i = 0; i < LENINPUT; i++) { if (OUTPUT == -1 && INPUT[i] == SEARCH) OUTPUT = i; }",
    );
    assert_eq!(evaluate_phenotype(&p, &program).fitness.value(), 32.0);
}

#[test]
fn always_answering_minus_one_scores_the_number_of_absent_cases() {
    let p = search();
    let absent = search_cases(&p).iter().filter(|(list, s, _)| !list.contains(s)).count();
    assert_eq!(absent, 16);
    let e = evaluate_phenotype(&p, &Phenotype::new("OUTPUT = (-1);"));
    assert_eq!(e.fitness.value(), absent as f64);
}

#[test]
fn answering_the_last_match_is_wrong_exactly_where_the_value_repeats_before_it() {
    let p = search();
    let expected = search_cases(&p)
        .iter()
        .filter(|(list, s, _)| list.iter().rposition(|v| v == s) == list.iter().position(|v| v == s))
        .count();
    assert!(expected < 32, "the shipped cases repeat some searched values");
    let e = evaluate_phenotype(
        &p,
        &Phenotype::new(
            "OUTPUT = (-1);for(i=0;i < LENINPUT;i++){if (INPUT[i % LENINPUT] == SEARCH) {OUTPUT = i;}}",
        ),
    );
    assert_eq!(e.fitness.value(), expected as f64);
}

#[test]
fn negative_indices_read_from_the_end_of_the_list() {
    let p = search();
    let program =
        Program::parse(&p, &Phenotype::new("OUTPUT = INPUT[(-1) % LENINPUT];tmp = INPUT[tmp - 2];")).unwrap();
    let out = program.run(&p).unwrap();
    let cases = search_cases(&p);
    for (c, (list, _, _)) in cases.iter().enumerate() {
        assert_eq!(ints(&out[0])[c], list[list.len() - 1], "case {c}");
    }
}

#[test]
fn locals_and_outputs_start_at_zero() {
    let p = search();
    let out = Program::parse(&p, &Phenotype::new("OUTPUT = tmp + i;")).unwrap().run(&p).unwrap();
    assert!(ints(&out[0]).iter().all(|&v| v == 0));
}

#[test]
fn assigning_an_input_or_using_an_unknown_name_does_not_compile() {
    let p = search();
    for text in ["SEARCH = 1;", "LENINPUT = 1;", "OUTPUT = y;", "OUTPUT = INPUT;", "OUTPUT = 1"] {
        let e = evaluate_phenotype(&p, &Phenotype::new(text));
        assert!(matches!(e.failure, Some(Failure::Compile(_))), "{text}: {:?}", e.failure);
        assert_eq!(e.fitness, Fitness::worst(Direction::Higher));
    }
}

#[test]
fn a_runaway_loop_is_invalid_with_its_reason() {
    let p = search();
    let e = evaluate_phenotype(&p, &Phenotype::new("for(;;){tmp = tmp + 1;}"));
    let Some(Failure::Run(r)) = &e.failure else {
        panic!("expected a run failure, got {:?}", e.failure);
    };
    assert!(r.to_string().contains("loop iterations"), "{r}");
    assert_eq!(e.fitness, Fitness::worst(Direction::Higher));
}

fn multiplier_errors(output_word: impl Fn(u32, u32) -> u32) -> f64 {
    (0u32..1024)
        .map(|c| {
            let (a, b) = (c & 31, c >> 5);
            f64::from(((output_word(a, b) ^ (a * b)) & 0x3FF).count_ones())
        })
        .sum()
}

#[test]
fn multiplier_fitness_counts_wrong_bits_of_the_product() {
    let p = Problem::builtin("multiplier5").unwrap();
    let all: String = (0..10).map(|k| format!("o{k}=(a0 & b0);")).collect();
    let e = evaluate_phenotype(&p, &Phenotype::new(all));
    // Every output bit is a0 AND b0, so the word is all ones or all zeros.
    let expected = multiplier_errors(|a, b| if a & b & 1 == 1 { 0x3FF } else { 0 });
    assert_eq!(e.fitness, Fitness::new(expected, Direction::Lower));
}

#[test]
fn multiplier_not_uses_bit_zero_of_the_complement() {
    let p = Problem::builtin("multiplier5").unwrap();
    // o0 = ~a0 is -1 or -2; only bit 0 counts, so output bit 0 is "not a0".
    let text: String = std::iter::once("o0=(~ a0);".to_string())
        .chain((1..10).map(|k| format!("o{k}=(a0 & (~ a0));")))
        .collect();
    let e = evaluate_phenotype(&p, &Phenotype::new(text));
    let expected = multiplier_errors(|a, _| !a & 1);
    assert_eq!(e.fitness.value(), expected);
}

#[test]
fn a_correct_multiplier_scores_zero() {
    let p = Problem::builtin("multiplier5").unwrap();
    // Written in general C, not the grammar: rebuild a and b and spread the product.
    let mut text = String::from(
        "o0 = ((a0 | (a1 << 1) | (a2 << 2) | (a3 << 3) | (a4 << 4)) * (b0 | (b1 << 1) | (b2 << 2) | (b3 << 3) | (b4 << 4)));",
    );
    for k in 1..10 {
        text.push_str(&format!("o{k} = o0 >> {k};"));
    }
    assert_eq!(evaluate_phenotype(&p, &Phenotype::new(text)).fitness.value(), 0.0);
}

fn keijzer_rmse(f: impl Fn(f32) -> f32) -> f64 {
    let h = |x: u32| (1..=x).map(|i| 1.0 / f64::from(i)).sum::<f64>() as f32;
    let sum: f64 = (1..=64u32)
        .map(|x| {
            let d = f64::from(f(x as f32)) - f64::from(h(x));
            d * d
        })
        .sum();
    (sum / 64.0).sqrt()
}

#[test]
fn keijzer6_rmse_of_x_matches_a_direct_computation() {
    let p = Problem::builtin("keijzer6").unwrap();
    let got = evaluate_phenotype(&p, &Phenotype::new("x")).fitness.value();
    let want = keijzer_rmse(|x| x);
    assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
}

#[test]
fn keijzer6_rmse_of_log_matches_a_direct_computation() {
    let p = Problem::builtin("keijzer6").unwrap();
    let got = evaluate_phenotype(&p, &Phenotype::new("logf(fabsf(x)+1)")).fitness.value();
    let want = keijzer_rmse(|x| (x.abs() + 1.0).ln());
    // Same f32 operations on both sides: agreement to f64 rounding of the sum.
    assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
    assert!(got < 1.0, "ln(x+1) tracks H(x) closely: {got}");
}

#[test]
fn keijzer6_double_constants_promote_the_arithmetic_to_double() {
    let p = Problem::builtin("keijzer6").unwrap();
    let out = Program::parse(&p, &Phenotype::new("x * 00.10 + x")).unwrap().run(&p).unwrap();
    let Column::Float(ys) = &out[0] else { panic!("keijzer6 outputs floats") };
    for (k, y) in ys.iter().enumerate() {
        let x = (k + 1) as f32;
        let double = (f64::from(x) * 0.1 + f64::from(x)) as f32;
        assert_eq!(*y, double, "x = {x}");
    }
}

fn float_problem(x: f32) -> Problem {
    Problem::from_sources(
        "test",
        &ProblemSources {
            toml: "name = \"f\"\nkind = \"expression\"\nfitness = \"rmse\"\n[[inputs]]\nname = \"x\"\ntype = \"float\"\n[[outputs]]\nname = \"y\"\ntype = \"float\"\n[target]\ntype = \"float\"\n",
            grammar: "<e> ::= x",
            cases: &format!("[{{\"x\": {x:?}, \"target\": 0}}]"),
            template: "//@kernel\nextern \"C\" __global__ void {{KERNEL}}(const float* in_x, float* out_y, int NCASES) { int c = 0; const float x = in_x[c]; out_y[c] = (float)({{PHENOTYPE}}); }\n",
        },
    )
    .unwrap()
}

fn float_out(p: &Problem, text: &str) -> f32 {
    match &Program::parse(p, &Phenotype::new(text)).unwrap().run(p).unwrap()[0] {
        Column::Float(v) => v[0],
        Column::Int(_) => panic!("float output expected"),
    }
}

#[test]
fn float_arithmetic_overflows_where_double_arithmetic_does_not() {
    let p = float_problem(3.0e38);
    // In float, x * 10 overflows to infinity; with a double constant it does not.
    assert_eq!(float_out(&p, "x * 10.0f / 10.0f"), f32::INFINITY);
    assert_eq!(float_out(&p, "x * 10.00 / 10.00"), 3.0e38);
    // sinf converts its double argument to float first: 3e39 becomes infinity, and
    // the sine of infinity is NaN (in double it would have been finite).
    assert!(float_out(&p, "sinf(x * 10.00)").is_nan());
}

#[test]
fn an_infinite_error_gives_the_worst_fitness() {
    let p = Problem::builtin("keijzer6").unwrap();
    let e = evaluate_phenotype(&p, &Phenotype::new("expf(x * 99.99)"));
    assert_eq!(e.fitness, Fitness::worst(Direction::Lower));
    assert!(!e.fitness.is_finite());
}

#[test]
fn float_to_int_conversions_truncate_toward_zero() {
    let p = search();
    let out =
        Program::parse(&p, &Phenotype::new("OUTPUT = (int)(-2.75) * 10 + 2.9f;")).unwrap().run(&p).unwrap();
    // (int)(-2.75) = -2; -20 + 2.9f = -17.1f; stored to int: -17.
    assert!(ints(&out[0]).iter().all(|&v| v == -17));
}

/// `problem.toml`'s `max_steps` (or `--max-steps`) is the limit a loop may run to in one case.
#[test]
fn the_step_limit_is_the_problems_own() {
    let toml = |extra: &str| {
        format!(
            "name = \"count\"\nkind = \"statements\"\nfitness = \"correct\"\n{extra}[[inputs]]\nname = \"n\"\ntype = \"int\"\n[[locals]]\nname = \"i\"\ntype = \"int\"\n[[outputs]]\nname = \"y\"\ntype = \"int\"\n[target]\ntype = \"int\"\n"
        )
    };
    let load = |extra: &str| {
        let toml = toml(extra);
        Problem::from_sources(
            "test",
            &ProblemSources {
                toml: &toml,
                grammar: "<s> ::= y = n;",
                cases: "[{\"n\": 1, \"target\": 1}]",
                template: "//@kernel\nextern \"C\" __global__ void {{KERNEL}}(const int* in_n, int* out_y, int NCASES) { int c = 0; const int n = in_n[c]; int i = 0; int y = 0; {{PHENOTYPE}} out_y[c] = y; }\n",
            },
        )
    };
    // Five tests of the condition for four iterations.
    let text = Phenotype::new("while(i < 4){i = i + 1;} y = i;");
    let runs = |p: &Problem| Program::parse(p, &text).unwrap().run(p).is_ok();
    let default = load("").unwrap();
    assert_eq!(default.max_steps(), gpfarm_gp::program::DEFAULT_MAX_STEPS);
    assert!(runs(&default));
    assert!(runs(&load("max_steps = 5\n").unwrap()));
    assert!(!runs(&load("max_steps = 4\n").unwrap()));
    assert!(!runs(&default.clone().with_max_steps(4).unwrap()));
    assert!(default.with_max_steps(0).is_none());
    let e = load("max_steps = 0\n").err().unwrap().to_string();
    assert!(e.contains("max_steps") && e.contains("at least 1"), "{e}");
}
