//! Fitness values that know which way is better, and the scoring rules that turn a
//! program's outputs into one. Must never evaluate programs itself: it only compares
//! outputs with targets, so the CPU evaluator and a GPU evaluator score identically.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::problem::cases::Column;

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

/// Outputs do not fit the problem they are scored against.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScoreError {
    /// Wrong number of output columns.
    #[error(
        "expected {expected} output column(s), got {found}: pass one column per output declared in problem.toml"
    )]
    ColumnCount { expected: usize, found: usize },
    /// A column has the wrong number of cases.
    #[error(
        "output column {column} has {found} values but the problem has {expected} cases: read back exactly NCASES values per output"
    )]
    CaseCount { column: usize, expected: usize, found: usize },
    /// Bit-error scoring needs int outputs.
    #[error("output column {column} holds floats, but bit-error scoring needs int outputs")]
    NotInt { column: usize },
}

/// Scores `outputs` (one column per declared output) against `targets`.
/// `mask` is only used by [`FitnessKind::BitErrors`].
pub fn score(
    kind: FitnessKind,
    mask: u32,
    targets: &Column,
    outputs: &[Column],
) -> Result<Fitness, ScoreError> {
    let n = targets.len();
    for (column, out) in outputs.iter().enumerate() {
        if out.len() != n {
            return Err(ScoreError::CaseCount { column, expected: n, found: out.len() });
        }
    }
    let direction = kind.direction();
    match kind {
        FitnessKind::Rmse | FitnessKind::Correct => {
            let [out] = outputs else {
                return Err(ScoreError::ColumnCount { expected: 1, found: outputs.len() });
            };
            if kind == FitnessKind::Rmse {
                // Accumulate in f64 so that the error measure itself adds no f32 rounding.
                let sum: f64 = (0..n)
                    .map(|c| {
                        let d = out.as_f64(c) - targets.as_f64(c);
                        d * d
                    })
                    .sum();
                let rmse = if n == 0 { 0.0 } else { (sum / n as f64).sqrt() };
                if rmse.is_finite() {
                    Ok(Fitness::new(rmse, direction))
                } else {
                    Ok(Fitness::worst(direction))
                }
            } else {
                let correct = (0..n).filter(|&c| out.equals(c, targets, c)).count();
                Ok(Fitness::new(correct as f64, direction))
            }
        }
        FitnessKind::BitErrors => {
            let mut ints = Vec::with_capacity(outputs.len());
            for (column, out) in outputs.iter().enumerate() {
                match out {
                    Column::Int(v) => ints.push(v.as_slice()),
                    Column::Float(_) => return Err(ScoreError::NotInt { column }),
                }
            }
            let mut errors: u64 = 0;
            for c in 0..n {
                let packed = ints
                    .iter()
                    .enumerate()
                    .take(32)
                    .fold(0u32, |acc, (k, col)| acc | (((col[c] & 1) as u32) << k));
                // Problem validation makes bit-error targets ints; the cast keeps the bits.
                let target = match targets {
                    Column::Int(t) => t[c] as u32,
                    Column::Float(t) => t[c] as i32 as u32,
                };
                errors += u64::from(((packed ^ target) & mask).count_ones());
            }
            Ok(Fitness::new(errors as f64, direction))
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

    #[test]
    fn bit_errors_pack_bit_zero_of_each_output() {
        // Output 0 is 3 (bit 0 = 1), output 1 is -2 (bit 0 = 0): packed word 0b01.
        let outputs = vec![Column::Int(vec![3]), Column::Int(vec![-2])];
        let f = score(FitnessKind::BitErrors, 0b11, &Column::Int(vec![0b10]), &outputs).unwrap();
        assert_eq!(f.value(), 2.0);
    }

    #[test]
    fn rmse_of_infinite_output_is_worst() {
        let f = score(FitnessKind::Rmse, 0, &Column::Float(vec![1.0]), &[Column::Float(vec![f32::INFINITY])])
            .unwrap();
        assert_eq!(f, Fitness::worst(Direction::Lower));
    }

    #[test]
    fn mismatched_case_count_is_an_error_not_a_panic() {
        let err = score(FitnessKind::Correct, 0, &Column::Int(vec![1, 2]), &[Column::Int(vec![1])]);
        assert!(matches!(err, Err(ScoreError::CaseCount { .. })));
    }
}
