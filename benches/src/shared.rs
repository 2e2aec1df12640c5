//! What the GPU benchmarks (the break-even, the parameter steps) share: their kernels compiled on
//! the farm, a population compiled into the engine's switch units, rows as CSV, medians.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use gpfarm_client::partition::UnitPlan;
use gpfarm_client::{CompileOptions, Compiler, Unit};
use gpfarm_gp::{Phenotype, Problem};
use gpfarm_kernels::gpu::CompiledUnit;
use gpfarm_kernels::unit::BatchUnit;
use gpfarm_protocol::{Route, Shape, SmArch};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The median (the upper one of an even count); NaN for none.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}

/// Compiles one kernel's CUDA C `src` (named `what`) on `farm`.
pub(crate) fn compile_kernel(
    farm: &mut dyn Compiler,
    src: String,
    what: &str,
    options: &CompileOptions,
) -> Result<Vec<u8>> {
    let b = farm.compile(&[Unit::new(what, src)], options)?;
    b.results[0]
        .cubin()
        .map(<[u8]>::to_vec)
        .ok_or_else(|| anyhow!("{what} does not compile: {}", b.results[0].log))
}

/// The options the GPU benchmarks compile with: CUBIN for `arch`, no contraction (so every
/// route computes the CPU evaluator's bits).
pub(crate) fn bench_options(arch: SmArch) -> CompileOptions {
    CompileOptions { flags: vec![gpfarm_evolve::NO_FMAD.into()], ..CompileOptions::cubin(arch) }
}

/// A GPU evaluator for `problem` with its fitness kernel and interpreter compiled on `farm`.
pub(crate) fn interpreting_evaluator(
    farm: &mut dyn Compiler,
    problem: &Problem,
    options: &CompileOptions,
) -> Result<gpfarm_kernels::gpu::GpuEvaluator> {
    use gpfarm_kernels::gpu::{self, GpuEvaluator, Kernels};
    let kernels = Kernels {
        fitness: Some(compile_kernel(farm, gpu::fitness_source(problem)?, "fitness.cu", options)?),
        interpreter: Some(compile_kernel(
            farm,
            gpfarm_kernels::interpreter::interpreter_source(problem)?,
            "interp.cu",
            options,
        )?),
        fit: Vec::new(),
    };
    Ok(GpuEvaluator::with_kernels(problem, &kernels)?)
}

/// A population compiled on `route` as the engine does (switch units planned for the farm's
/// workers, each taken by the next free one).
pub(crate) struct Compiled {
    /// The phenotypes in the units' order.
    pub ordered: Vec<Phenotype>,
    /// Each unit that compiled, with its CUBIN.
    pub built: Vec<(Vec<u8>, BatchUnit)>,
    /// The farm's wall time.
    pub compile_ms: f64,
}

impl Compiled {
    /// Compiles `phenotypes` of `problem` on `route` (`options`; the PTX route adds `link_flags`,
    /// or the engine's default where `None`).
    pub(crate) fn new(
        farm: &mut dyn Compiler,
        problem: &Problem,
        phenotypes: &[Phenotype],
        route: Route,
        arch: SmArch,
        options: &CompileOptions,
        link_flags: Option<&[String]>,
    ) -> Result<Compiled> {
        let language = crate::sample::compiled(route)?;
        let plan = UnitPlan::new(None, farm.workers(), gpfarm_kernels::unit::bounds(language));
        let (ordered, parts) = crate::sample::planned(problem, phenotypes, language, plan);
        let units =
            gpfarm_kernels::unit::render_batch(problem, language, Shape::Switch, arch, &ordered, 0, &parts)
                .units;
        let wire: Vec<Unit> = units.iter().map(|u| u.unit.clone()).collect();
        let options = match route {
            Route::Ptx => CompileOptions {
                link_flags: link_flags
                    .map_or_else(|| gpfarm_evolve::default_link_flags(problem), <[String]>::to_vec),
                ..options.clone()
            },
            _ => options.clone(),
        };
        let t = Instant::now();
        let batch = crate::queued(farm, &wire, &options)?;
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        let built =
            batch.results.iter().zip(units).filter_map(|(r, u)| r.cubin().map(|c| (c.to_vec(), u))).collect();
        Ok(Compiled { ordered, built, compile_ms })
    }

    /// The units as the evaluator takes them.
    pub(crate) fn views(&self) -> Vec<CompiledUnit<'_>> {
        self.built
            .iter()
            .map(|(c, u)| CompiledUnit { cubin: c, kernels: &u.kernels, members: &u.members })
            .collect()
    }
}

/// Writes `rows` as CSV.
pub(crate) fn write_rows<T: Serialize>(rows: &[T], path: &Path) -> Result<()> {
    let mut w = csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
    for r in rows {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}

/// Reads rows written by [`write_rows`].
pub(crate) fn read_rows<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    let mut r = csv::Reader::from_path(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(r.deserialize().collect::<Result<_, _>>()?)
}
