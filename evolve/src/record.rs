//! The typed records a run hands out: one [`GenerationRecord`] per generation, as it completes,
//! and a [`Summary`] at the end. `gpfarm evolve --json` prints exactly their serde
//! serialisation, one per line. Each says how many individuals were new, reused or found on
//! disk, the compile, evaluation and breeding time spent on the generation, and its critical
//! path, the chain of waits that ended with its last fitness value.

use std::time::{Duration, Instant};

use gpfarm_gp::{Direction, Fitness};
use serde::{Deserialize, Serialize};

use crate::account::{Account, Chain};

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The critical path of a generation: from the moment the previous generation was complete (the
/// run's start for generation 0) to the moment this one was, split along the chain of the
/// individual whose fitness was known last. The parts add up to the generation's time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CriticalPath {
    /// Until that individual was bred (its parents were still being evaluated).
    pub breed_ms: f64,
    /// Bred, waiting to be put into a unit.
    pub waiting_to_send_ms: f64,
    /// In the compiler's queue, waiting for a free worker.
    pub queued_ms: f64,
    /// Its unit compiling.
    pub compile_ms: f64,
    /// From its CUBIN to its fitness (evaluation, and other units evaluated first).
    pub evaluate_ms: f64,
    /// From its fitness to the generation's completion being noticed.
    pub rest_ms: f64,
}

impl CriticalPath {
    /// Splits `[from, done]` along `chain` (each step clipped into the interval).
    pub(crate) fn along(chain: &Chain, from: Instant, done: Instant) -> CriticalPath {
        let mut at = from;
        let mut step = |t: Instant| {
            let t = t.clamp(at, done.max(at));
            let d = t - at;
            at = t;
            ms(d)
        };
        CriticalPath {
            breed_ms: step(chain.born),
            waiting_to_send_ms: step(chain.queued),
            queued_ms: step(chain.started),
            compile_ms: step(chain.ended),
            evaluate_ms: step(chain.evaluated),
            rest_ms: step(done),
        }
    }
}

/// Individuals of a generation by how their fitness was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Individuals {
    /// Needing a fitness (the population less elites and failed mappings).
    pub evaluated: usize,
    /// Known from an earlier generation: not compiled, not evaluated.
    pub reused: usize,
    /// The same as one compiled alongside: not compiled, not evaluated.
    pub duplicates: usize,
    /// CUBIN from the disk cache: evaluated, not compiled.
    pub disk_hits: usize,
    /// Free parameters: a structure compiled before (or alongside) with other values, evaluated
    /// with this one's values: not compiled.
    #[serde(default)]
    pub structure_hits: usize,
    /// Compiled and evaluated.
    pub compiled: usize,
    /// Did not compile (worst fitness).
    pub failed: usize,
    /// Crashed NVRTC and were compiled again with [`crate::Options::crash_retry_flags`].
    #[serde(default)]
    pub crash_retried: usize,
    /// Of which the retry compiled and its fitness was used (always on the CPU; on the GPU unless
    /// [`crate::Options::crash_retry_on_gpu`] is off); the rest count as `failed`.
    #[serde(default)]
    pub crash_retry_used: usize,
    /// Share of `evaluated` that needed no compile.
    pub hit_rate: f64,
}

/// Compile figures of one generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompileFigures {
    /// Units compiled.
    pub units: usize,
    /// Of which units of one individual, compiled again to find who broke a unit.
    pub isolation_units: usize,
    /// Worker time (daemon or thread) spent on this generation's units.
    pub busy_ms: f64,
    /// NVRTC's own compile time, summed over units.
    pub nvrtc_ms: f64,
}

/// Where GPU evaluation time went (zero on the CPU).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalSplit {
    /// Loading compiled modules onto the GPU.
    pub load_ms: f64,
    /// Launching kernels and waiting for them.
    pub launch_ms: f64,
    /// Reading fitness back.
    pub readback_ms: f64,
    /// Individuals whose kernel faulted on the GPU, or did not end before the GPU deadline.
    pub faults: usize,
    /// Of `faults`, individuals whose kernel did not end before the GPU deadline
    /// ([`crate::Options::gpu_deadline`]): killed, with the worst fitness and the reason
    /// `timeout`.
    pub timeouts: usize,
    /// GPU workers replaced over the run so far (one per faulting individual, and one more per
    /// evaluation that faulted).
    pub gpu_worker_restarts: usize,
    /// Set when a kernel fault made the GPU unusable and the run went on on the CPU.
    pub fell_back_to_cpu: Option<String>,
}

