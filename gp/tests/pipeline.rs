//! Breeding as data arrives gives exactly the run of the classic loop, whatever the depth and
//! whatever the order in which fitness values come back.

use std::num::NonZeroUsize;

use gpfarm_gp::{
    Evolution, EvolutionConfig, EvolutionError, Fitness, GenerationStats, Pipeline, Problem,
    evaluate_phenotype, run_cpu_with,
};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn config(seed: u64) -> EvolutionConfig {
    EvolutionConfig { population: 50, generations: 8, seed, elite: 2, ..EvolutionConfig::default() }
}

/// Runs a pipeline, answering fitness in a shuffled order a few at a time, and returns every
/// generation's statistics and the most generations ever incomplete at once.
fn run_pipeline(
    problem: &Problem,
    cfg: &EvolutionConfig,
    depth: usize,
    order_seed: u64,
) -> (Vec<GenerationStats>, usize) {
    let mut p = Pipeline::new(problem, cfg.clone(), NonZeroUsize::new(depth).unwrap()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(order_seed);
    let mut waiting = Vec::new();
    let mut stats = Vec::new();
    let mut most_open = 0;
    while !p.is_finished() {
        waiting.extend(p.take_born());
        waiting.shuffle(&mut rng);
        let n = rng.random_range(1..=8).min(waiting.len());
        let open: std::collections::BTreeSet<usize> = waiting.iter().map(|b| b.generation).collect();
        most_open = most_open.max(open.len());
        for b in waiting.drain(..n) {
            p.set_fitness(b.generation, b.slot, evaluate_phenotype(problem, &b.phenotype).fitness).unwrap();
        }
        stats.extend(p.advance());
    }
    (stats, most_open)
}

#[test]
fn a_pipeline_gives_the_classic_run_at_any_depth_and_in_any_order() {
    for name in ["keijzer6", "search", "multiplier5"] {
        let problem = Problem::builtin(name).unwrap();
        let cfg = config(7);
        let classic = run_cpu_with(&problem, &cfg, NonZeroUsize::MIN, |_| {}).unwrap();
        for depth in [1, 2, 3] {
            for order in [1, 2] {
                let (stats, most_open) = run_pipeline(&problem, &cfg, depth, order);
                assert_eq!(stats, classic.generations, "{name}, depth {depth}, order {order}");
                assert!(most_open <= depth, "{name}: {most_open} generations open at depth {depth}");
            }
        }
    }
}

#[test]
fn at_depth_two_the_next_generation_is_bred_before_this_one_is_complete() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let cfg = EvolutionConfig { population: 100, generations: 3, seed: 3, ..EvolutionConfig::default() };
    let mut p = Pipeline::new(&problem, cfg, NonZeroUsize::new(2).unwrap()).unwrap();
    let mut first = p.take_born();
    assert!(first.iter().all(|b| b.generation == 0));
    // Answer all but the last few of generation 0.
    let held = first.split_off(first.len() - 3);
    for b in &first {
        p.set_fitness(0, b.slot, evaluate_phenotype(&problem, &b.phenotype).fitness).unwrap();
    }
    assert!(p.advance().is_empty(), "generation 0 is not complete yet");
    let early = p.take_born();
    assert!(
        !early.is_empty() && early.iter().all(|b| b.generation == 1),
        "nothing of generation 1 bred early"
    );
    assert_eq!(p.oldest_open(), Some(0));
    for b in &held {
        p.set_fitness(0, b.slot, evaluate_phenotype(&problem, &b.phenotype).fitness).unwrap();
    }
    let done = p.advance();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].generation, 0);
    // The rest of generation 1 follows at once; elites keep their fitness and are not handed out.
    let rest = p.take_born();
    let slots: std::collections::BTreeSet<usize> = early.iter().chain(&rest).map(|b| b.slot).collect();
    assert!(!slots.contains(&0), "the elite was handed out for evaluation");
    assert!(rest.iter().all(|b| b.generation == 1));
}

#[test]
fn the_classic_loop_breeds_the_same_children_as_the_pipeline_step_by_step() {
    // The same seed and fitness give the same generation-1 population in both.
    let problem = Problem::builtin("search").unwrap();
    let cfg = config(21);
    let mut evo = Evolution::new(&problem, cfg.clone()).unwrap();
    let dedup = evo.dedup();
    let unique: Vec<Fitness> = dedup.unique.iter().map(|p| evaluate_phenotype(&problem, p).fitness).collect();
    evo.set_fitness(dedup.expand(&unique, problem.direction()).unwrap()).unwrap();
    evo.breed().unwrap();
    let mut p = Pipeline::new(&problem, cfg, NonZeroUsize::MIN).unwrap();
    for b in p.take_born() {
        p.set_fitness(b.generation, b.slot, evaluate_phenotype(&problem, &b.phenotype).fitness).unwrap();
    }
    p.advance();
    let bred: Vec<_> = p.take_born();
    for b in &bred {
        assert_eq!(evo.population()[b.slot].phenotype(), Some(&b.phenotype), "slot {}", b.slot);
    }
    let invalid = evo.population().iter().skip(2).filter(|i| i.phenotype().is_none()).count();
    assert_eq!(bred.len() + invalid, 48);
}

#[test]
fn a_fitness_for_nobody_is_an_error_not_a_panic() {
    let problem = Problem::builtin("keijzer6").unwrap();
    let mut p = Pipeline::new(&problem, config(1), NonZeroUsize::MIN).unwrap();
    let b = p.take_born().remove(0);
    let f = evaluate_phenotype(&problem, &b.phenotype).fitness;
    assert!(matches!(p.set_fitness(5, 0, f), Err(EvolutionError::UnknownIndividual { .. })));
    assert!(matches!(p.set_fitness(0, 999, f), Err(EvolutionError::UnknownIndividual { .. })));
    p.set_fitness(0, b.slot, f).unwrap();
    assert!(matches!(p.set_fitness(0, b.slot, f), Err(EvolutionError::UnknownIndividual { .. })));
    let wrong = Fitness::new(1.0, gpfarm_gp::Direction::Higher);
    assert!(matches!(p.set_fitness(0, 1, wrong), Err(EvolutionError::FitnessDirection { .. })));
}
