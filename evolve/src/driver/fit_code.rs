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
//! interpreter's kernels. On the PTX route a unit is the PTX route's own code: each member's
//! sweeps emitted as PTX ([`gpfarm_kernels::ptx::fit_member_unit`]) and linked by nvJitLink, on
//! the same threads, with the fitting template of its width (compiled by NVRTC once per run,
//! [`gpfarm_kernels::interpreter::fit_link_source`]), so no C compiler runs per structure.
//!
//! Must never change what a fit finds: only programs the interpreter's kernels differentiate in
//! reverse are compiled ([`gpfarm_kernels::interpreter::fit_compiles`]), whose sums the compiled
//! kernel gives bit for bit, so a run is the same whichever fits them.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;

use gpfarm_client::{
    BuildConfig, CompileOptions, Compiler, CompilerError, CompilerSpec, Unit, UnitOutcome, Workers,
};
use gpfarm_gp::Problem;
use gpfarm_kernels::interpreter::{FIT_LINK_FLAGS, FIT_LINK_MAX_REGISTERS, FitCodeUnit, fit_link_source};
use gpfarm_kernels::unit::{FitCodeWriter, fit_units};

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
    units: FitUnits,
}

/// A structure's key in the store: its words and its parameter count.
pub(super) fn structure_key(words: &[u32], params: usize) -> blake3::Hash {
    // The same key as hashing word by word, in one update (a call per word cost about 2 µs a
    // program).
    let mut bytes = Vec::with_capacity(8 + 4 * words.len());
    bytes.extend_from_slice(&(params as u64).to_le_bytes());
    bytes.extend(words.iter().flat_map(|w| w.to_le_bytes()));
    blake3::hash(&bytes)
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
    /// With `ptx` (the PTX route), each unit is PTX emitted from the programs' bytecode
    /// ([`gpfarm_kernels::ptx::fit_member_unit`]) linked by nvJitLink with its width's fitting
    /// template, which NVRTC compiles once per run; else CUDA C compiled by NVRTC.
    pub(super) fn code_for(
        &mut self,
        problem: &Problem,
        options: &CompileOptions,
        toolchain: &str,
        programs: &[(blake3::Hash, &[u32], usize)],
        ptx: bool,
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
            self.compile(problem, options, toolchain, &todo, ptx);
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
        ptx: bool,
    ) {
        let compiler = self.compiler.get_or_insert_with(|| start(options, toolchain));
        let Some(compiler) = compiler.as_mut() else {
            for (key, _, _) in todo {
                self.by_structure.insert(*key, None);
            }
            return;
        };
        let shapes: Vec<(&[u32], usize)> = todo.iter().map(|(_, words, np)| (*words, *np)).collect();
        let workers = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        let compiled = match self.units.compile(compiler.as_mut(), problem, options, &shapes, workers, ptx) {
            Ok(compiled) => compiled,
            Err(e) => {
                tracing::warn!("compiled fitting kernels are not used: {e}");
                self.compiler = Some(None);
                Vec::new()
            }
        };
        let mut planned = vec![false; todo.len()];
        for (plan, cubin) in compiled {
            plan.members.iter().for_each(|&k| planned[k] = true);
            let cubin = match cubin {
                Ok(c) => Some(c),
                Err(why) => {
                    tracing::warn!(
                        "no compiled fitting kernel; the interpreter's kernels fit its programs: {why}"
                    );
                    None
                }
            };
            let unit = self.next;
            self.next += 1;
            if let Some(c) = cubin {
                self.bytes += c.len();
                self.cubins.insert(unit, Arc::new(c));
            }
            let compiled = self.cubins.contains_key(&unit);
            for (m, &k) in plan.members.iter().enumerate() {
                self.by_structure.insert(todo[k].0, compiled.then_some((unit, m as u32)));
            }
        }
        for (k, _) in planned.iter().enumerate().filter(|(_, p)| !**p) {
            self.by_structure.insert(todo[k].0, None);
        }
    }
}

/// A compiled fitting unit's plan and its CUBIN, or why it has none.
pub type CompiledFitUnit = (FitCodeUnit, Result<Vec<u8>, String>);

/// Compiles compiled fitting units ([`fit_units`]), keeping what every later batch reuses:
/// the PTX route's fitting templates ([`fit_link_source`], relocatable CUBIN), which its units are
/// linked with, by their source and options (so one `FitUnits` may serve several problems;
/// `None`: it did not compile, and that width's programs are left to the interpreter's kernels).
/// The units give the interpreter's sums bit for bit only when NVRTC's flags are the default
/// `--fmad=false` alone (the driver's fits use nothing else).
#[derive(Default)]
pub struct FitUnits {
    templates: HashMap<blake3::Hash, Option<Vec<u8>>>,
    /// Units named so far (each unit's name is its own, for logs).
    named: u64,
}