/// Which evaluator computed a generation's fitness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvaluatorKind {
    /// The CPU reference evaluator.
    Cpu,
    /// Compiled kernels in a GPU worker process.
    Gpu,
}

/// One generation's record (`--json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationRecord {
    /// The island whose generation it is (0 for a run of one population).
    #[serde(default)]
    pub island: usize,
    /// 0 for the initial population.
    pub generation: usize,
    /// Best fitness in the generation.
    pub best: f64,
    /// Mean over individuals with a finite fitness (`None` if there are none); a few
    /// overflowing programs dominate it.
    pub mean: Option<f64>,
    /// Median over individuals with a finite fitness (`None` if there are none).
    pub median: Option<f64>,
    /// Individuals without a finite fitness.
    pub invalid: usize,
    /// Distinct phenotypes in the population.
    pub unique: usize,
    /// How each individual's fitness was found.
    pub individuals: Individuals,
    /// What compiling this generation cost.
    pub compile: CompileFigures,
    /// Evaluation time spent on this generation's individuals.
    pub eval_ms: f64,
    /// Where GPU evaluation time went, and GPU faults.
    pub eval_split: EvalSplit,
    /// Breeding time spent on this generation's individuals (parsing them to measure their
    /// sizes included).
    pub breed_ms: f64,
    /// Admitting them: parsing where breeding did not, bytecode, cache keys, reuse and
    /// duplicate lookups.
    #[serde(default)]
    pub admit_ms: f64,
    /// Time spent fitting their free parameters.
    #[serde(default)]
    pub fit_ms: f64,
    /// Individuals whose parameters fitting moved.
    #[serde(default)]
    pub fitted: usize,
    /// Individuals fitted on the GPU (moved or not); the rest were fitted on the CPU.
    #[serde(default)]
    pub fitted_on_gpu: usize,
    /// Of `fitted_on_gpu`, those fitted by kernels compiled for their structure.
    #[serde(default)]
    pub fitted_compiled: usize,
    /// Node-evaluations of the GPU's fit: per start, its program's ops × the cases it is fitted
    /// on × the launches that ran it (the first and, for each trial taken, the run with
    /// derivatives, the Jacobian's row; each trial's plain run, without). For straight-line
    /// programs each op runs once a case, so this is exact; a branch's untaken side counts too.
    /// Per second: divide by `fit_worker_ms`.
    #[serde(default)]
    pub fit_node_evals: u64,
    /// Of `fit_ms`, compiling fitting kernels.
    #[serde(default)]
    pub fit_compile_ms: f64,
    /// Of `fit_ms`, fitting on the GPU (its launches and the host's solves between them).
    #[serde(default)]
    pub fit_gpu_ms: f64,
    /// Of `fit_gpu_ms`, the GPU worker's own time (uploads, launches, copies back).
    #[serde(default)]
    pub fit_worker_ms: f64,
    /// From the previous generation's completion to this one's: what a researcher waits for.
    pub generation_ms: f64,
    /// When this generation was complete, from the start of the run.
    pub done_ms: f64,
    /// The generation's time split along the chain of its last fitness value.
    pub critical_path: CriticalPath,
    /// Who computed the fitness.
    pub evaluator: EvaluatorKind,
    /// The best individual's phenotype.
    pub best_phenotype: Option<String>,
    /// The best individual's size (nodes of its syntax tree).
    #[serde(default)]
    pub best_size: Option<usize>,
}

