//! Fitting a program's free parameters (`p[k]`) to its problem's least-squares fitness (rmse) by
//! Levenberg–Marquardt, with Jacobians by forward-mode automatic differentiation
//! ([`Program::linearize`]). Must never make an individual worse: the values returned are the
//! best the fit saw, the starting ones included, and never non-finite.
//!
//! One iteration solves `(JᵀJ + λ·diag(JᵀJ)) δ = −Jᵀr` for the residuals `r` (output − target)
//! and Jacobian `J` at the current values, rounds `p + δ` to float, and runs the program there
//! (with its derivatives, for the next iteration): a lower sum of squares is taken and λ shrinks
//! tenfold, a higher one is refused and λ grows tenfold; a start ends early once a step gains
//! less than a millionth of the sum of squares, or leaves the float values as they were. The sum of squares is computed from the
//! float outputs exactly as the fitness is, so the fitness of the values returned is what the fit
//! saw. The small system is solved by Cholesky's method, written here because the same few lines
//! run for every individual at once and need no matrix library.
//!
//! Restarts run the same iterations from other starting values (each value moved by up to
//! `max(1, |v|)` either way, drawn from the seed) and the best result of all is kept.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::fitness::FitnessKind;
use crate::problem::Problem;
use crate::program::{Linearization, Program};

/// A start ends once an iteration gains less than this share of the sum of squares: float
/// outputs cannot improve much further.
const CONVERGED: f64 = 1e-6;

/// How hard to fit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitSettings {
    /// Levenberg–Marquardt iterations per start (0: no fitting).
    pub iterations: usize,
    /// Starts beyond the first.
    pub restarts: usize,
}

/// The outcome of [`fit`].
#[derive(Clone, Debug, PartialEq)]
pub struct Fitted {
    /// The best values seen.
    pub params: Vec<f32>,
    /// Their sum of squared errors.
    pub sse: f64,
    /// Runs of the program over every case, one per derivative direction (what the fit cost).
    pub runs: usize,
}

/// Whether `program` can be fitted on `problem`: it reads free parameters, the fitness is
/// least squares (rmse), and it has one float output.
pub fn fittable(problem: &Problem, program: &Program) -> bool {
    program.params() > 0 && problem.spec().fitness == FitnessKind::Rmse && program.differentiable()
}

/// Fits `program`'s parameters on `problem` from `start` (see the module documentation); `None`
/// when it is not [`fittable`] or does not run from `start`.
pub fn fit(
    problem: &Problem,
    program: &Program,
    start: &[f32],
    settings: &FitSettings,
    seed: u64,
) -> Option<Fitted> {
    if !fittable(problem, program) || start.len() != program.params() {
        return None;
    }
    let targets = problem.cases().targets();
    let targets: Vec<f64> = (0..targets.len()).map(|c| targets.as_f64(c)).collect();
    let max_steps = problem.max_steps();
    let run = |p: &[f32]| program.linearize(problem, p, max_steps).ok();
    let first = run(start)?;
    let mut best = Fitted { params: start.to_vec(), sse: sse(&first, &targets), runs: start.len() };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for restart in 0..=settings.restarts {
        let (mut p, mut at) = if restart == 0 {
            (start.to_vec(), first.clone())
        } else {
            let p: Vec<f32> =
                start.iter().map(|&v| v + f32::max(1.0, v.abs()) * rng.random_range(-1.0f32..=1.0)).collect();
            let Some(at) = run(&p) else { continue };
            best.runs += p.len();
            (p, at)
        };
        let mut current = sse(&at, &targets);
        let mut lambda = 1e-3;
        for _ in 0..settings.iterations {
            if !current.is_finite() {
                break;
            }
            let Some(step) = lm_step(&at, &targets, p.len(), lambda) else { break };
            let trial: Vec<f32> = p.iter().zip(&step).map(|(&v, &d)| (f64::from(v) + d) as f32).collect();
            if trial == p || trial.iter().any(|v| !v.is_finite()) {
                break;
            }
            best.runs += p.len();
            match run(&trial) {
                Some(next) if sse(&next, &targets) < current => {
                    let gain = current - sse(&next, &targets);
                    current = sse(&next, &targets);
                    (p, at) = (trial, next);
                    lambda = (lambda / 10.0).max(1e-12);
                    if converged(gain, current) {
                        break;
                    }
                }
                _ => lambda *= 10.0,
            }
            if lambda > 1e12 {
                break;
            }
        }
        if current < best.sse {
            best.params = p;
            best.sse = current;
        }
    }
    Some(best)
}