impl FitUnits {
    /// The compiled fitting units of `programs` (words and parameter count, each taken by
    /// [`gpfarm_kernels::interpreter::fit_compiles`]) for `workers` compilers, compiled on
    /// `compiler` in one batch: each unit's plan (its members are indices into `programs`) and
    /// its CUBIN, or why it has none. With `ptx` (the PTX route) a unit is PTX emitted from the
    /// programs' bytecode ([`gpfarm_kernels::ptx::fit_member_unit`]) that nvJitLink links with
    /// its width's template, compiled here first where it is not yet (with the run's NVRTC flags
    /// and [`FIT_LINK_FLAGS`]); PTX is linked at nvJitLink's default level (-O3) whatever the
    /// run's link flags, since a fitting kernel runs over every case at every iteration, with
    /// at most [`FIT_LINK_MAX_REGISTERS`] registers (the wide templates' cap). Without
    /// `ptx`, CUDA C for NVRTC with the run's options.
    pub fn compile(
        &mut self,
        compiler: &mut dyn Compiler,
        problem: &Problem,
        options: &CompileOptions,
        programs: &[(&[u32], usize)],
        workers: usize,
        ptx: bool,
    ) -> Result<Vec<CompiledFitUnit>, CompilerError> {
        let writer = if ptx { FitCodeWriter::Ptx(options.arch) } else { FitCodeWriter::CudaC };
        let plans = fit_units(problem, programs, workers, writer);
        let templates = match ptx {
            true => {
                let widths: Vec<usize> = plans.iter().map(|p| p.width).collect();
                self.compile_templates(compiler, problem, options, &widths)?
            }
            false => HashMap::new(),
        };
        let mut units: Vec<Unit> = Vec::new();
        let mut out: Vec<CompiledFitUnit> = Vec::new();
        // Indices into `out` of the units sent.
        let mut sent = Vec::new();
        for plan in plans {
            let n = self.named;
            self.named += 1;
            let unit = match (&plan.source, ptx) {
                (Err(e), _) => Err(e.to_string()),
                (Ok(ptx_text), true) => match templates.get(&plan.width).cloned().flatten() {
                    Some(t) => {
                        Ok(Unit::ptx_linked(format!("gpfarm_fit_code_{n}.ptx"), ptx_text.clone(), vec![t]))
                    }
                    None => Err(format!("no fitting template of width {}", plan.width)),
                },
                (Ok(source), false) => Ok(Unit::new(format!("gpfarm_fit_code_{n}.cu"), source.clone())),
            };
            match unit {
                Ok(u) => {
                    units.push(u);
                    sent.push(out.len());
                    out.push((plan, Err(String::new())));
                }
                Err(why) => out.push((plan, Err(why))),
            }
        }
        if units.is_empty() {
            return Ok(out);
        }
        let options = if ptx {
            let link_flags = vec![format!("-maxrregcount={FIT_LINK_MAX_REGISTERS}")];
            CompileOptions { link_flags, ..options.clone() }
        } else {
            options.clone()
        };
        let batch = compiler.compile(&units, &options)?;
        for (i, at) in sent.into_iter().enumerate() {
            out[at].1 = match batch.results.get(i).map(|r| (&r.outcome, &r.log)) {
                Some((UnitOutcome::Cubin(c), _)) => Ok(c.clone()),
                Some((UnitOutcome::Failed(f), log)) => {
                    Err(format!("the unit did not compile ({f:?}): {log}"))
                }
                None => Err("the compiler returned too few results".to_owned()),
            };
        }
        Ok(out)
    }

    /// The fitting templates of `widths` for `problem` and `options` (`None` where one does not
    /// compile), compiling in one batch those not compiled before.
    fn compile_templates(
        &mut self,
        compiler: &mut dyn Compiler,
        problem: &Problem,
        options: &CompileOptions,
        widths: &[usize],
    ) -> Result<HashMap<usize, Option<Vec<u8>>>, CompilerError> {
        let mut flags = options.flags.clone();
        flags.extend(FIT_LINK_FLAGS.iter().map(|f| f.to_string()));
        let options = CompileOptions { flags, ..options.clone() };
        let mut wanted: Vec<usize> = widths.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let mut keys = HashMap::new();
        let mut units = Vec::new();
        let mut of = Vec::new();
        for w in wanted {
            match fit_link_source(problem, w) {
                Ok(source) => {
                    let mut h = blake3::Hasher::new();
                    h.update(source.as_bytes());
                    h.update(format!("{options:?}").as_bytes());
                    let key = h.finalize();
                    keys.insert(w, Some(key));
                    if !self.templates.contains_key(&key) && !of.iter().any(|(_, k)| *k == key) {
                        units.push(Unit::new(format!("gpfarm_fit_link_{w}.cu"), source));
                        of.push((w, key));
                    }
                }
                Err(e) => {
                    tracing::warn!("no fitting template of width {w}: {e}");
                    keys.insert(w, None);
                }
            }
        }
        if !units.is_empty() {
            let batch = compiler.compile(&units, &options)?;
            for (i, (w, key)) in of.into_iter().enumerate() {
                let cubin = match batch.results.get(i).map(|r| (&r.outcome, &r.log)) {
                    Some((UnitOutcome::Cubin(c), _)) => Some(c.clone()),
                    Some((UnitOutcome::Failed(f), log)) => {
                        tracing::warn!("the fitting template of width {w} did not compile ({f:?}): {log}");
                        None
                    }
                    None => None,
                };
                self.templates.insert(key, cubin);
            }
        }
        Ok(keys
            .into_iter()
            .map(|(w, key)| (w, key.and_then(|k| self.templates.get(&k).cloned().flatten())))
            .collect())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_structure_s_key_is_its_count_and_words_hashed_as_one_stream() {
        let words = [0x0102_0304u32, 7, 0xffff_ffff, 0];
        let mut h = blake3::Hasher::new();
        h.update(&3u64.to_le_bytes());
        for w in words {
            h.update(&w.to_le_bytes());
        }
        assert_eq!(structure_key(&words, 3), h.finalize());
        assert_ne!(structure_key(&words, 4), structure_key(&words, 3));
        assert_ne!(structure_key(&words[..3], 3), structure_key(&words, 3));
    }
}
