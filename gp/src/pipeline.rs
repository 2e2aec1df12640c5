//! The generational loop of grammatical evolution, the only one in the crate, driven by data:
//! each pair of children is bred as soon as the fitness of its tournaments' contestants is known,
//! so the next generation can start compiling while the last individuals of this one are still
//! being compiled and evaluated. Breeding (elites, tournaments, crossover, mutation), generation
//! statistics and the best individual of the run live here and nowhere else; the step-wise
//! [`crate::Evolution`] and the CPU runs ([`crate::run_cpu`]) drive a pipeline of depth 1.
//!
//! A caller takes the individuals bred so far ([`Pipeline::take_born`]), computes their fitness
//! in any order, hands each back ([`Pipeline::set_fitness`]), and lets the pipeline breed what
//! that allows ([`Pipeline::advance`]), which also reports every generation whose fitness is
//! complete. `depth` bounds how many generations may be incomplete at once: 1 breeds a generation
//! only when the one before is complete (the classic loop), 2 lets the next one start early.
//!
//! Must never evaluate programs, and never draw randomness from anything but the run's seed: the
//! same seed and the same fitness values give the same generations, bit for bit, whatever the
//! depth and whatever the order fitness arrives in. Each pair of children draws from a random
//! stream of its own (seeded by the run's seed, its generation and its place), and its
//! contestants are drawn before any fitness is looked at. Elites are bred only when their
//! generation is complete and keep their fitness; individuals whose mapping fails get the worst
//! fitness here. Neither is handed out.

use std::collections::{HashSet, VecDeque};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::fitness::{Direction, Fitness};
use crate::grammar::Grammar;
use crate::mapping::Genome;
use crate::mapping::Phenotype;
use crate::operators::{contestants, elites, int_flip, variable_onepoint, winner};
use crate::population::{
    EvolutionConfig, EvolutionError, Individual, Representation, Seed, initial_population,
};
use crate::problem::{Problem, ProblemSpec};
use crate::program::Program;
use crate::tree;

/// An individual that needs a fitness.
#[derive(Clone, Debug, PartialEq)]
pub struct Born {
    /// Its generation.
    pub generation: usize,
    /// Its place in the generation.
    pub slot: usize,
    /// What to evaluate.
    pub phenotype: Phenotype,
    /// The values of its free parameters (`p[k]`), to fit or to evaluate with.
    pub params: Vec<f32>,
    /// Its typed tree, parsed when its size was measured: `None` where the pipeline has no
    /// problem to parse for or the phenotype does not parse.
    pub program: Option<Arc<Program>>,
}

/// Summary of one evaluated generation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenerationStats {
    /// 0 for the initial population.
    pub generation: usize,
    /// Best fitness in the generation.
    pub best: Fitness,
    /// Mean over individuals with a finite fitness; `None` if there are none. A few huge
    /// errors (overflowing programs) dominate it.
    pub mean: Option<f64>,
    /// Median over individuals with a finite fitness (the mean of the middle two for an even
    /// count); `None` if there are none. Robust to those huge errors.
    #[serde(default)]
    pub median: Option<f64>,
    /// Individuals without a finite fitness: mapping failed, the program failed, or its
    /// error was infinite or NaN.
    pub invalid: usize,
    /// Distinct phenotypes.
    pub unique_phenotypes: usize,
    /// Mean genome length, in codons.
    pub mean_genome_len: f64,
    /// Phenotype of the best individual (the first one, on ties).
    pub best_phenotype: Option<Phenotype>,
    /// Size of the best individual ([`Program::size`]), where the problem is known.
    #[serde(default)]
    pub best_size: Option<usize>,
}

/// One point of a run's size–error front: the best individual of its size found so far, better
/// than every smaller one.
#[derive(Clone, Debug, PartialEq)]
pub struct FrontPoint {
    /// Its size ([`Program::size`]).
    pub size: usize,
    /// Its fitness.
    pub fitness: Fitness,
    /// The individual.
    pub individual: Individual,
}

/// `f` with `parsimony` per node of `size` added to an error (subtracted from a fitness that is
/// maximised); `f` itself without parsimony.
fn penalised(f: Fitness, size: usize, parsimony: f64) -> Fitness {
    if parsimony == 0.0 || !f.is_finite() {
        return f;
    }
    let pressure = parsimony * size as f64;
    match f.direction() {
        Direction::Lower => Fitness::new(f.value() + pressure, f.direction()),
        Direction::Higher => Fitness::new(f.value() - pressure, f.direction()),
    }
}

/// The size–error front of `items`: those of finite fitness and known (nonzero) size, by
/// size ascending, each the best of its size and strictly better than every smaller one; of
/// equals, the first. `key` gives an item's size and fitness.
pub fn pareto_front<T>(items: impl IntoIterator<Item = T>, key: impl Fn(&T) -> (usize, Fitness)) -> Vec<T> {
    let mut all: Vec<T> = items.into_iter().filter(|t| key(t).0 > 0 && key(t).1.is_finite()).collect();
    all.sort_by_key(|t| key(t).0);
    let mut kept: Vec<T> = Vec::new();
    for t in all {
        let (size, f) = key(&t);
        match kept.last() {
            Some(last) if key(last).0 == size => {
                if f.is_better_than(&key(last).1) {
                    kept.pop();
                    kept.push(t);
                }
            }
            Some(last) if !f.is_better_than(&key(last).1) => {}
            _ => kept.push(t),
        }
    }
    kept
}

