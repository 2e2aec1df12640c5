//! Compiled fitting kernels: a program with free parameters that is straight-line float code can
//! be fitted on the GPU by a kernel compiled for its structure
//! ([`gpfarm_kernels::interpreter::fit_code_source`]) instead of the interpreter's fitting
//! kernels. Its sums are the interpreter's in reverse, bit for bit, at a fraction of the time per
//! case, for the price of compiling it once: the store keeps each structure's unit (by its
//! bytecode, values apart), so a structure is compiled once per run however many times it is
//! fitted again. Whether a program is worth compiling is [`crate::route::FitKernels`]'s call.
//!
//! Units are compiled by NVRTC on threads of this process ([`CompilerSpec::Threads`], one per
//! core), with the run's options; a unit that does not compile leaves its programs to the
//! interpreter's kernels. Must never change what a fit finds: only programs the interpreter's
//! kernels differentiate in reverse are compiled ([`gpfarm_kernels::interpreter::fit_compiles`]),
//! whose sums the compiled kernel gives bit for bit, so a run is the same whichever fits them.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;

use gpfarm_client::{BuildConfig, CompileOptions, Compiler, CompilerSpec, Unit, UnitOutcome, Workers};
use gpfarm_gp::Problem;
use gpfarm_kernels::interpreter::fit_code_units;

use crate::options::NO_FMAD;

/// Bytes of CUBIN kept before the store starts again.
const STORE_BYTES: usize = 256 << 20;
/// Structures remembered (compiled or not) before the store starts again.
const STORE_STRUCTURES: usize = 1 << 20;

/// Compiled fitting units by structure, and the compiler that makes them.
#[derive(Default)]
pub(super) struct FitCode {
    /// `None`: not started yet; `Some(None)`: could not be started (the interpreter's kernels
    /// fit everything).
    compiler: Option<Option<Box<dyn Compiler + Send>>>,
    /// Each structure's unit and member there (`None`: its unit did not compile).
    by_structure: HashMap<blake3::Hash, Option<(u64, u32)>>,
    cubins: HashMap<u64, Arc<Vec<u8>>>,
    next: u64,
    bytes: usize,
}

/// A structure's key in the store: its words and its parameter count.
pub(super) fn structure_key(words: &[u32], params: usize) -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    h.update(&(params as u64).to_le_bytes());
    for w in words {
        h.update(&w.to_le_bytes());
    }
    h.finalize()
}

impl FitCode {
    /// Whether `key`'s structure is compiled already (or failed to).
    pub(super) fn known(&self, key: &blake3::Hash) -> bool {
        self.by_structure.contains_key(key)
    }

    /// No more compiled fitting kernels this run (a unit the GPU worker could not load or run).
    pub(super) fn give_up(&mut self) {
        self.compiler = Some(None);
        self.by_structure.clear();
        self.cubins.clear();
        self.bytes = 0;
    }

    /// Whether compiled fitting kernels may still be used this run.
    pub(super) fn usable(&self) -> bool {
        !matches!(self.compiler, Some(None))
    }

    /// The unit and member of each of `programs` (key, words, parameters), compiling in one batch
    /// those not compiled before; `None` where a program has no compiled kernel (its unit did not
    /// compile, or no compiler could be started). The compile's wall time is the second value.
    pub(super) fn code_for(
        &mut self,
        problem: &Problem,
        options: &CompileOptions,
        toolchain: &str,
        programs: &[(blake3::Hash, &[u32], usize)],
    ) -> (Vec<Option<(u64, u32)>>, std::time::Duration) {
        let started = std::time::Instant::now();
        if self.bytes > STORE_BYTES || self.by_structure.len() > STORE_STRUCTURES {
            self.by_structure.clear();
            self.cubins.clear();
            self.bytes = 0;
        }
        // The structures to compile, each once.
        let mut queued = std::collections::HashSet::new();
        let todo: Vec<&(blake3::Hash, &[u32], usize)> = programs
            .iter()
            .filter(|(key, _, _)| !self.by_structure.contains_key(key) && queued.insert(*key))
            .collect();
        if !todo.is_empty() {
            self.compile(problem, options, toolchain, &todo);
        }
        let code = programs.iter().map(|(key, _, _)| self.by_structure.get(key).copied().flatten()).collect();
        (code, started.elapsed())
    }

