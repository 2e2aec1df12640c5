//! Structures compiled once: on the compiled routes an individual with free parameters (`p[k]`)
//! is compiled without its values, which its kernel takes as an argument. So an individual whose
//! structure was compiled before (its code's key, [`Member::code_key`]) is evaluated with that
//! CUBIN and its own values, and one whose structure is being compiled waits for that CUBIN,
//! whatever their values. Its fitness is still its own: the memo and the merging of identical
//! individuals key by the values too ([`Member::key`]).
//!
//! Must never put one kernel twice into one [`Ready`]: a kernel's step-limit flags are per
//! module, so two individuals sharing a kernel are loaded (and flagged) apart.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use gpfarm_client::{CacheKey, KeyMap};
use gpfarm_gp::Fitness;

use super::{Driver, Member, Ready};
use crate::account::Chain;
use crate::error::EvolveError;

/// Bytes of CUBIN kept before the store starts again.
const STORE_BYTES: usize = 256 << 20;

/// Compiled structures by their code's key, and the individuals waiting for one.
#[derive(Default)]
pub(super) struct Structures {
    /// Each structure's unit (by number) and its kernel there.
    kernels: KeyMap<(u64, String)>,
    /// The units' CUBIN, by number.
    cubins: HashMap<u64, Arc<Vec<u8>>>,
    bytes: usize,
    next: u64,
    /// Individuals whose structure is being compiled, by its key.
    pub(super) compiling: KeyMap<Vec<Member>>,
}

impl Structures {
    /// Remembers the structures of `ready` (its members' code keys and kernels).
    pub(super) fn store(&mut self, ready: &Ready) {
        if self.bytes + ready.cubin.len() > STORE_BYTES {
            self.kernels.clear();
            self.cubins.clear();
            self.bytes = 0;
        }
        let unit = self.next;
        self.next += 1;
        self.cubins.insert(unit, Arc::new(ready.cubin.clone()));
        self.bytes += ready.cubin.len();
        for (m, k) in ready.members.iter().zip(&ready.kernels) {
            if let Some(key) = m.code_key {
                self.kernels.insert(key, (unit, k.clone()));
            }
        }
    }

    /// The unit and kernel of a structure compiled before.
    pub(super) fn get(&self, key: &CacheKey) -> Option<(u64, Arc<Vec<u8>>, String)> {
        let (unit, kernel) = self.kernels.get(key)?;
        Some((*unit, self.cubins.get(unit)?.clone(), kernel.clone()))
    }
}

/// Collects individuals to run on compiled structures into [`Ready`]s: one per unit and round,
/// each kernel at most once per round.
#[derive(Default)]
pub(super) struct Gather {
    ready: HashMap<(u64, usize), Ready>,
    rounds: HashMap<(u64, String), usize>,
}

impl Gather {
    /// Adds `m` to run kernel `kernel` of unit `unit` (CUBIN `cubin`).
    pub(super) fn add(&mut self, unit: u64, cubin: &Arc<Vec<u8>>, kernel: String, m: Member, at: Instant) {
        let round = self.rounds.entry((unit, kernel.clone())).or_insert(0);
        let r = self.ready.entry((unit, *round)).or_insert_with(|| Ready {
            retried: false,
            cubin: cubin.as_ref().clone(),
            kernels: Vec::new(),
            members: Vec::new(),
            queued: at,
            started: at,
            ended: at,
        });
        *round += 1;
        r.kernels.push(kernel);
        r.members.push(m);
    }

    /// The gathered units, in a fixed order.
    pub(super) fn into_ready(self) -> Vec<Ready> {
        let mut v: Vec<((u64, usize), Ready)> = self.ready.into_iter().collect();
        v.sort_by_key(|(k, _)| *k);
        v.into_iter().map(|(_, r)| r).collect()
    }
}

impl Driver<'_> {
    /// Units that just compiled: their structures are remembered, and the individuals waiting
    /// for them join as units of their own with the same CUBIN.
    pub(super) fn on_structures(&mut self, ready: &[Ready]) -> Vec<Ready> {
        let mut gather = Gather::default();
        for r in ready {
            if !r.members.iter().any(|m| m.code_key.is_some() && !m.params.is_empty()) {
                continue;
            }
            if !r.retried {
                self.structures.store(r);
            }
            let cubin = Arc::new(r.cubin.clone());
            let unit = self.structures.next;
            self.structures.next += 1;
            for (m, k) in r.members.iter().zip(&r.kernels) {
                let Some(key) = m.code_key else { continue };
                for w in self.structures.compiling.remove(&key).unwrap_or_default() {
                    self.account(w.generation).structure_hits += 1;
                    self.totals.structure_hits += 1;
                    gather.add(unit, &cubin, k.clone(), w, r.ended);
                }
            }
        }
        gather.into_ready()
    }

    /// `m` did not compile: neither does any individual waiting for its structure, which gets
    /// the worst fitness too.
    pub(super) fn fail_structure(&mut self, m: &Member, chain: Chain) -> Result<(), EvolveError> {
        let Some(key) = m.code_key else { return Ok(()) };
        let worst = Fitness::worst(self.problem.direction());
        for w in self.structures.compiling.remove(&key).unwrap_or_default() {
            self.account(w.generation).failed += 1;
            self.totals.failed += 1;
            self.resolve(&w, worst, false, Chain { born: w.born, ..chain })?;
        }
        Ok(())
    }
}
