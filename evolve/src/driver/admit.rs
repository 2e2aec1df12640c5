//! Admitting newly bred individuals: each is keyed by its compiled code and then reused (its
//! fitness is known from an earlier generation), merged (an identical one is being compiled),
//! found in the disk cache, or pooled to be compiled. Must never admit an individual twice or
//! drop one: every one handed out by the pipeline ends in exactly one of those four places.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use gpfarm_client::CacheKey;
use gpfarm_gp::Born;
use gpfarm_gp::program::instantiate;
use gpfarm_gp::{Fitness, Program};
use gpfarm_kernels::interpreter::Bytecode;
use gpfarm_kernels::unit::key_text;
use gpfarm_protocol::{Language, Route};

use super::structures::Gather;
use super::{Driver, Member, Ready};
use crate::account::Chain;
use crate::error::EvolveError;

impl Driver<'_> {
    /// Takes newly bred individuals: reused, merged, found on disk, or put in a pool to compile.
    /// Returns whether any fitness became known. Its time is charged to the individuals'
    /// generations, an equal share each.
    pub(super) fn admit(&mut self, mut born: Vec<Born>) -> Result<bool, EvolveError> {
        let mut progress = false;
        // Units found on disk (numbered by their object) and structures compiled before.
        let (mut from_disk, mut disk_units) = (Gather::default(), HashMap::<String, u64>::new());
        let mut compiled = Gather::default();
        let now = Instant::now();
        let prepared = self.prepare(&mut born);
        if gpfarm_kernels::gpu::fit_profiling() {
            eprintln!(
                "gpfarm admit profile: {} prepared in {:.3} ms",
                born.len(),
                now.elapsed().as_secs_f64() * 1e3
            );
        }
        // Counted per generation once, not per individual: a generation holds up to 10^6.
        let mut counted: Vec<(usize, usize)> = Vec::new();
        for b in &born {
            match counted.last_mut() {
                Some((g, n)) if *g == b.generation => *n += 1,
                _ => counted.push((b.generation, 1)),
            }
        }
        for &(g, n) in &counted {
            self.account(g).born += n;
            self.totals.individuals_evaluated += n;
        }
        let no_params: Arc<[f32]> = Arc::from([]);
        for (b, prepared) in born.into_iter().zip(prepared) {
            let Prepared { program, code, key, code_key } = prepared;
            // The PTX route emits from the typed tree: a phenotype the parser refuses cannot be
            // emitted, and gets the worst fitness, as the CPU evaluator gives it.
            let program = match program {
                Ok(program) => program,
                Err(e) => {
                    tracing::warn!(
                        "individual {} of generation {} cannot take the {} route: {e}; phenotype: {}",
                        b.slot,
                        b.generation,
                        self.settings.route,
                        b.phenotype.as_str()
                    );
                    let worst = Fitness::worst(self.problem.direction());
                    self.pipeline.set_fitness(b.generation, b.slot, worst)?;
                    let a = self.account(b.generation);
                    a.failed += 1;
                    a.known(Chain::without_compile(now, now));
                    self.totals.failed += 1;
                    progress = true;
                    continue;
                }
            };
            // A program the interpreter cannot hold (deeper than its stack) is evaluated on the
            // CPU instead.
            let code = match code {
                Ok(code) => code,
                Err(e) => {
                    tracing::warn!(
                        "individual {} of generation {} is evaluated on the CPU: {e}",
                        b.slot,
                        b.generation
                    );
                    None
                }
            };
            let params: Arc<[f32]> =
                if self.settings.route.compiles_individuals() { b.params.into() } else { no_params.clone() };
            let member = Member {
                generation: b.generation,
                slot: b.slot,
                key,
                code_key,
                phenotype: b.phenotype,
                params,
                program,
                code,
                born: now,
            };
            // Its structure's key, when its compiled code takes values.
            let structure = member.code_key.filter(|_| !member.params.is_empty());
            let Some(key) = member.key else {
                self.pools.entry(member.generation).or_default().push(member);
                continue;
            };
            if let Some(f) = self.memo.as_mut().and_then(|m| m.get(&key, member.generation)) {
                self.pipeline.set_fitness(member.generation, member.slot, f)?;
                let a = self.account(member.generation);
                a.reused += 1;
                a.known(Chain::without_compile(now, now));
                self.totals.reused += 1;
                progress = true;
            } else if let Some(w) = self.waiting.get_mut(&key) {
                let generation = member.generation;
                w.push(member);
                self.account(generation).duplicates += 1;
                self.totals.duplicates += 1;
            } else if let Some((unit, cubin, kernel)) = structure.and_then(|k| self.structures.get(&k)) {
                // Its structure was compiled before: run that code with its values.
                self.waiting.insert(key, Vec::new());
                self.account(member.generation).structure_hits += 1;
                self.totals.structure_hits += 1;
                compiled.add(unit, &cubin, kernel, member, now);
            } else if let Some(w) = structure.and_then(|k| self.structures.compiling.get_mut(&k)) {
                // Its structure is being compiled: it waits for that code.
                self.waiting.insert(key, Vec::new());
                w.push(member);
            } else if let Some(hit) = self
                .disk
                .as_ref()
                .filter(|_| self.settings.route.compiles_individuals())
                .and_then(|d| d.get(&member.code_key?))
            {
                self.waiting.insert(key, Vec::new());
                self.account(member.generation).disk_hits += 1;
                self.totals.disk_hits += 1;
                let next = disk_units.len() as u64;
                let unit = *disk_units.entry(hit.object).or_insert(next);
                from_disk.add(unit, &Arc::new(hit.cubin), hit.kernel, member, now);
            } else {
                self.waiting.insert(key, Vec::new());
                if let Some(k) = structure {
                    self.structures.compiling.insert(k, Vec::new());
                }
                self.pools.entry(member.generation).or_default().push(member);
            }
        }
        let mut ready: Vec<Ready> = from_disk.into_ready();
        ready.extend(compiled.into_ready());
        if self.settings.overlap && !ready.is_empty() {
            self.evaluate(ready)?;
            progress = true;
        } else {
            // Evaluated with the rest of their generation (see `release_held`).
            for r in ready {
                self.held.entry(r.members[0].generation).or_default().push(r);
            }
        }
        let share = now.elapsed() / counted.iter().map(|(_, n)| *n).sum::<usize>().max(1) as u32;
        for (g, n) in counted {
            self.account(g).admit += share * n as u32;
        }
        Ok(progress)
    }
}

