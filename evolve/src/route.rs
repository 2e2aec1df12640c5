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
//!
//! Ops are the ops programs run, not the ops they hold: a program with loops is run on a few
//! of the problem's cases on the CPU, op for op as the GPU routes run it
//! ([`gpfarm_kernels::interpreter::exec::profile`]: a loop whose state repeats stops where they
//! stop it, a loop that runs on is counted to the step limit). A loop also makes a generation
//! wait for its longest case, which one GPU thread runs op after op: the interpreter about 16
//! times slower than compiled code, and, over at most a block's cases, one case per warp, so
//! up to `cases / 8` cases one after another ([`Costs::interp_serial_op_s`]). When some
//! program of the first generation fails (its loop repeats or runs to the step limit), the
//! grammar writes loops that do not end, and a later generation will likely hold one that runs
//! to the limit without repeating, which costs the interpreter some 16 times what it costs
//! compiled code: the longest case is then taken as such a loop's, though the interpreter may
//! finish the first generations first (docs/routes.md, "The measurements behind auto's costs",
//! gives the while-loop example's figures).
//! The constants ([`Costs::H100`]) are fitted to `gpfarm bench --break-even` on the reference
//! host: by them one interpreter launch evaluates a generation before the farm has compiled it
//! up to very large case counts, so auto interprets every problem measured (the same section
//! names the host, the workloads and the figures).

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
    /// Interpreter: seconds per program (its blocks, its reduction, its code's upload), what
    /// dominates populations of 10^5 and more over few cases.
    pub interp_program_s: f64,
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
    /// Interpreter, programs with loops: seconds per op, program and case.
    pub interp_loop_op_s: f64,
    /// Interpreter: seconds per op one thread runs after another (a loop's longest case).
    pub interp_serial_op_s: f64,
    /// PTX route, problems whose programs loop (linked at `-O3`): compiling and loading one
    /// program, seconds.
    pub ptx_loop_program_s: f64,
    /// PTX route: seconds per op one thread runs after another.
    pub ptx_serial_op_s: f64,
    /// PTX route at `-O0`: seconds per free parameter, program and case (a load from the values'
    /// array at each use; `-O3` code keeps the values in registers).
    pub ptx_o0_param_s: f64,
    /// PTX route at `-O0`: seconds per free parameter, program and evaluation beyond the cases'.
    pub ptx_o0_param_eval_s: f64,
    /// PTX route linked at `-O3` instead of `-O0`: seconds more of compiling and loading per
    /// program.
    pub ptx_o3_program_s: f64,
}

impl Costs {
    /// Fitted to `gpfarm bench --break-even` on the reference host, with the tuned interpreter:
    /// the interpreter's generation, PTX's evaluation, and PTX's compile and load. docs/routes.md
    /// ("The measurements behind auto's costs") names the host and the workloads of each group.
    pub const H100: Costs = Costs {
        interp_fixed_s: 265e-6,
        interp_case_s: 2.4e-12,
        // Fitted to `gpfarm bench --throughput`'s big populations: what the interpreter takes
        // per program beyond the per-case terms.
        interp_program_s: 150e-9,
        interp_op_s: 6.7e-13,
        ptx_program_s: 139e-6,
        ptx_program_op_s: 21.1e-6,
        ptx_case_s: 5.9e-12,
        ptx_op_s: 4.5e-13,
        // Fitted to the loop workloads of `gpfarm bench --break-even --loops`.
        interp_loop_op_s: 1.7e-12,
        interp_serial_op_s: 1.6e-7,
        ptx_loop_program_s: 2.0e-3,
        ptx_serial_op_s: 1.0e-8,
        // Fitted to `gpfarm bench --param-steps` with each link level: what `-O0`'s loads of
        // the free parameters' values cost beyond `-O3`'s code, per case and per evaluation,
        // and what compiling at `-O3` costs more per program.
        ptx_o0_param_s: 4.5e-12,
        ptx_o0_param_eval_s: 1.2e-7,
        ptx_o3_program_s: 1.0e-4,
    };
}

