//! The search: NSGA-II over patch lists on (time relative to the original, error), each
//! generation's variants linked by the compiler (the farm's nvJitLink) and run, compared and timed
//! in a kernel worker on the GPU; then the best correct variant re-checked on held-out sizes and
//! fresh inputs, and everything written out.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpfarm_client::{
    BuildConfig, CompileOptions, Compiler, CompilerSpec, GpuWorker, SmArch, Unit, UnitOutcome,
    VariantOutcome, gpu_worker_executable,
};
use gpfarm_protocol::worker::VariantRun;
use gpfarm_toolchain::Toolchain;
use gpfarm_toolchain::nvrtc::{Nvrtc, Output};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use thiserror::Error;

use crate::harness::KernelDir;
use crate::nsga;
use crate::ptx::{Edit, Kernel, bound_loops, diff};

/// Workers readied in the background to replace one lost to a faulting or hanging variant.
const SPARE_WORKERS: usize = 12;
/// A variant may take this long beyond [`DEADLINE_FACTOR`] times the original's time for the
/// same launches (and never more than [`ImproveConfig::deadline`]).
const MIN_DEADLINE: Duration = Duration::from_millis(250);
/// How many times the original's time a variant may take before it is a timeout.
const DEADLINE_FACTOR: f64 = 20.0;

/// How a search runs.
#[derive(Debug, Clone)]
pub struct ImproveConfig {
    /// Individuals kept per generation.
    pub population: usize,
    /// Generations after the first.
    pub generations: usize,
    /// Stop after this long, whatever generation it is (the held-out check follows).
    pub time_limit: Option<Duration>,
    /// Seed of the search and of the search inputs.
    pub seed: u64,
    /// Chance that a child is bred by crossover (else it copies its parent).
    pub crossover: f64,
    /// Chance that a child gets one more random edit (one that is neither crossed nor mutated is
    /// mutated).
    pub mutation: f64,
    /// Architecture of the CUBIN.
    pub arch: SmArch,
    /// What links the variants (the farm by default).
    pub compiler: CompilerSpec,
    /// Compiler settings (CUDA directory, a farm to attach to).
    pub build: BuildConfig,
    /// How long one variant may run (its check and timed launches) before it is scored a timeout.
    pub deadline: Duration,
    /// Where results are written (`None`: nowhere).
    pub out: Option<PathBuf>,
}

impl Default for ImproveConfig {
    fn default() -> Self {
        ImproveConfig {
            population: 64,
            generations: 20,
            time_limit: None,
            seed: 1,
            crossover: 0.8,
            mutation: 0.5,
            arch: SmArch::SM_90,
            compiler: CompilerSpec::Farm(gpfarm_client::Workers::PerCore),
            build: BuildConfig::default(),
            deadline: Duration::from_secs(5),
            out: None,
        }
    }
}

/// Why a search could not run.
#[derive(Debug, Error)]
pub enum ImproveError {
    /// The CUDA toolchain was not found or did not load.
    #[error("the CUDA toolchain: {0}")]
    Toolchain(String),
    /// NVRTC rejected the user's source.
    #[error("{file} does not compile: {message}")]
    Source {
        /// The source file.
        file: String,
        /// NVRTC's message and log.
        message: String,
    },
    /// The original's PTX could not be taken apart.
    #[error(transparent)]
    Ptx(#[from] crate::ptx::PtxError),
    /// The compiler could not be built or failed as a whole.
    #[error("the compiler: {0}")]
    Compiler(String),
    /// The original PTX did not link.
    #[error("the original kernel's PTX does not link: {0}")]
    Original(String),
    /// The harness cannot make a job at some size.
    #[error("{0}")]
    Harness(String),
    /// The GPU worker could not start or failed as a whole.
    #[error("the GPU: {0}")]
    Gpu(String),
    /// Results could not be written.
    #[error("{path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// What one variant scored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Score {
    /// Its median time over the original's median time (below 1 is faster); infinite when it
    /// did not link, run, or end.
    pub time_ratio: f64,
    /// Its error against the original (the harness's measure); infinite as above.
    pub error: f64,
    /// What happened: `ok`, `invalid` (did not link), `refused`, `fault`, `timeout`,
    /// `out_of_bounds`.
    pub status: &'static str,
    /// The median times, milliseconds (variant, original).
    pub median_ms: (f64, f64),
}

impl Score {
    fn failed(status: &'static str) -> Score {
        Score { time_ratio: f64::INFINITY, error: f64::INFINITY, status, median_ms: (f64::NAN, f64::NAN) }
    }

