//! What a run is made of before any loop runs: its parameters ([`EvolutionConfig`]) and their
//! validation, the [`Individual`] (a genome and what it maps to), the first generation drawn
//! from the run's seed, and the errors of driving a run. Must never breed or look at fitness
//! (that is [`crate::pipeline`]'s), and never draw randomness from anything but the run's seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::dedup::DedupMismatch;
use crate::fitness::Direction;
use crate::grammar::Grammar;
use crate::init::{InitMethod, random_genome, sensible_genomes};
use crate::mapping::{Genome, Mapping, MappingLimits, Phenotype, map};

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
    /// How individuals are held and varied: grammatical evolution's codons (the default) or
    /// derivation trees of the grammar.
    pub representation: Representation,
    /// How the first generation is built (grammatical evolution; trees are always built by
    /// ramped half-and-half within the size and depth limits).
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
    /// Fitting of free parameters (`#param#` in the grammar).
    pub fit: FitConfig,
    /// Added to an individual's error per node of its size ([`crate::program::Program::size`])
    /// when tournaments compare it (subtracted from a fitness that is maximised): parsimony
    /// pressure, as gplearn's `parsimony_coefficient`. 0: tournaments compare fitness alone.
    pub parsimony: f64,
    /// Largest size an individual may have: one larger gets the worst fitness without being
    /// evaluated or fitted. 0: no limit.
    pub max_size: usize,
    /// How the run's model is chosen from its size–error front: the smallest model whose
    /// error is within this share of the best error on the front (0: the best, the smallest of
    /// equals).
    pub select_tolerance: f64,
}

/// How individuals are held and varied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Representation {
    /// Derivation trees of the grammar ([`crate::tree`]): subtree crossover between nodes of one
    /// rule, subtree regrowth, point and hoist mutation; no child over `max_size` or deeper than
    /// `limits.max_depth`. Better search than codons: a small change of a tree is a small change
    /// of its program.
    Tree,
    /// Grammatical evolution ([`crate::mapping`]): codons mapped by `codon % alternatives`,
    /// variable one-point crossover, int-flip mutation (the paper's experiment). The default
    /// until trees are shown to search better at the defaults (docs/regression.md).
    #[default]
    Ge,
}

impl std::fmt::Display for Representation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Representation::Tree => "tree",
            Representation::Ge => "ge",
        })
    }
}

impl std::str::FromStr for Representation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tree" => Ok(Representation::Tree),
            "ge" => Ok(Representation::Ge),
            other => Err(format!("unknown representation {other:?}: use \"tree\" or \"ge\"")),
        }
    }
}

/// How the free parameters of a grammar with `#param#` are fitted.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FitConfig {
    /// Levenberg–Marquardt iterations per individual fitted (0: none; the values are then
    /// only inherited and mutated).
    pub iterations: usize,
    /// Starts beyond the first, from values moved at random.
    pub restarts: usize,
    /// Share of the individuals bred that are fitted, in [0, 1] (each drawn by its own seed).
    pub share: f64,
    /// Whether fitted values are passed on to offspring (Lamarckian) or only used for the
    /// individual's own fitness (Baldwinian).
    pub lamarckian: bool,
    /// Fit on at most this many of the cases, evenly spaced (0: all); the fitness is still
    /// computed on all of them. Default [`FIT_CASES`].
    pub cases: usize,
}

/// The cases a fit takes by default, evenly spaced, where a problem has more: 8,192. Fitting is
/// local search; the fitness judges what it found on every case. On the regression measured,
/// fits on 8,192 cases ended on better models than fits on all of them, in much shorter
/// generations (docs/regression.md, "The fitting constants' measurements", gives the figures).
pub const FIT_CASES: usize = 8192;

impl Default for FitConfig {
    fn default() -> Self {
        Self { iterations: 10, restarts: 0, share: 1.0, lamarckian: true, cases: FIT_CASES }
    }
}

