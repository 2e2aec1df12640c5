//! The classic generational loop, one whole generation at a time, for a caller that evaluates
//! each generation itself (CPU here, or compiled kernels on a GPU), and whole runs on the CPU:
//!
//! ```
//! # use gpfarm_gp::{Evolution, EvolutionConfig, Problem, evaluate_phenotype};
//! let problem = Problem::builtin("keijzer6")?;
//! let config = EvolutionConfig { population: 20, generations: 2, seed: 0, max_size: 0, ..Default::default() };
//! let mut evo = Evolution::new(&problem, config)?;
//! loop {
//!     let dedup = evo.dedup();
//!     let unique: Vec<_> = dedup.unique.iter().map(|p| evaluate_phenotype(&problem, p).fitness).collect();
//!     evo.set_fitness(dedup.expand(&unique, problem.direction())?)?;
//!     let stats = evo.stats()?;
//!     if evo.generation() == 2 { break; }
//!     evo.breed()?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Both are a [`Pipeline`] of depth 1 underneath, so they give exactly its generations:
//! [`Evolution`] only holds the current generation in the shape the classic loop hands out (the
//! whole population, one fitness per individual). Must never breed, rank or summarise a
//! generation itself (the pipeline does), and [`Evolution`] must never evaluate programs.

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use crate::dedup::Dedup;
use crate::fitness::{Direction, Fitness};
use crate::grammar::Grammar;
use crate::mapping::Phenotype;
use crate::pipeline::{Born, GenerationStats, Pipeline, best_index};
use crate::population::{EvolutionConfig, EvolutionError, Individual};
use crate::problem::Problem;
use crate::program::evaluate_all;

/// A population evolving under one grammar, one whole generation at a time.
#[derive(Clone, Debug)]
pub struct Evolution {
    pipeline: Pipeline,
    generation: usize,
    /// The current generation, every slot bred.
    individuals: Vec<Individual>,
    /// Those of its individuals the pipeline waits on for a fitness.
    waiting: Vec<Born>,
    /// Its fitness, one per individual, and its statistics, once set.
    evaluated: Option<(Vec<Fitness>, GenerationStats)>,
}

impl Evolution {
    /// Builds the initial population for `problem`'s grammar.
    pub fn new(problem: &Problem, config: EvolutionConfig) -> Result<Self, EvolutionError> {
        Ok(Self::over(Pipeline::new(problem, config, NonZeroUsize::MIN)?))
    }

    /// Builds the initial population for any grammar and fitness direction.
    pub fn with_grammar(
        grammar: Grammar,
        direction: Direction,
        config: EvolutionConfig,
    ) -> Result<Self, EvolutionError> {
        Ok(Self::over(Pipeline::with_grammar(grammar, direction, config, NonZeroUsize::MIN)?))
    }

    fn over(mut pipeline: Pipeline) -> Self {
        let waiting = pipeline.take_born();
        let individuals = bred(&pipeline, 0);
        Self { pipeline, generation: 0, individuals, waiting, evaluated: None }
    }

    /// The configuration.
    pub fn config(&self) -> &EvolutionConfig {
        self.pipeline.config()
    }

    /// The grammar individuals are mapped with.
    pub fn grammar(&self) -> &Grammar {
        self.pipeline.grammar()
    }

    /// Index of the current generation (0 for the initial one).
    pub fn generation(&self) -> usize {
        self.generation
    }

    /// The current population.
    pub fn population(&self) -> &[Individual] {
        &self.individuals
    }

    /// Distinct phenotypes of the current population, with each individual's index.
    pub fn dedup(&self) -> Dedup {
        Dedup::new(self.individuals.iter().map(Individual::phenotype))
    }

    /// Records one fitness per individual, in population order, once per generation.
    /// Individuals whose mapping failed get the worst fitness, and elites keep the fitness of the
    /// generation they were copied from, whatever is passed for them.
    pub fn set_fitness(&mut self, fitness: Vec<Fitness>) -> Result<(), EvolutionError> {
        if self.evaluated.is_some() {
            return Err(EvolutionError::FitnessAlreadySet { generation: self.generation });
        }
        if fitness.len() != self.individuals.len() {
            return Err(EvolutionError::FitnessCount {
                expected: self.individuals.len(),
                found: fitness.len(),
            });
        }
        let direction = self.pipeline.direction();
        if let Some(f) = fitness.iter().find(|f| f.direction() != direction) {
            return Err(EvolutionError::FitnessDirection { expected: direction, found: f.direction() });
        }
        for b in std::mem::take(&mut self.waiting) {
            self.pipeline.set_fitness(b.generation, b.slot, fitness[b.slot])?;
        }
        // Read before `advance`, which lets go of a generation once it reports it. At depth 1 a
        // generation with every fitness known is complete, and `advance` reports it.
        let known = self.pipeline.fitness(self.generation).expect("every fitness of the generation is known");
        let stats = self
            .pipeline
            .advance()
            .into_iter()
            .find(|s| s.generation == self.generation)
            .expect("a complete generation is reported");
        self.evaluated = Some((known, stats));
        Ok(())
    }