    fn objectives(&self) -> [f64; 2] {
        [self.time_ratio, self.error]
    }

    /// Its speed-up over the original (the original's time over its own).
    pub fn speedup(&self) -> f64 {
        1.0 / self.time_ratio
    }
}

/// One individual: its edits and what its variant scored.
#[derive(Debug, Clone, Serialize)]
pub struct Individual {
    /// Its patch list.
    pub edits: Vec<Edit>,
    /// Its score.
    pub score: Score,
}

/// One generation's record (a line of `records.jsonl`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Record {
    /// Generation, 0 first.
    pub generation: usize,
    /// Variants bred.
    pub variants: usize,
    /// Of them, new ones (not seen before, by their PTX).
    pub new: usize,
    /// New ones that did not link.
    pub invalid: usize,
    /// New ones that ran correctly (error within the tolerance).
    pub correct: usize,
    /// New ones that faulted, timed out, wrote out of bounds or were refused.
    pub failed: usize,
    /// Of those: faulted on the GPU.
    pub faults: usize,
    /// Of those: did not end within the deadline.
    pub timeouts: usize,
    /// Of those: wrote past the end of a buffer.
    pub out_of_bounds: usize,
    /// Workers replaced (after faults and timeouts).
    pub restarts: usize,
    /// Time spent replacing them (waiting for a spare to be ready), milliseconds.
    pub restart_ms: f64,
    /// The best speed-up of a correct individual so far.
    pub best_speedup: f64,
    /// Individuals on the first front.
    pub front: usize,
    /// Applying patches, milliseconds.
    pub apply_ms: f64,
    /// Linking the new variants, milliseconds.
    pub link_ms: f64,
    /// Running them on the GPU, milliseconds.
    pub gpu_ms: f64,
    /// The whole generation, milliseconds.
    pub wall_ms: f64,
    /// New variants per second of the generation (apply, link, load, run, compare, time).
    pub variants_per_s: f64,
}

/// The best variant checked again on one held-out size with fresh inputs.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// The size.
    pub n: u64,
    /// Its error there.
    pub error: f64,
    /// Its speed-up there: the mean of the paired ratios.
    pub speedup: f64,
    /// A 95% confidence interval of that mean.
    pub interval: (f64, f64),
    /// Whether its error is within the tolerance.
    pub correct: bool,
}

/// A candidate the held-out checks rejected, and what they found.
#[derive(Debug, Clone, Serialize)]
pub struct Rejected {
    /// The candidate.
    pub individual: Individual,
    /// Its checks.
    pub checks: Vec<Check>,
}

/// Candidates checked on held-out sizes, fastest first, before the search gives up on finding a
/// correct one.
const CANDIDATES: usize = 5;

/// What a search found.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The kernel.
    pub kernel: String,
    /// The GPU.
    pub device: String,
    /// The original's median time at the search size, milliseconds.
    pub original_ms: f64,
    /// The final population's first front, fastest first.
    pub front: Vec<Individual>,
    /// The fastest correct individual, if any is faster than the original.
    pub best: Option<Individual>,
    /// The best one re-checked at each held-out size (and the search size) with fresh inputs.
    pub checks: Vec<Check>,
    /// Faster candidates that a held-out check found wrong, fastest first.
    pub rejected: Vec<Rejected>,
    /// Per generation.
    pub records: Vec<Record>,
    /// Variants evaluated (distinct PTX).
    pub evaluated: usize,
    /// Seconds the search took (without the held-out checks).
    pub search_s: f64,
}

/// The original's PTX: NVRTC on the user's source, for `arch`.
pub fn original_ptx(dir: &KernelDir, build: &BuildConfig, arch: SmArch) -> Result<String, ImproveError> {
    let toolchain =
        Toolchain::discover(build.cuda.as_deref()).map_err(|e| ImproveError::Toolchain(e.to_string()))?;
    let nvrtc = Nvrtc::load(&toolchain).map_err(|e| ImproveError::Toolchain(e.to_string()))?;
    let options: Vec<String> = std::iter::once(arch.ptx_option()).chain(dir.flags.iter().cloned()).collect();
    let compiled =
        nvrtc.compile(&dir.source_name, dir.source.as_bytes(), &options, Output::Ptx).map_err(|e| {
            ImproveError::Source { file: dir.source_name.clone(), message: format!("{e}: {}", e.log.trim()) }
        })?;
    String::from_utf8(compiled.code).map_err(|_| ImproveError::Source {
        file: dir.source_name.clone(),
        message: "NVRTC's PTX is not UTF-8".into(),
    })
}

