//! The run spec: every option a user gives a run, its default and its check, in one type.
//!
//! [`RunSpec`] is what `gpfarm evolve` takes as flags (it is a [`clap::Args`]: the command line
//! flattens it, `--population` for `population`) and what Python takes as keyword arguments (it
//! is serde's: `gpfarm.evolve(..., population=300)` is deserialised into it, and its fields read
//! back by name). Each option is one field here: its doc line is the flag's `--help` and the
//! keyword's meaning, its `#[arg(default_value…)]` is the one default (the type's [`Default`]
//! is the command line's with no flags), and [`RunSpec::check`] holds its range. The engine's
//! [`Options`] and [`CompilerRequest`] are made from a checked spec by [`RunSpec::options`] and
//! [`RunSpec::compiler_request`], the one mapping. What a caller holds that is not an option of
//! the run (the problem, a warm start's genomes, the CUDA directory, the start instant) is given
//! beside it.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpfarm_client::{BuildConfig, CompilerSpec, DiskCache, Workers};
use gpfarm_gp::{EvolutionConfig, FitConfig, MappingLimits, Representation, Seed};
use gpfarm_protocol::{FarmName, Route, Shape, SmArch};
use serde::{Deserialize, Serialize};

use crate::options::{CRASH_RETRY_FLAGS, EvalMode, Options};
use crate::plan::{CompilerRequest, IslandFarm};
use crate::route::FitKernels;

