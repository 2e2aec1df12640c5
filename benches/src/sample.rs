//! Sampling populations the way the paper did: the first generations of independently seeded
//! runs, each rendered once into the units every method compiles.

use anyhow::Result;
use gpfarm_client::Unit;
use gpfarm_client::partition::per_unit;
use gpfarm_gp::{Evolution, EvolutionConfig, Phenotype, Problem, evaluate_all};
use gpfarm_kernels::{render_ptx_units, render_units};
use gpfarm_protocol::{Route, Shape};

use crate::BenchConfig;

/// One population, ready to compile.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Problem name.
    pub problem: String,
    /// Population size of the run.
    pub size: usize,
    /// Run number (seed).
    pub run: usize,
    /// Generation within the run.
    pub generation: usize,
    /// Valid individuals (all are compiled, duplicates too, as in the paper).
    pub individuals: usize,
    /// The same individuals in the same parts, rendered for each compared route and shape.
    pub rendered: Vec<((Route, Shape), Vec<Unit>)>,
}

impl Sample {
    /// The units of `route` in `shape` (none when that pair is not compared).
    pub fn units(&self, route: Route, shape: Shape) -> &[Unit] {
        self.rendered.iter().find(|(k, _)| *k == (route, shape)).map_or(&[], |(_, u)| u)
    }

    /// Units per route and shape (the same for each).
    pub fn unit_count(&self) -> usize {
        self.rendered.first().map_or(0, |(_, u)| u.len())
    }
}

/// Every sample of the configuration, in a fixed order.
pub fn populations(config: &BenchConfig) -> Result<Vec<Sample>> {
    let threads = std::num::NonZeroUsize::new(2).unwrap_or(std::num::NonZeroUsize::MIN);
    let mut samples = Vec::new();
    for name in &config.problems {
        let problem = Problem::builtin(name)?;
        for &size in &config.sizes {
            for run in 1..=config.runs {
                let seed = (run as u64) * 1_000_003 + size as u64;
                let mut evo = Evolution::new(
                    &problem,
                    // Breeding stops at the configured last generation: allow every sampled one.
                    EvolutionConfig {
                        population: size,
                        generations: config.generations,
                        seed,
                        ..Default::default()
                    },
                )?;
                for generation in 0..config.generations {
                    let phenotypes: Vec<Phenotype> =
                        evo.population().iter().filter_map(|i| i.phenotype().cloned()).collect();
                    let parts = per_unit(phenotypes.len(), config.per_unit);
                    let mut rendered = Vec::new();
                    for &route in &config.routes {
                        if route == Route::Ptx {
                            gpfarm_kernels::ptx_supported(&problem)?;
                        }
                        for &shape in &config.shapes {
                            let units: Vec<Unit> = match route {
                                Route::Ptx => render_ptx_units(
                                    &problem,
                                    &phenotypes,
                                    generation,
                                    &parts,
                                    config.arch,
                                    shape,
                                )
                                .units
                                .into_iter()
                                .map(|u| Unit::ptx(format!("{name}_{size}_{run}_{}", u.name), u.source))
                                .collect(),
                                Route::Nvrtc => {
                                    render_units(&problem, &phenotypes, generation, &parts, shape)
                                        .into_iter()
                                        .map(|u| {
                                            Unit::new(format!("{name}_{size}_{run}_{}", u.name), u.source)
                                        })
                                        .collect()
                                }
                            };
                            rendered.push(((route, shape), units));
                        }
                    }
                    samples.push(Sample {
                        problem: name.clone(),
                        size,
                        run,
                        generation,
                        individuals: phenotypes.len(),
                        rendered,
                    });
                    if generation + 1 < config.generations {
                        let dedup = evo.dedup();
                        let fit: Vec<_> = evaluate_all(&problem, &dedup.unique, threads)
                            .iter()
                            .map(|e| e.fitness)
                            .collect();
                        evo.set_fitness(dedup.expand(&fit, problem.direction())?)?;
                        evo.breed()?;
                    }
                }
            }
        }
    }
    Ok(samples)
}
