//! The generational loop of grammatical evolution, shaped for a caller that evaluates
//! each generation itself (CPU here, or compiled kernels on a GPU):
//!
//! ```
//! # use gpfarm_gp::{Evolution, EvolutionConfig, Problem, evaluate_phenotype};
//! let problem = Problem::builtin("keijzer6")?;
//! let config = EvolutionConfig { population: 20, generations: 2, ..Default::default() };
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
//! Must never evaluate programs inside the engine, and never draw randomness from
//! anything but its own seeded generator: the same seed and the same fitness values give
//! the same run, bit for bit. Each pair of children draws from a stream of its own (seeded by
//! the run's seed, its generation and its place), so pairs can be bred in any order, as soon as
//! their parents are known, with the same result ([`crate::pipeline`]).

use std::num::NonZeroUsize;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::dedup::{Dedup, DedupMismatch};
use crate::fitness::{Direction, Fitness};
use crate::grammar::Grammar;
use crate::init::{InitMethod, random_genome, sensible_genomes};
use crate::interp::evaluate_all;
use crate::mapping::{Genome, Mapping, MappingLimits, Phenotype, map};
use crate::operators::{contestants, elites, int_flip, variable_onepoint, winner};
use crate::problem::Problem;

/// Parameters of a run. Defaults follow the paper (crossover and mutation rate 0.7) and
/// PonyGE2 elsewhere.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvolutionConfig {
    /// Individuals per generation.
    pub population: usize,
    /// Breeding steps after the first generation (a run sees `generations + 1`).
    pub generations: usize,
    /// Contestants per tournament.
    pub tournament: usize,
    /// Best individuals copied unchanged into the next generation.
    pub elite: usize,
    /// Probability that a pair of parents is crossed over.
    pub crossover_rate: f64,
    /// Probability that a child is mutated.
    pub mutation_rate: f64,
    /// Per-codon flip probability when mutating; `None` means 1 / used codons.
    pub mutation_codon_probability: Option<f64>,
    /// Codons are drawn from `0..codon_size`.
    pub codon_size: u32,
    /// How the first generation is built.
    pub init: InitMethod,
    /// Shortest random initial genome.
    pub init_min_len: usize,
    /// Longest random initial genome.
    pub init_max_len: usize,
    /// Deepest derivation tree of sensible initialisation.
    pub init_max_depth: u32,
    /// Bounds on mapping.
    pub limits: MappingLimits,
    /// Seed of the run's random generator.
    pub seed: u64,
}

impl Default for EvolutionConfig {
    fn default() -> Self {
        Self {
            population: 100,
            generations: 50,
            tournament: 3,
            elite: 1,
            crossover_rate: 0.7,
            mutation_rate: 0.7,
            mutation_codon_probability: None,
            codon_size: 100_000,
            init: InitMethod::Random,
            init_min_len: 20,
            init_max_len: 100,
            init_max_depth: 10,
            limits: MappingLimits::default(),
            seed: 0,
        }
    }
}

/// What went wrong driving an evolution.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvolutionError {
    /// A configuration value is out of range.
    #[error("configuration `{field}`: {message}")]
    Config { field: &'static str, message: String },
    /// The grammar's start rule has no finite derivation (sensible initialisation).
    #[error("the grammar's start rule can never finish deriving, so sensible initialisation is impossible")]
    NonTerminatingGrammar,
    /// `set_fitness` got the wrong number of values.
    #[error("got {found} fitness values for a population of {expected}: give one per individual, in order")]
    FitnessCount { expected: usize, found: usize },
    /// `set_fitness` got values of the wrong direction.
    #[error("fitness direction {found:?} does not match the problem's {expected:?}")]
    FitnessDirection { expected: Direction, found: Direction },
    /// `stats` or `breed` before `set_fitness`.
    #[error("the current generation has no fitness yet: call set_fitness first")]
    NoFitness,
    /// A fitness was given for an individual that is not waiting for one.
    #[error("generation {generation} has no individual {slot} waiting for a fitness")]
    UnknownIndividual { generation: usize, slot: usize },
    /// Per-unique fitness did not match the deduplicated phenotypes.
    #[error(transparent)]
    Dedup(#[from] DedupMismatch),
}

/// One member of the population.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Individual {
    /// Its codons.
    pub genome: Genome,
    /// What they map to.
    pub mapping: Mapping,
}