/// Every option of a run, with its default. Field names are the keyword names in Python and,
/// with `-` for `_`, the flags of `gpfarm evolve`.
#[derive(Debug, Clone, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSpec {
    /// Individuals per generation.
    #[arg(long, default_value_t = EvolutionConfig::default().population, value_parser = whole)]
    pub population: usize,
    /// Generations bred after the initial one.
    #[arg(long, default_value_t = EvolutionConfig::default().generations, value_parser = whole)]
    pub generations: usize,
    /// Seed: the same seed gives the same run.
    #[arg(long, default_value_t = EvolutionConfig::default().seed)]
    pub seed: u64,
    /// Tournament size.
    #[arg(long, default_value_t = EvolutionConfig::default().tournament, value_parser = whole)]
    pub tournament: usize,
    /// Elite individuals kept unchanged.
    #[arg(long, default_value_t = EvolutionConfig::default().elite, value_parser = whole)]
    pub elite: usize,
    /// Compile daemons (or threads); default: one per core.
    #[arg(long, short = 'n', value_parser = whole)]
    pub daemons: Option<usize>,
    /// Compiler: farm, farm:K, threads, threads:K, inprocess or nvcc (K daemons or threads; default: -n,
    /// else one per core).
    #[arg(long, default_value = "farm")]
    #[serde(with = "text")]
    pub compiler: CompilerSpec,
    /// Compile on daemons started by `gpfarm daemons start` instead of spawning new ones (they
    /// stay up, warm, for the next run).
    #[arg(long, conflicts_with = "no_compile")]
    pub attach: bool,
    /// With --attach: the farm's name (default: the only resident farm).
    #[arg(long, requires = "attach")]
    #[serde(with = "optional_text")]
    pub farm: Option<FarmName>,
    /// Compile nothing and evaluate on the CPU: the same as --route cpu (for quick experiments
    /// with the GP engine).
    #[arg(long, conflicts_with = "route")]
    pub no_compile: bool,
    /// Individuals per translation unit (default: chunks guided by each individual's estimated
    /// compile cost, heaviest first, shrinking towards the end of a generation so that every
    /// daemon finishes at about the same time).
    #[arg(long, value_parser = whole)]
    pub per_unit: Option<usize>,
    /// Evaluator: auto (GPU if present, else CPU), cpu or gpu.
    #[arg(long, value_enum, default_value_t = EvalMode::Auto)]
    #[serde(with = "text")]
    pub eval: EvalMode,
    /// Target architecture for the CUBIN (default: the GPU's when evaluating on it, else sm_90).
    #[arg(long)]
    #[serde(with = "optional_text")]
    pub arch: Option<SmArch>,
    /// Extra NVRTC option (repeatable).
    #[arg(long, allow_hyphen_values = true)]
    pub flag: Vec<String>,
    /// How individuals get their fitness: nvrtc (CUDA C compiled by NVRTC on the daemons), ptx
    /// (PTX emitted from the phenotype, linked by nvJitLink on the daemons), interpreter
    /// (bytecode run by one GPU kernel for the whole population; no daemons), cpu (the CPU
    /// reference evaluator; nothing compiled), or auto: the interpreter or ptx, by predicted
    /// time, where the problem's template.cu is the standard harness, else nvrtc (nvrtc with
    /// --compiler nvcc); the interpreter becomes cpu without a GPU. ptx and interpreter need the
    /// standard harness. All give the same fitness on the GPU, bit for bit.
    #[arg(long, default_value = "auto", value_parser = Route::parse_choice)]
    #[serde(with = "route_choice")]
    pub route: AutoRoute,
    /// nvJitLink option for the PTX route (repeatable; replaces the default: the level the first
    /// generation calls for, -O3 where programs loop or read free parameters over more than
    /// about 2.2e7 / (parameters per program) cases, else -O0), e.g. --link-flag=-O3.
    #[arg(long, allow_hyphen_values = true)]
    pub link_flag: Vec<String>,
    /// How a unit holds its individuals: switch (one kernel per unit, switching on the block
    /// row; one launch evaluates the unit) or kernels (one kernel per individual). Default:
    /// switch, or kernels for an NVRTC template that reads blockIdx.y.
    #[arg(long)]
    #[serde(with = "optional_text")]
    pub shape: Option<Shape>,
    /// Let NVRTC fuse `a * b + c` into one multiply-add (its own default). Without it every
    /// floating-point operation is rounded on its own, as C and the CPU evaluator do.
    #[arg(long)]
    pub fmad: bool,
    /// Compile and evaluate every individual of every generation: no reuse of fitness known from
    /// earlier generations, no merging of identical individuals, no disk cache (for measuring;
    /// the results are the same).
    #[arg(long, alias = "no-reuse", conflicts_with_all = ["disk_cache", "cache_dir"])]
    pub no_cache: bool,
    /// Do not overlap: compile each generation as a whole, then evaluate it, then breed the next
    /// (for measuring; the results are the same). By default each unit is evaluated as soon as it
    /// is compiled, and the next generation's pairs are bred and compiled as soon as their
    /// parents are evaluated.
    #[arg(long)]
    pub no_overlap: bool,
    /// Keep compiled CUBIN on disk and use it in later runs (in $GPFARM_CACHE_DIR,
    /// $XDG_CACHE_HOME/gpfarm or ~/.cache/gpfarm).
    #[arg(long)]
    pub disk_cache: bool,
    /// The disk cache's directory (implies --disk-cache).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Write one JSON line per compiled unit to this file: generation, individuals, estimated
    /// compile weight, and when it was queued, started and ended.
    #[arg(long)]
    pub trace_units: Option<PathBuf>,
    /// Where the unit of each individual that does not compile is written, for reproducing it
    /// with `gpfarm compile --source FILE` (default: a private folder gpfarm-crashes-XXXXXX made
    /// in the temporary directory on the first failure; kept after the run).
    #[arg(long)]
    pub crash_dir: Option<PathBuf>,
    /// NVRTC option an individual that crashes NVRTC is compiled again with, once, in a daemon of
    /// its own (repeatable; default: --Ofast-compile=min).
    #[arg(long, allow_hyphen_values = true, conflicts_with = "no_crash_retry")]
    pub crash_retry_flag: Vec<String>,
    /// Do not compile individuals that crash NVRTC again: they get the worst fitness.
    #[arg(long)]
    pub no_crash_retry: bool,
    /// Give an individual that crashes NVRTC the worst fitness on the GPU even when its retry
    /// compiles (the default retry flag gives bit-identical fitness there; other flags may not).
    #[arg(long)]
    pub no_crash_retry_on_gpu: bool,
    /// Seconds a daemon may spend on one unit before it is killed and replaced, and the unit
    /// retried once (farm only).
    #[arg(long, default_value_t = gpfarm_client::DEFAULT_UNIT_DEADLINE.as_secs())]
    pub deadline: u64,
    /// Seconds the GPU may take to evaluate a batch (and, while the culprit is sought, one
    /// kernel) before the GPU worker is killed and restarted: a kernel that does not end gets the
    /// worst fitness, with the reason timeout, and the run goes on.
    #[arg(long, value_name = "SECONDS", default_value_t = gpfarm_client::DEFAULT_GPU_DEADLINE.as_secs_f64())]
    pub gpu_deadline: f64,
    /// Loop iterations a program may take in one case before it fails with the worst fitness,
    /// on every route (default: the problem's `max_steps`, else 1000000).
    #[arg(long, value_name = "STEPS")]
    pub max_steps: Option<u64>,
    /// Levenberg-Marquardt iterations fitting the free parameters (`#param#` in the grammar) of
    /// each individual bred; 0: no fitting (the values are only inherited and mutated).
    #[arg(long, value_name = "N", default_value_t = FitConfig::default().iterations, value_parser = whole)]
    pub fit_iterations: usize,
    /// Fits from other starting values beyond the first, keeping the best.
    #[arg(long, value_name = "N", default_value_t = FitConfig::default().restarts, value_parser = whole)]
    pub fit_restarts: usize,
    /// Share of the individuals bred whose parameters are fitted, in [0, 1].
    #[arg(long, value_name = "SHARE", default_value_t = FitConfig::default().share)]
    pub fit_share: f64,
    /// Fit on at most this many cases, evenly spaced (0: all), on the GPU and the CPU (on the CPU
    /// beside the GPU at most 4096); the fitness still uses all.
    #[arg(long, value_name = "N", default_value_t = FitConfig::default().cases, value_parser = whole)]
    pub fit_cases: usize,
    /// Which kernels fit free parameters on the GPU: the interpreter's, kernels compiled for
    /// each straight-line program's structure (once per run; on the PTX route its own PTX linked
    /// with a fitting template, elsewhere NVRTC's), or compiled where that pays for itself over
    /// the fit's iterations and cases (auto).
    #[arg(long, value_name = "KERNELS", default_value = "auto")]
    #[serde(with = "text")]
    pub fit_kernels: FitKernels,
    /// Keep fitted values for the individual's own fitness only (Baldwinian); by default
    /// offspring inherit them (Lamarckian).
    #[arg(long)]
    pub no_lamarck: bool,
    /// Parsimony pressure: tournaments compare error plus this much per node of an
    /// individual's size (0: error alone).
    #[arg(long, value_name = "PER_NODE", default_value_t = EvolutionConfig::default().parsimony)]
    pub parsimony: f64,
    /// How individuals are held and varied: "ge" (grammatical evolution's codons, the paper's
    /// representation) or "tree" (derivation trees of the grammar: subtree crossover and
    /// mutation, no child over --max-size).
    #[arg(long, value_name = "KIND", default_value_t = EvolutionConfig::default().representation)]
    #[serde(with = "text")]
    pub representation: Representation,
    /// Largest size (nodes of a program's syntax tree) an individual may have; larger ones get
    /// the worst fitness without being evaluated, and trees never breed one (0: no limit; 50 is
    /// Operon's default length).
    #[arg(long, value_name = "NODES", default_value_t = EvolutionConfig::default().max_size, value_parser = whole)]
    pub max_size: usize,
    /// Deepest derivation tree an individual may have (the start rule at depth 1): trees never
    /// breed a deeper child, and a codon genome whose mapping goes deeper is invalid.
    #[arg(long, value_name = "LEVELS", default_value_t = MappingLimits::default().max_depth, value_parser = whole)]
    pub max_depth: usize,
    /// The run's model is the smallest on its size-error front whose error is within this share
    /// of the front's best (0: the best model, the smallest of equals).
    #[arg(long, value_name = "SHARE", default_value_t = EvolutionConfig::default().select_tolerance)]
    pub select_tolerance: f64,
    /// The run's wall time in seconds, from the command's start: it ends after the generation
    /// closest to the limit (within half a generation); one island only.
    #[arg(long, value_name = "SECONDS")]
    pub max_time: Option<f64>,
    /// Threads that evaluate and fit on the CPU (default: one per core).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Sub-populations evolved side by side (the island model), each of --population
    /// individuals, each with its own evaluator (GPUs taken round-robin); under mpirun, per
    /// rank.
    #[arg(long, default_value_t = 1, value_parser = whole)]
    pub islands: usize,
    /// Generations between migrations: after generations M-1, 2M-1, ... each island sends its
    /// best to the next island on a ring.
    #[arg(long, default_value_t = 10, value_parser = whole)]
    pub migrate_every: usize,
    /// Individuals each island sends at a migration; they replace the next island's worst.
    #[arg(long, default_value_t = 2, value_parser = whole)]
    pub migrants: usize,
    /// Whether islands share one farm (all its daemons) or split its daemons between them.
    #[arg(long, value_enum, default_value_t = IslandFarm::Shared)]
    #[serde(with = "text")]
    pub island_farm: IslandFarm,
    /// Keep the GPU worker process when the run ends, for the next run of this process to take
    /// over ([`Options::keep_gpu_worker`]); for a process that runs again and again, so not a
    /// flag of the command line, which runs once.
    #[arg(skip)]
    pub keep_gpu_worker: bool,
}

