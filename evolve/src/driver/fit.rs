//! Fitting the free parameters (`p[k]`) of newly bred individuals before they are admitted:
//! Levenberg–Marquardt on the CPU reference evaluator's forward-mode derivatives
//! ([`gpfarm_gp::fit`]), one individual per task on a pool of threads. Each individual then goes on
//! with its values: on the compiled routes as its kernel's argument (a structure compiles once,
//! see [`super::structures`]), on the others written into its phenotype when it is admitted
//! ([`gpfarm_gp::program::instantiate`]); every route evaluates exactly the values fitted, and
//! caching keys it by them. Must never let the
//! thread count or the order of work change a value: whether an individual is fitted is drawn
//! from the run's seed, its generation and its slot; the fit itself is a pure function of the
//! problem, the run's seed, the phenotype and the starting values, so an individual identical to
//! one fitted before, or to another of its generation, takes that one's values without fitting
//! again ([`plan_fits`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpfarm_client::CompileOptions;
use gpfarm_gp::{Born, FitConfig, FitSettings, Problem, Program, fit, moved_start};
use gpfarm_kernels::gpu::WireFit;
use gpfarm_kernels::interpreter::{
    FIT_PARAMS, Op, assemble_structure, fit_compiles, fits_on_gpu, fits_small, walk,
};
use gpfarm_protocol::Route;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::Driver;
use super::evaluate::Evaluator;
use super::fit_code::{FitCode, structure_key};
use crate::error::EvolveError;
use crate::route::{FitCosts, FitKernels, fit_compiled_pays};

/// The most cases the CPU fits a program on while the GPU fits the others (the programs its
/// fitting kernel cannot take); fewer where the run's `--fit-cases` says so.
pub const CPU_BESIDE_GPU_CASES: usize = 4096;

/// Fits remembered (their values, or that the fit moved nothing) before the memo starts again.
const FIT_MEMO_CAPACITY: usize = 200_000;

/// The times of a fit's phases, written to stderr where `GPFARM_FIT_PROFILE` is set
/// ([`gpfarm_kernels::gpu::fit_profiling`]; a diagnostic).
struct Phases {
    on: bool,
    last: Instant,
    times: Vec<(&'static str, Duration)>,
}

impl Phases {
    fn new() -> Phases {
        Phases { on: gpfarm_kernels::gpu::fit_profiling(), last: Instant::now(), times: Vec::new() }
    }

    /// Ends the phase `name` (begun at the last mark).
    fn mark(&mut self, name: &'static str) {
        if self.on {
            let now = Instant::now();
            self.times.push((name, now - self.last));
            self.last = now;
        }
    }

    /// Writes the phases' times under `what`.
    fn show(&self, what: &str) {
        if self.on {
            let times: Vec<String> =
                self.times.iter().map(|(n, t)| format!("{n} {:.3}", t.as_secs_f64() * 1e3)).collect();
            eprintln!("gpfarm fit profile: {what} (ms): {}", times.join(", "));
        }
    }
}

/// The key of a fit: the run's seed, the phenotype and the starting values' bits.
fn fit_key(seed: u64, b: &Born) -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    h.update(&(b.phenotype.as_str().len() as u64).to_le_bytes());
    h.update(b.phenotype.as_str().as_bytes());
    for v in &b.params {
        h.update(&v.to_bits().to_le_bytes());
    }
    h.finalize()
}

/// What each individual bred needs: nothing, a fit, or the values of an identical one's fit.
struct FitPlan {
    /// The individuals to fit (indices into the generation bred), each with its [`fit_key`].
    todo: Vec<(usize, blake3::Hash)>,
    /// Individuals identical to one in `todo` (breeding and initialisation make many): fitted
    /// once, they take its values.
    repeats: Vec<(usize, blake3::Hash)>,
    /// Per individual, the values an identical one's fit in an earlier generation gave (`Some`;
    /// inside, `None` where that fit moved nothing).
    known: Vec<Option<Option<Vec<f32>>>>,
}

