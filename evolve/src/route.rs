//! The automatic choice of route ([`crate::Options::route`] `None`): which way from a phenotype
//! to fitness finishes a generation first, predicted from the problem and the run's first
//! generation with costs calibrated by the break-even benchmark.
//!
//! It never looks at this machine (timings, core count, the GPU present), so a seeded run takes
//! the same route, and evolves the same, everywhere. On the GPU the three routes give the same
//! fitness bit for bit anyway (see [`gpfarm_kernels::interpreter`]); the choice changes only the time
//! a generation takes.
//!
//! A problem whose template is not the standard harness can only be compiled by NVRTC. For the
//! others the choice is between the interpreter and the PTX route (which compiles 3-6 times
//! faster than NVRTC and evaluates as fast), by [`predict`]: both grow with programs × cases ×
//! ops, the interpreter's 1.5 times as steeply, and the PTX route pays its compile per program.
//! The constants ([`Costs::H100`]) come from `gpfarm bench --break-even` on the H100 host with 16
//! daemons (`results/`): there one interpreter launch evaluates a generation before the
//! farm has compiled it up to some 10^7-10^8 cases, so auto interprets every problem measured.

use gpfarm_gp::{Evolution, EvolutionConfig, Problem, Program};

use gpfarm_protocol::Route;

/// Calibrated costs of one generation's evaluation by each route, linear in the programs'
/// ops: a route's cost per program, and per program and case, is `base + per_op * ops`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// Interpreter: each launch's fixed cost (upload, two launches, read-back), seconds.
    pub interp_fixed_s: f64,
    /// Interpreter: seconds per program and case (setting variables, the fitness term).
    pub interp_case_s: f64,
    /// Interpreter: seconds per op, program and case.
    pub interp_op_s: f64,
    /// PTX route: compiling and loading one program, seconds, on the reference farm.
    pub ptx_program_s: f64,
    /// PTX route: compiling and loading, seconds per op of a program.
    pub ptx_program_op_s: f64,
    /// PTX route: evaluating one program on one case (writing and reducing its output).
    pub ptx_case_s: f64,
    /// PTX route: evaluating, seconds per op, program and case.
    pub ptx_op_s: f64,
}

impl Costs {
    /// Fitted to `gpfarm bench --break-even` on the H100 host (16 cores, 16 daemons),
    /// 2026-11-23, tuned interpreter: regressions of 10^5 to 10^7 cases, programs of 6.9, 9.5
    /// and 27.6 ops (`results/2026-11-23-h100/interpreter-tuned/breakeven/`): the
    /// interpreter's generation, PTX's evaluation, and PTX's compile and load from 64 cases up.
    pub const H100: Costs = Costs {
        interp_fixed_s: 265e-6,
        interp_case_s: 2.4e-12,
        interp_op_s: 6.7e-13,
        ptx_program_s: 139e-6,
        ptx_program_op_s: 21.1e-6,
        ptx_case_s: 5.9e-12,
        ptx_op_s: 4.5e-13,
    };
}

/// A generation's predicted evaluation time by the interpreter and by the PTX route, in
/// seconds, for `programs` distinct programs of `mean_ops` ops over `cases` cases. Ops are
/// counted once: a loop's repeats make the interpreter slower than predicted.
pub fn predict(c: &Costs, programs: usize, mean_ops: f64, cases: usize) -> (f64, f64) {
    let (n, m, cases) = (programs as f64, mean_ops, cases as f64);
    let interp = c.interp_fixed_s + n * cases * (c.interp_case_s + m * c.interp_op_s);
    let ptx = n * (c.ptx_program_s + m * c.ptx_program_op_s) + n * cases * (c.ptx_case_s + m * c.ptx_op_s);
    (interp, ptx)
}

/// The route auto takes for `problem` under `config` (the run's GP parameters, which fix its
/// first generation), and why, in words for the run's header and records.
pub fn choose(problem: &Problem, config: &EvolutionConfig) -> (Route, String) {
    if let Err(e) = gpfarm_kernels::interpreter::interp_supported(problem) {
        return (Route::Nvrtc, format!("auto: {}; only NVRTC compiles its template", e.difference));
    }
    let (programs, mean_ops) = first_generation(problem, config);
    let cases = problem.cases().len();
    let (interp, ptx) = predict(&Costs::H100, programs, mean_ops, cases);
    let route = if interp <= ptx { Route::Interpreter } else { Route::Ptx };
    let why = format!(
        "auto: {programs} programs of {mean_ops:.1} ops over {cases} cases, predicted {:.2} ms interpreted, \
         {:.2} ms by PTX (H100 costs)",
        interp * 1e3,
        ptx * 1e3
    );
    (route, why)
}

/// Distinct programs of the run's first generation and their mean ops (bytecode). A program
/// the interpreter cannot take counts as one op, as the CPU evaluates it.
fn first_generation(problem: &Problem, config: &EvolutionConfig) -> (usize, f64) {
    let Ok(evolution) = Evolution::new(problem, config.clone()) else { return (0, 0.0) };
    let unique = evolution.dedup().unique;
    let ops: usize = unique
        .iter()
        .filter_map(|p| Program::parse(problem, p).ok())
        .map(|p| {
            gpfarm_kernels::interpreter::assemble(problem, &p)
                .map_or(1, |b| gpfarm_kernels::interpreter::walk(&b.words).count())
        })
        .sum();
    (unique.len(), ops as f64 / unique.len().max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpreter_wins_up_to_tens_of_millions_of_cases_and_ptx_beyond() {
        let c = Costs::H100;
        // keijzer6's first generation: 209 programs of 6.9 ops over 20 cases.
        let (i, p) = predict(&c, 209, 6.9, 20);
        assert!(i < p / 100.0, "{i} {p}");
        // 10^7 cases, as measured: the interpreter 38 ms, PTX 171 ms.
        let (i, p) = predict(&c, 189, 27.6, 10_000_000);
        assert!((0.035..0.06).contains(&i) && (0.1..0.2).contains(&p), "{i} {p}");
        // 2 x 10^8 cases of bloated programs: compiling pays.
        let (i, p) = predict(&c, 200, 100.0, 200_000_000);
        assert!(i > p, "{i} {p}");
    }

    #[test]
    fn auto_interprets_the_built_in_problems_and_says_why() {
        for name in Problem::builtin_names() {
            let problem = Problem::builtin(name).unwrap();
            let (route, why) = choose(&problem, &EvolutionConfig::default());
            assert_eq!(route, Route::Interpreter, "{name}: {why}");
            assert!(why.starts_with("auto: ") && why.contains("ms interpreted"), "{why}");
        }
    }
}
