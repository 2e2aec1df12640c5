//! The one fitness reduction: a program's outputs compared with a problem's targets, turned
//! into a [`Fitness`] by the rule the problem declares ([`FitnessKind`]). Must never evaluate
//! programs itself: it only compares outputs with targets, so the CPU evaluator and a GPU
//! evaluator score identically.

use super::cases::Column;
use crate::fitness::{Fitness, FitnessKind};

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
    use crate::fitness::Direction;

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
