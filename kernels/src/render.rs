//! Rendering phenotypes into translation units: each unit is the problem's preamble once, then
//! one `extern "C" __global__` kernel per individual, made from the template's kernel section.
//!
//! One kernel per individual (rather than all individuals fused into one kernel) keeps each
//! function small for the compiler's optimiser, whose cost grows faster than linearly with
//! function size, lets a failing individual be found by its own name, and lets the GPU side
//! launch, time and fault-isolate individuals separately. Several kernels share one unit so
//! that NVRTC's fixed cost per call (~12 ms on the GPU host) is paid once per unit, not once per
//! individual.

use std::ops::Range;

use gpfarm_gp::{KernelName, Phenotype, Template};

/// One translation unit and what is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedUnit {
    /// Unit name for compiler messages, e.g. `g3_u7.cu`.
    pub name: String,
    /// The CUDA C source.
    pub source: String,
    /// Indices (into the phenotypes given) of the individuals in this unit, in kernel order.
    pub members: Vec<usize>,
    /// Kernel name of each member, in the same order.
    pub kernels: Vec<String>,
}

/// Estimated cost of compiling an individual's kernel, in the units of [`UNIT_WEIGHT`]: its
/// phenotype's length in bytes plus a fixed part. On NVRTC 13 for sm_90, one kernel per unit costs
/// about 23 ms + 0.11 ms per phenotype byte (keijzer6 individuals of generations 0-50, one core;
/// the length explains the time as well as counting math calls does, correlation 0.93), and each
/// further kernel in a unit about 5 ms + 0.11 ms per byte.
pub fn compile_weight(phenotype: &Phenotype) -> f64 {
    KERNEL_WEIGHT + phenotype.as_str().len() as f64
}

/// The fixed part of a kernel's [`compile_weight`] (about 5 ms of NVRTC time).
pub const KERNEL_WEIGHT: f64 = 50.0;
/// NVRTC's fixed cost per translation unit in the units of [`compile_weight`] (about 20 ms).
pub const UNIT_WEIGHT: f64 = 180.0;

/// The text an individual's cache key is computed over: the preamble and its kernel rendered
/// under a fixed name. Two individuals with equal texts compile to the same code.
pub fn keyed_source(template: &Template, phenotype: &Phenotype) -> String {
    let name = KernelName::new("gpfarm_individual").expect("a C identifier");
    let mut source = template.preamble().to_owned();
    source.push_str(&template.render_kernel(&name, phenotype));
    source
}

/// One translation unit named `name`: the preamble once, then each `(kernel name, phenotype)`.
pub fn render_unit(template: &Template, members: &[(KernelName, &Phenotype)]) -> String {
    let body: usize = members.iter().map(|(_, p)| p.as_str().len() + template.kernel_template().len()).sum();
    let mut source = String::with_capacity(template.preamble().len() + body);
    source.push_str(template.preamble());
    for (name, phenotype) in members {
        source.push_str(&template.render_kernel(name, phenotype));
    }
    source
}

/// Name of the kernel of individual `index` in generation `generation`.
pub fn kernel_name(generation: usize, index: usize) -> KernelName {
    KernelName::new(format!("g{generation}_i{index}"))
        .expect("g<digits>_i<digits> is a C identifier by construction")
}

/// Renders one unit per part: part `u` holds the phenotypes of indices `parts[u]` (how a batch
/// is split is the caller's choice, e.g. `gpfarm_client::partition::balanced`).
pub fn render_units(
    template: &Template,
    phenotypes: &[Phenotype],
    generation: usize,
    parts: &[Range<usize>],
) -> Vec<RenderedUnit> {
    parts
        .iter()
        .enumerate()
        .map(|(u, part)| {
            let members: Vec<usize> = part.clone().collect();
            let named: Vec<(KernelName, &Phenotype)> =
                members.iter().map(|&i| (kernel_name(generation, i), &phenotypes[i])).collect();
            RenderedUnit {
                name: format!("g{generation}_u{u}.cu"),
                source: render_unit(template, &named),
                kernels: named.iter().map(|(k, _)| k.as_str().to_owned()).collect(),
                members,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpfarm_gp::Problem;

    fn phenotypes(n: usize) -> Vec<Phenotype> {
        (0..n).map(|i| Phenotype::new(format!("x + {i}.0f"))).collect()
    }

    #[test]
    fn every_individual_lands_in_exactly_one_unit_in_order() {
        let problem = Problem::builtin("keijzer6").unwrap();
        let units = render_units(problem.template(), &phenotypes(10), 3, &[0..4, 4..7, 7..10]);
        let members: Vec<usize> = units.iter().flat_map(|u| u.members.clone()).collect();
        assert_eq!(members, (0..10).collect::<Vec<_>>());
        let sizes: Vec<usize> = units.iter().map(|u| u.members.len()).collect();
        assert_eq!(sizes, vec![4, 3, 3]);
    }

    #[test]
    fn a_unit_holds_the_preamble_once_and_one_kernel_per_member() {
        let problem = Problem::builtin("search").unwrap();
        let units = render_units(problem.template(), &phenotypes(5), 0, &[0..3, 3..5]);
        assert_eq!(units.len(), 2);
        for u in &units {
            assert_eq!(u.source.matches("struct gp_wrapped_ints").count(), 1);
            for k in &u.kernels {
                assert_eq!(u.source.matches(&format!("void {k}(")).count(), 1, "{k}");
            }
        }
        assert!(units[1].source.contains("x + 4.0f"));
    }

    #[test]
    fn the_keyed_source_names_no_generation_or_place() {
        let problem = Problem::builtin("keijzer6").unwrap();
        let p = Phenotype::new("x * 2.0f");
        let keyed = keyed_source(problem.template(), &p);
        assert!(keyed.contains("x * 2.0f") && keyed.contains("gpfarm_individual"));
        let unit = render_unit(problem.template(), &[(kernel_name(3, 7), &p)]);
        assert_eq!(unit.replace("g3_i7", "gpfarm_individual"), keyed);
    }
}
