//! Admitting newly bred individuals: each is keyed by its compiled code and then reused (its
//! fitness is known from an earlier generation), merged (an identical one is being compiled),
//! found in the disk cache, or pooled to be compiled. Must never admit an individual twice or
//! drop one: every one handed out by the pipeline ends in exactly one of those four places.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use gpfarm_client::CacheKey;
use gpfarm_gp::Born;
use gpfarm_gp::{Fitness, Program};
use gpfarm_kernels::keyed_source;
use gpfarm_kernels::ptx::ptx_unit;
use gpfarm_protocol::Route;

use super::{Driver, Member, Ready};
use crate::account::Chain;
use crate::error::EvolveError;

impl Driver<'_> {
    /// Takes newly bred individuals: reused, merged, found on disk, or put in a pool to compile.
    /// Returns whether any fitness became known.
    pub(super) fn admit(&mut self, born: Vec<Born>) -> Result<bool, EvolveError> {
        let mut progress = false;
        let mut from_disk: BTreeMap<String, Ready> = BTreeMap::new();
        let now = Instant::now();
        for b in born {
            self.account(b.generation).born += 1;
            self.totals.individuals_evaluated += 1;
            // The PTX route emits from the typed tree: a phenotype the parser refuses cannot be
            // emitted, and gets the worst fitness, as the CPU evaluator gives it.
            let program = match (self.settings.interpret, self.settings.route) {
                (false, Route::Nvrtc) => None,
                (true, _) | (false, Route::Ptx) => match Program::compile(self.problem, &b.phenotype) {
                    Ok(program) => Some(Arc::new(program)),
                    Err(e) => {
                        tracing::warn!(
                            "individual {} of generation {} cannot take the {} route: {e}; phenotype: {}",
                            b.slot,
                            b.generation,
                            if self.settings.interpret { "interpreter" } else { "PTX" },
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
                },
            };
            // Bytecode, on the interpreter route; a program the interpreter cannot hold (deeper
            // than its stack) is evaluated on the CPU instead.
            let code = match (&program, self.settings.interpret) {
                (Some(p), true) => match gpfarm_kernels::interp::compile(self.problem, p) {
                    Ok(code) => Some(Arc::new(code)),
                    Err(e) => {
                        tracing::warn!(
                            "individual {} of generation {} is evaluated on the CPU: {e}",
                            b.slot,
                            b.generation
                        );
                        None
                    }
                },
                _ => None,
            };
            // Keyed by the code it compiles to: its kernel alone under a fixed name, or its
            // bytecode.
            let key = self.settings.cache.then(|| {
                let text = match (&code, &program) {
                    (Some(c), _) => c.words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>(),
                    (None, Some(p)) => {
                        ptx_unit(self.problem, &[("gpfarm_individual", p)], self.options.arch).into_bytes()
                    }
                    (None, None) => keyed_source(self.problem.template(), &b.phenotype).into_bytes(),
                };
                CacheKey::new(&text, self.options, &self.toolchain)
            });
            let member = Member {
                generation: b.generation,
                slot: b.slot,
                key,
                phenotype: b.phenotype,
                program,
                code,
                born: now,
            };
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
            } else if let Some(hit) =
                self.disk.as_ref().filter(|_| !self.settings.interpret).and_then(|d| d.get(&key))
            {
                self.waiting.insert(key, Vec::new());
                self.account(member.generation).disk_hits += 1;
                self.totals.disk_hits += 1;
                let ready = from_disk.entry(hit.object).or_insert_with(|| Ready {
                    retried: false,
                    cubin: hit.cubin,
                    kernels: Vec::new(),
                    members: Vec::new(),
                    queued: now,
                    started: now,
                    ended: now,
                });
                ready.kernels.push(hit.kernel);
                ready.members.push(member);
            } else {
                self.waiting.insert(key, Vec::new());
                self.pools.entry(member.generation).or_default().push(member);
            }
        }
        let ready: Vec<Ready> = from_disk.into_values().collect();
        if self.settings.overlap && !ready.is_empty() {
            self.evaluate(ready)?;
            progress = true;
        } else {
            // Evaluated with the rest of their generation (see `release_held`).
            for r in ready {
                self.held.entry(r.members[0].generation).or_default().push(r);
            }
        }
        Ok(progress)
    }
}
