//! Units for the compile routes: the one place that matches on a unit's language (CUDA C for
//! NVRTC, PTX for nvJitLink: [`Route::language`](gpfarm_protocol::Route::language)) and its
//! shape ([`Shape`]). Rendering a unit, an individual's estimated compile weight, a unit's size
//! bounds in that weight, and the text an individual's cache key is computed over all live here;
//! the engine, the benchmark and the tests call them and never the languages' own generators
//! (`render` for CUDA C, [`crate::ptx`] for PTX).
//!
//! Must never decide how individuals are grouped into units (that is
//! `gpfarm_client::partition`'s) nor which route a run takes (the engine's).

use std::ops::Range;

use gpfarm_gp::program::ParseError;
use gpfarm_gp::{KernelName, Phenotype, Problem, Program};
use gpfarm_protocol::{Language, Shape, SmArch, Unit};

use crate::ptx;
use crate::render;

/// An individual to put into a unit.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// Its kernel's name ([`kernel_name`]).
    pub kernel: &'a KernelName,
    /// Its phenotype (what CUDA C units hold).
    pub phenotype: &'a Phenotype,
    /// Its typed tree (what PTX units are emitted from). A PTX unit leaves out a member without
    /// one: its kernel is then missing from the CUBIN, which the caller's check of the kernels
    /// reports as a failed unit.
    pub program: Option<&'a Program>,
}

/// A unit ready for a compiler, and where each member's code is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The unit, named `<stem>.cu` or `<stem>.ptx`.
    pub unit: Unit,
    /// Each member's kernel reference, in member order ([`gpfarm_protocol::worker::KernelRef`]):
    /// its own kernel, or a branch of the unit's one switch kernel.
    pub kernels: Vec<String>,
}