impl Individual {
    pub(crate) fn new(genome: Genome, grammar: &Grammar, limits: &MappingLimits) -> Self {
        let mapping = map(grammar, &genome, limits);
        Self { genome, mapping }
    }

    /// The phenotype, if mapping succeeded.
    pub fn phenotype(&self) -> Option<&Phenotype> {
        self.mapping.phenotype()
    }

    /// Codons read by the mapping, if it succeeded.
    pub fn used_codons(&self) -> Option<usize> {
        self.mapping.derivation().map(|d| d.used_codons)
    }
}

/// Summary of one evaluated generation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenerationStats {
    /// 0 for the initial population.
    pub generation: usize,
    /// Best fitness in the generation.
    pub best: Fitness,
    /// Mean over individuals with a finite fitness; `None` if there are none.
    pub mean: Option<f64>,
    /// Individuals without a finite fitness: mapping failed, the program failed, or its
    /// error was infinite or NaN.
    pub invalid: usize,
    /// Distinct phenotypes.
    pub unique_phenotypes: usize,
    /// Mean genome length, in codons.
    pub mean_genome_len: f64,
    /// Phenotype of the best individual (the first one, on ties).
    pub best_phenotype: Option<Phenotype>,
}

/// A population evolving under one grammar.
#[derive(Clone, Debug)]
pub struct Evolution {
    grammar: Grammar,
    direction: Direction,
    config: EvolutionConfig,
    generation: usize,
    individuals: Vec<Individual>,
    fitness: Option<Vec<Fitness>>,
    best_ever: Option<(Individual, Fitness)>,
}

impl Evolution {
    /// Builds the initial population for `problem`'s grammar.
    pub fn new(problem: &Problem, config: EvolutionConfig) -> Result<Self, EvolutionError> {
        Self::with_grammar(problem.grammar().clone(), problem.direction(), config)
    }

    /// Builds the initial population for any grammar and fitness direction.
    pub fn with_grammar(
        grammar: Grammar,
        direction: Direction,
        config: EvolutionConfig,
    ) -> Result<Self, EvolutionError> {
        let individuals = initial_population(&grammar, &config)?;
        Ok(Self { grammar, direction, config, generation: 0, individuals, fitness: None, best_ever: None })
    }

    /// The configuration.
    pub fn config(&self) -> &EvolutionConfig {
        &self.config
    }