impl GenerationRecord {
    /// The record of a completed generation.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        stats: &gpfarm_gp::GenerationStats,
        account: &Account,
        split: EvalSplit,
        run_start: Instant,
        previous_done: Instant,
        done: Instant,
        evaluator: EvaluatorKind,
    ) -> GenerationRecord {
        let a = account;
        let hits = a.reused + a.duplicates + a.disk_hits + a.structure_hits;
        GenerationRecord {
            island: 0,
            generation: stats.generation,
            best: stats.best.value(),
            mean: stats.mean,
            median: stats.median,
            invalid: stats.invalid,
            unique: stats.unique_phenotypes,
            individuals: Individuals {
                evaluated: a.born,
                reused: a.reused,
                duplicates: a.duplicates,
                disk_hits: a.disk_hits,
                structure_hits: a.structure_hits,
                compiled: a.compiled,
                failed: a.failed,
                crash_retried: a.crash_retried,
                crash_retry_used: a.crash_retry_used,
                hit_rate: if a.born == 0 { 0.0 } else { hits as f64 / a.born as f64 },
            },
            compile: CompileFigures {
                units: a.units,
                isolation_units: a.isolation_units,
                busy_ms: ms(a.busy),
                nvrtc_ms: ms(a.nvrtc),
            },
            eval_ms: ms(a.eval),
            eval_split: EvalSplit {
                load_ms: ms(a.load),
                launch_ms: ms(a.launch),
                readback_ms: ms(a.readback),
                faults: a.faults,
                timeouts: a.timeouts,
                ..split
            },
            breed_ms: ms(a.breed),
            admit_ms: ms(a.admit),
            fit_ms: ms(a.fit),
            fitted: a.fitted,
            fitted_on_gpu: a.fitted_on_gpu,
            fitted_compiled: a.fitted_compiled,
            fit_node_evals: a.fit_node_evals,
            fit_compile_ms: a.fit_compile.as_secs_f64() * 1e3,
            fit_gpu_ms: ms(a.fit_gpu),
            fit_worker_ms: ms(a.fit_worker),
            generation_ms: ms(done.saturating_duration_since(previous_done)),
            done_ms: ms(done.saturating_duration_since(run_start)),
            critical_path: a.last.map(|c| CriticalPath::along(&c, previous_done, done)).unwrap_or(
                CriticalPath {
                    rest_ms: ms(done.saturating_duration_since(previous_done)),
                    ..Default::default()
                },
            ),
            evaluator,
            best_phenotype: stats.best_phenotype.as_ref().map(|p| p.as_str().to_owned()),
            best_size: stats.best_size,
        }
    }
}

/// Totals of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Individuals handed out for a fitness, over all generations.
    pub individuals_evaluated: usize,
    /// Of which known from an earlier generation.
    pub reused: usize,
    /// Of which identical to one compiled alongside.
    pub duplicates: usize,
    /// Of which found in the disk cache.
    pub disk_hits: usize,
    /// Of which a structure compiled before with other values of its free parameters.
    #[serde(default)]
    pub structure_hits: usize,
    /// Of which compiled.
    pub compiled: usize,
    /// Of which did not compile (worst fitness).
    #[serde(default)]
    pub failed: usize,
    /// Crashed NVRTC and were compiled again with [`crate::Options::crash_retry_flags`].
    #[serde(default)]
    pub crash_retried: usize,
    /// Of which the retry's fitness was used.
    #[serde(default)]
    pub crash_retry_used: usize,
    /// Where the units of individuals that did not compile were written (`None`: none were).
    #[serde(default)]
    pub failed_units_dir: Option<std::path::PathBuf>,
    /// Units compiled (isolation units included).
    pub units: usize,
    /// Worker time spent compiling, summed over workers.
    pub compile_busy_s: f64,
    /// Time spent evaluating.
    pub eval_s: f64,
    /// Time spent breeding.
    pub breed_s: f64,
    /// Time spent fitting free parameters.
    #[serde(default)]
    pub fit_s: f64,
    /// The run's wall time.
    pub wall_s: f64,
    /// Fitness values remembered at the end (bounded).
    pub memo_entries: usize,
    /// GPU workers taken over from an earlier run of this process
    /// ([`crate::Options::keep_gpu_worker`]) instead of started.
    #[serde(default)]
    pub gpu_workers_reused: usize,
}

