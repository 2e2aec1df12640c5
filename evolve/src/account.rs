//! Gathering what each generation cost while it is bred, compiled and evaluated: counts, times,
//! and the chain of waits of the individual whose fitness was known last. [`crate::record`]
//! turns an account into the generation's record. Must never decide anything: it only counts.

use std::time::{Duration, Instant};

/// When an individual's fitness came to be known, step by step. For one that needed no compile
/// (reused, found on disk) the compile steps are the moment it was bred.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chain {
    /// Bred (or, in generation 0, created).
    pub born: Instant,
    /// Its unit was handed to the compiler.
    pub queued: Instant,
    /// A worker started compiling the unit.
    pub started: Instant,
    /// The unit's CUBIN was back.
    pub ended: Instant,
    /// Its fitness was known.
    pub evaluated: Instant,
}

impl Chain {
    /// An individual whose fitness was known without compiling, bred at `born`.
    pub(crate) fn without_compile(born: Instant, evaluated: Instant) -> Chain {
        Chain { born, queued: born, started: born, ended: born, evaluated }
    }
}

/// What happened to one generation, gathered while it is bred, compiled and evaluated.
#[derive(Debug, Default)]
pub(crate) struct Account {
    /// Individuals handed out for a fitness (elites and failed mappings need none).
    pub born: usize,
    /// Fitness known from an earlier generation.
    pub reused: usize,
    /// Identical to an individual being compiled at the same time, and given its fitness.
    pub duplicates: usize,
    /// CUBIN found in the disk cache.
    pub disk_hits: usize,
    /// Structure compiled before with other values of its free parameters.
    pub structure_hits: usize,
    /// Compiled.
    pub compiled: usize,
    /// Got the worst fitness because they did not compile.
    pub failed: usize,
    /// Crashed NVRTC and were compiled again with the retry flags.
    pub crash_retried: usize,
    /// Of which the retry's fitness was used.
    pub crash_retry_used: usize,
    /// Got the worst fitness because their kernel faulted on the GPU or did not end in time.
    pub faults: usize,
    /// Of `faults`, those whose kernel did not end before the GPU deadline.
    pub timeouts: usize,
    /// Units compiled.
    pub units: usize,
    /// Of which, units of one individual compiled again to find who broke a unit.
    pub isolation_units: usize,
    /// Worker time compiling this generation's units.
    pub busy: Duration,
    /// NVRTC's own time, summed over units.
    pub nvrtc: Duration,
    /// Evaluating this generation's individuals.
    pub eval: Duration,
    /// Of which loading modules, launching, reading back (GPU only).
    pub load: Duration,
    pub launch: Duration,
    pub readback: Duration,
    /// Breeding this generation's individuals.
    pub breed: Duration,
    /// Admitting them (parsing, bytecode, keys, lookups).
    pub admit: Duration,
    /// Fitting their parameters.
    pub fit: Duration,
    /// Individuals whose parameters fitting moved.
    pub fitted: usize,
    /// Individuals fitted on the GPU (moved or not).
    pub fitted_on_gpu: usize,
    /// Of `fitted_on_gpu`, those fitted by compiled fitting kernels.
    pub fitted_compiled: usize,
    /// Node-evaluations of the GPU's fit, derivatives included
    /// ([`crate::record::GenerationRecord::fit_node_evals`]).
    pub fit_node_evals: u64,
    /// Of `fit`, compiling fitting kernels.
    pub fit_compile: Duration,
    /// Of `fit`, the GPU's fitting (launches, copies and the host's solves between them).
    pub fit_gpu: Duration,
    /// Of `fit_gpu`, the GPU worker's own time (uploads, launches, copies back).
    pub fit_worker: Duration,
    /// The individual whose fitness was known last.
    pub last: Option<Chain>,
}

impl Account {
    /// Notes that an individual's fitness is known, with how it came to be.
    pub(crate) fn known(&mut self, chain: Chain) {
        if self.last.is_none_or(|l| chain.evaluated >= l.evaluated) {
            self.last = Some(chain);
        }
    }
}
