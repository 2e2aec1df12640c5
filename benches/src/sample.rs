//! Sampling populations the way the paper did: the first generations of independently seeded
//! runs, each rendered once into the units every method compiles.

use anyhow::Result;
use gpfarm_client::Unit;
use gpfarm_client::partition::per_unit;
use gpfarm_evolve::chunks::generation_units;
use gpfarm_gp::Program;
use gpfarm_gp::{Evolution, EvolutionConfig, Phenotype, Problem, evaluate_all};
use gpfarm_kernels::{compile_weight, ptx_compile_weight, render_ptx_units, render_units};
use gpfarm_protocol::{Route, Shape};
use std::ops::Range;

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
                    let mut rendered = Vec::new();
                    for &route in &config.routes {
                        if route == Route::Ptx {
                            gpfarm_kernels::ptx_supported(&problem)?;
                        }
                        let (phenotypes, parts) = match config.guided {
                            None => (phenotypes.clone(), per_unit(phenotypes.len(), config.per_unit)),
                            Some(workers) => guided(&problem, &phenotypes, route, workers),
                        };
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
                    let phenotypes = evo.population().iter().filter(|i| i.phenotype().is_some()).count();
                    samples.push(Sample {
                        problem: name.clone(),
                        size,
                        run,
                        generation,
                        individuals: phenotypes,
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

/// The engine's units of `phenotypes` on `route` for `workers` workers: the phenotypes reordered
/// so that each unit is a contiguous range, and those ranges, heaviest unit first.
pub(crate) fn guided(
    problem: &Problem,
    phenotypes: &[Phenotype],
    route: Route,
    workers: usize,
) -> (Vec<Phenotype>, Vec<Range<usize>>) {
    let weights: Vec<f64> = phenotypes
        .iter()
        .map(|p| match route {
            Route::Nvrtc => compile_weight(p),
            // A phenotype the PTX route refuses is left out of its unit.
            Route::Ptx => {
                Program::compile(problem, p).map_or(0.0, |program| ptx_compile_weight(problem, &program))
            }
        })
        .collect();
    let chunks = generation_units(route, &weights, workers);
    let mut ordered = Vec::with_capacity(phenotypes.len());
    let mut parts = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        let start = ordered.len();
        ordered.extend(chunk.into_iter().map(|i| phenotypes[i].clone()));
        parts.push(start..ordered.len());
    }
    (ordered, parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guided_units_hold_every_phenotype_once_in_contiguous_parts() {
        let problem = Problem::builtin("search").unwrap();
        let evo =
            Evolution::new(&problem, EvolutionConfig { population: 300, seed: 5, ..Default::default() })
                .unwrap();
        let phenotypes: Vec<Phenotype> =
            evo.population().iter().filter_map(|i| i.phenotype().cloned()).collect();
        for route in [Route::Nvrtc, Route::Ptx] {
            let (ordered, parts) = guided(&problem, &phenotypes, route, 16);
            let text = |v: &[Phenotype]| {
                let mut t: Vec<String> = v.iter().map(|p| p.as_str().to_owned()).collect();
                t.sort();
                t
            };
            assert_eq!(text(&ordered), text(&phenotypes), "{route}");
            assert_eq!(parts.first().map(|r| r.start), Some(0));
            assert_eq!(parts.last().map(|r| r.end), Some(ordered.len()));
            assert!(parts.windows(2).all(|w| w[0].end == w[1].start && !w[1].is_empty()));
            // Enough units for every one of 16 workers, not one per individual.
            assert!(parts.len() >= 16 && parts.len() < ordered.len() / 2, "{route}: {} units", parts.len());
        }
    }
}