    /// The grammar individuals are mapped with.
    pub fn grammar(&self) -> &Grammar {
        &self.grammar
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

    /// Records one fitness per individual, in population order. Individuals whose
    /// mapping failed get the worst fitness whatever is passed for them.
    pub fn set_fitness(&mut self, mut fitness: Vec<Fitness>) -> Result<(), EvolutionError> {
        if fitness.len() != self.individuals.len() {
            return Err(EvolutionError::FitnessCount {
                expected: self.individuals.len(),
                found: fitness.len(),
            });
        }
        if let Some(f) = fitness.iter().find(|f| f.direction() != self.direction) {
            return Err(EvolutionError::FitnessDirection { expected: self.direction, found: f.direction() });
        }
        for (f, ind) in fitness.iter_mut().zip(&self.individuals) {
            if !ind.mapping.is_valid() {
                *f = Fitness::worst(self.direction);
            }
        }
        if let Some(i) = best_index(&fitness) {
            let better = match &self.best_ever {
                None => true,
                Some((_, f)) => fitness[i].is_better_than(f),
            };
            if better {
                self.best_ever = Some((self.individuals[i].clone(), fitness[i]));
            }
        }
        self.fitness = Some(fitness);
        Ok(())
    }

    /// The current generation's fitness, once set.
    pub fn fitness(&self) -> Option<&[Fitness]> {
        self.fitness.as_deref()
    }

    /// Best individual of the current generation (first on ties), once fitness is set.
    pub fn best(&self) -> Option<(&Individual, Fitness)> {
        let f = self.fitness.as_ref()?;
        let i = best_index(f)?;
        Some((&self.individuals[i], f[i]))
    }

    /// Best individual seen in any generation so far.
    pub fn best_ever(&self) -> Option<(&Individual, Fitness)> {
        self.best_ever.as_ref().map(|(i, f)| (i, *f))
    }

    /// Statistics of the current generation.
    pub fn stats(&self) -> Result<GenerationStats, EvolutionError> {
        let f = self.fitness.as_ref().ok_or(EvolutionError::NoFitness)?;
        Ok(generation_stats(self.generation, &self.individuals, f, self.direction))
    }

    /// Replaces the population by the next generation: elites first, then children of
    /// tournament winners, crossed over and mutated at the configured rates.
    pub fn breed(&mut self) -> Result<(), EvolutionError> {
        let fitness = self.fitness.take().ok_or(EvolutionError::NoFitness)?;
        let c = &self.config;
        let size = self.individuals.len();
        let next_generation = self.generation + 1;
        let mut next: Vec<Individual> =
            elites(&fitness, c.elite).into_iter().map(|i| self.individuals[i].clone()).collect();
        for pair in 0..pair_count(size, c.elite) {
            let plan = PairPlan::new(c, size, next_generation, pair);
            let children = plan.breed(&self.grammar, c, |i| (&self.individuals[i], fitness[i]));
            next.extend(children.into_iter().take(size - next.len()));
        }
        self.individuals = next;
        self.generation += 1;
        Ok(())
    }
}

/// The validated configuration's initial population (stream 0 of the run's seed).
pub(crate) fn initial_population(
    grammar: &Grammar,
    config: &EvolutionConfig,
) -> Result<Vec<Individual>, EvolutionError> {
    validate(config, grammar)?;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let genomes = match config.init {
        InitMethod::Random => (0..config.population)
            .map(|_| random_genome(&mut rng, config.init_min_len, config.init_max_len, config.codon_size))
            .collect(),
        InitMethod::Sensible => sensible_genomes(
            grammar,
            &mut rng,
            config.population,
            config.init_max_depth,
            config.codon_size,
            // Half the mapping's expansion limit leaves room to close open branches.
            config.limits.max_expansions / 2,
        )
        .ok_or(EvolutionError::NonTerminatingGrammar)?,
    };
    Ok(genomes.into_iter().map(|g| Individual::new(g, grammar, &config.limits)).collect())
}

/// Pairs of children bred for a population of `size` with `elite` elites.
pub(crate) fn pair_count(size: usize, elite: usize) -> usize {
    size.saturating_sub(elite).div_ceil(2)
}

/// The random stream of pair `pair` of generation `generation` (ChaCha's stream = the
/// generation, a word position per pair; the initial population uses stream 0).
fn pair_rng(seed: u64, generation: usize, pair: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(generation as u64);
    // 2^40 words per pair: far more than any pair draws.
    rng.set_word_pos((pair as u128) << 40);
    rng
}

/// One pair of children to breed: its two tournaments' contestants, drawn before any fitness
/// is known, and the stream it goes on drawing from.
#[derive(Clone, Debug)]
pub(crate) struct PairPlan {
    rng: ChaCha8Rng,
    /// Contestants of the first and the second tournament, indices into the parents.
    pub(crate) contestants: [Vec<usize>; 2],
}

impl PairPlan {
    /// Plans pair `pair` of generation `generation`, whose parents are `size` individuals.
    pub(crate) fn new(c: &EvolutionConfig, size: usize, generation: usize, pair: usize) -> PairPlan {
        let mut rng = pair_rng(c.seed, generation, pair);
        let first = contestants(&mut rng, size, c.tournament);
        let second = contestants(&mut rng, size, c.tournament);
        PairPlan { rng, contestants: [first, second] }
    }

