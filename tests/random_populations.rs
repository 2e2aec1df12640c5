//! Random individuals of every built-in problem compile through the farm: what the grammars can
//! produce, NVRTC accepts. NVRTC 13.0 itself crashes on a few valid programs
//! (`tests/data/nvrtc13_crash.cu`); the farm must survive that, and it must stay rare.

mod common;

use common::{config, nvrtc_or_skip};
use gpfarm_client::partition::per_unit;
use gpfarm_client::{CompileOptions, Compiler, FailureKind, Farm, SmArch, Unit, UnitOutcome};
use gpfarm_gp::{Evolution, EvolutionConfig, Problem};
use gpfarm_kernels::unit::render_batch;
use gpfarm_protocol::Language;
use gpfarm_protocol::Shape;

fn compiles_all(problem_name: &str, population: usize) {
    if !nvrtc_or_skip(problem_name) {
        return;
    }
    let problem = Problem::builtin(problem_name).unwrap();
    let config_gp =
        EvolutionConfig { population, seed: 7, generations: 50, max_size: 0, ..EvolutionConfig::default() };
    let phenotypes = Evolution::new(&problem, config_gp).unwrap().dedup().unique;
    let units = render_batch(
        &problem,
        Language::CudaC,
        Shape::Kernels,
        SmArch::SM_90,
        &phenotypes,
        0,
        &per_unit(phenotypes.len(), 32),
    )
    .units;
    let wire: Vec<Unit> = units.iter().map(|u| u.unit.clone()).collect();
    let mut farm = Farm::spawn(config(2)).unwrap();
    let options = CompileOptions::cubin(SmArch::SM_90);
    let batch = farm.compile(&wire, &options).unwrap();
    let mut suspects = Vec::new();
    for (u, r) in units.iter().zip(&batch.results) {
        match &r.outcome {
            UnitOutcome::Cubin(_) => {}
            UnitOutcome::Failed(f) if f.kind == FailureKind::Lost => {
                suspects.extend(u.members.iter().copied())
            }
            UnitOutcome::Failed(f) => panic!("{}: {f}\n{}", u.unit.name, r.log),
        }
    }
    // A unit lost to a compiler crash is split to find the individuals NVRTC cannot handle.
    let suspects: Vec<_> = suspects.iter().map(|&i| phenotypes[i].clone()).collect();
    let singles = render_batch(
        &problem,
        Language::CudaC,
        Shape::Kernels,
        SmArch::SM_90,
        &suspects,
        1,
        &per_unit(suspects.len(), 1),
    )
    .units;
    let wire: Vec<Unit> = singles.iter().map(|u| u.unit.clone()).collect();
    let again = farm.compile(&wire, &options).unwrap();
    let mut crashes = 0;
    let mut crashed = Vec::new();
    for (u, r) in singles.iter().zip(&again.results) {
        match &r.outcome {
            UnitOutcome::Cubin(_) => {}
            UnitOutcome::Failed(f) if f.kind == FailureKind::Lost => {
                crashes += 1;
                crashed.push(u.unit.clone());
            }
            UnitOutcome::Failed(f) => panic!("{}: {f}\n{}", u.unit.name, r.log),
        }
    }
    // The engine compiles such an individual once more with its crash retry flags: they must
    // compile every one.
    let flags = gpfarm_evolve::CRASH_RETRY_FLAGS.iter().map(|f| f.to_string()).collect();
    let retried = farm.compile(&crashed, &CompileOptions { flags, ..options.clone() }).unwrap();
    for (u, r) in crashed.iter().zip(&retried.results) {
        assert!(r.cubin().is_some(), "{} with the crash retry flags: {:?}\n{}", u.name, r.outcome, r.log);
    }
    eprintln!(
        "{problem_name}: {} distinct individuals in {} units; {} units lost to compiler crashes, {crashes} individuals crash NVRTC",
        phenotypes.len(),
        units.len(),
        batch.stats.lost_daemons
    );
    assert!(
        crashes <= phenotypes.len() / 100,
        "{crashes} of {} individuals crash the compiler",
        phenotypes.len()
    );
    // The farm restarted what crashed and still works.
    let after = farm.compile(&common::units(2), &options).unwrap();
    assert!(after.results.iter().all(|r| r.cubin().is_some()));
}

#[test]
fn a_thousand_random_search_individuals_compile() {
    compiles_all("search", 1000);
}

#[test]
fn a_thousand_random_multiplier5_individuals_compile() {
    compiles_all("multiplier5", 1000);
}

#[test]
fn three_hundred_random_keijzer6_individuals_compile() {
    compiles_all("keijzer6", 300);
}
