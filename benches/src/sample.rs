//! Sampling populations the way the paper did: the first generations of independently seeded
//! runs, each rendered once into the units every method compiles.

use anyhow::{Result, anyhow};
use gpfarm_client::Unit;
use gpfarm_client::partition::{UnitPlan, plan};
use gpfarm_gp::Program;
use gpfarm_gp::{Evolution, EvolutionConfig, Phenotype, Problem, evaluate_all};
use gpfarm_kernels::unit::{self, render_batch};
use gpfarm_protocol::{Language, Route, Shape};
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
                        // The paper's experiment evolves by grammatical evolution.
                        representation: gpfarm_gp::Representation::Ge,
                        max_size: 0,
                        ..Default::default()
                    },
                )?;
                for generation in 0..config.generations {
                    let phenotypes: Vec<Phenotype> =
                        evo.population().iter().filter_map(|i| i.phenotype().cloned()).collect();
                    let mut rendered = Vec::new();
                    for &route in &config.routes {
                        let language = compiled(route)?;
                        if language == Language::Ptx {
                            gpfarm_kernels::ptx_supported(&problem)?;
                        }
                        let units = match config.guided {
                            None => UnitPlan::PerUnit(config.per_unit),
                            Some(workers) => UnitPlan::new(None, workers, unit::bounds(language)),
                        };
                        let (phenotypes, parts) = planned(&problem, &phenotypes, language, units);
                        for &shape in &config.shapes {
                            let units: Vec<Unit> = render_batch(
                                &problem,
                                language,
                                shape,
                                config.arch,
                                &phenotypes,
                                generation,
                                &parts,
                            )
                            .units
                            .into_iter()
                            .map(|u| Unit { name: format!("{name}_{size}_{run}_{}", u.unit.name), ..u.unit })
                            .collect();
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

/// The language of a compared route's units; an error for a route that compiles no individual.
pub(crate) fn compiled(route: Route) -> Result<Language> {
    route.language().ok_or_else(|| anyhow!("the {route} route compiles no individual: compare nvrtc or ptx"))
}

/// The units the engine forms of `phenotypes` in `language` by `units`
/// ([`gpfarm_client::partition::plan`] over [`unit::weight`], as `gpfarm evolve` forms them):
/// the phenotypes reordered so that each unit is a contiguous range, and those ranges, heaviest
/// unit first.
pub(crate) fn planned(
    problem: &Problem,
    phenotypes: &[Phenotype],
    language: Language,
    units: UnitPlan,
) -> (Vec<Phenotype>, Vec<Range<usize>>) {
    let weights: Vec<f64> = phenotypes
        .iter()
        .map(|p| {
            // A phenotype the PTX route refuses is left out of its unit.
            let program = match language {
                Language::Ptx => Program::parse(problem, p).ok(),
                Language::CudaC => None,
            };
            unit::weight(problem, language, p, program.as_ref())
        })
        .collect();
    let chunks = plan(&weights, units);
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
        let evo = Evolution::new(
            &problem,
            EvolutionConfig {
                population: 300,
                seed: 5,
                representation: gpfarm_gp::Representation::Ge,
                generations: 50,
                max_size: 0,
                ..Default::default()
            },
        )
        .unwrap();
        let phenotypes: Vec<Phenotype> =
            evo.population().iter().filter_map(|i| i.phenotype().cloned()).collect();
        for route in [Language::CudaC, Language::Ptx] {
            let (ordered, parts) =
                planned(&problem, &phenotypes, route, UnitPlan::new(None, 16, unit::bounds(route)));
            let text = |v: &[Phenotype]| {
                let mut t: Vec<String> = v.iter().map(|p| p.as_str().to_owned()).collect();
                t.sort();
                t
            };
            assert_eq!(text(&ordered), text(&phenotypes), "{route:?}");
            assert_eq!(parts.first().map(|r| r.start), Some(0));
            assert_eq!(parts.last().map(|r| r.end), Some(ordered.len()));
            assert!(parts.windows(2).all(|w| w[0].end == w[1].start && !w[1].is_empty()));
            // Enough units for every one of 16 workers, not one per individual.
            assert!(parts.len() >= 16 && parts.len() < ordered.len() / 2, "{route:?}: {} units", parts.len());
        }
    }

    #[test]
    fn fixed_units_are_the_engines_four_three_three_for_ten() {
        let problem = Problem::builtin("keijzer6").unwrap();
        let phenotypes: Vec<Phenotype> = (0..10).map(|i| Phenotype::new(format!("x + {i}.0f"))).collect();
        for language in [Language::CudaC, Language::Ptx] {
            let (_, parts) = planned(&problem, &phenotypes, language, UnitPlan::PerUnit(4));
            let sizes: Vec<usize> = parts.iter().map(|r| r.len()).collect();
            assert_eq!(sizes, vec![4, 3, 3], "{language:?}");
        }
    }
}