/// Links PTX texts into CUBINs with `compiler`: one unit each, `Err` with the log where one does
/// not link.
pub fn link(
    compiler: &mut dyn Compiler,
    texts: &[String],
    arch: SmArch,
) -> Result<Vec<Result<Vec<u8>, String>>, ImproveError> {
    let units: Vec<Unit> =
        texts.iter().enumerate().map(|(k, t)| Unit::ptx(format!("variant{k}.ptx"), t.clone())).collect();
    let batch = compiler
        .compile(&units, &CompileOptions::cubin(arch))
        .map_err(|e| ImproveError::Compiler(e.to_string()))?;
    Ok(batch
        .results
        .into_iter()
        .map(|r| match r.outcome {
            UnitOutcome::Cubin(c) => Ok(c),
            UnitOutcome::Failed(f) => Err(f.to_string()),
        })
        .collect())
}

fn median(v: &[f32]) -> f64 {
    let mut s: Vec<f64> = v.iter().map(|&x| x as f64).collect();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn score(outcome: &VariantOutcome) -> Score {
    match outcome {
        VariantOutcome::Run(VariantRun::Ran { out_of_bounds: true, .. }) => Score::failed("out_of_bounds"),
        VariantOutcome::Run(VariantRun::Ran { error, variant_ms, original_ms, .. }) => {
            let (v, o) = (median(variant_ms), median(original_ms));
            Score { time_ratio: v / o, error: *error, status: "ok", median_ms: (v, o) }
        }
        VariantOutcome::Run(VariantRun::Refused(_)) => Score::failed("refused"),
        VariantOutcome::Fault(_) => Score::failed("fault"),
        VariantOutcome::Timeout => Score::failed("timeout"),
    }
}

/// The search's state between generations.
struct Search<'a> {
    kernel: Kernel,
    dir: &'a KernelDir,
    config: &'a ImproveConfig,
    compiler: Box<dyn Compiler + Send>,
    worker: GpuWorker,
    /// Scores by the variant's PTX hash.
    seen: HashMap<blake3::Hash, Score>,
}

impl Search<'_> {
    /// Scores every patch list (seen variants from memory), and fills `record`'s counts and times.
    fn evaluate(&mut self, patches: &[Vec<Edit>], record: &mut Record) -> Result<Vec<Score>, ImproveError> {
        let t = Instant::now();
        let texts: Vec<(String, blake3::Hash)> = patches
            .iter()
            .map(|p| {
                let text = self.kernel.apply(p).0;
                let h = blake3::hash(text.as_bytes());
                (text, h)
            })
            .collect();
        let mut fresh: Vec<usize> = Vec::new();
        for (k, (_, h)) in texts.iter().enumerate() {
            if !self.seen.contains_key(h) && !fresh.iter().any(|&j| texts[j].1 == *h) {
                fresh.push(k);
            }
        }
        record.apply_ms += t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let bounded: Vec<String> =
            fresh.iter().map(|&k| bound_loops(&texts[k].0, &self.dir.kernel, self.dir.loop_limit)).collect();
        let linked = link(self.compiler.as_mut(), &bounded, self.config.arch)?;
        record.link_ms += t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let (mut cubins, mut at) = (Vec::new(), Vec::new());
        for (k, l) in fresh.iter().zip(&linked) {
            match l {
                Ok(c) => {
                    cubins.push(c.clone());
                    at.push(*k);
                }
                Err(_) => {
                    record.invalid += 1;
                    self.seen.insert(texts[*k].1, Score::failed("invalid"));
                }
            }
        }
        let (restarts, restart_time) = (self.worker.restarts, self.worker.restart_time);
        let outcomes = self.worker.run_variants(&cubins).map_err(|e| ImproveError::Gpu(e.to_string()))?;
        record.restarts += self.worker.restarts - restarts;
        record.restart_ms += (self.worker.restart_time - restart_time).as_secs_f64() * 1e3;
        for (k, o) in at.iter().zip(&outcomes) {
            let s = score(o);
            if s.status == "ok" && s.error <= self.dir.tolerance {
                record.correct += 1;
            } else if s.status != "ok" {
                record.failed += 1;
                record.faults += (s.status == "fault") as usize;
                record.timeouts += (s.status == "timeout") as usize;
                record.out_of_bounds += (s.status == "out_of_bounds") as usize;
            }
            self.seen.insert(texts[*k].1, s);
        }
        record.gpu_ms += t.elapsed().as_secs_f64() * 1e3;
        record.new += fresh.len();
        record.variants += patches.len();
        Ok(texts.iter().map(|(_, h)| self.seen[h].clone()).collect())
    }
}