/// The end of a run (`--json` prints it last, with `"summary": true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Always `true`: tells this record from the generation records on the same stream.
    pub summary: bool,
    /// The problem's name.
    pub problem: String,
    /// Generations bred after the initial one.
    pub generations: usize,
    /// Individuals per generation.
    pub population: usize,
    /// The run's seed.
    pub seed: u64,
    /// Whether known fitness was reused and identical individuals merged.
    pub cache: bool,
    /// Whether compiling, evaluating and breeding overlapped.
    pub overlap: bool,
    /// Best fitness of the run.
    pub best_fitness: f64,
    /// Its phenotype (`None` if no individual mapped).
    pub best_phenotype: Option<String>,
    /// Wall time per generation, the initial one included.
    pub mean_generation_ms: f64,
    /// How individuals got their fitness: `nvrtc`, `ptx` or `interpreter`.
    #[serde(default)]
    pub route: String,
    /// Why that route: "asked for", or the automatic choice's reason.
    #[serde(default)]
    pub route_reason: String,
    /// What the run did, in total (over every island).
    pub totals: Totals,
    /// Islands (sub-populations) of the run; 1 without the island model.
    #[serde(default = "one")]
    pub islands: usize,
    /// The best fitness of each island, island 0 first (the run's best is the best of them).
    #[serde(default)]
    pub island_best: Vec<f64>,
    /// The run's size–error front over every island and generation: by size, ascending, each
    /// model the best of its size and better than every smaller one.
    #[serde(default)]
    pub front: Vec<FrontModel>,
    /// The model chosen from the front: the smallest whose fitness is within the run's
    /// `select_tolerance` of the front's best (with 0, the best model, the smallest of equals).
    #[serde(default)]
    pub chosen: Option<FrontModel>,
    /// Which way fitness is better (`lower` or `higher`), for merging fronts.
    #[serde(default)]
    pub direction: Option<Direction>,
    /// The share of the best fitness within which the chosen model lies.
    #[serde(default)]
    pub select_tolerance: f64,
    /// The last generation, when `max_time` ended the run before `generations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_after: Option<usize>,
}

/// How much better than every smaller model a model of the shown front must be, as a share of
/// the smallest model's fitness ([`Summary::merge_front`]): 1e-6, below what float arithmetic
/// tells apart in an error of that magnitude.
pub const FRONT_TOLERANCE: f64 = 1e-6;

/// One model of a size–error front.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrontModel {
    /// Its size: the nodes of its syntax tree.
    pub size: usize,
    /// Its fitness.
    pub fitness: f64,
    /// Its expression, free parameters written in.
    pub expression: String,
    /// Its formula simplified, in plain text over the problem's variable names
    /// ([`gpfarm_gp::simplify`]); absent when it is not an arithmetic float expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula: Option<String>,
    /// The simplified program (CUDA C), which computes the same values within rounding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simplified: Option<String>,
    /// The simplified program's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simplified_size: Option<usize>,
    /// Its codons and parameter values, to start another run from ([`crate::Options::start`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<gpfarm_gp::Seed>,
}

impl FrontModel {
    /// The size the front is ranked on and shows: the simplified program's where it
    /// simplifies, else the size as it ran.
    pub fn shown_size(&self) -> usize {
        self.simplified_size.unwrap_or(self.size)
    }

    /// A model of `size` and `fitness` computing `expression`, simplified for `spec`.
    pub fn new(
        spec: &gpfarm_gp::problem::ProblemSpec,
        size: usize,
        fitness: f64,
        expression: String,
    ) -> Self {
        let readable = gpfarm_gp::simplify::readable(spec, &gpfarm_gp::Phenotype::new(&expression));
        FrontModel {
            size,
            fitness,
            formula: readable.as_ref().map(|r| r.formula.clone()),
            simplified: readable.as_ref().map(|r| r.code.as_str().to_owned()),
            simplified_size: readable.map(|r| r.size),
            expression,
            seed: None,
        }
    }
}

impl Summary {
    /// Merges `other`'s front into this one's and chooses again (islands of other ranks). The
    /// front is ranked on the sizes it shows ([`FrontModel::shown_size`], the simplified one
    /// where there is one): by that size ascending, one per size, each model better than every
    /// smaller one by more than [`FRONT_TOLERANCE`] of the smallest model's fitness (a larger
    /// model that only rounds differently is not a better one).
    pub fn merge_front(&mut self, other: &[FrontModel]) {
        let Some(direction) = self.direction else { return };
        let key = |m: &FrontModel| (m.shown_size(), Fitness::new(m.fitness, direction));
        let all = std::mem::take(&mut self.front).into_iter().chain(other.iter().cloned());
        let front = gpfarm_gp::pareto_front(all, key);
        let scale = front.first().map_or(0.0, |m| m.fitness.abs()) * FRONT_TOLERANCE;
        let mut kept: Vec<FrontModel> = Vec::with_capacity(front.len());
        for m in front {
            let better = kept.last().is_none_or(|last| match direction {
                Direction::Lower => m.fitness < last.fitness - scale,
                Direction::Higher => m.fitness > last.fitness + scale,
            });
            if better {
                kept.push(m);
            }
        }
        self.front = kept;
        self.chosen = gpfarm_gp::choose(&self.front, self.select_tolerance, |m| key(m).1).cloned();
    }
}