/// The optimisation level the PTX route's code is linked at (nvJitLink's `-O0` or `-O3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLevel {
    /// `-O0`: ptxas fast, its code slow.
    O0,
    /// `-O3`: ptxas slower, its code up to twice as fast.
    O3,
}

impl LinkLevel {
    /// nvJitLink's option for the level.
    pub fn flag(self) -> &'static str {
        match self {
            LinkLevel::O0 => "-O0",
            LinkLevel::O3 => "-O3",
        }
    }
}

/// The link level that makes `evaluations` evaluations of each program of `w` over `cases` cases
/// cheapest by the PTX route, compiling included, and what they cost then (seconds; the
/// evaluations' longest case, for loops, counted once per evaluation): `-O3` where what its code
/// saves over the evaluations beats what it adds to compiling. Code at `-O0` loads a free
/// parameter's value at every use, `-O3` code once: by these costs programs of 3.8 parameters
/// pay for `-O3` after 6 evaluations at 10^6 cases, 46 at 10^5, 160 at 10^4 and 215 at 362 (the
/// reference host measured 4-18, 4-18, 8-123 and 84-263). Programs without parameters stay at
/// `-O0`: what `-O3` saves them was not measured here, and whole runs measured `-O0` faster end
/// to end. Programs that loop are linked at `-O3` whatever the count: a loop runs its ops many
/// times in every evaluation (as the default link options for such problems say).
pub fn ptx_link_level(c: &Costs, w: &Workload, cases: usize, evaluations: f64) -> (LinkLevel, f64) {
    let n = w.programs as f64;
    let flow = n * cases as f64 * (c.ptx_case_s + w.run_ops * c.ptx_op_s);
    if w.loops {
        let flow = flow.max(w.longest_case_ops * c.ptx_serial_op_s);
        return (LinkLevel::O3, n * c.ptx_loop_program_s + evaluations * flow);
    }
    let compile = n * (c.ptx_program_s + w.held_ops * c.ptx_program_op_s);
    let params = n * w.params * (c.ptx_o0_param_eval_s + cases as f64 * c.ptx_o0_param_s);
    let o0 = compile + evaluations * (flow + params);
    let o3 = compile + n * c.ptx_o3_program_s + evaluations * flow;
    if o3 < o0 { (LinkLevel::O3, o3) } else { (LinkLevel::O0, o0) }
}

/// What a generation asks of the GPU routes: its distinct programs, the ops they hold and the
/// ops they run.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Workload {
    /// Distinct programs.
    pub programs: usize,
    /// Mean ops a program holds (bytecode).
    pub held_ops: f64,
    /// Mean ops a program runs per case.
    pub run_ops: f64,
    /// Ops of the case that runs most, over all programs.
    pub longest_case_ops: f64,
    /// Mean free parameters per program (each a value the compiled routes pass as an argument,
    /// read wherever the program uses it).
    pub params: f64,
    /// Whether any program has a loop.
    pub loops: bool,
}

/// A generation's predicted evaluation time by the interpreter and by the PTX route, in
/// seconds, for `w` over `cases` cases: each route's throughput (programs × cases × ops run) or
/// its longest case run op after op, whichever is longer, the PTX route's compile added.
pub fn predict(c: &Costs, w: &Workload, cases: usize) -> (f64, f64) {
    let (interp, ptx, _) = predict_repeated(c, w, cases, 1.0);
    (interp, ptx)
}

/// As [`predict`] for `evaluations` evaluations of each program (new values of its free
/// parameters each time, say), the PTX route linked at the level that makes them cheapest
/// ([`ptx_link_level`]), compiled once: the interpreter's time, the PTX route's, and its level.
pub fn predict_repeated(c: &Costs, w: &Workload, cases: usize, evaluations: f64) -> (f64, f64, LinkLevel) {
    let (level, ptx) = ptx_link_level(c, w, cases, evaluations);
    (interpreted(c, w, cases) * evaluations, ptx, level)
}

