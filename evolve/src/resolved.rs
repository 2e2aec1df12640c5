//! Where a run's fitness is computed, settled once: the route asked for or chosen
//! ([`crate::route`]), whether a GPU evaluates, the architecture compiled for, the link level,
//! the unit shape and which compilers the run needs, in one value ([`Resolved`]) that the engine
//! makes when it is made and everything after reads: the planner ([`crate::plan`]) builds the
//! compilers it names, the driver forms the units it shapes, and the records report it.

use std::num::NonZeroUsize;

use gpfarm_gp::Problem;
use gpfarm_kernels::gpu;
use gpfarm_protocol::{Route, Shape, SmArch};

use crate::error::EvolveError;
use crate::options::{DEFAULT_SHAPE, EvalMode, Options, default_link_flags};
use crate::record::EvaluatorKind;

/// What a run compiles, and so which compilers it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: the CPU reference evaluator computes every fitness.
    Nothing,
    /// Kernels compiled once, in this process, this many at once: the GPU interpreter's (and,
    /// for programs with free parameters, its fitting kernels', one per width).
    Kernels(NonZeroUsize),
    /// Every individual: compile daemons (or the compiler asked for), warm for the whole run.
    Daemons,
}

/// A run's route, resolved: see the module's documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// How individuals get their fitness.
    pub route: Route,
    /// Why: "asked for", or the automatic choice's reason (and what became of it without a GPU).
    pub why: String,
    /// The GPU that evaluates, by name; `None`: the CPU does.
    pub gpu: Option<String>,
    /// One line a person should see before the run: why the GPU is not used under
    /// [`EvalMode::Auto`].
    pub notice: Option<String>,
    /// The architecture CUBIN is compiled for: the GPU's, else the one asked for, else `sm_90`.
    pub arch: SmArch,
    /// nvJitLink's options for the PTX route: the run's own, else the level its first generation
    /// calls for ([`crate::route::run_link_level`]), else the problem's default.
    pub link_flags: Vec<String>,
    /// How units hold their individuals.
    pub shape: Shape,
    /// What the run compiles.
    pub needs: Needs,
}

impl Resolved {
    /// Who computes fitness.
    pub fn evaluator(&self) -> EvaluatorKind {
        if self.gpu.is_some() { EvaluatorKind::Gpu } else { EvaluatorKind::Cpu }
    }
}

/// Resolves the route of a run of `problem` with `options`; `loadable`: a GPU worker process can
/// load the problem (a built-in, a directory or a problem held in memory), without which the
/// CPU evaluates. Refuses a route the problem cannot take, a shape its template cannot take when
/// asked for, and a GPU asked for where there is none.
pub fn resolve(problem: &Problem, options: &Options, loadable: bool) -> Result<Resolved, EvolveError> {
    let (gpu, notice) = choose_gpu(options.eval, options.route, loadable)?;
    let arch = options.arch.or(gpu.as_ref().map(|g| g.1)).unwrap_or(SmArch::SM_90);
    let (route, auto_link, why) = match options.route {
        Some(route) => (route, None, "asked for".to_owned()),
        None => crate::route::choose_linked(problem, &options.evolution),
    };
    // The PTX route asked for without link options links at the level its first generation
    // calls for.
    let auto_link = match (route, auto_link, options.link_flags.is_empty()) {
        (Route::Ptx, None, true) => Some(crate::route::run_link_level(problem, &options.evolution)),
        (_, level, _) => level,
    };
    // Without a GPU nothing runs the interpreter's kernel, nor CUBIN that auto chose to
    // compile: the CPU evaluates the programs, and nothing needs NVRTC or nvJitLink. A
    // compiled route asked for by name still compiles (its compile errors are fitness).
    let (route, why, auto_link) = match (route, &gpu, options.route) {
        (Route::Interpreter, None, _) | (Route::Nvrtc | Route::Ptx, None, None) => {
            (Route::Cpu, format!("{why}; no GPU evaluates, so the CPU reference evaluator does"), None)
        }
        _ => (route, why, auto_link),
    };
    if route == Route::Ptx {
        gpfarm_kernels::ptx_supported(problem)?;
    }
    if route == Route::Interpreter {
        gpfarm_kernels::interpreter::interp_supported(problem)?;
    }
    let mut shape = options.shape.unwrap_or(DEFAULT_SHAPE);
    if shape == Shape::Switch
        && route == Route::Nvrtc
        && let Err(why) = problem.template().switch_ready()
    {
        match options.shape {
            Some(_) => return Err(EvolveError::Shape { problem: problem.name().to_owned(), why }),
            // The default falls back to what every template supports.
            None => shape = Shape::Kernels,
        }
    }
    let link_flags = match (options.link_flags.is_empty(), auto_link) {
        (false, _) => options.link_flags.clone(),
        (true, Some(level)) => vec![level.flag().to_owned()],
        (true, None) => default_link_flags(problem),
    };
    let needs = match (route, &gpu) {
        (Route::Nvrtc | Route::Ptx, _) => Needs::Daemons,
        // The interpreter's one kernel, with the fitting kernels beside it (one unit per width),
        // on a thread each, at once.
        (Route::Interpreter, Some(_)) => {
            let fit = &options.evolution.fit;
            let fitting = problem.grammar().has_params() && fit.iterations > 0;
            let kernels = if fitting { 1 + gpfarm_kernels::interpreter::FIT_WIDTHS.len() } else { 1 };
            Needs::Kernels(NonZeroUsize::new(kernels).unwrap_or(NonZeroUsize::MIN))
        }
        (Route::Interpreter | Route::Cpu, _) => Needs::Nothing,
    };
    Ok(Resolved { route, why, gpu: gpu.map(|g| g.0), notice, arch, link_flags, shape, needs })
}

