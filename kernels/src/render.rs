//! Rendering phenotypes into translation units: each unit is the phenotype language's own math
//! functions ([`gpfarm_gp::program::MATH_HELPERS`]: `pdivf`, `pdiv`, ahead of everything that may
//! call them), the problem's preamble once, then its individuals in one of two shapes
//! ([`gpfarm_protocol::Shape`]): an `extern "C" __global__` kernel each, made
//! from the template's kernel section, or each as a `__device__` function called by one switch
//! kernel that picks the individual by its block row. For a grammar with free parameters every
//! kernel (and device function) takes their values as its last argument, `const float* p`, and a
//! switch kernel the generation's values and their stride ([`params_decl`]), so that an
//! individual is compiled as its structure and runs with any values.
//!
//! Several individuals share one unit so that NVRTC's fixed cost per call (~12 ms on the GPU host)
//! is paid once per unit, not once per individual. Each individual keeps its own function (not
//! one fused expression), so a failing one is found by compiling it alone, and in careful mode
//! the GPU side still launches, and so fault-isolates, individuals one at a time: a switch
//! kernel's launch starts at any branch and covers any number of rows.

use std::borrow::Cow;
use std::fmt::Write as _;

use gpfarm_gp::mapping::PARAM_ARRAY;
use gpfarm_gp::problem::template::{KernelParam, ParamRole};
use gpfarm_gp::program::{MATH_HELPERS, step_helper, with_step_limit};
use gpfarm_gp::{KernelName, Phenotype, Problem, Program};

/// The switch kernel's parameters after `int gpfarm_first` when the problem has free parameters:
/// the generation's values, `gpfarm_pstride` floats per individual from the launch's first row.
const SWITCH_PARAMS: &str = "const float* __restrict__ gpfarm_params, int gpfarm_pstride";

/// The declaration each kernel (or device function) of a problem with free parameters (`p[k]`)
/// gets as its last parameter: the values come in as an argument, so a structure compiles once
/// and runs with any values. `None` for a problem without them.
pub(crate) fn params_decl(problem: &Problem) -> Option<String> {
    problem.grammar().has_params().then(|| format!("const float* __restrict__ {PARAM_ARRAY}"))
}

/// `name`'s kernel for `text`, with the values' parameter when the problem has one.
fn kernel_text(problem: &Problem, name: &KernelName, text: &Phenotype, device: bool) -> String {
    let t = problem.template();
    match (params_decl(problem), device) {
        (Some(d), false) => t.render_kernel_with(name, text, &d),
        (Some(d), true) => t.render_device_function_with(name, text, &d),
        (None, false) => t.render_kernel(name, text),
        (None, true) => t.render_device_function(name, text),
    }
}

/// Estimated cost of compiling an individual's kernel, in the units of [`UNIT_WEIGHT`]: its
/// phenotype's length in bytes plus a fixed part. On NVRTC 13 for sm_90, one kernel per unit costs
/// about 23 ms + 0.11 ms per phenotype byte (keijzer6 individuals of generations 0-50, one core;
/// the length explains the time as well as counting math calls does, correlation 0.93), and each
/// further kernel in a unit about 5 ms + 0.11 ms per byte.
pub(crate) fn compile_weight(phenotype: &Phenotype) -> f64 {
    KERNEL_WEIGHT + phenotype.as_str().len() as f64
}

/// The fixed part of a kernel's [`compile_weight`] (about 5 ms of NVRTC time).
pub(crate) const KERNEL_WEIGHT: f64 = 50.0;
/// NVRTC's fixed cost per translation unit in the units of [`compile_weight`] (about 20 ms).
pub(crate) const UNIT_WEIGHT: f64 = 180.0;

/// A unit's member: its kernel's name, its phenotype, and its typed tree when the caller has it.
pub(crate) type Named<'a> = (KernelName, &'a Phenotype, Option<&'a Program>);

/// The kernel name an individual's code has in the text its cache key is computed over.
pub(crate) const KEYED_KERNEL: &str = "gpfarm_individual";

/// The text an individual's cache key is computed over: the unit's opening and its kernel
/// rendered under a fixed name. Two individuals with equal texts compile to the same code.
pub(crate) fn keyed_source(problem: &Problem, phenotype: &Phenotype, program: Option<&Program>) -> String {
    let name = KernelName::new(KEYED_KERNEL).expect("a C identifier");
    let text = step_limited(problem, phenotype, program, 0);
    let mut source = unit_start(problem);
    source.push_str(&helper(problem, std::slice::from_ref(&text)));
    source.push_str(&kernel_text(problem, &name, &text, false));
    source
}