    /// The CUBIN of unit `unit`.
    pub(super) fn cubin(&self, unit: u64) -> Option<Arc<Vec<u8>>> {
        self.cubins.get(&unit).cloned()
    }

    fn compile(
        &mut self,
        problem: &Problem,
        options: &CompileOptions,
        toolchain: &str,
        todo: &[&(blake3::Hash, &[u32], usize)],
    ) {
        let compiler = self.compiler.get_or_insert_with(|| start(options, toolchain));
        if compiler.is_none() {
            for (key, _, _) in todo {
                self.by_structure.insert(*key, None);
            }
            return;
        }
        let shapes: Vec<(&[u32], usize)> = todo.iter().map(|(_, words, np)| (*words, *np)).collect();
        let mut units: Vec<Unit> = Vec::new();
        let mut members: Vec<Vec<blake3::Hash>> = Vec::new();
        let mut planned = vec![false; todo.len()];
        let workers = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        for plan in fit_code_units(problem, &shapes, workers) {
            let keys: Vec<blake3::Hash> = plan.members.iter().map(|&k| todo[k].0).collect();
            plan.members.iter().for_each(|&k| planned[k] = true);
            match plan.source {
                Ok(source) => {
                    let name = format!("gpfarm_fit_code_{}.cu", self.next + units.len() as u64);
                    units.push(Unit::new(name, source));
                    members.push(keys);
                }
                Err(e) => {
                    tracing::debug!("no compiled fitting kernel: {e}");
                    keys.into_iter().for_each(|k| {
                        self.by_structure.insert(k, None);
                    });
                }
            }
        }
        for (k, _) in planned.iter().enumerate().filter(|(_, p)| !**p) {
            self.by_structure.insert(todo[k].0, None);
        }
        if units.is_empty() {
            return;
        }
        let results =
            match self.compiler.as_mut().and_then(|c| c.as_mut()).map(|c| c.compile(&units, options)) {
                Some(Ok(batch)) => batch.results,
                Some(Err(e)) => {
                    tracing::warn!("compiled fitting kernels are not used: {e}");
                    self.compiler = Some(None);
                    Vec::new()
                }
                None => Vec::new(),
            };
        for (i, keys) in members.into_iter().enumerate() {
            let cubin = match results.get(i).map(|r| (&r.outcome, &r.log)) {
                Some((UnitOutcome::Cubin(c), _)) => Some(c.clone()),
                Some((UnitOutcome::Failed(f), log)) => {
                    tracing::warn!(
                        "a compiled fitting unit did not compile ({f:?}); the interpreter's kernels fit its programs: {log}"
                    );
                    None
                }
                None => None,
            };
            let unit = self.next;
            self.next += 1;
            if let Some(c) = cubin {
                self.bytes += c.len();
                self.cubins.insert(unit, Arc::new(c));
            }
            let compiled = self.cubins.contains_key(&unit);
            for (m, k) in keys.into_iter().enumerate() {
                self.by_structure.insert(k, compiled.then_some((unit, m as u32)));
            }
        }
    }
}

/// NVRTC on one thread per core of this process, with the run's options, if it is the run's
/// NVRTC.
fn start(options: &CompileOptions, toolchain: &str) -> Option<Box<dyn Compiler + Send>> {
    // NVRTC would contract a unit's straight-line `a * b + c` into one rounding where the
    // interpreter, an op at a time, cannot; other flags may change the math functions.
    if options.flags != [NO_FMAD] {
        tracing::warn!(
            "compiled fitting kernels are not used: they give the interpreter's bits only with the default NVRTC \
             options ({NO_FMAD} and nothing else), and the run has {:?}",
            options.flags
        );
        return None;
    }
    let threads = std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN);
    match CompilerSpec::Threads(Workers::Exactly(threads)).build(options, &BuildConfig::default()) {
        Ok(c) if c.toolchain() == toolchain => Some(c),
        Ok(c) => {
            tracing::warn!(
                "compiled fitting kernels are not used: they would be compiled with {}, the run compiles with {toolchain}",
                c.toolchain()
            );
            None
        }
        Err(e) => {
            tracing::warn!("compiled fitting kernels are not used: no compiler started ({e})");
            None
        }
    }
}
