//! The automatic choice of route ([`crate::Options::route`] `None`): which way from a phenotype
//! to fitness finishes a generation first, predicted from the problem and the options alone.
//!
//! Must never look at this machine (timings, core count, the GPU present): a seeded run must
//! evolve the same on every machine. On the GPU the three routes give the same fitness bit for
//! bit (see [`gpfarm_kernels::interp`]), so the choice changes only the time a generation takes;
//! deciding from the problem alone also keeps it the same on a machine without a GPU, where the
//! CPU evaluator scores every route.
//!
//! The rule comes from the break-even benchmark (`gpfarm bench --break-even`, results under
//! `benches/results/`): over the problems and case counts measured, one interpreter launch for
//! the whole population finished a generation before the farm had compiled it, so a problem the
//! interpreter can run is interpreted; a problem whose template is not the standard harness can
//! only be compiled, by NVRTC.

use gpfarm_gp::Problem;

use crate::options::EvalRoute;

/// The route auto takes for `problem`, and why, in words for the run's header and records.
pub fn choose(problem: &Problem) -> (EvalRoute, String) {
    match gpfarm_kernels::interp::interp_supported(problem) {
        Ok(()) => (
            EvalRoute::Interpreter,
            "auto: the problem's template is the standard harness, which the interpreter runs \
             without compiling any individual"
                .to_owned(),
        ),
        Err(e) => (EvalRoute::Nvrtc, format!("auto: {}; only NVRTC compiles its template", e.difference)),
    }
}
