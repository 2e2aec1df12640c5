//! Fitting the free parameters (`p[k]`) of newly bred individuals before they are admitted:
//! Levenberg–Marquardt on the CPU reference evaluator's forward-mode derivatives
//! ([`gpfarm_gp::fit`]), one individual per task on a pool of threads. Each individual then goes on
//! with its values written into its phenotype ([`gpfarm_gp::program::instantiate`]), so every
//! route evaluates exactly the values fitted, and caching keys it by them. Must never let the
//! thread count or the order of work change a value: whether an individual is fitted is drawn
//! from the run's seed, its generation and its slot; the fit itself is a pure function of the
//! problem, the run's seed, the phenotype and the starting values, so an individual identical to
//! one fitted before takes that one's values without fitting again.

use std::time::Instant;

use gpfarm_gp::program::instantiate;
use gpfarm_gp::{Born, FitSettings, Program, fit};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::Driver;
use crate::error::EvolveError;

/// Fits remembered (their values, or that the fit moved nothing) before the memo starts again.
const FIT_MEMO_CAPACITY: usize = 200_000;

/// The key of a fit: the run's seed, the phenotype and the starting values' bits.
fn fit_key(seed: u64, b: &Born) -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    h.update(&(b.phenotype.as_str().len() as u64).to_le_bytes());
    h.update(b.phenotype.as_str().as_bytes());
    for v in &b.params {
        h.update(&v.to_bits().to_le_bytes());
    }
    h.finalize()
}

/// Stack of the fitting threads: derivatives recurse once per nesting level, as evaluation does.
const FIT_STACK: usize = 16 << 20;

impl Driver<'_> {
    /// Fits the parameters of those of `born` the run's [`gpfarm_gp::FitConfig`] selects, records
    /// the values with the pipeline, and writes every individual's values into its phenotype.
    pub(super) fn fit(&mut self, mut born: Vec<Born>) -> Result<Vec<Born>, EvolveError> {
        if born.iter().all(|b| b.params.is_empty()) {
            return Ok(born);
        }
        let started = Instant::now();
        let config = self.pipeline.config().fit;
        let seed = self.pipeline.config().seed;
        let settings = FitSettings { iterations: config.iterations, restarts: config.restarts };
        if self
            .fit_problem
            .as_ref()
            .is_none_or(|p| p.cases().len() != config.cases.min(self.problem.cases().len()))
        {
            self.fit_problem = Some(self.problem.strided(config.cases));
        }
        let problem = self.fit_problem.as_ref().expect("set above");
        // What each individual needs: nothing, a fit, or the values of an identical one's fit.
        let mut todo: Vec<(usize, blake3::Hash)> = Vec::new();
        let mut known: Vec<Option<Option<Vec<f32>>>> = vec![None; born.len()];
        for (k, b) in born.iter().enumerate() {
            if b.params.is_empty() || config.iterations == 0 {
                continue;
            }
            let mut draw = ChaCha8Rng::seed_from_u64(
                seed ^ (b.generation as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ (b.slot as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F),
            );
            if !draw.random_bool(config.share) {
                continue;
            }
            let key = fit_key(seed, b);
            match self.fit_memo.get(&key) {
                Some(values) => known[k] = Some(values.clone()),
                None => todo.push((k, key)),
            }
        }
        let one = |&(k, key): &(usize, blake3::Hash)| -> Option<Vec<f32>> {
            let b = &born[k];
            let fit_seed = u64::from_le_bytes(key.as_bytes()[..8].try_into().expect("8 bytes"));
            let program = Program::parse(problem, &b.phenotype).ok()?;
            let fitted = fit(problem, &program, &b.params, &settings, fit_seed)?;
            (fitted.params != b.params).then_some(fitted.params)
        };
        if self.fit_pool.is_none() {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(self.eval_threads.get())
                .stack_size(FIT_STACK)
                .thread_name(|k| format!("gpfarm-fit-{k}"))
                .build();
            // No pool (no threads could be started): fit on this thread.
            self.fit_pool = Some(pool.ok());
        }
        let fitted: Vec<Option<Vec<f32>>> = match self.fit_pool.as_ref().and_then(Option::as_ref) {
            Some(pool) => pool.install(|| todo.par_iter().map(one).collect()),
            None => todo.iter().map(one).collect(),
        };
        if self.fit_memo.len() + todo.len() > FIT_MEMO_CAPACITY {
            self.fit_memo.clear();
        }
        for ((k, key), values) in todo.into_iter().zip(fitted) {
            self.fit_memo.insert(key, values.clone());
            known[k] = Some(values);
        }
        for (b, fitted) in born.iter_mut().zip(known) {
            if let Some(Some(params)) = fitted {
                self.pipeline.set_fitted(b.generation, b.slot, params.clone())?;
                b.params = params;
                self.account(b.generation).fitted += 1;
            }
            if !b.params.is_empty() {
                b.phenotype = instantiate(&b.phenotype, &b.params);
            }
        }
        let took = started.elapsed();
        let share = took / born.len().max(1) as u32;
        for b in &born {
            self.account(b.generation).fit += share;
        }
        self.totals.fit_s += took.as_secs_f64();
        Ok(born)
    }
}
