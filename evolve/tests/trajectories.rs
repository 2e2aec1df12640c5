//! The engine's generations are the ones recorded before it became a library: each built-in
//! problem, seeds 1 to 3, 20 generations of 300, evaluated on the CPU, best and mean fitness of
//! every generation compared bit for bit with `golden/trajectories.json`. That file was written
//! by `gpfarm evolve --problem P --seed S --generations 20 --eval cpu --no-compile --json` (and
//! checked equal with `--no-cache --no-overlap`) at the commit before the engine moved out of
//! the command line. Caching and overlap must not change a value, so every combination is run.
//! Four of Keijzer-6's means (seed 1 generation 11, seed 2 generations 18 and 20, seed 3
//! generation 15) were written again, by `gpfarm evolve --problem P --seed S --generations 20
//! --population 300 --route cpu --json` (the same run), when the evaluator's `sinf` and
//! `cosf` became its own, correctly rounded, instead of the C library's: they moved in their
//! eleventh to thirteenth digit; every best and every other mean stayed as recorded.

use std::collections::BTreeMap;

use gpfarm_evolve::{Engine, EvalMode, Options, ProblemRef};
use gpfarm_gp::EvolutionConfig;

/// Problem → seed → per generation `[best, mean]`.
type Golden = BTreeMap<String, BTreeMap<String, Vec<(f64, Option<f64>)>>>;

fn golden() -> Golden {
    serde_json::from_str(include_str!("golden/trajectories.json")).expect("the golden file parses")
}

fn trajectory(problem: &str, seed: u64, cache: bool, overlap: bool) -> Vec<(f64, Option<f64>)> {
    let options = Options {
        // Recorded with grammatical evolution's codons.
        evolution: EvolutionConfig {
            population: 300,
            generations: 20,
            seed,
            representation: gpfarm_gp::Representation::Ge,
            max_size: 0,
            ..EvolutionConfig::default()
        },
        eval: EvalMode::Cpu,
        cache,
        overlap,
        ..Options::default()
    };
    let engine = Engine::new(ProblemRef::Builtin(problem.into()), options).expect("a built-in problem");
    let mut records = Vec::new();
    engine
        .run_without_compiling(|r| {
            records.push((r.best, r.mean));
            Ok(())
        })
        .expect("the run completes");
    records
}

#[test]
fn every_built_in_problem_evolves_exactly_as_recorded() {
    let golden = golden();
    assert_eq!(golden.len(), 3, "three built-in problems recorded");
    for (problem, seeds) in &golden {
        assert_eq!(seeds.len(), 3, "{problem}: seeds 1 to 3 recorded");
        for (seed, expected) in seeds {
            assert_eq!(expected.len(), 21, "{problem} seed {seed}: generations 0 to 20 recorded");
            let seed: u64 = seed.parse().expect("a numeric seed");
            for (cache, overlap) in [(true, true), (false, false), (true, false), (false, true)] {
                let got = trajectory(problem, seed, cache, overlap);
                for (g, (a, b)) in got.iter().zip(expected).enumerate() {
                    assert!(
                        a.0.to_bits() == b.0.to_bits() && a.1.map(f64::to_bits) == b.1.map(f64::to_bits),
                        "{problem} seed {seed} (cache {cache}, overlap {overlap}) generation {g}: \
                         got best {} mean {:?}, recorded best {} mean {:?}",
                        a.0,
                        a.1,
                        b.0,
                        b.1
                    );
                }
                assert_eq!(got.len(), expected.len());
            }
        }
    }
}

#[test]
fn a_changed_seed_does_not_match_the_recording() {
    // The comparison above can fail: another seed's run differs from seed 1's recording.
    let golden = golden();
    let recorded = &golden["keijzer6"]["1"];
    assert_ne!(&trajectory("keijzer6", 4, true, true), recorded);
}