    /// The current generation's fitness, once set.
    pub fn fitness(&self) -> Option<&[Fitness]> {
        self.evaluated.as_ref().map(|(f, _)| f.as_slice())
    }

    /// Best individual of the current generation (first on ties), once fitness is set.
    pub fn best(&self) -> Option<(&Individual, Fitness)> {
        let f = &self.evaluated.as_ref()?.0;
        let i = best_index(f)?;
        Some((&self.individuals[i], f[i]))
    }

    /// Best individual seen in any generation so far.
    pub fn best_ever(&self) -> Option<(&Individual, Fitness)> {
        self.pipeline.best_ever()
    }

    /// Statistics of the current generation.
    pub fn stats(&self) -> Result<GenerationStats, EvolutionError> {
        self.evaluated.as_ref().map(|(_, s)| s.clone()).ok_or(EvolutionError::NoFitness)
    }

    /// Moves on to the next generation: elites first, then children of tournament winners,
    /// crossed over and mutated at the configured rates (bred by the pipeline as soon as this
    /// generation's fitness was set).
    pub fn breed(&mut self) -> Result<(), EvolutionError> {
        if self.evaluated.is_none() {
            return Err(EvolutionError::NoFitness);
        }
        if self.generation >= self.pipeline.config().generations {
            return Err(EvolutionError::LastGeneration { generation: self.generation });
        }
        self.generation += 1;
        self.individuals = bred(&self.pipeline, self.generation);
        self.waiting = self.pipeline.take_born();
        self.evaluated = None;
        Ok(())
    }
}

/// Generation `generation` of a depth-1 pipeline, whose slots are all bred as soon as its
/// parent is complete.
fn bred(pipeline: &Pipeline, generation: usize) -> Vec<Individual> {
    pipeline.population(generation).expect("a depth-1 pipeline breeds a whole generation at once")
}

/// The outcome of a CPU run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Statistics of each generation, the initial one first.
    pub generations: Vec<GenerationStats>,
    /// Best phenotype of the run and its fitness.
    pub best: Option<(Phenotype, Fitness)>,
}

/// Runs a whole evolution evaluated by the CPU interpreter on all available cores.
pub fn run_cpu(problem: &Problem, config: &EvolutionConfig) -> Result<RunReport, EvolutionError> {
    let threads = std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN);
    run_cpu_with(problem, config, threads, |_| {})
}

/// As [`run_cpu`], with a thread count and a callback after each generation. Each batch of
/// newly bred individuals is evaluated once per distinct phenotype, on `threads` threads.
pub fn run_cpu_with(
    problem: &Problem,
    config: &EvolutionConfig,
    threads: NonZeroUsize,
    mut on_generation: impl FnMut(&GenerationStats),
) -> Result<RunReport, EvolutionError> {
    let mut pipeline = Pipeline::new(problem, config.clone(), NonZeroUsize::MIN)?;
    let mut generations = Vec::with_capacity(config.generations + 1);
    while !pipeline.is_finished() {
        let born = pipeline.take_born();
        let dedup = Dedup::new(born.iter().map(|b| Some(&b.phenotype)));
        let unique: Vec<Fitness> =
            evaluate_all(problem, &dedup.unique, threads).into_iter().map(|e| e.fitness).collect();
        for (b, f) in born.iter().zip(dedup.expand(&unique, problem.direction())?) {
            pipeline.set_fitness(b.generation, b.slot, f)?;
        }
        for stats in pipeline.advance() {
            on_generation(&stats);
            generations.push(stats);
        }
    }
    let best = pipeline.best_ever().and_then(|(ind, f)| ind.phenotype().map(|p| (p.clone(), f)));
    Ok(RunReport { generations, best })
}