/// The unit of `members` in `language` and `shape`, named after `stem`: with
/// [`Shape::Switch`] one kernel named `stem` whose branch `j` runs member `j`, with
/// [`Shape::Kernels`] a kernel per member under its own name. A CUDA C switch unit needs a
/// template that passes [`gpfarm_gp::Template::switch_ready`].
pub fn render(
    problem: &Problem,
    language: Language,
    shape: Shape,
    arch: SmArch,
    stem: &KernelName,
    members: &[Member<'_>],
) -> Rendered {
    let kernels = match shape {
        Shape::Switch => render::switch_refs(stem.as_str(), members.len()),
        Shape::Kernels => members.iter().map(|m| m.kernel.as_str().to_owned()).collect(),
    };
    let source = match language {
        Language::CudaC => {
            let named: Vec<render::Named<'_>> =
                members.iter().map(|m| (m.kernel.clone(), m.phenotype, m.program)).collect();
            match shape {
                Shape::Switch => render::render_switch_unit(problem, &problem.kernel_params(), stem, &named),
                Shape::Kernels => render::render_unit(problem, &named),
            }
        }
        Language::Ptx => {
            let programs: Vec<(&str, &Program)> =
                members.iter().filter_map(|m| m.program.map(|p| (m.kernel.as_str(), p))).collect();
            match shape {
                Shape::Switch => {
                    let programs: Vec<&Program> = programs.iter().map(|(_, p)| *p).collect();
                    ptx::ptx_switch_unit(problem, stem.as_str(), &programs, arch)
                }
                Shape::Kernels => ptx::ptx_unit(problem, &programs, arch),
            }
        }
    };
    Rendered { unit: unit(language, stem.as_str(), source), kernels }
}

/// A unit of `language` named `<stem>.cu` or `<stem>.ptx`, holding `source`.
pub fn unit(language: Language, stem: &str, source: String) -> Unit {
    let name = format!("{stem}.{}", language.extension());
    match language {
        Language::CudaC => Unit::new(name, source),
        Language::Ptx => Unit::ptx(name, source),
    }
}

/// An individual's estimated cost of compiling in a unit of `language`, in the units of
/// [`bounds`]: for CUDA C its phenotype's length plus a fixed part
/// (a byte about 0.11 ms of NVRTC on sm_90, the fixed part about 5 ms); for PTX its kernel's instructions
/// (about 5 ms + 0.026 ms each of nvJitLink at -O0), or the CUDA C estimate when it has no
/// typed tree.
pub fn weight(
    problem: &Problem,
    language: Language,
    phenotype: &Phenotype,
    program: Option<&Program>,
) -> f64 {
    match (language, program) {
        (Language::Ptx, Some(program)) => ptx::ptx_compile_weight(problem, program),
        _ => render::compile_weight(phenotype),
    }
}

/// The least and most estimated [`weight`] of a unit of `language`. The least keeps the
/// compiler's fixed cost per unit under a fifth of a unit. The most: units of many heavy kernels
/// cost more than their weights say (a unit of eight bloated keijzer6 individuals took 3.6 s of
/// NVRTC on the GPU host while the rest of its generation took 1 s), and one such unit holds up
/// its generation.
pub fn bounds(language: Language) -> (f64, f64) {
    let fixed = match language {
        Language::CudaC => render::UNIT_WEIGHT,
        Language::Ptx => ptx::PTX_UNIT_WEIGHT,
    };
    (4.0 * fixed, 8.0 * fixed)
}

/// The text an individual's cache key is computed over in `language`: its code alone, under a
/// fixed kernel name, so that two individuals with equal texts compile to the same code. For PTX
/// the typed tree is parsed from the phenotype when `program` is `None`; `Err` when the parser
/// refuses it.
pub fn key_text(
    problem: &Problem,
    language: Language,
    arch: SmArch,
    phenotype: &Phenotype,
    program: Option<&Program>,
) -> Result<String, ParseError> {
    match language {
        Language::CudaC => Ok(render::keyed_source(problem, phenotype, program)),
        Language::Ptx => {
            let parsed;
            let program = match program {
                Some(p) => p,
                None => {
                    parsed = Program::parse(problem, phenotype)?;
                    &parsed
                }
            };
            Ok(ptx::ptx_unit(problem, &[(render::KEYED_KERNEL, program)], arch))
        }
    }
}

/// Name of the kernel of individual `index` in generation `generation`.
pub fn kernel_name(generation: usize, index: usize) -> KernelName {
    render::kernel_name(generation, index)
}

/// One unit of a batch and what is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchUnit {
    /// The unit, named `g<generation>_u<u>.cu` or `.ptx`.
    pub unit: Unit,
    /// Indices (into the phenotypes given) of the individuals in this unit, in kernel order.
    pub members: Vec<usize>,
    /// Each member's kernel reference, in the same order.
    pub kernels: Vec<String>,
}

impl BatchUnit {
    /// The unit's source as text.
    pub fn source(&self) -> &str {
        std::str::from_utf8(&self.unit.source).expect("rendered units are text")
    }
}

/// An individual a PTX batch leaves out: its phenotype does not parse. The caller gives it the
/// worst fitness, as the CPU evaluator does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Index into the phenotypes given.
    pub index: usize,
    /// Why the parser refused it.
    pub error: ParseError,
}

/// The units of one batch, and the individuals left out of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// One unit per part that has at least one individual, in part order.
    pub units: Vec<BatchUnit>,
    /// The individuals whose phenotype was refused (PTX only), in index order.
    pub refused: Vec<Refused>,
}

/// Renders one unit per part of a batch: part `u` holds the phenotypes of indices `parts[u]`
/// (how a batch is split is the caller's choice, e.g. `gpfarm_client::partition`), in unit
/// `g<generation>_u<u>`, kernels named by [`kernel_name`] or, for [`Shape::Switch`], one switch
/// kernel `g<generation>_u<u>`. In PTX an individual whose phenotype does not parse is left out
/// and listed in [`Batch::refused`], and a part with none left gives no unit.
pub fn render_batch(
    problem: &Problem,
    language: Language,
    shape: Shape,
    arch: SmArch,
    phenotypes: &[Phenotype],
    generation: usize,
    parts: &[Range<usize>],
) -> Batch {
    let mut units = Vec::new();
    let mut refused = Vec::new();
    for (u, part) in parts.iter().enumerate() {
        let mut kept: Vec<(usize, KernelName, Option<Program>)> = Vec::new();
        for i in part.clone() {
            let program = match language {
                Language::CudaC => None,
                Language::Ptx => match Program::parse(problem, &phenotypes[i]) {
                    Ok(p) => Some(p),
                    Err(error) => {
                        refused.push(Refused { index: i, error });
                        continue;
                    }
                },
            };
            kept.push((i, kernel_name(generation, i), program));
        }
        if kept.is_empty() {
            continue;
        }
        let members: Vec<Member<'_>> = kept
            .iter()
            .map(|(i, k, p)| Member { kernel: k, phenotype: &phenotypes[*i], program: p.as_ref() })
            .collect();
        let stem = render::unit_kernel_name(generation, u);
        let Rendered { unit, kernels } = render(problem, language, shape, arch, &stem, &members);
        units.push(BatchUnit { unit, members: kept.iter().map(|(i, ..)| *i).collect(), kernels });
    }
    refused.sort_by_key(|r| r.index);
    Batch { units, refused }
}