/// Crossover of two patch lists: each edit of either goes to one child or the other at random,
/// in order (GEVO's patch-list crossover).
fn cross(a: &[Edit], b: &[Edit], rng: &mut impl Rng) -> (Vec<Edit>, Vec<Edit>) {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for e in a.iter().chain(b) {
        if rng.random_bool(0.5) { x.push(e.clone()) } else { y.push(e.clone()) }
    }
    (x, y)
}

/// Improves the kernel of `dir`: see the module documentation. `progress` sees each
/// generation's record as it is made.
pub fn improve(
    dir: &KernelDir,
    config: &ImproveConfig,
    mut progress: impl FnMut(&Record),
) -> Result<Outcome, ImproveError> {
    let started = Instant::now();
    let ptx = original_ptx(dir, &config.build, config.arch)?;
    let kernel = Kernel::parse(&ptx, &dir.kernel)?;
    let mut compiler = config
        .compiler
        .build(&CompileOptions::cubin(config.arch), &config.build)
        .map_err(|e| ImproveError::Compiler(e.to_string()))?;
    let original = kernel.original();
    // The original as it is (for the held-out checks) and bounded as every variant is (the
    // search's reference).
    let bounded = bound_loops(&original, &dir.kernel, dir.loop_limit);
    let mut both = link(compiler.as_mut(), &[original.clone(), bounded], config.arch)?.into_iter();
    let cubin = both.next().expect("two units").map_err(ImproveError::Original)?;
    let bounded_cubin = both.next().expect("two units").map_err(ImproveError::Original)?;
    let exe = gpu_worker_executable().map_err(|e| ImproveError::Gpu(e.to_string()))?;
    let job = dir.job(dir.search, config.seed, bounded_cubin).map_err(ImproveError::Harness)?;
    let mut worker = GpuWorker::kernels(&exe, job).map_err(|e| ImproveError::Gpu(e.to_string()))?;
    worker.set_deadline(config.deadline);
    // Faults and hangs are common among variants: a replacement is readied before it is needed.
    worker.keep_spares(SPARE_WORKERS);
    let device = worker.name.clone();
    let mut search = Search { kernel, dir, config, compiler, worker, seen: HashMap::new() };
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);

    // Generation 0: the original itself (its time beside its own: the noise) and single edits.
    let t0 = Instant::now();
    let mut patches: Vec<Vec<Edit>> = vec![Vec::new()];
    while patches.len() < config.population {
        patches.push(vec![search.kernel.random_edit(&mut rng)]);
    }
    let mut record = Record::default();
    // The original first, alone: its time sets how long a variant may take.
    let original_ms = search.evaluate(&patches[..1], &mut record)?[0].median_ms.1;
    let per_variant = original_ms * 1e-3 * (2 * dir.repeats as usize + 1) as f64;
    search.worker.set_deadline(
        Duration::from_secs_f64(MIN_DEADLINE.as_secs_f64() + DEADLINE_FACTOR * per_variant)
            .min(config.deadline),
    );
    let scores = search.evaluate(&patches, &mut record)?;
    record.variants -= 1;
    let mut population: Vec<Individual> =
        patches.into_iter().zip(scores).map(|(edits, score)| Individual { edits, score }).collect();
    finish(&mut record, &population, t0, dir.tolerance);
    progress(&record);
    let mut records = vec![record];

    for generation in 1..=config.generations {
        if config.time_limit.is_some_and(|l| started.elapsed() >= l) {
            break;
        }
        let t = Instant::now();
        let points: Vec<[f64; 2]> = population.iter().map(|i| i.score.objectives()).collect();
        let ranks = nsga::rank(&points);
        let pick = |rng: &mut ChaCha8Rng| {
            let (a, b) = (rng.random_range(0..population.len()), rng.random_range(0..population.len()));
            if nsga::better(ranks[b], ranks[a]) { b } else { a }
        };
        let mut children: Vec<Vec<Edit>> = Vec::with_capacity(config.population);
        while children.len() < config.population {
            let (a, b) = (pick(&mut rng), pick(&mut rng));
            let crossed = rng.random_bool(config.crossover);
            let (mut x, mut y) = if crossed {
                cross(&population[a].edits, &population[b].edits, &mut rng)
            } else {
                (population[a].edits.clone(), population[b].edits.clone())
            };
            for child in [&mut x, &mut y] {
                if !crossed || rng.random_bool(config.mutation) {
                    child.push(search.kernel.random_edit(&mut rng));
                }
            }
            children.push(x);
            if children.len() < config.population {
                children.push(y);
            }
        }
        let mut record = Record { generation, ..Record::default() };
        let scores = search.evaluate(&children, &mut record)?;
        population.extend(children.into_iter().zip(scores).map(|(edits, score)| Individual { edits, score }));
        let points: Vec<[f64; 2]> = population.iter().map(|i| i.score.objectives()).collect();
        let mut kept = nsga::survivors(&points, config.population);
        kept.sort_unstable();
        population = kept.into_iter().map(|k| population[k].clone()).collect();
        finish(&mut record, &population, t, dir.tolerance);
        if let Some(prev) = records.last() {
            record.best_speedup = record.best_speedup.max(prev.best_speedup);
        }
        progress(&record);
        records.push(record);
    }
    let search_s = started.elapsed().as_secs_f64();

    let points: Vec<[f64; 2]> = population.iter().map(|i| i.score.objectives()).collect();
    let mut front: Vec<Individual> = nsga::fronts(&points)
        .first()
        .map(|f| f.iter().map(|&k| population[k].clone()).filter(|i| i.score.status == "ok").collect())
        .unwrap_or_default();
    front.sort_by(|a, b| a.score.time_ratio.total_cmp(&b.score.time_ratio));
    front.dedup_by(|a, b| a.score == b.score);
    // The fastest correct individuals, each checked on held-out sizes and fresh inputs until one
    // is correct on all of them; those that are not are reported as rejected.
    let mut candidates: Vec<&Individual> = population
        .iter()
        .filter(|i| i.score.status == "ok" && i.score.error <= dir.tolerance && i.score.time_ratio < 1.0)
        .filter(|i| search.kernel.apply(&i.edits).0 != original)
        .collect();
    candidates.sort_by(|a, b| {
        a.score.time_ratio.total_cmp(&b.score.time_ratio).then(a.edits.len().cmp(&b.edits.len()))
    });
    candidates.dedup_by(|a, b| a.score == b.score);
    let (mut best, mut checks, mut rejected, mut best_cubin) = (None, Vec::new(), Vec::new(), None);
    for c in candidates.into_iter().take(CANDIDATES) {
        let (found, linked) = check(&mut search, c, &cubin, config)?;
        if !found.is_empty() && found.iter().all(|k| k.correct) {
            (best, checks, best_cubin) = (Some(c.clone()), found, linked);
            break;
        }
        rejected.push(Rejected { individual: c.clone(), checks: found });
    }
    let outcome = Outcome {
        kernel: dir.kernel.clone(),
        device,
        original_ms,
        front,
        best,
        checks,
        rejected,
        records,
        evaluated: search.seen.len(),
        search_s,
    };
    if let Some(out) = &config.out {
        write(out, &search, &outcome, &original, best_cubin.as_deref())?;
    }
    Ok(outcome)
}