/// `route`: a route, or `None` for auto. (An alias, so that clap takes `auto` as a value rather
/// than the flag as optional.)
pub type AutoRoute = Option<Route>;

impl Default for RunSpec {
    /// The command line's values when no flag is given: the one default of every option.
    fn default() -> Self {
        use clap::{Args, FromArgMatches};
        let matches = RunSpec::augment_args(clap::Command::new("gpfarm"))
            .try_get_matches_from(["gpfarm"])
            .expect("every option has a default or none");
        RunSpec::from_arg_matches(&matches).expect("every option has a default or none")
    }
}

/// An option whose value is out of its range: the option's field name and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option}: {why}")]
pub struct OptionError {
    /// The field's name (`population`); the flag is [`OptionError::flag`].
    pub option: &'static str,
    /// What is wrong with the value, in words.
    pub why: String,
}

impl OptionError {
    fn new(option: &'static str, why: impl Into<String>) -> OptionError {
        OptionError { option, why: why.into() }
    }

    /// The option as the command line spells it (`--fit-share`).
    pub fn flag(&self) -> String {
        format!("--{}", self.option.replace('_', "-"))
    }
}

/// A whole number of any size as the command line gives it, so that one beyond the machine's
/// words is told the most it takes, as one beyond an option's range is ([`RunSpec::check`]).
fn whole(text: &str) -> Result<usize, String> {
    let n: u128 = text.trim().parse().map_err(|_| format!("`{text}` is not a whole number of at least 0"))?;
    usize::try_from(n).map_err(|_| format!("{n} is more than the most it takes"))
}

