//! Grammar-guided GP for gpfarm: BNF grammars, derivation trees and grammatical evolution's
//! genotype-to-phenotype mapping, variation and selection operators, the generational engine, problems as data, and
//! the CPU reference evaluator. Must never know about CUDA: it states the kernel
//! convention of each problem's template, and the `kernels` crate renders and runs it.

pub mod dedup;
pub mod evolution;
pub mod fit;
pub mod fitness;
pub mod grammar;
pub mod init;
pub mod limits;
pub mod mapping;
pub mod operators;
pub mod pipeline;
pub mod population;
pub mod problem;
pub mod program;
pub mod simplify;
pub mod tree;

pub use dedup::Dedup;
pub use evolution::{Evolution, RunReport, run_cpu, run_cpu_with};
pub use fit::{FitSettings, Fitted, LmStart, Sums, fit, fittable, moved_start};
pub use fitness::{Direction, Fitness, FitnessKind};
pub use grammar::{Grammar, GrammarError};
pub use init::InitMethod;
pub use mapping::{Derivation, Genome, InvalidReason, Mapping, MappingLimits, Phenotype, map};
pub use pipeline::{Born, FrontPoint, GenerationStats, Migrant, Pipeline, choose, pareto_front};
pub use population::{
    EvolutionConfig, EvolutionError, FIT_CASES, FitConfig, Individual, Representation, Seed,
};
pub use problem::{Column, KernelName, KernelParam, ParamRole, Problem, ProblemError, Template};
pub use program::{Evaluation, Program, evaluate, evaluate_all, evaluate_phenotype};