fn finish(record: &mut Record, population: &[Individual], t: Instant, tolerance: f64) {
    record.best_speedup = population
        .iter()
        .filter(|i| i.score.status == "ok" && i.score.error <= tolerance && !i.edits.is_empty())
        .map(|i| i.score.speedup())
        .fold(0.0, f64::max);
    let points: Vec<[f64; 2]> = population.iter().map(|i| i.score.objectives()).collect();
    record.front = nsga::fronts(&points).first().map_or(0, Vec::len);
    record.wall_ms = t.elapsed().as_secs_f64() * 1e3;
    record.variants_per_s = record.new as f64 / t.elapsed().as_secs_f64();
}

/// Runs the best variant beside the original at the search size and each held-out size, with
/// inputs from another seed, in a fresh worker each.
fn check(
    search: &mut Search<'_>,
    best: &Individual,
    original: &[u8],
    config: &ImproveConfig,
) -> Result<(Vec<Check>, Option<Vec<u8>>), ImproveError> {
    let text = search.kernel.apply(&best.edits).0;
    let cubin = link(search.compiler.as_mut(), &[text], config.arch)?.pop().expect("one unit");
    let Ok(cubin) = cubin else { return Ok((Vec::new(), None)) };
    let exe = gpu_worker_executable().map_err(|e| ImproveError::Gpu(e.to_string()))?;
    let dir = search.dir;
    let mut checks = Vec::new();
    for &n in std::iter::once(&dir.search).chain(&dir.validate) {
        let seed = config.seed.wrapping_add(0x5EED_0000_0000_0001);
        let job = dir.job(n, seed, original.to_vec()).map_err(ImproveError::Harness)?;
        let mut worker = GpuWorker::kernels(&exe, job).map_err(|e| ImproveError::Gpu(e.to_string()))?;
        worker.set_deadline(config.deadline.max(Duration::from_secs(30)));
        let outcome = worker
            .run_variants(std::slice::from_ref(&cubin))
            .map_err(|e| ImproveError::Gpu(e.to_string()))?;
        let check = match &outcome[0] {
            VariantOutcome::Run(VariantRun::Ran { error, variant_ms, original_ms, out_of_bounds }) => {
                let ratios: Vec<f64> =
                    original_ms.iter().zip(variant_ms).map(|(&o, &v)| o as f64 / v as f64).collect();
                let (mean, half) = mean_interval(&ratios);
                Check {
                    n,
                    error: *error,
                    speedup: mean,
                    interval: (mean - half, mean + half),
                    correct: !out_of_bounds && *error <= dir.tolerance,
                }
            }
            _ => Check { n, error: f64::INFINITY, speedup: 0.0, interval: (0.0, 0.0), correct: false },
        };
        checks.push(check);
    }
    Ok((checks, Some(cubin)))
}

