//! Fitness of individuals evaluated before, by the key of their compiled code, so that elites,
//! copies and re-created individuals are neither compiled nor evaluated again.
//!
//! The key ([`CacheKey`]) hashes the individual's rendered kernel with the problem's preamble,
//! the compile options, the target and the exact NVRTC build; within one run the test cases are
//! fixed and evaluation is deterministic, so a remembered value is the value a recomputation
//! gives. Keeping the fitness rather than the CUBIN skips evaluation as well as compilation.
//! Bounded: an entry is 32 bytes of key and a few words, and past [`CAPACITY`] entries those
//! not seen in the last [`KEEP_GENERATIONS`] generations go.

use gpfarm_client::{CacheKey, KeyMap};
use gpfarm_gp::Fitness;

/// Entries kept before the old ones are dropped (about 50 MB).
pub const CAPACITY: usize = 1_000_000;
/// Generations an entry survives unseen once the memo is full.
pub const KEEP_GENERATIONS: usize = 5;

/// See the module documentation.
#[derive(Default)]
pub struct FitnessMemo {
    entries: KeyMap<(Fitness, usize)>,
    capacity: usize,
}

impl FitnessMemo {
    /// An empty memo holding up to `capacity` entries before it drops old ones.
    pub fn new(capacity: usize) -> FitnessMemo {
        FitnessMemo { entries: KeyMap::default(), capacity }
    }

    /// The fitness remembered for `key`, marking it seen in `generation`.
    pub fn get(&mut self, key: &CacheKey, generation: usize) -> Option<Fitness> {
        let (f, seen) = self.entries.get_mut(key)?;
        *seen = (*seen).max(generation);
        Some(*f)
    }

    /// Remembers a fitness computed in `generation`.
    pub fn insert(&mut self, key: CacheKey, f: Fitness, generation: usize) {
        self.entries.insert(key, (f, generation));
        if self.entries.len() > self.capacity {
            self.entries.retain(|_, (_, seen)| *seen + KEEP_GENERATIONS > generation);
            if self.entries.len() > self.capacity {
                self.entries.clear();
            }
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpfarm_client::{CompileOptions, SmArch};
    use gpfarm_gp::Direction;

    fn key(i: usize) -> CacheKey {
        CacheKey::new(format!("k{i}").as_bytes(), &CompileOptions::cubin(SmArch::SM_90), "t")
    }

    #[test]
    fn a_remembered_fitness_comes_back_until_it_grows_old_in_a_full_memo() {
        let mut memo = FitnessMemo::new(10);
        let f = Fitness::new(0.5, Direction::Lower);
        memo.insert(key(0), f, 0);
        assert_eq!(memo.get(&key(0), 3), Some(f));
        assert_eq!(memo.get(&key(1), 3), None);
        // Filling the memo in generation 20 drops what was last seen in generation 3.
        for i in 1..=10 {
            memo.insert(key(i), f, 20);
        }
        assert_eq!(memo.get(&key(0), 20), None);
        assert_eq!(memo.get(&key(10), 20), Some(f));
        assert!(memo.len() <= 10);
    }
}