/// `front` with a generation's individuals merged in ([`pareto_front`]).
fn merge_front(
    front: Vec<FrontPoint>,
    individuals: &[Individual],
    fitness: &[Fitness],
    sizes: &[usize],
) -> Vec<FrontPoint> {
    // The generation's own front first, by index, so only its few points are cloned: the front of
    // the old front and a generation's is the front of the old front and the whole generation.
    let own = pareto_front(0..individuals.len(), |&i| (sizes[i], fitness[i]));
    let new = own.into_iter().map(|i| FrontPoint {
        size: sizes[i],
        fitness: fitness[i],
        individual: individuals[i].clone(),
    });
    pareto_front(front.into_iter().chain(new), |p| (p.size, p.fitness))
}

/// The model chosen from `front` (by size, ascending, as [`pareto_front`] gives it): the
/// smallest whose error is within `tolerance` of the best on it, as a share of the best's
/// magnitude. `fitness` gives a point's fitness.
pub fn choose<T>(front: &[T], tolerance: f64, fitness: impl Fn(&T) -> Fitness) -> Option<&T> {
    let best = fitness(front.last()?);
    let slack = tolerance * best.value().abs();
    front.iter().find(|p| match best.direction() {
        Direction::Lower => fitness(p).value() <= best.value() + slack,
        Direction::Higher => fitness(p).value() >= best.value() - slack,
    })
}

/// A generation being bred or evaluated.
#[derive(Clone, Debug)]
struct Generation {
    index: usize,
    individuals: Vec<Option<Individual>>,
    fitness: Vec<Option<Fitness>>,
    /// Each individual's size ([`Program::size`]; 0 where unknown).
    sizes: Vec<usize>,
    known: usize,
    /// Pairs still to breed from the previous generation (`None` once bred), by pair index.
    unbred: Vec<Option<PairPlan>>,
    /// Elites still to copy from the previous generation.
    elites_pending: bool,
}

impl Generation {
    fn is_complete(&self) -> bool {
        self.known == self.fitness.len()
    }
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct Pipeline {
    grammar: Grammar,
    /// The problem's names and types, to measure individuals' sizes (`None`: sizes unknown, 0).
    spec: Option<ProblemSpec>,
    direction: Direction,
    config: EvolutionConfig,
    depth: usize,
    /// Oldest first; each is the parent of the next.
    generations: VecDeque<Generation>,
    born: Vec<Born>,
    best_ever: Option<(Individual, Fitness)>,
    /// The run's size–error front so far: by size, ascending, each better than every smaller one.
    front: Vec<FrontPoint>,
    /// Generations between migrations (island model), if any.
    migrate_every: Option<usize>,
    /// The generation after which [`Pipeline::stop_after`] ended the run.
    stopped_after: Option<usize>,
    /// The next generation that must take its immigrants ([`Pipeline::immigrate`]) before
    /// anything is bred from it.
    next_migration: Option<usize>,
}

/// An individual that moves between islands, with the fitness it was given on its own island
/// (every island evaluates the same problem the same way, so it is not evaluated again).
pub type Migrant = (Individual, Fitness);

impl Pipeline {
    /// Builds the initial population for `problem`'s grammar; at most `depth` generations are
    /// ever incomplete at once.
    pub fn new(
        problem: &Problem,
        config: EvolutionConfig,
        depth: NonZeroUsize,
    ) -> Result<Self, EvolutionError> {
        Self::starting_from(problem, config, depth, &[])
    }

    /// As [`Pipeline::new`], the first generation's first slots taken by `start` (a warm start:
    /// individuals of an earlier run, [`Seed`]).
    pub fn starting_from(
        problem: &Problem,
        config: EvolutionConfig,
        depth: NonZeroUsize,
        start: &[Seed],
    ) -> Result<Self, EvolutionError> {
        let spec = Some(problem.spec().clone());
        let mut pipeline =
            Self::build(problem.grammar().clone(), problem.direction(), config, depth, start, spec)?;
        // The initial population, placed before the sizes could be measured.
        let mut first = pipeline.generations.pop_front().expect("the initial generation");
        let spec = pipeline.spec.as_ref();
        let measured: Vec<Measured> =
            in_pool(|| first.individuals.par_iter().map(|i| measure(spec, i.as_ref())).collect());
        let mut oversized = HashSet::new();
        for (slot, (size, _)) in measured.iter().enumerate() {
            first.sizes[slot] = *size;
            if pipeline.oversized(*size) && first.fitness[slot].is_none() {
                first.fitness[slot] = Some(Fitness::worst(pipeline.direction));
                first.known += 1;
                oversized.insert(slot);
            }
        }
        pipeline.born.retain(|b| !oversized.contains(&b.slot));
        for b in &mut pipeline.born {
            b.program = measured[b.slot].1.clone();
        }
        pipeline.generations.push_front(first);
        Ok(pipeline)
    }

    /// Whether [`Pipeline::starting_from`] would take these settings, without drawing the
    /// initial population: the error it would give, if any.
    pub fn check(problem: &Problem, config: &EvolutionConfig, start: &[Seed]) -> Result<(), EvolutionError> {
        crate::population::check_initial(problem.grammar(), config, start)
    }

    /// As [`Pipeline::new`], for any grammar and fitness direction.
    pub fn with_grammar(
        grammar: Grammar,
        direction: Direction,
        config: EvolutionConfig,
        depth: NonZeroUsize,
    ) -> Result<Self, EvolutionError> {
        Self::build(grammar, direction, config, depth, &[], None)
    }