/// Plans the fits of `born` under `config` in a run of seed `seed`, with the fits remembered
/// from earlier generations in `memo`: each individual with parameters is fitted with probability
/// `config.share`, drawn from the seed, its generation and its slot. The draws and keys are
/// computed on `pool` where there is one (each individual's its own: the same plan).
fn plan_fits(
    born: &[Born],
    config: &FitConfig,
    seed: u64,
    memo: &std::collections::HashMap<blake3::Hash, Option<Vec<f32>>>,
    pool: Option<&rayon::ThreadPool>,
) -> FitPlan {
    let mut plan = FitPlan { todo: Vec::new(), repeats: Vec::new(), known: vec![None; born.len()] };
    let mut queued: std::collections::HashSet<blake3::Hash> = std::collections::HashSet::new();
    // Per individual, its fit's key where it is to be fitted.
    let drawn = |b: &Born| -> Option<blake3::Hash> {
        if b.params.is_empty() || config.iterations == 0 {
            return None;
        }
        let mut draw = ChaCha8Rng::seed_from_u64(
            seed ^ (b.generation as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ (b.slot as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F),
        );
        draw.random_bool(config.share).then(|| fit_key(seed, b))
    };
    let keys: Vec<Option<blake3::Hash>> = match pool {
        Some(pool) => pool.install(|| born.par_iter().map(drawn).collect()),
        None => born.iter().map(drawn).collect(),
    };
    for (k, key) in keys.into_iter().enumerate() {
        let Some(key) = key else { continue };
        match memo.get(&key) {
            Some(values) => plan.known[k] = Some(values.clone()),
            None if !queued.insert(key) => plan.repeats.push((k, key)),
            None => plan.todo.push((k, key)),
        }
    }
    plan
}

impl Driver<'_> {
    /// Fits the parameters of those of `born` the run's [`gpfarm_gp::FitConfig`] selects and
    /// records the values with the pipeline and in each individual; admitting writes them into
    /// the phenotypes of the routes that run them written in.
    pub(super) fn fit(&mut self, mut born: Vec<Born>) -> Result<Vec<Born>, EvolveError> {
        if born.iter().all(|b| b.params.is_empty()) {
            return Ok(born);
        }
        let started = Instant::now();
        let mut phases = Phases::new();
        // No pool (no threads could be started): fit on this thread.
        let pool = self.pool();
        let config = self.pipeline.config().fit;
        let seed = self.pipeline.config().seed;
        let settings = FitSettings { iterations: config.iterations, restarts: config.restarts };
        // Beside the GPU, the CPU fits the programs its fitting kernel cannot take, on at most
        // CPU_BESIDE_GPU_CASES cases.
        let cases = match (config.cases, self.gpu_fit) {
            (0, true) => CPU_BESIDE_GPU_CASES,
            (n, true) => n.min(CPU_BESIDE_GPU_CASES),
            (n, false) => n,
        };
        let all = self.problem.cases().len();
        let want = if cases == 0 { all } else { cases.min(all) };
        if self.fit_problem.as_ref().is_none_or(|p| p.cases().len() != want) {
            self.fit_problem = Some(self.problem.strided(cases));
        }
        let problem = self.fit_problem.as_ref().expect("set above");
        let FitPlan { todo, repeats, mut known } =
            plan_fits(&born, &config, seed, &self.fit_memo, pool.as_deref());
        phases.mark("plan");
        let todo_len = todo.len();
        let one = |&(k, key): &(usize, blake3::Hash)| -> Option<Vec<f32>> {
            let b = &born[k];
            let fit_seed = u64::from_le_bytes(key.as_bytes()[..8].try_into().expect("8 bytes"));
            let parsed;
            let program = match &b.program {
                Some(p) => p.as_ref(),
                None => {
                    parsed = Program::parse(problem, &b.phenotype).ok()?;
                    &parsed
                }
            };
            let fitted = fit(problem, program, &b.params, &settings, fit_seed)?;
            (fitted.params != b.params).then_some(fitted.params)
        };
        // The GPU fits what its fitting kernel can; the CPU the rest.
        let mut fitted: Vec<Option<Option<Vec<f32>>>> = vec![None; todo.len()];
        let mut gpu_took = Duration::ZERO;
        let mut worker_took = Duration::ZERO;
        let mut by_code = vec![false; todo.len()];
        let mut node_evals = vec![0u64; todo.len()];
        let mut compile_took = Duration::ZERO;
        if self.gpu_fit {
            let t = Instant::now();
            let compiled = Compiled {
                kernels: self.settings.fit_kernels,
                ptx: self.settings.route == Route::Ptx,
                store: &mut self.fit_code,
                options: self.options,
                toolchain: &self.fit_toolchain,
            };
            let outcome = gpu_fit(
                self.problem,
                &mut self.evaluator,
                Batch { born: &born, todo: &todo, pool: pool.as_deref() },
                &config,
                compiled,
                &mut worker_took,
            );
            // Compiling fitting kernels is counted apart from the GPU's fitting.
            gpu_took = t.elapsed();
            match outcome {
                Ok((done, code, compile, evals)) => {
                    fitted = done;
                    by_code = code;
                    compile_took = compile;
                    node_evals = evals;
                }
                Err(e) => {
                    tracing::warn!("fitting on the GPU failed ({e}); the CPU fits from now on");
                    self.gpu_fit = false;
                }
            }
        }
        phases.mark("gpu");
        let by_gpu: Vec<bool> = fitted.iter().map(Option::is_some).collect();
        let rest: Vec<usize> = (0..todo.len()).filter(|&i| fitted[i].is_none()).collect();
        let on_cpu: Vec<Option<Vec<f32>>> = match &pool {
            Some(pool) => pool.install(|| rest.par_iter().map(|&i| one(&todo[i])).collect()),
            None => rest.iter().map(|&i| one(&todo[i])).collect(),
        };
        for (i, values) in rest.into_iter().zip(on_cpu) {
            fitted[i] = Some(values);
        }
        phases.mark("cpu");
        let fitted: Vec<Option<Vec<f32>>> = fitted.into_iter().map(Option::flatten).collect();
        if self.fit_memo.len() + todo.len() > FIT_MEMO_CAPACITY {
            self.fit_memo.clear();
        }
        for (((((k, key), values), gpu), code), evals) in
            todo.into_iter().zip(fitted).zip(by_gpu).zip(by_code).zip(node_evals)
        {
            if gpu {
                self.account(born[k].generation).fitted_on_gpu += 1;
                self.account(born[k].generation).fit_node_evals += evals;
            }
            if code {
                self.account(born[k].generation).fitted_compiled += 1;
            }
            self.fit_memo.insert(key, values.clone());
            known[k] = Some(values);
        }
        for (k, key) in repeats {
            known[k] = self.fit_memo.get(&key).cloned();
        }
        for (b, fitted) in born.iter_mut().zip(known) {
            if let Some(Some(params)) = fitted {
                self.pipeline.set_fitted(b.generation, b.slot, params.clone())?;
                b.params = params;
                self.account(b.generation).fitted += 1;
            }
        }
        phases.mark("record");
        phases.show(&format!("{} fitted of {}", todo_len, born.len()));
        if let Some(b) = born.first() {
            let a = self.account(b.generation);
            a.fit_gpu += gpu_took.saturating_sub(compile_took);
            a.fit_worker += worker_took;
            a.fit_compile += compile_took;
        }
        let took = started.elapsed();
        let share = took / born.len().max(1) as u32;
        for b in &born {
            self.account(b.generation).fit += share;
        }
        self.totals.fit_s += took.as_secs_f64();
        Ok(born)
    }
}