/// The mean of `v` and the half-width of its 95% confidence interval (normal approximation).
fn mean_interval(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, f64::INFINITY);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, 1.96 * (var / n).sqrt())
}

fn write(
    out: &Path,
    search: &Search<'_>,
    outcome: &Outcome,
    original: &str,
    best_cubin: Option<&[u8]>,
) -> Result<(), ImproveError> {
    let put = |name: &str, bytes: &[u8]| {
        let path = out.join(name);
        std::fs::write(&path, bytes)
            .map_err(|source| ImproveError::Write { path: path.display().to_string(), source })
    };
    std::fs::create_dir_all(out)
        .map_err(|source| ImproveError::Write { path: out.display().to_string(), source })?;
    let mut lines = String::new();
    for r in &outcome.records {
        lines.push_str(&serde_json::to_string(r).expect("records serialize"));
        lines.push('\n');
    }
    put("records.jsonl", lines.as_bytes())?;
    put("outcome.json", pretty_json(outcome).as_bytes())?;
    put("original.ptx", original.as_bytes())?;
    if let Some(best) = &outcome.best {
        let text = search.kernel.apply(&best.edits).0;
        put("best.ptx", text.as_bytes())?;
        put("best.diff", diff(original, &text).as_bytes())?;
        put("best.patch.json", pretty_json(&best.edits).as_bytes())?;
        if let Some(c) = best_cubin {
            put("best.cubin", c)?;
        }
    }
    Ok(())
}

/// Pretty JSON of results, with a final newline.
fn pretty_json(v: &impl Serialize) -> String {
    serde_json::to_string_pretty(v).expect("results serialize") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossover_shares_out_every_edit_once_in_order() {
        let a: Vec<Edit> = (0..5).map(|k| Edit::Delete { at: k }).collect();
        let b: Vec<Edit> = (5..9).map(|k| Edit::Delete { at: k }).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (x, y) = cross(&a, &b, &mut rng);
        assert_eq!(x.len() + y.len(), 9);
        let at = |e: &Edit| if let Edit::Delete { at } = e { *at } else { unreachable!() };
        assert!(x.windows(2).all(|w| at(&w[0]) < at(&w[1])) && y.windows(2).all(|w| at(&w[0]) < at(&w[1])));
    }

    #[test]
    fn scores_rank_failures_last_and_time_by_medians() {
        let ran = VariantOutcome::Run(VariantRun::Ran {
            error: 0.0,
            out_of_bounds: false,
            variant_ms: vec![1.0, 9.0, 2.0],
            original_ms: vec![4.0, 4.0, 40.0],
        });
        let s = score(&ran);
        assert_eq!((s.time_ratio, s.status), (0.5, "ok"));
        assert_eq!(s.speedup(), 2.0);
        for o in [VariantOutcome::Timeout, VariantOutcome::Fault("x".into())] {
            assert!(nsga::dominates(s.objectives(), score(&o).objectives()));
        }
        let (m, h) = mean_interval(&[1.0, 1.2, 0.8, 1.0]);
        assert!((m - 1.0).abs() < 1e-12 && h > 0.0 && h < 0.2);
    }
}