    fn build(
        grammar: Grammar,
        direction: Direction,
        config: EvolutionConfig,
        depth: NonZeroUsize,
        start: &[Seed],
        spec: Option<ProblemSpec>,
    ) -> Result<Self, EvolutionError> {
        let fits = |p: &Phenotype| size_fits(spec.as_ref(), config.max_size, p);
        let individuals = initial_population(&grammar, &config, start, &fits)?;
        let n = individuals.len();
        let mut pipeline = Pipeline {
            grammar,
            spec,
            direction,
            config,
            depth: depth.get(),
            generations: VecDeque::new(),
            born: Vec::new(),
            best_ever: None,
            front: Vec::new(),
            migrate_every: None,
            next_migration: None,
            stopped_after: None,
        };
        let mut first = Generation {
            index: 0,
            individuals: vec![None; n],
            fitness: vec![None; n],
            sizes: vec![0; n],
            known: 0,
            unbred: Vec::new(),
            elites_pending: false,
        };
        let limits = (pipeline.direction, pipeline.config.max_size);
        for (slot, individual) in individuals.into_iter().enumerate() {
            // Sizes are measured once the problem is known (`starting_from`).
            let placed = Placed::new((0, slot), individual, None, (0, None), (limits.0, 0));
            pipeline.place(&mut first, slot, placed);
        }
        pipeline.generations.push_back(first);
        Ok(pipeline)
    }

    /// The configuration.
    pub fn config(&self) -> &EvolutionConfig {
        &self.config
    }

    /// The grammar individuals are mapped with.
    pub fn grammar(&self) -> &Grammar {
        &self.grammar
    }

    /// Which way fitness is better.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// Generation `generation`'s individuals, once every slot is bred, while the pipeline still
    /// holds the generation (until [`Pipeline::advance`] reports it complete).
    pub(crate) fn population(&self, generation: usize) -> Option<Vec<Individual>> {
        self.held(generation)?.individuals.iter().cloned().collect()
    }

    /// Generation `generation`'s fitness, once complete, while the pipeline still holds it.
    pub(crate) fn fitness(&self, generation: usize) -> Option<Vec<Fitness>> {
        self.held(generation)?.fitness.iter().copied().collect()
    }

    fn held(&self, generation: usize) -> Option<&Generation> {
        let first = self.generations.front()?.index;
        self.generations.get(generation.checked_sub(first)?)
    }

    /// Puts an individual into its slot ([`Placed`]): with a known fitness, or handed out to be
    /// evaluated.
    fn place(&mut self, generation: &mut Generation, slot: usize, placed: Placed) {
        generation.sizes[slot] = placed.size;
        if placed.known.is_some() {
            generation.known += 1;
        }
        generation.fitness[slot] = placed.known;
        generation.individuals[slot] = Some(placed.individual);
        self.born.extend(placed.born);
    }

    /// Whether `size` is over the configured limit.
    fn oversized(&self, size: usize) -> bool {
        self.config.max_size > 0 && size > self.config.max_size
    }

    /// The individuals bred since the last call that need a fitness, in the order they were bred.
    pub fn take_born(&mut self) -> Vec<Born> {
        std::mem::take(&mut self.born)
    }

    /// Records the fitness of an individual handed out by [`Pipeline::take_born`].
    pub fn set_fitness(
        &mut self,
        generation: usize,
        slot: usize,
        fitness: Fitness,
    ) -> Result<(), EvolutionError> {
        if fitness.direction() != self.direction {
            return Err(EvolutionError::FitnessDirection {
                expected: self.direction,
                found: fitness.direction(),
            });
        }
        let unknown = EvolutionError::UnknownIndividual { generation, slot };
        let first = self.generations.front().map_or(0, |g| g.index);
        let g =
            generation.checked_sub(first).and_then(|i| self.generations.get_mut(i)).ok_or(unknown.clone())?;
        match (g.individuals.get(slot), g.fitness.get(slot)) {
            (Some(Some(_)), Some(None)) => {
                g.fitness[slot] = Some(fitness);
                g.known += 1;
                Ok(())
            }
            _ => Err(unknown),
        }
    }

    /// Records the values an individual handed out by [`Pipeline::take_born`] was fitted to,
    /// before its fitness: its offspring inherit them when fitting is Lamarckian
    /// ([`crate::FitConfig::lamarckian`]); either way they are the values its expression shows.
    pub fn set_fitted(
        &mut self,
        generation: usize,
        slot: usize,
        params: Vec<f32>,
    ) -> Result<(), EvolutionError> {
        let lamarckian = self.config.fit.lamarckian;
        let unknown = EvolutionError::UnknownIndividual { generation, slot };
        let first = self.generations.front().map_or(0, |g| g.index);
        let g =
            generation.checked_sub(first).and_then(|i| self.generations.get_mut(i)).ok_or(unknown.clone())?;
        match (g.individuals.get_mut(slot), g.fitness.get(slot)) {
            (Some(Some(individual)), Some(None)) if individual.params.len() == params.len() => {
                if lamarckian {
                    individual.params = params;
                    individual.fitted = None;
                } else {
                    individual.fitted = Some(params);
                }
                Ok(())
            }
            _ => Err(unknown),
        }
    }

