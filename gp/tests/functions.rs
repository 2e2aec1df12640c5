//! Functions a problem declares (`[[functions]]`): inlined where programs are parsed, defined
//! in every unit's preamble for the compiled routes, and counted as one node by size.

use gpfarm_gp::problem::{ProblemSources, standard_template};
use gpfarm_gp::{Column, Phenotype, Problem, ProblemError, Program, evaluate_phenotype};

const TOML: &str = r#"name = "f"
start = "e"
kind = "expression"
fitness = "rmse"

[[inputs]]
name = "x"
type = "float"

[[outputs]]
name = "y"
type = "float"

[target]
type = "float"

[[functions]]
name = "softsign"
params = ["a"]
body = "a / (1.0f + fabsf(a))"

[[functions]]
name = "mix"
params = ["a", "b"]
body = "softsign(a) * b + 0.5"
"#;

fn problem(toml: &str) -> Result<Problem, ProblemError> {
    let spec: gpfarm_gp::problem::ProblemSpec = toml::from_str(toml).unwrap();
    let template = standard_template(&spec);
    let cases: Vec<String> =
        (0..50).map(|i| format!("{{\"x\": {}, \"target\": 0}}", i as f32 * 0.37 - 9.0)).collect();
    let cases = format!("[{}]", cases.join(","));
    let grammar = "<e> ::= softsign(<e>) | mix(<e>, <e>) | x\n";
    Problem::from_sources("f", &ProblemSources { toml, grammar, cases: &cases, template: &template })
}

fn values(p: &Problem, text: &str) -> Vec<f32> {
    match evaluate_phenotype(p, &Phenotype::new(text)).outputs.unwrap().remove(0) {
        Column::Float(v) => v,
        Column::Int(_) => panic!("int output"),
    }
}

#[test]
fn a_declared_function_computes_its_body_with_the_arguments_in_place() {
    let p = problem(TOML).unwrap();
    // The body in float; `mix`'s double literal makes its sum double, and the result is
    // converted back to float as a C function returning float does.
    let by_hand = "(float)((x * x / (1.0f + fabsf(x * x))) * softsign(x) + 0.5)";
    assert_eq!(values(&p, "mix(x * x, softsign(x))"), values(&p, by_hand));
    assert_eq!(values(&p, "softsign(x)"), values(&p, "x / (1.0f + fabsf(x))"));
    // A call is one node around its arguments, however large its body.
    let size = |t: &str| Program::parse(&p, &Phenotype::new(t)).unwrap().size();
    assert_eq!(size("softsign(x)"), 2);
    assert_eq!(size("mix(x * x, softsign(x))"), 6);
    // The compiled routes get definitions in every unit's preamble.
    let preamble = p.template().preamble();
    assert!(
        preamble.contains(
            "__device__ __forceinline__ float softsign(float a) { return (float)(a / (1.0f + fabsf(a))); }"
        ),
        "{preamble}"
    );
    assert!(preamble.find("softsign(float").unwrap() < preamble.find("mix(float").unwrap());
    // Wrong arity is a parse error that says so.
    let err = Program::parse(&p, &Phenotype::new("softsign(x, x)")).unwrap_err().to_string();
    assert!(err.contains("`softsign` takes 1 argument(s)"), "{err}");
}

#[test]
fn a_bad_declaration_is_a_clear_error_naming_its_field() {
    let cases = [
        (TOML.replace("a / (1.0f + fabsf(a))", "a / (1.0f + q)"), "functions[0].body"),
        (TOML.replace("softsign(a) * b", "later(a) * b"), "functions[1].body"),
        (TOML.replace("name = \"mix\"", "name = \"sinf\""), "functions[1].name"),
        (TOML.replace("name = \"mix\"", "name = \"pdiv\""), "functions[1].name"),
        (TOML.replace("name = \"mix\"", "name = \"pdivf\""), "functions[1].name"),
        (TOML.replace("name = \"mix\"", "name = \"x\""), "functions[1].name"),
        (TOML.replace("params = [\"a\", \"b\"]", "params = [\"a\", \"a\"]"), "functions[1].params"),
        (TOML.replace("params = [\"a\", \"b\"]", "params = []"), "functions[1].params"),
    ];
    for (toml, field) in cases {
        // Loading checks the declarations; the parser checks the bodies, before any run.
        let err = problem(&toml).and_then(|p| gpfarm_gp::program::check_problem(&p)).unwrap_err().to_string();
        assert!(err.contains(field), "{field}: {err}");
    }
}

#[test]
fn declared_functions_nested_past_the_bound_are_refused_not_expanded() {
    let p = problem(TOML).unwrap();
    // `mix` reads its first argument through `softsign`, which reads it twice: nesting doubles
    // the inlined tree at each level.
    let mut text = "x".to_owned();
    for _ in 0..14 {
        text = format!("softsign({text})");
    }
    let started = std::time::Instant::now();
    let err = Program::parse(&p, &Phenotype::new(&text)).unwrap_err();
    assert!(matches!(err, gpfarm_gp::program::ParseError::Inlined { .. }), "{err}");
    assert!(err.to_string().contains("grow past 4096 nodes"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    // Eight levels stay under the bound (2^8 copies of x) and parse, counting 9 nodes.
    let mut text = "x".to_owned();
    for _ in 0..8 {
        text = format!("softsign({text})");
    }
    assert_eq!(Program::parse(&p, &Phenotype::new(&text)).unwrap().size(), 9);
}

#[test]
fn problems_with_other_declarations_parse_with_their_own() {
    // Parsed declarations are kept per thread for the next program: another problem's must
    // not be taken for them.
    let a = problem(TOML).unwrap();
    let b = problem(&TOML.replace("a / (1.0f + fabsf(a))", "a * 2.0f")).unwrap();
    for _ in 0..2 {
        assert_eq!(values(&a, "softsign(x)"), values(&a, "x / (1.0f + fabsf(x))"));
        assert_eq!(values(&b, "softsign(x)"), values(&b, "x * 2.0f"));
    }
}