/// The phenotype as compiled as member `member` of its unit: its loops count steps and stop at
/// the problem's limit ([`gpfarm_gp::program::with_step_limit`]), setting the member's failure
/// flag, so a program fails on this route where it fails on every other; unless its loops are
/// provably bounded below the limit ([`Program::step_bound`]: Search's
/// `for (i = 0; i < LENINPUT; i++)`), when it is compiled as written (borrowed). `program` is
/// the phenotype's typed tree when the caller has it (else it is parsed).
pub(crate) fn step_limited<'p>(
    problem: &Problem,
    phenotype: &'p Phenotype,
    program: Option<&Program>,
    member: usize,
) -> Cow<'p, Phenotype> {
    let parsed;
    let program = match program {
        Some(p) => Some(p),
        None => {
            parsed = Program::parse(problem, phenotype).ok();
            parsed.as_ref()
        }
    };
    let bounded =
        program.and_then(|p| p.step_bound(problem)).is_some_and(|steps| steps <= problem.max_steps());
    if bounded {
        return Cow::Borrowed(phenotype);
    }
    match with_step_limit(phenotype.as_str(), member) {
        Some(text) => Cow::Owned(Phenotype::new(text)),
        None => Cow::Borrowed(phenotype),
    }
}

/// One translation unit named `name`: its opening ([`unit_start`]) once, then each `(kernel
/// name, phenotype)`.
pub(crate) fn render_unit(problem: &Problem, members: &[Named<'_>]) -> String {
    let template = problem.template();
    let body: usize =
        members.iter().map(|(_, p, _)| p.as_str().len() + template.kernel_template().len()).sum();
    let texts = limited(problem, members);
    let mut source = String::with_capacity(MATH_HELPERS.len() + template.preamble().len() + 600 + body);
    source.push_str(&unit_start(problem));
    source.push_str(&helper(problem, &texts));
    for ((name, ..), text) in members.iter().zip(&texts) {
        source.push_str(&kernel_text(problem, name, text, false));
    }
    source
}

/// What every unit opens with: the phenotype language's own math functions, then the problem's
/// preamble (its declared functions, which may call them, and the template's).
fn unit_start(problem: &Problem) -> String {
    let preamble = problem.template().preamble();
    let mut source = String::with_capacity(MATH_HELPERS.len() + preamble.len());
    source.push_str(MATH_HELPERS);
    source.push_str(preamble);
    source
}

/// Each member's text as compiled ([`step_limited`]), by its place in the unit.
fn limited<'p>(problem: &Problem, members: &[Named<'p>]) -> Vec<Cow<'p, Phenotype>> {
    members.iter().enumerate().map(|(j, (_, p, program))| step_limited(problem, p, *program, j)).collect()
}