    /// Breeds every pair whose contestants are all evaluated, copies elites into generations whose
    /// parents are complete, opens new generations as `depth` allows, and returns the statistics
    /// of every generation completed since the last call, oldest first.
    pub fn advance(&mut self) -> Vec<GenerationStats> {
        let mut completed = Vec::new();
        loop {
            let mut changed = false;
            let incomplete = self.generations.iter().filter(|g| !g.is_complete()).count();
            if let Some(last) = self.generations.back()
                && incomplete < self.depth
                && last.index < self.config.generations
            {
                let n = last.individuals.len();
                let index = last.index + 1;
                let pairs = pair_count(n, self.config.elite);
                self.generations.push_back(Generation {
                    index,
                    individuals: vec![None; n],
                    fitness: vec![None; n],
                    sizes: vec![0; n],
                    known: 0,
                    unbred: {
                        let config = &self.config;
                        in_pool(|| {
                            (0..pairs)
                                .into_par_iter()
                                .map(|p| Some(PairPlan::new(config, n, index, p)))
                                .collect()
                        })
                    },
                    elites_pending: self.config.elite > 0,
                });
                changed = true;
            }
            for i in 1..self.generations.len() {
                changed |= self.breed_into(i);
            }
            let retire = self.generations.front().is_some_and(|g| {
                g.is_complete()
                    && self.next_migration != Some(g.index)
                    && (g.index == self.config.generations || self.generations.len() > 1)
            });
            if retire && let Some(g) = self.generations.pop_front() {
                completed.push(self.stats(g));
                changed = true;
            }
            if !changed {
                return completed;
            }
        }
    }

    /// Breeds what it can of generation `generations[child]` from its parent. Returns whether
    /// anything was bred.
    fn breed_into(&mut self, child: usize) -> bool {
        let mut changed = false;
        let mut generations = std::mem::take(&mut self.generations);
        let (parents, children) = generations.make_contiguous().split_at_mut(child);
        let (parent, next) = (&parents[child - 1], &mut children[0]);
        if self.next_migration == Some(parent.index) {
            // Nothing is bred from a generation until its immigrants are in.
            self.generations = generations;
            return false;
        }
        if next.elites_pending && parent.is_complete() {
            let fitness: Vec<Fitness> =
                parent.fitness.iter().map(|f| f.unwrap_or(Fitness::worst(self.direction))).collect();
            for (slot, i) in elites(&fitness, self.config.elite).into_iter().enumerate() {
                if let Some(individual) = parent.individuals[i].clone() {
                    // An elite keeps its fitness, so its tree is never needed.
                    let limits = (self.direction, self.config.max_size);
                    let known = Some(fitness[i]);
                    let placed =
                        Placed::new((next.index, slot), individual, known, (parent.sizes[i], None), limits);
                    self.place(next, slot, placed);
                }
            }
            next.elites_pending = false;
            changed = true;
        }
        let n = next.individuals.len();
        let ready: Vec<(usize, PairPlan)> = next
            .unbred
            .iter_mut()
            .enumerate()
            .filter(|(_, plan)| {
                plan.as_ref().is_some_and(|plan| {
                    plan.contestants.iter().flatten().all(|&i| parent.fitness[i].is_some())
                })
            })
            .filter_map(|(pair, plan)| Some((pair, plan.take()?)))
            .collect();
        if !ready.is_empty() {
            // Each pair draws from its own stream and reads only the parents, so the pairs are
            // bred (and their children parsed and measured) on every core, then placed in order.
            let (grammar, config, spec) = (&self.grammar, &self.config, self.spec.as_ref());
            let parsimony = config.parsimony;
            let (index, limits) = (next.index, (self.direction, config.max_size));
            let bred: Vec<(usize, Vec<Placed>)> = in_pool(|| {
                ready
                    .into_par_iter()
                    .map(|(pair, plan)| {
                        let fits = |p: &Phenotype| size_fits(spec, config.max_size, p);
                        let children = plan.breed(grammar, config, &fits, |i| {
                            let individual =
                                parent.individuals[i].as_ref().expect("an evaluated parent has been bred");
                            let f = parent.fitness[i].expect("checked above");
                            (individual, penalised(f, parent.sizes[i], parsimony))
                        });
                        let first = config.elite + 2 * pair;
                        let placed = (first..n)
                            .zip(children)
                            .map(|(slot, c)| {
                                let m = measure(spec, Some(&c));
                                Placed::new((index, slot), c, None, m, limits)
                            })
                            .collect();
                        (pair, placed)
                    })
                    .collect()
            });
            for (pair, children) in bred {
                let first = self.config.elite + 2 * pair;
                for (slot, placed) in (first..n).zip(children) {
                    self.place(next, slot, placed);
                }
            }
            changed = true;
        }
        self.generations = generations;
        changed
    }

    fn stats(&mut self, g: Generation) -> GenerationStats {
        let individuals: Vec<Individual> = g.individuals.into_iter().flatten().collect();
        let fitness: Vec<Fitness> = g.fitness.into_iter().flatten().collect();
        let mut stats = generation_stats(g.index, &individuals, &fitness, self.direction);
        if let Some(i) = best_index(&fitness) {
            stats.best_size = g.sizes.get(i).copied().filter(|&s| s > 0);
        }
        if self.spec.is_some() {
            self.front = merge_front(std::mem::take(&mut self.front), &individuals, &fitness, &g.sizes);
        }
        if let Some(i) = best_index(&fitness) {
            let better = self.best_ever.as_ref().is_none_or(|(_, f)| fitness[i].is_better_than(f));
            if better {
                self.best_ever = Some((individuals[i].clone(), fitness[i]));
            }
        }
        // Freeing a generation of 10^5-10^6 individuals takes long: another thread does it (where
        // none starts, the failed spawn drops them here).
        if individuals.len() >= PARALLEL_STATS {
            let _ = std::thread::Builder::new().stack_size(PARSE_STACK).spawn(move || drop(individuals));
        }
        stats
    }

    /// Makes this pipeline an island: after every `every`-th generation (generations `every - 1`,
    /// `2 * every - 1`, ...; never the last), it stops breeding until that generation's
    /// immigrants are in. [`Pipeline::awaiting_migration`] says when; the caller sends
    /// [`Pipeline::emigrants`] to the next island and hands what the previous one sent to
    /// [`Pipeline::immigrate`]. Call before the first [`Pipeline::advance`]. `every` of 0 is
    /// taken as 1.
    pub fn migrate_every(&mut self, every: usize) {
        let every = every.max(1);
        self.migrate_every = Some(every);
        self.next_migration = Some(every - 1).filter(|&g| g < self.config.generations);
    }