/// A GPU's name and architecture.
type Gpu = (String, SmArch);

/// The GPU to evaluate on, if `mode` asks for it and one is there, and the notice to show when
/// [`EvalMode::Auto`] goes without it.
fn choose_gpu(
    mode: EvalMode,
    route: Option<Route>,
    loadable: bool,
) -> Result<(Option<Gpu>, Option<String>), EvolveError> {
    if mode == EvalMode::Cpu || (route == Some(Route::Cpu) && mode == EvalMode::Auto) {
        return Ok((None, None));
    }
    let why = match gpu::probe() {
        Ok(_) if route == Some(Route::Cpu) => "the cpu route evaluates on the CPU".to_string(),
        Ok(_) if !loadable => "the problem was not loaded from a built-in name or a directory".to_string(),
        Ok((name, (major, minor))) => return Ok((Some((name, SmArch((major * 10 + minor) as u32))), None)),
        Err(e) => e.to_string(),
    };
    if mode == EvalMode::Gpu {
        return Err(EvolveError::NoGpu(why));
    }
    Ok((None, Some(format!("{why}; evaluating on the CPU (the reference evaluator)"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpfarm_gp::EvolutionConfig;

    fn options(route: Option<Route>, eval: EvalMode) -> Options {
        Options {
            evolution: EvolutionConfig { population: 40, generations: 1, ..EvolutionConfig::default() },
            route,
            eval,
            ..Options::default()
        }
    }

    #[test]
    fn the_cpu_route_compiles_nothing_and_a_named_compiled_route_compiles_on_the_cpu_too() {
        let problem = Problem::builtin("keijzer6").unwrap();
        let cpu = resolve(&problem, &options(Some(Route::Cpu), EvalMode::Auto), true).unwrap();
        assert_eq!((cpu.route, cpu.needs, cpu.evaluator()), (Route::Cpu, Needs::Nothing, EvaluatorKind::Cpu));
        assert_eq!((cpu.why.as_str(), cpu.notice.as_deref()), ("asked for", None));
        let ptx = resolve(&problem, &options(Some(Route::Ptx), EvalMode::Cpu), true).unwrap();
        assert_eq!((ptx.route, ptx.needs, ptx.arch), (Route::Ptx, Needs::Daemons, SmArch::SM_90));
        assert_eq!(ptx.link_flags.len(), 1, "{:?}", ptx.link_flags);
        let asked = Options { link_flags: vec!["-O2".into()], ..options(Some(Route::Ptx), EvalMode::Cpu) };
        assert_eq!(resolve(&problem, &asked, true).unwrap().link_flags, vec!["-O2".to_owned()]);
    }

    #[test]
    fn without_a_gpu_auto_and_the_interpreter_become_the_cpu_saying_why() {
        let problem = Problem::builtin("keijzer6").unwrap();
        for route in [None, Some(Route::Interpreter)] {
            let r = resolve(&problem, &options(route, EvalMode::Cpu), true).unwrap();
            assert_eq!((r.route, r.needs), (Route::Cpu, Needs::Nothing), "{route:?}");
            assert!(r.why.ends_with("so the CPU reference evaluator does"), "{}", r.why);
        }
    }
}
