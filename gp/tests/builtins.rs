//! The three built-in problems load, their grammars are sound, and their templates
//! follow the kernel convention.

use gpfarm_gp::problem::{InputColumn, ParamRole};
use gpfarm_gp::{Direction, KernelName, Phenotype, Problem};

#[test]
fn every_builtin_loads_and_its_grammar_is_sound() {
    assert_eq!(Problem::builtin_names(), ["search", "keijzer6", "multiplier5"]);
    for name in Problem::builtin_names() {
        let p = Problem::builtin(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let g = p.grammar();
        assert!(g.unreachable_rules().is_empty(), "{name}: unreachable {:?}", g.unreachable_rules());
        assert!(
            g.non_terminating_rules().is_empty(),
            "{name}: cannot terminate {:?}",
            g.non_terminating_rules()
        );
    }
}

#[test]
fn start_rules_and_sizes_match_the_paper() {
    let search = Problem::builtin("search").unwrap();
    let g = search.grammar();
    assert_eq!(g.rule(g.start()).name(), "c-block");
    assert_eq!(g.rules().len(), 22);
    let k6 = Problem::builtin("keijzer6").unwrap();
    let g = k6.grammar();
    assert_eq!(g.rule(g.start()).name(), "e");
    let alts: Vec<usize> =
        ["e", "e2", "e3", "c"].iter().map(|r| g.rule(g.rule_id(r).unwrap()).alternatives().len()).collect();
    assert_eq!(alts, [17, 21, 25, 10]);
    let mul = Problem::builtin("multiplier5").unwrap();
    let g = mul.grammar();
    assert_eq!(g.rule(g.start()).name(), "start");
    assert_eq!(g.rule(g.rule_id("expr2").unwrap()).alternatives().len(), 5);
}

#[test]
fn recursive_alternatives_are_the_self_embedding_ones() {
    let k6 = Problem::builtin("keijzer6").unwrap();
    let g = k6.grammar();
    let e3 = g.rule(g.rule_id("e3").unwrap());
    // The first nine alternatives of <e3> contain <e3>; x and the constants do not.
    let recursive: Vec<bool> = e3.alternatives().iter().map(|a| a.is_recursive()).collect();
    assert!(recursive[..9].iter().all(|&r| r));
    assert!(recursive[9..].iter().all(|&r| !r));
    // <e> never derives <e> again.
    let e = g.rule(g.start());
    assert!(e.alternatives().iter().all(|a| !a.is_recursive()));
}

#[test]
fn fitness_directions_follow_the_fitness_kinds() {
    let dir = |n| Problem::builtin(n).unwrap().direction();
    assert_eq!(dir("search"), Direction::Higher);
    assert_eq!(dir("keijzer6"), Direction::Lower);
    assert_eq!(dir("multiplier5"), Direction::Lower);
}

#[test]
fn kernel_parameters_follow_the_convention() {
    let names = |n: &str| -> Vec<String> {
        Problem::builtin(n)
            .unwrap()
            .kernel_params()
            .into_iter()
            .map(|p| format!("{} {}", p.c_type, p.name))
            .collect()
    };
    assert_eq!(
        names("search"),
        [
            "const int* in_INPUT",
            "const int* in_LENINPUT",
            "const int* in_SEARCH",
            "int* out_OUTPUT",
            "int NCASES"
        ]
    );
    assert_eq!(names("keijzer6"), ["const float* in_x", "float* out_y", "int NCASES"]);
    let mul = names("multiplier5");
    assert_eq!(mul.len(), 11);
    assert_eq!(mul[0], "int* out_o0");
    assert_eq!(mul[10], "int NCASES");
    let search = Problem::builtin("search").unwrap();
    assert_eq!(search.kernel_params()[1].role, ParamRole::Lengths(0));
}

#[test]
fn search_template_strides_the_lists_by_their_declared_max_len() {
    let p = Problem::builtin("search").unwrap();
    let Some(InputColumn::IntArray { max_len, data, lens }) = p.cases().inputs().first() else {
        panic!("INPUT is not an int array");
    };
    assert_eq!(data.len(), max_len * p.cases().len());
    assert_eq!(lens.len(), p.cases().len());
    let stride = format!("in_INPUT + c * {max_len}");
    assert!(p.template().kernel_template().contains(&stride), "template must use {stride}");
}

#[test]
fn rendering_places_name_and_phenotype_and_keeps_the_preamble_apart() {
    let p = Problem::builtin("keijzer6").unwrap();
    let name = KernelName::new("gp_ind_7").unwrap();
    let src = p.template().render_kernel(&name, &Phenotype::new("x * 01.50"));
    assert!(src.contains("extern \"C\" __global__ void gp_ind_7("));
    assert!(src.contains("out_y[c] = (float)(x * 01.50);"));
    assert!(!src.contains("{{"));
    let search = Problem::builtin("search").unwrap();
    assert!(search.template().preamble().contains("struct gp_wrapped_ints"));
    assert!(!search.template().kernel_template().contains("struct gp_wrapped_ints"));
}

#[test]
fn a_problem_directory_loads_like_its_builtin() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("problems/search");
    let loaded = Problem::load(&dir).unwrap();
    let builtin = Problem::builtin("search").unwrap();
    assert_eq!(loaded.spec(), builtin.spec());
    assert_eq!(loaded.cases(), builtin.cases());
    assert_eq!(loaded.grammar(), builtin.grammar());
}

#[test]
fn a_missing_file_is_named_in_the_error() {
    let dir = std::env::temp_dir().join("gpfarm-gp-no-such-problem");
    let err = Problem::load(&dir).unwrap_err().to_string();
    assert!(err.contains("problem.toml"), "{err}");
}

/// A grammar whose programs cannot parse (a slip such as `x + | ( <e>`) is refused with one
/// line that shows a program it writes; the built-ins' grammars pass the same check.
#[test]
fn a_grammar_that_writes_no_parsable_program_is_refused_before_a_run() {
    use gpfarm_gp::problem::{ProblemSources, builtin};

    for name in Problem::builtin_names() {
        let p = Problem::builtin(name).unwrap();
        gpfarm_gp::program::check_problem(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let src = builtin::sources("keijzer6").unwrap();
    let bad = "<e> ::= x + | ( <e>\n";
    let p = Problem::from_sources("t", &ProblemSources { grammar: bad, ..src }).unwrap();
    let err = gpfarm_gp::program::check_problem(&p).unwrap_err().to_string();
    assert!(err.starts_with("grammar.bnf: the grammar writes no program that parses, e.g. `"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}