/// Sum of squared errors of the outputs (as the rmse fitness sums them); infinite when any
/// is not finite.
fn sse(at: &Linearization, targets: &[f64]) -> f64 {
    let s: f64 = at.outputs.iter().zip(targets).map(|(&y, &t)| (f64::from(y) - t).powi(2)).sum();
    if s.is_finite() { s } else { f64::INFINITY }
}

/// The damped Gauss–Newton step at `at`, or `None` when the derivatives are not finite or the
/// system cannot be solved.
fn lm_step(at: &Linearization, targets: &[f64], np: usize, lambda: f64) -> Option<Vec<f64>> {
    let mut a = vec![0.0f64; np * np];
    let mut g = vec![0.0f64; np];
    for (c, (&y, &t)) in at.outputs.iter().zip(targets).enumerate() {
        let r = f64::from(y) - t;
        let row = &at.jacobian[c * np..(c + 1) * np];
        for i in 0..np {
            g[i] += row[i] * r;
            for j in 0..=i {
                a[i * np + j] += row[i] * row[j];
            }
        }
    }
    damped_step(a, &g, np, lambda)
}

/// The Levenberg–Marquardt step from the normal equations: `JᵀJ` in `a` (`np` × `np`, row-major;
/// only the lower triangle is read) and `Jᵀr` in `g`, damped by `lambda`: the solution of
/// `(JᵀJ + λ·diag(JᵀJ)) δ = −Jᵀr`. `None` when a sum is not finite or the system cannot be solved.
pub fn damped_step(mut a: Vec<f64>, g: &[f64], np: usize, lambda: f64) -> Option<Vec<f64>> {
    if a.len() != np * np || g.len() != np || a.iter().chain(g).any(|v| !v.is_finite()) {
        return None;
    }
    for i in 0..np {
        let d = a[i * np + i];
        a[i * np + i] = d + lambda * d.max(1e-12);
    }
    let mut x: Vec<f64> = g.iter().map(|v| -v).collect();
    cholesky_solve(&mut a, &mut x, np).then_some(x)
}

/// A start ends once an iteration gains less than this share of the sum of squares (see
/// [`CONVERGED`]); for fitting loops outside this module.
pub fn converged(gain: f64, sse: f64) -> bool {
    gain <= CONVERGED * sse
}

/// Solves `A x = b` for symmetric positive definite `A` (lower triangle used; overwritten by its
/// factor), `b` in `x`. False when `A` is not positive definite.
fn cholesky_solve(a: &mut [f64], x: &mut [f64], n: usize) -> bool {
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= a[j * n + k] * a[j * n + k];
        }
        if d <= 0.0 || !d.is_finite() {
            return false;
        }
        let d = d.sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= a[i * n + k] * a[j * n + k];
            }
            a[i * n + j] = s / d;
        }
    }
    for i in 0..n {
        let mut s = x[i];
        for k in 0..i {
            s -= a[i * n + k] * x[k];
        }
        x[i] = s / a[i * n + i];
    }
    for i in (0..n).rev() {
        let mut s = x[i];
        for k in i + 1..n {
            s -= a[k * n + i] * x[k];
        }
        x[i] = s / a[i * n + i];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cholesky_solves_a_small_system_and_refuses_an_indefinite_one() {
        // A = [[4, 2], [2, 3]], b = [2, 1] -> x = [0.5, 0].
        let mut a = vec![4.0, 0.0, 2.0, 3.0];
        let mut x = vec![2.0, 1.0];
        assert!(cholesky_solve(&mut a, &mut x, 2));
        assert!((x[0] - 0.5).abs() < 1e-12 && x[1].abs() < 1e-12, "{x:?}");
        let mut a = vec![1.0, 0.0, 2.0, 1.0];
        assert!(!cholesky_solve(&mut a, &mut [1.0, 1.0], 2));
    }
}