/// The unit's step helper: failure flags for all its members when any counts steps.
fn helper(problem: &Problem, texts: &[Cow<'_, Phenotype>]) -> String {
    let counts = texts.iter().any(|t| matches!(t, Cow::Owned(_)));
    step_helper(problem.max_steps(), if counts { texts.len() } else { 0 })
}

/// One translation unit holding the switch kernel `name` ([`gpfarm_protocol::Shape::Switch`]): its opening,
/// each member's kernel as a device function ([`gpfarm_gp::Template::render_device_function`]), and a
/// kernel with the problem's parameters `params` and `int first` whose block row `y` calls
/// member `first + y` with its output pointers moved `y * NCASES` values on. The template must
/// pass [`gpfarm_gp::Template::switch_ready`].
pub(crate) fn render_switch_unit(
    problem: &Problem,
    params: &[KernelParam],
    name: &KernelName,
    members: &[Named<'_>],
) -> String {
    let texts = limited(problem, members);
    let mut source = unit_start(problem);
    source.push_str(&helper(problem, &texts));
    for ((k, ..), text) in members.iter().zip(&texts) {
        source.push_str(&kernel_text(problem, k, text, true));
    }
    let declared: Vec<String> = params
        .iter()
        .map(|p| match p.role {
            ParamRole::NumCases => format!("{} {}", p.c_type, p.name),
            _ => format!("{} __restrict__ {}", p.c_type, p.name),
        })
        .collect();
    let ncases = params.iter().find(|p| p.role == ParamRole::NumCases).map_or("0", |p| p.name.as_str());
    let values = params_decl(problem).is_some();
    let _ = write!(
        source,
        "\nextern \"C\" __global__ void {}({}, int gpfarm_first{})\n{{\n    const size_t gpfarm_slab = (size_t)blockIdx.y * (size_t){ncases};\n    switch (gpfarm_first + (int)blockIdx.y) {{\n",
        name.as_str(),
        declared.join(", "),
        if values { format!(", {SWITCH_PARAMS}") } else { String::new() }
    );
    let mut args: Vec<String> = params
        .iter()
        .map(|p| match p.role {
            ParamRole::Output(_) => format!("{} + gpfarm_slab", p.name),
            _ => p.name.clone(),
        })
        .collect();
    if values {
        args.push("gpfarm_params + (size_t)blockIdx.y * (size_t)gpfarm_pstride".into());
    }
    let args = args.join(", ");
    for (j, (k, ..)) in members.iter().enumerate() {
        let _ = writeln!(source, "    case {j}: {}({args}); break;", k.as_str());
    }
    source.push_str("    default: break;\n    }\n}\n");
    source
}

/// The kernel references of a switch unit's members: branch `j` of `kernel` for member `j`
/// ([`KernelRef`](gpfarm_protocol::worker::KernelRef)).
pub(crate) fn switch_refs(kernel: &str, members: usize) -> Vec<String> {
    (0..members).map(|j| gpfarm_protocol::worker::KernelRef::switch_branch(kernel, j)).collect()
}

/// Name of the kernel of individual `index` in generation `generation`.
pub(crate) fn kernel_name(generation: usize, index: usize) -> KernelName {
    KernelName::new(format!("g{generation}_i{index}"))
        .expect("g<digits>_i<digits> is a C identifier by construction")
}

/// Name of the switch kernel of unit `unit` in generation `generation`.
pub(crate) fn unit_kernel_name(generation: usize, unit: usize) -> KernelName {
    KernelName::new(format!("g{generation}_u{unit}"))
        .expect("g<digits>_u<digits> is a C identifier by construction")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(n: usize, generation: usize) -> Vec<(KernelName, Phenotype)> {
        (0..n).map(|i| (kernel_name(generation, i), Phenotype::new(format!("x + {i}.0f")))).collect()
    }

    #[test]
    fn a_unit_holds_the_preamble_once_and_one_kernel_per_member() {
        let problem = Problem::builtin("search").unwrap();
        let members = named(3, 0);
        let refs: Vec<Named<'_>> = members.iter().map(|(k, p)| (k.clone(), p, None)).collect();
        let source = render_unit(&problem, &refs);
        assert_eq!(source.matches("struct gp_wrapped_ints").count(), 1);
        for (k, _) in &members {
            assert_eq!(source.matches(&format!("void {}(", k.as_str())).count(), 1, "{}", k.as_str());
        }
        assert!(source.contains("x + 2.0f"));
    }

    #[test]
    fn a_switch_unit_calls_each_member_as_a_device_function_from_one_kernel() {
        let problem = Problem::builtin("search").unwrap();
        let members: Vec<(KernelName, Phenotype)> = named(5, 2).into_iter().skip(3).collect();
        let refs: Vec<Named<'_>> = members.iter().map(|(k, p)| (k.clone(), p, None)).collect();
        let name = unit_kernel_name(2, 1);
        let source = render_switch_unit(&problem, &problem.kernel_params(), &name, &refs);
        assert_eq!(switch_refs(name.as_str(), 2), vec!["g2_u1@0", "g2_u1@1"]);
        assert_eq!(source.matches("__global__").count(), 1, "{source}");
        assert!(source.contains(
            "extern \"C\" __global__ void g2_u1(const int* __restrict__ in_INPUT, const int* __restrict__ in_LENINPUT, \
             const int* __restrict__ in_SEARCH, int* __restrict__ out_OUTPUT, int NCASES, int gpfarm_first)"
        ), "{source}");
        for (j, i) in [(0, 3), (1, 4)] {
            assert_eq!(
                source.matches(&format!("static __device__ __forceinline__ void g2_i{i}(")).count(),
                1
            );
            assert!(source.contains(&format!(
                "case {j}: g2_i{i}(in_INPUT, in_LENINPUT, in_SEARCH, out_OUTPUT + gpfarm_slab, NCASES); break;"
            )), "{source}");
        }
        assert!(!source.contains("extern \"C\"  "), "{source}");
    }

    #[test]
    fn a_loop_counts_the_cases_steps_in_every_rendering_and_in_the_key() {
        let problem = Problem::builtin("search").unwrap();
        let p = Phenotype::new("while(tmp < 3){tmp = tmp + 1;}");
        let k = kernel_name(0, 0);
        let kernels = render_unit(&problem, &[(k.clone(), &p, None)]);
        let switch =
            render_switch_unit(&problem, &problem.kernel_params(), &unit_kernel_name(0, 0), &[(k, &p, None)]);
        let keyed = keyed_source(&problem, &p, None);
        for source in [&kernels, &switch, &keyed] {
            assert!(source.contains("unsigned long long gpfarm_steps = 0;"), "{source}");
            assert!(
                source.contains("while(gpfarm_step(gpfarm_steps, gpfarm_failure) && (tmp < 3))"),
                "{source}"
            );
            assert!(source.contains("__device__ unsigned gpfarm_failed[1];"), "{source}");
            assert_eq!(source.matches("bool gpfarm_step(").count(), 2, "{source}");
        }
        // Each member flags its own failure; a problem's own limit is compiled in.
        let q = Phenotype::new("OUTPUT = 2;");
        let two = render_unit(&problem, &[(kernel_name(0, 0), &q, None), (kernel_name(0, 1), &p, None)]);
        assert!(two.contains("gpfarm_failed[2];") && two.contains("= gpfarm_failed[1];"), "{two}");
        let strict = problem.clone().with_max_steps(5).unwrap();
        assert!(keyed_source(&strict, &p, None).contains("gpfarm_max_steps = 5ull;"));
        // Search's own loops are bounded far below the limit: compiled as written.
        let search =
            Phenotype::new("for(i=0;i < LENINPUT;i++){if (INPUT[i % LENINPUT] == SEARCH) {OUTPUT = i;}}");
        let as_written = render_unit(&problem, &[(kernel_name(0, 2), &search, None)]);
        assert!(as_written.contains(search.as_str()) && !as_written.contains("gpfarm_steps"), "{as_written}");
        // Without a loop the phenotype is pasted as it is.
        let plain = render_unit(&problem, &[(kernel_name(0, 1), &Phenotype::new("OUTPUT = 1;"), None)]);
        assert!(!plain.contains("gpfarm_steps") && plain.contains("OUTPUT = 1;"));
        assert!(!plain.contains("gpfarm_failed"), "{plain}");
    }

    /// Every rendering opens with the definitions of `pdivf` and `pdiv`, before the preamble and
    /// the problem's declared functions, whose bodies may call them.
    #[test]
    fn protected_division_is_defined_first_in_every_rendering() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/functions");
        let problem = Problem::load(&dir).unwrap();
        let p = Phenotype::new("pdivf(x1, x2) + pdiv(x1, 2) + softsign(x1)");
        Program::parse(&problem, &p).unwrap();
        let k = kernel_name(0, 0);
        let unit = render_unit(&problem, &[(k.clone(), &p, None)]);
        let switch =
            render_switch_unit(&problem, &problem.kernel_params(), &unit_kernel_name(0, 0), &[(k, &p, None)]);
        let keyed = keyed_source(&problem, &p, None);
        for source in [&unit, &switch, &keyed] {
            assert!(source.starts_with(MATH_HELPERS), "{source}");
            assert!(source.find("float softsign(").unwrap() > MATH_HELPERS.len(), "{source}");
            assert!(source.contains(
                "static __device__ inline float pdivf(float a, float b) { return fabsf(b) > 0.001f ? a / b : 1.0f; }"
            ));
            assert!(source.contains(
                "static __device__ inline double pdiv(double a, double b) { return fabs(b) > 0.001 ? a / b : 1.0; }"
            ));
            assert_eq!(source.matches("pdivf(float a, float b)").count(), 1, "{source}");
            assert!(source.contains("pdivf(x1, x2) + pdiv(x1, 2) + softsign(x1)"), "{source}");
        }
    }

    #[test]
    fn free_parameters_come_in_as_the_last_argument_in_every_rendering() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/friedman1");
        let problem = Problem::load(&dir).unwrap();
        let p = Phenotype::new("p[0] * x0 + p[1]");
        let k = kernel_name(0, 0);
        let unit = render_unit(&problem, &[(k.clone(), &p, None)]);
        assert!(unit.contains("int NCASES, const float* __restrict__ p)"), "{unit}");
        let switch =
            render_switch_unit(&problem, &problem.kernel_params(), &unit_kernel_name(0, 0), &[(k, &p, None)]);
        assert!(switch.contains("int NCASES, const float* __restrict__ p)"), "{switch}");
        assert!(
            switch.contains("int gpfarm_first, const float* __restrict__ gpfarm_params, int gpfarm_pstride)"),
            "{switch}"
        );
        assert!(
            switch.contains("gpfarm_params + (size_t)blockIdx.y * (size_t)gpfarm_pstride); break;"),
            "{switch}"
        );
        // The key is the structure's: the values are not in the text.
        assert!(keyed_source(&problem, &p, None).contains("p[0] * x0 + p[1]"));
    }
}