impl Default for EvolutionConfig {
    fn default() -> Self {
        Self {
            population: 300,
            generations: 30,
            tournament: 3,
            elite: 1,
            crossover_rate: 0.7,
            mutation_rate: 0.7,
            mutation_codon_probability: None,
            codon_size: 100_000,
            representation: Representation::Ge,
            init: InitMethod::Random,
            init_min_len: 20,
            init_max_len: 100,
            init_max_depth: 10,
            limits: MappingLimits::default(),
            seed: 1,
            fit: FitConfig::default(),
            parsimony: 0.0,
            max_size: 50,
            select_tolerance: 0.0,
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
    /// Immigrants for a generation that is not waiting for them.
    #[error("generation {generation} is not waiting for immigrants")]
    NotAwaitingMigration { generation: usize },
    /// A fitness was given for an individual that is not waiting for one.
    #[error("generation {generation} has no individual {slot} waiting for a fitness")]
    UnknownIndividual { generation: usize, slot: usize },
    /// `set_fitness` for a generation that already has its fitness.
    #[error(
        "generation {generation} already has its fitness: breed the next one before setting fitness again"
    )]
    FitnessAlreadySet { generation: usize },
    /// `breed` after the last generation the configuration allows.
    #[error("generation {generation} is the last one `generations` allows: raise it to breed further")]
    LastGeneration { generation: usize },
    /// Per-unique fitness did not match the deduplicated phenotypes.
    #[error(transparent)]
    Dedup(#[from] DedupMismatch),
}

/// One member of the population.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Individual {
    /// Its codons.
    pub genome: Genome,
    /// What they map to.
    pub mapping: Mapping,
    /// The values of its free parameters, one per `p[k]` its phenotype reads: what its
    /// offspring inherit.
    #[serde(default)]
    pub params: Vec<f32>,
    /// The values its fitness was computed with, where fitting moved them and they are not
    /// passed on ([`FitConfig::lamarckian`] off); otherwise they are `params`.
    #[serde(default)]
    pub fitted: Option<Vec<f32>>,
}

impl Individual {
    /// Maps `genome`; its parameter `k` takes `inherited[k]`, or a value drawn from `rng`
    /// uniformly in [-1, 1] where `inherited` has none. Nothing is drawn for a phenotype without
    /// parameters.
    pub(crate) fn new(
        genome: Genome,
        grammar: &Grammar,
        limits: &MappingLimits,
        inherited: &[f32],
        rng: &mut impl Rng,
    ) -> Self {
        let mapping = map(grammar, &genome, limits);
        let count = mapping.derivation().map_or(0, |d| d.params);
        let params = (0..count)
            .map(|k| inherited.get(k).copied().unwrap_or_else(|| rng.random_range(-1.0..=1.0)))
            .collect();
        Self { genome, mapping, params, fitted: None }
    }

    /// The values its fitness was computed with (see [`Individual::fitted`]).
    pub fn evaluated_params(&self) -> &[f32] {
        self.fitted.as_deref().unwrap_or(&self.params)
    }

