//! The paper's experiment, side by side: the same seeded populations compiled by every method,
//! measured, tabulated in the shape of the paper's Tables 1-3 with its numbers beside ours, fitted
//! as fixed cost per call plus cost per individual, and plotted.
//!
//! Populations are sampled as the paper did: the first generations of several independently
//! seeded runs, so they are not biased by evolution. Every method compiles byte-identical units.

pub mod breakeven;
pub mod method;
pub mod plot;
pub mod report;
pub mod sample;
pub mod scale;
mod shared;
pub mod steps;
pub mod throughput;

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use gpfarm_client::{
    Batch, BuildConfig, CompileOptions, Compiler, FailureKind, Job, Unit, UnitOutcome, UnitResult, Workers,
    job_queue,
};
use gpfarm_protocol::{CompileMode, Language, Route, Shape, SmArch};
use serde::{Deserialize, Serialize};

pub use method::Method;
pub use sample::Sample;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Built-in problems.
    pub problems: Vec<String>,
    /// Population sizes.
    pub sizes: Vec<usize>,
    /// Independently seeded runs per size.
    pub runs: usize,
    /// First generations of each run.
    pub generations: usize,
    /// Methods to compare.
    pub methods: Vec<Method>,
    /// Individuals per translation unit (the same for every method).
    pub per_unit: usize,
    /// `None`: the paper's units of [`BenchConfig::per_unit`] individuals, which each method
    /// splits into balanced contiguous parts, one request per worker. `Some(w)`: the units the
    /// engine forms for `w` workers ([`gpfarm_client::partition::plan`]: heaviest
    /// first, guided chunks by each route's own cost estimate), each its own job, taken by the
    /// next free worker as in `gpfarm evolve`.
    pub guided: Option<usize>,
    /// Extra NVRTC options (also given to nvcc where it accepts them).
    pub flags: Vec<String>,
    /// Routes compared, on the same populations: NVRTC from CUDA C, PTX emitted from the
    /// phenotype (only compilers that take PTX units: in-process, threads, the farm).
    pub routes: Vec<Route>,
    /// nvJitLink option sets for the PTX route: each set is measured in turn (e.g. `-O0` and
    /// `-O3`); one empty set measures nvJitLink's defaults.
    pub link_flag_sets: Vec<Vec<String>>,
    /// Unit shapes compared, on the same populations: a kernel per individual, or one switch
    /// kernel per unit.
    pub shapes: Vec<Shape>,
    /// Target architecture.
    pub arch: SmArch,
    /// Toolchain directory.
    pub cuda: Option<PathBuf>,
    /// nvcc is slow: it compiles only this many samples per problem and size.
    pub nvcc_samples: usize,
    /// Where CSV, tables and plots go.
    pub out: PathBuf,
}

impl BenchConfig {
    /// A run that finishes in about a minute on 2 cores (for CI).
    pub fn quick(out: PathBuf) -> Self {
        BenchConfig {
            problems: vec!["search".into(), "keijzer6".into(), "multiplier5".into()],
            sizes: vec![20, 60],
            runs: 1,
            generations: 1,
            methods: vec![
                Method::InProcess,
                Method::Threads(Workers::Exactly(TWO)),
                Method::Farm(Workers::Exactly(NonZeroUsize::MIN)),
                Method::Farm(Workers::Exactly(TWO)),
                Method::Nvcc,
            ],
            per_unit: 10,
            guided: None,
            flags: Vec::new(),
            routes: vec![Route::Nvrtc],
            link_flag_sets: vec![Vec::new()],
            shapes: vec![Shape::Kernels],
            arch: SmArch::SM_90,
            cuda: None,
            nvcc_samples: 1,
            out,
        }
    }

