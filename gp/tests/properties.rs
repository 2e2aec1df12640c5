//! Properties that must hold for any input: no panics on arbitrary genomes or text,
//! and operators that keep codons in range.

use gpfarm_gp::operators::{int_flip, variable_onepoint};
use gpfarm_gp::{Genome, Grammar, MappingLimits, Phenotype, Problem, evaluate_phenotype, map};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn mapping_never_panics_and_valid_phenotypes_evaluate(
        codons in prop::collection::vec(any::<u32>(), 0..120),
        which in 0usize..3,
        wraps in 0u32..4,
    ) {
        let p = Problem::builtin(Problem::builtin_names()[which]).unwrap();
        let limits = MappingLimits { max_wraps: wraps, ..MappingLimits::default() };
        let m = map(p.grammar(), &Genome(codons.clone()), &limits);
        if let Some(d) = m.derivation() {
            prop_assert!(d.used_codons <= codons.len() * (wraps as usize + 1));
            // Everything the grammars derive is in the evaluator's C subset.
            let e = evaluate_phenotype(&p, &d.phenotype);
            prop_assert!(
                !matches!(e.failure, Some(gpfarm_gp::program::Failure::Compile(_))),
                "{}: {:?}", d.phenotype, e.failure
            );
        }
    }

    #[test]
    fn crossover_and_mutation_keep_codons_in_range(
        a in prop::collection::vec(0u32..1000, 0..50),
        b in prop::collection::vec(0u32..1000, 0..50),
        used_a in prop::option::of(0usize..80),
        used_b in prop::option::of(0usize..80),
        seed in any::<u64>(),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (x, y) = variable_onepoint(&mut rng, &Genome(a.clone()), used_a, &Genome(b.clone()), used_b);
        prop_assert_eq!(x.len() + y.len(), a.len() + b.len());
        for mut g in [x, y] {
            let used = Some(g.len() / 2);
            int_flip(&mut rng, &mut g, used, None, 1000);
            prop_assert!(g.codons().iter().all(|&c| c < 1000));
        }
    }

    #[test]
    fn grammar_parser_never_panics(text in "(<[a-c]{1,2}>|::=|\\||\"|#lesser#|#or#|[ a-z<>#\n]){0,60}") {
        let _ = Grammar::parse(&text);
    }

    #[test]
    fn grammar_parser_never_panics_on_any_text(text in "\\PC{0,200}") {
        let _ = Grammar::parse(&text);
    }

    #[test]
    fn interpreter_never_panics_on_arbitrary_text(
        text in "([-+*/%<>=!~&|^?:;(){}\\[\\], ]|tmp|i|OUTPUT|SEARCH|INPUT|LENINPUT|for|if|else|while|sinf|[0-9]{1,3}|\\.[0-9]){0,60}",
    ) {
        let p = Problem::builtin("search").unwrap();
        let _ = evaluate_phenotype(&p, &Phenotype::new(text));
    }
}

#[test]
fn deeply_nested_phenotypes_are_refused_without_overflowing_the_stack() {
    let p = Problem::builtin("keijzer6").unwrap();
    for text in [
        format!("{}x{}", "sinf(".repeat(5000), ")".repeat(5000)),
        format!("{}x{}", "(".repeat(5000), ")".repeat(5000)),
        "- ".repeat(5000) + "x",
    ] {
        let e = evaluate_phenotype(&p, &Phenotype::new(text));
        assert!(matches!(e.failure, Some(gpfarm_gp::program::Failure::Compile(_))), "{:?}", e.failure);
    }
    // Moderate nesting still works.
    let e = evaluate_phenotype(&p, &Phenotype::new(format!("{}x{}", "sinf(".repeat(150), ")".repeat(150))));
    assert!(e.failure.is_none(), "{:?}", e.failure);
}

#[test]
fn long_flat_sums_are_not_nesting() {
    let p = Problem::builtin("keijzer6").unwrap();
    let program = gpfarm_gp::Program::parse(&p, &Phenotype::new("x + ".repeat(5000) + "x")).unwrap();
    let out = program.run(&p).unwrap();
    let gpfarm_gp::Column::Float(ys) = &out[0] else { panic!("float output") };
    for (k, y) in ys.iter().enumerate() {
        // Left-to-right float additions, as C evaluates them.
        let x = (k + 1) as f32;
        let want = (0..5000).fold(x, |acc, _| acc + x);
        assert_eq!(*y, want);
    }
}

#[test]
fn the_deepest_trees_mapping_allows_still_compile() {
    // Trees ramped up to the default depth limit of 90, half of them "full", exercise
    // the deepest nesting a built-in grammar can put into a phenotype.
    let limits = MappingLimits::default();
    for name in Problem::builtin_names() {
        let p = Problem::builtin(name).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(90);
        let genomes = gpfarm_gp::init::sensible_genomes(
            p.grammar(),
            &mut rng,
            200,
            limits.max_depth as u32,
            100_000,
            4000,
        )
        .unwrap();
        let mut deepest = 0;
        for g in &genomes {
            let m = map(p.grammar(), g, &limits);
            let d = m.derivation().unwrap_or_else(|| panic!("{name}: {m:?}"));
            deepest = deepest.max(d.max_depth);
            if let Err(e) = gpfarm_gp::Program::parse(&p, &d.phenotype) {
                panic!("{name}: depth {} does not compile: {e}", d.max_depth);
            }
        }
        // Search's grammar cannot nest deeply; the recursive grammars reach the limit.
        let reachable = if *name == "search" { 10 } else { 85 };
        assert!(deepest >= reachable, "{name}: deepest tree only {deepest}");
    }
}
