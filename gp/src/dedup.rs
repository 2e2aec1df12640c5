//! Finding the distinct phenotypes of a generation, so each is compiled and evaluated
//! once, and spreading their fitness back over the population. Must never change the
//! order in which phenotypes first appear: that order is what callers compile.

use std::collections::HashMap;

use crate::fitness::{Direction, Fitness};
use crate::mapping::Phenotype;

/// Distinct phenotypes in order of first appearance, and for each individual the index
/// of its phenotype (`None` for individuals without one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dedup {
    /// Distinct phenotypes, first appearance first.
    pub unique: Vec<Phenotype>,
    /// Per individual: index into `unique`, or `None` if its mapping failed.
    pub index: Vec<Option<usize>>,
}

/// The per-unique fitness list does not match the deduplicated phenotypes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "got {found} fitness values for {expected} distinct phenotypes: evaluate every entry of `unique`, in order"
)]
pub struct DedupMismatch {
    /// Distinct phenotypes.
    pub expected: usize,
    /// Fitness values given.
    pub found: usize,
}

impl Dedup {
    /// Deduplicates a population's phenotypes.
    pub fn new<'a>(phenotypes: impl IntoIterator<Item = Option<&'a Phenotype>>) -> Self {
        let mut seen: HashMap<&'a Phenotype, usize> = HashMap::new();
        let mut out = Dedup::default();
        for p in phenotypes {
            let idx = p.map(|p| {
                *seen.entry(p).or_insert_with(|| {
                    out.unique.push(p.clone());
                    out.unique.len() - 1
                })
            });
            out.index.push(idx);
        }
        out
    }

    /// Per-individual fitness from per-unique fitness; individuals without a phenotype
    /// get the worst fitness.
    pub fn expand(
        &self,
        unique_fitness: &[Fitness],
        direction: Direction,
    ) -> Result<Vec<Fitness>, DedupMismatch> {
        if unique_fitness.len() != self.unique.len() {
            return Err(DedupMismatch { expected: self.unique.len(), found: unique_fitness.len() });
        }
        Ok(self.index.iter().map(|i| i.map_or(Fitness::worst(direction), |i| unique_fitness[i])).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_share_one_entry_in_first_seen_order() {
        let (a, b) = (Phenotype::new("a"), Phenotype::new("b"));
        let d = Dedup::new([Some(&b), Some(&a), None, Some(&b)]);
        assert_eq!(d.unique, [b.clone(), a.clone()]);
        assert_eq!(d.index, [Some(0), Some(1), None, Some(0)]);
        let f = d
            .expand(
                &[Fitness::new(1.0, Direction::Lower), Fitness::new(2.0, Direction::Lower)],
                Direction::Lower,
            )
            .unwrap();
        let values: Vec<f64> = f.iter().map(Fitness::value).collect();
        assert_eq!(values, [1.0, 2.0, f64::INFINITY, 1.0]);
    }

    #[test]
    fn expand_rejects_a_wrong_number_of_values() {
        let a = Phenotype::new("a");
        let d = Dedup::new([Some(&a)]);
        assert!(d.expand(&[], Direction::Lower).is_err());
    }
}