    /// Breeds the pair's two children; `parent(i)` gives contestant `i` and its fitness.
    pub(crate) fn breed<'a>(
        mut self,
        grammar: &Grammar,
        c: &EvolutionConfig,
        parent: impl Fn(usize) -> (&'a Individual, Fitness),
    ) -> Vec<Individual> {
        let [first, second] = &self.contestants;
        let (Some(a), Some(b)) = (winner(first, |i| parent(i).1), winner(second, |i| parent(i).1)) else {
            return Vec::new();
        };
        let (pa, pb) = (parent(a).0, parent(b).0);
        let rng = &mut self.rng;
        let (ga, gb) = if rng.random_bool(c.crossover_rate) {
            variable_onepoint(rng, &pa.genome, pa.used_codons(), &pb.genome, pb.used_codons())
        } else {
            (pa.genome.clone(), pb.genome.clone())
        };
        [ga, gb]
            .into_iter()
            .map(|genome| {
                let mut child = Individual::new(genome, grammar, &c.limits);
                if rng.random_bool(c.mutation_rate) {
                    let used = child.used_codons();
                    int_flip(rng, &mut child.genome, used, c.mutation_codon_probability, c.codon_size);
                    child = Individual::new(child.genome, grammar, &c.limits);
                }
                child
            })
            .collect()
    }
}

/// Statistics of generation `generation`, given each individual's fitness.
pub(crate) fn generation_stats(
    generation: usize,
    individuals: &[Individual],
    fitness: &[Fitness],
    direction: Direction,
) -> GenerationStats {
    let finite: Vec<f64> = fitness.iter().filter(|x| x.is_finite()).map(Fitness::value).collect();
    let best = best_index(fitness);
    let n = individuals.len().max(1) as f64;
    GenerationStats {
        generation,
        best: best.map_or(Fitness::worst(direction), |i| fitness[i]),
        mean: (!finite.is_empty()).then(|| finite.iter().sum::<f64>() / finite.len() as f64),
        invalid: fitness.len() - finite.len(),
        unique_phenotypes: Dedup::new(individuals.iter().map(Individual::phenotype)).unique.len(),
        mean_genome_len: individuals.iter().map(|i| i.genome.len() as f64).sum::<f64>() / n,
        best_phenotype: best.and_then(|i| individuals[i].phenotype().cloned()),
    }
}

pub(crate) fn best_index(f: &[Fitness]) -> Option<usize> {
    (0..f.len()).reduce(|best, i| if f[i].is_better_than(&f[best]) { i } else { best })
}

fn validate(c: &EvolutionConfig, grammar: &Grammar) -> Result<(), EvolutionError> {
    let err = |field, message: String| Err(EvolutionError::Config { field, message });
    if c.population == 0 {
        return err("population", "must be at least 1".into());
    }
    if c.tournament == 0 {
        return err("tournament", "must be at least 1".into());
    }
    if c.elite > c.population {
        return err("elite", format!("must not exceed the population ({})", c.population));
    }
    for (field, rate) in [("crossover_rate", c.crossover_rate), ("mutation_rate", c.mutation_rate)] {
        if !(0.0..=1.0).contains(&rate) {
            return err(field, format!("{rate} is not a probability in [0, 1]"));
        }
    }
    if let Some(p) = c.mutation_codon_probability.filter(|p| !(0.0..=1.0).contains(p)) {
        return err("mutation_codon_probability", format!("{p} is not a probability in [0, 1]"));
    }
    let needed = grammar.max_alternatives();
    if (c.codon_size as usize) < needed {
        return err(
            "codon_size",
            format!(
                "{} is below the largest number of alternatives ({needed}), so some could never be chosen",
                c.codon_size
            ),
        );
    }
    if c.init_min_len > c.init_max_len {
        return err("init_min_len", format!("{} exceeds init_max_len ({})", c.init_min_len, c.init_max_len));
    }
    if c.init == InitMethod::Random && c.init_max_len == 0 {
        return err("init_max_len", "must be at least 1".into());
    }
    Ok(())
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

/// As [`run_cpu`], with a thread count and a callback after each generation.
pub fn run_cpu_with(
    problem: &Problem,
    config: &EvolutionConfig,
    threads: NonZeroUsize,
    mut on_generation: impl FnMut(&GenerationStats),
) -> Result<RunReport, EvolutionError> {
    let mut evo = Evolution::new(problem, config.clone())?;
    let mut generations = Vec::with_capacity(config.generations + 1);
    loop {
        let dedup = evo.dedup();
        let unique: Vec<Fitness> =
            evaluate_all(problem, &dedup.unique, threads).into_iter().map(|e| e.fitness).collect();
        evo.set_fitness(dedup.expand(&unique, problem.direction())?)?;
        let stats = evo.stats()?;
        on_generation(&stats);
        generations.push(stats);
        if evo.generation() >= config.generations {
            break;
        }
        evo.breed()?;
    }
    let best = evo.best_ever().and_then(|(ind, f)| ind.phenotype().map(|p| (p.clone(), f)));
    Ok(RunReport { generations, best })
}