/// One evaluation of `w` over `cases` cases by the interpreter: its throughput (programs × cases
/// × ops run) or its longest case run op after op, whichever is longer.
fn interpreted(c: &Costs, w: &Workload, cases: usize) -> f64 {
    let (n, cases_f) = (w.programs as f64, cases as f64);
    let interp_op = if w.loops { c.interp_loop_op_s } else { c.interp_op_s };
    let interp_flow = n * (c.interp_program_s + cases_f * (c.interp_case_s + w.run_ops * interp_op));
    // Cases one thread (or, for loops over at most a block's cases, one warp) runs in turn.
    let block = gpfarm_kernels::gpu::BLOCK as usize;
    let in_turn = if w.loops && cases <= block {
        cases.div_ceil(block / 32)
    } else {
        cases.div_ceil(block).min(gpfarm_kernels::gpu::ROWS as usize)
    };
    let interp_wait = if w.loops { w.longest_case_ops * in_turn as f64 * c.interp_serial_op_s } else { 0.0 };
    c.interp_fixed_s + interp_flow.max(interp_wait)
}

/// Cases of the problem a program with loops is run on to count its ops ([`Workload`]).
pub const PROFILE_CASES: usize = 8;
/// Steps a profiled case runs at most; one that gets there is counted to the step limit.
pub const PROFILE_STEPS: u64 = 100_000;

/// The route auto takes for `problem` under `config` (the run's GP parameters, which fix its
/// first generation), and why, in words for the run's header and records.
pub fn choose(problem: &Problem, config: &EvolutionConfig) -> (Route, String) {
    let (route, _, why) = choose_linked(problem, config);
    (route, why)
}

/// As [`choose`], with the level the PTX route links at where auto takes it: the cheapest for
/// one evaluation of each program, as a run evaluates each new program once
/// ([`ptx_link_level`]).
pub fn choose_linked(problem: &Problem, config: &EvolutionConfig) -> (Route, Option<LinkLevel>, String) {
    if let Err(e) = gpfarm_kernels::interpreter::interp_supported(problem) {
        return (Route::Nvrtc, None, format!("auto: {}; only NVRTC compiles its template", e.difference));
    }
    let w = first_generation(problem, config);
    let cases = problem.cases().len();
    let (interp, ptx, _) = predict_repeated(&Costs::H100, &w, cases, 1.0);
    let route = if interp <= ptx { Route::Interpreter } else { Route::Ptx };
    let level = link_level(problem, || w);
    let loops = if w.loops {
        format!(" running {:.1} per case (longest case {:.3e})", w.run_ops, w.longest_case_ops)
    } else {
        String::new()
    };
    let sampled = if config.population > SAMPLE_POPULATION {
        format!(" (from a first generation of {SAMPLE_POPULATION})")
    } else {
        String::new()
    };
    let why = format!(
        "auto: {} programs{sampled} of {:.1} ops{loops} over {cases} cases, predicted {:.2} ms interpreted, \
         {:.2} ms by PTX (H100 costs)",
        w.programs,
        w.held_ops,
        interp * 1e3,
        ptx * 1e3
    );
    (route, (route == Route::Ptx).then_some(level), why)
}

/// Whether `problem`'s grammar can write a loop: a `while` or `for` among its terminals.
pub fn problem_loops(problem: &Problem) -> bool {
    problem
        .grammar_text()
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .any(|w| w == "while" || w == "for")
}

/// The level the PTX route links `problem`'s programs at in a run under `config`, which evaluates
/// each new program once (`link_level`, the run's first generation built only where needed).
pub fn run_link_level(problem: &Problem, config: &EvolutionConfig) -> LinkLevel {
    link_level(problem, || first_generation(problem, config))
}