/// What admitting an individual computes before placing it (after writing its values into its
/// phenotype on the routes that do not compile individuals): its typed tree (on every route but
/// NVRTC; `Err` when the parser refuses it), its bytecode (on the interpreter and CPU routes;
/// `Err` when the interpreter cannot hold it) and its key.
struct Prepared {
    program: Result<Option<Arc<Program>>, String>,
    code: Result<Option<Arc<Bytecode>>, String>,
    key: Option<CacheKey>,
    code_key: Option<CacheKey>,
}

impl Driver<'_> {
    /// Parses (where breeding did not), assembles into bytecode and keys `born`, in order, on the
    /// run's threads. Each individual's result depends on it alone, so the threads change
    /// nothing but the time.
    fn prepare(&mut self, born: &mut [Born]) -> Vec<Prepared> {
        let pool = self.pool();
        let (problem, options, toolchain) = (self.problem, self.options, self.toolchain.as_str());
        let (route, cache) = (self.settings.route, self.settings.cache);
        let one = |b: &mut Born| prepare_one(problem, options, toolchain, (route, cache), b);
        match pool {
            Some(pool) if born.len() > 1 => pool.install(|| born.par_iter_mut().map(one).collect()),
            _ => born.iter_mut().map(one).collect(),
        }
    }
}

/// [`Prepared`] for `b`, with the run's `(route, cache)`.
fn prepare_one(
    problem: &gpfarm_gp::Problem,
    options: &gpfarm_client::CompileOptions,
    toolchain: &str,
    (route, cache): (Route, bool),
    b: &mut Born,
) -> Prepared {
    // Compiled code takes the values as an argument (compiled once per structure); the
    // interpreter and the CPU evaluator run them written in. The text is lexed again to write
    // them; the tree breeding parsed is not that text's, so it is parsed again below.
    if !route.compiles_individuals() && !b.params.is_empty() {
        b.phenotype = instantiate(&b.phenotype, &b.params);
        b.program = None;
    }
    // The tree breeding parsed, where it did (taken, so that it is freed on this thread where
    // nothing keeps it); else parsed here (for its error).
    let parsed = match b.program.take() {
        Some(p) => Ok(p),
        None => Program::parse(problem, &b.phenotype).map(Arc::new),
    };
    let program = match route {
        // NVRTC compiles the text itself: a phenotype the parser refuses is compiled all the
        // same; the tree, when there is one, tells the renderer whether its loops need counting.
        // Declared functions that inline past the bound fail on every route, this one included.
        Route::Nvrtc => match parsed {
            Ok(p) => Ok(Some(p)),
            Err(e @ gpfarm_gp::program::ParseError::Inlined { .. }) => Err(e.to_string()),
            Err(_) => Ok(None),
        },
        Route::Ptx | Route::Interpreter | Route::Cpu => parsed.map(Some).map_err(|e| e.to_string()),
    };
    let code = match (&program, route.compiles_individuals()) {
        (Ok(Some(p)), false) => gpfarm_kernels::interpreter::assemble(problem, p)
            .map(|c| Some(Arc::new(c)))
            .map_err(|e| e.to_string()),
        _ => Ok(None),
    };
    // Keyed by the code it compiles to: its bytecode, its kernel alone under a fixed name, or
    // its CUDA C.
    let code_key = match (&program, &code) {
        (Err(_), _) => None,
        _ if !cache => None,
        (_, Ok(Some(c))) => {
            let bytes: Vec<u8> = c.words.iter().flat_map(|w| w.to_le_bytes()).collect();
            Some(CacheKey::new(&bytes, options, toolchain))
        }
        (Ok(program), _) => {
            // The interpreter's program it cannot hold (evaluated on the CPU) is keyed by its PTX.
            let language = route.language().unwrap_or(Language::Ptx);
            key_text(problem, language, options.arch, &b.phenotype, program.as_deref())
                .ok()
                .map(|text| CacheKey::new(text.as_bytes(), options, toolchain))
        }
    };
    // What it is: its code, and the values its compiled code takes as an argument.
    let key = match code_key {
        Some(k) if route.compiles_individuals() && !b.params.is_empty() => {
            let mut bytes = k.hex().into_bytes();
            bytes.extend(b.params.iter().flat_map(|v| v.to_bits().to_le_bytes()));
            Some(CacheKey::new(&bytes, options, toolchain))
        }
        other => other,
    };
    // The interpreter runs the bytecode: the tree is not kept (a member that falls back to the
    // CPU is parsed again there).
    let program = match (route, &code) {
        (Route::Interpreter, Ok(Some(_))) => Ok(None),
        _ => program,
    };
    Prepared { program, code, key, code_key }
}