fn one() -> usize {
    1
}

impl Totals {
    /// Adds another island's totals to these: counts and times add up, the wall time is the
    /// longer of the two.
    pub fn add(&mut self, other: &Totals) {
        self.individuals_evaluated += other.individuals_evaluated;
        self.reused += other.reused;
        self.duplicates += other.duplicates;
        self.disk_hits += other.disk_hits;
        self.structure_hits += other.structure_hits;
        self.compiled += other.compiled;
        self.failed += other.failed;
        self.crash_retried += other.crash_retried;
        self.crash_retry_used += other.crash_retry_used;
        if self.failed_units_dir.is_none() {
            self.failed_units_dir.clone_from(&other.failed_units_dir);
        }
        self.units += other.units;
        self.compile_busy_s += other.compile_busy_s;
        self.eval_s += other.eval_s;
        self.breed_s += other.breed_s;
        self.fit_s += other.fit_s;
        self.wall_s = self.wall_s.max(other.wall_s);
        self.memo_entries += other.memo_entries;
        self.gpu_workers_reused += other.gpu_workers_reused;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(size: usize, simplified: Option<usize>, fitness: f64) -> FrontModel {
        FrontModel {
            size,
            fitness,
            expression: format!("e{size}_{fitness}"),
            formula: None,
            simplified: None,
            simplified_size: simplified,
            seed: None,
        }
    }

    #[test]
    fn the_front_is_ranked_on_the_sizes_it_shows_with_no_duplicate_or_dominated_model() {
        let mut summary: Summary = serde_json::from_value(serde_json::json!({"summary": true,
            "problem": "p", "generations": 1, "population": 1, "seed": 1, "cache": false,
            "overlap": false, "best_fitness": 0.0, "best_phenotype": null, "mean_generation_ms": 0.0,
            "totals": Totals::default()}))
        .unwrap();
        summary.direction = Some(Direction::Lower);
        // Sizes as they ran 14, 15, 33, 27 simplify to 14, 14, 33, 27: the 15 (better, shown as
        // 14) replaces the first 14, and the 33 (worse than the 27 below it) is dominated.
        summary.merge_front(&[
            model(14, Some(14), 6.641e-7),
            model(15, Some(14), 6.593e-7),
            model(40, Some(33), 2.11),
            model(27, None, 2.07),
            model(10, Some(5), 3.0),
        ]);
        let shown: Vec<(usize, f64)> = summary.front.iter().map(|m| (m.shown_size(), m.fitness)).collect();
        assert_eq!(shown, vec![(5, 3.0), (14, 6.593e-7)]);
        // A larger model better only by rounding (less than 1e-6 of the smallest's 3.0) is not
        // on the front; one better by more is.
        summary.merge_front(&[model(20, None, 6.593e-7 - 1e-7), model(22, None, 1e-7)]);
        let shown: Vec<(usize, f64)> = summary.front.iter().map(|m| (m.shown_size(), m.fitness)).collect();
        assert_eq!(shown, vec![(5, 3.0), (14, 6.593e-7)]);
        summary.merge_front(&[model(24, None, 6.593e-7 - 4e-6)]);
        assert_eq!(summary.front.len(), 3);
        for w in summary.front.windows(2) {
            assert!(w[0].shown_size() < w[1].shown_size() && w[1].fitness < w[0].fitness);
        }
    }

    #[test]
    fn the_critical_path_adds_up_to_the_generation_and_clips_what_came_before_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Bred and queued before the previous generation was done (overlap), compiled after.
        let chain =
            Chain { born: at(10), queued: at(20), started: at(150), ended: at(400), evaluated: at(410) };
        let path = CriticalPath::along(&chain, at(100), at(415));
        assert_eq!(path.breed_ms, 0.0);
        assert_eq!(path.waiting_to_send_ms, 0.0);
        assert_eq!(path.queued_ms, 50.0);
        assert_eq!(path.compile_ms, 250.0);
        assert_eq!(path.evaluate_ms, 10.0);
        assert_eq!(path.rest_ms, 5.0);
        let total = path.breed_ms
            + path.waiting_to_send_ms
            + path.queued_ms
            + path.compile_ms
            + path.evaluate_ms
            + path.rest_ms;
        assert_eq!(total, 315.0);
    }
}