/// The level for one evaluation of each program of `problem`'s first generation (`generation`):
/// `-O3` where its grammar can loop ([`problem_loops`]; programs with branches but no loop count
/// as not looping here), `-O0` where it has no free parameters, else [`ptx_link_level`].
fn link_level(problem: &Problem, generation: impl FnOnce() -> Workload) -> LinkLevel {
    if problem_loops(problem) {
        LinkLevel::O3
    } else if !problem.grammar().has_params() {
        LinkLevel::O0
    } else {
        let w = Workload { loops: false, ..generation() };
        ptx_link_level(&Costs::H100, &w, problem.cases().len(), 1.0).0
    }
}

/// The run's first generation as a [`Workload`]: its distinct programs, the ops they hold
/// (bytecode) and the ops they run, counted for programs with loops on [`PROFILE_CASES`] cases.
/// A program the interpreter cannot take counts as one op, as the CPU evaluates it.
/// Populations larger than this are judged by a first generation of this many (same settings,
/// same seed), its distinct programs scaled up to the population.
const SAMPLE_POPULATION: usize = 4096;

fn first_generation(problem: &Problem, config: &EvolutionConfig) -> Workload {
    use gpfarm_kernels::interpreter::{assemble_structure, exec, walk};
    use rayon::prelude::*;
    let sample = EvolutionConfig { population: config.population.min(SAMPLE_POPULATION), ..config.clone() };
    let Ok(evolution) = Evolution::new(problem, sample.clone()) else { return Workload::default() };
    let unique = evolution.dedup().unique;
    let scale = config.population as f64 / sample.population.max(1) as f64;
    let mut w = Workload { programs: (unique.len() as f64 * scale).round() as usize, ..Workload::default() };
    // Per program: the ops it holds, the ops a case runs on average and at most, and whether it
    // loops; a program the interpreter cannot take (or with free parameters, as its structure).
    let measured: Vec<(f64, f64, f64, bool, f64)> = gpfarm_gp::pipeline::in_pool(|| {
        unique
            .par_iter()
            .map(|p| {
                let Ok(program) = Program::parse(problem, p) else { return (1.0, 1.0, 0.0, false, 0.0) };
                let params = program.params() as f64;
                let Ok(code) = assemble_structure(problem, &program) else {
                    return (1.0, 1.0, 0.0, false, params);
                };
                let ops = walk(&code.words).count() as f64;
                if code.is_straight() {
                    (ops, ops, ops, false, params)
                } else {
                    let profile = exec::profile(problem, &code, PROFILE_CASES, PROFILE_STEPS);
                    (ops, profile.mean_ops, profile.max_ops.max(profile.to_limit), true, params)
                }
            })
            .collect()
    });
    let (mut held, mut run, mut params) = (0.0, 0.0, 0.0);
    for (h, r, longest, loops, p) in measured {
        held += h;
        run += r;
        params += p;
        w.longest_case_ops = w.longest_case_ops.max(longest);
        w.loops |= loops;
    }
    let n = unique.len().max(1) as f64;
    w.held_ops = held / n;
    w.run_ops = run / n;
    w.params = params / n;
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpreter_wins_up_to_tens_of_millions_of_cases_and_ptx_beyond() {
        let c = Costs::H100;
        let straight = |programs, ops| Workload {
            programs,
            held_ops: ops,
            run_ops: ops,
            longest_case_ops: ops,
            loops: false,
            params: 0.0,
        };
        // keijzer6's first generation: 209 programs of 6.9 ops over 20 cases.
        let (i, p) = predict(&c, &straight(209, 6.9), 20);
        assert!(i < p / 100.0, "{i} {p}");
        // 10^7 cases, as measured: the interpreter 38 ms, PTX 171 ms.
        let (i, p) = predict(&c, &straight(189, 27.6), 10_000_000);
        assert!((0.035..0.06).contains(&i) && (0.1..0.2).contains(&p), "{i} {p}");
        // 2 x 10^8 cases of bloated programs: compiling pays.
        let (i, p) = predict(&c, &straight(200, 100.0), 200_000_000);
        assert!(i > p, "{i} {p}");
    }

    #[test]
    fn the_ptx_route_links_at_o3_where_parameters_are_read_over_many_evaluations_or_loops_run() {
        let c = Costs::H100;
        let w = |params: f64, loops: bool| Workload {
            programs: 4065,
            held_ops: 14.4,
            run_ops: 14.4,
            longest_case_ops: 14.4,
            loops,
            params,
        };
        // One evaluation, as in a run: -O0, however many cases, without loops.
        for cases in [20, 10_000, 1_000_000] {
            assert_eq!(ptx_link_level(&c, &w(3.8, false), cases, 1.0).0, LinkLevel::O0, "{cases}");
        }
        // 100 evaluations: -O3 from 10^5 cases, as measured.
        assert_eq!(ptx_link_level(&c, &w(3.8, false), 10_000, 100.0).0, LinkLevel::O0);
        assert_eq!(ptx_link_level(&c, &w(3.8, false), 100_000, 100.0).0, LinkLevel::O3);
        // The crossover at 10^6 cases: between 5 and 10 evaluations.
        assert_eq!(ptx_link_level(&c, &w(3.8, false), 1_000_000, 5.0).0, LinkLevel::O0);
        assert_eq!(ptx_link_level(&c, &w(3.8, false), 1_000_000, 10.0).0, LinkLevel::O3);
        // Without parameters -O3 saves nothing measured; loops are linked at -O3 always.
        assert_eq!(ptx_link_level(&c, &w(0.0, false), 1_000_000, 1000.0).0, LinkLevel::O0);
        assert_eq!(ptx_link_level(&c, &w(0.0, true), 20, 1.0).0, LinkLevel::O3);
        // The cost is the chosen level's: more evaluations never cost less.
        let (_, once) = ptx_link_level(&c, &w(3.8, false), 100_000, 1.0);
        let (_, many) = ptx_link_level(&c, &w(3.8, false), 100_000, 100.0);
        assert!(many > once, "{once} {many}");
        // predict_repeated: the interpreter's time scales with the evaluations.
        let (i1, _, _) = predict_repeated(&c, &w(3.8, false), 100_000, 1.0);
        let (i100, p100, level) = predict_repeated(&c, &w(3.8, false), 100_000, 100.0);
        assert!((i100 / i1 - 100.0).abs() < 1e-6 && level == LinkLevel::O3 && p100 > 0.0);
    }

    #[test]
    fn long_loops_are_compiled_and_short_ones_interpreted() {
        let c = Costs::H100;
        let looping = |count: f64| Workload {
            programs: 20,
            held_ops: 22.0,
            run_ops: 22.0 * count,
            longest_case_ops: 22.0 * count,
            loops: true,
            params: 0.0,
        };
        // As measured (loops32x100000): the interpreter 1.54 s, PTX 73 ms.
        let (i, p) = predict(&c, &looping(1e5), 32);
        assert!((1.0..2.0).contains(&i) && (0.04..0.12).contains(&p), "{i} {p}");
        // Ten iterations over 32 cases: a fraction of a millisecond interpreted.
        let (i, p) = predict(&c, &looping(10.0), 32);
        assert!(i < 0.001 && i < p, "{i} {p}");
    }

    #[test]
    fn auto_interprets_the_built_in_problems_and_says_why() {
        for name in Problem::builtin_names() {
            let problem = Problem::builtin(name).unwrap();
            let (route, why) = choose(
                &problem,
                &EvolutionConfig {
                    population: 100,
                    generations: 50,
                    seed: 0,
                    max_size: 0,
                    ..EvolutionConfig::default()
                },
            );
            assert_eq!(route, Route::Interpreter, "{name}: {why}");
            assert!(why.starts_with("auto: ") && why.contains("ms interpreted"), "{why}");
        }
    }

    #[test]
    fn auto_counts_the_ops_loops_run_and_compiles_a_problem_whose_loops_run_long() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/while-search");
        let problem = Problem::load(&dir).unwrap();
        // GE's random codons write loops that never end, as a first generation can.
        let config = EvolutionConfig {
            population: 100,
            seed: 1,
            representation: gpfarm_gp::Representation::Ge,
            generations: 50,
            max_size: 0,
            ..EvolutionConfig::default()
        };
        let w = first_generation(&problem, &config);
        // Programs fail in the first generation: the longest case is a loop run to the limit.
        assert!(w.loops && w.longest_case_ops >= problem.max_steps() as f64, "{w:?}");
        let (route, why) = choose(&problem, &config);
        assert_eq!(route, Route::Ptx, "{why}");
        assert!(why.contains("per case (longest case"), "{why}");
        // Seeded: the same choice every time.
        assert_eq!(choose(&problem, &config), (route, why));
        // Under a limit of 20 steps no loop runs long: interpreted.
        let short = problem.clone().with_max_steps(20).unwrap();
        let (route, why) = choose(&short, &config);
        assert_eq!(route, Route::Interpreter, "{why}");
        // The same programs looping 10^6 times more per case: compiled.
        let long =
            Workload { run_ops: w.run_ops * 1e6, longest_case_ops: w.longest_case_ops.max(1.0) * 1e6, ..w };
        let (i, p) = predict(&Costs::H100, &long, 32);
        assert!(p < i, "{i} {p}");
    }

    #[test]
    fn a_problem_with_free_parameters_counts_its_structures_ops() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/friedman1");
        let problem = Problem::load(&dir).unwrap();
        let config = EvolutionConfig {
            population: 200,
            seed: 1,
            generations: 50,
            max_size: 0,
            ..EvolutionConfig::default()
        };
        let w = first_generation(&problem, &config);
        assert!(w.programs > 50 && w.held_ops > 4.0, "{w:?}");
        let (route, why) = choose(&problem, &config);
        assert_eq!(route, Route::Interpreter, "{why}");
    }
}