    /// The full comparison on a machine with `cores` cores.
    pub fn full(out: PathBuf, cores: usize) -> Self {
        let ks: Vec<Workers> = [1, 2, 4, 8, 16]
            .into_iter()
            .filter(|&k| k <= cores)
            .filter_map(NonZeroUsize::new)
            .map(Workers::Exactly)
            .collect();
        let mut methods = vec![Method::InProcess];
        methods.extend(ks.iter().map(|&k| Method::Threads(k)));
        methods.extend(ks.iter().map(|&k| Method::Farm(k)));
        // nvcc last: on the GPU host, the method measured right after ~100 s of nvcc processes in
        // the same benchmark process ran 7x slower than in a fresh process.
        methods.push(Method::Nvcc);
        BenchConfig {
            sizes: vec![20, 60, 100, 140, 180, 220, 260, 300],
            runs: 3,
            generations: 2,
            methods,
            nvcc_samples: 1,
            ..BenchConfig::quick(out)
        }
    }
}

const TWO: NonZeroUsize = NonZeroUsize::MIN.saturating_add(1);

/// One measured compile of one sample by one method: one line of `bench.csv`, whose columns are
/// these fields, in this order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Problem name.
    pub problem: String,
    /// Population size asked for.
    pub size: usize,
    /// Seeded run.
    pub run: usize,
    /// Generation of that run.
    pub generation: usize,
    /// Method name.
    pub method: String,
    /// Extra options (space separated): NVRTC's, then for the PTX route nvJitLink's.
    pub flags: String,
    /// How the units became CUBIN (`nvrtc` in files written before routes were compared).
    #[serde(default)]
    pub route: Route,
    /// Individuals compiled (the valid ones).
    pub individuals: usize,
    /// Translation units.
    pub units: usize,
    /// Units that produced a CUBIN.
    pub ok_units: usize,
    /// Wall time of the call.
    #[serde(serialize_with = "ms3")]
    pub wall_ms: f64,
    /// Wall time per individual.
    #[serde(serialize_with = "ms4")]
    pub ms_per_individual: f64,
    /// NVRTC (or nvcc process) time summed over units.
    #[serde(serialize_with = "ms3")]
    pub compile_ms: f64,
    /// Driver JIT time summed over units.
    #[serde(serialize_with = "ms3")]
    pub jit_ms: f64,
    /// The busiest worker's time.
    #[serde(serialize_with = "ms3")]
    pub busiest_ms: f64,
    /// Wall time not spent by the busiest worker compiling: partitioning, shared-memory copies,
    /// signalling, waiting, decoding (farm), thread start-up (threads).
    #[serde(serialize_with = "ms3")]
    pub overhead_ms: f64,
    /// Farm: writing requests; reading responses.
    #[serde(serialize_with = "ms3")]
    pub write_ms: f64,
    /// Farm: reading responses.
    #[serde(serialize_with = "ms3")]
    pub read_ms: f64,
    /// The PTX route's nvJitLink options (space separated; empty for NVRTC, and in files written
    /// before option sets were compared).
    #[serde(default)]
    pub link_flags: String,
    /// How the units held their individuals (`kernels` in files written before shapes were
    /// compared).
    #[serde(default)]
    pub shape: Shape,
    /// How the individuals were put into units: `fixed` (units of `--per-unit`, balanced
    /// contiguous parts per worker; also files written before this column) or `guided:W` (the
    /// engine's units for W workers, each taken by the next free worker).
    #[serde(default = "fixed")]
    pub partition: String,
}

fn fixed() -> String {
    "fixed".into()
}

impl Row {
    /// The method as tables and plots name it: the compiler, then ` ptx` and the nvJitLink
    /// options for the PTX route, then ` switch` for switch-kernel units, then the partition
    /// unless it is the paper's fixed units.
    pub fn label(&self) -> String {
        let mut label = self.method.clone();
        if self.route == Route::Ptx {
            label.push_str(" ptx");
            if !self.link_flags.is_empty() {
                label.push(' ');
                label.push_str(&self.link_flags);
            }
        }
        if self.shape == Shape::Switch {
            label.push_str(" switch");
        }
        if self.partition != "fixed" {
            label.push(' ');
            label.push_str(&self.partition);
        }
        label
    }
}