    /// The generation that is complete and waits for its immigrants, if one does: nothing more
    /// can be bred until they are handed to [`Pipeline::immigrate`].
    pub fn awaiting_migration(&self) -> Option<usize> {
        let g = self.generations.front()?;
        (Some(g.index) == self.next_migration && g.is_complete()).then_some(g.index)
    }

    /// The best `count` individuals of generation `generation` (the first ones, on ties), with
    /// their fitness, once it is complete and while the pipeline holds it.
    pub fn emigrants(&self, generation: usize, count: usize) -> Option<Vec<Migrant>> {
        let g = self.held(generation).filter(|g| g.is_complete())?;
        let fitness: Vec<Fitness> =
            g.fitness.iter().map(|f| f.unwrap_or(Fitness::worst(self.direction))).collect();
        elites(&fitness, count)
            .into_iter()
            .map(|i| g.individuals[i].clone().map(|ind| (ind, fitness[i])))
            .collect()
    }

    /// Replaces the worst individuals of generation `generation` (the one
    /// [`Pipeline::awaiting_migration`] names), one per immigrant, by the immigrants, which
    /// keep their fitness; then breeding goes on. Worst first, the later slot first on ties, so
    /// the same immigrants always land in the same slots.
    pub fn immigrate(&mut self, generation: usize, immigrants: Vec<Migrant>) -> Result<(), EvolutionError> {
        if self.awaiting_migration() != Some(generation) {
            return Err(EvolutionError::NotAwaitingMigration { generation });
        }
        if let Some((_, f)) = immigrants.iter().find(|(_, f)| f.direction() != self.direction) {
            return Err(EvolutionError::FitnessDirection { expected: self.direction, found: f.direction() });
        }
        let direction = self.direction;
        let g = self.generations.front_mut().expect("awaiting_migration found it");
        let fitness: Vec<Fitness> =
            g.fitness.iter().map(|f| f.unwrap_or(Fitness::worst(direction))).collect();
        let mut worst: Vec<usize> = (0..fitness.len()).collect();
        worst.sort_by(|&a, &b| fitness[a].cmp_quality(&fitness[b]).then(b.cmp(&a)));
        let spec = self.spec.as_ref();
        for (slot, (individual, f)) in worst.into_iter().zip(immigrants) {
            g.sizes[slot] = measure(spec, Some(&individual)).0;
            g.individuals[slot] = Some(individual);
            g.fitness[slot] = Some(f);
        }
        let every = self.migrate_every.unwrap_or(1);
        self.next_migration = Some(generation + every).filter(|&n| n < self.config.generations);
        Ok(())
    }

    /// Whether the last generation is complete and reported.
    pub fn is_finished(&self) -> bool {
        self.generations.is_empty()
    }

    /// Ends the run after `generation`, complete and reported: the generations after it, bred
    /// or not, are dropped; the front and the best so far stay.
    pub fn stop_after(&mut self, generation: usize) {
        self.generations.clear();
        self.stopped_after = Some(generation);
    }

    /// The generation after which [`Pipeline::stop_after`] ended the run, if it did.
    pub fn stopped_after(&self) -> Option<usize> {
        self.stopped_after
    }

    /// The oldest generation not yet complete.
    pub fn oldest_open(&self) -> Option<usize> {
        self.generations.iter().find(|g| !g.is_complete()).map(|g| g.index)
    }

    /// The run's size–error front over every generation completed so far: by size, ascending,
    /// each point the best individual of its size and better than every smaller one (empty
    /// when the pipeline was built without a problem, [`Pipeline::with_grammar`]).
    pub fn front(&self) -> &[FrontPoint] {
        &self.front
    }

    /// The run's model: chosen from [`Pipeline::front`] by [`EvolutionConfig::select_tolerance`]
    /// ([`choose`]).
    pub fn chosen(&self) -> Option<&FrontPoint> {
        choose(&self.front, self.config.select_tolerance, |p| p.fitness)
    }