    /// Its phenotype with the values of its parameters written in
    /// ([`crate::program::instantiate`]): the program that was evaluated, as C text that
    /// keeps every value exactly.
    pub fn expression(&self) -> Option<Phenotype> {
        let p = self.phenotype()?;
        let params = self.evaluated_params();
        Some(if params.is_empty() { p.clone() } else { crate::program::instantiate(p, params) })
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

/// An individual to start a run from (a warm start): its codons and the values of its free
/// parameters, as a run's size–error front gives them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Seed {
    /// Its codons.
    pub genome: Vec<u32>,
    /// The values of its parameters, in `p[k]` order; those it lacks are drawn as for any new
    /// individual.
    #[serde(default)]
    pub params: Vec<f32>,
}

/// The validated configuration's initial population (stream 0 of the run's seed), its first
/// slots taken by `start` (at most a population's worth; the slots after them are drawn as
/// always, so a run started from nothing is unchanged).
pub(crate) fn initial_population(
    grammar: &Grammar,
    config: &EvolutionConfig,
    start: &[Seed],
    fits: &(dyn Fn(&Phenotype) -> bool + Sync),
) -> Result<Vec<Individual>, EvolutionError> {
    validate(config, grammar)?;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let genomes = match (config.representation, config.init) {
        (Representation::Tree, _) => tree_genomes(grammar, config, &mut rng, fits)?,
        (Representation::Ge, InitMethod::Random) => (0..config.population)
            .map(|_| random_genome(&mut rng, config.init_min_len, config.init_max_len, config.codon_size))
            .collect(),
        (Representation::Ge, InitMethod::Sensible) => sensible_genomes(
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
    let mut individuals: Vec<Individual> =
        genomes.into_iter().map(|g| Individual::new(g, grammar, &config.limits, &[], &mut rng)).collect();
    for (slot, seed) in individuals.iter_mut().zip(start) {
        if seed.genome.is_empty() {
            return Err(EvolutionError::Config { field: "start", message: "a genome has no codons".into() });
        }
        let mut genome = Genome(seed.genome.clone());
        if config.representation == Representation::Tree
            && let Some(tree) = crate::tree::Tree::derive(grammar, &genome, &config.limits)
        {
            // A seed of codons (an earlier run's) becomes the tree it maps to: the same program.
            genome = tree.genome();
        }
        *slot = Individual::new(genome, grammar, &config.limits, &seed.params, &mut rng);
    }
    Ok(individuals)
}

/// Trees drawn for the first generation: ramped half-and-half, depths from the start rule's
/// shallowest to `init_max_depth` (within `limits.max_depth`), half "full" and half "grow", each
/// with a budget of nodes drawn up to `max_size` (50 without one); a tree that does not `fit` is
/// drawn again, and after a few tries the smallest tree of the grammar is taken.
fn tree_genomes(
    grammar: &Grammar,
    config: &EvolutionConfig,
    rng: &mut impl Rng,
    fits: &(dyn Fn(&Phenotype) -> bool + Sync),
) -> Result<Vec<Genome>, EvolutionError> {
    let min =
        grammar.rule(grammar.start()).min_depth().ok_or(EvolutionError::NonTerminatingGrammar)? as usize;
    let max = (config.init_max_depth as usize).min(config.limits.max_depth).max(min);
    let depths: Vec<usize> = (min..=max).collect();
    let budget = if config.max_size > 0 { config.max_size } else { 50 };
    let accepts = |choices: &[u32]| {
        let m = map(grammar, &Genome(choices.to_vec()), &config.limits);
        m.phenotype().is_some_and(fits)
    };
    let mut out = Vec::with_capacity(config.population);
    for i in 0..config.population {
        let (full, depth) = (i % 2 == 1, depths[(i / 2) % depths.len()]);
        let mut chosen = None;
        for _ in 0..TREE_TRIES {
            let nodes = rng.random_range(1..=budget);
            let grown = crate::tree::grow(grammar, rng, grammar.start(), depth, full, nodes);
            if let Some((choices, _)) = grown.filter(|(c, _)| accepts(c)) {
                chosen = Some(choices);
                break;
            }
        }
        let choices = match chosen {
            Some(c) => c,
            None => crate::tree::grow(grammar, rng, grammar.start(), max, false, 0)
                .map(|(c, _)| c)
                .ok_or(EvolutionError::NonTerminatingGrammar)?,
        };
        out.push(Genome(choices));
    }
    Ok(out)
}

/// Trees drawn for one slot of the first generation before the smallest is taken.
const TREE_TRIES: usize = 10;

/// What [`initial_population`] refuses, found without drawing the population: the settings,
/// a grammar whose sensible initialisation cannot end, and empty seeds.
pub(crate) fn check_initial(
    grammar: &Grammar,
    config: &EvolutionConfig,
    start: &[Seed],
) -> Result<(), EvolutionError> {
    validate(config, grammar)?;
    if config.representation == Representation::Tree && !grammar.rule(grammar.start()).can_terminate() {
        return Err(EvolutionError::NonTerminatingGrammar);
    }
    if config.representation == Representation::Ge && config.init == InitMethod::Sensible {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let one = sensible_genomes(
            grammar,
            &mut rng,
            1,
            config.init_max_depth,
            config.codon_size,
            config.limits.max_expansions / 2,
        );
        one.ok_or(EvolutionError::NonTerminatingGrammar)?;
    }
    if start.iter().take(config.population).any(|seed| seed.genome.is_empty()) {
        return Err(EvolutionError::Config { field: "start", message: "a genome has no codons".into() });
    }
    Ok(())
}

fn validate(c: &EvolutionConfig, grammar: &Grammar) -> Result<(), EvolutionError> {
    let err = |field, message: String| Err(EvolutionError::Config { field, message });
    if c.population == 0 {
        return err("population", "must be at least 1".into());
    }
    if c.population > crate::limits::MAX_POPULATION {
        return err("population", format!("{} is more than {}", c.population, crate::limits::MAX_POPULATION));
    }
    let bytes = crate::limits::population_bytes(c.population, c.init_max_len);
    if let Err(why) = crate::limits::fits(&format!("a population of {}", c.population), bytes) {
        return err("population", why);
    }
    if c.tournament == 0 {
        return err("tournament", "must be at least 1".into());
    }
    for (field, v) in [("parsimony", c.parsimony), ("select_tolerance", c.select_tolerance)] {
        if !(v.is_finite() && v >= 0.0) {
            return err(field, format!("{v} is not a finite number of at least 0"));
        }
    }
    if c.elite > c.population {
        return err("elite", format!("must not exceed the population ({})", c.population));
    }
    for (field, rate) in
        [("crossover_rate", c.crossover_rate), ("mutation_rate", c.mutation_rate), ("fit.share", c.fit.share)]
    {
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
    if c.representation == Representation::Ge && c.init == InitMethod::Random && c.init_max_len == 0 {
        return err("init_max_len", "must be at least 1".into());
    }
    Ok(())
}