/// Per individual, `None` where the CPU must fit it, else `Some` of its new values (`None` when
/// the fit moved nothing); per individual, whether compiled kernels fitted it; the time compiling
/// took.
type GpuFitted = (Vec<Option<Option<Vec<f32>>>>, Vec<bool>, Duration, Vec<u64>);

/// What the GPU's fit needs to fit programs by compiled kernels: the run's choice, the store of
/// compiled units, and how the run compiles.
struct Compiled<'a> {
    kernels: FitKernels,
    /// Whether the run takes the PTX route, whose own code fits (PTX linked with a template).
    ptx: bool,
    store: &'a mut FitCode,
    options: &'a CompileOptions,
    toolchain: &'a str,
}

/// The individuals a GPU fit is asked for: `todo` (indices into `born`, with their fit keys), and
/// the threads that ready their programs (`pool`; none: this thread).
struct Batch<'a> {
    born: &'a [Born],
    todo: &'a [(usize, blake3::Hash)],
    pool: Option<&'a rayon::ThreadPool>,
}

/// Levenberg–Marquardt on the GPU for the individuals of `batch` whose programs a fitting kernel
/// takes: each start is a [`gpfarm_gp::LmStart`], as on the CPU, run in the GPU worker (one
/// request for all iterations,
/// `gpfarm_kernels::gpu::GpuEvaluator::fit`, its small solves on the GPU too), every start of
/// every program in the same rounds of launches (a trial's plain run, then its run with
/// derivatives where it is lower and the start goes on), by the interpreter's fitting kernels
/// or, where `compiled` says so ([`fit_compiled_pays`]), by kernels compiled for the programs'
/// structures. Returns, per
/// individual, `None` where the CPU must fit it, else `Some` of its new values (`None` when the
/// fit moved nothing); how many individuals compiled kernels fitted, and the time compiling
/// took. The sums are the GPU's (outputs the interpreter's, derivatives floats), on the run's
/// fitting cases (`--fit-cases` evenly spaced ones, or all).
fn gpu_fit(
    problem: &Problem,
    evaluator: &mut Evaluator,
    batch: Batch<'_>,
    config: &FitConfig,
    compiled: Compiled<'_>,
    kernel_time: &mut Duration,
) -> Result<GpuFitted, EvolveError> {
    let Batch { born, todo, pool } = batch;
    let mut phases = Phases::new();
    let mut out: Vec<Option<Option<Vec<f32>>>> = vec![None; todo.len()];
    let nothing = |out| Ok((out, vec![false; todo.len()], Duration::ZERO, vec![0; todo.len()]));
    let Some(worker) = evaluator.worker() else { return nothing(out) };
    let max_steps = problem.max_steps();
    let cases =
        if config.cases == 0 { problem.cases().len() } else { config.cases.min(problem.cases().len()) };
    // A start's launches, estimated: the first and one per iteration (a trial runs plain, and
    // again where it is lower and the start goes on: on Friedman-1 about as many in all, some
    // 7 trials a start, about half of them lower).
    let launches = (config.iterations + 1) * (config.restarts + 1);
    // Every start's program and values, then their sums there.
    let mut begin: Vec<(usize, Arc<Vec<u32>>, Vec<f32>)> = Vec::new();
    // Programs to fit by compiled kernels: their structure's key, words and parameter count.
    let mut to_compile: Vec<(blake3::Hash, Arc<Vec<u32>>, usize)> = Vec::new();
    let mut wants_code: Vec<Option<usize>> = Vec::new();
    // Whether each start's program runs in its width's small-stack kernel.
    let mut smalls: Vec<bool> = Vec::new();
    // Whether compiled kernels may fit programs: then each program's structure is keyed.
    let keyed = !matches!(compiled.kernels, FitKernels::Interpreter) && compiled.store.usable();
    // Each program's bytecode, where a fitting kernel takes it, whether it runs in its width's
    // small-stack kernel, its structure's key where compiled kernels may fit it, and its ops (for
    // the count of node-evaluations); on the pool, each its own.
    type Assembled = (Arc<Vec<u32>>, bool, Option<blake3::Hash>, u64);
    let assemble = |&(k, _): &(usize, blake3::Hash)| -> Option<Assembled> {
        let b = &born[k];
        if b.params.len() > FIT_PARAMS {
            return None;
        }
        // Breeding's tree where it has one (the same parse), else parsed here.
        let parsed;
        let program = match &b.program {
            Some(p) => p.as_ref(),
            None => {
                parsed = Program::parse(problem, &b.phenotype).ok()?;
                &parsed
            }
        };
        let code = assemble_structure(problem, program).ok()?;
        if !fits_on_gpu(&code.words, b.params.len(), code.depth) {
            return None;
        }
        let small = fits_small(&code.words, b.params.len(), code.depth);
        let structure = keyed.then(|| structure_key(&code.words, b.params.len()));
        let ops = walk(&code.words).take_while(|op| *op != Some(Op::End)).count() as u64;
        Some((Arc::new(code.words), small, structure, ops))
    };
    let mut program_ops = vec![0u64; todo.len()];
    let assembled: Vec<Option<Assembled>> = match pool {
        Some(pool) => pool.install(|| todo.par_iter().map(assemble).collect()),
        None => todo.iter().map(assemble).collect(),
    };
    phases.mark("assemble");
    for (i, (&(k, key), assembled)) in todo.iter().zip(assembled).enumerate() {
        let b = &born[k];
        let Some((code, small, structure, ops)) = assembled else { continue };
        program_ops[i] = ops;
        let compile = match (compiled.kernels, structure) {
            (_, None) | (FitKernels::Interpreter, _) => false,
            (FitKernels::Compiled, _) => fit_compiles(&code, b.params.len()),
            // The cost model first: it costs less than going through the program.
            (FitKernels::Auto, Some(key)) => {
                (compiled.store.known(&key)
                    || fit_compiled_pays(
                        if compiled.ptx { &FitCosts::H100_PTX } else { &FitCosts::H100 },
                        code.len(),
                        cases,
                        launches,
                    ))
                    && fit_compiles(&code, b.params.len())
            }
        };
        let mut rng =
            ChaCha8Rng::seed_from_u64(u64::from_le_bytes(key.as_bytes()[..8].try_into().expect("8 bytes")));
        for restart in 0..=config.restarts {
            let values = if restart == 0 { b.params.clone() } else { moved_start(&b.params, &mut rng) };
            begin.push((i, code.clone(), values));
            smalls.push(small);
            wants_code.push(compile.then_some(to_compile.len()));
        }
        if let (true, Some(key)) = (compile, structure) {
            to_compile.push((key, code.clone(), b.params.len()));
        }
        out[i] = Some(None);
    }
    if begin.is_empty() {
        return nothing(out);
    }
    phases.mark("programs");
    // The compiled units this fit uses, each once, by their index in the request.
    let programs: Vec<(blake3::Hash, &[u32], usize)> =
        to_compile.iter().map(|(key, words, np)| (*key, words.as_slice(), *np)).collect();
    let (code, compile_took) = if programs.is_empty() {
        (Vec::new(), Duration::ZERO)
    } else {
        compiled.store.code_for(problem, compiled.options, compiled.toolchain, &programs, compiled.ptx)
    };
    let mut units: Vec<u64> = Vec::new();
    let mut cubins: Vec<Vec<u8>> = Vec::new();
    let mut fit = WireFit::new(max_steps);
    let mut by_code = vec![false; todo.len()];
    for (((item, words, values), wants), &small) in begin.iter().zip(&wants_code).zip(&smalls) {
        let at = wants.and_then(|j| code[j]).and_then(|(unit, member)| {
            let index = match units.iter().position(|&u| u == unit) {
                Some(index) => index,
                None => {
                    cubins.push(compiled.store.cubin(unit)?.as_ref().clone());
                    units.push(unit);
                    units.len() - 1
                }
            };
            Some((index as u32, member))
        });
        by_code[*item] |= at.is_some();
        fit.push_with(words, values, small, at);
    }
    phases.mark("request");
    let fitted = match worker.fit(&fit, config.iterations, &cubins) {
        Err(e) if !cubins.is_empty() => {
            // A unit the worker could not load or run: the interpreter's kernels fit everything,
            // from now on.
            tracing::warn!(
                "compiled fitting kernels failed on the GPU ({e}); the interpreter's fit from now on"
            );
            compiled.store.give_up();
            by_code.iter_mut().for_each(|c| *c = false);
            let mut plain = WireFit::new(max_steps);
            for ((_, words, values), &small) in begin.iter().zip(&smalls) {
                plain.push_with(words, values, small, None);
            }
            fit = plain;
            worker.fit(&fit, config.iterations, &[])?
        }
        other => other?,
    };
    phases.mark("worker");
    let gpfarm_kernels::gpu::Fitted { params, sse, first_sse, launches, took_us } = fitted;
    *kernel_time += Duration::from_micros(took_us);
    if sse.len() != begin.len() || first_sse.len() != begin.len() || params.len() != fit.params.len() {
        return Err(EvolveError::Gpu(gpfarm_kernels::gpu::GpuError::Problem(format!(
            "the GPU worker fitted {} starts of {}",
            sse.len(),
            begin.len()
        ))));
    }
    // Node-evaluations per individual: each start's ops × cases × the launches that ran it.
    let mut node_evals = vec![0u64; todo.len()];
    for (j, (item, _, _)) in begin.iter().enumerate() {
        node_evals[*item] +=
            program_ops[*item] * cases as u64 * u64::from(launches.get(j).copied().unwrap_or(0));
    }
    // Where each individual began (its first start, from its own values): a fit must beat it.
    let mut began: Vec<f64> = vec![f64::INFINITY; todo.len()];
    for (j, (item, _, _)) in begin.iter().enumerate().rev() {
        began[*item] = first_sse[j];
    }
    // Per individual, its best start, if it beats where the individual began.
    let mut best: Vec<Option<usize>> = vec![None; todo.len()];
    for (j, (item, _, _)) in begin.iter().enumerate() {
        if sse[j] < began[*item] && best[*item].is_none_or(|b| sse[j] < sse[b]) {
            best[*item] = Some(j);
        }
    }
    for (i, b) in best.into_iter().enumerate() {
        if let Some(j) = b {
            let at = fit.param_offsets[j] as usize;
            out[i] = Some(Some(params[at..at + begin[j].2.len()].to_vec()));
        }
    }
    phases.mark("results");
    phases.show(&format!(
        "GPU fit of {} starts, the worker's own {:.3} ms",
        begin.len(),
        took_us as f64 / 1e3
    ));
    Ok((out, by_code, compile_took, node_evals))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpfarm_gp::Phenotype;

    fn born(slot: usize, text: &str, params: &[f32]) -> Born {
        Born { generation: 3, slot, phenotype: Phenotype::new(text), params: params.to_vec(), program: None }
    }

    #[test]
    fn identical_individuals_are_fitted_once_and_remembered_ones_not_again() {
        let config = FitConfig::default();
        let generation = vec![
            born(0, "p[0] * x1 + p[1]", &[1.0, 2.0]),
            born(1, "p[0] * x1 + p[1]", &[1.0, 2.0]),
            born(2, "p[0] * x1 + p[1]", &[1.0, 2.5]),
            born(3, "x1", &[]),
            born(4, "p[0] * x2", &[0.5]),
            born(5, "p[0] * x1 + p[1]", &[1.0, 2.0]),
        ];
        let mut memo = std::collections::HashMap::new();
        memo.insert(fit_key(7, &generation[4]), Some(vec![0.25f32]));
        let plan = plan_fits(&generation, &config, 7, &memo, None);
        let slots = |v: &[(usize, blake3::Hash)]| v.iter().map(|(k, _)| *k).collect::<Vec<_>>();
        // Planned on threads, the same plan.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let threaded = plan_fits(&generation, &FitConfig { share: 0.5, ..config }, 7, &memo, Some(&pool));
        let alone = plan_fits(&generation, &FitConfig { share: 0.5, ..config }, 7, &memo, None);
        assert_eq!(
            (&threaded.todo, &threaded.repeats, &threaded.known),
            (&alone.todo, &alone.repeats, &alone.known)
        );
        assert_eq!(slots(&plan.todo), vec![0, 2]);
        assert_eq!(slots(&plan.repeats), vec![1, 5]);
        assert_eq!(plan.repeats[0].1, plan.todo[0].1, "a repeat takes the values of its twin's fit");
        assert_eq!(plan.known[4], Some(Some(vec![0.25])));
        assert!(plan.known.iter().enumerate().all(|(k, v)| v.is_some() == (k == 4)));
        // Another seed is another fit: nothing remembered applies.
        let other = plan_fits(&generation, &config, 8, &memo, None);
        assert_eq!(slots(&other.todo), vec![0, 2, 4]);
        // No share, no fits.
        let none = plan_fits(&generation, &FitConfig { share: 0.0, ..config }, 7, &memo, None);
        assert!(none.todo.is_empty() && none.repeats.is_empty() && none.known.iter().all(Option::is_none));
    }
}