    /// Best individual of every generation completed so far (the first one, on ties).
    pub fn best_ever(&self) -> Option<(&Individual, Fitness)> {
        self.best_ever.as_ref().map(|(i, f)| (i, *f))
    }
}

/// An individual ready for slot `slot` of generation `generation`: with a known fitness (an
/// elite's, or the worst where its mapping failed or it is over `max_size`), or handed out to be
/// evaluated (`born`). Depends on nothing else, so it is made on any thread.
struct Placed {
    individual: Individual,
    size: usize,
    known: Option<Fitness>,
    born: Option<Born>,
}

impl Placed {
    fn new(
        (generation, slot): (usize, usize),
        individual: Individual,
        known: Option<Fitness>,
        (size, program): Measured,
        (direction, max_size): (Direction, usize),
    ) -> Placed {
        let oversized = max_size > 0 && size > max_size;
        let (known, born) = match (known, individual.phenotype()) {
            (Some(f), _) => (Some(f), None),
            (None, None) => (Some(Fitness::worst(direction)), None),
            // Over the size limit: not worth evaluating.
            (None, Some(_)) if oversized => (Some(Fitness::worst(direction)), None),
            (None, Some(p)) => {
                let params = individual.params.clone();
                (None, Some(Born { generation, slot, phenotype: p.clone(), params, program }))
            }
        };
        Placed { individual, size, known, born }
    }
}

/// Whether `phenotype` is within `max_size` ([`Program::size`]; 0: no limit). Without a problem
/// to parse for, or where the text does not parse (it fails when evaluated), it is taken as
/// fitting.
fn size_fits(spec: Option<&ProblemSpec>, max_size: usize, phenotype: &Phenotype) -> bool {
    match spec {
        Some(spec) if max_size > 0 => {
            Program::parse_for(spec, phenotype).map_or(true, |p| p.size() <= max_size)
        }
        _ => true,
    }
}

/// An individual's size and typed tree ([`measure`]).
type Measured = (usize, Option<Arc<Program>>);

/// The size of `individual` ([`Program::size`]) and its typed tree: 0 and `None` without a
/// phenotype, a problem to parse it for (`spec`), or where it does not parse (it fails when
/// evaluated).
fn measure(spec: Option<&ProblemSpec>, individual: Option<&Individual>) -> Measured {
    match (spec, individual.and_then(Individual::phenotype)) {
        (Some(spec), Some(p)) => match Program::parse_for(spec, p) {
            Ok(program) => (program.size(), Some(Arc::new(program))),
            Err(_) => (0, None),
        },
        _ => (0, None),
    }
}

/// Stack of the threads that parse: the parser recurses once per nesting level, so deep
/// phenotypes need what the CPU evaluator's threads have.
pub const PARSE_STACK: usize = 16 << 20;

/// Runs `work` (which uses rayon) on the caller's rayon pool when called from one, else on a
/// pool of this crate's, one thread per core with [`PARSE_STACK`] stacks. Results never depend
/// on the threads. A process forked from one that made the pool (a Python program's
/// `multiprocessing`, say) has none of its threads: it makes a pool of its own, rather than wait
/// on threads that are not there.
pub fn in_pool<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    static POOL: Mutex<Option<(u32, Option<&'static rayon::ThreadPool>)>> = Mutex::new(None);
    if rayon::current_thread_index().is_some() {
        return work();
    }
    let pid = std::process::id();
    let pool = {
        let mut held = POOL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match *held {
            Some((made_by, pool)) if made_by == pid => pool,
            _ => {
                // Leaked: one per process that uses it (a forked child's parent pool is not
                // dropped either, as its threads are not there to stop).
                let pool = rayon::ThreadPoolBuilder::new()
                    .stack_size(PARSE_STACK)
                    .build()
                    .ok()
                    .map(|p| &*Box::leak(Box::new(p)));
                *held = Some((pid, pool));
                pool
            }
        }
    };
    match pool {
        Some(pool) => pool.install(work),
        None => work(),
    }
}

/// Pairs of children bred for a population of `size` with `elite` elites.
fn pair_count(size: usize, elite: usize) -> usize {
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
struct PairPlan {
    rng: ChaCha8Rng,
    /// Contestants of the first and the second tournament, indices into the parents.
    contestants: [Vec<usize>; 2],
}

impl PairPlan {
    /// Plans pair `pair` of generation `generation`, whose parents are `size` individuals.
    fn new(c: &EvolutionConfig, size: usize, generation: usize, pair: usize) -> PairPlan {
        let mut rng = pair_rng(c.seed, generation, pair);
        let first = contestants(&mut rng, size, c.tournament);
        let second = contestants(&mut rng, size, c.tournament);
        PairPlan { rng, contestants: [first, second] }
    }

    /// Breeds the pair's two children; `parent(i)` gives contestant `i` and its fitness, `fits`
    /// whether a program is within the size limit.
    fn breed<'a>(
        mut self,
        grammar: &Grammar,
        c: &EvolutionConfig,
        fits: &(dyn Fn(&Phenotype) -> bool + Sync),
        parent: impl Fn(usize) -> (&'a Individual, Fitness),
    ) -> Vec<Individual> {
        let [first, second] = &self.contestants;
        let (Some(a), Some(b)) = (winner(first, |i| parent(i).1), winner(second, |i| parent(i).1)) else {
            return Vec::new();
        };
        let (pa, pb) = (parent(a).0, parent(b).0);
        match c.representation {
            Representation::Ge => breed_codons(&mut self.rng, grammar, c, pa, pb),
            Representation::Tree => breed_trees(&mut self.rng, grammar, c, fits, pa, pb),
        }
    }
}

/// Two children of `pa` and `pb` by grammatical evolution's operators.
fn breed_codons(
    rng: &mut ChaCha8Rng,
    grammar: &Grammar,
    c: &EvolutionConfig,
    pa: &Individual,
    pb: &Individual,
) -> Vec<Individual> {
    let (ga, gb) = if rng.random_bool(c.crossover_rate) {
        variable_onepoint(rng, &pa.genome, pa.used_codons(), &pb.genome, pb.used_codons())
    } else {
        (pa.genome.clone(), pb.genome.clone())
    };
    // A child's parameters are its first parent's, place by place: crossover keeps the
    // first parent's codons up to the cut, so the derivation, left to right, and the
    // parameters it emits, are that parent's up to there.
    [(ga, pa), (gb, pb)]
        .into_iter()
        .map(|(genome, parent)| {
            let mut child = Individual::new(genome, grammar, &c.limits, &parent.params, rng);
            if rng.random_bool(c.mutation_rate) {
                let used = child.used_codons();
                int_flip(rng, &mut child.genome, used, c.mutation_codon_probability, c.codon_size);
                let mut kept = child.params;
                redraw_values(rng, &mut kept, c.mutation_codon_probability);
                child = Individual::new(child.genome, grammar, &c.limits, &kept, rng);
            }
            child
        })
        .collect()
}

/// Each of `values` drawn afresh in [-1, 1] with probability `p` (default 1 / their count).
fn redraw_values(rng: &mut ChaCha8Rng, values: &mut [f32], p: Option<f64>) {
    if values.is_empty() {
        return;
    }
    let p = p.unwrap_or(1.0 / values.len() as f64).clamp(0.0, 1.0);
    for v in values {
        if rng.random_bool(p) {
            *v = rng.random_range(-1.0..=1.0);
        }
    }
}

/// Two children of `pa` and `pb` by the tree operators ([`crate::tree`]): subtree crossover both
/// ways at `crossover_rate`, then each child mutated at `mutation_rate`; none over the size or
/// depth limit. A parent that is not a tree of the grammar (its mapping failed) is copied.
fn breed_trees(
    rng: &mut ChaCha8Rng,
    grammar: &Grammar,
    c: &EvolutionConfig,
    fits: &(dyn Fn(&Phenotype) -> bool + Sync),
    pa: &Individual,
    pb: &Individual,
) -> Vec<Individual> {
    let limits = tree::Limits { grammar, mapping: &c.limits, fits };
    let derive = |i: &Individual| tree::Tree::derive(grammar, &i.genome, &c.limits);
    let (ta, tb) = (derive(pa), derive(pb));
    let crossed = rng.random_bool(c.crossover_rate);
    let children: Vec<(Genome, Vec<f32>)> = match (&ta, &tb) {
        (Some(ta), Some(tb)) if crossed => vec![
            tree::crossover(rng, &limits, (ta, &pa.params), (tb, &pb.params)),
            tree::crossover(rng, &limits, (tb, &pb.params), (ta, &pa.params)),
        ],
        _ => vec![(pa.genome.clone(), pa.params.clone()), (pb.genome.clone(), pb.params.clone())],
    };
    children
        .into_iter()
        .map(|(genome, params)| {
            if rng.random_bool(c.mutation_rate)
                && let Some(t) = tree::Tree::derive(grammar, &genome, &c.limits)
            {
                let (genome, mut params, kind) = tree::mutate(rng, &limits, &t, &params);
                if kind == tree::Mutation::None {
                    redraw_values(rng, &mut params, c.mutation_codon_probability);
                }
                return Individual::new(genome, grammar, &c.limits, &params, rng);
            }
            Individual::new(genome, grammar, &c.limits, &params, rng)
        })
        .collect()
}

/// Statistics of generation `generation`, given each individual's fitness.
fn generation_stats(
    generation: usize,
    individuals: &[Individual],
    fitness: &[Fitness],
    direction: Direction,
) -> GenerationStats {
    let finite: Vec<f64> = fitness.iter().filter(|x| x.is_finite()).map(Fitness::value).collect();
    let best = best_index(fitness);
    let n = individuals.len().max(1) as f64;
    let unique_phenotypes = if individuals.len() < PARALLEL_STATS {
        individuals.iter().filter_map(Individual::phenotype).collect::<HashSet<_>>().len()
    } else {
        count_distinct(individuals.iter().filter_map(|i| i.phenotype().map(Phenotype::as_str)).collect())
    };
    GenerationStats {
        generation,
        best: best.map_or(Fitness::worst(direction), |i| fitness[i]),
        mean: (!finite.is_empty()).then(|| finite.iter().sum::<f64>() / finite.len() as f64),
        median: median(finite.clone()),
        invalid: fitness.len() - finite.len(),
        unique_phenotypes,
        mean_genome_len: individuals.iter().map(|i| i.genome.len() as f64).sum::<f64>() / n,
        best_phenotype: best.and_then(|i| individuals[i].expression()),
        best_size: None,
    }
}

/// Generations of at least this many individuals have their statistics computed, and are
/// freed, on several threads.
const PARALLEL_STATS: usize = 20_000;

/// How many distinct texts `texts` holds: sorted on every core, then counted.
fn count_distinct(mut texts: Vec<&str>) -> usize {
    in_pool(|| texts.par_sort_unstable());
    texts.iter().enumerate().filter(|&(k, t)| k == 0 || texts[k - 1] != *t).count()
}

/// The median of `values` (the mean of the middle two for an even count); `None` if empty.
fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.len() >= PARALLEL_STATS {
        in_pool(|| values.par_sort_unstable_by(f64::total_cmp));
    } else {
        values.sort_by(f64::total_cmp);
    }
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        // Halved first: the middle two may be near the largest finite values.
        _ => Some(values[n / 2 - 1] / 2.0 + values[n / 2] / 2.0),
    }
}

