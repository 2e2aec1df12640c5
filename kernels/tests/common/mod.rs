//! Helpers shared by the tests of this crate.

#![allow(dead_code)]

use gpfarm_gp::{Evolution, EvolutionConfig, Phenotype, Problem, evaluate_all};

/// Distinct phenotypes of generation 0 for each seed, and of generations 1-3 for the first.
pub fn populations(problem: &Problem, seeds: &[u64], population: usize) -> Vec<Vec<Phenotype>> {
    let threads = std::thread::available_parallelism().unwrap();
    let mut out = Vec::new();
    for &seed in seeds {
        let config =
            EvolutionConfig { population, seed, generations: 50, max_size: 0, ..EvolutionConfig::default() };
        let mut evolution = Evolution::new(problem, config).unwrap();
        // Generation 0 of every seed; the first seed's population is also bred three times.
        let generations = if seed == seeds[0] { 4 } else { 1 };
        for generation in 0..generations {
            let dedup = evolution.dedup();
            out.push(dedup.unique.clone());
            if generation + 1 == generations {
                break;
            }
            let fitness: Vec<_> =
                evaluate_all(problem, &dedup.unique, threads).into_iter().map(|e| e.fitness).collect();
            evolution.set_fitness(dedup.expand(&fitness, problem.direction()).unwrap()).unwrap();
            evolution.breed().unwrap();
        }
    }
    out
}