/// Which kernels fit a program's free parameters on the GPU ([`crate::Options::fit_kernels`]).
/// Only straight-line float programs have compiled fitting kernels; every other program is fitted
/// by the interpreter's whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FitKernels {
    /// The interpreter's fitting kernels: nothing is compiled.
    Interpreter,
    /// A kernel compiled for each program's structure (once per run), whatever it costs: on the
    /// PTX route the route's own PTX linked with a fitting template, on the others NVRTC's.
    Compiled,
    /// Compiled where [`fit_compiled_pays`] says so, else the interpreter's.
    #[default]
    Auto,
}

impl FitKernels {
    /// The name on the command line and in Python.
    pub fn as_str(self) -> &'static str {
        match self {
            FitKernels::Interpreter => "interpreter",
            FitKernels::Compiled => "compiled",
            FitKernels::Auto => "auto",
        }
    }
}

impl std::fmt::Display for FitKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for FitKernels {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "interpreter" => Ok(FitKernels::Interpreter),
            "compiled" => Ok(FitKernels::Compiled),
            "auto" => Ok(FitKernels::Auto),
            other => Err(format!("unknown fitting kernels {other:?}: use interpreter, compiled or auto")),
        }
    }
}

/// Calibrated costs of fitting a program on the GPU by the interpreter's fitting kernels and by
/// one compiled for it: seconds per op (a word of its bytecode), case and launch (a launch is one
/// Levenberg–Marquardt iteration's residuals and Jacobian), and compiling, per op of the program
/// on one reference core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitCosts {
    /// The interpreter's fitting kernels, seconds per op, case and launch.
    pub interp_op_s: f64,
    /// A compiled fitting kernel, seconds per op, case and launch.
    pub compiled_op_s: f64,
    /// Compiling a program's fitting kernel: seconds per op on one core.
    pub compile_op_s: f64,
    /// Compiling: seconds per program on one core.
    pub compile_program_s: f64,
    /// Cores compiling side by side on the reference host.
    pub cores: f64,
}