/// Milliseconds to three places, as `bench.csv` has always held them: timings are taken in
/// microseconds, so further digits are noise. (`n / 1000` of an integer `n` is the double nearest
/// the decimal, which prints as exactly that decimal.)
fn ms3<S: serde::Serializer>(ms: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((ms * 1e3).round() / 1e3)
}

/// Milliseconds to four places, for a time per individual.
fn ms4<S: serde::Serializer>(ms: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((ms * 1e4).round() / 1e4)
}

/// Runs every method over every sample; `progress` hears one line per method.
pub fn run(config: &BenchConfig, mut progress: impl FnMut(&str)) -> Result<Vec<Row>> {
    let samples = sample::populations(config)?;
    progress(&format!(
        "{} samples, {} individuals, {} units",
        samples.len(),
        samples.iter().map(|s| s.individuals).sum::<usize>(),
        samples.iter().map(Sample::unit_count).sum::<usize>()
    ));
    let mut rows = Vec::new();
    let build = BuildConfig { cuda: config.cuda.clone(), ..BuildConfig::default() };
    for method in &config.methods {
        let base = CompileOptions {
            arch: config.arch,
            mode: method.mode(),
            flags: config.flags.clone(),
            link_flags: Vec::new(),
        };
        let mut compiler = match method.build(&base, &build) {
            Ok(c) => c,
            Err(e) => {
                progress(&format!("{method}: skipped ({:#})", anyhow::Error::new(e)));
                continue;
            }
        };
        for &route in &config.routes {
            if route == Route::Ptx && (*method == Method::Nvcc || base.mode == CompileMode::PtxJit) {
                continue;
            }
            let sets: Vec<Vec<String>> = match route.language() {
                Some(Language::Ptx) => config.link_flag_sets.clone(),
                _ => vec![Vec::new()],
            };
            for link_flags in sets {
                let options = CompileOptions { link_flags, ..base.clone() };
                for &shape in &config.shapes {
                    let what = format!("{method} {route} {shape} {}", options.link_flags.join(" "));
                    let started = Instant::now();
                    // One compile of each problem's first sample before measuring, so no method is
                    // timed cold. For the PTX route this also compiles the math library where a
                    // problem's units call it (Search's and multiplier5's do not).
                    // A configuration whose units do not compile (an option nvJitLink refuses, say)
                    // is left out, saying why, rather than timed as if it had worked.
                    let mut warm_problems = std::collections::HashSet::new();
                    let mut refused = None;
                    for first in samples.iter().filter(|s| warm_problems.insert(s.problem.clone())) {
                        let warm = compiler
                            .compile(first.units(route, shape), &options)
                            .with_context(|| format!("{what}: warm-up"))?;
                        if let Some((r, u)) = warm
                            .results
                            .iter()
                            .zip(first.units(route, shape))
                            .find(|(r, _)| r.cubin().is_none())
                        {
                            let why = match &r.outcome {
                                UnitOutcome::Failed(f) => f.to_string(),
                                UnitOutcome::Cubin(_) => String::new(),
                            };
                            refused = Some(format!("unit {} did not compile: {why}", u.name));
                            break;
                        }
                    }
                    // Each worker compiles the math library on its first unit that calls it: give
                    // every worker one such unit, whatever the partition put where.
                    let calling = samples.iter().flat_map(|s| s.units(route, shape)).find(|u| {
                        route == Route::Ptx && gpfarm_toolchain::compile::declares_extern(&u.source)
                    });
                    if let (None, Some(unit)) = (&refused, calling) {
                        let copies = vec![unit.clone(); compiler.workers()];
                        compiler.compile(&copies, &options).with_context(|| format!("{what}: warm-up"))?;
                    }
                    if let Some(why) = refused {
                        progress(&format!("{}: skipped, {why}", what.trim_end()));
                        continue;
                    }
                    let mut per_key = std::collections::HashMap::new();
                    for s in &samples {
                        if *method == Method::Nvcc {
                            let n = per_key.entry((s.problem.clone(), s.size)).or_insert(0usize);
                            if *n >= config.nvcc_samples {
                                continue;
                            }
                            *n += 1;
                        }
                        rows.push(measure(
                            compiler.as_mut(),
                            s,
                            method,
                            route,
                            shape,
                            &options,
                            config.guided,
                        )?);
                    }
                    progress(&format!(
                        "{}: done in {:.1} s",
                        what.trim_end(),
                        started.elapsed().as_secs_f64()
                    ));
                    // Written after every method, so an interrupted run keeps what it measured.
                    report::write_csv(&rows, &config.out.join("bench.csv"))?;
                }
            }
        }
    }
    Ok(rows)
}