/// `value` if it is at most `most`.
fn at_most(option: &'static str, value: usize, most: usize) -> Result<(), OptionError> {
    match value <= most {
        true => Ok(()),
        false => Err(OptionError::new(option, format!("{value} is more than {most}, the most it takes"))),
    }
}

/// `value` if it is at least 1.
fn at_least_one(option: &'static str, value: u64) -> Result<(), OptionError> {
    match value >= 1 {
        true => Ok(()),
        false => Err(OptionError::new(option, format!("{value} is not in 1.."))),
    }
}

fn seconds(option: &'static str, value: f64) -> Result<(), OptionError> {
    match value > 0.0 && value.is_finite() && value < 1e9 {
        true => Ok(()),
        false => Err(OptionError::new(
            option,
            format!("{value} is not a number of seconds above 0 (and below 1e9)"),
        )),
    }
}

fn non_negative(option: &'static str, value: f64) -> Result<(), OptionError> {
    match value.is_finite() && value >= 0.0 {
        true => Ok(()),
        false => Err(OptionError::new(option, format!("{value} is not a finite number of at least 0"))),
    }
}

impl RunSpec {
    /// The names of the options, in order (Python's keywords).
    pub fn names() -> Vec<String> {
        match serde_json::to_value(RunSpec::default()) {
            Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Every value within its range; the first that is not, named.
    pub fn check(&self) -> Result<(), OptionError> {
        at_most("population", self.population, gpfarm_gp::limits::MAX_POPULATION)?;
        at_most("generations", self.generations, 1_000_000_000)?;
        at_most("tournament", self.tournament, 100_000_000)?;
        at_most("elite", self.elite, 100_000_000)?;
        if let Some(n) = self.daemons {
            at_most("daemons", n, 4096)?;
        }
        if let Some(n) = self.per_unit {
            at_most("per_unit", n, 1_000_000)?;
        }
        at_least_one("deadline", self.deadline)?;
        seconds("gpu_deadline", self.gpu_deadline)?;
        if let Some(n) = self.max_steps {
            at_least_one("max_steps", n)?;
        }
        at_most("fit_iterations", self.fit_iterations, 1_000_000)?;
        at_most("fit_restarts", self.fit_restarts, 1_000_000)?;
        if !(0.0..=1.0).contains(&self.fit_share) {
            return Err(OptionError::new(
                "fit_share",
                format!("{} is not a share in [0, 1]", self.fit_share),
            ));
        }
        at_most("fit_cases", self.fit_cases, 1_000_000_000_000)?;
        non_negative("parsimony", self.parsimony)?;
        at_most("max_size", self.max_size, 1_000_000_000)?;
        at_least_one("max_depth", self.max_depth as u64)?;
        at_most("max_depth", self.max_depth, 1000)?;
        non_negative("select_tolerance", self.select_tolerance)?;
        if let Some(t) = self.max_time {
            seconds("max_time", t)?;
        }
        if let Some(n) = self.threads {
            at_least_one("threads", n as u64)?;
        }
        at_most("islands", self.islands, gpfarm_gp::limits::MAX_ISLANDS)?;
        at_most("migrate_every", self.migrate_every, 1_000_000_000)?;
        at_most("migrants", self.migrants, 100_000_000)?;
        Ok(())
    }

    /// The engine's options for this spec, after [`RunSpec::check`]: `start` is the warm start's
    /// individuals, `started` the instant `max_time` counts from (the caller's start, so that
    /// loading the problem and starting the evaluator count).
    pub fn options(&self, start: Vec<Seed>, started: Option<Instant>) -> Result<Options, OptionError> {
        self.check()?;
        let disk_cache = match (&self.cache_dir, self.disk_cache) {
            (Some(dir), _) => Some(dir.clone()),
            (None, true) => Some(DiskCache::default_dir().ok_or_else(|| {
                OptionError::new(
                    "disk_cache",
                    "no cache directory: set GPFARM_CACHE_DIR or HOME, or give a cache directory",
                )
            })?),
            (None, false) => None,
        };
        Ok(Options {
            evolution: EvolutionConfig {
                population: self.population,
                generations: self.generations,
                tournament: self.tournament,
                elite: self.elite,
                seed: self.seed,
                fit: FitConfig {
                    iterations: self.fit_iterations,
                    restarts: self.fit_restarts,
                    share: self.fit_share,
                    lamarckian: !self.no_lamarck,
                    cases: self.fit_cases,
                },
                parsimony: self.parsimony,
                max_size: self.max_size,
                select_tolerance: self.select_tolerance,
                representation: self.representation,
                limits: MappingLimits { max_depth: self.max_depth, ..MappingLimits::default() },
                ..EvolutionConfig::default()
            },
            eval: self.eval,
            arch: self.arch,
            flags: self.flag.clone(),
            fmad: self.fmad,
            route: if self.no_compile { Some(Route::Cpu) } else { self.route },
            fit_kernels: self.fit_kernels,
            link_flags: self.link_flag.clone(),
            shape: self.shape,
            cache: !self.no_cache,
            overlap: !self.no_overlap,
            per_unit: self.per_unit,
            disk_cache,
            trace_units: self.trace_units.clone(),
            gpu_worker: None,
            gpu_deadline: Duration::from_secs_f64(self.gpu_deadline),
            max_steps: self.max_steps,
            max_time: self.max_time.map(Duration::from_secs_f64),
            started,
            threads: self.threads.and_then(NonZeroUsize::new),
            crash_retry_flags: match (self.no_crash_retry, self.crash_retry_flag.is_empty()) {
                (true, _) => Vec::new(),
                (false, true) => CRASH_RETRY_FLAGS.iter().map(|f| (*f).to_owned()).collect(),
                (false, false) => self.crash_retry_flag.clone(),
            },
            crash_retry_on_gpu: !self.no_crash_retry_on_gpu,
            crash_dir: self.crash_dir.clone(),
            islands: self.islands,
            start,
            keep_gpu_worker: self.keep_gpu_worker,
            migrate_every: self.migrate_every,
            migrants: self.migrants,
        })
    }

    /// The compiler this spec asks for (the planner adds what its route needs); `cuda` is the
    /// CUDA toolkit or wheel directory, if the caller was given one.
    pub fn compiler_request(&self, cuda: Option<&Path>) -> Result<CompilerRequest, OptionError> {
        let workers = match self.daemons {
            None => None,
            Some(n) => {
                Some(Workers::exactly(n).map_err(|e| OptionError::new("daemons", e.to_string()))?.count())
            }
        };
        Ok(CompilerRequest {
            spec: self.compiler,
            workers,
            build: BuildConfig {
                cuda: cuda.map(Path::to_path_buf),
                attach: self.attach.then(|| self.farm.clone()),
                unit_deadline: Duration::from_secs(self.deadline),
            },
            island_farm: self.island_farm,
        })
    }
}

/// A value as its text (`Display` and `FromStr`), as the command line writes it.
mod text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

/// An optional value as its text, or none.
mod optional_text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<T: Display, S: Serializer>(value: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        Option::<String>::deserialize(d)?.map(|s| s.parse().map_err(D::Error::custom)).transpose()
    }
}

/// A route or `auto`.
mod route_choice {
    use gpfarm_protocol::Route;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(value: &Option<Route>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(value.map_or("auto", |r| r.as_str()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Route>, D::Error> {
        Route::parse_choice(&String::deserialize(d)?).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_command_line_s_with_no_flags() {
        let spec = RunSpec::default();
        assert_eq!((spec.population, spec.generations, spec.seed, spec.max_size), (300, 30, 1, 50));
        assert_eq!((spec.route, spec.eval, spec.representation), (None, EvalMode::Auto, Representation::Ge));
        assert_eq!(spec.gpu_deadline, gpfarm_client::DEFAULT_GPU_DEADLINE.as_secs_f64());
        assert!(spec.check().is_ok());
    }

    #[test]
    fn a_spec_reads_back_from_its_own_serialisation_and_missing_fields_take_the_default() {
        let mut spec = RunSpec { population: 80, route: Some(Route::Ptx), ..RunSpec::default() };
        spec.arch = Some("sm_80".parse().unwrap());
        let text = serde_json::to_string(&spec).unwrap();
        assert!(text.contains(r#""route":"ptx""#) && text.contains(r#""compiler":"farm""#), "{text}");
        assert_eq!(serde_json::from_str::<RunSpec>(&text).unwrap(), spec);
        let partial: RunSpec = serde_json::from_str(r#"{"seed": 7, "route": "auto"}"#).unwrap();
        assert_eq!(partial, RunSpec { seed: 7, ..RunSpec::default() });
        let unknown = serde_json::from_str::<RunSpec>(r#"{"populaton": 7}"#).unwrap_err().to_string();
        assert!(unknown.contains("populaton"), "{unknown}");
        let bad = serde_json::from_str::<RunSpec>(r#"{"route": "teleport"}"#).unwrap_err().to_string();
        assert!(bad.contains("interpreter"), "{bad}");
        assert!(RunSpec::names().iter().any(|n| n == "fit_kernels") && RunSpec::names().len() > 40);
    }

    #[test]
    fn a_value_out_of_range_is_named_by_its_option() {
        let check = |spec: RunSpec| spec.check().unwrap_err();
        let e = check(RunSpec { population: 1_000_000_000_000, ..RunSpec::default() });
        assert_eq!((e.option, e.flag().as_str()), ("population", "--population"));
        assert!(e.why.contains("the most it takes"), "{e}");
        assert_eq!(check(RunSpec { fit_share: 1.5, ..RunSpec::default() }).flag(), "--fit-share");
        assert_eq!(check(RunSpec { max_steps: Some(0), ..RunSpec::default() }).why, "0 is not in 1..");
        assert_eq!(check(RunSpec { gpu_deadline: 0.0, ..RunSpec::default() }).option, "gpu_deadline");
        assert_eq!(check(RunSpec { max_time: Some(f64::NAN), ..RunSpec::default() }).option, "max_time");
        assert_eq!(check(RunSpec { parsimony: -1.0, ..RunSpec::default() }).option, "parsimony");
    }

    #[test]
    fn the_options_are_the_spec_s() {
        let spec =
            RunSpec { no_compile: true, no_crash_retry: true, max_time: Some(2.5), ..RunSpec::default() };
        let options = spec.options(Vec::new(), None).unwrap();
        assert_eq!(options.route, Some(Route::Cpu));
        assert!(options.crash_retry_flags.is_empty());
        assert_eq!(options.max_time, Some(Duration::from_millis(2500)));
        assert_eq!(options.evolution.population, 300);
        let deep = RunSpec { max_depth: 12, ..RunSpec::default() }.options(Vec::new(), None).unwrap();
        assert_eq!(deep.evolution.limits, MappingLimits { max_depth: 12, ..MappingLimits::default() });
        for depth in [0, 1001] {
            let e = RunSpec { max_depth: depth, ..RunSpec::default() }.options(Vec::new(), None).unwrap_err();
            assert_eq!(e.flag(), "--max-depth");
        }
        let default = RunSpec::default().options(Vec::new(), None).unwrap();
        // One default for each option: the GP parameters' are the engine's own.
        assert_eq!(format!("{:?}", default.evolution), format!("{:?}", EvolutionConfig::default()));
        assert_eq!(format!("{default:?}"), format!("{:?}", Options::default()));
        assert!(default.cache && default.overlap && default.route.is_none());
    }
}