/// Index of the best fitness (the first one, on ties).
pub(crate) fn best_index(f: &[Fitness]) -> Option<usize> {
    (0..f.len()).reduce(|best, i| if f[i].is_better_than(&f[best]) { i } else { best })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lower(v: f64) -> Fitness {
        Fitness::new(v, Direction::Lower)
    }

    #[test]
    fn a_start_takes_the_first_slots_with_its_values_and_leaves_the_others_as_drawn() {
        let problem = Problem::builtin("keijzer6").unwrap();
        let config =
            EvolutionConfig { population: 20, seed: 8, generations: 50, max_size: 0, ..Default::default() };
        let depth = NonZeroUsize::MIN;
        let cold = Pipeline::new(&problem, config.clone(), depth).unwrap().population(0).unwrap();
        let start = vec![
            Seed { genome: cold[7].genome.codons().to_vec(), params: vec![] },
            Seed { genome: vec![3, 1, 4, 1, 5], params: vec![] },
        ];
        let warm =
            Pipeline::starting_from(&problem, config.clone(), depth, &start).unwrap().population(0).unwrap();
        assert_eq!(warm[0], cold[7]);
        assert_eq!(warm[1].genome.codons(), [3, 1, 4, 1, 5]);
        assert_eq!(warm[2..], cold[2..]);
        let empty = [Seed::default()];
        assert!(matches!(
            Pipeline::starting_from(&problem, config, depth, &empty),
            Err(EvolutionError::Config { field: "start", .. })
        ));
    }

    #[test]
    fn a_size_counts_the_nodes_the_text_writes() {
        let problem = Problem::builtin("keijzer6").unwrap();
        for (text, size) in [
            ("x", 1),
            ("sinf(x)", 2),
            ("x * x + 1.0f", 5),
            ("logf(fabsf(x)+1)", 5),
            ("x / sinf(57.15) - x", 6),
            ("(x < 1.0f) ? x : -x", 7),
        ] {
            let program = Program::parse(&problem, &Phenotype::new(text.to_owned())).unwrap();
            assert_eq!(program.size(), size, "{text}");
        }
    }

    #[test]
    fn the_front_keeps_the_best_of_each_size_that_beats_every_smaller_one() {
        let items =
            [(3, 0.5), (1, 0.9), (2, 0.95), (3, 0.4), (5, 0.4), (4, 0.1), (0, 0.0), (6, f64::INFINITY)];
        let front = pareto_front(items, |&(s, f)| (s, lower(f)));
        assert_eq!(front, [(1, 0.9), (3, 0.4), (4, 0.1)]);
        // Of equals, the first found.
        let tied = pareto_front([(2, 0.5, 'a'), (2, 0.5, 'b')], |&(s, f, _)| (s, lower(f)));
        assert_eq!(tied, [(2, 0.5, 'a')]);
        let pick = |tolerance| choose(&front, tolerance, |&(_, f)| lower(f)).map(|p| p.0);
        assert_eq!(pick(0.0), Some(4), "the best");
        assert_eq!(pick(4.0), Some(3), "within 0.4 of 0.1");
        assert_eq!(pick(10.0), Some(1));
        assert_eq!(choose(&[] as &[(usize, f64)], 0.0, |&(_, f)| lower(f)), None);
        let higher = [(1, 5.0), (2, 9.0), (3, 10.0)];
        assert_eq!(choose(&higher, 0.15, |&(_, f)| Fitness::new(f, Direction::Higher)).map(|p| p.0), Some(2));
    }

    #[test]
    fn parsimony_adds_to_errors_and_takes_from_scores_per_node() {
        assert_eq!(penalised(lower(1.0), 10, 0.01).value(), 1.1);
        assert_eq!(penalised(Fitness::new(5.0, Direction::Higher), 10, 0.5).value(), 0.0);
        assert_eq!(penalised(lower(1.0), 10, 0.0), lower(1.0));
        // A smaller program wins a tournament it ties on error.
        let (small, big) = (penalised(lower(1.0), 3, 0.001), penalised(lower(1.0), 30, 0.001));
        assert!(small.is_better_than(&big));
    }

    #[test]
    fn a_run_over_the_size_limit_evaluates_nothing_larger_and_its_front_is_a_front() {
        let problem = Problem::builtin("keijzer6").unwrap();
        let config = EvolutionConfig {
            population: 200,
            generations: 8,
            seed: 3,
            max_size: 6,
            select_tolerance: 0.5,
            ..EvolutionConfig::default()
        };
        let mut pipeline = Pipeline::new(&problem, config, NonZeroUsize::MIN).unwrap();
        let mut evaluated = 0;
        while !pipeline.is_finished() {
            for b in pipeline.take_born() {
                let size = Program::parse(&problem, &b.phenotype).map_or(0, |p| p.size());
                assert!(size <= 6, "{} (size {size}) was handed out", b.phenotype.as_str());
                let f = crate::program::evaluate_phenotype(&problem, &b.phenotype).fitness;
                pipeline.set_fitness(b.generation, b.slot, f).unwrap();
                evaluated += 1;
            }
            pipeline.advance();
        }
        assert!(evaluated > 0);
        let front = pipeline.front();
        assert!(!front.is_empty());
        for w in front.windows(2) {
            assert!(w[0].size < w[1].size && w[1].fitness.is_better_than(&w[0].fitness), "{w:?}");
        }
        assert!(front.iter().all(|p| p.size <= 6));
        let best = front.last().unwrap().fitness.value();
        assert_eq!(pipeline.best_ever().unwrap().1.value(), best, "the front ends at the best");
        let chosen = pipeline.chosen().unwrap();
        assert!(chosen.fitness.value() <= best * 1.5);
        assert!(front.iter().filter(|p| p.size < chosen.size).all(|p| p.fitness.value() > best * 1.5));
    }

    #[test]
    fn big_generations_count_distinct_phenotypes_and_take_medians_as_small_ones_do() {
        let texts: Vec<String> =
            (0..3 * PARALLEL_STATS).map(|i| format!("x * {}", (i * 7919) % 10_007)).collect();
        let set: HashSet<&str> = texts.iter().map(String::as_str).collect();
        assert_eq!(count_distinct(texts.iter().map(String::as_str).collect()), set.len());
        assert_eq!(set.len(), 10_007);
        let values: Vec<f64> = (0..2 * PARALLEL_STATS + 1).map(|i| ((i * 7919) % 10_007) as f64).collect();
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(median(values), Some(sorted[PARALLEL_STATS]));
    }

    #[test]
    fn the_median_ignores_a_few_huge_values() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 7.5e34]), Some(3.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, f64::MAX]), Some(3.0));
        assert_eq!(median(vec![f64::MAX, f64::MAX]), Some(f64::MAX));
    }
}