impl FitCosts {
    /// Fitted to `gpfarm bench --param-steps --fit` on the reference host: the interpreter's
    /// fitting step and the NVRTC-compiled one's per word and point, and compiling per program on
    /// one daemon (docs/regression.md, "The fitting constants' measurements", gives the figures).
    pub const H100: FitCosts = FitCosts {
        interp_op_s: 6.0e-12,
        compiled_op_s: 1.8e-12,
        compile_op_s: 2.0e-3,
        compile_program_s: 30e-3,
        cores: 16.0,
    };

    /// The PTX route's own fitting kernels (PTX linked with a fitting template), from the same
    /// bench on the reference host: their step per word and point, and linking per program on
    /// one core beyond compiling the templates (once per run; a run links on a thread per core).
    /// docs/regression.md, "The fitting constants' measurements", gives the figures.
    pub const H100_PTX: FitCosts = FitCosts {
        interp_op_s: 6.0e-12,
        compiled_op_s: 3.4e-12,
        compile_op_s: 0.5e-3,
        compile_program_s: 10e-3,
        cores: 16.0,
    };
}

/// Whether compiling a fitting kernel for a program of `ops` ops pays for itself over `launches`
/// launches of its fit over `cases` cases: the time it saves against the interpreter's kernels
/// beats compiling it on one of the reference host's cores, shared among them. From the program
/// and the run's settings alone, never from this machine, so a seeded run fits the same way
/// everywhere.
pub fn fit_compiled_pays(c: &FitCosts, ops: usize, cases: usize, launches: usize) -> bool {
    let (ops, cases, launches) = (ops as f64, cases as f64, launches as f64);
    let saved = launches * cases * ops * (c.interp_op_s - c.compiled_op_s);
    let compile = (c.compile_program_s + ops * c.compile_op_s) / c.cores;
    saved > compile
}