#[allow(clippy::too_many_arguments)]
fn measure(
    compiler: &mut dyn Compiler,
    s: &Sample,
    method: &Method,
    route: Route,
    shape: Shape,
    options: &CompileOptions,
    guided: Option<usize>,
) -> Result<Row> {
    let units = s.units(route, shape);
    let batch = match guided {
        None => compiler.compile(units, options)?,
        Some(_) => queued(compiler, units, options)?,
    };
    let ms = |us: u64| us as f64 / 1000.0;
    let wall_ms = ms(batch.stats.wall_us);
    let busiest_ms = ms(batch.stats.critical_busy_us());
    Ok(Row {
        problem: s.problem.clone(),
        size: s.size,
        run: s.run,
        generation: s.generation,
        method: method.to_string(),
        flags: match route.language() {
            Some(Language::Ptx) => {
                options.flags.iter().chain(&options.link_flags).cloned().collect::<Vec<_>>().join(" ")
            }
            _ => options.flags.join(" "),
        },
        route,
        individuals: s.individuals,
        units: units.len(),
        ok_units: batch.results.iter().filter(|r| r.cubin().is_some()).count(),
        wall_ms,
        ms_per_individual: wall_ms / s.individuals.max(1) as f64,
        compile_ms: ms(batch.results.iter().map(|r| r.timings.compile_us + r.timings.extract_us).sum()),
        jit_ms: ms(batch.results.iter().map(|r| r.timings.jit_us).sum()),
        busiest_ms,
        overhead_ms: (wall_ms - busiest_ms).max(0.0),
        write_ms: ms(batch.stats.write_us),
        read_ms: ms(batch.stats.read_us),
        link_flags: match route.language() {
            Some(Language::Ptx) => options.link_flags.join(" "),
            _ => String::new(),
        },
        shape,
        partition: guided.map_or_else(fixed, |w| format!("guided:{w}")),
    })
}

/// Compiles `units` as the engine does: each its own job, in order, taken by the next free
/// worker ([`Compiler::serve`]). One result per unit, in input order.
fn queued(compiler: &mut dyn Compiler, units: &[Unit], options: &CompileOptions) -> Result<Batch> {
    let start = Instant::now();
    let (mut submitter, work) = job_queue();
    for (k, unit) in units.iter().enumerate() {
        submitter.submit(Job { id: k as u64, units: vec![unit.clone()] });
    }
    submitter.close();
    let mut stats = compiler.serve(options, work)?;
    let mut results: Vec<Option<UnitResult>> = vec![None; units.len()];
    for finished in submitter.finished().try_iter() {
        if let Some(r) = finished.results.into_iter().next() {
            results[finished.id as usize] = Some(r);
        }
    }
    stats.wall_us = start.elapsed().as_micros() as u64;
    let results = results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| UnitResult::failed(FailureKind::Lost, "no worker returned it")))
        .collect();
    Ok(Batch { results, stats })
}