/// Which code a compiled fitting unit is ([`fit_units`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitCodeWriter {
    /// CUDA C for NVRTC, the whole kernel ([`crate::interpreter::fit_code_source`]).
    CudaC,
    /// PTX for nvJitLink to link with [`crate::interpreter::fit_link_source`] of the same width
    /// ([`crate::ptx::fit_member_unit`]), for this architecture.
    Ptx(SmArch),
}

/// The compiled fitting units of `programs` (each its words and parameter count, each taken by
/// [`crate::interpreter::fit_compiles`]) for `workers` compilers side by side
/// ([`crate::interpreter::fit_code_groups`]), each written as `writer` says.
pub fn fit_units(
    problem: &Problem,
    programs: &[(&[u32], usize)],
    workers: usize,
    writer: FitCodeWriter,
) -> Vec<crate::interpreter::FitCodeUnit> {
    crate::interpreter::fit_code_groups(programs, workers)
        .into_iter()
        .map(|(width, members)| {
            let words: Vec<&[u32]> = members.iter().map(|&k| programs[k].0).collect();
            let source = match writer {
                FitCodeWriter::CudaC => crate::interpreter::fit_code_source(problem, width, &words),
                FitCodeWriter::Ptx(arch) => ptx::fit_member_unit(width, &words, arch),
            };
            crate::interpreter::FitCodeUnit { width, members, source }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phenotypes(n: usize) -> Vec<Phenotype> {
        (0..n).map(|i| Phenotype::new(format!("x + {i}.0f"))).collect()
    }

    #[test]
    fn every_individual_lands_in_exactly_one_unit_in_order_in_both_languages() {
        let problem = Problem::builtin("keijzer6").unwrap();
        for language in [Language::CudaC, Language::Ptx] {
            for shape in [Shape::Kernels, Shape::Switch] {
                let batch = render_batch(
                    &problem,
                    language,
                    shape,
                    SmArch::SM_90,
                    &phenotypes(10),
                    3,
                    &[0..4, 4..7, 7..10],
                );
                let members: Vec<usize> = batch.units.iter().flat_map(|u| u.members.clone()).collect();
                assert_eq!(members, (0..10).collect::<Vec<_>>());
                assert!(batch.refused.is_empty());
                for u in &batch.units {
                    assert_eq!(u.unit.language, language);
                    assert!(u.unit.name.ends_with(language.extension()), "{}", u.unit.name);
                    assert_eq!(u.kernels.len(), u.members.len());
                }
            }
        }
    }

    #[test]
    fn a_ptx_batch_lists_the_phenotypes_that_do_not_parse_and_a_cuda_batch_keeps_them() {
        let problem = Problem::builtin("keijzer6").unwrap();
        let mut ps = phenotypes(4);
        ps[2] = Phenotype::new("x +");
        let ptx =
            render_batch(&problem, Language::Ptx, Shape::Kernels, SmArch::SM_90, &ps, 0, &[0..2, 2..3, 3..4]);
        assert_eq!(ptx.refused.iter().map(|r| r.index).collect::<Vec<_>>(), vec![2]);
        assert_eq!(ptx.units.len(), 2, "a part with nobody left gives no unit");
        let cuda = render_batch(
            &problem,
            Language::CudaC,
            Shape::Kernels,
            SmArch::SM_90,
            &ps,
            0,
            &[0..2, 2..3, 3..4],
        );
        assert!(cuda.refused.is_empty());
        assert_eq!(cuda.units.len(), 3);
    }

    #[test]
    fn the_key_text_names_no_generation_or_place() {
        let problem = Problem::builtin("keijzer6").unwrap();
        let p = Phenotype::new("x * 2.0f");
        let keyed = key_text(&problem, Language::CudaC, SmArch::SM_90, &p, None).unwrap();
        let k = kernel_name(3, 7);
        let member = Member { kernel: &k, phenotype: &p, program: None };
        let rendered = render(&problem, Language::CudaC, Shape::Kernels, SmArch::SM_90, &k, &[member]);
        let source = String::from_utf8(rendered.unit.source).unwrap();
        assert_eq!(source.replace("g3_i7", render::KEYED_KERNEL), keyed);
        let keyed_ptx = key_text(&problem, Language::Ptx, SmArch::SM_90, &p, None).unwrap();
        assert!(keyed_ptx.contains(render::KEYED_KERNEL) && !keyed_ptx.contains("g3_i7"));
    }

    #[test]
    fn a_unit_of_ptx_weighs_more_fixed_cost_than_one_of_cuda_c() {
        let (cuda_floor, cuda_cap) = bounds(Language::CudaC);
        let (ptx_floor, ptx_cap) = bounds(Language::Ptx);
        assert!(cuda_floor < cuda_cap && ptx_floor < ptx_cap);
        assert!(ptx_floor > cuda_floor);
        let problem = Problem::builtin("keijzer6").unwrap();
        let p = Phenotype::new("x * 2.0f");
        let program = Program::parse(&problem, &p).unwrap();
        assert!(weight(&problem, Language::Ptx, &p, Some(&program)) > 0.0);
        assert_eq!(weight(&problem, Language::Ptx, &p, None), weight(&problem, Language::CudaC, &p, None));
    }

    #[test]
    fn a_unit_has_one_header_and_each_kernel_by_name() {
        let problem = Problem::builtin("keijzer6").unwrap();
        let phenotypes: Vec<Phenotype> =
            ["sinf(x)", "x", "sinf(x) + cosf(x)"].iter().map(|s| Phenotype::new(*s)).collect();
        let units = render_batch(
            &problem,
            Language::Ptx,
            Shape::Kernels,
            SmArch::SM_90,
            &phenotypes,
            2,
            std::slice::from_ref(&(0..3)),
        );
        let u = &units.units[0];
        assert_eq!(u.unit.name, "g2_u0.ptx");
        assert_eq!(u.kernels, ["g2_i0", "g2_i1", "g2_i2"]);
        assert_eq!(u.source().matches(".version 9.0").count(), 1);
        assert_eq!(u.source().matches(".extern .func").count(), 2);
        for k in &u.kernels {
            assert_eq!(u.source().matches(&format!(".visible .entry {k}(")).count(), 1);
        }
        // The parameters of the template's kernel, in order: in_x, out_y, NCASES.
        assert!(u.source().contains(
            "\t.param .u64 g2_i1_param_0,\n\t.param .u64 g2_i1_param_1,\n\t.param .u32 g2_i1_param_2\n)"
        ));
    }

    #[test]
    fn the_keyed_ptx_names_no_generation_or_place() {
        let problem = Problem::builtin("search").unwrap();
        let p = Phenotype::new("OUTPUT = INPUT[SEARCH % LENINPUT];");
        let keyed = key_text(&problem, Language::Ptx, SmArch::SM_90, &p, None).unwrap();
        let units = render_batch(
            &problem,
            Language::Ptx,
            Shape::Kernels,
            SmArch::SM_90,
            std::slice::from_ref(&p),
            5,
            std::slice::from_ref(&(0..1)),
        );
        assert_eq!(units.units[0].source().replace("g5_i0", "gpfarm_individual"), keyed);
        assert_ne!(keyed, key_text(&problem, Language::Ptx, SmArch(80), &p, None).unwrap());
        assert!(
            key_text(&problem, Language::Ptx, SmArch::SM_90, &Phenotype::new("OUTPUT = ;"), None).is_err()
        );
    }
}
