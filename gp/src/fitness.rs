//! Fitness values that know which way is better, and the kinds of scoring a problem can
//! declare. Must never depend on any other module of the crate: everything that ranks
//! individuals (problems, the evaluator, the loop) builds on it. The scoring itself, which
//! needs a problem's targets, is in [`crate::problem::scoring`].

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

/// Which end of the scale is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Smaller values are better (errors, distances).
    Lower,
    /// Larger values are better (counts of correct answers).
    Higher,
}

/// A fitness value together with its direction; NaN is never stored.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fitness {
    value: f64,
    direction: Direction,
}

impl Fitness {
    /// A fitness of `value`; NaN becomes the worst value so that it can never win.
    pub fn new(value: f64, direction: Direction) -> Self {
        if value.is_nan() { Self::worst(direction) } else { Self { value, direction } }
    }

    /// The value every real fitness beats: +inf when lower is better, -inf when higher is.
    pub fn worst(direction: Direction) -> Self {
        let value = match direction {
            Direction::Lower => f64::INFINITY,
            Direction::Higher => f64::NEG_INFINITY,
        };
        Self { value, direction }
    }

    /// The raw number.
    pub fn value(&self) -> f64 {
        self.value
    }

    /// Which way is better.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// True for a finite value; the worst fitness (invalid individuals, NaN or infinite
    /// errors) is not finite.
    pub fn is_finite(&self) -> bool {
        self.value.is_finite()
    }

    /// Total order on quality: `Greater` means `self` is better than `other`.
    /// Both must share a direction; `self`'s direction decides.
    pub fn cmp_quality(&self, other: &Fitness) -> Ordering {
        match self.direction {
            Direction::Lower => other.value.total_cmp(&self.value),
            Direction::Higher => self.value.total_cmp(&other.value),
        }
    }

    /// Strictly better than `other`.
    pub fn is_better_than(&self, other: &Fitness) -> bool {
        self.cmp_quality(other) == Ordering::Greater
    }
}

impl std::fmt::Display for Fitness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.value)
    }
}

/// How a problem turns outputs into a fitness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FitnessKind {
    /// Root mean squared error of the single output against the target (lower is better).
    Rmse,
    /// Number of cases whose single output equals the target exactly (higher is better).
    Correct,
    /// Sum over cases of popcount((packed outputs XOR target) & mask), where output k
    /// contributes its bit 0 at bit k (lower is better).
    BitErrors,
}

impl FitnessKind {
    /// Which way is better for this kind.
    pub fn direction(self) -> Direction {
        match self {
            FitnessKind::Rmse | FitnessKind::BitErrors => Direction::Lower,
            FitnessKind::Correct => Direction::Higher,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_direction_prefers_smaller_values() {
        let a = Fitness::new(1.0, Direction::Lower);
        let b = Fitness::new(2.0, Direction::Lower);
        assert!(a.is_better_than(&b));
        assert!(!b.is_better_than(&a));
    }

    #[test]
    fn higher_direction_prefers_larger_values() {
        let a = Fitness::new(1.0, Direction::Higher);
        let b = Fitness::new(2.0, Direction::Higher);
        assert!(b.is_better_than(&a));
    }

    #[test]
    fn nan_becomes_worst_and_loses_to_everything_finite() {
        for d in [Direction::Lower, Direction::Higher] {
            let nan = Fitness::new(f64::NAN, d);
            assert_eq!(nan, Fitness::worst(d));
            assert!(Fitness::new(1e300, d).is_better_than(&nan));
            assert!(Fitness::new(-1e300, d).is_better_than(&nan));
            assert!(!nan.is_finite());
        }
    }

    #[test]
    fn equal_values_are_not_better_than_each_other() {
        let a = Fitness::new(3.0, Direction::Higher);
        assert!(!a.is_better_than(&a));
        assert_eq!(a.cmp_quality(&a), Ordering::Equal);
    }
}