#[cfg(test)]
mod fit_kernel_tests {
    use super::*;

    #[test]
    fn compiled_fitting_kernels_pay_on_long_fits_over_many_cases_only() {
        for c in [FitCosts::H100, FitCosts::H100_PTX] {
            // Friedman-1 over 10^5 cases, 10 iterations, programs of 50 words: the interpreter's.
            assert!(!fit_compiled_pays(&c, 50, 100_000, 11));
            // The same programs over 10^6 cases for 100 iterations: compiled.
            assert!(fit_compiled_pays(&c, 50, 1_000_000, 101));
            // More launches or more cases never turn a yes into a no.
            for cases in [1_000, 10_000, 100_000, 1_000_000] {
                let first = (1..2000).find(|&k| fit_compiled_pays(&c, 30, cases, k));
                if let Some(k) = first {
                    assert!((k..k + 100).all(|j| fit_compiled_pays(&c, 30, cases, j)));
                    assert!(fit_compiled_pays(&c, 30, cases * 10, k));
                }
            }
        }
        // The PTX route's link costs less than NVRTC's compile: it pays sooner.
        let first = |c: &FitCosts| (1..5000).find(|&k| fit_compiled_pays(c, 30, 1_000_000, k));
        assert!(first(&FitCosts::H100_PTX) < first(&FitCosts::H100), "{:?}", first(&FitCosts::H100_PTX));
        assert_eq!("compiled".parse::<FitKernels>(), Ok(FitKernels::Compiled));
        assert!("fast".parse::<FitKernels>().unwrap_err().contains("interpreter, compiled or auto"));
    }
}
